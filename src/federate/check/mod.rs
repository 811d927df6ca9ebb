//! Proof before commit that a spoke trusts the hub: the spoke's API server loaded the file
//! spokekeeper wrote (its `/metrics`, read with the admin credential), a token the hub
//! issued authenticates there as the expected user (SelfSubjectReview), and each hub
//! controller's user may do what the binding grants (SubjectAccessReview, asked with the
//! admin credential).
//!
//! The token is for spokekeeper's own check ServiceAccount, never for a controller's: the
//! right to request tokens for a ServiceAccount is the right to request them for any
//! audience, the hub's own included, and the controllers are cluster-admin on the hub.
//!
//! The API server polls the file and watches it (k8s.io/kubernetes v1.37.2,
//! pkg/kubeapiserver/options/authentication.go: `filesystem.WatchUntil(ctx, time.Minute,
//! ...)`), keeps the last good configuration when a new one fails, and publishes the
//! SHA-256 of the content it runs on as
//! `apiserver_authentication_config_controller_last_config_info{hash="sha256:..."}`.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http_body_util::{BodyExt, Limited};
use kube::Client;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::{Instant, sleep, timeout_at};

use super::FederateError;
use crate::secret::SecretBytes;
use crate::spoke::live;

const CONFIG_INFO: &str = "apiserver_authentication_config_controller_last_config_info{";
const RELOADS: &str = "apiserver_authentication_config_controller_automatic_reloads_total{";
/// An API server's /metrics is a few MiB; more is refused.
const MAX_METRICS: usize = 32 << 20;
const POLL: Duration = Duration::from_secs(2);

/// What a spoke's /metrics says of its authentication configuration.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    /// `sha256:HEX` of each configuration an API server identity runs on; empty: none is read.
    pub hashes: Vec<String>,
    pub failures: u64,
}

impl Loaded {
    /// Reads the Prometheus text exposition.
    pub fn parse(text: &str) -> Loaded {
        let mut out = Loaded::default();
        for line in text.lines() {
            if let Some(labels) = line.strip_prefix(CONFIG_INFO) {
                if let Some(hash) = label(labels, "hash") {
                    out.hashes.push(hash.to_string());
                }
            } else if let Some(labels) = line.strip_prefix(RELOADS)
                && label(labels, "status") == Some("failure")
            {
                let value = line.rsplit(' ').next().unwrap_or("");
                out.failures += value.parse::<f64>().map_or(0, |v| v.max(0.0) as u64);
            }
        }
        out
    }

    /// Whether the API server runs on `content`.
    pub fn runs(&self, content: &str) -> bool {
        self.hashes.iter().any(|h| *h == hash_of(content))
    }
}

/// The hash the API server labels its configuration with (`getHash` in its metrics.go).
pub fn hash_of(content: &str) -> String {
    let digest = Sha256::digest(content.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A label's value, the label matched whole (`hash` is not `apiserver_id_hash`).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let key = format!("{name}=\"");
    let at = [format!(",{key}"), format!("{{{key}")]
        .iter()
        .find_map(|k| labels.find(k.as_str()).map(|i| i + k.len()))
        .or_else(|| labels.starts_with(&key).then_some(key.len()))?;
    let rest = &labels[at..];
    Some(&rest[..rest.find('"')?])
}

/// Waits until the spoke's API server (through `admin`) runs on `content`, for at most
/// `wait`; `discovery` is named when it does not.
pub async fn wait_loaded(
    admin: &Client,
    (server, discovery): (&str, &str),
    content: &str,
    wait: Duration,
) -> Result<(), FederateError> {
    let deadline = Instant::now() + wait;
    loop {
        let loaded = metrics(admin, server, deadline).await?;
        if loaded.runs(content) {
            return Ok(());
        }
        if loaded.hashes.is_empty() {
            return Err(FederateError::NotConfigured {
                server: server.to_string(),
            });
        }
        if Instant::now() + POLL >= deadline {
            return Err(FederateError::NotLoaded {
                server: server.to_string(),
                secs: wait.as_secs(),
                failures: loaded.failures,
                discovery: discovery.to_string(),
            });
        }
        sleep(POLL).await;
    }
}

async fn metrics(admin: &Client, server: &str, deadline: Instant) -> Result<Loaded, FederateError> {
    let call = |error| FederateError::Call {
        step: "read the spoke's /metrics",
        error,
    };
    let timed_out = || {
        call(live::LiveError::TimedOut {
            server: server.to_string(),
            secs: 0.0,
        })
    };
    let request = hyper::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| call(live::LiveError::Unusable(e.to_string())))?;
    let read = async {
        let resp = admin.send(request.map(Into::into)).await?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), MAX_METRICS)
            .collect()
            .await
            .map_err(kube::Error::Service)?
            .to_bytes();
        Ok::<_, kube::Error>((status, body))
    };
    let (status, body) = timeout_at(deadline, read)
        .await
        .map_err(|_| timed_out())?
        .map_err(|e| call(live::classify(server, 0.0, &e)))?;
    if status != 200 {
        return Err(call(live::LiveError::Api {
            server: server.to_string(),
            code: status,
            message: "GET /metrics with the admin credential".into(),
        }));
    }
    Ok(Loaded::parse(&String::from_utf8_lossy(&body)))
}

/// The claims of a token the hub issued, read without verifying it (it came from the
/// hub's own API): what the spoke will check.
#[derive(Debug, PartialEq, Eq)]
pub struct Claims {
    pub issuer: String,
    pub subject: String,
    pub audiences: Vec<String>,
}

