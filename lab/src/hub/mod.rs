//! An emulated hub API server: what kube-apiserver, the Sealed Secrets controller and
//! Flux show spokekeeper, on the wire.
//!
//! - GET the controller's Service, and GET `services/http:<name>:<port>/proxy/v1/cert.pem`
//!   (text/plain PEM; 503 "no endpoints available" while the controller is down);
//! - GET SealedSecrets (bitnami.com/v1alpha1): on each read, "Flux" applies the file the
//!   `source` closure returns (what the fleet repo holds), bumping generation when the
//!   spec changed; the "controller" then really unseals it with its private keys (each a
//!   [`Key`], injected: the lab does no Sealed Secrets crypto) and writes the Synced
//!   condition and observedGeneration;
//! - GET and PATCH (merge patch only, like the API server for custom resources)
//!   Kustomizations (kustomize.toolkit.fluxcd.io/v1) and HelmReleases
//!   (helm.toolkit.fluxcd.io/v2): a new reconcile.fluxcd.io/requestedAt goes through Ready
//!   Unknown/Progressing to Ready True or False, and status.lastHandledReconcileAt echoes
//!   it; LIST both per namespace (no label selector needed), ordered by name, paged with
//!   `limit` and `continue` as the API server does;
//! - a Kustomization that decrypts with sops ([`HubSim::add_sops_kustomization`]): when
//!   it reconciles, kustomize-controller decrypts each sops Secret under its spec.path
//!   with its age identity (a [`SopsKey`], injected) and writes Ready False
//!   `BuildFailed` "decryption failed for ..." on one it cannot decrypt.
//!
//! Errors are metav1 Status objects. Plain HTTP on loopback, no authentication. Every
//! request is recorded, so tests can hold the client to its RBAC contract.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

mod sops;

pub use sops::SopsKey;

/// Flux's annotation asking a Kustomization or HelmRelease to reconcile now (spokekeeper's
/// `hub::REQUESTED_AT`; a test there holds the two equal).
pub const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

/// helm-controller's annotation resetting a HelmRelease's failure counts when it equals
/// [`REQUESTED_AT`] (spokekeeper's `hub::RESET_AT`).
pub const RESET_AT: &str = "reconcile.fluxcd.io/resetAt";

/// The Flux kinds that deploy with a kubeconfig Secret, as the hub serves them
/// (spokekeeper's `hub::Kind`; a test there holds the two alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Kustomization,
    HelmRelease,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Kind::Kustomization, Kind::HelmRelease];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Kustomization => "Kustomization",
            Kind::HelmRelease => "HelmRelease",
        }
    }

    pub fn group(self) -> &'static str {
        match self {
            Kind::Kustomization => "kustomize.toolkit.fluxcd.io",
            Kind::HelmRelease => "helm.toolkit.fluxcd.io",
        }
    }

    pub fn version(self) -> &'static str {
        match self {
            Kind::Kustomization => "v1",
            Kind::HelmRelease => "v2",
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            Kind::Kustomization => "kustomizations",
            Kind::HelmRelease => "helmreleases",
        }
    }

    pub fn api_version(self) -> String {
        format!("{}/{}", self.group(), self.version())
    }

    /// The kind named `name` (`Kustomization`, `HelmRelease`).
    pub fn named(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// One of the controller's private keys. The lab emulates the controller on the wire, not
/// Sealed Secrets' crypto: whoever starts the hub says what a key opens (the demo and the
/// tests, with spokekeeper's `seal`).
pub trait Key: Send {
    /// Whether this key opens `sealed`: a SealedSecret object (JSON, as the API server
    /// stores it) holding one encryptedData value.
    fn opens(&self, sealed: &[u8]) -> bool;
}

/// What "Flux" would apply for a path in the fleet repo (None: not there).
pub type Source = Arc<dyn Fn(&str) -> Option<Vec<u8>> + Send + Sync>;

/// A spoke as the hub knows it.
#[derive(Clone, Debug)]
pub struct SimSpoke {
    pub secret_namespace: String,
    pub secret_name: String,
    pub kustomization_namespace: String,
    pub kustomization_name: String,
    /// The SealedSecret's path in the fleet repo.
    pub file: String,
}

/// How the Sealed Secrets controller behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controller {
    /// Serves its certificate and unseals.
    Up,
    /// Its pod is gone: the proxy answers 503 and nothing is unsealed.
    Down,
    /// Serves its certificate but never gets to a SealedSecret (status stays behind).
    Stalled,
}

/// How Flux's kustomize-controller (or helm-controller) finishes a requested reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Flux {
    Ready,
    /// Ready False with this message.
    Failing(String),
    /// Stays Progressing; never handles the request.
    Stalled,
}

/// One request the server saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// The query string, without `?` (empty: none).
    pub query: String,
    pub content_type: Option<String>,
    pub body: String,
    pub at: std::time::Instant,
    /// Answered 429 (see [`HubSim::throttle`]).
    pub throttled: bool,
}

pub const CONTROLLER_PORT_NAME: &str = "http";

/// The Kustomization that applies the SealedSecrets (namespace, name); see [`HubSim::add_root`].
pub const ROOT: (&str, &str) = ("flux-system", "infra");

struct State {
    namespace: String,
    name: String,
    cert_pem: String,
    keys: Vec<Box<dyn Key>>,
    controller: Controller,
    flux: Flux,
    source: Source,
    spokes: Vec<SimSpoke>,
    /// (namespace, name) -> object.
    sealed: BTreeMap<(String, String), Value>,
    /// (kind, namespace, name) -> Kustomization or HelmRelease.
    consumers: BTreeMap<(Kind, String, String), FluxObject>,
    /// Flux sources (source.toolkit.fluxcd.io/v1): (plural, namespace, name) -> object.
    sources: BTreeMap<(String, String, String), Value>,
    /// Kinds whose CRD is not installed: every request for them is 404.
    not_served: Vec<Kind>,
    /// The controller Service's port name ("": unnamed, as upstream controller.yaml).
    port_name: String,
    /// Its `app.kubernetes.io/version` label, as the Helm chart sets it (None: none, as
    /// upstream controller.yaml).
    version_label: Option<String>,
    /// Requests whose path contains .0 answered 429 with Retry-After .2 (seconds), .1 more times.
    throttle: Option<(String, u32, u64)>,
    /// The next unseal fails once, then the controller's retry succeeds.
    fail_next_unseal: bool,
    /// A failed unseal waits for its retry.
    retry: bool,
    revision: u64,
    seen: Vec<Seen>,
    /// events.k8s.io/v1 Events: (namespace, name) -> object, as created and patched.
    events: BTreeMap<(String, String), Value>,
}

