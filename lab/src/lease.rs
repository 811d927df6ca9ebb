//! A Kubernetes API that serves coordination.k8s.io/v1 Leases with real optimistic
//! concurrency (one revision counter, 409 on a stale resourceVersion), for the lease
//! tests; tests/suite/realstack/conformance/ holds it to a real kube-apiserver.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fs;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::oneshot;

pub const NS: &str = "spokekeeper-test";
pub const PREFIX: &str = "/apis/coordination.k8s.io/v1/namespaces/";

/// One accepted write, as the emulator saw it.
#[derive(Clone, Debug)]
pub struct Write {
    pub name: String,
    pub holder: Option<String>,
}

#[derive(Default)]
pub struct Store {
    /// (namespace, name) -> the stored Lease.
    pub leases: HashMap<(String, String), Value>,
    /// Like etcd's revision: one counter for every write.
    pub revision: u64,
    pub writes: Vec<Write>,
}

impl Store {
    fn stamp(&mut self, obj: &mut Value, ns: &str) {
        self.revision += 1;
        let meta = &mut obj["metadata"];
        meta["namespace"] = json!(ns);
        meta["resourceVersion"] = json!(self.revision.to_string());
        if meta.get("uid").is_none() {
            meta["uid"] = json!(format!("00000000-0000-4000-8000-{:012}", self.revision));
        }
        if meta.get("creationTimestamp").is_none() {
            meta["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
        }
        self.writes.push(Write {
            name: obj["metadata"]["name"].as_str().unwrap_or_default().into(),
            holder: obj["spec"]["holderIdentity"].as_str().map(str::to_string),
        });
    }
}

pub struct Shared {
    pub store: Mutex<Store>,
    /// Milliseconds every GET waits after reading, so contenders can race.
    pub get_delay_ms: AtomicU64,
    /// Every request: (method, path).
    pub requests: Mutex<Vec<(String, String)>>,
    /// Answers for the next PUTs instead of storing them: 500, or 409 after a
    /// metadata-only write by someone else (as a label added with kubectl would).
    pub put_faults: Mutex<Vec<StatusCode>>,
}

/// A front door to the shared store; `partitioned` makes its requests hang.
pub struct Endpoint {
    pub addr: SocketAddr,
    pub partitioned: Arc<AtomicBool>,
    _stop: oneshot::Sender<()>,
}

pub struct Emulator {
    pub shared: Arc<Shared>,
    rt: Option<tokio::runtime::Runtime>,
    dir: tempfile::TempDir,
}

impl Emulator {
    pub fn new() -> Emulator {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("emulated-api")
            .enable_all()
            .build()
            .unwrap();
        Emulator {
            shared: Arc::new(Shared {
                store: Mutex::new(Store::default()),
                get_delay_ms: AtomicU64::new(0),
                requests: Mutex::new(Vec::new()),
                put_faults: Mutex::new(Vec::new()),
            }),
            rt: Some(rt),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn endpoint(&self) -> Endpoint {
        let rt = self.rt.as_ref().unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let partitioned = Arc::new(AtomicBool::new(false));
        let (stop_tx, mut stop) = oneshot::channel::<()>();
        let (shared, cut) = (self.shared.clone(), partitioned.clone());
        rt.spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stop => break,
                    accepted = listener.accept() => {
                        let Ok((tcp, _)) = accepted else { continue };
                        let (shared, cut) = (shared.clone(), cut.clone());
                        tokio::spawn(async move {
                            let service = hyper::service::service_fn(move |req| {
                                let (shared, cut) = (shared.clone(), cut.clone());
                                async move { Ok::<_, Infallible>(handle(req, &shared, &cut).await) }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(tcp), service)
                                .await;
                        });
                    }
                }
            }
        });
        Endpoint {
            addr,
            partitioned,
            _stop: stop_tx,
        }
    }

    /// A kubeconfig for `endpoint` (plain HTTP on loopback, no credentials).
    pub fn kubeconfig(&self, endpoint: &Endpoint) -> PathBuf {
        let path = self
            .dir
            .path()
            .join(format!("kubeconfig-{}", endpoint.addr.port()));
        fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: emulator\n  cluster:\n    server: http://{}\ncontexts:\n- name: emulator\n  context:\n    cluster: emulator\n    user: nobody\n    namespace: {NS}\ncurrent-context: emulator\nusers:\n- name: nobody\n  user: {{}}\n",
                endpoint.addr
            ),
        )
        .unwrap();
        path
    }

    pub fn lease(&self, name: &str) -> Option<Value> {
        let store = self.shared.store.lock().unwrap();
        store
            .leases
            .get(&(NS.to_string(), name.to_string()))
            .cloned()
    }

    pub fn holder(&self, name: &str) -> Option<String> {
        self.lease(name)
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
    }

    pub fn writes(&self, name: &str) -> Vec<Write> {
        let store = self.shared.store.lock().unwrap();
        store
            .writes
            .iter()
            .filter(|w| w.name == name)
            .cloned()
            .collect()
    }

    /// Someone else writes the lease directly: `holder`, renewed now.
    pub fn set_holder(&self, name: &str, holder: &str, renewed: SystemTime, duration_s: i64) {
        let mut store = self.shared.store.lock().unwrap();
        let key = (NS.to_string(), name.to_string());
        let mut obj = store.leases.get(&key).cloned().unwrap_or_else(|| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}})
        });
        obj["spec"] = json!({
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_s,
            "acquireTime": micro(renewed),
            "renewTime": micro(renewed),
            "leaseTransitions": 0,
        });
        store.stamp(&mut obj, NS);
        store.leases.insert(key, obj);
    }

    /// The runtime the endpoints are served on (a client's connection tasks may run there).
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("running")
    }
}

