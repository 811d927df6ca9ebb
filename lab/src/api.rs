//! A mock spoke API server: real TLS, real client-certificate authentication, and the
//! wire behaviour of kube-apiserver for GET /version, POST selfsubjectreviews (v1 from
//! 1.28, v1beta1 in 1.27 to 1.32, by the gitVersion it plays) and selfsubjectaccessreviews;
//! and, through [`Objects`], the CSR and ClusterRoleBinding calls of minted credentials
//! (with the node's CSR signer, or without one). tests/suite/realstack/conformance.rs holds
//! it to a real kube-apiserver and kube-controller-manager.
//!
//! Like kube-apiserver, client certificates are requested but optional at the TLS layer
//! (Go's tls.RequestClientCert); authentication happens per request, and a missing,
//! foreign or expired certificate gets a 401 Status, not a failed handshake.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::crypto::ring;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use tokio::net::{TcpListener, TcpSocket};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::objects::{self, Attributes, Caller, Objects, Signer};
use super::pki::Pki;

pub const SSR_PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
pub const SSR_BETA_PATH: &str = "/apis/authentication.k8s.io/v1beta1/selfsubjectreviews";
pub const SSAR_PATH: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

/// What one API server instance serves; rebuilt with the node.
pub struct ApiIdentity {
    tls: Arc<ServerConfig>,
    authenticator: Arc<dyn ClientCertVerifier>,
    git_version: String,
    /// Served under this path only, as behind a reverse proxy (`/k8s/spoke`; empty: none).
    prefix: String,
    /// `--anonymous-auth`: a caller without a valid certificate is `system:anonymous`
    /// (default RBAC: /version only) rather than a 401.
    anonymous: bool,
    /// CSRs and ClusterRoleBindings, shared by whoever holds the handle.
    objects: Arc<Mutex<Objects>>,
}

impl ApiIdentity {
    pub fn new(pki: &Pki, git_version: &str) -> ApiIdentity {
        let provider = Arc::new(ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from(pki.client_ca_der.clone()))
            .expect("client CA");
        let authenticator =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()
                .expect("client verifier");
        let tls = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_client_cert_verifier(Arc::new(RequestClientCert(authenticator.clone())))
            .with_single_cert(pki.serving_chain.clone(), pki.serving_key())
            .expect("serving certificate");
        ApiIdentity {
            tls: Arc::new(tls),
            authenticator,
            git_version: git_version.to_owned(),
            prefix: String::new(),
            anonymous: false,
            objects: Arc::new(Mutex::new(Objects::new(Signer::client_ca(pki)))),
        }
    }

    /// No CSR signer runs on this node (no controller manager, or one without
    /// `--cluster-signing-*`): an approved CSR is never signed and gets no condition.
    pub fn without_signer(self) -> ApiIdentity {
        ApiIdentity {
            objects: Arc::new(Mutex::new(Objects::new(Signer::Missing))),
            ..self
        }
    }

    /// Serves `objects` (e.g. those of the same node before a restart), as an API server
    /// over the same etcd would.
    pub fn with_objects(self, objects: Arc<Mutex<Objects>>) -> ApiIdentity {
        ApiIdentity { objects, ..self }
    }

    /// The stored CSRs and bindings: a test inspects them, or makes approvals denials.
    pub fn objects(&self) -> Arc<Mutex<Objects>> {
        self.objects.clone()
    }

    /// Serves the API under `prefix` only (e.g. `/k8s/spoke`), as a reverse proxy would.
    pub fn with_prefix(self, prefix: &str) -> ApiIdentity {
        ApiIdentity {
            prefix: prefix.trim_end_matches('/').to_owned(),
            ..self
        }
    }

    /// Anonymous requests are allowed as `system:anonymous`, as kube-apiserver's
    /// default `--anonymous-auth=true` does.
    pub fn with_anonymous(self) -> ApiIdentity {
        ApiIdentity {
            anonymous: true,
            ..self
        }
    }
}