struct FluxObject {
    obj: Value,
    /// A requestedAt not handled yet, and how many reads it has been in progress.
    pending: Option<(String, u32)>,
    /// How this one finishes, when not as the hub's `flux`.
    flux: Option<Flux>,
    /// A HelmRelease that used up its retries (see [`HubSim::exhaust_retries`]).
    stalled: bool,
    /// A Kustomization's sops decryption key (see [`HubSim::add_sops_kustomization`]).
    sops: Option<SopsKey>,
}

type ConsumerKey = (Kind, String, String);

/// A running emulated hub; dropping it stops it.
pub struct HubSim {
    state: Arc<Mutex<State>>,
    stop: Option<oneshot::Sender<()>>,
    done: std_mpsc::Receiver<()>,
    pub addr: SocketAddr,
}

impl HubSim {
    /// Serves on 127.0.0.1 (any port) on `rt`: a controller `namespace/name` with
    /// certificate `cert_pem` and private `keys`.
    pub fn start<K: Key + 'static>(
        rt: &Handle,
        namespace: &str,
        name: &str,
        cert_pem: &str,
        keys: impl IntoIterator<Item = K>,
        source: Source,
    ) -> std::io::Result<HubSim> {
        let state = Arc::new(Mutex::new(State {
            namespace: namespace.into(),
            name: name.into(),
            cert_pem: cert_pem.into(),
            keys: boxed(keys),
            controller: Controller::Up,
            flux: Flux::Ready,
            source,
            spokes: Vec::new(),
            sealed: BTreeMap::new(),
            consumers: BTreeMap::new(),
            sources: BTreeMap::from([(
                (
                    "gitrepositories".into(),
                    "flux-system".into(),
                    "flux-system".into(),
                ),
                git_repository("flux-system", "flux-system", None),
            )]),
            not_served: Vec::new(),
            port_name: CONTROLLER_PORT_NAME.into(),
            version_label: None,
            throttle: None,
            fail_next_unseal: false,
            retry: false,
            revision: 100,
            seen: Vec::new(),
            events: BTreeMap::new(),
        }));
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        let (done_tx, done_rx) = std_mpsc::channel();
        let shared = state.clone();
        rt.spawn(async move {
            let listener = match TcpListener::bind("127.0.0.1:0").await {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let _ = ready_tx.send(listener.local_addr());
            serve(listener, shared, stop_rx).await;
            let _ = done_tx.send(());
        });
        let addr = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| std::io::Error::other("the runtime did not start the hub"))??;
        Ok(HubSim {
            state,
            stop: Some(stop_tx),
            done: done_rx,
            addr,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a spoke: its Kustomization exists (Ready, as after an earlier deploy).
    pub fn add_spoke(&self, spoke: SimSpoke) {
        self.add_consumer(
            Kind::Kustomization,
            &spoke.kustomization_namespace,
            &spoke.kustomization_name,
            Some(&spoke.secret_name),
        );
        self.lock().spokes.push(spoke);
    }

    /// A Kustomization or HelmRelease (Ready, as after an earlier deploy) that deploys
    /// with the kubeconfig Secret `secret` of its own namespace (None: to the hub itself).
    pub fn add_consumer(&self, kind: Kind, namespace: &str, name: &str, secret: Option<&str>) {
        let mut st = self.lock();
        st.revision += 1;
        let mut spec = match kind {
            Kind::Kustomization => json!({
                "interval": "10m",
                "path": format!("./clusters/{name}"),
                "prune": true,
                "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
            }),
            Kind::HelmRelease => json!({
                "interval": "10m",
                "chart": {"spec": {"chart": name, "version": "1.x",
                    "sourceRef": {"kind": "HelmRepository", "name": "charts"}}},
            }),
        };
        if let Some(secret) = secret {
            spec["kubeConfig"] = json!({"secretRef": {"name": secret, "key": "value"}});
        }
        let done = match kind {
            Kind::Kustomization => condition(
                "Ready",
                "True",
                "ReconciliationSucceeded",
                "Applied revision: main@sha1:0000000000000000000000000000000000000000",
            ),
            Kind::HelmRelease => condition(
                "Ready",
                "True",
                "InstallSucceeded",
                &format!(
                    "Helm install succeeded for release {namespace}/{name}.v1 with chart {name}@1.0.0"
                ),
            ),
        };
        let obj = json!({
            "apiVersion": kind.api_version(),
            "kind": kind.as_str(),
            "metadata": {
                "name": name,
                "namespace": namespace,
                "generation": 1,
                "resourceVersion": st.revision.to_string(),
                "uid": format!("00000000-0000-4000-8000-{:012}", st.revision),
                "creationTimestamp": "2025-01-01T00:00:00Z",
                "finalizers": ["finalizers.fluxcd.io"],
            },
            "spec": spec,
            "status": {"observedGeneration": 1, "conditions": [done]},
        });
        st.consumers.insert(
            (kind, namespace.to_string(), name.to_string()),
            FluxObject {
                obj,
                pending: None,
                flux: None,
                stalled: false,
                sops: None,
            },
        );
    }

    /// A Kustomization (Ready, as after an earlier deploy) that applies `path` of the
    /// fleet repo to the hub, decrypting with sops (`spec.decryption: {provider: sops,
    /// secretRef: {name: secret}}`): `key` is the age identity that Secret holds.
    pub fn add_sops_kustomization(
        &self,
        namespace: &str,
        name: &str,
        path: &str,
        secret: &str,
        key: SopsKey,
    ) {
        self.add_consumer(Kind::Kustomization, namespace, name, None);
        let mut st = self.lock();
        let key_of = (Kind::Kustomization, namespace.to_string(), name.to_string());
        if let Some(o) = st.consumers.get_mut(&key_of) {
            o.obj["spec"]["path"] = json!(path);
            o.obj["spec"]["decryption"] =
                json!({"provider": "sops", "secretRef": {"name": secret}});
            o.sops = Some(key);
        }
    }

    /// Deletes a GitRepository (the consumers' default source is flux-system/flux-system).
    pub fn remove_git_repository(&self, namespace: &str, name: &str) {
        self.lock().sources.remove(&(
            "gitrepositories".to_string(),
            namespace.to_string(),
            name.to_string(),
        ));
    }

    /// A GitRepository source-controller never fetched: Ready False with this reason and
    /// message, and no artifact (e.g. `GitOperationFailed`, a broken URL).
    pub fn fail_git_repository(&self, namespace: &str, name: &str, reason: &str, message: &str) {
        self.lock().sources.insert(
            ("gitrepositories".into(), namespace.into(), name.into()),
            git_repository(namespace, name, Some((reason, message))),
        );
    }

    /// The root: the Kustomization `flux-system/infra` that applies the SealedSecrets
    /// (their `kustomize.toolkit.fluxcd.io/*` labels name it) from the GitRepository
    /// `flux-system/flux-system`, to the hub itself.
    pub fn add_root(&self) {
        self.add_root_at("./fluxcd");
    }

    /// [`HubSim::add_root`] with this spec.path.
    pub fn add_root_at(&self, path: &str) {
        self.add_consumer(Kind::Kustomization, ROOT.0, ROOT.1, None);
        if let Some(o) = self.lock().consumers.get_mut(&(
            Kind::Kustomization,
            ROOT.0.to_string(),
            ROOT.1.to_string(),
        )) {
            o.obj["spec"]["path"] = json!(path);
        }
    }

    /// A GitRepository fetched before whose fetches now fail, as source-controller leaves
    /// it: Ready False with this reason and message, FetchFailed True, the old artifact
    /// kept. Flux applies that artifact: the SealedSecrets stay as they were.
    pub fn break_git_repository(&self, namespace: &str, name: &str, reason: &str, message: &str) {
        let mut st = self.lock();
        let Some(obj) =
            st.sources
                .get_mut(&("gitrepositories".into(), namespace.into(), name.into()))
        else {
            return;
        };
        let stored = obj["status"]["conditions"][0]["message"].clone();
        obj["status"]["conditions"] = json!([
            condition("FetchFailed", "True", reason, message),
            condition("Ready", "False", reason, message),
            condition(
                "ArtifactInStorage",
                "True",
                "Succeeded",
                stored.as_str().unwrap_or_default()
            ),
        ]);
    }

    /// Uninstalls a kind's CRD (its objects go with it), as a Flux without helm-controller.
    pub fn remove_kind(&self, kind: Kind) {
        let mut st = self.lock();
        st.consumers.retain(|(k, _, _), _| *k != kind);
        st.not_served.push(kind);
    }

    /// Names the controller Service's port 8080 (`""`: unnamed, as the upstream
    /// controller.yaml installs it).
    pub fn set_port_name(&self, name: &str) {
        self.lock().port_name = name.into();
    }

    /// Labels the controller Service `app.kubernetes.io/version: <version>`, as the
    /// upstream Helm chart does (its appVersion, without a leading v).
    pub fn set_version_label(&self, version: &str) {
        self.lock().version_label = Some(version.into());
    }

    /// The next `times` requests whose path contains `path` are answered 429 Too Many
    /// Requests with `Retry-After: retry_after_secs`, as API Priority and Fairness does.
    pub fn throttle(&self, path: &str, times: u32, retry_after_secs: u64) {
        self.lock().throttle = Some((path.into(), times, retry_after_secs));
    }

    /// The next unseal writes Synced False (as a Secret update conflict does), and the
    /// controller's retry, at the next read, succeeds.
    pub fn fail_next_unseal(&self) {
        self.lock().fail_next_unseal = true;
    }

    /// Deletes a Kustomization or HelmRelease.
    pub fn remove_consumer(&self, kind: Kind, namespace: &str, name: &str) {
        self.lock()
            .consumers
            .remove(&(kind, namespace.to_string(), name.to_string()));
    }

    /// Sets a consumer's spec.kubeConfig.secretRef.key (None: unset, so Flux reads
    /// `value`, else `value.yaml`).
    pub fn set_consumer_key(&self, kind: Kind, namespace: &str, name: &str, key: Option<&str>) {
        if let Some(o) =
            self.lock()
                .consumers
                .get_mut(&(kind, namespace.to_string(), name.to_string()))
        {
            let r = &mut o.obj["spec"]["kubeConfig"]["secretRef"];
            match (key, r.as_object_mut()) {
                (Some(k), Some(r)) => {
                    r.insert("key".into(), json!(k));
                }
                (None, Some(r)) => {
                    r.remove("key");
                }
                (_, None) => {}
            }
        }
    }

    /// Sets a consumer's spec.serviceAccountName: Flux impersonates that ServiceAccount of
    /// the consumer's namespace on the spoke.
    pub fn set_consumer_service_account(&self, kind: Kind, namespace: &str, name: &str, sa: &str) {
        if let Some(o) =
            self.lock()
                .consumers
                .get_mut(&(kind, namespace.to_string(), name.to_string()))
        {
            o.obj["spec"]["serviceAccountName"] = json!(sa);
        }
    }

    /// Sets an annotation on a consumer (e.g. a huge one, as a hostile hub could serve).
    pub fn annotate_consumer(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        key: &str,
        value: &str,
    ) {
        if let Some(o) =
            self.lock()
                .consumers
                .get_mut(&(kind, namespace.to_string(), name.to_string()))
        {
            o.obj["metadata"]["annotations"][key] = json!(value);
        }
    }

    /// How this consumer finishes a requested reconcile, whatever the hub's `flux`.
    pub fn set_consumer_flux(&self, kind: Kind, namespace: &str, name: &str, f: Flux) {
        if let Some(o) =
            self.lock()
                .consumers
                .get_mut(&(kind, namespace.to_string(), name.to_string()))
        {
            o.flux = Some(f);
        }
    }

    /// A HelmRelease whose upgrades failed until helm-controller stopped retrying, with
    /// the status it then writes (Ready False, Stalled True RetriesExceeded). A request
    /// is only echoed, until one comes with reconcile.fluxcd.io/resetAt equal to its
    /// requestedAt: then the failure counts are reset and it runs as the hub's `flux` says.
    pub fn exhaust_retries(&self, namespace: &str, name: &str, error: &str) {
        let key = (Kind::HelmRelease, namespace.to_string(), name.to_string());
        if let Some(o) = self.lock().consumers.get_mut(&key) {
            o.stalled = true;
            let failed = format!(
                "Helm upgrade failed for release {namespace}/{name} with chart {name}@1.0.0: {error}"
            );
            let status = &mut o.obj["status"];
            status["conditions"] = json!([
                condition("Ready", "False", "UpgradeFailed", &failed),
                condition(
                    "Stalled",
                    "True",
                    "RetriesExceeded",
                    "Failed to upgrade after 1 attempt(s)"
                ),
                condition("Released", "False", "UpgradeFailed", &failed),
            ]);
            status["failures"] = json!(1);
            status["upgradeFailures"] = json!(1);
            status["lastAttemptedReleaseAction"] = json!("upgrade");
        }
    }

    /// The controller's key rotation: a new certificate; it keeps the old keys to
    /// decrypt what is still sealed to them, as the real controller does.
    pub fn renew_key(&self, cert_pem: &str, key: impl Key + 'static) {
        let mut st = self.lock();
        st.cert_pem = cert_pem.into();
        st.keys.push(Box::new(key));
    }

    /// Replaces the controller's private keys (a lost key: nothing old unseals).
    pub fn set_keys<K: Key + 'static>(&self, keys: impl IntoIterator<Item = K>) {
        self.lock().keys = boxed(keys);
    }

    pub fn set_controller(&self, c: Controller) {
        self.lock().controller = c;
    }

    pub fn set_flux(&self, f: Flux) {
        self.lock().flux = f;
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    /// The Events (events.k8s.io/v1) as stored, by namespace and name.
    pub fn events(&self) -> Vec<Value> {
        self.lock().events.values().cloned().collect()
    }

    /// Deletes every Event, as the API server's --event-ttl does.
    pub fn expire_events(&self) {
        self.lock().events.clear();
    }

    /// The SealedSecret as stored (spec and status), if Flux applied it.
    pub fn sealed_secret(&self, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .sealed
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// A Flux source (source.toolkit.fluxcd.io/v1) as stored.
    pub fn source(&self, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .sources
            .get(&(plural.into(), namespace.into(), name.into()))
            .cloned()
    }

    pub fn kustomization(&self, namespace: &str, name: &str) -> Option<Value> {
        self.consumer(Kind::Kustomization, namespace, name)
    }

    /// A Kustomization or HelmRelease as stored.
    pub fn consumer(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .consumers
            .get(&(kind, namespace.to_string(), name.to_string()))
            .map(|k| k.obj.clone())
    }

    /// A kubeconfig that reaches this server (plain HTTP, no credentials).
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: http://{}\ncontexts:\n- name: hub\n  context:\n    cluster: hub\n    user: spokekeeper\ncurrent-context: hub\nusers:\n- name: spokekeeper\n  user: {{}}\n",
            self.addr
        )
    }
}

fn boxed<K: Key + 'static>(keys: impl IntoIterator<Item = K>) -> Vec<Box<dyn Key>> {
    keys.into_iter()
        .map(|k| Box::new(k) as Box<dyn Key>)
        .collect()
}