impl Default for Emulator {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

pub fn micro(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    format!(
        "{}.{:06}Z",
        t.format(&time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second]"
        ))
        .unwrap(),
        t.microsecond()
    )
}

async fn handle(
    req: Request<Incoming>,
    shared: &Shared,
    cut: &AtomicBool,
) -> Response<Full<Bytes>> {
    while cut.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let path = req.uri().path().to_string();
    shared
        .requests
        .lock()
        .unwrap()
        .push((req.method().to_string(), path.clone()));
    let Some(rest) = path.strip_prefix(PREFIX) else {
        return no_route();
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let (ns, name) = match parts.as_slice() {
        [ns, "leases"] => (ns.to_string(), None),
        [ns, "leases", name] => (ns.to_string(), Some(name.to_string())),
        _ => return no_route(),
    };
    let method = req.method().clone();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    match (method, name) {
        (Method::GET, Some(name)) => get(shared, ns, name).await,
        (Method::POST, None) => create(shared, ns, &body),
        (Method::PUT, Some(name)) => replace(shared, ns, name, &body),
        _ => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            "",
        ),
    }
}

async fn get(shared: &Shared, ns: String, name: String) -> Response<Full<Bytes>> {
    let found = shared
        .store
        .lock()
        .unwrap()
        .leases
        .get(&(ns, name.clone()))
        .cloned();
    // Read, then wait: contenders that read within the delay saw the same version.
    let delay = shared.get_delay_ms.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    match found {
        Some(obj) => respond(StatusCode::OK, &obj),
        None => not_found(&name),
    }
}

fn create(shared: &Shared, ns: String, body: &[u8]) -> Response<Full<Bytes>> {
    let Ok(mut obj) = serde_json::from_slice::<Value>(body) else {
        return bad_body();
    };
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut store = shared.store.lock().unwrap();
    let key = (ns.clone(), name.clone());
    if store.leases.contains_key(&key) {
        return status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            &format!("leases.coordination.k8s.io \"{name}\" already exists"),
            &name,
        );
    }
    store.stamp(&mut obj, &ns);
    store.leases.insert(key, obj.clone());
    respond(StatusCode::CREATED, &obj)
}

/// A PUT: the next injected fault first, then the optimistic-concurrency check.
fn replace(shared: &Shared, ns: String, name: String, body: &[u8]) -> Response<Full<Bytes>> {
    let Ok(mut obj) = serde_json::from_slice::<Value>(body) else {
        return bad_body();
    };
    if obj["metadata"]["name"].as_str() != Some(name.as_str()) {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the name of the object does not match the name on the URL",
            &name,
        );
    }
    let mut store = shared.store.lock().unwrap();
    let key = (ns.clone(), name.clone());
    let fault = {
        let mut faults = shared.put_faults.lock().unwrap();
        (!faults.is_empty()).then(|| faults.remove(0))
    };
    match fault {
        Some(StatusCode::CONFLICT) => {
            if let Some(mut other) = store.leases.get(&key).cloned() {
                store.stamp(&mut other, &ns);
                store.leases.insert(key.clone(), other);
            }
            return status(
                StatusCode::CONFLICT,
                "Conflict",
                "the object has been modified",
                &name,
            );
        }
        Some(code) => return status(code, "InternalError", "injected fault", &name),
        None => {}
    }
    let Some(current) = store.leases.get(&key) else {
        return not_found(&name);
    };
    let Some(sent) = obj["metadata"]["resourceVersion"].as_str() else {
        return status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            &format!(
                "Lease.coordination.k8s.io \"{name}\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
            ),
            &name,
        );
    };
    if Some(sent) != current["metadata"]["resourceVersion"].as_str() {
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
            &name,
        );
    }
    obj["metadata"]["uid"] = current["metadata"]["uid"].clone();
    obj["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"].clone();
    store.stamp(&mut obj, &ns);
    store.leases.insert(key, obj.clone());
    respond(StatusCode::OK, &obj)
}

fn no_route() -> Response<Full<Bytes>> {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the server could not find the requested resource",
        "",
    )
}

fn bad_body() -> Response<Full<Bytes>> {
    status(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        "the body of the request was in an unknown format",
        "",
    )
}

fn not_found(name: &str) -> Response<Full<Bytes>> {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("leases.coordination.k8s.io \"{name}\" not found"),
        name,
    )
}

fn status(code: StatusCode, reason: &str, message: &str, name: &str) -> Response<Full<Bytes>> {
    let details = json!({"name": name, "group": "coordination.k8s.io", "kind": "leases"});
    let body = crate::status::failure(code.as_u16(), reason, message, Some(details));
    respond(code, &body)
}

fn respond(code: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .header("Content-Type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}