/// The review endpoints a version serves: SelfSubjectReview v1 from 1.28, v1beta1 from
/// 1.27 until its removal in 1.33 (upstream's prerelease lifecycle; a real 1.37 serves no
/// v1beta1); SelfSubjectAccessReview always.
fn serves(git_version: &str, path: &str) -> bool {
    let minor: u32 = git_version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or(33);
    match path {
        SSR_PATH | AUTHN_V1 => minor >= 28,
        SSR_BETA_PATH | AUTHN_V1BETA1 => serves_v1beta1(minor),
        "/version" | SSAR_PATH | "/api" | "/api/v1" | "/apis" | AUTHZ_V1 | NAMESPACES => true,
        _ => false,
    }
}

/// authentication.k8s.io/v1beta1: introduced in 1.27, no longer served from 1.33.
fn serves_v1beta1(minor: u32) -> bool {
    (27..33).contains(&minor)
}

const AUTHN_V1: &str = "/apis/authentication.k8s.io/v1";
const AUTHN_V1BETA1: &str = "/apis/authentication.k8s.io/v1beta1";
const AUTHZ_V1: &str = "/apis/authorization.k8s.io/v1";

/// Legacy discovery for what this server serves (clients such as controller-runtime's,
/// which Flux uses, look a kind up there before they call it).
fn discovery(path: &str, minor: u32) -> Option<serde_json::Value> {
    let resource = |name: &str, kind: &str| {
        serde_json::json!({"name": name, "singularName": name.trim_end_matches('s'),
            "namespaced": false, "kind": kind, "verbs": ["create"]})
    };
    let list = |gv: &str, resources: Vec<serde_json::Value>| {
        serde_json::json!({"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": gv, "resources": resources})
    };
    let version = |gv: &str, v: &str| serde_json::json!({"groupVersion": gv, "version": v});
    Some(match path {
        "/api" => serde_json::json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]}),
        "/api/v1" => list("v1", vec![]),
        "/apis" => {
            let mut authn = Vec::new();
            if minor >= 28 {
                authn.push(version("authentication.k8s.io/v1", "v1"));
            }
            if serves_v1beta1(minor) {
                authn.push(version("authentication.k8s.io/v1beta1", "v1beta1"));
            }
            let mut groups = Vec::new();
            if let Some(preferred) = authn.first().cloned() {
                groups.push(serde_json::json!({"name": "authentication.k8s.io",
                    "versions": authn, "preferredVersion": preferred}));
            }
            let authz = version("authorization.k8s.io/v1", "v1");
            groups.push(serde_json::json!({"name": "authorization.k8s.io",
                "versions": [authz.clone()], "preferredVersion": authz}));
            serde_json::json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        }
        AUTHN_V1 => list(
            "authentication.k8s.io/v1",
            vec![resource("selfsubjectreviews", "SelfSubjectReview")],
        ),
        AUTHN_V1BETA1 => list(
            "authentication.k8s.io/v1beta1",
            vec![resource("selfsubjectreviews", "SelfSubjectReview")],
        ),
        AUTHZ_V1 => list(
            "authorization.k8s.io/v1",
            vec![resource(
                "selfsubjectaccessreviews",
                "SelfSubjectAccessReview",
            )],
        ),
        _ => return None,
    })
}

/// A running server; dropping it stops it (the port is closed when drop returns).
pub struct ApiServer {
    stop: Option<oneshot::Sender<()>>,
    done: std_mpsc::Receiver<()>,
    pub port: u16,
}

impl ApiServer {
    /// Binds `addr` (port 0: any) on the lab runtime and serves until dropped.
    pub fn start(
        rt: &Handle,
        addr: SocketAddr,
        identity: ApiIdentity,
    ) -> std::io::Result<ApiServer> {
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        let (done_tx, done_rx) = std_mpsc::channel();
        rt.spawn(async move {
            let listener = match bind(addr) {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let port = listener.local_addr().map(|a| a.port());
            let _ = ready_tx.send(port);
            serve(listener, Arc::new(identity), stop_rx).await;
            let _ = done_tx.send(());
        });
        let port = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| std::io::Error::other("the lab runtime did not start the API server"))??;
        Ok(ApiServer {
            stop: Some(stop_tx),
            done: done_rx,
            port,
        })
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
            let _ = self.done.recv_timeout(Duration::from_secs(10));
        }
    }
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // Rebuilds rebind the same port while old connections sit in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

