//! The calls a mint makes to a spoke's API (contract: issue 16). JSON in and out;
//! everything the spoke returns is hostile: bounded, and escaped before it is shown.

use std::time::Duration;

use kube::Client;
use serde_json::{Value, json};

use super::MintError;
use crate::spoke::live;

pub(super) const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
pub(super) const BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
const CLUSTER_ROLES: &str = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
pub(crate) const SIGNER: &str = "kubernetes.io/kube-apiserver-client";
pub(crate) const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub(crate) const GENERATION: &str = "spokekeeper.io/generation";
pub(crate) const HUB: &str = "spokekeeper.io/hub";
pub(crate) const SPOKE: &str = "spokekeeper.io/spoke";
/// Most bindings looked at in one listing: a spoke holds a few of ours.
const MAX_LISTED: usize = 1000;

/// One spoke API, through one credential.
pub struct Spoke {
    client: Client,
    pub server: String,
    limit: Duration,
}

/// What a call answered, or the HTTP status it failed with.
pub enum Answer {
    Ok(Value),
    Status { code: u16, message: String },
}

impl Spoke {
    pub async fn connect(
        kubeconfig: &crate::secret::SecretBytes,
        limit: Duration,
    ) -> Result<Spoke, live::LiveError> {
        let (client, server) = live::client(kubeconfig, limit).await?;
        Ok(Spoke {
            client,
            server,
            limit,
        })
    }

    /// [`Spoke::connect`] with the admin credential.
    pub(crate) async fn admin(
        admin: &crate::secret::SecretBytes,
        limit: Duration,
    ) -> Result<Spoke, MintError> {
        Spoke::connect(admin, limit).await.map_err(MintError::Admin)
    }

    /// One request within the limit; an API status is an answer, anything else an error.
    pub async fn call(
        &self,
        step: &'static str,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, MintError> {
        let secs = self.limit.as_secs_f64();
        let bytes = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| MintError::Build(e.into()))?
            .unwrap_or_default();
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .body(bytes)
            .map_err(|e| MintError::Build(e.into()))?;
        let timed_out = || MintError::Call {
            step,
            error: live::LiveError::TimedOut {
                server: self.server.clone(),
                secs,
            },
        };
        match tokio::time::timeout(self.limit, self.client.request::<Value>(request)).await {
            Err(_) => Err(timed_out()),
            Ok(Ok(v)) => Ok(Answer::Ok(v)),
            Ok(Err(kube::Error::Api(status))) => {
                let error = live::classify(&self.server, secs, &kube::Error::Api(status.clone()));
                if status.code == 401 {
                    return Err(MintError::Call { step, error });
                }
                Ok(Answer::Status {
                    code: status.code,
                    message: shown(&status.message),
                })
            }
            Ok(Err(e)) => Err(MintError::Call {
                step,
                error: live::classify(&self.server, secs, &e),
            }),
        }
    }

    /// `call`, where only success will do: 403 names what the credential lacks.
    pub async fn call_ok(
        &self,
        step: &'static str,
        (verb, resource): (&'static str, &'static str),
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, MintError> {
        match self.call(step, method, path, body).await? {
            Answer::Ok(v) => Ok(v),
            Answer::Status { code: 403, message } => Err(MintError::Forbidden {
                server: self.server.clone(),
                verb,
                resource,
                message,
            }),
            Answer::Status { code, message } => Err(MintError::Call {
                step,
                error: live::LiveError::Api {
                    server: self.server.clone(),
                    code,
                    message,
                },
            }),
        }
    }

    pub(crate) async fn get_binding(&self, name: &str) -> Result<Option<Value>, MintError> {
        let path = format!("{BINDINGS}/{name}");
        match self.call("binding", "GET", &path, None).await? {
            Answer::Ok(v) => Ok(Some(v)),
            Answer::Status { code: 404, .. } => Ok(None),
            Answer::Status { code: 403, message } => Err(MintError::Forbidden {
                server: self.server.clone(),
                verb: "get",
                resource: "clusterrolebindings",
                message,
            }),
            Answer::Status { code, message } => Err(self.api("binding", code, message)),
        }
    }

    /// Deletes a binding; false when it was already gone.
    pub(crate) async fn delete_binding(&self, name: &str) -> Result<bool, MintError> {
        let path = format!("{BINDINGS}/{name}");
        match self.call("revoke", "DELETE", &path, None).await? {
            Answer::Ok(_) => Ok(true),
            Answer::Status { code: 404, .. } => Ok(false),
            Answer::Status { code: 403, message } => Err(MintError::Forbidden {
                server: self.server.clone(),
                verb: "delete",
                resource: "clusterrolebindings",
                message,
            }),
            Answer::Status { code, message } => Err(self.api("revoke", code, message)),
        }
    }

    /// This hub's bindings for this spoke entry: asked by label, and every label checked
    /// again here (the answer is hostile input). Bounded.
    pub(crate) async fn list_bindings(&self, scope: &Scope<'_>) -> Result<Vec<Bound>, MintError> {
        let selector = format!(
            "{MANAGED_BY}=spokekeeper,{HUB}={},{SPOKE}={}",
            scope.hub, scope.spoke
        );
        Ok(self
            .listed(&selector)
            .await?
            .into_iter()
            .filter(|b| b.labels.hub.as_deref() == Some(scope.hub))
            .filter(|b| b.labels.spoke.as_deref() == Some(scope.spoke))
            .collect())
    }

    /// Bindings an earlier spokekeeper made before they were scoped: managed by
    /// spokekeeper, with neither a hub nor a spoke label.
    pub(crate) async fn list_legacy(&self) -> Result<Vec<Bound>, MintError> {
        Ok(self
            .listed(&format!("{MANAGED_BY}=spokekeeper"))
            .await?
            .into_iter()
            .filter(|b| b.labels.hub.is_none() && b.labels.spoke.is_none())
            .collect())
    }

    async fn listed(&self, selector: &str) -> Result<Vec<Bound>, MintError> {
        let query: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("labelSelector", selector)
            .finish();
        let path = format!("{BINDINGS}?{query}");
        let list = self
            .call_ok(
                "revoke",
                ("list", "clusterrolebindings"),
                "GET",
                &path,
                None,
            )
            .await?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        Ok(items
            .iter()
            .take(MAX_LISTED)
            .filter(|b| b["metadata"]["labels"][MANAGED_BY] == "spokekeeper")
            .filter_map(Bound::of)
            .collect())
    }

    /// The first resource rule of a ClusterRole: what the SSAR asks for (verb, group, resource).
    pub(crate) async fn first_rule(
        &self,
        role: &str,
    ) -> Result<Option<(String, String, String)>, MintError> {
        let path = format!("{CLUSTER_ROLES}/{role}");
        let r = self
            .call_ok("authorize", ("get", "clusterroles"), "GET", &path, None)
            .await?;
        let rules = r["rules"].as_array().cloned().unwrap_or_default();
        Ok(rules.iter().take(256).find_map(|rule| {
            let first = |k: &str| rule[k].as_array()?.first()?.as_str().map(shown);
            Some((first("verbs")?, first("apiGroups")?, first("resources")?))
        }))
    }

    /// Whether this credential may do (verb, group, resource) cluster-wide.
    pub(crate) async fn may(
        &self,
        verb: &str,
        group: &str,
        resource: &str,
    ) -> Result<bool, MintError> {
        let body = json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource}},
        });
        let r = self
            .call_ok(
                "authorize",
                ("create", "selfsubjectaccessreviews"),
                "POST",
                ACCESS_REVIEWS,
                Some(&body),
            )
            .await?;
        Ok(r["status"]["allowed"].as_bool() == Some(true))
    }

    pub fn api(&self, step: &'static str, code: u16, message: String) -> MintError {
        MintError::Call {
            step,
            error: live::LiveError::Api {
                server: self.server.clone(),
                code,
                message,
            },
        }
    }
}

