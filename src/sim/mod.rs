//! Simulated spokes, for `spokekeeper demo`, the tests and the benchmarks: certificates
//! shaped like k3s's (server CA, client CA, serving and admin certificates, k3s.yaml) and
//! a mock Kubernetes API server with real TLS and per-request client-certificate
//! authentication. It emulates kube-apiserver's wire behaviour for what spokekeeper calls
//! (GET /version, POST selfsubjectreviews, and the CSR and ClusterRoleBinding calls of
//! minted credentials, kept in [`objects`]); it is not an API server.
//!
//! [`hub`] emulates the hub's API (the controller's certificate through the service
//! proxy, SealedSecret, Kustomization and HelmRelease status, listing them, the
//! reconcile annotation).
//!
//! Never used on the rotation path: only the demo and tests construct these.

pub mod api;
pub mod hub;
pub mod objects;
pub mod pki;

pub use api::{ApiIdentity, ApiServer};
pub use pki::{Hostile, KubeconfigParts, Pki, PkiOptions, kubeconfig_yaml};

/// The demo sealing certificate (keys/demo/tls.crt). `seal` refuses it outside the demo by
/// its modulus ([`crate::seal::key::DEMO_MODULUS_SHA256`]).
pub const DEMO_CERT_PEM: &str = include_str!("../../keys/demo/tls.crt");
/// The demo's private key (keys/demo/tls.key): public on purpose, for `spokekeeper demo`;
/// only a build with the `demo` feature holds it.
pub const DEMO_KEY_PEM: &str = include_str!("../../keys/demo/tls.key");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seal::{RecoveryKey, SealingKey, hybrid_decrypt, hybrid_encrypt};

    /// The fingerprint `seal` refuses is the demo certificate's, and the lab's private key
    /// is its other half (what is sealed to the one opens with the other).
    #[test]
    fn the_refused_demo_fingerprint_is_the_demo_key_pairs() {
        let now = time::OffsetDateTime::now_utc();
        let demo = SealingKey::from_pem(DEMO_CERT_PEM.as_bytes(), "demo", now).unwrap();
        assert!(demo.is_demo());
        let keys = RecoveryKey::load_all(DEMO_KEY_PEM.as_bytes(), "demo key").unwrap();
        let sealed = hybrid_encrypt(&demo, b"label", b"plaintext").unwrap();
        let opened = hybrid_decrypt(&keys, b"label", &sealed).unwrap();
        assert_eq!(opened.expose(), b"plaintext");
    }
}