impl Drop for HubSim {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
            let _ = self.done.recv_timeout(Duration::from_secs(10));
        }
    }
}

/// The RBAC request attributes (group, resource[/subresource], verb) the API server's
/// authorizer derives from a namespaced request: on a named object GET is get, PATCH
/// patch, PUT update, DELETE delete; on a collection GET is list and POST create. None
/// for anything else.
pub fn rbac_attributes(method: &str, path: &str) -> Option<(String, String, &'static str)> {
    let verb = match method {
        "GET" => "get",
        "PATCH" => "patch",
        "PUT" => "update",
        "DELETE" => "delete",
        "POST" => "create",
        _ => return None,
    };
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => (String::new(), rest),
        ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
        _ => return None,
    };
    match rest {
        ["namespaces", _ns, resource] => match verb {
            "get" => Some((group, resource.to_string(), "list")),
            "create" => Some((group, resource.to_string(), "create")),
            _ => None,
        },
        ["namespaces", _ns, resource, _name] if verb != "create" => {
            Some((group, resource.to_string(), verb))
        }
        ["namespaces", _ns, resource, _name, sub, ..] => {
            Some((group, format!("{resource}/{sub}"), verb))
        }
        _ => None,
    }
}

async fn serve(listener: TcpListener, state: Arc<Mutex<State>>, mut stop: oneshot::Receiver<()>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => {
                if let Ok((tcp, _)) = accepted {
                    let state = state.clone();
                    conns.spawn(async move {
                        let service = hyper::service::service_fn(move |req| {
                            let state = state.clone();
                            async move { Ok::<_, Infallible>(handle(req, &state).await) }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tcp), service)
                            .await;
                    });
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    conns.shutdown().await;
}

async fn handle(req: Request<Incoming>, state: &Mutex<State>) -> Response<Full<Bytes>> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match Limited::new(req.into_body(), 1 << 20).collect().await {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        Err(_) => {
            return status(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                "request is too large",
                None,
            );
        }
    };
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    st.seen.push(Seen {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        content_type: content_type.clone(),
        body: body.clone(),
        at: std::time::Instant::now(),
        throttled: false,
    });
    if let Some((p, times, after)) = &mut st.throttle
        && *times > 0
        && path.contains(p.as_str())
    {
        *times -= 1;
        let after = *after;
        if let Some(last) = st.seen.last_mut() {
            last.throttled = true;
        }
        let mut resp = status(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            "Too many requests, please try again later.",
            Some(json!({"retryAfterSeconds": after})),
        );
        resp.headers_mut().insert(
            "Retry-After",
            hyper::header::HeaderValue::from_str(&after.to_string()).expect("digits"),
        );
        return resp;
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api", "v1", "namespaces", ns, "services", name] => {
            if method != Method::GET {
                return not_allowed();
            }
            service(&st, ns, name)
        }
        [
            "api",
            "v1",
            "namespaces",
            ns,
            "services",
            target,
            "proxy",
            rest @ ..,
        ] => {
            if method != Method::GET {
                return not_allowed();
            }
            proxy(&st, ns, target, &rest.join("/"))
        }
        [
            "apis",
            "bitnami.com",
            "v1alpha1",
            "namespaces",
            ns,
            "sealedsecrets",
            name,
        ] => {
            if method != Method::GET {
                return not_allowed();
            }
            let key = (ns.to_string(), name.to_string());
            apply(&mut st, &key);
            unseal(&mut st, &key);
            match st.sealed.get(&key) {
                Some(obj) => json_response(StatusCode::OK, obj),
                None => not_found("bitnami.com", "sealedsecrets", name),
            }
        }
        [
            "apis",
            "events.k8s.io",
            "v1",
            "namespaces",
            ns,
            "events",
            rest @ ..,
        ] if rest.len() <= 1 => event(&mut st, &method, ns, rest.first().copied(), &body),
        ["apis", group, version] if method == Method::GET => {
            let served: Vec<Value> = Kind::ALL
                .into_iter()
                .filter(|k| !st.not_served.contains(k))
                .filter(|k| k.group() == *group && k.version() == *version)
                .map(|k| json!({"name": k.plural(), "namespaced": true, "kind": k.as_str(), "verbs": ["get", "list", "patch"]}))
                .collect();
            if served.is_empty() {
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    "the server could not find the requested resource",
                    None,
                );
            }
            json_response(
                StatusCode::OK,
                &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/{version}"), "resources": served}),
            )
        }
        [
            "apis",
            "source.toolkit.fluxcd.io",
            "v1",
            "namespaces",
            ns,
            plural,
            name,
        ] => {
            let key = (plural.to_string(), ns.to_string(), name.to_string());
            let Some(obj) = st.sources.get_mut(&key) else {
                return not_found("source.toolkit.fluxcd.io", plural, name);
            };
            match method {
                Method::GET => {
                    fetch(obj);
                    json_response(StatusCode::OK, obj)
                }
                Method::PATCH
                    if content_type.as_deref() == Some("application/merge-patch+json") =>
                {
                    let Ok(p) = serde_json::from_str::<Value>(&body) else {
                        return status(
                            StatusCode::BAD_REQUEST,
                            "BadRequest",
                            "the body of the request was in an unknown format",
                            None,
                        );
                    };
                    merge(obj, &p);
                    json_response(StatusCode::OK, obj)
                }
                Method::PATCH => status(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json",
                    None,
                ),
                _ => not_allowed(),
            }
        }
        ["apis", group, version, "namespaces", ns, plural, rest @ ..] if rest.len() <= 1 => {
            let Some(kind) = Kind::ALL.into_iter().find(|k| {
                k.group() == *group
                    && k.version() == *version
                    && k.plural() == *plural
                    && !st.not_served.contains(k)
            }) else {
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    "the server could not find the requested resource",
                    None,
                );
            };
            let Some(name) = rest.first() else {
                if method != Method::GET {
                    return not_allowed();
                }
                return list(&st, kind, ns, &query);
            };
            let key = (kind, ns.to_string(), name.to_string());
            if !st.consumers.contains_key(&key) {
                return not_found(group, plural, name);
            }
            match method {
                Method::GET => {
                    reconcile(&mut st, &key);
                    json_response(StatusCode::OK, &st.consumers[&key].obj)
                }
                Method::PATCH => patch(&mut st, &key, content_type.as_deref(), &body),
                _ => not_allowed(),
            }
        }
        _ => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
            None,
        ),
    }
}

