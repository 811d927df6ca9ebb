//! spokekeeper keeps a GitOps hub's kubeconfigs for its spoke clusters valid.
//!
//! The pipeline, per spoke: observe -> decide -> extract -> validate -> [mint] -> seal ->
//! publish -> verify. Modules, from the top down (docs/ARCHITECTURE.md; tests/layering.rs
//! fails when an import points up):
//! - [`cli`]: commands and their output (thin; calls the rest), and the demo;
//! - [`daemon`]: `spokekeeper run`: schedule, leader election, endpoints;
//! - [`metrics`], [`alerts`]: render a tick's report;
//! - [`rotate`]: the tick, one spoke at a time (`rotate::reconcile`) and the fleet;
//! - [`hub`], [`forge`], [`mint`]: the hub's API, pull requests, minted credentials;
//! - [`spoke`], [`seal`], [`repo`]: reaching a spoke, Sealed Secrets natively, the fleet repo;
//! - [`kubeconfig`], [`certs`]: reading credentials right, treating them as hostile;
//! - [`config`]: spokekeeper.yaml and the types every layer reads;
//! - [`secret`], [`text`], [`fsutil`]: the in-memory wrapper every plaintext travels in,
//!   bounded one-line text, careful file access.

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
pub mod spoke;
pub mod text;
