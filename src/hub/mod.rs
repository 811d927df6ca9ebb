//! The hub cluster's API ([`Hub`]): reading the Sealed Secrets controller's certificate
//! and the SealedSecrets Flux applies from the fleet repo, and listing and annotating the
//! Flux Kustomizations and HelmReleases that deploy to the spokes with them.
//!
//! `cert.rs` fetches the controller's certificate and gives the sealing key a process
//! starts with (choosing, trusting and pinning the tick's key is `rotate::sealing_key`'s job);
//! `verify/` checks after a push that the hub unsealed the commit and Flux deployed it;
//! `consumers.rs` finds the Flux objects that use a spoke's Secret; `root.rs` asks the
//! Kustomization that applies its SealedSecret, and that one's source, to reconcile first;
//! `recorder.rs` records Kubernetes Events about a spoke on its consumers; `error.rs` holds
//! [`HubError`].
//!
//! Optional (`hub:` in the configuration). Every call here is listed in [`ACCESS`], which
//! the Helm chart's Role grants and nothing more; the emulated hub's tests check that
//! every request maps to an entry.

pub mod cert;
pub mod consumers;
mod error;
pub mod gate;
pub mod recorder;
pub mod root;
pub mod source;
pub mod token;
pub mod verify;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;

use k8s_openapi::api::core::v1::Service;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use serde::Serialize;

use crate::config::{ControllerRef, HubConfig};
pub use consumers::{Consumer, Kind};
pub use error::{CallError, HubError};

/// One RBAC rule the hub code needs (namespaced; Role, not ClusterRole).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
}

const fn rule(
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
) -> Access {
    Access {
        group,
        resource,
        verbs,
    }
}

/// Everything this module calls on the hub: group, resource, verbs.
pub const ACCESS: &[Access] = &[
    // The controller's Service: its port name and its app.kubernetes.io/version label.
    rule("", "services", &["get"]),
    // GET .../services/http:<name>:<port>/proxy/v1/cert.pem, as kubeseal --fetch-cert.
    rule("", "services/proxy", &["get"]),
    rule("bitnami.com", "sealedsecrets", &["get"]),
    // A federated spoke's ConfigMap, as Flux applied it (hub::verify::applied); the chart
    // grants it by name, in place of that spoke's SealedSecret.
    rule("", "configmaps", &["get"]),
    // A token of spokekeeper's own check ServiceAccount (hub::token), to prove a federated
    // spoke trusts the hub. Granted on that one ServiceAccount by name, never
    // namespace-wide: a Flux controller's token is hub admin.
    rule("", "serviceaccounts/token", &["create"]),
    // Flux's kustomize-controller and helm-controller Deployments, by name, for their
    // --feature-gates (hub::gate): a spoke with its own hub ServiceAccount needs
    // ObjectLevelWorkloadIdentity.
    rule("apps", "deployments", &["get"]),
    // list: the consumers of a spoke's Secret, in its namespace; patch: the
    // reconcile.fluxcd.io/requestedAt annotation (what `flux reconcile` sets).
    rule(
        "kustomize.toolkit.fluxcd.io",
        "kustomizations",
        &["list", "get", "patch"],
    ),
    rule(
        "helm.toolkit.fluxcd.io",
        "helmreleases",
        &["list", "get", "patch"],
    ),
    // A consumer's source, read when Flux says it failed (hub::source::KINDS); patch: the
    // requestedAt of the GitRepository the root Kustomization applies from (hub::root).
    rule(
        "source.toolkit.fluxcd.io",
        "gitrepositories",
        &["get", "patch"],
    ),
    rule("source.toolkit.fluxcd.io", "ocirepositories", &["get"]),
    rule("source.toolkit.fluxcd.io", "buckets", &["get"]),
    rule("source.toolkit.fluxcd.io", "helmcharts", &["get"]),
    rule("source.toolkit.fluxcd.io", "externalartifacts", &["get"]),
    // Events about a spoke, in its consumers' namespace (hub::recorder): create, and patch
    // a repeat's series. events.k8s.io only: nothing writes core/v1 events.
    rule("events.k8s.io", "events", &["create", "patch"]),
];