fn service(st: &State, ns: &str, name: &str) -> Response<Full<Bytes>> {
    if ns != st.namespace || name != st.name {
        return not_found("", "services", name);
    }
    let mut port = json!({"protocol": "TCP", "port": 8080, "targetPort": 8080});
    if !st.port_name.is_empty() {
        port["name"] = json!(st.port_name);
    }
    let mut labels = json!({"app.kubernetes.io/name": "sealed-secrets"});
    if let Some(v) = &st.version_label {
        labels["app.kubernetes.io/version"] = json!(v);
    }
    json_response(
        StatusCode::OK,
        &json!({
            "kind": "Service",
            "apiVersion": "v1",
            "metadata": {
                "name": st.name, "namespace": st.namespace,
                "labels": labels,
                "resourceVersion": "42", "uid": "00000000-0000-4000-8000-00000000002a",
            },
            "spec": {
                "ports": [port],
                "selector": {"app.kubernetes.io/name": "sealed-secrets"},
                "clusterIP": "10.43.0.42", "type": "ClusterIP",
            },
        }),
    )
}

/// `[scheme:]name[:port]` -> the controller's cert.pem.
fn proxy(st: &State, ns: &str, target: &str, rest: &str) -> Response<Full<Bytes>> {
    let mut fields = target.split(':').collect::<Vec<_>>();
    if matches!(fields.first(), Some(&"http" | &"https")) && fields.len() > 1 {
        fields.remove(0);
    }
    let (name, port) = (fields[0], fields.get(1).copied().unwrap_or(""));
    if ns != st.namespace || name != st.name {
        return not_found("", "services", name);
    }
    // As the API server: a number stands for its port's name, and endpoints match by
    // name only (so "" reaches only an unnamed port).
    let port = if port == "8080" {
        st.port_name.as_str()
    } else {
        port
    };
    if port != st.port_name {
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            &format!("no endpoints available for service \"{target}\""),
            None,
        );
    }
    if st.controller == Controller::Down {
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            &format!("no endpoints available for service \"{name}\""),
            None,
        );
    }
    if rest != "v1/cert.pem" {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .header("Content-Type", "text/plain; charset=utf-8")
            .body(Full::new(Bytes::from("404 page not found\n")))
            .expect("response");
    }
    Response::builder()
        .status(StatusCode::OK)
        .header("Content-Type", "text/plain")
        .body(Full::new(Bytes::from(st.cert_pem.clone())))
        .expect("response")
}

