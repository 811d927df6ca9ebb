//! spokekeeper keeps a GitOps hub's kubeconfigs for its spoke clusters valid.
//!
//! This is the library; the `spokekeeper` binary (src/main.rs, its commands and their
//! output in src/cli/) is built over it. The library's public surface is what the binary,
//! the integration tests, the benchmarks and the fuzz targets use; the rest is
//! `pub(crate)` (docs/ARCHITECTURE.md, "Visibility").
//!
//! The pipeline, per spoke: observe -> decide -> extract -> validate -> [mint] -> seal ->
//! publish -> verify. Modules, from the top down (docs/ARCHITECTURE.md;
//! tests/suite/docs/layering.rs fails when an import points up):
//! - `cli`, in the binary: commands and their output (thin; calls the rest), and the demo;
//! - [`daemon`]: `spokekeeper run`: schedule, signals, Lease leader election, endpoints;
//! - [`metrics`], [`alerts`]: render a tick's report;
//! - [`rotate`]: the tick: each spoke through observe to seal (`rotate::reconcile`), the
//!   spokes concurrently, then one commit and push, or a pull request per spoke in review
//!   mode, and the hub's verification (`rotate::tick`);
//! - [`federate`]: a federated spoke's trust of the hub (its AuthenticationConfiguration,
//!   the controllers' binding, the proof before commit);
//! - [`hub`], [`forge`], [`mint`]: the hub's API (the controller's certificate, verification
//!   after a push, Flux consumers), pull requests, credentials minted through the spokes'
//!   CSR API;
//! - [`spoke`], [`seal`], [`repo`]: reaching a spoke, Sealed Secrets natively, the fleet repo;
//! - [`kubeconfig`]: parse, sanitize, rewrite and serialize, treating it as hostile;
//! - [`certs`]: X.509 fingerprints, validity, chain and key checks;
//! - [`config`]: spokekeeper.yaml and the types every layer reads;
//! - [`secret`], [`text`], [`fsutil`], [`fingerprint`]: the in-memory wrapper every
//!   plaintext travels in, bounded one-line text, careful file access, SHA-256 fingerprints
//!   typed by what they are of.

#![warn(unreachable_pub)]

pub mod alerts;
pub mod certs;
pub mod config;
pub mod daemon;
pub mod federate;
pub mod fingerprint;
pub mod flux;
pub mod forge;
pub mod fsutil;
pub mod hub;
pub mod kubeconfig;
pub mod metrics;
pub mod mint;
pub mod repo;
pub mod rotate;
pub mod seal;
pub mod secret;
pub mod spoke;
pub mod text;