/// The annotation `flux reconcile` sets to ask for a reconciliation now.
pub const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

/// The annotation `flux reconcile hr --reset` sets, with the same value as
/// [`REQUESTED_AT`]: helm-controller then resets a HelmRelease's failure counts, the only
/// way (short of a spec change or `forceAt`) to run again one that used up its retries.
pub const RESET_AT: &str = "reconcile.fluxcd.io/resetAt";

/// Bounds each API call, so an unresponsive hub never holds a tick for long.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest Retry-After honoured (a 429 without one waits a second).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// The largest single object read (a SealedSecret or a Flux object).
const OBJECT_BYTES: usize = 4 << 20;

pub(crate) fn sealed_secret_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("bitnami.com", "v1alpha1", "SealedSecret"),
        "sealedsecrets",
    )
}

/// A client for the hub's API.
#[derive(Clone)]
pub struct Hub {
    client: Client,
    controller: ControllerRef,
    /// Until when the hub asked (429, Retry-After) not to be called.
    throttled: Arc<Mutex<Option<Instant>>>,
    /// The controller's version, from its Service's label (see [`VERSION_LABEL`]).
    controller_version: Arc<Mutex<Option<String>>>,
}

/// The label the Sealed Secrets Helm chart sets on the controller's Service (its
/// appVersion, e.g. `0.36.1`). Upstream controller.yaml sets none.
pub const VERSION_LABEL: &str = "app.kubernetes.io/version";

impl Hub {
    /// From `hub.kubeconfig`, else in-cluster, KUBECONFIG or ~/.kube/config.
    pub async fn connect(cfg: &HubConfig) -> Result<Hub, HubError> {
        let mut config = match &cfg.kubeconfig {
            Some(path) => {
                let bad = |source| HubError::Kubeconfig {
                    path: path.clone(),
                    error: source,
                };
                let kc = kube::config::Kubeconfig::read_from(path).map_err(bad)?;
                kube::Config::from_custom_kubeconfig(kc, &Default::default())
                    .await
                    .map_err(bad)?
            }
            None => kube::Config::infer().await.map_err(HubError::NoConfig)?,
        };
        // No retries inside the client: a 503 from the service proxy (controller down)
        // falls back to the pinned copy at once, and verification polls on its own.
        config.default_retry = false;
        config.connect_timeout = Some(CALL_TIMEOUT);
        config.read_timeout = Some(CALL_TIMEOUT);
        config.write_timeout = Some(CALL_TIMEOUT);
        let client = Client::try_from(config).map_err(HubError::Client)?;
        Ok(Hub {
            client,
            controller: cfg.controller.clone(),
            throttled: Arc::default(),
            controller_version: Arc::default(),
        })
    }

    /// [`Hub::connect`], bounded in time: what a tick uses, once, for fetching the
    /// certificate and for verifying after the push (so a 429 seen by one is respected by
    /// the other). Made again every tick, so a rotated hub credential is read again.
    pub(crate) async fn connect_bounded(cfg: &HubConfig) -> Result<Hub, HubError> {
        tokio::time::timeout(CALL_TIMEOUT, Hub::connect(cfg))
            .await
            .unwrap_or(Err(HubError::NoAnswer {
                secs: CALL_TIMEOUT.as_secs(),
            }))
    }

    /// The controller's version as its Service's label says, once the Service was read
    /// (hub.controller.port unset) by [`Hub::fetch_cert`].
    pub fn controller_version(&self) -> Option<String> {
        self.controller_version.lock().ok()?.clone()
    }

    /// Where the certificate is fetched from, for messages.
    pub fn controller(&self) -> String {
        format!("{}/{}", self.controller.namespace, self.controller.name)
    }