/// Flux applies what the fleet repo holds for this SealedSecret.
fn apply(st: &mut State, key: &(String, String)) {
    let Some(spoke) = st
        .spokes
        .iter()
        .find(|s| s.secret_namespace == key.0 && s.secret_name == key.1)
        .cloned()
    else {
        return;
    };
    if fetch_failing(st) {
        return;
    }
    let Some(bytes) = (st.source)(&spoke.file) else {
        return;
    };
    let Some((name, namespace, encrypted_data, template)) = manifest(&bytes) else {
        return;
    };
    // The template as the file has it (the Secret's labels, annotations and type); the
    // API server stores it as applied, only defaulting its name and namespace.
    let mut template = template;
    template["metadata"]["name"] = json!(name);
    template["metadata"]["namespace"] = json!(namespace);
    let spec = json!({
        "encryptedData": encrypted_data,
        "template": template,
    });
    st.revision += 1;
    let revision = st.revision.to_string();
    match st.sealed.get_mut(key) {
        Some(obj) if obj["spec"] == spec => {
            st.revision -= 1;
        }
        Some(obj) => {
            let generation = obj["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
            obj["metadata"]["generation"] = json!(generation);
            obj["metadata"]["resourceVersion"] = json!(revision);
            obj["spec"] = spec;
        }
        None => {
            let obj = json!({
                "apiVersion": "bitnami.com/v1alpha1",
                "kind": "SealedSecret",
                "metadata": {
                    "name": key.1, "namespace": key.0, "generation": 1,
                    "resourceVersion": revision,
                    "uid": format!("00000000-0000-4000-8000-{:012}", st.revision),
                    "creationTimestamp": "2025-01-01T00:00:00Z",
                    "labels": {"kustomize.toolkit.fluxcd.io/name": ROOT.1, "kustomize.toolkit.fluxcd.io/namespace": ROOT.0},
                },
                "spec": spec,
            });
            st.sealed.insert(key.clone(), obj);
        }
    }
}

/// The fleet's GitRepository fails to fetch after an earlier fetch (it keeps its
/// artifact, Ready False): Flux applies the old artifact, not what main holds.
fn fetch_failing(st: &State) -> bool {
    st.sources
        .get(&(
            "gitrepositories".into(),
            "flux-system".into(),
            "flux-system".into(),
        ))
        .is_some_and(|g| {
            !g["status"]["artifact"].is_null()
                && g["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "False")
                })
        })
}

