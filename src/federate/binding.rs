//! The one ClusterRoleBinding per hub and spoke entry that authorizes the hub's
//! controllers on a federated spoke, made with the admin credential (which never leaves
//! memory), labelled as minted bindings are, so `spokekeeper revoke` finds it too. Its
//! [`AUDIENCE_GENERATION`] label says which audience the spoke's file trusts: a revoke
//! interrupted before its commit leaves it above the recorded one, and the next rotation
//! goes on from there instead of trusting the revoked audience again.

use std::time::Duration;

use serde_json::{Value, json};

use crate::config::SpokeConfig;
use crate::mint::{MintError, Scope, Spoke};
use crate::secret::SecretBytes;

const BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
/// The audience generation ([`super::audience`]) the binding was made for.
pub const AUDIENCE_GENERATION: &str = "spokekeeper.io/audience-generation";

/// The binding's name: dots separate the parts, as a minted generation's do.
pub fn name(scope: &Scope<'_>) -> String {
    format!("spokekeeper.{}.{}.federated", scope.hub, scope.spoke)
}

/// What the bound users must be allowed: the cluster role's first rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Granted {
    pub role: String,
    pub verb: String,
    pub group: String,
    pub resource: String,
}

impl Granted {
    pub fn as_grant(&self) -> super::check::Grant<'_> {
        super::check::Grant {
            role: &self.role,
            verb: &self.verb,
            group: &self.group,
            resource: &self.resource,
        }
    }
}

/// The spoke's binding of this hub, as found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// Its [`AUDIENCE_GENERATION`] label (0: none, as before `spokekeeper revoke`).
    pub generation: u64,
    /// The users it binds, as the spoke sent them (escaped, one line each).
    pub users: Vec<String>,
}

/// The spoke's binding of this hub for this spoke entry (None: there is none); one of
/// that name that is not ours is refused, as [`ensure`] refuses it.
pub async fn found(
    admin: &SecretBytes,
    spoke: &SpokeConfig,
    limit: Duration,
) -> Result<Option<Found>, MintError> {
    let scope = Scope::of(spoke);
    let name = name(&scope);
    let api = Spoke::admin(admin, limit).await?;
    let Some(have) = api.get_binding(&name).await? else {
        return Ok(None);
    };
    if !crate::mint::scoped(&have, &scope) {
        return Err(not_ours(name));
    }
    Ok(Some(Found::of(&have)))
}

impl Found {
    fn of(binding: &Value) -> Found {
        let label = binding["metadata"]["labels"][AUDIENCE_GENERATION].as_str();
        let users = binding["subjects"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        Found {
            generation: label.and_then(|g| g.parse().ok()).unwrap_or(0),
            users: users
                .iter()
                .take(64)
                .filter_map(|s| s["name"].as_str())
                .map(|u| crate::text::one_line(u, 200))
                .collect(),
        }
    }
}

/// Makes the spoke's binding bind exactly `users` (none: the hub is cut off) to
/// `credential.cluster_role`, labelled with the audience `generation` (an earlier one of
/// ours that says something else is replaced; anyone else's of that name is refused),
/// and returns what the role grants first.
pub async fn ensure(
    admin: &SecretBytes,
    spoke: &SpokeConfig,
    users: &[String],
    generation: u64,
    limit: Duration,
) -> Result<Granted, MintError> {
    let scope = Scope::of(spoke);
    let name = name(&scope);
    let role = &spoke.credential.cluster_role;
    let api = Spoke::admin(admin, limit).await?;
    let subjects: Vec<_> = users
        .iter()
        .map(|u| json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": u}))
        .collect();
    let mut labels = crate::mint::labels(&scope);
    labels[AUDIENCE_GENERATION] = json!(generation.to_string());
    let want = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    });
    let current = api.get_binding(&name).await?;
    let fits = current.as_ref().is_some_and(|b| fits(b, &want));
    if !fits {
        if let Some(have) = &current {
            if !crate::mint::scoped(have, &scope) {
                return Err(not_ours(name));
            }
            // roleRef cannot change in place.
            api.delete_binding(&name).await?;
        }
        api.call_ok(
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
    }
    let (verb, group, resource) = api
        .first_rule(role)
        .await?
        .unwrap_or_else(|| ("get".into(), String::new(), "namespaces".into()));
    Ok(Granted {
        role: role.clone(),
        verb,
        group,
        resource,
    })
}

/// The binding found is `want`: its role, its subjects (none is stored as no field) and
/// its audience generation.
fn fits(have: &Value, want: &Value) -> bool {
    let subjects = |b: &Value| b["subjects"].as_array().cloned().unwrap_or_default();
    let generation = |b: &Value| b["metadata"]["labels"][AUDIENCE_GENERATION].clone();
    have["roleRef"] == want["roleRef"]
        && subjects(have) == subjects(want)
        && generation(have) == generation(want)
}

fn not_ours(name: String) -> MintError {
    MintError::BindingConflict {
        name,
        why: "is not labelled as this hub's binding for this spoke".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(generation: Option<&str>, users: &[&str]) -> Value {
        let subjects: Vec<Value> = users
            .iter()
            .map(|u| json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": u}))
            .collect();
        let mut b = json!({
            "metadata": {"labels": {"app.kubernetes.io/managed-by": "spokekeeper"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        });
        if let Some(g) = generation {
            b["metadata"]["labels"][AUDIENCE_GENERATION] = json!(g);
        }
        if !users.is_empty() {
            b["subjects"] = json!(subjects);
        }
        b
    }

    #[test]
    fn the_binding_found_says_its_audience_generation_and_users() {
        let found = Found::of(&binding(Some("3"), &["hub:a", "hub:b\nx"]));
        assert_eq!(found.generation, 3);
        assert_eq!(found.users, ["hub:a", "hub:b x"]);
        // Made before revoke existed, or a label that is not a number: generation 0.
        assert_eq!(Found::of(&binding(None, &["hub:a"])).generation, 0);
        assert_eq!(Found::of(&binding(Some("x"), &[])).generation, 0);
        assert!(Found::of(&binding(Some("1"), &[])).users.is_empty());
    }

    #[test]
    fn a_binding_fits_with_its_users_role_and_generation_alike() {
        let mut want = binding(Some("2"), &[]);
        want["subjects"] = json!([]);
        // The API server stores no subjects as no field.
        assert!(fits(&binding(Some("2"), &[]), &want));
        assert!(!fits(&binding(Some("1"), &[]), &want));
        assert!(!fits(&binding(None, &[]), &want));
        assert!(!fits(&binding(Some("2"), &["hub:a"]), &want));
        let bound = binding(Some("2"), &["hub:a"]);
        assert!(fits(&bound, &bound));
        let mut other_role = bound.clone();
        other_role["roleRef"]["name"] = json!("cluster-admin");
        assert!(!fits(&other_role, &bound));
    }
}
