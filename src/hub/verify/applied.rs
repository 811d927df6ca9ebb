//! A federated spoke's ConfigMap on the hub. Nothing is unsealed or decrypted: the
//! Kustomization that applies the fleet repo (asked to reconcile first, as a
//! SealedSecret's root is) creates it, and the delivery is its data becoming the
//! commit's. Then each consumer (spec.kubeConfig.configMapRef) is asked and waited for.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::spoke::ask_consumers;
use super::{Ask, Check, Delivery, HubReport, POLL};
use crate::config::SpokeConfig;
use crate::flux::remote::Remote;
use crate::hub::{Consumer, Hub, HubError};

/// Waits for the hub's ConfigMap to hold the data of `manifest`, then asks `consumers`.
pub(super) async fn verify_config_map(
    hub: &Hub,
    spoke: &SpokeConfig,
    manifest: &str,
    consumers: Result<Vec<Consumer>, Arc<HubError>>,
    timeout: Duration,
    ask: Ask,
) -> HubReport {
    let deadline = Instant::now() + timeout;
    let applied = wait_applied(hub, spoke, manifest, deadline, timeout).await;
    let report = HubReport::new(spoke, Delivery::Applied(applied));
    ask_consumers(hub, spoke, report, consumers, deadline, timeout, ask).await
}

async fn wait_applied(
    hub: &Hub,
    spoke: &SpokeConfig,
    manifest: &str,
    deadline: Instant,
    timeout: Duration,
) -> Check {
    let (ns, name) = (&spoke.secret.namespace, &spoke.secret.name);
    let Ok(want) = Remote::parse(manifest.as_bytes()).map(|r| r.data) else {
        return Check::failed("Error", "the committed ConfigMap does not read back".into());
    };
    loop {
        let exists = match hub.config_map(ns, name).await {
            Ok(Some(have)) if have.data == want => {
                return Check {
                    ok: true,
                    status: "True".into(),
                    reason: Some("Applied".into()),
                    message: format!("ConfigMap {ns}/{name} holds the commit's address and CA"),
                };
            }
            Ok(found) => found.is_some(),
            Err(e) => return Check::failed("Error", e.to_string()),
        };
        if Instant::now() + POLL > deadline {
            let what = match exists {
                true => "holds another commit's data",
                false => "does not exist",
            };
            return Check::failed(
                "TimedOut",
                format!(
                    "after {}s ConfigMap {ns}/{name} {what}: is the file under the path a Kustomization applies?",
                    timeout.as_secs()
                ),
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What is read of a federated spoke's ConfigMap on the hub.
pub struct Applied {
    pub data: BTreeMap<String, String>,
    /// The Kustomization that applied it (its kustomize-controller labels): the root.
    pub applied_by: Option<Consumer>,
}

impl Hub {
    /// A ConfigMap, or None when there is none of that name.
    pub async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Applied>, HubError> {
        #[derive(serde::Deserialize)]
        struct ConfigMap {
            #[serde(default)]
            data: BTreeMap<String, String>,
            #[serde(default)]
            metadata: Meta,
        }
        #[derive(Default, serde::Deserialize)]
        struct Meta {
            #[serde(default)]
            labels: BTreeMap<String, String>,
        }
        let path = format!("/api/v1/namespaces/{namespace}/configmaps/{name}");
        let req = hyper::http::Request::get(&path)
            .header("Accept", "application/json")
            .body(Vec::new())?;
        let (status, body) = self
            .call(req, &format!("GET ConfigMap {namespace}/{name}"))
            .await?;
        if status == hyper::http::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(crate::hub::consumers::refused(path, status, &body));
        }
        serde_json::from_slice::<ConfigMap>(&body)
            .map(|c| {
                Some(Applied {
                    applied_by: crate::hub::root::applied_by(&c.metadata.labels),
                    data: c.data,
                })
            })
            .map_err(|e| HubError::NotList {
                what: path,
                error: e,
            })
    }
}
