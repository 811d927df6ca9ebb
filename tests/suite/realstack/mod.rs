//! Against the real components (tests/support/realstack): spokekeeper against a real hub,
//! and each emulator held to its real counterpart.

mod conformance;
mod flux_real;
mod flux_sops;
mod real_hub;
