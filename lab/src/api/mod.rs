//! A mock spoke API server: real TLS, real client-certificate authentication, and the
//! wire behaviour of kube-apiserver for GET /version, POST selfsubjectreviews (v1 from
//! 1.28, v1beta1 in 1.27 to 1.32, by the gitVersion it plays) and selfsubjectaccessreviews;
//! and, through [`Objects`], the CSR and ClusterRoleBinding calls of minted credentials
//! (with the node's CSR signer, or without one). Started with a [`SpokeTrust`]
//! (`--authentication-config`), it also takes the hub's bearer tokens, serves /metrics
//! and SubjectAccessReviews (federated credentials). tests/suite/realstack/conformance/ holds
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

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
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

use super::federation::authn::SpokeTrust;
use super::objects::{Objects, Signer};
use super::pki::Pki;
use routes::respond;

mod discovery;
mod federated;
mod routes;

pub const SSR_PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
pub const SSR_BETA_PATH: &str = "/apis/authentication.k8s.io/v1beta1/selfsubjectreviews";
pub const SSAR_PATH: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
pub const SAR_PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

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
    /// `--authentication-config`: the hub issuers whose bearer tokens it lets in.
    trust: Option<Arc<SpokeTrust>>,
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
            trust: None,
        }
    }

    /// Started with `--authentication-config`: bearer tokens are authenticated by the
    /// file `trust` reads, and /metrics says which file it runs.
    pub fn with_trust(self, trust: SpokeTrust) -> ApiIdentity {
        ApiIdentity {
            trust: Some(Arc::new(trust)),
            ..self
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
    let certified = authenticate(
        tls.get_ref().1.peer_certificates(),
        identity.authenticator.as_ref(),
    );
    let service = hyper::service::service_fn(move |req| {
        let user = who(&req, certified.as_ref(), &identity);
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

/// The request's user: its client certificate's (the x509 authenticator comes first),
/// else its bearer token's, else `system:anonymous` when allowed. A bearer token that is
/// refused is a 401, never anonymous (kube-apiserver's union fails on it).
fn who(
    req: &hyper::Request<hyper::body::Incoming>,
    certified: Option<&User>,
    identity: &ApiIdentity,
) -> Option<User> {
    if let Some(user) = certified {
        return Some(user.clone());
    }
    let bearer = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if let Some(token) = bearer {
        let name = identity.trust.as_ref()?.authenticate(token.trim())?;
        return Some(User {
            name,
            groups: vec!["system:authenticated".into()],
        });
    }
    identity.anonymous.then(|| User {
        name: ANONYMOUS.into(),
        groups: vec!["system:unauthenticated".into()],
    })
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