async fn serve(listener: TcpListener, identity: Arc<ApiIdentity>, mut stop: oneshot::Receiver<()>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => {
                if let Ok((tcp, _)) = accepted {
                    conns.spawn(connection(tcp, identity.clone()));
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    conns.shutdown().await;
}

async fn connection(tcp: tokio::net::TcpStream, identity: Arc<ApiIdentity>) {
    let acceptor = TlsAcceptor::from(identity.tls.clone());
    let Ok(Ok(tls)) = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
    else {
        return;
    };
    let user = authenticate(
        tls.get_ref().1.peer_certificates(),
        identity.authenticator.as_ref(),
    );
    let user = user.or_else(|| {
        identity.anonymous.then(|| User {
            name: ANONYMOUS.into(),
            groups: vec!["system:unauthenticated".into()],
        })
    });
    let service = hyper::service::service_fn(move |req| {
        let user = user.clone();
        let identity = identity.clone();
        async move { Ok::<_, Infallible>(respond(req, user.as_ref(), &identity).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), service)
        .await;
}

const ANONYMOUS: &str = "system:anonymous";

#[derive(Clone, Debug)]
struct User {
    name: String,
    groups: Vec<String>,
}

/// The x509 authenticator: chain to the client CA, valid now, clientAuth; the user is
/// the subject CN and the groups its O values.
fn authenticate(
    certs: Option<&[CertificateDer<'static>]>,
    verifier: &dyn ClientCertVerifier,
) -> Option<User> {
    let (leaf, intermediates) = certs?.split_first()?;
    verifier
        .verify_client_cert(leaf, intermediates, UnixTime::now())
        .ok()?;
    let (_, cert) = X509Certificate::from_der(leaf).ok()?;
    let name = cert
        .subject()
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_owned();
    let mut groups: Vec<String> = cert
        .subject()
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    groups.push("system:authenticated".into());
    Some(User { name, groups })
}

async fn respond(
    req: Request<Incoming>,
    user: Option<&User>,
    identity: &ApiIdentity,
) -> Response<Full<Bytes>> {
    let Some(user) = user else {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
    };
    let path = req.uri().path().to_owned();
    let path = match path.strip_prefix(identity.prefix.as_str()) {
        Some(p) if p.starts_with('/') => p,
        _ => return not_found(),
    };
    if Objects::serves(path) {
        return objects_reply(req, user, identity, path).await;
    }
    let kind = match path {
        SSR_PATH | SSR_BETA_PATH => "SelfSubjectReview",
        SSAR_PATH => "SelfSubjectAccessReview",
        _ => "",
    };
    let minor: u32 = identity
        .git_version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or(33);
    // Discovery is for authenticated users only (system:discovery).
    if user.name == ANONYMOUS && kind.is_empty() && path != "/version" {
        return status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!("forbidden: User \"{ANONYMOUS}\" cannot get path \"{path}\""),
        );
    }
    // Authorization comes before routing: default RBAC lets anonymous callers read
    // /version and nothing else.
    if user.name == ANONYMOUS && !kind.is_empty() {
        let (resource, group) = match kind {
            "SelfSubjectReview" => ("selfsubjectreviews", "authentication.k8s.io"),
            _ => ("selfsubjectaccessreviews", "authorization.k8s.io"),
        };
        return status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!(
                "{resource}.{group} is forbidden: User \"{ANONYMOUS}\" cannot create resource \"{resource}\" in API group \"{group}\" at the cluster scope"
            ),
        );
    }
    // A user outside system:masters is authorized by its bindings, before routing: an
    // unbound minted user is refused (403), whatever it asks for.
    if kind.is_empty()
        && let Some(attrs) = objects::attributes_of(req.method().as_str(), path)
    {
        let caller = Caller {
            name: &user.name,
            groups: &user.groups,
        };
        let allowed = identity
            .objects
            .lock()
            .map(|o| o.allows(&caller, &attrs))
            .unwrap_or(false);
        if !allowed {
            let refused = objects::forbidden(&caller, &attrs);
            return json(StatusCode::FORBIDDEN, &refused.body, false);
        }
    }
    let git_version = identity.git_version.as_str();
    if !serves(git_version, path) {
        return not_found_at(path);
    }
    match (req.method(), path) {
        (&Method::GET, "/version") => json(StatusCode::OK, &version(git_version), true),
        (&Method::GET, NAMESPACES) => json(StatusCode::OK, &namespaces(), false),
        (&Method::GET, _) if discovery(path, minor).is_some() => json(
            StatusCode::OK,
            &discovery(path, minor).expect("checked"),
            false,
        ),
        (&Method::POST, SSR_PATH | SSR_BETA_PATH | SSAR_PATH) => {
            let req_protobuf = req
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/vnd.kubernetes.protobuf"));
            let body = match Limited::new(req.into_body(), 3 << 20).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return status(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "RequestEntityTooLarge",
                        "request is too large",
                    );
                }
            };
            // Clients of built-in types may send protobuf (controller-runtime's, as
            // Flux uses, does): the envelope is "k8s\0" and TypeMeta names the kind.
            // A review's request has nothing else to read; the answer is JSON, which
            // such clients accept too.
            let protobuf = req_protobuf && body.starts_with(b"k8s\0");
            let parsed: Result<serde_json::Value, _> = if protobuf {
                if body.windows(kind.len()).any(|w| w == kind.as_bytes()) {
                    Ok(serde_json::json!({ "kind": kind }))
                } else {
                    Ok(serde_json::json!({ "kind": "Unknown" }))
                }
            } else {
                serde_json::from_slice(&body)
            };
            match parsed {
                Ok(v)
                    if v.get("kind")
                        .and_then(|k| k.as_str())
                        .is_none_or(|k| k == kind) =>
                {
                    let allowed = path == SSAR_PATH && access_allowed(user, identity, &v);
                    json(StatusCode::CREATED, &review(path, user, &v, allowed), false)
                }
                _ => status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "the body of the request was in an unknown format",
                ),
            }
        }
        _ => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
    }
}

