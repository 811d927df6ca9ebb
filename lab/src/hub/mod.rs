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
//! - a federated spoke's ConfigMap, applied as the SealedSecrets are, its consumers
//!   through `configMapRef`; TokenRequests for the hub's ServiceAccounts, signed by its
//!   issuer ([`crate::federation::Issuer`]).
//!
//! Errors are metav1 Status objects. Plain HTTP on loopback, no authentication. Every
//! request is recorded, so tests can hold the client to its RBAC contract.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use flux::git_repository;
use routes::handle;

mod federated;
mod flux;
mod routes;
mod sealed;
mod setup;
mod sops;
#[cfg(test)]
mod tests;

pub use routes::rbac_attributes;
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
    /// The ServiceAccount issuer TokenRequests are signed by (None: tokens for no one).
    issuer: Option<Arc<crate::federation::Issuer>>,
    /// (namespace, name) -> uid of the ServiceAccounts tokens may be requested for.
    service_accounts: BTreeMap<(String, String), String>,
    /// Federated spokes: their ConfigMap instead of a SealedSecret.
    federated: Vec<SimSpoke>,
    /// (namespace, name) -> ConfigMap, as Flux applied it.
    config_maps: BTreeMap<(String, String), Value>,
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
            issuer: None,
            service_accounts: BTreeMap::new(),
            federated: Vec::new(),
            config_maps: BTreeMap::new(),
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
