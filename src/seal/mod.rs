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
pub mod recipients;
mod sealer;
pub mod sops;
mod yaml;

pub use crate::config::Scope;
pub use crypto::{hybrid_decrypt, hybrid_encrypt};
pub use key::{KeyError, RecoveryKey, SealingKey};
pub use manifest::{ManifestError, SealedSecret, SecretInput};
pub use recipients::{RecipientsError, recipients};
pub use sealer::{SealedTo, Sealer, SealingError, WATCH_LABEL, secret};

pub(crate) const API_VERSION: &str = "bitnami.com/v1alpha1";
pub(crate) const KIND: &str = "SealedSecret";
/// Top-level annotations the controller reads the scope from (cluster-wide wins).
pub(crate) const ANNOTATION_CLUSTER_WIDE: &str = "sealedsecrets.bitnami.com/cluster-wide";
pub(crate) const ANNOTATION_NAMESPACE_WIDE: &str = "sealedsecrets.bitnami.com/namespace-wide";
/// Annotations kubectl and kubecfg use to keep a full copy of the object: stripped, or
/// the plaintext would leak into the template.
pub(crate) const LAST_APPLIED_ANNOTATIONS: [&str; 2] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    "kubecfg.ksonnet.io/last-applied-configuration",
];

impl Scope {
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
}

/// The lab's emulated Sealed Secrets controller (the demo's hub, the tests') holds
/// recovery keys: what one opens is spokekeeper's own unsealing.
#[cfg(feature = "demo")]
impl spokekeeper_lab::hub::Key for RecoveryKey {
    fn opens(&self, sealed: &[u8]) -> bool {
        SealedSecret::parse(sealed).is_ok_and(|s| s.unseal(std::slice::from_ref(self)).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_wide_wins_and_only_true_counts() {
        let both = |k: &str| match k {
            ANNOTATION_CLUSTER_WIDE | ANNOTATION_NAMESPACE_WIDE => Some("true"),
            _ => None,
        };
        assert_eq!(Scope::from_annotations(both), Scope::ClusterWide);
        let yes = |k: &str| (k == ANNOTATION_NAMESPACE_WIDE).then_some("yes");
        assert_eq!(Scope::from_annotations(yes), Scope::Strict);
    }
}
