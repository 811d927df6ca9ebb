//! `spokekeeper status [-o json]`: per spoke, what is committed, what the hub made of it
//! (the SealedSecret's Synced condition, or whether a federated spoke's ConfigMap holds the
//! committed data; and the Ready condition of every Flux consumer of either:
//! hub::verify finds them the same way) and a TLS probe.
//!
//! Reads the fleet clone as it is and only reads the hub (no reconcile request); in
//! review mode the forge too, for a federated spoke's old Secret's removal waiting for
//! review (its pull request, in `removal`). Exit codes: 0 everything fine, 1 a warning
//! (not committed, not synced, the hub's copy is not the committed one, a consumer not
//! ready or none at all, probe failed or CA changed), 2 the configuration, the repo or
//! the hub API cannot be read.

mod grade;
mod print;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use super::Format;
use grade::{graded, spoke_status};
use print::print;
use spokekeeper::alerts;
use spokekeeper::config::{Config, CredentialMode, RepoMode, SpokeConfig};
use spokekeeper::fingerprint::{Ca, Fingerprint, Sealing};
use spokekeeper::hub::consumers::{self, FoundBy, Listed};
use spokekeeper::hub::{Condition, Hub, HubError, HubObject, Kind};
use spokekeeper::repo::Repo;
use spokekeeper::rotate::observe::{self, Observation, Output};
use spokekeeper::text::one_line;

