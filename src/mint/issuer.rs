//! Which CA issued a minted certificate, among those at hand.

use crate::certs::{self, CertInfo};

/// The candidate the leaf names as its issuer and whose key verifies the leaf's
/// signature: the CA that signed it, when the admin kubeconfig or the signer supplied it.
pub(super) fn issuing_ca<'a>(leaf: &CertInfo, candidates: &'a [CertInfo]) -> Option<&'a CertInfo> {
    candidates
        .iter()
        .find(|ca| leaf.names_as_issuer(ca) && certs::verify_signed_by(&leaf.der, &ca.der).is_ok())
}
