//! Federated credentials (`credential.mode: federated`): the hub stores no credential for
//! a spoke. The spoke's API server trusts the hub's ServiceAccount issuer (an
//! AuthenticationConfiguration spokekeeper writes on its server nodes, [`authn`]); the
//! hub's Flux controllers present short-lived tokens of their own ServiceAccounts, which
//! a binding on the spoke authorizes; git holds a ConfigMap with the spoke's address and
//! CA, nothing secret ([`crate::flux::remote`]). docs/federated.md says what this removes and what
//! it keeps.

pub mod authn;
pub mod binding;
pub mod check;
mod error;

pub use crate::flux::remote::{Reach, Remote};
pub use authn::{Trust, Version};
pub use error::FederateError;

/// What the spoke's file says of the hub, as configured: a change rewrites it.
pub fn trust_fingerprint(
    policy: &crate::config::FederatedPolicy,
) -> crate::fingerprint::Fingerprint<crate::fingerprint::Content> {
    let accounts: Vec<String> = policy
        .service_accounts
        .iter()
        .map(ToString::to_string)
        .collect();
    let canonical = serde_json::json!({
        "issuer": policy.issuer,
        "discovery": policy.discovery(),
        "issuer_ca": policy.issuer_ca.as_ref().map(|p| p.display().to_string()),
        "accounts": accounts,
        "check_as": policy.check_as.to_string(),
        "prefix": policy.username_prefix,
    });
    crate::fingerprint::Fingerprint::of(canonical.to_string().as_bytes())
}
