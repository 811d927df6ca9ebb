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
