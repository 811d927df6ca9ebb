//! The Flux fleet layout, judged and written: the traps of a per-spoke layout in the
//! fleet repo clone (hostile input, read within a byte budget), and the objects and
//! listing `spokekeeper add` writes for a new spoke. No I/O but reading the clone's
//! tree; `check` prints what this finds, the daemon can grade it alike.

mod confine;
#[cfg(test)]
mod federated_tests;
pub mod layout;
mod onboard;
mod reference;
pub mod remote;
mod transforms;
mod traps;

use crate::config::SpokeConfig;
pub use layout::slash_path;
pub use onboard::on_secret_ref;
pub use traps::{MAX_TOTAL_BYTES, Trap, Tree, read_tree};

/// The layout's traps in the clone's `tree`: what the hub applies for a spoke
/// (confine.rs), where HelmReleases land (traps.rs), then a spoke nothing deploys to and
/// consumers on the other kind of reference, `secretRef` to a federated spoke
/// (onboard.rs), and a federated spoke's ConfigMap changed on its way to the hub
/// (transforms.rs).
pub fn layout_traps(tree: &Tree, spokes: &[SpokeConfig]) -> Vec<Trap> {
    let mut out = confine::traps(tree, spokes);
    out.extend(traps::traps(tree, spokes));
    out.extend(onboard::traps(tree, spokes));
    out.extend(onboard::other_kind(tree, spokes));
    out.extend(transforms::traps(tree, spokes));
    out
}
