//! spokekeeper's lab: what stands in for the hub, the spokes and the peers in
//! `spokekeeper demo`, the tests and the benchmarks. Never used on the rotation path, and
//! not in a build without the `demo` feature.
//!
//! Simulated spokes: certificates shaped like k3s's (server CA, client CA, serving and
//! admin certificates, k3s.yaml) and a mock Kubernetes API server with real TLS and
//! per-request client-certificate authentication. It emulates kube-apiserver's wire
//! behaviour for what spokekeeper calls (GET /version, POST selfsubjectreviews, and the CSR
//! and ClusterRoleBinding calls of minted credentials, kept in [`objects`]); it is not an
//! API server.
//!
//! [`federation`]: a hub ServiceAccount issuer's signed tokens, and a spoke API server
//! that trusts them through its AuthenticationConfiguration file (federated credentials).
//!
//! [`hub`] emulates the hub's API (the controller's certificate through the service
//! proxy, SealedSecret, Kustomization and HelmRelease status, listing them, the
//! reconcile annotation).
//!
//! The peers: emulated forges ([`forge`]: GitHub, GitLab, Gitea pull requests), a Lease
//! API ([`lease`]), a recording receiver for alert deliveries ([`webhook`]); and
//! [`config::ConfigBuilder`], which writes a spokekeeper.yaml.
//!
//! This crate does not depend on spokekeeper (spokekeeper's `demo` feature depends on
//! it): what it emulates of Flux it names itself ([`hub::Kind`], [`hub::REQUESTED_AT`]),
//! and what needs Sealed Secrets' crypto (the controller unsealing) its user injects
//! ([`hub::Key`]).

pub mod api;
pub mod config;
pub mod federation;
pub mod forge;
pub mod hub;
pub mod lease;
pub mod objects;
pub mod pki;
pub mod sealing;
mod status;
pub mod webhook;

pub use api::{ApiIdentity, ApiServer};
pub use pki::{Hostile, KubeconfigParts, Pki, PkiOptions, kubeconfig_yaml};
pub use sealing::SealingPair;

/// The published demo sealing certificate (keys/demo/tls.crt), for the tests: spokekeeper
/// refuses it by its modulus (`spokekeeper::seal::key::DEMO_MODULUS_SHA256`), in the
/// demo too, which makes a key of its own ([`sealing::SealingPair`]).
pub const DEMO_CERT_PEM: &str = include_str!("../../keys/demo/tls.crt");
/// Its private key (keys/demo/tls.key): public on purpose, for the tests' unsealing.
pub const DEMO_KEY_PEM: &str = include_str!("../../keys/demo/tls.key");
