//! Live validation: call the spoke API with a kubeconfig before anyone relies on it.
//!
//! The client is built from the in-memory bytes (no temp file). The kubeconfig module
//! sanitizes first, but this check stands alone: a kubeconfig that could run a command,
//! read a local file, or skip TLS verification is refused before a client exists.

use std::error::Error as StdError;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};
use tokio::time::{Instant, timeout_at};

use super::sanitize_remote_text;
use crate::kubeconfig;
use crate::secret::SecretBytes;

/// Where a caller asks who it is, newest first: SelfSubjectReview is served in
/// `authentication.k8s.io/v1` from Kubernetes 1.28 and in `v1beta1` from 1.27.
const SELF_REVIEWS: [&str; 2] = [
    "/apis/authentication.k8s.io/v1/selfsubjectreviews",
    "/apis/authentication.k8s.io/v1beta1/selfsubjectreviews",
];
/// Before 1.27: an access review is authenticated, but does not say who asked.
const ACCESS_REVIEW: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
/// The user reported when only an access review could be made.
pub(crate) const UNKNOWN_USER: &str = "(unknown: pre-1.27 API)";
const ANONYMOUS: &str = "system:anonymous";

/// Who the kubeconfig authenticates as, and what answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveReport {
    /// The API server URL that was called.
    pub server: String,
    /// `gitVersion` from GET /version, e.g. `v1.33.1+k3s1`.
    pub git_version: String,
    pub platform: String,
    pub username: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("kubeconfig refused before use: {0}")]
    Unsafe(kubeconfig::KubeconfigError),
    #[error("kubeconfig does not parse: {0}")]
    Parse(&'static str),
    #[error("kubeconfig cannot be used: {0}")]
    Unusable(String),
    #[error("{server} is unreachable: {reason}")]
    Unreachable { server: String, reason: String },
    #[error(
        "x509: certificate signed by unknown authority: the CA in the kubeconfig does not match what {server} \
         presents (the spoke was rebuilt, or the address points at another cluster): extract a fresh kubeconfig"
    )]
    UnknownAuthority { server: String },
    #[error("TLS with {server} failed: {reason}")]
    Tls { server: String, reason: String },
    #[error(
        "{server} rejected the client certificate (401 Unauthorized): it expired, or was issued by another \
         cluster's client CA: extract a fresh kubeconfig"
    )]
    Unauthorized { server: String },
    #[error(
        "{server} took the credential as anonymous (system:anonymous): it presented no client certificate or \
         token the server accepts: extract a fresh kubeconfig"
    )]
    Anonymous { server: String },
    #[error(
        "{server} accepted the credential but it may not get namespaces; before Kubernetes 1.27 that is how \
         spokekeeper proves a credential works (there is no SelfSubjectReview): use the node's admin kubeconfig"
    )]
    NotAllowed { server: String },
    #[error("{server} answered 403 Forbidden: {message}")]
    Forbidden { server: String, message: String },
    #[error("{server} did not answer within {secs}s")]
    TimedOut { server: String, secs: f64 },
    #[error("{server} answered {code}: {message}")]
    Api {
        server: String,
        code: u16,
        message: String,
    },
    #[error("calling {server} failed: {reason}")]
    Other { server: String, reason: String },
}

/// Builds a client from `kubeconfig` (its current context), calls GET /version and
/// asks who it is: a SelfSubjectReview (v1, else v1beta1), else, before 1.27, a
/// SelfSubjectAccessReview that must be allowed. Everything, client setup included,
/// within `limit`.
pub async fn check_live(
    kubeconfig: &SecretBytes,
    limit: Duration,
) -> Result<LiveReport, LiveError> {
    let secs = limit.as_secs_f64();
    let deadline = Instant::now() + limit;
    let (client, server) = client_until(kubeconfig, limit, deadline).await?;
    let calls = async {
        let version = client
            .apiserver_version()
            .await
            .map_err(|e| classify(&server, secs, &e))?;
        let who = who_am_i(&client, &server, secs).await?;
        Ok((version, who))
    };
    let (version, who) = timeout_at(deadline, calls)
        .await
        .map_err(|_| LiveError::TimedOut {
            server: server.clone(),
            secs,
        })??;
    Ok(LiveReport {
        git_version: crate::text::one_line(&version.git_version, 256),
        platform: crate::text::one_line(&version.platform, 256),
        username: who.username,
        uid: who.uid,
        groups: who.groups,
        server,
    })
}

