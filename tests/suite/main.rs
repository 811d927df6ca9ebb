//! The integration tests: one test binary, its modules in pipeline order (observe ->
//! decide -> extract -> validate -> seal -> publish -> verify, then the daemon, alerts,
//! faults and deploy), then what stands beside the pipeline. All share tests/support (the
//! lab) and tests/kc_fixtures. docs/testing.md says how to run one module.

#[path = "../kc_fixtures/mod.rs"]
mod kc_fixtures;
use spokekeeper_test_support as support;

// The pipeline, in its order (kept apart so that rustfmt leaves the order alone).
mod observe;

mod decide;

mod extract;

mod validate;

mod seal;

mod publish;

mod verify;

/// The whole tick end to end, through the binary.
mod rotate_e2e;

/// Minted bindings scoped to a hub and a spoke entry, through the binary.
mod minted_scope;

mod daemon;

mod alerts;

mod faults;

mod deploy;

// Beside the pipeline: the command line, the documentation, the lab and its leak check,
// the real stack, memory and the opt-in soak.
mod cli;
mod docs;
mod lab;
mod leak;
mod realstack;
mod rss;
mod soak;