impl Claims {
    pub fn of(token: &SecretBytes) -> Result<Claims, &'static str> {
        let text = std::str::from_utf8(token.expose()).map_err(|_| "not UTF-8")?;
        let payload = text.split('.').nth(1).ok_or("not a JWT")?;
        let json = URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .map_err(|_| "its payload is not base64url")?;
        let v: Value = serde_json::from_slice(&json).map_err(|_| "its payload is not JSON")?;
        let text = |k: &str| v[k].as_str().map(|s| crate::text::one_line(s, 300));
        let audiences = match &v["aud"] {
            Value::String(a) => vec![a.clone()],
            Value::Array(a) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        };
        Ok(Claims {
            issuer: text("iss").ok_or("it has no iss")?,
            subject: text("sub").ok_or("it has no sub")?,
            audiences,
        })
    }
}

/// The token, in an in-memory kubeconfig for the spoke (`server`, its CA bundle `ca_pem`),
/// authenticates as `user` (SelfSubjectReview). `discovery` is named when it is refused.
pub async fn accepts(
    server: &str,
    ca_pem: &str,
    token: &SecretBytes,
    (user, discovery): (&str, &str),
    limit: Duration,
) -> Result<(), FederateError> {
    let kubeconfig = bearer_kubeconfig(server, ca_pem, token)?;
    let who = match live::check_live(&kubeconfig, limit).await {
        Ok(who) => who,
        Err(live::LiveError::Unauthorized { server } | live::LiveError::Anonymous { server }) => {
            return Err(FederateError::NotTrusted {
                server,
                discovery: discovery.to_string(),
            });
        }
        Err(error) => {
            return Err(FederateError::Call {
                step: "authenticate with the hub's token",
                error,
            });
        }
    };
    if who.username != user {
        return Err(FederateError::WrongUser {
            server: who.server,
            expected: user.to_string(),
            found: crate::text::one_line(&who.username, 200),
        });
    }
    Ok(())
}

/// The token, for an audience the spoke's file no longer names, is refused there (401):
/// what a revoke proves of the revoked audience once the new file runs.
pub async fn refuses(
    server: &str,
    ca_pem: &str,
    token: &SecretBytes,
    audience: &str,
    limit: Duration,
) -> Result<(), FederateError> {
    let kubeconfig = bearer_kubeconfig(server, ca_pem, token)?;
    match live::check_live(&kubeconfig, limit).await {
        Err(live::LiveError::Unauthorized { .. } | live::LiveError::Anonymous { .. }) => Ok(()),
        Ok(who) => Err(FederateError::StillAccepted {
            server: who.server,
            audience: audience.to_string(),
            user: crate::text::one_line(&who.username, 200),
        }),
        Err(error) => Err(FederateError::Call {
            step: "present a token for the revoked audience",
            error,
        }),
    }
}

/// What a hub identity must be allowed on the spoke: the cluster role's first rule.
pub struct Grant<'a> {
    pub role: &'a str,
    pub verb: &'a str,
    pub group: &'a str,
    pub resource: &'a str,
}

/// Whether `user` may do what `grant` names on the spoke, asked with the admin credential
/// (SubjectAccessReview): the hub's controllers are checked without a token of theirs.
pub async fn bound(
    admin: &Client,
    server: &str,
    user: &str,
    grant: &Grant<'_>,
    limit: Duration,
) -> Result<(), FederateError> {
    let step = "check the hub's binding";
    let call = |error| FederateError::Call { step, error };
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": {
            "verb": grant.verb, "group": grant.group, "resource": grant.resource}},
    });
    let request = hyper::Request::post("/apis/authorization.k8s.io/v1/subjectaccessreviews")
        .header("Content-Type", "application/json")
        .body(review.to_string().into_bytes())
        .map_err(|e| call(live::LiveError::Unusable(e.to_string())))?;
    let answer: Value = tokio::time::timeout(limit, admin.request(request))
        .await
        .map_err(|_| {
            call(live::LiveError::TimedOut {
                server: server.to_string(),
                secs: limit.as_secs_f64(),
            })
        })?
        .map_err(|e| call(live::classify(server, limit.as_secs_f64(), &e)))?;
    if answer["status"]["allowed"].as_bool() == Some(true) {
        return Ok(());
    }
    Err(FederateError::NotBound {
        server: server.to_string(),
        user: user.to_string(),
        role: grant.role.to_string(),
        verb: grant.verb.to_string(),
        resource: if grant.group.is_empty() {
            grant.resource.to_string()
        } else {
            format!("{}.{}", grant.resource, grant.group)
        },
    })
}

/// A kubeconfig held in memory only: the spoke, its CAs, and the hub's token.
fn bearer_kubeconfig(
    server: &str,
    ca_pem: &str,
    token: &SecretBytes,
) -> Result<SecretBytes, FederateError> {
    let token =
        std::str::from_utf8(token.expose()).map_err(|_| FederateError::TokenUnreadable {
            account: String::new(),
            why: "not UTF-8",
        })?;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let q = |s: &str| Value::from(s).to_string();
    let text = zeroize::Zeroizing::new(format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: spoke\nclusters:\n- name: spoke\n  cluster:\n    server: {}\n    certificate-authority-data: {}\ncontexts:\n- name: spoke\n  context: {{cluster: spoke, user: hub}}\nusers:\n- name: hub\n  user:\n    token: {}\n",
        q(server),
        q(&ca),
        q(token)
    ));
    Ok(SecretBytes::from(text.as_bytes().to_vec()))
}

#[cfg(test)]
mod tests;
