//! The sealing certificate as alerts grade it: its name and expiry, also when it has
//! expired (spokes are observed by `rotate::observe`).

use std::path::Path;

use time::OffsetDateTime;

use crate::seal::{KeyError, SealingKey};

/// The sealing certificate's name and expiry (None: a bare public key has none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealingCert {
    pub source: String,
    pub not_after: Option<OffsetDateTime>,
}

impl SealingCert {
    pub fn from_key(key: &SealingKey, source: &str) -> SealingCert {
        SealingCert {
            source: source.into(),
            not_after: key.not_after(),
        }
    }

    /// Reads `path` like `sealing.cert`, but an expired certificate is a fact to grade
    /// here, not an error ([`SealingKey::from_pem`] refuses it for sealing). Inside the
    /// clone, no component may be a symbolic link.
    pub fn load(
        path: &Path,
        clone: &Path,
        now: OffsetDateTime,
    ) -> Result<SealingCert, SealingCertError> {
        let source = path.display().to_string();
        let pem = crate::fsutil::read_under(path, clone).map_err(|e| SealingCertError::Read {
            path: path.to_path_buf(),
            error: e,
        })?;
        match SealingKey::from_pem(&pem, &source, now) {
            Ok(key) => Ok(Self::from_key(&key, &source)),
            Err(KeyError::Expired { not_after, .. }) => Ok(SealingCert {
                source,
                not_after: Some(not_after),
            }),
            Err(e) => Err(SealingCertError::Key(e)),
        }
    }
}

/// sealing.cert cannot be graded.
#[derive(Debug, thiserror::Error)]
pub enum SealingCertError {
    #[error("cannot read sealing.cert {}: {error} (fix the path in the configuration)", path.display())]
    Read {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("sealing.cert: {0}")]
    Key(KeyError),
}