/// A SealedSecret manifest (YAML or JSON) as the API server would take it: its name,
/// namespace, encryptedData and template (an object; `{}` when absent). None for anything
/// else (nothing is applied).
type Manifest = (String, String, serde_json::Map<String, Value>, Value);

fn manifest(bytes: &[u8]) -> Option<Manifest> {
    let text = std::str::from_utf8(bytes).ok()?;
    let v: Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).ok()?
    } else {
        serde_saphyr::from_str(text).ok()?
    };
    if v["kind"] != "SealedSecret" || v["apiVersion"] != "bitnami.com/v1alpha1" {
        return None;
    }
    let name = v["metadata"]["name"].as_str()?.to_string();
    let namespace = v["metadata"]["namespace"].as_str().unwrap_or_default();
    let data = v["spec"]["encryptedData"].as_object()?;
    let template = match &v["spec"]["template"] {
        Value::Null => json!({"metadata": {}}),
        t @ Value::Object(_) if t["metadata"].is_object() || t["metadata"].is_null() => {
            let mut t = t.clone();
            if t["metadata"].is_null() {
                t["metadata"] = json!({});
            }
            t
        }
        _ => return None,
    };
    data.values()
        .all(Value::is_string)
        .then(|| (name, namespace.to_string(), data.clone(), template))
}

