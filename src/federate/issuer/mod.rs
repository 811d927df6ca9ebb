//! The hub's issuer CA files, read once per tick per file: an edit of a file's content
//! (e.g. the hub's old and new CA together) changes what every spoke's record
//! fingerprints, so every spoke's file is rewritten.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::error::FederateError;
use crate::config::FederatedPolicy;

/// The largest credential.federated.issuer_ca read.
const MAX_ISSUER_CA: u64 = 256 * 1024;

/// The issuer CA files of a tick, each read once.
#[derive(Clone, Debug, Default)]
pub struct IssuerCas {
    read: BTreeMap<PathBuf, Read>,
}

/// One issuer CA file as read.
#[derive(Clone, Debug)]
enum Read {
    Pem(String),
    /// Why it cannot be used.
    Unusable(String),
}

impl IssuerCas {
    /// Reads every CA file the `policies` name (`issuer_ca` and `next.issuer_ca`), once each.
    pub fn read<'a>(policies: impl IntoIterator<Item = &'a FederatedPolicy>) -> IssuerCas {
        let mut read = BTreeMap::new();
        for p in policies {
            let next = p.next.as_ref().and_then(|n| n.issuer_ca.as_ref());
            for path in p.issuer_ca.iter().chain(next) {
                if !read.contains_key(path) {
                    let got = match read_pem(path) {
                        Ok(pem) => Read::Pem(pem),
                        Err(e) => Read::Unusable(e.to_string()),
                    };
                    read.insert(path.clone(), got);
                }
            }
        }
        IssuerCas { read }
    }

    /// The CAs of `path` as PEM: this tick's read, or a read now for a file the tick
    /// did not name.
    pub fn pem(&self, path: &Path) -> Result<String, FederateError> {
        match self.read.get(path) {
            Some(Read::Pem(pem)) => Ok(pem.clone()),
            // Its message, whole: it names the field and the file already.
            Some(Read::Unusable(message)) => Err(FederateError::IssuerCaRead(message.clone())),
            None => read_pem(path),
        }
    }

    /// What the fingerprint says of the file's content: its certificates' digest, or
    /// why it cannot be read (a fixed file fingerprints anew).
    pub(super) fn content(&self, path: &Path) -> String {
        match self.pem(path) {
            Ok(pem) => {
                crate::fingerprint::Fingerprint::<crate::fingerprint::Content>::of(pem.as_bytes())
                    .to_string()
            }
            Err(e) => format!("unreadable: {e}"),
        }
    }
}

/// credential.federated.issuer_ca: a file of the host's, beside spokekeeper.yaml.
fn read_pem(path: &Path) -> Result<String, FederateError> {
    let bad = |why: String| FederateError::IssuerCa {
        path: path.display().to_string(),
        why,
    };
    let size = std::fs::metadata(path)
        .map_err(|e| bad(e.to_string()))?
        .len();
    if size > MAX_ISSUER_CA {
        return Err(bad(format!(
            "is {size} bytes, more than a CA bundle ({MAX_ISSUER_CA})"
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let ders = crate::certs::certificates_der(&bytes).map_err(|e| bad(e.to_string()))?;
    if ders.is_empty() {
        return Err(bad("holds no certificate".into()));
    }
    Ok(crate::certs::to_pem(&ders))
}

#[cfg(test)]
mod tests;
