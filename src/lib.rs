//! spokekeeper keeps a GitOps hub's kubeconfigs for its spoke clusters valid.
//!
//! The pipeline, per spoke: observe -> decide -> extract -> validate -> seal -> commit.
//! Modules, in the order the dependencies point:
//! - [`cli`]: commands and their output (thin; calls the rest);
//! - [`daemon`], [`metrics`]: `spokekeeper run`: schedule, leader election, endpoints;
//! - [`hub`]: the hub's API (sealing certificate, SealedSecret status, the Kustomizations
//!   and HelmReleases that deploy with it);
//! - [`spoke`]: reaching a spoke (SSH extraction, TLS probe, live API check);
//! - [`seal`]: Sealed Secrets, natively;
//! - [`kubeconfig`], [`certs`]: reading credentials right, treating them as hostile;
//! - [`secret`]: the in-memory wrapper every plaintext travels in.

pub mod alerts;
pub mod certs;
pub mod cli;
pub mod config;
pub mod daemon;
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
#[cfg(feature = "demo")]
pub mod sim;
pub mod spoke;
pub mod text;