#[derive(Debug, Serialize)]
struct Report {
    exit_code: u8,
    /// None: no `hub:` configured.
    hub: Option<HubState>,
    spokes: Vec<SpokeStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct HubState {
    reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct SpokeStatus {
    spoke: String,
    ok: bool,
    committed: Committed,
    #[serde(skip_serializing_if = "Option::is_none")]
    sealed_secret: Option<Seen>,
    /// A federated spoke's: the ConfigMap Flux reaches it through.
    #[serde(skip_serializing_if = "Option::is_none")]
    config_map: Option<Seen>,
    #[serde(skip_serializing_if = "Option::is_none")]
    consumers: Option<Consumers>,
    probe: Probe,
    /// Review mode: the old Secret's removal waiting for review (federated).
    #[serde(skip_serializing_if = "Option::is_none")]
    removal: Option<Removal>,
    /// What is not fine, one phrase each.
    problems: Vec<String>,
}

/// A federated spoke's old Secret, its removal proposed by pull request.
#[derive(Debug, Serialize)]
struct Removal {
    file: String,
    state: &'static str,
    pull_request: String,
}

#[derive(Debug, Serialize)]
struct Committed {
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    rotated_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ca_sha256: Option<Fingerprint<Ca>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_not_after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sealing_sha256: Option<Fingerprint<Sealing>>,
    /// How the committed credential was made (mode; minted: user and generation).
    #[serde(skip_serializing_if = "Option::is_none")]
    credential: Option<alerts::CredentialFacts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The Flux objects that deploy with the spoke's Secret.
#[derive(Debug, Serialize)]
struct Consumers {
    found_by: FoundBy,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    items: Vec<Seen>,
}

/// A hub object's state.
#[derive(Debug, Serialize)]
struct Seen {
    /// Consumers: Kustomization or HelmRelease.
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<Kind>,
    namespace: String,
    name: String,
    exists: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    condition: Option<Condition>,
    generation: Option<i64>,
    observed_generation: Option<i64>,
    /// SealedSecret: whether it holds the committed ciphertext; ConfigMap: the committed data.
    #[serde(skip_serializing_if = "Option::is_none")]
    matches_commit: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_handled_reconcile_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Consumers: it reads another key of the Secret than the one written, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    wrong_key: Option<String>,
}

#[derive(Debug, Serialize)]
struct Probe {
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bounds listing the consumers, every namespace together.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);

pub(super) fn run(config_path: &Path, format: Option<Format>) -> ExitCode {
    let format = format.unwrap_or(Format::Table);
    let config = match Config::load(config_path) {
        Ok(c) => c,
        Err(e) => return unable(format, &e.to_string()),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => return unable(format, &format!("cannot start the runtime: {e}")),
    };
    let report = match runtime.block_on(gather(&config)) {
        Ok(r) => r,
        Err(e) => return unable(format, &format!("repo.path: {e}")),
    };
    print(&report, format);
    ExitCode::from(report.exit_code)
}

/// Fails only when the fleet repo cannot be opened; whatever else fails is reported.
async fn gather(config: &Config) -> Result<Report, spokekeeper::repo::RepoError> {
    let repo = Repo::open(&config.repo).await?;
    let seen = observe::fleet(config, &repo, &[], PROBE_TIMEOUT).await?;
    let hub = match &config.hub {
        Some(cfg) => Some(Hub::connect(cfg).await),
        None => None,
    };
    let mut hub_state = hub.as_ref().map(|h| HubState {
        reachable: h.is_ok(),
        error: h.as_ref().err().map(ToString::to_string),
    });
    let listed = match &hub {
        Some(Ok(h)) => h.list_consumers(config.spokes.iter(), LIST_TIMEOUT).await,
        _ => Listed::new(),
    };
    let now = OffsetDateTime::now_utc();
    let mut removals = match config.repo.mode {
        RepoMode::PullRequest => {
            let all: Vec<String> = config.spokes.iter().map(|s| s.name.clone()).collect();
            spokekeeper::rotate::review::open_removals(config, &repo, &all).await
        }
        RepoMode::Direct => Vec::new(),
    };
    let mut spokes = Vec::new();
    for (spoke, obs) in config.spokes.iter().zip(seen) {
        let (sealed, consumers) = match &hub {
            Some(Ok(h)) => {
                let (s, c) = hub_view(h, spoke, &obs, &listed).await;
                let errors = std::iter::once(&s.error)
                    .chain(std::iter::once(&c.error))
                    .chain(c.items.iter().map(|i| &i.error));
                if let Some(e) = errors.flatten().next()
                    && let Some(st) = hub_state.as_mut()
                {
                    st.reachable = false;
                    st.error.get_or_insert_with(|| e.clone());
                }
                (Some(s), Some(c))
            }
            _ => (None, None),
        };
        let findings = graded(config, &obs, now);
        let mut status = spoke_status(spoke, &obs, &findings, sealed, consumers);
        let (ns, name) = (&spoke.secret.namespace, &spoke.secret.name);
        if let Some(i) = removals.iter().position(|(s, _, _)| *s == spoke.name) {
            let (_, file, pr) = removals.swap_remove(i);
            status.removal = Some(Removal {
                file,
                state: "pending-review",
                pull_request: pr.url,
            });
        }
        for c in consumers::on_old_secret(spoke, &listed) {
            status.ok = false;
            status.problems.push(format!(
                "{c} still reads the old Secret {ns}/{name} (spec.kubeConfig.secretRef): set its spec.kubeConfig to configMapRef: {{name: {name}}}; the Secret goes once none does (docs/federated.md, Migration)"
            ));
        }
        spokes.push(status);
    }
    let hub_down = hub_state.as_ref().is_some_and(|h| !h.reachable);
    let exit_code = if hub_down {
        2
    } else if spokes.iter().any(|s| !s.ok) {
        1
    } else {
        0
    };
    Ok(Report {
        exit_code,
        hub: hub_state,
        spokes,
        error: None,
    })
}

async fn hub_view(
    hub: &Hub,
    spoke: &SpokeConfig,
    obs: &Observation,
    listed: &Listed,
) -> (Seen, Consumers) {
    let (ns, name) = (&spoke.secret.namespace, &spoke.secret.name);
    let sealed = match obs.committed.record().map(|r| &r.sealed) {
        Some(Output::ConfigMap(committed)) => {
            config_map(hub, ns, name, Some(&committed.data)).await
        }
        _ if spoke.credential.mode == CredentialMode::Federated => {
            config_map(hub, ns, name, None).await
        }
        committed => {
            // The committed ciphertext, to tell whether the hub's copy is this commit's.
            let committed = committed.and_then(|c| c.sealed_value(&spoke.secret.key));
            let got = hub.sealed_secret(ns, name).await;
            seen(ns, name, got, "Synced", |o| {
                committed
                    .map(|c| o.encrypted_data.get(&spoke.secret.key).map(String::as_str) == Some(c))
            })
        }
    };
    let (found_by, found) = consumers::of(spoke, listed);
    let mut consumers = Consumers {
        found_by,
        error: None,
        items: Vec::new(),
    };
    let wrong = consumers::wrong_keys(spoke, listed);
    match found {
        Ok(found) => {
            for c in found {
                let wrong_key = wrong
                    .iter()
                    .find(|(w, _)| *w == c)
                    .map(|(_, why)| why.clone());
                let mut s = seen(
                    &c.namespace,
                    &c.name,
                    hub.consumer(&c).await,
                    "Ready",
                    |_| None,
                );
                s.kind = Some(c.kind);
                s.wrong_key = wrong_key;
                consumers.items.push(s);
            }
        }
        Err(e) => consumers.error = Some(one_line(&e.to_string(), 300)),
    }
    (sealed, consumers)
}

/// A federated spoke's ConfigMap on the hub: it has no condition; it is the commit's
/// when its data is.
async fn config_map(
    hub: &Hub,
    ns: &str,
    name: &str,
    committed: Option<&BTreeMap<String, String>>,
) -> Seen {
    let got = hub.config_map(ns, name).await;
    let exists = matches!(got, Ok(Some(_)));
    let mut s = seen(ns, name, Ok(None), "", |_| None);
    match got {
        Ok(Some(have)) => s.matches_commit = committed.map(|c| *c == have.data),
        Ok(None) => {}
        Err(e) => s.error = Some(one_line(&e.to_string(), 300)),
    }
    s.exists = exists;
    s
}

fn seen(
    namespace: &str,
    name: &str,
    got: Result<Option<HubObject>, HubError>,
    condition: &str,
    matches: impl Fn(&HubObject) -> Option<bool>,
) -> Seen {
    let mut s = Seen {
        kind: None,
        namespace: namespace.into(),
        name: name.into(),
        exists: false,
        condition: None,
        generation: None,
        observed_generation: None,
        matches_commit: None,
        last_handled_reconcile_at: None,
        error: None,
        wrong_key: None,
    };
    match got {
        Ok(Some(o)) => {
            s.exists = true;
            // Hub text, shown in the table's problem lines: one bounded line.
            s.condition = o.condition(condition).map(|c| Condition {
                status: one_line(&c.status, 40),
                reason: c.reason.as_deref().map(|r| one_line(r, 100)),
                message: c.message.as_deref().map(|m| one_line(m, 300)),
                ..c.clone()
            });
            s.matches_commit = matches(&o);
            s.generation = o.generation;
            s.observed_generation = o.observed_generation;
            s.last_handled_reconcile_at = o.last_handled_reconcile_at;
        }
        Ok(None) => {}
        Err(e) => s.error = Some(one_line(&e.to_string(), 300)),
    }
    s
}

fn unable(format: Format, error: &str) -> ExitCode {
    let report = Report {
        exit_code: 2,
        hub: None,
        spokes: Vec::new(),
        error: Some(error.to_string()),
    };
    if format == Format::Table {
        eprintln!("spokekeeper status: error: {error}");
    } else {
        print(&report, format);
    }
    ExitCode::from(2)
}