/// The controller unseals the current generation once, with the keys it has.
fn unseal(st: &mut State, key: &(String, String)) {
    if st.controller != Controller::Up {
        return;
    }
    let Some(obj) = st.sealed.get(key) else {
        return;
    };
    let generation = obj["metadata"]["generation"].as_i64().unwrap_or(1);
    if obj["status"]["observedGeneration"].as_i64() == Some(generation) && !st.retry {
        return;
    }
    st.retry = false;
    // As the controller: each value with the first key that opens it.
    let data = obj["spec"]["encryptedData"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let opened = data.iter().all(|(k, v)| {
        let mut one = obj.clone();
        one["spec"]["encryptedData"] = json!({k: v});
        let bytes = serde_json::to_vec(&one).unwrap_or_default();
        st.keys.iter().any(|key| key.opens(&bytes))
    });
    let result = match opened {
        true => Ok(()),
        false => {
            let names: Vec<&str> = data.keys().map(String::as_str).collect();
            Err(format!(
                "no key could decrypt secret ({})",
                names.join(", ")
            ))
        }
    };
    let result = match std::mem::take(&mut st.fail_next_unseal) {
        true => {
            st.retry = true;
            Err(format!(
                "Operation cannot be fulfilled on secrets \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                key.1
            ))
        }
        false => result,
    };
    let now = "2025-06-01T12:00:00Z";
    let mut c = json!({"type": "Synced", "lastUpdateTime": now, "lastTransitionTime": now});
    match result {
        Ok(()) => c["status"] = json!("True"),
        Err(message) => {
            c["status"] = json!("False");
            c["reason"] = json!("ErrUnsealFailed");
            c["message"] = json!(message);
        }
    }
    st.revision += 1;
    let revision = st.revision.to_string();
    let obj = st.sealed.get_mut(key).expect("present");
    obj["status"] = json!({"conditions": [c], "observedGeneration": generation});
    obj["metadata"]["resourceVersion"] = json!(revision);
}

/// A requested reconcile: one read in progress, then done as `flux` says.
fn reconcile(st: &mut State, key: &ConsumerKey) {
    st.revision += 1;
    let revision = st.revision.to_string();
    let hub_flux = st.flux.clone();
    // Decrypting is part of the build: only a reconcile that finishes now does it.
    let undecrypted = match st.consumers.get(key) {
        Some(k) if k.pending.as_ref().is_some_and(|(_, reads)| *reads > 0) => sops::failure(st, k),
        _ => None,
    };
    let k = st.consumers.get_mut(key).expect("checked");
    let flux = k.flux.clone().unwrap_or(hub_flux);
    let Some((at, reads)) = k.pending.clone() else {
        st.revision -= 1;
        return;
    };
    if k.stalled {
        let reset = k.obj["metadata"]["annotations"][RESET_AT].as_str() == Some(&at);
        if !reset {
            // helm-controller: retries exhausted, nothing runs; the request is handled.
            k.obj["status"]["lastHandledReconcileAt"] = json!(at);
            k.pending = None;
            k.obj["metadata"]["resourceVersion"] = json!(revision);
            return;
        }
        k.stalled = false;
        let status = &mut k.obj["status"];
        status["lastHandledResetAt"] = json!(at);
        status["failures"] = json!(0);
        status["upgradeFailures"] = json!(0);
    }
    // kustomize-controller reads the source before anything else: missing, or without
    // an artifact, it writes Ready False ArtifactFailed and handles the request.
    if key.0 == Kind::Kustomization
        && let Some(failed) = source_failure(&st.sources, &k.obj)
    {
        k.obj["status"]["conditions"] =
            json!([condition("Ready", "False", "ArtifactFailed", &failed)]);
        k.obj["status"]["lastHandledReconcileAt"] = json!(at);
        k.pending = None;
        k.obj["metadata"]["resourceVersion"] = json!(revision);
        return;
    }
    let status = &mut k.obj["status"];
    if let Some(failed) = undecrypted.filter(|_| flux != Flux::Stalled) {
        status["conditions"] = json!([condition("Ready", "False", "BuildFailed", &failed)]);
        status["lastHandledReconcileAt"] = json!(at);
        k.pending = None;
    } else if reads == 0 || flux == Flux::Stalled {
        status["conditions"] = json!([
            condition(
                "Reconciling",
                "True",
                "Progressing",
                "Reconciliation in progress"
            ),
            condition(
                "Ready",
                "Unknown",
                "Progressing",
                "Reconciliation in progress"
            ),
        ]);
        k.pending = Some((at, reads + 1));
    } else {
        status["conditions"] = json!([match (flux, key.0) {
            (Flux::Failing(msg), Kind::Kustomization) => {
                condition("Ready", "False", "ReconciliationFailed", &msg)
            }
            (Flux::Failing(msg), Kind::HelmRelease) => {
                condition("Ready", "False", "UpgradeFailed", &msg)
            }
            (_, Kind::Kustomization) => condition(
                "Ready",
                "True",
                "ReconciliationSucceeded",
                "Applied revision: main@sha1:1111111111111111111111111111111111111111"
            ),
            (_, Kind::HelmRelease) => condition(
                "Ready",
                "True",
                "UpgradeSucceeded",
                &format!(
                    "Helm upgrade succeeded for release {}/{}.v2 with chart {}@1.0.0",
                    key.1, key.2, key.2
                )
            ),
        }]);
        status["lastHandledReconcileAt"] = json!(at);
        k.pending = None;
    }
    k.obj["metadata"]["resourceVersion"] = json!(revision);
}

/// What kustomize-controller (v1.9) writes when a Kustomization's GitRepository is missing
/// or has no artifact; None when it has one.
fn source_failure(
    sources: &BTreeMap<(String, String, String), Value>,
    k: &Value,
) -> Option<String> {
    let r = &k["spec"]["sourceRef"];
    if r["kind"] != "GitRepository" {
        return None;
    }
    let name = r["name"].as_str().unwrap_or_default();
    let ns = r["namespace"]
        .as_str()
        .or(k["metadata"]["namespace"].as_str())
        .unwrap_or_default();
    match sources.get(&("gitrepositories".into(), ns.into(), name.into())) {
        None => Some(format!(
            "GitRepository.source.toolkit.fluxcd.io \"{name}\" not found"
        )),
        Some(src) if src["status"]["artifact"].is_null() => {
            Some("Source artifact not found, retrying in 30s".into())
        }
        Some(_) => None,
    }
}

/// A GitRepository as source-controller (v1.x) leaves it: fetched (Ready True, with an
/// artifact), or failing before any fetch (`failed`: reason and message; no artifact).
fn git_repository(namespace: &str, name: &str, failed: Option<(&str, &str)>) -> Value {
    let mut obj = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": namespace, "generation": 1,
            "resourceVersion": "7", "uid": "00000000-0000-4000-8000-000000000007",
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "finalizers": ["finalizers.fluxcd.io"]},
        "spec": {"interval": "1m", "url": "ssh://git@git.example/fleet.git",
            "ref": {"branch": "main"}, "timeout": "60s"},
    });
    obj["status"] = match failed {
        None => {
            let rev = "main@sha1:0000000000000000000000000000000000000000";
            json!({
                "observedGeneration": 1,
                "artifact": {"path": format!("gitrepository/{namespace}/{name}/0000000000000000000000000000000000000000.tar.gz"),
                    "url": format!("http://source-controller.flux-system.svc.cluster.local./gitrepository/{namespace}/{name}/0000000000000000000000000000000000000000.tar.gz"),
                    "revision": rev, "digest": format!("sha256:{}", "0".repeat(64)),
                    "lastUpdateTime": "2025-06-01T12:00:00Z", "size": 1024},
                "conditions": [
                    condition("Ready", "True", "Succeeded", &format!("stored artifact for revision '{rev}'")),
                    condition("ArtifactInStorage", "True", "Succeeded", &format!("stored artifact for revision '{rev}'")),
                ],
            })
        }
        Some((reason, message)) => json!({
            "observedGeneration": 1,
            "conditions": [
                condition("Reconciling", "True", "ProgressingWithRetry", "building artifact"),
                condition("Ready", "False", reason, message),
                condition("FetchFailed", "True", reason, message),
            ],
        }),
    };
    obj
}

fn patch(
    st: &mut State,
    key: &ConsumerKey,
    content_type: Option<&str>,
    body: &str,
) -> Response<Full<Bytes>> {
    // Custom resources take JSON and merge patches only (no strategic merge).
    let ct = content_type
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim();
    if ![
        "application/merge-patch+json",
        "application/json-patch+json",
        "application/apply-patch+yaml",
    ]
    .contains(&ct)
    {
        return status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            None,
        );
    }
    if ct != "application/merge-patch+json" {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "only merge patches are emulated",
            None,
        );
    }
    let Ok(p) = serde_json::from_str::<Value>(body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "error decoding patch: invalid JSON",
            None,
        );
    };
    st.revision += 1;
    let revision = st.revision.to_string();
    let k = st.consumers.get_mut(key).expect("checked");
    let before = k.obj["metadata"]["annotations"][REQUESTED_AT].clone();
    // status is a subresource: a patch to the main resource leaves it alone.
    let kept = k.obj["status"].clone();
    merge(&mut k.obj, &p);
    k.obj["status"] = kept;
    k.obj["metadata"]["resourceVersion"] = json!(revision);
    let after = k.obj["metadata"]["annotations"][REQUESTED_AT].clone();
    if after != before
        && let Some(at) = after.as_str()
    {
        k.pending = Some((at.to_string(), 0));
    }
    json_response(StatusCode::OK, &k.obj)
}

