//! The ClusterRoleBindings of minted generations: made for a mint, checked by a periodic
//! tick, withdrawn when a mint is refused, revoked once a newer one is on the hub.

use std::time::Duration;

use serde_json::{Value, json};

use super::api::{BINDINGS, GENERATION, HUB, MANAGED_BY, SPOKE, shown};
use super::{Bound, MintError, Scope, Spoke, binding_name};
use crate::config::{CredentialPolicy, SpokeConfig};
use crate::secret::SecretBytes;

/// The binding `name` from `user` to the cluster role; an earlier one of ours that binds
/// something else is replaced, anyone else's is left alone.
pub(super) async fn ensure_binding(
    spoke: &Spoke,
    scope: &Scope<'_>,
    name: &str,
    user: &str,
    policy: &CredentialPolicy,
    generation: u64,
) -> Result<(), MintError> {
    let want = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": name,
            "labels": {
                MANAGED_BY: "spokekeeper",
                GENERATION: generation.to_string(),
                HUB: scope.hub,
                SPOKE: scope.spoke,
            },
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": policy.cluster_role},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}],
    });
    if let Some(have) = spoke.get_binding(name).await? {
        if fits(&have, user, &policy.cluster_role) {
            return Ok(());
        }
        if !scoped(&have, scope) {
            return Err(MintError::BindingConflict {
                name: name.to_string(),
                why: format!(
                    "binds {} to ClusterRole {}",
                    shown(&have["subjects"].to_string()),
                    shown(have["roleRef"]["name"].as_str().unwrap_or("?"))
                ),
            });
        }
        // roleRef cannot change in place.
        spoke.delete_binding(name).await?;
    }
    spoke
        .call_ok(
            "binding",
            (
                "create clusterrolebindings (and bind the ClusterRole)",
                "clusterrolebindings",
            ),
            "POST",
            BINDINGS,
            Some(&want),
        )
        .await?;
    Ok(())
}

/// Bindings to delete once the hub has the new credential: this hub's for the spoke
/// entry, of generations below `below`, and an earlier version's unscoped binding of
/// `legacy_user` (the user recorded before), with the admin credential kept in memory
/// until then.
pub(crate) struct Revocation {
    pub admin: SecretBytes,
    pub below: u64,
    pub legacy_user: Option<String>,
    /// Whose bindings: `credential.hub_id` and the spoke entry's name.
    pub hub: String,
    pub spoke: String,
}

impl std::fmt::Debug for Revocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Revocation(below {})", self.below)
    }
}

impl Revocation {
    /// After the hub took the new credential: the names of the bindings deleted. The
    /// admin credential is zeroized as it drops here.
    pub(crate) async fn revoke(self, limit: Duration) -> Result<Vec<String>, MintError> {
        let scope = Scope {
            hub: &self.hub,
            spoke: &self.spoke,
        };
        let legacy = self.legacy_user.as_deref();
        let deleted = revoke(&self.admin, &scope, Some(self.below), legacy, limit).await?;
        Ok(deleted.into_iter().map(|b| b.name).collect())
    }
}

/// Deletes the binding of `generation` alone (this hub's, this spoke entry's): a
/// generation minted and then refused before it was committed leaves nothing granted.
pub(crate) async fn withdraw(
    spoke: &SpokeConfig,
    admin: &SecretBytes,
    generation: u64,
    limit: Duration,
) {
    let name = binding_name(&Scope::of(spoke), generation);
    let deleted = match Spoke::admin(admin, limit).await {
        Ok(api) => api.delete_binding(&name).await,
        Err(e) => Err(e),
    };
    if let Err(e) = deleted {
        tracing::warn!(
            spoke = %spoke.name,
            generation,
            error = %e,
            "cannot delete the binding of a generation that was minted but not committed"
        );
    }
}

/// The unscoped bindings an earlier version made for `user` (the spoke's recorded user):
/// since users are not shared, a binding of exactly that user is this spoke entry's.
fn adopted(legacy: Vec<Bound>, user: Option<&str>) -> impl Iterator<Item = Bound> {
    legacy
        .into_iter()
        .filter(move |b| user.is_some() && b.user.as_deref() == user)
}

