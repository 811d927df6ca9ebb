//! The one ClusterRoleBinding per hub and spoke entry that authorizes the hub's
//! controllers on a federated spoke, made with the admin credential (which never leaves
//! memory), labelled as minted bindings are, so `spokekeeper revoke` finds it too.

use std::time::Duration;

use serde_json::json;

use crate::config::SpokeConfig;
use crate::mint::{MintError, Scope, Spoke};
use crate::secret::SecretBytes;

const BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";

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

/// Makes the spoke's binding bind exactly `users` to `credential.cluster_role` (an
/// earlier one of ours that binds something else is replaced; anyone else's of that
/// name is refused), and returns what the role grants first.
pub async fn ensure(
    admin: &SecretBytes,
    spoke: &SpokeConfig,
    users: &[String],
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
    let want = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": crate::mint::labels(&scope)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    });
    let current = api.get_binding(&name).await?;
    let fits = current
        .as_ref()
        .is_some_and(|b| b["roleRef"] == want["roleRef"] && b["subjects"] == want["subjects"]);
    if !fits {
        if let Some(have) = &current {
            if !crate::mint::scoped(have, &scope) {
                return Err(MintError::BindingConflict {
                    name,
                    why: "is not labelled as this hub's binding for this spoke".into(),
                });
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