/// A namespace's objects of one kind, ordered by name as etcd returns them, from after
/// `continue` (the last name of the previous page here; opaque to clients) and at most
/// `limit` of them, with `metadata.continue` when more remain.
fn list(st: &State, kind: Kind, ns: &str, query: &str) -> Response<Full<Bytes>> {
    let mut limit = usize::MAX;
    let mut after = None;
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "limit" => match v.parse::<usize>() {
                Ok(0) => {}
                Ok(n) => limit = n,
                Err(_) => {
                    return status(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        &format!("limit: invalid value {v:?}"),
                        None,
                    );
                }
            },
            "continue" => after = Some(v.into_owned()),
            _ => {}
        }
    }
    let mut items: Vec<&Value> = st
        .consumers
        .iter()
        .filter(|((k, n, name), _)| {
            *k == kind && n == ns && after.as_deref().is_none_or(|a| name.as_str() > a)
        })
        .map(|(_, o)| &o.obj)
        .collect();
    let more = items.len() > limit;
    items.truncate(limit);
    let mut metadata = json!({"resourceVersion": st.revision.to_string()});
    if more && let Some(last) = items.last() {
        metadata["continue"] = last["metadata"]["name"].clone();
    }
    json_response(
        StatusCode::OK,
        &json!({
            "apiVersion": kind.api_version(),
            "kind": format!("{}List", kind.as_str()),
            "metadata": metadata,
            "items": items,
        }),
    )
}

/// RFC 7386 JSON merge patch.
/// source-controller handles a new requestedAt: it fetches again (as it stands: a
/// failing fetch stays failing) and echoes the request.
fn fetch(obj: &mut Value) {
    if let Some(at) = obj["metadata"]["annotations"][REQUESTED_AT].as_str()
        && obj["status"]["lastHandledReconcileAt"].as_str() != Some(at)
    {
        obj["status"]["lastHandledReconcileAt"] = json!(at);
    }
}

/// Create (POST to the collection, 409 when the name is taken) and merge-patch (404 when
/// gone) of an Event; nothing else.
fn event(
    st: &mut State,
    method: &Method,
    ns: &str,
    name: Option<&str>,
    body: &str,
) -> Response<Full<Bytes>> {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the body of the request was in an unknown format",
            None,
        );
    };
    match (method, name) {
        (&Method::POST, None) => {
            let name = v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let key = (ns.to_string(), name.clone());
            if st.events.contains_key(&key) {
                return status(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    &format!("events.events.k8s.io \"{name}\" already exists"),
                    None,
                );
            }
            st.events.insert(key, v.clone());
            json_response(StatusCode::CREATED, &v)
        }
        (&Method::PATCH, Some(name)) => {
            match st.events.get_mut(&(ns.to_string(), name.to_string())) {
                Some(obj) => {
                    merge(obj, &v);
                    json_response(StatusCode::OK, obj)
                }
                None => not_found("events.k8s.io", "events", name),
            }
        }
        _ => not_allowed(),
    }
}

fn merge(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().expect("object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({
        "type": type_, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": "2025-06-01T12:00:00Z", "observedGeneration": 1,
    })
}

fn not_found(group: &str, resource: &str, name: &str) -> Response<Full<Bytes>> {
    let what = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{what} \"{name}\" not found"),
        Some(json!({"name": name, "group": group, "kind": resource})),
    )
}

fn not_allowed() -> Response<Full<Bytes>> {
    status(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        None,
    )
}

fn status(
    code: StatusCode,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> Response<Full<Bytes>> {
    let body = crate::status::failure(code.as_u16(), reason, message, details);
    json_response(code, &body)
}

fn json_response(code: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .header("Content-Type", "application/json")
        .header("Cache-Control", "no-cache, private")
        .body(Full::new(Bytes::from(format!("{body}\n"))))
        .expect("response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rbac_attributes_as_the_authorizer_derives_them() {
        let a = |m, p| rbac_attributes(m, p).map(|(g, r, v)| format!("{g}|{r}|{v}"));
        assert_eq!(
            a("GET", "/api/v1/namespaces/kube-system/services/http:sealed-secrets-controller:http/proxy/v1/cert.pem").as_deref(),
            Some("|services/proxy|get")
        );
        assert_eq!(
            a(
                "GET",
                "/api/v1/namespaces/kube-system/services/sealed-secrets-controller"
            )
            .as_deref(),
            Some("|services|get")
        );
        assert_eq!(
            a(
                "PATCH",
                "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations/dev"
            )
            .as_deref(),
            Some("kustomize.toolkit.fluxcd.io|kustomizations|patch")
        );
        assert_eq!(
            a("GET", "/api/v1/namespaces/x/secrets").as_deref(),
            Some("|secrets|list"),
            "a collection GET is a list, not a get"
        );
        assert_eq!(
            a("POST", "/apis/coordination.k8s.io/v1/namespaces/x/leases").as_deref(),
            Some("coordination.k8s.io|leases|create")
        );
        assert_eq!(
            a("PUT", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l").as_deref(),
            Some("coordination.k8s.io|leases|update")
        );
        assert_eq!(a("GET", "/version"), None);
    }

    #[test]
    fn merge_patch_sets_and_removes() {
        let mut v = json!({"metadata": {"annotations": {"a": "1", "b": "2"}, "name": "x"}});
        merge(
            &mut v,
            &json!({"metadata": {"annotations": {"a": null, "c": "3"}}}),
        );
        assert_eq!(
            v,
            json!({"metadata": {"annotations": {"b": "2", "c": "3"}, "name": "x"}})
        );
    }
}
