//! A spoke's kube-apiserver started with `--authentication-config`: the file it runs,
//! the bearer tokens that file lets in, and the metrics it publishes of it.
//!
//! As the real one (k8s.io/kubernetes v1.37.2, pkg/kubeapiserver/options/authentication.go
//! and k8s.io/apiserver pkg/apis/apiserver): the file is read at start and again when it
//! changes; a changed file that does not parse or validate, or names an issuer the spoke
//! cannot reach, is counted as a failed reload and the previous one kept (and not retried
//! until it changes again); `last_config_info` carries the SHA-256 of the bytes it runs.
//! Differences: the real server takes 10 s or more to swap a file in (the issuer's
//! health check), the lab swaps it in at the next request; of CEL it knows the claim
//! validation rules spokekeeper and the tests write (`claims.sub in [...]`,
//! `claims.sub == "..."`) and refuses a file with any other.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use time::OffsetDateTime;

use super::{Issuer, Reachable};

const LAST_CONFIG: &str = "apiserver_authentication_config_controller_last_config_info";
const RELOADS: &str = "apiserver_authentication_config_controller_automatic_reloads_total";
/// A configuration file is a few KiB; more is not read.
const MAX_FILE: u64 = 1 << 20;
/// The clock skew the API server's JWT authenticator allows on `nbf`.
const SKEW: i64 = 60;

/// The AuthenticationConfiguration a spoke's API server runs, and its reloads.
pub struct SpokeTrust {
    path: PathBuf,
    reachable: Reachable,
    /// `apiserver_id_hash`: the hash of this API server's identity.
    id_hash: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The file's bytes it runs on, and its issuers; None: none could be read at start.
    running: Option<(String, Vec<Jwt>)>,
    /// A changed file that failed: not tried again until it changes.
    refused: Option<String>,
    reloads: u64,
    failures: u64,
}

/// One `jwt` entry as the server runs it.
struct Jwt {
    issuer: Arc<Issuer>,
    audiences: Vec<String>,
    /// The subjects every claim validation rule accepts (None: no rule).
    subjects: Option<Vec<String>>,
    prefix: String,
}

impl SpokeTrust {
    /// The API server starts on the file at `path`, reaching the issuers `reachable`.
    pub fn new(path: PathBuf, reachable: Reachable) -> SpokeTrust {
        let id = format!("{}#{}", path.display(), crate::objects::new_uid());
        let trust = SpokeTrust {
            id_hash: sha256(&id),
            path,
            reachable,
            state: Mutex::new(State::default()),
        };
        {
            let mut st = trust.lock();
            if let Some(text) = trust.read() {
                st.running = trust.parse(&text).ok().map(|jwt| (text, jwt));
            }
        }
        trust
    }

