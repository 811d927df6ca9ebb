//! The committed file as observe reads it: a SealedSecret, or a Secret encrypted with
//! sops, whichever `sealing.format` wrote.

use super::state::AnnotationError;
use crate::config::SealingFormat;
use crate::seal::sops::{self, SopsSecret};
use crate::seal::{ManifestError, SealedSecret};

/// The committed file: a SealedSecret, or a Secret encrypted with sops (read without a
/// key: its metadata and spokekeeper's annotations stay readable).
#[derive(Clone, Debug)]
pub enum Output {
    SealedSecret(SealedSecret),
    Sops(SopsSecret),
}

impl Output {
    /// A file with a top-level `sops:` entry is a sops file; anything else must be a
    /// SealedSecret.
    pub fn parse(bytes: &[u8]) -> Result<Output, InvalidKind> {
        match sops::readable(bytes) {
            Ok(s) => Ok(Output::Sops(s)),
            Err(sops::SopsError::NotSops) => Ok(Output::SealedSecret(SealedSecret::parse(bytes)?)),
            Err(e) => Err(InvalidKind::Sops(e)),
        }
    }

    pub fn format(&self) -> SealingFormat {
        match self {
            Output::SealedSecret(_) => SealingFormat::SealedSecrets,
            Output::Sops(_) => SealingFormat::Sops,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Output::SealedSecret(s) => &s.name,
            Output::Sops(s) => &s.name,
        }
    }

    pub fn namespace(&self) -> &str {
        match self {
            Output::SealedSecret(s) => &s.namespace,
            Output::Sops(s) => &s.namespace,
        }
    }

    pub fn annotations(&self) -> &std::collections::BTreeMap<String, String> {
        match self {
            Output::SealedSecret(s) => &s.annotations,
            Output::Sops(s) => &s.annotations,
        }
    }

    /// The keys of the Secret's data.
    pub fn keys(&self) -> Vec<&str> {
        match self {
            Output::SealedSecret(s) => s.encrypted_data.keys().map(String::as_str).collect(),
            Output::Sops(s) => s.keys.iter().map(String::as_str).collect(),
        }
    }

    /// The committed ciphertext of `key`, to tell whether the hub's copy is this commit's
    /// (a SealedSecret's; a sops file's is never on the hub as such).
    pub fn sealed_value(&self, key: &str) -> Option<&str> {
        match self {
            Output::SealedSecret(s) => s.encrypted_data.get(key).map(String::as_str),
            Output::Sops(_) => None,
        }
    }
}

/// Why a committed file is not a credential spokekeeper can read.
#[derive(Debug, thiserror::Error)]
pub enum InvalidKind {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Annotations(#[from] AnnotationError),
    #[error(transparent)]
    Sops(sops::SopsError),
}
