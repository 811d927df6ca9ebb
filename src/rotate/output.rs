//! The committed file as observe reads it: a SealedSecret, or a Secret encrypted with
//! sops, whichever `sealing.format` wrote; or a federated spoke's ConfigMap.

use super::state::AnnotationError;
use crate::config::SealingFormat;
use crate::flux::remote::Remote;
use crate::seal::sops::{self, SopsSecret};
use crate::seal::{ManifestError, SealedSecret};

/// The committed file: a SealedSecret, or a Secret encrypted with sops (read without a
/// key: its metadata and spokekeeper's annotations stay readable).
#[derive(Clone, Debug)]
pub enum Output {
    SealedSecret(SealedSecret),
    Sops(SopsSecret),
    /// A federated spoke's: nothing secret, its data Flux's generic provider's keys.
    ConfigMap(Remote),
}

impl Output {
    /// A file with a top-level `sops:` entry is a sops file; anything else must be a
    /// SealedSecret.
    pub fn parse(bytes: &[u8]) -> Result<Output, InvalidKind> {
        if !sops::is_sops(bytes) && is_config_map(bytes) {
            return Remote::parse(bytes)
                .map(Output::ConfigMap)
                .map_err(InvalidKind::ConfigMap);
        }
        if !sops::is_sops(bytes) {
            return Ok(Output::SealedSecret(SealedSecret::parse(bytes)?));
        }
        sops::readable(bytes)
            .map(Output::Sops)
            .map_err(InvalidKind::Sops)
    }

    /// The sealing format; None for a ConfigMap (nothing sealed).
    pub fn format(&self) -> Option<SealingFormat> {
        match self {
            Output::SealedSecret(_) => Some(SealingFormat::SealedSecrets),
            Output::Sops(_) => Some(SealingFormat::Sops),
            Output::ConfigMap(_) => None,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Output::SealedSecret(s) => &s.name,
            Output::Sops(s) => &s.name,
            Output::ConfigMap(c) => &c.name,
        }
    }

    pub fn namespace(&self) -> &str {
        match self {
            Output::SealedSecret(s) => &s.namespace,
            Output::Sops(s) => &s.namespace,
            Output::ConfigMap(c) => &c.namespace,
        }
    }

    pub fn annotations(&self) -> &std::collections::BTreeMap<String, String> {
        match self {
            Output::SealedSecret(s) => &s.annotations,
            Output::Sops(s) => &s.annotations,
            Output::ConfigMap(c) => &c.annotations,
        }
    }

    /// The keys of the Secret's data.
    pub fn keys(&self) -> Vec<&str> {
        match self {
            Output::SealedSecret(s) => s.encrypted_data.keys().map(String::as_str).collect(),
            Output::Sops(s) => s.keys.iter().map(String::as_str).collect(),
            Output::ConfigMap(c) => c.data.keys().map(String::as_str).collect(),
        }
    }

    /// The committed ciphertext of `key`, to tell whether the hub's copy is this commit's
    /// (a SealedSecret's; a sops file's is never on the hub as such).
    pub fn sealed_value(&self, key: &str) -> Option<&str> {
        match self {
            Output::SealedSecret(s) => s.encrypted_data.get(key).map(String::as_str),
            Output::Sops(_) | Output::ConfigMap(_) => None,
        }
    }
}

/// A top-level `kind: ConfigMap` line: the file is a federated spoke's (anything else is
/// read as before, and a Secret is never taken for one).
fn is_config_map(bytes: &[u8]) -> bool {
    String::from_utf8_lossy(&bytes[..bytes.len().min(crate::flux::remote::MAX_BYTES)])
        .lines()
        .any(|l| l.trim_end() == "kind: ConfigMap")
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
    #[error(transparent)]
    ConfigMap(crate::flux::remote::RemoteError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seal::SecretInput;
    use crate::seal::sops::AgeRecipients;
    use crate::secret::SecretBytes;

    const A: &str = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";

    fn sops_file() -> String {
        let mut secret = SecretInput {
            name: "dev-kubeconfig".into(),
            namespace: "flux-system".into(),
            ..Default::default()
        };
        secret
            .annotations
            .insert("spokekeeper.io/spoke".into(), "dev".into());
        secret
            .data
            .insert("value".into(), SecretBytes::from(b"kubeconfig".to_vec()));
        sops::encrypt(&secret, &AgeRecipients::parse(&[A]).unwrap()).unwrap()
    }

    #[test]
    fn a_sops_file_is_read_without_a_key_and_a_clear_value_in_it_is_refused() {
        let text = sops_file();
        let Ok(Output::Sops(s)) = Output::parse(text.as_bytes()) else {
            panic!("{text}")
        };
        assert_eq!(
            (s.name.as_str(), s.namespace.as_str()),
            ("dev-kubeconfig", "flux-system")
        );
        assert_eq!(s.annotations["spokekeeper.io/spoke"], "dev");
        assert_eq!(
            (s.keys, s.recipients),
            (vec!["value".to_string()], vec![A.to_string()])
        );
        // A value under data put back in the clear: refused, naming it.
        let start = text.find("ENC[").unwrap();
        let end = start + text[start..].find(']').unwrap() + 1;
        let clear = format!("{}a2lsbA=={}", &text[..start], &text[end..]);
        let e = Output::parse(clear.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("data.value is not encrypted"), "{e}");
        // Not a Secret: refused by name.
        let e = Output::parse(text.replace("kind: Secret", "kind: ConfigMap").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("kind"), "{e}");
    }

    #[test]
    fn anything_without_sops_metadata_is_read_as_a_sealed_secret() {
        assert!(matches!(
            Output::parse(b"not: [yaml"),
            Err(InvalidKind::Manifest(_))
        ));
        assert!(matches!(
            Output::parse(b"apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n"),
            Err(InvalidKind::Manifest(_))
        ));
    }
}