/// Whether `kubeconfig`'s identity may impersonate the ServiceAccount `namespace/name`
/// (a SelfSubjectAccessReview: verb impersonate, resource serviceaccounts), as Flux does
/// with spec.serviceAccountName. Everything within `limit`.
pub async fn may_impersonate(
    kubeconfig: &SecretBytes,
    limit: Duration,
    namespace: &str,
    name: &str,
) -> Result<bool, LiveError> {
    let secs = limit.as_secs_f64();
    let deadline = Instant::now() + limit;
    let (client, server) = client_until(kubeconfig, limit, deadline).await?;
    let body = serde_json::json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {
            "verb": "impersonate", "group": "", "resource": "serviceaccounts",
            "namespace": namespace, "name": name,
        }},
    });
    let review = timeout_at(deadline, post(&client, ACCESS_REVIEW, &body))
        .await
        .map_err(|_| LiveError::TimedOut {
            server: server.clone(),
            secs,
        })?
        .map_err(|e| classify(&server, secs, &e))?;
    Ok(review["status"]["allowed"].as_bool() == Some(true))
}

/// A client for the kubeconfig's current context, every request bounded by `limit`,
/// after the same safety checks as [`check_live`]; and the server URL it calls.
pub async fn client(
    kubeconfig: &SecretBytes,
    limit: Duration,
) -> Result<(Client, String), LiveError> {
    client_until(kubeconfig, limit, Instant::now() + limit).await
}

async fn client_until(
    kubeconfig: &SecretBytes,
    limit: Duration,
    deadline: Instant,
) -> Result<(Client, String), LiveError> {
    let text =
        std::str::from_utf8(kubeconfig.expose()).map_err(|_| LiveError::Parse("not UTF-8"))?;
    refuse_unsafe(kubeconfig.expose())?;
    let parsed = Kubeconfig::from_yaml(text).map_err(|e| LiveError::Parse(parse_reason(&e)))?;
    // kube builds its rustls config from the process default provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = timeout_at(
        deadline,
        Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default()),
    )
    .await
    .map_err(|_| LiveError::Unusable("loading it did not finish in time".into()))?
    .map_err(|e| LiveError::Unusable(unusable_reason(&e)))?;
    config.connect_timeout = Some(limit);
    config.read_timeout = Some(limit);
    config.write_timeout = Some(limit);
    // Belt and braces after refuse_unsafe; and no HTTPS_PROXY from the environment:
    // the live check must reach the spoke the way the probe does, directly.
    config.accept_invalid_certs = false;
    config.proxy_url = None;
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|e| {
        LiveError::Unusable(format!(
            "cannot build a client from its certificates or key ({})",
            kind_of(&e)
        ))
    })?;
    Ok((client, server))
}

struct Who {
    username: String,
    uid: Option<String>,
    groups: Vec<String>,
}

/// The newest review the server has; a 404 (not served) moves on to the next.
async fn who_am_i(client: &Client, server: &str, secs: f64) -> Result<Who, LiveError> {
    for path in SELF_REVIEWS {
        let api_version = path
            .trim_start_matches("/apis/")
            .trim_end_matches("/selfsubjectreviews");
        let body = serde_json::json!({"apiVersion": api_version, "kind": "SelfSubjectReview"});
        match post(client, path, &body).await {
            Ok(review) => return self_review(server, &review),
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(kube::Error::Api(status)) if names_anonymous(&status) => {
                return Err(LiveError::Anonymous {
                    server: server.to_owned(),
                });
            }
            Err(e) => return Err(classify(server, secs, &e)),
        }
    }
    let body = serde_json::json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "get", "resource": "namespaces"}},
    });
    let review = match post(client, ACCESS_REVIEW, &body).await {
        Ok(r) => r,
        Err(kube::Error::Api(status)) if names_anonymous(&status) => {
            return Err(LiveError::Anonymous {
                server: server.to_owned(),
            });
        }
        Err(e) => return Err(classify(server, secs, &e)),
    };
    if review["status"]["allowed"].as_bool() != Some(true) {
        return Err(LiveError::NotAllowed {
            server: server.to_owned(),
        });
    }
    Ok(Who {
        username: UNKNOWN_USER.to_owned(),
        uid: None,
        groups: Vec::new(),
    })
}

/// A 403 for `system:anonymous`: the server did not take the credential at all.
fn names_anonymous(status: &kube::core::Status) -> bool {
    status.code == 403 && status.message.contains(&format!("\"{ANONYMOUS}\""))
}

/// The user a SelfSubjectReview names: remote text (it goes into commit messages), so
/// escaped and shortened.
fn self_review(server: &str, review: &serde_json::Value) -> Result<Who, LiveError> {
    let user = &review["status"]["userInfo"];
    let text = |v: &serde_json::Value| v.as_str().map(|s| crate::text::one_line(s, 256));
    let username = text(&user["username"]).unwrap_or_default();
    if username == ANONYMOUS {
        return Err(LiveError::Anonymous {
            server: server.to_owned(),
        });
    }
    let groups = user["groups"]
        .as_array()
        .map(|g| g.iter().take(64).filter_map(text).collect())
        .unwrap_or_default();
    Ok(Who {
        username,
        uid: text(&user["uid"]),
        groups,
    })
}

async fn post(
    client: &Client,
    path: &str,
    body: &serde_json::Value,
) -> Result<serde_json::Value, kube::Error> {
    let request = hyper::Request::post(path)
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(body).map_err(kube::Error::SerdeError)?)
        .map_err(kube::Error::HttpError)?;
    client.request::<serde_json::Value>(request).await
}