    /// The controller's certificate PEM, through the API server's service proxy, as
    /// `kubeseal --fetch-cert` gets it.
    pub async fn fetch_cert(&self) -> Result<String, HubError> {
        let c = &self.controller;
        let svc: Api<Service> = Api::namespaced(self.client.clone(), &c.namespace);
        let svc = svc.get(&c.name).await;
        // With a configured port the Service is read only for its version label: a
        // refusal (a Role without `get` on it) or any error leaves the version unknown.
        let version = svc.as_ref().ok().and_then(version_label);
        if (svc.is_ok() || c.port.is_some())
            && let Ok(mut v) = self.controller_version.lock()
        {
            v.clone_from(&version);
        }
        let port = match &c.port {
            Some(p) => p.clone(),
            None => {
                let svc = svc.map_err(|source| HubError::Service {
                    controller: self.controller(),
                    error: source,
                })?;
                first_port(&svc).ok_or_else(|| HubError::NoPorts {
                    controller: self.controller(),
                })?
            }
        };
        let path = format!(
            "/api/v1/namespaces/{}/services/http:{}:{}/proxy/v1/cert.pem",
            c.namespace, c.name, port
        );
        let req = hyper::http::Request::get(&path)
            .header("Accept", "*/*")
            .body(Vec::new())?;
        self.client
            .request_text(req)
            .await
            .map_err(|source| match (&source, &c.port) {
                // The API server matches the port by name only: a 503 for a configured name
                // is most often a name the Service does not have.
                (kube::Error::Api(s), Some(p)) if s.code == 503 => HubError::PortName {
                    path,
                    port: p.clone(),
                    error: source,
                },
                _ => HubError::Get {
                    path,
                    error: source,
                },
            })
    }

    pub async fn sealed_secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<HubObject>, HubError> {
        self.get(&sealed_secret_resource(), namespace, name).await
    }

    /// A Kustomization or HelmRelease.
    pub async fn consumer(&self, c: &Consumer) -> Result<Option<HubObject>, HubError> {
        self.get(&c.kind.resource(), &c.namespace, &c.name).await
    }

    async fn get(
        &self,
        ar: &ApiResource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<HubObject>, HubError> {
        let what = format!("{} {namespace}/{name}", ar.plural);
        let path = format!(
            "/apis/{}/{}/namespaces/{namespace}/{}/{name}",
            ar.group, ar.version, ar.plural
        );
        let req = hyper::http::Request::get(&path)
            .header("Accept", "application/json")
            .body(Vec::new())?;
        let (status, body) = self.call(req, &what).await?;
        if status == hyper::http::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(consumers::refused(what, status, &body));
        }
        let obj: DynamicObject =
            serde_json::from_slice(&body).map_err(|source| HubError::NotObject {
                what,
                error: source,
            })?;
        Ok(Some(HubObject::from_dynamic(&obj)))
    }

    /// Sets reconcile.fluxcd.io/requestedAt with a JSON merge patch, as `flux reconcile`
    /// does (the same annotation for Kustomizations and HelmReleases). A 429 is retried
    /// after its Retry-After, until `deadline`.
    pub async fn request_reconcile(
        &self,
        c: &Consumer,
        at: &str,
        deadline: Instant,
    ) -> Result<(), HubError> {
        self.request(c, at, false, deadline).await
    }

    /// [`Hub::request_reconcile`]; with `reset`, also [`RESET_AT`] with the same value,
    /// as `flux reconcile hr --reset` (HelmReleases only).
    pub(crate) async fn request(
        &self,
        c: &Consumer,
        at: &str,
        reset: bool,
        deadline: Instant,
    ) -> Result<(), HubError> {
        self.annotate(
            &c.kind.resource(),
            &c.namespace,
            &c.name,
            at,
            reset,
            deadline,
        )
        .await
    }

