//! Sealed Secrets, natively: byte-compatible with the Bitnami controller and `kubeseal`.
//!
//! - [`key`]: the sealing certificate (public) and recovery keys (private);
//! - [`crypto`]: the hybrid RSA-OAEP + AES-256-GCM value format;
//! - [`manifest`]: Secret input, the SealedSecret manifest, kubeseal's YAML and JSON.
//!
//! The daemon path only ever encrypts. Decryption exists for recovery and tests, behind
//! an explicit private key (see SECURITY.md).

pub mod crypto;
mod error;
mod input;
pub mod key;
pub mod manifest;
mod oaep;
mod output;
pub mod trust;
mod yaml;

use std::fmt;
use std::str::FromStr;

pub use crypto::{hybrid_decrypt, hybrid_encrypt};
pub use key::{KeyError, RecoveryKey, SealingKey};
pub use manifest::{ManifestError, SealedSecret, SecretInput};

pub const API_VERSION: &str = "bitnami.com/v1alpha1";
pub const KIND: &str = "SealedSecret";
/// Top-level annotations the controller reads the scope from (cluster-wide wins).
pub const ANNOTATION_CLUSTER_WIDE: &str = "sealedsecrets.bitnami.com/cluster-wide";
pub const ANNOTATION_NAMESPACE_WIDE: &str = "sealedsecrets.bitnami.com/namespace-wide";
/// Annotations kubectl and kubecfg use to keep a full copy of the object: stripped, or
/// the plaintext would leak into the template.
pub const LAST_APPLIED_ANNOTATIONS: [&str; 2] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    "kubecfg.ksonnet.io/last-applied-configuration",
];

/// Where a sealed value may be unsealed: the OAEP label binds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Scope {
    /// Only as this name in this namespace (label `namespace/name`).
    #[default]
    Strict,
    /// Any name in this namespace (label `namespace`).
    NamespaceWide,
    /// Anywhere (empty label).
    ClusterWide,
}

impl Scope {
    /// The RSA-OAEP label, exactly as upstream `EncryptionLabel`.
    pub fn label(self, namespace: &str, name: &str) -> Vec<u8> {
        match self {
            Scope::Strict => format!("{namespace}/{name}").into_bytes(),
            Scope::NamespaceWide => namespace.as_bytes().to_vec(),
            Scope::ClusterWide => Vec::new(),
        }
    }

    /// The scope as the controller reads it from annotations: only the value "true" counts.
    pub fn from_annotations<'a>(mut get: impl FnMut(&str) -> Option<&'a str>) -> Scope {
        if get(ANNOTATION_CLUSTER_WIDE) == Some("true") {
            Scope::ClusterWide
        } else if get(ANNOTATION_NAMESPACE_WIDE) == Some("true") {
            Scope::NamespaceWide
        } else {
            Scope::Strict
        }
    }

    /// The annotation that declares this scope, if any.
    pub fn annotation(self) -> Option<&'static str> {
        match self {
            Scope::Strict => None,
            Scope::NamespaceWide => Some(ANNOTATION_NAMESPACE_WIDE),
            Scope::ClusterWide => Some(ANNOTATION_CLUSTER_WIDE),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Strict => "strict",
            Scope::NamespaceWide => "namespace-wide",
            Scope::ClusterWide => "cluster-wide",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "strict" => Ok(Scope::Strict),
            "namespace-wide" => Ok(Scope::NamespaceWide),
            "cluster-wide" => Ok(Scope::ClusterWide),
            other => Err(format!(
                "unknown scope {other:?}: use strict, namespace-wide or cluster-wide"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_match_upstream() {
        assert_eq!(Scope::Strict.label("ns", "n"), b"ns/n");
        assert_eq!(Scope::NamespaceWide.label("ns", "n"), b"ns");
        assert!(Scope::ClusterWide.label("ns", "n").is_empty());
    }

    #[test]
    fn cluster_wide_wins_and_only_true_counts() {
        let both = |k: &str| match k {
            ANNOTATION_CLUSTER_WIDE | ANNOTATION_NAMESPACE_WIDE => Some("true"),
            _ => None,
        };
        assert_eq!(Scope::from_annotations(both), Scope::ClusterWide);
        let yes = |k: &str| (k == ANNOTATION_NAMESPACE_WIDE).then_some("yes");
        assert_eq!(Scope::from_annotations(yes), Scope::Strict);
        for s in [Scope::Strict, Scope::NamespaceWide, Scope::ClusterWide] {
            assert_eq!(s.as_str().parse::<Scope>().unwrap(), s);
        }
        assert!("global".parse::<Scope>().unwrap_err().contains("strict"));
    }
}
