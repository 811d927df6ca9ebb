//! `spokekeeper status [-o json]`: per spoke, what is committed, what the hub made of it
//! (the SealedSecret's Synced condition, and the Ready condition of every Flux consumer of
//! the Secret: hub::verify finds them the same way) and a TLS probe.
//!
//! Reads the fleet clone as it is and only reads the hub (no reconcile request). Exit
//! codes: 0 everything fine, 1 a warning (not committed, not synced, the hub's copy is
//! not the committed one, a consumer not ready or none at all, probe failed or CA
//! changed), 2 the configuration, the repo or the hub API cannot be read.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use super::{Format, out};
use crate::alerts;
use crate::config::{Config, SpokeConfig};
use crate::fingerprint::{Ca, Fingerprint, Sealing};
use crate::hub::consumers::{self, FoundBy, Listed};
use crate::hub::{Condition, Hub, HubObject, Kind};
use crate::repo::Repo;
use crate::rotate::observe::{self, Committed as Held, Observation};
use crate::rotate::state::rfc3339;
use crate::spoke::CaCheck;
use crate::text::one_line;

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
    #[serde(skip_serializing_if = "Option::is_none")]
    consumers: Option<Consumers>,
    probe: Probe,
    /// What is not fine, one phrase each.
    problems: Vec<String>,
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
    /// SealedSecret: whether it holds the committed ciphertext.
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
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
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
async fn gather(config: &Config) -> Result<Report, crate::repo::RepoError> {
    let repo = Repo::open(&config.repo).await?;
    let seen = observe::fleet(config, &repo, &[], PROBE_TIMEOUT).await;
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
    let mut spokes = Vec::new();
    for (spoke, obs) in config.spokes.iter().zip(seen) {
        // The committed ciphertext, to tell whether the hub's copy is this commit's.
        let committed_ct = obs.committed.record().and_then(|r| {
            r.sealed
                .encrypted_data
                .get(&spoke.secret.key)
                .map(String::as_str)
        });
        let (sealed, consumers) = match &hub {
            Some(Ok(h)) => {
                let (s, c) = hub_view(h, spoke, committed_ct, &listed).await;
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
        spokes.push(spoke_status(spoke, &obs, sealed, consumers));
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
    committed: Option<&str>,
    listed: &Listed,
) -> (Seen, Consumers) {
    let (ns, name) = (&spoke.secret.namespace, &spoke.secret.name);
    let got = hub.sealed_secret(ns, name).await.map_err(|e| e.to_string());
    let sealed = seen(ns, name, got, "Synced", |o| {
        committed.map(|c| o.encrypted_data.get(&spoke.secret.key).map(String::as_str) == Some(c))
    });
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
                    hub.consumer(&c).await.map_err(|e| e.to_string()),
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

fn seen(
    namespace: &str,
    name: &str,
    got: Result<Option<HubObject>, String>,
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
        Err(e) => s.error = Some(one_line(&e, 300)),
    }
    s
}

fn spoke_status(
    spoke: &SpokeConfig,
    obs: &Observation,
    sealed: Option<Seen>,
    consumers: Option<Consumers>,
) -> SpokeStatus {
    let mut problems = Vec::new();
    let mut committed = Committed {
        state: "committed",
        rotated_at: None,
        ca_sha256: None,
        client_not_after: None,
        sealing_sha256: None,
        credential: None,
        error: None,
    };
    let mut recorded = None;
    match &obs.committed {
        Held::Recorded(rec) => {
            let r = &rec.recorded;
            committed.rotated_at = Some(rfc3339(r.rotated_at));
            committed.ca_sha256 = Some(r.ca_sha256);
            committed.client_not_after = r.client_not_after.map(rfc3339);
            committed.sealing_sha256 = Some(r.sealing_sha256);
            committed.credential = Some(alerts::CredentialFacts::of(&r.credential));
            recorded = Some(r);
        }
        Held::Missing => {
            committed.state = "missing";
            problems.push("nothing committed (run `spokekeeper rotate`)".into());
        }
        Held::Unreadable(_) | Held::Invalid(_) => {
            let e = obs.committed.unreadable().unwrap_or_default();
            committed.state = "unreadable";
            committed.error = Some(e.clone());
            problems.push(format!("committed SealedSecret unreadable: {e}"));
        }
    }
    if let Some(s) = &sealed {
        match (&s.error, s.exists, &s.condition) {
            (Some(_), _, _) => {}
            (None, false, _) => problems.push(format!(
                "SealedSecret {}/{} is not on the hub",
                s.namespace, s.name
            )),
            (None, true, c) => {
                if s.matches_commit == Some(false) {
                    problems.push(
                        "the hub's SealedSecret is not the committed one (Flux has not applied it)"
                            .into(),
                    );
                }
                match c {
                    Some(c) if c.status == "True" => {}
                    Some(c) => problems.push(format!(
                        "not synced: Synced {}{}",
                        c.status,
                        c.message
                            .as_deref()
                            .map(|m| format!(" ({m})"))
                            .unwrap_or_default()
                    )),
                    None => problems.push("not synced: no Synced condition".into()),
                }
                if s.generation.is_some() && s.observed_generation < s.generation {
                    problems.push("the controller has not processed the latest generation".into());
                }
            }
        }
    }
    if let Some(cs) = &consumers {
        consumer_problems(spoke, cs, &mut problems);
    }
    let probe = match &obs.probe {
        None => Probe {
            state: "not probed",
            server: None,
            detail: None,
        },
        Some(Err(e)) => {
            problems.push(format!("API unreachable: {e}"));
            Probe {
                state: "unreachable",
                server: None,
                detail: Some(e.to_string()),
            }
        }
        Some(Ok(p)) => match recorded.map(|r| r.check_ca(p)) {
            Some(CaCheck::NotSignedByCa) => {
                problems.push(
                    "the API's certificate is not signed by the committed CA (rebuilt?)".into(),
                );
                Probe {
                    state: "ca-changed",
                    server: Some(p.server.clone()),
                    detail: None,
                }
            }
            Some(CaCheck::RootChanged) => {
                problems.push(
                    "the API's certificate chains to the committed CA only through a new root \
                     (a CA rotation): the next rotation commits the new CA"
                        .into(),
                );
                Probe {
                    state: "ca-rotated",
                    server: Some(p.server.clone()),
                    detail: None,
                }
            }
            _ => Probe {
                state: "ok",
                server: Some(p.server.clone()),
                detail: Some(format!(
                    "serving certificate valid until {}",
                    rfc3339(p.not_after)
                )),
            },
        },
    };
    SpokeStatus {
        spoke: spoke.name.clone(),
        ok: problems.is_empty(),
        committed,
        sealed_secret: sealed,
        consumers,
        probe,
        problems,
    }
}

/// A consumer not Ready or missing, or none at all: each a warning.
fn consumer_problems(spoke: &SpokeConfig, cs: &Consumers, problems: &mut Vec<String>) {
    if cs.error.is_some() {
        return;
    }
    if cs.items.is_empty() {
        problems.push(format!(
            "nothing deploys with Secret {}/{}: no Kustomization or HelmRelease in {} has it in spec.kubeConfig.secretRef",
            spoke.secret.namespace, spoke.secret.name, spoke.secret.namespace
        ));
    }
    for c in &cs.items {
        if let Some(why) = &c.wrong_key {
            problems.push(why.clone());
        }
        let what = format!(
            "{} {}/{}",
            c.kind.map_or("", Kind::as_str),
            c.namespace,
            c.name
        );
        match (&c.error, c.exists, &c.condition) {
            (Some(_), _, _) => {}
            (None, false, _) => problems.push(match cs.found_by {
                FoundBy::Configured => format!(
                    "{what} is not on the hub (set spokes[{}].kustomization)",
                    spoke.name
                ),
                FoundBy::Listed => format!("{what} is not on the hub any more"),
            }),
            (None, true, Some(c)) if c.status == "True" => {}
            (None, true, c) => problems.push(format!(
                "not ready: {what}: {}",
                c.as_ref()
                    .map(|c| format!(
                        "Ready {}{}",
                        c.status,
                        c.message
                            .as_deref()
                            .map(|m| format!(" ({m})"))
                            .unwrap_or_default()
                    ))
                    .unwrap_or_else(|| "no Ready condition".into())
            )),
        }
    }
}

/// The READY column: every consumer's Ready, in one word.
fn ready_column(cs: &Option<Consumers>) -> String {
    let Some(cs) = cs else { return "-".into() };
    if cs.error.is_some() || cs.items.iter().any(|c| c.error.is_some()) {
        return "error".into();
    }
    if cs.items.is_empty() {
        return "none".into();
    }
    if cs.items.iter().any(|c| !c.exists) {
        return "missing".into();
    }
    cs.items
        .iter()
        .map(|c| c.condition.as_ref().map_or("-", |c| c.status.as_str()))
        .find(|s| *s != "True")
        .unwrap_or("True")
        .to_string()
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

/// `extracted`, or `minted g4` (the user is in -o json; it is long).
fn credential_column(c: Option<&alerts::CredentialFacts>) -> String {
    match c {
        None => String::new(),
        Some(c) => match c.generation {
            Some(g) => format!("{} g{g}", c.mode),
            None => c.mode.to_string(),
        },
    }
}

fn print(report: &Report, format: Format) {
    match format {
        Format::Json => out(&format!(
            "{}\n",
            serde_json::to_string_pretty(report).unwrap_or_default()
        )),
        Format::Yaml => out(&serde_saphyr::to_string(report).unwrap_or_default()),
        Format::Table => {
            let cond = |s: &Option<Seen>| match s {
                None => "-".to_string(),
                Some(s) if s.error.is_some() => "error".into(),
                Some(s) if !s.exists => "missing".into(),
                Some(s) => s
                    .condition
                    .as_ref()
                    .map_or("-".into(), |c| c.status.clone()),
            };
            let mut rows = vec![
                [
                    "SPOKE",
                    "COMMITTED",
                    "CREDENTIAL",
                    "CA",
                    "SYNCED",
                    "READY",
                    "PROBE",
                ]
                .map(String::from),
            ];
            for s in &report.spokes {
                rows.push([
                    s.spoke.clone(),
                    s.committed
                        .rotated_at
                        .clone()
                        .unwrap_or_else(|| s.committed.state.into()),
                    credential_column(s.committed.credential.as_ref()),
                    s.committed.ca_sha256.map(|f| f.short()).unwrap_or_default(),
                    cond(&s.sealed_secret),
                    ready_column(&s.consumers),
                    s.probe.state.into(),
                ]);
            }
            out(&super::table::render(&rows));
            if let Some(h) = &report.hub
                && let Some(e) = &h.error
            {
                eprintln!("hub: {e}");
            }
            for s in &report.spokes {
                for p in &s.problems {
                    eprintln!("{}: {p}", s.spoke);
                }
            }
        }
    }
}
