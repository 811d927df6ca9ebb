//! What can stop a mint, each saying what is missing on the spoke and how to fix it.

use super::GenerationError;
use crate::config::CredentialMode;
use crate::spoke::LiveError;

/// How to give a spoke a signer for kubernetes.io/kube-apiserver-client. The file names
/// are k3s's own (pkg/daemons/control/deps/deps.go, k3s-io/k3s at 09ac65a6:
/// `SigningClientCA` is tls/client-ca.nochain.crt, the first certificate of
/// client-ca.crt, which may hold a chain the signer does not take); RKE2 shares that code
/// under /var/lib/rancher/rke2/server and runs the controller-manager as a static pod.
const SIGNER_FIX: &str = "k3s: the controller-manager embedded in the k3s server \
     signs them with /var/lib/rancher/k3s/server/tls/client-ca.nochain.crt (the first certificate \
     of client-ca.crt) and client-ca.key: check the server does not run with \
     --disable-controller-manager, and its log (journalctl -u k3s); RKE2: kube-controller-manager \
     runs as a static pod (/var/lib/rancher/rke2/agent/pod-manifests/kube-controller-manager.yaml) \
     signing with /var/lib/rancher/rke2/server/tls/client-ca.nochain.crt and client-ca.key: check \
     that pod runs (crictl ps) and its log; kubeadm: kube-controller-manager must run with \
     --cluster-signing-cert-file and --cluster-signing-key-file (or \
     --cluster-signing-kube-apiserver-client-cert-file/-key-file) pointing at the client CA \
     (/etc/kubernetes/pki/ca.crt and ca.key)";

/// What can stop making the minted key pair, its request or its CSR name: never the key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the system random generator failed")]
    Random,
    #[error("the generated key does not load")]
    Load,
    #[error(transparent)]
    Encode(#[from] crate::certs::CertError),
    #[error("cannot build the certificate request: {0}")]
    Request(rcgen::Error),
}

/// An API request that cannot be put together.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Body(#[from] serde_json::Error),
    #[error(transparent)]
    Request(#[from] hyper::http::Error),
}

#[derive(Debug, thiserror::Error)]
pub enum MintError {
    #[error("cannot make a key pair or certificate request: {0}")]
    Key(KeyError),
    /// A request to the spoke's API that cannot be built (said as `Key` always was).
    #[error("cannot make a key pair or certificate request: {0}")]
    Build(BuildError),
    #[error("the admin credential cannot be used to mint: {0}")]
    Admin(LiveError),
    #[error(
        "the admin credential may not {verb} {resource} on {server} (403: {message}): grant it \
         (docs/minted.md lists the RBAC it needs), or set credential.mode: extracted"
    )]
    Forbidden {
        server: String,
        verb: &'static str,
        resource: &'static str,
        message: String,
    },
    #[error(
        "no certificate within {secs}s for CSR {csr}: the spoke's kube-controller-manager does not sign \
         kubernetes.io/kube-apiserver-client ({SIGNER_FIX})"
    )]
    SignerMissing { csr: String, secs: u64 },
    #[error(
        "CSR {csr} is {condition} ({reason}: {message}): an admission webhook, policy or another approver \
         refused it; allow spokekeeper's CSRs (signer kubernetes.io/kube-apiserver-client, user {user}) or set \
         credential.mode: extracted"
    )]
    Denied {
        csr: String,
        user: String,
        condition: String,
        reason: String,
        message: String,
    },
    #[error(
        "{short}; that is not longer than credential.renew_before ({renew_before}), so every tick would \
         mint a new generation (CSR {csr}; nothing was bound for it): {}", .short.limit.fix()
    )]
    TooShort {
        csr: String,
        renew_before: crate::config::Span,
        short: super::lifetime::Shortfall,
    },
    #[error("the certificate signed for CSR {csr} cannot be used: {why}")]
    BadCertificate { csr: String, why: String },
    #[error(
        "ClusterRoleBinding {name} exists and {why}, but is not labelled app.kubernetes.io/managed-by: \
         spokekeeper: spokekeeper leaves it alone; delete it (kubectl delete clusterrolebinding {name}) or \
         change credential.user"
    )]
    BindingConflict { name: String, why: String },
    #[error(
        "the minted user {user} is not allowed {what} with ClusterRoleBinding {binding}: check that ClusterRole \
         {role} exists and grants it (kubectl auth can-i --as {user} ...)"
    )]
    NotAuthorized {
        user: String,
        binding: String,
        role: String,
        what: String,
    },
    #[error("the minted credential does not work against the live API: {0}")]
    Validate(String),
    #[error("{step}: {error}")]
    Call {
        step: &'static str,
        error: LiveError,
    },
    /// `spokekeeper revoke` on a spoke whose committed credential is not minted.
    #[error(
        "{spoke} holds no minted credential to revoke (its committed credential is {had}): set credential.mode: minted and rotate"
    )]
    NotMinted { spoke: String, had: CredentialMode },
    /// No generation above the recorded and the bound ones may be minted.
    #[error("{0}")]
    Refused(GenerationError),
}

impl From<KeyError> for MintError {
    fn from(e: KeyError) -> MintError {
        MintError::Key(e)
    }
}

impl MintError {
    /// The minted credential was made but does not work (stage `validate`, not `mint`).
    pub(crate) fn is_validation(&self) -> bool {
        matches!(
            self,
            MintError::Validate(_) | MintError::NotAuthorized { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signer_advice_names_the_files_k3s_and_rke2_sign_with() {
        let text = MintError::SignerMissing {
            csr: "c".into(),
            secs: 30,
        }
        .to_string();
        for needle in [
            "/var/lib/rancher/k3s/server/tls/client-ca.nochain.crt",
            "/var/lib/rancher/rke2/server/tls/client-ca.nochain.crt",
            "--disable-controller-manager",
            "static pod (/var/lib/rancher/rke2/agent/pod-manifests/kube-controller-manager.yaml)",
            "--cluster-signing-kube-apiserver-client-cert-file",
            "/etc/kubernetes/pki/ca.crt",
        ] {
            assert!(text.contains(needle), "{needle:?} not in {text}");
        }
        // client-ca.crt may be a chain: it is not what signs.
        assert!(!text.contains("tls/client-ca.crt"), "{text}");
        assert!(!text.contains("{k3s,rke2}"), "{text}");
    }
}