/// Deletes this hub's bindings for this spoke entry of generations below `below` (all
/// of them with None: `spokekeeper revoke`, not only the one the fleet repo names, which
/// may have been changed), and an earlier version's unscoped binding of `legacy_user`
/// (the user recorded before): those credentials stop working. Returns those deleted.
pub(crate) async fn revoke(
    admin: &SecretBytes,
    scope: &Scope<'_>,
    below: Option<u64>,
    legacy_user: Option<&str>,
    limit: Duration,
) -> Result<Vec<Bound>, MintError> {
    let spoke = Spoke::admin(admin, limit).await?;
    let legacy = spoke.list_legacy().await?;
    let ours = spoke
        .list_bindings(scope)
        .await?
        .into_iter()
        .filter(|b| below.is_none_or(|below| b.generation.is_some_and(|g| g < below)));
    let mut deleted = Vec::new();
    for b in ours.chain(adopted(legacy, legacy_user)) {
        if spoke.delete_binding(&b.name).await? {
            deleted.push(b);
        }
    }
    Ok(deleted)
}

/// Whether this hub's binding of `generation` for this spoke entry exists and binds
/// `user` to the configured cluster role (a renewal is due when it does not).
pub(crate) async fn binding_fits(
    admin: &SecretBytes,
    scope: &Scope<'_>,
    generation: u64,
    user: &str,
    policy: &CredentialPolicy,
    limit: Duration,
) -> Result<bool, MintError> {
    let spoke = Spoke::admin(admin, limit).await?;
    Ok(spoke
        .get_binding(&binding_name(scope, generation))
        .await?
        .is_some_and(|b| scoped(&b, scope) && fits(&b, user, &policy.cluster_role)))
}

/// The labels that make a binding this hub's for this spoke entry (a minted one adds
/// its generation).
pub(crate) fn labels(scope: &Scope<'_>) -> Value {
    json!({MANAGED_BY: "spokekeeper", HUB: scope.hub, SPOKE: scope.spoke})
}

/// Labelled as this hub's binding for this spoke entry.
pub(crate) fn scoped(binding: &Value, scope: &Scope<'_>) -> bool {
    let labels = &binding["metadata"]["labels"];
    labels[MANAGED_BY] == "spokekeeper" && labels[HUB] == scope.hub && labels[SPOKE] == scope.spoke
}

/// A binding of exactly `user` to the ClusterRole `role`.
fn fits(binding: &Value, user: &str, role: &str) -> bool {
    binding["roleRef"]
        == json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role})
        && binding["subjects"]
            == json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_earlier_versions_binding_of_exactly_the_recorded_user_is_adopted() {
        let legacy = |name: &str, user: Option<&str>| Bound {
            name: name.into(),
            generation: Some(1),
            user: user.map(str::to_string),
            labels: crate::mint::api::Labels::default(),
        };
        let all = vec![
            legacy("spokekeeper-hub-g1", Some("spokekeeper:hub:1")),
            legacy("spokekeeper-hub-g11", Some("spokekeeper:hub:11")),
            legacy("spokekeeper-hub-g2", None),
        ];
        let names = |user| {
            adopted(all.clone(), user)
                .map(|b| b.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(Some("spokekeeper:hub:1")), ["spokekeeper-hub-g1"]);
        assert!(names(None).is_empty());
        assert!(names(Some("spokekeeper:hub")).is_empty());
    }

    #[test]
    fn a_binding_is_ours_only_with_our_hub_and_spoke_labels() {
        let scope = Scope {
            hub: "hub",
            spoke: "edge",
        };
        let b = |hub: &str, spoke: &str| json!({"metadata": {"labels": {MANAGED_BY: "spokekeeper", HUB: hub, SPOKE: spoke}}});
        assert!(scoped(&b("hub", "edge"), &scope));
        assert!(!scoped(&b("other", "edge"), &scope));
        assert!(!scoped(&b("hub", "edge2"), &scope));
        assert!(!scoped(
            &json!({"metadata": {"labels": {MANAGED_BY: "spokekeeper"}}}),
            &scope
        ));
    }

    #[test]
    fn a_binding_fits_only_with_that_user_alone_and_that_role() {
        let b = |role: &str, subjects: Value| {
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                   "subjects": subjects})
        };
        let user =
            |n: &str| json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": n});
        assert!(fits(&b("edit", json!([user("u")])), "u", "edit"));
        assert!(!fits(&b("cluster-admin", json!([user("u")])), "u", "edit"));
        assert!(!fits(&b("edit", json!([user("v")])), "u", "edit"));
        assert!(!fits(
            &b("edit", json!([user("u"), user("v")])),
            "u",
            "edit"
        ));
    }
}