/// Refuses anything that would make building or using the client do more than talk
/// TLS to the server with embedded credentials: the kubeconfig module's one rule set,
/// over every entry, not just the current.
fn refuse_unsafe(bytes: &[u8]) -> Result<(), LiveError> {
    let ours = kubeconfig::parse(bytes).map_err(|e| LiveError::Parse(our_parse_reason(&e)))?;
    match ours.forbidden().into_iter().next() {
        Some(first) => Err(LiveError::Unsafe(first)),
        None => Ok(()),
    }
}

// Our parser's messages are about shape and limits, never values; only the category is
// kept all the same, as for kube's parser below.
fn our_parse_reason(e: &kubeconfig::KubeconfigError) -> &'static str {
    match e {
        kubeconfig::KubeconfigError::TooLarge { .. } => "over the size limit for a kubeconfig",
        _ => "not YAML, or not shaped like a kubeconfig",
    }
}

// The parser's own messages can quote the input, which may be key material: only the
// category is kept.
fn parse_reason(e: &KubeconfigError) -> &'static str {
    match e {
        KubeconfigError::Parse(_) => "not YAML, or not shaped like a kubeconfig",
        KubeconfigError::KindMismatch | KubeconfigError::ApiVersionMismatch => {
            "several documents of different kinds or versions"
        }
        _ => "invalid kubeconfig",
    }
}

fn unusable_reason(e: &KubeconfigError) -> String {
    let what = match e {
        KubeconfigError::CurrentContextNotSet => "no current-context",
        KubeconfigError::LoadContext(_) => "the current-context names no context",
        KubeconfigError::LoadClusterOfContext(_) => "the context names no cluster",
        KubeconfigError::MissingClusterUrl => "the cluster has no server URL",
        KubeconfigError::ParseClusterUrl(_) => "the server URL does not parse",
        KubeconfigError::LoadCertificateAuthority(_) => {
            "certificate-authority-data is not valid base64"
        }
        KubeconfigError::LoadClientCertificate(_) => {
            "client-certificate-data is missing or not valid base64"
        }
        KubeconfigError::LoadClientKey(_) => "client-key-data is missing or not valid base64",
        KubeconfigError::ParseCertificates(_) => {
            "certificate-authority-data is not PEM certificates"
        }
        _ => "the configuration is incomplete",
    };
    what.to_owned()
}

/// The Rust type of an error, never its message: messages may quote key bytes.
fn kind_of(e: &kube::Error) -> &'static str {
    match e {
        kube::Error::RustlsTls(_) => "the client certificate or key does not load",
        kube::Error::TlsRequired => "the server URL is not https",
        _ => "client setup failed",
    }
}

pub(crate) fn classify(server: &str, secs: f64, e: &kube::Error) -> LiveError {
    let server = server.to_owned();
    if let kube::Error::Api(status) = e {
        let message = sanitize_remote_text(&status.message, 200);
        return match status.code {
            401 => LiveError::Unauthorized { server },
            403 => LiveError::Forbidden { server, message },
            code => LiveError::Api {
                server,
                code,
                message,
            },
        };
    }
    // io::Error::source() skips the error it wraps, so io errors are opened with get_ref().
    let mut cause: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = cause {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return classify_tls(server, tls);
        }
        let Some(io) = err.downcast_ref::<std::io::Error>() else {
            cause = err.source();
            continue;
        };
        use std::io::ErrorKind as K;
        let reason = match io.kind() {
            K::ConnectionRefused => Some("connection refused (API server down, or wrong port)"),
            K::TimedOut => return LiveError::TimedOut { server, secs },
            K::HostUnreachable | K::NetworkUnreachable => Some("no route to the host"),
            K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof => {
                Some("the connection was closed by the server")
            }
            _ => None,
        };
        if let Some(reason) = reason {
            return LiveError::Unreachable {
                server,
                reason: reason.into(),
            };
        }
        cause = io.get_ref().map(|inner| inner as &(dyn StdError + 'static));
    }
    LiveError::Other {
        server,
        reason: sanitize_remote_text(&e.to_string(), 200),
    }
}

fn classify_tls(server: String, e: &rustls::Error) -> LiveError {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    match e {
        E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => LiveError::UnknownAuthority { server },
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => LiveError::Tls {
            server,
            reason: "the serving certificate does not cover this address (x509: certificate is valid for other names)"
                .into(),
        },
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            LiveError::Tls { server, reason: "the serving certificate has expired".into() }
        }
        // Servers that check client certificates during the handshake reject them here.
        E::AlertReceived(A::BadCertificate | A::CertificateExpired | A::UnknownCA | A::CertificateRequired) => {
            LiveError::Unauthorized { server }
        }
        E::InvalidMessage(_) => LiveError::Tls { server, reason: "the server does not speak TLS on that port".into() },
        other => LiveError::Tls { server, reason: other.to_string() },
    }
}

#[cfg(test)]
mod tests;
