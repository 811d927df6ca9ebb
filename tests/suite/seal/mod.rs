//! seal: Sealed Secrets through the binary, the upstream vectors, and which sealing
//! certificate is trusted; SOPS output against the real sops.

mod seal_cli;
mod seal_vectors;
mod sealing_trust;
mod sops_cli;
mod sops_links;
mod sops_only;
mod sops_pins;
mod sops_real;
pub(crate) mod sops_tick;

/// `spokekeeper` as assert_cmd runs it (stdin given, output read whole).
fn bin() -> assert_cmd::Command {
    assert_cmd::Command::new(crate::support::bin())
}
