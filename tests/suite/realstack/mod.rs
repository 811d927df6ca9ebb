//! Against the real components (tests/support/src/realstack): spokekeeper against a real hub,
//! and each emulator held to its real counterpart.

mod conformance;
mod distros;
mod flux_add;
mod flux_real;
mod flux_sops;
mod kubeadm;
mod real_hub;