/// The namespaces a fresh cluster has.
const NAMESPACES: &str = "/api/v1/namespaces";

fn namespaces() -> serde_json::Value {
    let items: Vec<serde_json::Value> =
        ["default", "kube-node-lease", "kube-public", "kube-system"]
            .iter()
            .map(|n| {
                serde_json::json!({"metadata": {"name": n}, "spec": {"finalizers": ["kubernetes"]},
                               "status": {"phase": "Active"}})
            })
            .collect();
    serde_json::json!({"kind": "NamespaceList", "apiVersion": "v1",
                       "metadata": {"resourceVersion": "1"}, "items": items})
}

/// A path nothing serves, as kube-apiserver answers it: under /api or a group it
/// serves (both review groups exist in every version), a 404 `Status`; elsewhere, Go's
/// plain-text "404 page not found".
fn not_found_at(path: &str) -> Response<Full<Bytes>> {
    let served_group = [
        "/api/",
        "/apis/authentication.k8s.io/",
        "/apis/authorization.k8s.io/",
    ]
    .iter()
    .any(|g| path.starts_with(g) || path == g.trim_end_matches('/'));
    if served_group {
        return not_found();
    }
    Response::builder()
        .status(StatusCode::NOT_FOUND)
        .header("Content-Type", "text/plain; charset=utf-8")
        .header("X-Content-Type-Options", "nosniff")
        .body(Full::new(Bytes::from("404 page not found\n")))
        .expect("valid response")
}