    /// Sets requestedAt (and with `reset`, resetAt) on any Flux object.
    pub(crate) async fn annotate(
        &self,
        ar: &ApiResource,
        namespace: &str,
        name: &str,
        at: &str,
        reset: bool,
        deadline: Instant,
    ) -> Result<(), HubError> {
        let what = format!("{} {namespace}/{name}: annotate {REQUESTED_AT}", ar.plural);
        let path = format!(
            "/apis/{}/{}/namespaces/{namespace}/{}/{name}",
            ar.group, ar.version, ar.plural
        );
        let mut patch = serde_json::json!({"metadata": {"annotations": {REQUESTED_AT: at}}});
        if reset {
            patch["metadata"]["annotations"][RESET_AT] = at.into();
        }
        loop {
            self.pace(deadline).await;
            let req = hyper::http::Request::patch(&path)
                .header("Content-Type", "application/merge-patch+json")
                .header("Accept", "application/json")
                .body(patch.to_string().into_bytes())?;
            let (status, body) = self.call(req, &what).await?;
            if status.is_success() {
                return Ok(());
            }
            if status != hyper::http::StatusCode::TOO_MANY_REQUESTS || Instant::now() >= deadline {
                return Err(consumers::refused(what, status, &body));
            }
        }
    }

    /// Whether the hub serves `kind` at the API version used (discovery, which every
    /// authenticated user may read): Flux before v2.0 has no kustomize.toolkit.fluxcd.io/v1,
    /// before v2.3 no helm.toolkit.fluxcd.io/v2.
    pub(crate) async fn serves(&self, kind: Kind) -> Result<bool, HubError> {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
        let ar = kind.resource();
        let path = format!("/apis/{}/{}", ar.group, ar.version);
        let req = hyper::http::Request::get(&path).body(Vec::new())?;
        match self.client.request::<APIResourceList>(req).await {
            Ok(list) => Ok(list.resources.iter().any(|r| r.name == ar.plural)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(source) => Err(HubError::Get {
                path,
                error: source,
            }),
        }
    }

    /// Waits out the Retry-After of the hub's last 429, until `deadline` at most.
    pub(crate) async fn pace(&self, deadline: Instant) {
        let until = *self.throttled.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = until {
            tokio::time::sleep_until(t.min(deadline)).await;
        }
    }

    /// One call, bounded in time and size; a 429 records its Retry-After for [`Hub::pace`].
    async fn call(
        &self,
        req: hyper::http::Request<Vec<u8>>,
        what: &str,
    ) -> Result<(hyper::http::StatusCode, hyper::body::Bytes), HubError> {
        let read = async {
            let resp = self.client.send(req.map(kube::client::Body::from)).await?;
            let status = resp.status();
            if status == hyper::http::StatusCode::TOO_MANY_REQUESTS {
                let after = resp
                    .headers()
                    .get(hyper::http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map_or(Duration::from_secs(1), Duration::from_secs)
                    .min(MAX_RETRY_AFTER);
                *self.throttled.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(Instant::now() + after);
            }
            let body = Limited::new(resp.into_body(), OBJECT_BYTES)
                .collect()
                .await
                .map_err(|_| CallError::TooLong {
                    mib: OBJECT_BYTES >> 20,
                })?
                .to_bytes();
            Ok::<_, CallError>((status, body))
        };
        tokio::time::timeout(CALL_TIMEOUT, read)
            .await
            .unwrap_or(Err(CallError::NoAnswer {
                secs: CALL_TIMEOUT.as_secs(),
            }))
            .map_err(|source| HubError::Call {
                what: what.into(),
                error: source,
            })
    }
}

/// The port kubeseal uses: the Service's first port, by name, else by number.
fn first_port(svc: &Service) -> Option<String> {
    let port = svc.spec.as_ref()?.ports.as_ref()?.first()?;
    Some(match &port.name {
        Some(n) if !n.is_empty() => n.clone(),
        _ => port.port.to_string(),
    })
}

/// The Service's [`VERSION_LABEL`], when it looks like a version: a label value is at
/// most 63 characters of `[A-Za-z0-9._-]`, and anything else is ignored (hostile input).
fn version_label(svc: &Service) -> Option<String> {
    let v = svc.metadata.labels.as_ref()?.get(VERSION_LABEL)?;
    let ok = !v.is_empty()
        && v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok {
        tracing::warn!(
            label = VERSION_LABEL,
            "the controller's Service has a version label that is not a version: ignored"
        );
    }
    ok.then(|| v.clone())
}

/// A status condition (metav1.Condition shape).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the condition last changed status (RFC 3339), as the controller wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// What spokekeeper reads of a SealedSecret, Kustomization or HelmRelease on the hub.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HubObject {
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    pub conditions: Vec<Condition>,
    /// SealedSecret: spec.encryptedData (ciphertext only).
    #[serde(skip)]
    pub encrypted_data: BTreeMap<String, String>,
    /// Kustomization, HelmRelease: the requestedAt Flux handled last.
    pub last_handled_reconcile_at: Option<String>,
    pub requested_at: Option<String>,
    /// Kustomization, HelmRelease: spec.suspend (Flux echoes requests but runs nothing).
    pub suspended: bool,
    /// Kustomization, HelmRelease: the source it takes its artifact from.
    #[serde(skip)]
    pub(crate) source: Option<source::SourceRef>,
    /// An object kustomize-controller applied: its Kustomization, from the
    /// `kustomize.toolkit.fluxcd.io/{namespace,name}` labels it writes.
    #[serde(skip)]
    pub(crate) applied_by: Option<Consumer>,
    /// Kustomization: spec.path, as written (hub text, unchecked).
    #[serde(skip)]
    pub(crate) path: Option<String>,
    /// status.lastAttemptedRevision and status.lastAppliedRevision: the same when the
    /// last run applied what it attempted.
    #[serde(skip)]
    pub(crate) revisions: (Option<String>, Option<String>),
}

impl HubObject {
    pub(crate) fn from_dynamic(o: &DynamicObject) -> HubObject {
        let mut h = HubObject::from_json(&o.data);
        h.generation = o.metadata.generation;
        h.requested_at = o
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REQUESTED_AT).cloned());
        h.source = source::SourceRef::of(&o.data, o.metadata.namespace.as_deref().unwrap_or(""));
        h.applied_by = o.metadata.labels.as_ref().and_then(root::applied_by);
        h
    }

    /// From an object's JSON body (what DynamicObject keeps besides metadata).
    pub(crate) fn from_json(v: &serde_json::Value) -> HubObject {
        let status = &v["status"];
        let conditions = status["conditions"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| serde_json::from_value(c.clone()).ok())
                    .collect()
            })
            .unwrap_or_default();
        let encrypted_data = v["spec"]["encryptedData"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        HubObject {
            generation: v["metadata"]["generation"].as_i64(),
            observed_generation: status["observedGeneration"].as_i64(),
            conditions,
            encrypted_data,
            last_handled_reconcile_at: status["lastHandledReconcileAt"]
                .as_str()
                .map(str::to_string),
            requested_at: v["metadata"]["annotations"][REQUESTED_AT]
                .as_str()
                .map(str::to_string),
            suspended: v["spec"]["suspend"] == true,
            source: source::SourceRef::of(v, v["metadata"]["namespace"].as_str().unwrap_or("")),
            applied_by: None,
            path: v["spec"]["path"].as_str().map(str::to_string),
            revisions: (
                status["lastAttemptedRevision"].as_str().map(str::to_string),
                status["lastAppliedRevision"].as_str().map(str::to_string),
            ),
        }
    }

    /// The status condition of this type, when the object reports one.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// The controller has looked at the current spec (observedGeneration caught up).
    pub fn observed(&self) -> bool {
        match (self.generation, self.observed_generation) {
            (Some(g), Some(o)) => o >= g,
            // Objects without generation tracking: the condition is all there is.
            (None, _) => true,
            (Some(_), None) => false,
        }
    }
}

/// `time.Now().Format(time.RFC3339Nano)` as Go writes it (trailing zeros trimmed).
pub(crate) fn rfc3339_nano(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    let base = t
        .format(time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second]"
        ))
        .unwrap_or_default();
    let nanos = t.nanosecond();
    if nanos == 0 {
        format!("{base}Z")
    } else {
        let frac = format!("{nanos:09}");
        format!("{base}.{}Z", frac.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests;
