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
pub mod dropped;
mod error;
pub mod issuer;

pub use crate::flux::remote::{Reach, Remote};
pub use authn::{Trust, Version};
pub use error::FederateError;
pub use issuer::IssuerCas;

/// The audience a spoke trusts hub tokens for, per audience generation: generation 0 is
/// the spoke's API server URL (what Flux's generic provider asks for when `audiences` is
/// absent, and what every spoke had before `spokekeeper revoke`); each revoke moves to the
/// next, `URL#generation-N`. A recorded server has no fragment, so no generation's
/// audience is another's or another spoke's; no comma or newline either (Flux splits its
/// `audiences` on newlines and joins them with commas in its token cache key).
pub fn audience(server: &str, generation: u64) -> String {
    match generation {
        0 => server.to_string(),
        n => format!("{server}#generation-{n}"),
    }
}

/// The same spoke's audience at another `generation` (its server is what precedes the
/// generation's suffix).
pub fn audience_at(audience: &str, generation: u64) -> String {
    let server = audience
        .split_once("#generation-")
        .map_or(audience, |(server, _)| server);
    self::audience(server, generation)
}

/// What the spoke's file says of the hub, as configured, with the content of its issuer
/// CA files as `cas` read them: a change of either rewrites it.
pub fn trust_fingerprint(
    policy: &crate::config::FederatedPolicy,
    cas: &IssuerCas,
) -> crate::fingerprint::Fingerprint<crate::fingerprint::Content> {
    let accounts: Vec<String> = policy
        .service_accounts
        .iter()
        .map(ToString::to_string)
        .collect();
    let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.display().to_string());
    let content = |p: &Option<std::path::PathBuf>| p.as_deref().map(|p| cas.content(p));
    let mut canonical = serde_json::json!({
        "issuer": policy.issuer,
        "discovery": policy.discovery(),
        "issuer_ca": path(&policy.issuer_ca),
        "accounts": accounts,
        "check_as": policy.check_as.to_string(),
        "prefix": policy.username_prefix,
    });
    // Only when set: every spoke without one keeps the fingerprint it was committed with.
    if let Some(own) = &policy.own_account {
        canonical["own_account"] = own.to_string().into();
    }
    // Added only when there is one: a spoke without either keeps its fingerprint.
    if policy.issuer_ca.is_some() {
        canonical["issuer_ca_content"] = content(&policy.issuer_ca).into();
    }
    if let Some(n) = &policy.next {
        canonical["next"] = serde_json::json!({
            "issuer": n.issuer,
            "discovery": n.discovery(),
            "issuer_ca": path(&n.issuer_ca),
            "issuer_ca_content": content(&n.issuer_ca),
        });
    }
    crate::fingerprint::Fingerprint::of(canonical.to_string().as_bytes())
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_audience_generation_is_its_own_audience_and_generation_0_is_the_url() {
        let url = "https://10.0.0.5:6443";
        assert_eq!(super::audience(url, 0), url);
        assert_eq!(
            super::audience(url, 1),
            "https://10.0.0.5:6443#generation-1"
        );
        assert_eq!(
            super::audience(url, 4_294_967_295),
            "https://10.0.0.5:6443#generation-4294967295"
        );
        let all: std::collections::BTreeSet<String> =
            (0..50).map(|g| super::audience(url, g)).collect();
        assert_eq!(all.len(), 50);
        assert!(all.iter().all(|a| !a.contains([',', '\n', ' '])));
        for g in [0, 1, 7] {
            let a = super::audience(url, g);
            assert_eq!(super::audience_at(&a, 3), super::audience(url, 3));
            assert_eq!(super::audience_at(&a, 0), url);
        }
    }
}