/// A missing resource, as kube-apiserver answers it: 404 with a `Status`.
fn not_found() -> Response<Full<Bytes>> {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// Whether an access review's resource attributes are allowed to `user`: by
/// system:masters or a binding to cluster-admin (see [`Objects::allows`]).
fn access_allowed(user: &User, identity: &ApiIdentity, request: &serde_json::Value) -> bool {
    let ra = &request["spec"]["resourceAttributes"];
    let field = |k: &str| ra[k].as_str().unwrap_or_default().to_owned();
    let attrs = Attributes {
        verb: field("verb"),
        group: field("group"),
        resource: field("resource"),
        subresource: field("subresource"),
        name: field("name"),
        namespace: field("namespace"),
    };
    let caller = Caller {
        name: &user.name,
        groups: &user.groups,
    };
    identity
        .objects
        .lock()
        .map(|o| o.allows(&caller, &attrs))
        .unwrap_or(false)
}

/// A CSR, ClusterRoleBinding or ClusterRole call, answered by the store.
async fn objects_reply(
    req: Request<Incoming>,
    user: &User,
    identity: &ApiIdentity,
    path: &str,
) -> Response<Full<Bytes>> {
    let method = req.method().as_str().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let Ok(body) = Limited::new(req.into_body(), 3 << 20).collect().await else {
        return status(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            "request is too large",
        );
    };
    let caller = Caller {
        name: &user.name,
        groups: &user.groups,
    };
    let reply = match identity.objects.lock() {
        Ok(mut o) => o.handle(&caller, &method, path, &query, &body.to_bytes()),
        Err(_) => {
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "the store is poisoned",
            );
        }
    };
    let code = StatusCode::from_u16(reply.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(code, &reply.body, false)
}

/// The created review: who asked, or (an access review) whether they may.
fn review(
    path: &str,
    user: &User,
    request: &serde_json::Value,
    allowed: bool,
) -> serde_json::Value {
    if path == SSAR_PATH {
        return serde_json::json!({
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "spec": request.get("spec").cloned().unwrap_or_default(),
            "status": {"allowed": allowed},
        });
    }
    let api_version = if path == SSR_PATH {
        "authentication.k8s.io/v1"
    } else {
        "authentication.k8s.io/v1beta1"
    };
    serde_json::json!({
        "kind": "SelfSubjectReview",
        "apiVersion": api_version,
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": {"username": user.name, "groups": user.groups}},
    })
}

fn version(git_version: &str) -> serde_json::Value {
    let minor = git_version.split('.').nth(1).unwrap_or("33").to_owned();
    serde_json::json!({
        "major": "1",
        "minor": minor,
        "emulationMajor": "1",
        "emulationMinor": minor,
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": git_version,
        "gitCommit": "99d91538b1327da933356c318dc8040335fbb66c",
        "gitTreeState": "clean",
        "buildDate": "2025-05-14T23:49:42Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// A metav1.Status failure, as the API server writes it.
fn status(code: StatusCode, reason: &str, message: &str) -> Response<Full<Bytes>> {
    let body = crate::status::failure(code.as_u16(), reason, message, None);
    json(code, &body, false)
}

fn json(code: StatusCode, body: &serde_json::Value, pretty: bool) -> Response<Full<Bytes>> {
    let mut text = if pretty {
        serde_json::to_string_pretty(body)
    } else {
        serde_json::to_string(body)
    }
    .expect("JSON serializes");
    text.push('\n');
    Response::builder()
        .status(code)
        .header("Audit-Id", audit_id())
        .header("Cache-Control", "no-cache, private")
        .header("Content-Type", "application/json")
        .header(
            "X-Kubernetes-Pf-Flowschema-Uid",
            "00000000-0000-0000-0000-000000000000",
        )
        .body(Full::new(Bytes::from(text)))
        .expect("valid response")
}

fn audit_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{:08x}-0000-4000-8000-{:012x}", std::process::id(), n)
}

/// Requests a client certificate and checks the handshake signature (so the client
/// holds the key), but accepts any chain: authentication is per request, as in Go.
#[derive(Debug)]
struct RequestClientCert(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // What a real kube-apiserver answers (tests/suite/realstack/conformance.rs checks it
    // against 1.37).
    #[test]
    fn v1beta1_reviews_are_served_from_1_27_until_1_33() {
        assert!(!serves("v1.26.9", SSR_BETA_PATH));
        assert!(serves("v1.27.3+k3s1", SSR_BETA_PATH));
        assert!(serves("v1.32.1", AUTHN_V1BETA1));
        assert!(!serves("v1.33.1+k3s1", SSR_BETA_PATH));
        assert!(!serves("v1.37.2", AUTHN_V1BETA1));
        assert!(serves("v1.37.2", SSR_PATH));
    }

    #[test]
    fn unknown_paths_are_a_status_only_under_served_groups() {
        let content_type = |path: &str| {
            let r = not_found_at(path);
            assert_eq!(r.status(), StatusCode::NOT_FOUND);
            r.headers()["Content-Type"].to_str().unwrap().to_owned()
        };
        assert_eq!(content_type("/api/v1/nothing"), "application/json");
        assert_eq!(
            content_type("/apis/authentication.k8s.io/v1beta1"),
            "application/json"
        );
        assert_eq!(
            content_type("/apis/nothing.example.org/v1"),
            "text/plain; charset=utf-8"
        );
        assert_eq!(content_type("/nothing"), "text/plain; charset=utf-8");
    }
}