    /// Where the API server reads its file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> Option<String> {
        use std::io::Read as _;
        let file = std::fs::File::open(&self.path).ok()?;
        let mut text = String::new();
        file.take(MAX_FILE).read_to_string(&mut text).ok()?;
        Some(text)
    }

    /// The state after the file was looked at again: a change swapped in, or counted as
    /// a failed reload.
    fn current(&self) -> MutexGuard<'_, State> {
        let mut st = self.lock();
        let Some(text) = self.read() else {
            return st;
        };
        let same = st.running.as_ref().is_some_and(|(t, _)| *t == text);
        if same || st.refused.as_deref() == Some(text.as_str()) {
            return st;
        }
        match self.parse(&text) {
            Ok(jwt) => {
                st.running = Some((text, jwt));
                st.refused = None;
                st.reloads += 1;
            }
            Err(_) => {
                st.refused = Some(text);
                st.failures += 1;
            }
        }
        st
    }

    /// The file's issuers, validated as far as spokekeeper's files go; why not, if not.
    fn parse(&self, text: &str) -> Result<Vec<Jwt>, String> {
        let v: Value = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        let api = v["apiVersion"].as_str().unwrap_or_default();
        if !["v1", "v1beta1", "v1alpha1"]
            .iter()
            .any(|version| api == format!("apiserver.config.k8s.io/{version}"))
            || v["kind"] != "AuthenticationConfiguration"
        {
            return Err("not an AuthenticationConfiguration".into());
        }
        let entries = v["jwt"].as_array().cloned().unwrap_or_default();
        entries.iter().map(|e| self.jwt(e)).collect()
    }

    fn jwt(&self, entry: &Value) -> Result<Jwt, String> {
        let url = entry["issuer"]["url"].as_str().unwrap_or_default();
        if !url.starts_with("https://") {
            return Err(format!("jwt[].issuer.url {url:?}: must be https"));
        }
        let audiences: Vec<String> = strings(&entry["issuer"]["audiences"]);
        if audiences.is_empty() {
            return Err("jwt[].issuer.audiences: Required value".into());
        }
        let username = &entry["claimMappings"]["username"];
        if username["claim"] != "sub" || !username["prefix"].is_string() {
            return Err(
                "jwt[].claimMappings.username: the lab maps claim sub with a prefix".into(),
            );
        }
        let mut subjects: Option<Vec<String>> = None;
        for rule in entry["claimValidationRules"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let allowed = rule_subjects(rule["expression"].as_str().unwrap_or_default())
                .ok_or("jwt[].claimValidationRules: an expression the lab does not evaluate")?;
            subjects = Some(match subjects {
                None => allowed,
                Some(s) => s.into_iter().filter(|x| allowed.contains(x)).collect(),
            });
        }
        // The real server fetches the issuer's discovery document and keys, and fails the
        // reload when it cannot.
        let issuer = self
            .reachable
            .at(url)
            .ok_or_else(|| format!("{url}: the issuer's discovery document is out of reach"))?;
        Ok(Jwt {
            issuer: issuer.clone(),
            audiences,
            subjects,
            prefix: username["prefix"].as_str().unwrap_or_default().to_owned(),
        })
    }

    /// The user a bearer token authenticates as (None: refused, a 401).
    pub fn authenticate(&self, token: &str) -> Option<String> {
        let st = self.current();
        let (_, jwts) = st.running.as_ref()?;
        let now = OffsetDateTime::now_utc().unix_timestamp();
        jwts.iter().find_map(|j| {
            let claims = j.issuer.verify(token)?;
            let fresh = claims.expires > now && claims.not_before <= now + SKEW;
            let audience = claims.audiences.iter().any(|a| j.audiences.contains(a));
            let allowed = j
                .subjects
                .as_ref()
                .is_none_or(|s| s.contains(&claims.subject));
            (fresh && audience && allowed).then(|| format!("{}{}", j.prefix, claims.subject))
        })
    }

    /// The authentication configuration's metrics, in the Prometheus text format.
    pub fn metrics(&self) -> String {
        let st = self.current();
        let id = &self.id_hash;
        let mut out = String::new();
        if st.reloads + st.failures > 0 {
            out.push_str(&format!(
                "# HELP {RELOADS} [BETA] Total number of automatic reloads of authentication configuration split by status and apiserver identity.\n# TYPE {RELOADS} counter\n"
            ));
            for (status, n) in [("failure", st.failures), ("success", st.reloads)] {
                if n > 0 {
                    out.push_str(&format!(
                        "{RELOADS}{{apiserver_id_hash=\"{id}\",status=\"{status}\"}} {n}\n"
                    ));
                }
            }
        }
        if let Some((text, _)) = &st.running {
            out.push_str(&format!(
                "# HELP {LAST_CONFIG} [BETA] Information about the last applied authentication configuration with hash as label, split by apiserver identity.\n# TYPE {LAST_CONFIG} gauge\n{LAST_CONFIG}{{apiserver_id_hash=\"{id}\",hash=\"{}\"}} 1\n",
                sha256(text)
            ));
        }
        out
    }
}

/// The subjects a claim validation rule accepts: `claims.sub in ["a", "b"]` or
/// `claims.sub == "a"` (the strings as JSON, which CEL's string literals include).
fn rule_subjects(expression: &str) -> Option<Vec<String>> {
    if let Some(list) = expression.strip_prefix("claims.sub in ") {
        let v: Value = serde_json::from_str(list).ok()?;
        return v.is_array().then(|| strings(&v));
    }
    let one = expression.strip_prefix("claims.sub == ")?;
    Some(vec![serde_json::from_str::<String>(one).ok()?])
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// `sha256:HEX`, as the API server labels a configuration.
pub fn sha256(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}
