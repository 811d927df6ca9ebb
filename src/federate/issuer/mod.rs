//! The hub's issuers as spokekeeper sees them, once per tick: the CA files that verify
//! their discovery endpoints (read once per tick per file, so an edit of the file's
//! content, e.g. the hub's old and new CA together, rewrites every spoke's file), and
//! each issuer's discovery document and keys fetched from here, the certificate serving
//! them graded before a spoke sees it expire.
//!
//! What a spoke's API server needs (k8s.io/apiserver v0.37.2,
//! plugin/pkg/authenticator/token/oidc/oidc.go): `oidc.NewProvider` at the issuer URL
//! (or its discoveryURL), whose document must name the issuer exactly, then the JWKS at
//! its `jwks_uri`, fetched lazily when a token's key is unknown. A rewritten file is
//! swapped in only once every issuer in it answered its discovery
//! (k8s.io/kubernetes v1.37.2 pkg/kubeapiserver/authenticator/config.go
//! `updateAuthenticationConfig`, polled every 10 s for a minute).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use time::OffsetDateTime;

use super::error::FederateError;
use crate::config::FederatedPolicy;

/// The largest credential.federated.issuer_ca read.
const MAX_ISSUER_CA: u64 = 256 * 1024;
/// The largest discovery document or JWKS read.
const MAX_DOCUMENT: usize = 256 * 1024;

/// The issuer CA files of a tick, each read once.
#[derive(Clone, Debug, Default)]
pub struct IssuerCas {
    read: BTreeMap<PathBuf, Read>,
}

/// One issuer CA file as read.
#[derive(Clone, Debug)]
enum Read {
    Pem(String),
    /// Why it cannot be used.
    Unusable(String),
}

/// Why an issuer cannot be used as fetched from here.
#[derive(Debug, thiserror::Error)]
enum Unusable {
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error("cannot fetch {url}: {why}")]
    Fetch { url: String, why: String },
    #[error("{url} answered {status}")]
    Status { url: String, status: u16 },
    #[error("{url} is larger than {MAX_DOCUMENT} bytes")]
    TooLarge { url: String },
    #[error("{url} is not JSON: {why}")]
    NotJson { url: String, why: String },
    #[error(
        "the discovery document at {discovery} names issuer {named:?}, not {issuer}: a spoke's API server refuses to load a file trusting {issuer} until a document naming it is served there (before the hub signs as it, a copy at credential.federated.next.discovery_url)"
    )]
    OtherIssuer {
        discovery: String,
        named: String,
        issuer: String,
    },
    #[error("the discovery document at {0} has no jwks_uri")]
    NoJwksUri(String),
    #[error("the JWKS at {0} holds no keys")]
    NoKeys(String),
}

impl IssuerCas {
    /// Reads every CA file the `policies` name (`issuer_ca` and `next.issuer_ca`), once each.
    pub fn read<'a>(policies: impl IntoIterator<Item = &'a FederatedPolicy>) -> IssuerCas {
        let mut read = BTreeMap::new();
        for p in policies {
            let next = p.next.as_ref().and_then(|n| n.issuer_ca.as_ref());
            for path in p.issuer_ca.iter().chain(next) {
                if !read.contains_key(path) {
                    let got = match read_pem(path) {
                        Ok(pem) => Read::Pem(pem),
                        Err(e) => Read::Unusable(e.to_string()),
                    };
                    read.insert(path.clone(), got);
                }
            }
        }
        IssuerCas { read }
    }

    /// The CAs of `path` as PEM: this tick's read, or a read now for a file the tick
    /// did not name.
    pub fn pem(&self, path: &Path) -> Result<String, FederateError> {
        match self.read.get(path) {
            Some(Read::Pem(pem)) => Ok(pem.clone()),
            // Its message, whole: it names the field and the file already.
            Some(Read::Unusable(message)) => Err(FederateError::IssuerCaRead(message.clone())),
            None => read_pem(path),
        }
    }

    /// What the fingerprint says of the file's content: its certificates' digest, or
    /// why it cannot be read (a fixed file fingerprints anew).
    pub(super) fn content(&self, path: &Path) -> String {
        match self.pem(path) {
            Ok(pem) => {
                crate::fingerprint::Fingerprint::<crate::fingerprint::Content>::of(pem.as_bytes())
                    .to_string()
            }
            Err(e) => format!("unreadable: {e}"),
        }
    }
}

