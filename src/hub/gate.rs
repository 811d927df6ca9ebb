//! Whether Flux's kustomize-controller and helm-controller on the hub run with the
//! ObjectLevelWorkloadIdentity feature gate, read off their Deployments' arguments: a
//! federated spoke's ConfigMap that names its own hub ServiceAccount
//! (`serviceAccountName`) fails in a controller without it ("ObjectLevelWorkloadIdentity
//! feature gate is not enabled", fluxcd/pkg auth v0.54.3 access_token.go), so spokekeeper
//! commits no such ConfigMap until both run with it.
//!
//! How the controllers read the flag (kustomize-controller v1.9.6 and helm-controller
//! v1.6.4 main.go, fluxcd/pkg runtime v0.110.3 features): `--feature-gates` is a pflag
//! map of `KEY=BOOL` pairs split on commas, given any number of times, the last value of
//! a key winning; BOOL is Go's strconv.ParseBool; the gate is off unless set.

use super::{Hub, HubError};

/// The gate's name (fluxcd/pkg auth feature_gates.go).
pub const GATE: &str = "ObjectLevelWorkloadIdentity";
/// The flag that sets it.
const FLAG: &str = "--feature-gates";
/// Where Flux installs its controllers.
pub const NAMESPACE: &str = "flux-system";
/// The controllers that read a kubeConfig ConfigMap, as Flux's install names their
/// Deployments.
pub const CONTROLLERS: [&str; 2] = ["kustomize-controller", "helm-controller"];
/// The most containers and arguments of a Deployment looked at (hostile sizes).
const MAX_CONTAINERS: usize = 16;
const MAX_ARGS: usize = 256;

/// What the hub's Deployment of a controller says of the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    On,
    Off,
    /// No Deployment of that name: the controller is not installed that way.
    Absent,
}

impl Hub {
    /// The gate as the Deployment `flux-system/name` passes it to its containers.
    pub async fn flux_gate(&self, name: &str) -> Result<Gate, HubError> {
        let what = format!("deployments {NAMESPACE}/{name}");
        let path = format!("/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}");
        let req = hyper::http::Request::get(&path)
            .header("Accept", "application/json")
            .body(Vec::new())?;
        let (status, body) = self.call(req, &what).await?;
        if status == hyper::http::StatusCode::NOT_FOUND {
            return Ok(Gate::Absent);
        }
        if !status.is_success() {
            return Err(super::consumers::refused(what, status, &body));
        }
        let deployment: serde_json::Value =
            serde_json::from_slice(&body).map_err(|source| HubError::NotObject {
                what,
                error: source,
            })?;
        Ok(if enabled_in(&deployment) {
            Gate::On
        } else {
            Gate::Off
        })
    }
}

/// Whether any container of `deployment` runs with the gate on (its command and
/// arguments, as the controller's flag parser reads them).
pub fn enabled_in(deployment: &serde_json::Value) -> bool {
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_array();
    containers
        .into_iter()
        .flatten()
        .take(MAX_CONTAINERS)
        .any(|c| {
            let words = |key: &str| {
                c[key]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.as_str())
                    .collect::<Vec<_>>()
            };
            let mut line = words("command");
            line.extend(words("args"));
            line.truncate(MAX_ARGS);
            enabled(&line)
        })
}

/// Whether a command line turns the gate on: the last `--feature-gates` value naming it
/// says so, up to a `--` that ends the flags.
pub fn enabled(line: &[&str]) -> bool {
    let mut on = false;
    let mut words = line.iter();
    while let Some(word) = words.next() {
        if *word == "--" {
            break;
        }
        let value = match word.strip_prefix(FLAG) {
            Some("") => words.next().copied(),
            Some(rest) => rest.strip_prefix('='),
            None => None,
        };
        for pair in value.unwrap_or("").split(',') {
            if let Some((key, v)) = pair.split_once('=')
                && key.trim() == GATE
            {
                on = parse_bool(v.trim()).unwrap_or(false);
            }
        }
    }
    on
}

/// Go's strconv.ParseBool.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_is_on_only_where_the_last_feature_gates_value_says_so() {
        let on = [
            &["--feature-gates=ObjectLevelWorkloadIdentity=true"][..],
            &["--feature-gates", "A=false, ObjectLevelWorkloadIdentity=1"],
            &[
                "--feature-gates=ObjectLevelWorkloadIdentity=false",
                "--feature-gates=ObjectLevelWorkloadIdentity=True",
            ],
            &[
                "manager",
                "--log-level=info",
                "--feature-gates=X=true,ObjectLevelWorkloadIdentity=t",
            ],
        ];
        for line in on {
            assert!(enabled(line), "{line:?}");
        }
        let off = [
            &[][..],
            &["--feature-gates=ObjectLevelWorkloadIdentity=false"],
            &[
                "--feature-gates=ObjectLevelWorkloadIdentity=true",
                "--feature-gates=ObjectLevelWorkloadIdentity=false",
            ],
            // Not a boolean (the controller would not start), another gate, not the flag.
            &["--feature-gates=ObjectLevelWorkloadIdentity=yes"],
            &["--feature-gates=ObjectLevelWorkloadIdentityX=true"],
            &["--feature-gatesX=ObjectLevelWorkloadIdentity=true"],
            &["--feature-gates"],
            // After `--`, an argument, not a flag.
            &["--", "--feature-gates=ObjectLevelWorkloadIdentity=true"],
        ];
        for line in off {
            assert!(!enabled(line), "{line:?}");
        }
    }

    #[test]
    fn a_deployment_is_read_through_its_containers_command_and_args() {
        let deployment = |containers: serde_json::Value| serde_json::json!({"spec": {"template": {"spec": {"containers": containers}}}});
        let flux = deployment(serde_json::json!([
            {"name": "manager", "args": ["--events-addr=http://nc/", "--feature-gates=ObjectLevelWorkloadIdentity=true"]}
        ]));
        assert!(enabled_in(&flux));
        let other_container = deployment(serde_json::json!([
            {"name": "sidecar", "args": ["--log-level=info"]},
            {"name": "controller", "args": ["--feature-gates=ObjectLevelWorkloadIdentity=true"]},
        ]));
        assert!(enabled_in(&other_container));
        let split = deployment(serde_json::json!([
            {"name": "manager", "command": ["kustomize-controller", "--feature-gates"], "args": ["ObjectLevelWorkloadIdentity=true"]}
        ]));
        assert!(enabled_in(&split));
        let off =
            deployment(serde_json::json!([{"name": "manager", "args": ["--log-level=info"]}]));
        assert!(!enabled_in(&off));
        assert!(!enabled_in(&serde_json::json!({"spec": "broken"})));
    }
}
