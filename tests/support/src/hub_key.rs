//! The controller's private keys as the lab's emulated hub holds them.

use spokekeeper::seal::{RecoveryKey, SealedSecret};

/// One of the controller's keys: what it opens is spokekeeper's own unsealing. A newtype,
/// since only the lab crate or the library may implement the lab's trait for the
/// library's type, and the library does not depend on the lab.
pub struct HubKey(pub RecoveryKey);

impl spokekeeper_lab::hub::Key for HubKey {
    fn opens(&self, sealed: &[u8]) -> bool {
        SealedSecret::parse(sealed).is_ok_and(|s| s.unseal(std::slice::from_ref(&self.0)).is_ok())
    }
}