/// credential.federated.issuer_ca: a file of the host's, beside spokekeeper.yaml.
fn read_pem(path: &Path) -> Result<String, FederateError> {
    let bad = |why: String| FederateError::IssuerCa {
        path: path.display().to_string(),
        why,
    };
    let size = std::fs::metadata(path)
        .map_err(|e| bad(e.to_string()))?
        .len();
    if size > MAX_ISSUER_CA {
        return Err(bad(format!(
            "is {size} bytes, more than a CA bundle ({MAX_ISSUER_CA})"
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let ders = crate::certs::certificates_der(&bytes).map_err(|e| bad(e.to_string()))?;
    if ders.is_empty() {
        return Err(bad("holds no certificate".into()));
    }
    Ok(crate::certs::to_pem(&ders))
}

/// Which of a policy's issuers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// `credential.federated.issuer`: the one the hub signs as.
    Current,
    /// `credential.federated.next.issuer`: the one it will sign as.
    Next,
}

/// One issuer as fetched from here this tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub issuer: String,
    pub role: Role,
    /// The discovery document's URL.
    pub discovery: String,
    /// The notAfter of the certificate serving the discovery URL (read without trusting
    /// it, so an expired one is graded too); None: no TLS handshake completed.
    pub not_after: Option<OffsetDateTime>,
    /// Why a spoke could not use the issuer as fetched from here; None: its document
    /// names it, verified with its CA, and its JWKS holds keys.
    pub problem: Option<String>,
}

/// A tick's issuers: the CA files it read, and each issuer as fetched.
#[derive(Clone, Debug, Default)]
pub struct Looked {
    pub cas: IssuerCas,
    pub seen: Vec<Seen>,
}

/// How many federated spokes' files trust a next issuer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextTrust {
    pub issuer: String,
    /// The spokes whose committed record says their file trusts it.
    pub trusting: usize,
    /// The federated spokes configured with it.
    pub of: usize,
    /// The first few that do not, by name.
    pub not_yet: Vec<String>,
}

impl NextTrust {
    /// One line for the log and `check`.
    pub fn line(&self) -> String {
        let mut line = format!(
            "{} of {} federated spokes run a file trusting the next issuer {}",
            self.trusting, self.of, self.issuer
        );
        if self.trusting == self.of {
            line.push_str(": the hub may sign as it (first in its --service-account-issuer)");
        } else {
            line.push_str(&format!(
                ": do not switch the hub yet (not yet: {}{})",
                self.not_yet.join(", "),
                if self.of - self.trusting > self.not_yet.len() {
                    ", ..."
                } else {
                    ""
                }
            ));
        }
        line
    }
}

/// An issuer to look at: its URL, role, discovery URL and CA file.
type Target = (String, Role, String, Option<PathBuf>);

/// Every distinct issuer the `policies` trust, each fetched once, `limit` each.
pub async fn look_all<'a>(
    policies: impl IntoIterator<Item = &'a FederatedPolicy>,
    cas: &IssuerCas,
    limit: Duration,
) -> Vec<Seen> {
    let mut targets: BTreeSet<Target> = BTreeSet::new();
    for p in policies {
        targets.insert((
            p.issuer.clone(),
            Role::Current,
            p.discovery(),
            p.issuer_ca.clone(),
        ));
        if let Some(n) = &p.next {
            targets.insert((
                n.issuer.clone(),
                Role::Next,
                n.discovery(),
                n.issuer_ca.clone(),
            ));
        }
    }
    let looks = targets.into_iter().map(|(issuer, role, discovery, ca)| {
        let ca = ca.map(|path| cas.pem(&path));
        async move {
            let (not_after, problem) = look(&issuer, &discovery, ca, limit).await;
            Seen {
                issuer,
                role,
                discovery,
                not_after,
                problem,
            }
        }
    });
    futures::future::join_all(looks).await
}

