//! Each spoke graded: the committed state and the probe as `check` grades them
//! (`alerts::evaluate`), the hub's SealedSecret (a federated spoke's ConfigMap) and its
//! consumers.

use time::OffsetDateTime;

use super::{Committed, Consumers, Probe, Seen, SpokeStatus};
use spokekeeper::alerts::{self, Subject};
use spokekeeper::config::{Config, CredentialMode, SpokeConfig};
use spokekeeper::hub::Kind;
use spokekeeper::hub::consumers::FoundBy;
use spokekeeper::rotate::observe::{Committed as Held, Observation};
use spokekeeper::rotate::state::rfc3339;
use spokekeeper::spoke::CaCheck;

pub(super) fn spoke_status(
    spoke: &SpokeConfig,
    obs: &Observation,
    findings: &[alerts::Finding],
    sealed: Option<Seen>,
    consumers: Option<Consumers>,
) -> SpokeStatus {
    let not_ok = || findings.iter().filter(|f| f.status != alerts::Status::Ok);
    let (state, rest): (Vec<_>, Vec<_>) = not_ok().partition(|f| f.subject == Subject::State);
    let federated = spoke.credential.mode == CredentialMode::Federated;
    let (sealed, config_map) = match sealed {
        Some(s) if federated => (None, Some(s)),
        other => (other, None),
    };
    let kind = if federated {
        "ConfigMap"
    } else {
        "SealedSecret"
    };
    let mut problems: Vec<String> = state.iter().map(|f| problem(f, obs, kind)).collect();
    if let Some(s) = &sealed {
        sealed_problems(s, &mut problems);
    }
    if let Some(s) = &config_map {
        config_map_problems(s, &mut problems);
    }
    if let Some(cs) = &consumers {
        consumer_problems(spoke, cs, &mut problems);
    }
    problems.extend(rest.iter().map(|f| problem(f, obs, kind)));
    // Not an alert (the old root still trusts the server), but not fine either.
    if ca_check(obs) == Some(CaCheck::RootChanged) {
        problems.push(
            "the API presents a root the committed CA bundle lacks (a CA rotation, or \
             a root the server appends): committed once the node's kubeconfig holds it"
                .into(),
        );
    }
    SpokeStatus {
        spoke: spoke.name.clone(),
        ok: problems.is_empty(),
        committed: committed(obs),
        sealed_secret: sealed,
        config_map,
        consumers,
        probe: probe(obs),
        removal: None,
        problems,
    }
}

/// The spoke's findings graded as `check` grades them (`alerts::evaluate`), but for the
/// fleet's sealing certificate: status reads no sealing.cert, `check` grades it.
pub(super) fn graded(
    config: &Config,
    obs: &Observation,
    now: OffsetDateTime,
) -> Vec<alerts::Finding> {
    let spokes = std::slice::from_ref(obs);
    alerts::evaluate(&config.alerts, spokes, None, now, None)
}

/// A finding that is not ok, in one phrase: the state, the probe and a changed CA in the
/// words status has always used, the rest (expiry, an unusable CA) as `check` says it.
fn problem(f: &alerts::Finding, obs: &Observation, kind: &str) -> String {
    match f.subject {
        Subject::State => match &obs.committed {
            Held::Missing => "nothing committed (run `spokekeeper rotate`)".into(),
            other => format!(
                "committed {kind} unreadable: {}",
                other.unreadable().unwrap_or_default()
            ),
        },
        Subject::Api => format!("API unreachable: {}", f.detail),
        Subject::Ca if f.alert == Some(alerts::AlertName::CaMismatch) => {
            "the API's certificate is not signed by the committed CA (rebuilt?)".into()
        }
        _ => {
            let own = format!("spoke {}: ", f.spoke);
            f.summary
                .strip_prefix(&own)
                .unwrap_or(&f.summary)
                .to_string()
        }
    }
}

fn committed(obs: &Observation) -> Committed {
    let mut committed = Committed {
        state: "committed",
        rotated_at: None,
        ca_sha256: None,
        client_not_after: None,
        sealing_sha256: None,
        credential: None,
        error: None,
    };
    match &obs.committed {
        Held::Recorded(rec) => {
            let r = &rec.recorded;
            committed.rotated_at = Some(rfc3339(r.rotated_at));
            committed.ca_sha256 = Some(r.ca_sha256);
            committed.client_not_after = r.client_not_after.map(rfc3339);
            committed.sealing_sha256 = r.sealed_to.cert();
            committed.credential = Some(alerts::CredentialFacts::of(&r.credential));
        }
        Held::Missing => committed.state = "missing",
        Held::Unreadable(_) | Held::Invalid(_) => {
            committed.state = "unreadable";
            committed.error = obs.committed.unreadable();
        }
    }
    committed
}

/// The hub's ConfigMap missing or not the commit's.
fn config_map_problems(s: &Seen, problems: &mut Vec<String>) {
    match (&s.error, s.exists, s.matches_commit) {
        (Some(_), _, _) => {}
        (None, false, _) => problems.push(format!(
            "ConfigMap {}/{} is not on the hub",
            s.namespace, s.name
        )),
        (None, true, Some(false)) => problems
            .push("the hub's ConfigMap is not the committed one (Flux has not applied it)".into()),
        (None, true, _) => {}
    }
}

/// The hub's SealedSecret missing, not the commit, not synced or not processed.
fn sealed_problems(s: &Seen, problems: &mut Vec<String>) {
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

/// How the probed serving certificate relates to the committed CA.
fn ca_check(obs: &Observation) -> Option<CaCheck> {
    match &obs.probe {
        Some(Ok(_)) => obs.ca.as_ref().map(|j| j.check),
        _ => None,
    }
}

fn probe(obs: &Observation) -> Probe {
    let recorded = obs.committed.recorded();
    match &obs.probe {
        None => Probe {
            state: "not probed",
            server: None,
            detail: None,
        },
        Some(Err(e)) => Probe {
            state: "unreachable",
            server: None,
            detail: Some(e.to_string()),
        },
        Some(Ok(p)) => match recorded.and(obs.ca.as_ref()).map(|j| j.check) {
            Some(CaCheck::NotSignedByCa) => Probe {
                state: "ca-changed",
                server: Some(p.server.clone()),
                detail: None,
            },
            Some(CaCheck::RootChanged) => Probe {
                state: "ca-rotated",
                server: Some(p.server.clone()),
                detail: None,
            },
            _ => Probe {
                state: "ok",
                server: Some(p.server.clone()),
                detail: Some(format!(
                    "serving certificate valid until {}",
                    rfc3339(p.not_after)
                )),
            },
        },
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