/// Which bindings are one spoke entry's of one hub.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    /// `credential.hub_id`.
    pub hub: &'a str,
    /// The spoke entry's name.
    pub spoke: &'a str,
}

impl<'a> Scope<'a> {
    /// This hub's, for the spoke entry.
    pub fn of(spoke: &'a crate::config::SpokeConfig) -> Scope<'a> {
        Scope {
            hub: &spoke.credential.hub_id,
            spoke: &spoke.name,
        }
    }
}

/// The labels that say whose a binding is, as read (absent or not text: None).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Labels {
    pub hub: Option<String>,
    pub spoke: Option<String>,
}

/// One of spokekeeper's bindings, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    pub name: String,
    /// Its `spokekeeper.io/generation` label, when that is a number.
    pub generation: Option<u64>,
    /// Its subject, when it is exactly one User: as the spoke sent it, so escape it
    /// before it is shown.
    pub user: Option<String>,
    pub(crate) labels: Labels,
}

impl Bound {
    fn of(b: &Value) -> Option<Bound> {
        let name = b["metadata"]["name"].as_str()?;
        (name.len() <= 253).then_some(())?;
        let labels = &b["metadata"]["labels"];
        let text = |k: &str| labels[k].as_str().map(str::to_string);
        let user = match b["subjects"].as_array().map(Vec::as_slice) {
            Some([s]) if s["kind"] == "User" => s["name"].as_str().map(str::to_string),
            _ => None,
        };
        Some(Bound {
            name: name.to_string(),
            generation: text(GENERATION).and_then(|g| g.parse().ok()),
            user,
            labels: Labels {
                hub: text(HUB),
                spoke: text(SPOKE),
            },
        })
    }
}

/// Text from the spoke, for messages: one escaped line, at most 200 characters.
pub(crate) fn shown(s: &str) -> String {
    crate::text::one_line(s, 200)
}