/// The serving certificate's notAfter at `discovery`, and what keeps a spoke from using
/// `issuer` as fetched from here (its CA `ca`: None for the system roots).
async fn look(
    issuer: &str,
    discovery: &str,
    ca: Option<Result<String, FederateError>>,
    limit: Duration,
) -> (Option<OffsetDateTime>, Option<String>) {
    let not_after = match origin(discovery) {
        Some(origin) => crate::spoke::probe(&origin, limit)
            .await
            .ok()
            .map(|p| p.not_after),
        None => None,
    };
    let ca = match ca.transpose() {
        Ok(ca) => ca,
        Err(e) => return (not_after, Some(e.to_string())),
    };
    let problem = fetched(issuer, discovery, ca.as_deref(), limit)
        .await
        .err()
        .map(|e| e.to_string());
    (not_after, problem)
}

/// `https://host:port` of `url`, what the probe connects to.
fn origin(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    let host = match u.host()? {
        url::Host::Ipv6(a) => format!("[{a}]"),
        h => h.to_string(),
    };
    Some(format!("https://{host}:{}", u.port_or_known_default()?))
}

/// The discovery document names `issuer` and its JWKS holds keys, both fetched over TLS
/// verified with `ca_pem`.
async fn fetched(
    issuer: &str,
    discovery: &str,
    ca_pem: Option<&str>,
    limit: Duration,
) -> Result<(), Unusable> {
    let http = client(ca_pem, limit)?;
    let document = get_json(&http, discovery).await?;
    let named = document["issuer"].as_str().unwrap_or_default();
    if named != issuer {
        return Err(Unusable::OtherIssuer {
            discovery: discovery.to_string(),
            named: crate::text::one_line(named, 200),
            issuer: issuer.to_string(),
        });
    }
    let Some(jwks) = document["jwks_uri"].as_str() else {
        return Err(Unusable::NoJwksUri(discovery.to_string()));
    };
    let keys = get_json(&http, jwks).await?;
    match keys["keys"].as_array() {
        Some(k) if !k.is_empty() => Ok(()),
        _ => Err(Unusable::NoKeys(crate::text::one_line(jwks, 200))),
    }
}

fn client(ca_pem: Option<&str>, limit: Duration) -> Result<reqwest::Client, Unusable> {
    // reqwest has no crypto provider of its own: it takes the process default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder()
        .timeout(limit)
        .connect_timeout(limit)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("spokekeeper/", env!("CARGO_PKG_VERSION")));
    if let Some(pem) = ca_pem {
        // Read and parsed once already (IssuerCas): certificates, in DER.
        let ders = crate::certs::certificates_der(pem.as_bytes())
            .map_err(|e| Unusable::Client(e.to_string()))?;
        let certs = ders
            .iter()
            .map(|d| reqwest::Certificate::from_der(d))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Unusable::Client(format!("credential.federated.issuer_ca: {e}")))?;
        builder = builder.tls_certs_only(certs);
    }
    builder
        .build()
        .map_err(|e| Unusable::Client(error_chain(&e)))
}

/// GET `url` as JSON, at most [`MAX_DOCUMENT`] bytes.
async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value, Unusable> {
    let shown = crate::text::one_line(url, 200);
    let fetch = |e: reqwest::Error| Unusable::Fetch {
        url: shown.clone(),
        why: error_chain(&e),
    };
    let mut resp = http.get(url).send().await.map_err(fetch)?;
    if !resp.status().is_success() {
        return Err(Unusable::Status {
            url: shown.clone(),
            status: resp.status().as_u16(),
        });
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(fetch)? {
        if body.len() + chunk.len() > MAX_DOCUMENT {
            return Err(Unusable::TooLarge { url: shown.clone() });
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| Unusable::NotJson {
        url: shown,
        why: e.to_string(),
    })
}

/// An error and its causes on one line (reqwest's own message omits the TLS reason).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    crate::text::one_line(&out, 400)
}

#[cfg(test)]
mod tests;
