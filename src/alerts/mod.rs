//! Expiry and health alerts: grade every certificate the hub depends on, then tell
//! Alertmanager, a webhook and the log; and record what a tick did as Kubernetes Events
//! on the hub and Flux events for notification-controller (`events.rs`, `flux.rs`).
//!
//! [`evaluate`] is pure (recorded state, probe results, sealing certificate, the clock
//! and an optional tick report in; findings out), so every rule is unit-tested and
//! `spokekeeper check` and the daemon grade alike. [`Notifier`] holds what was sent last
//! time, so the daemon keeps one across ticks:
//!
//! ```ignore
//! let report = rotate::tick(&ctx, &opts).await?;
//! let sealing = ctx.sealing.as_ref().map(|k| alerts::SealingCert::from_key(k, "sealing.cert"));
//! let findings = alerts::evaluate(&ctx.config.alerts, &report.observed, sealing.as_ref(), now, Some(&report));
//! let failed_sinks = notifier.notify(&findings, now).await; // bounded, never fails the tick
//! ```

mod alertmanager;
mod events;
mod finding;
mod flux;
mod issuer;
mod notify;
mod rules;
mod sealing_cert;
mod webhook;

use std::time::Duration;

use time::OffsetDateTime;

use crate::config::{AlertsConfig, Span};
use crate::rotate::TickReport;
use crate::rotate::observe::{Committed, Observation};
use crate::spoke::{CaCheck, ProbeReport};
use rules::{ca_mismatch, expiry, hub, name_credential, plain, review, rotation, unreachable};

pub use crate::federate::issuer::NextTrust;
pub use alertmanager::PostableAlert;
pub use events::{EventError, Events};
pub use finding::{AlertName, CredentialFacts, Finding, Status, Subject};
pub use issuer::{issuers, next_trust};
pub use notify::{Notifier, NotifyOptions, Sink, SinkError};
pub use rules::{flux_layout, removal_pending, sops_recipients, untrusted_sealing};
pub use sealing_cert::SealingCert;

/// Where a certificate stands: expired once `now` is past notAfter (notAfter itself is
/// still valid, RFC 5280), critical when less than `critical_before` is left, warning
/// when less than `warn_before` is left.
pub(crate) fn grade(not_after: OffsetDateTime, now: OffsetDateTime, cfg: &AlertsConfig) -> Status {
    let left = not_after - now;
    if left.is_negative() {
        Status::Expired
    } else if left < cfg.critical_before {
        Status::Critical
    } else if left < cfg.warn_before {
        Status::Warning
    } else {
        Status::Ok
    }
}

/// The worst status, as `check` ranks them (critical over unknown over warning).
pub fn overall(findings: &[Finding]) -> Status {
    let rank = |s: Status| match s {
        Status::Ok => 0,
        Status::Warning => 1,
        Status::Unknown => 2,
        Status::Critical | Status::Expired => 3,
    };
    findings
        .iter()
        .map(|f| f.status)
        .max_by_key(|s| (rank(*s), *s))
        .unwrap_or(Status::Ok)
}

/// Grades every spoke. Order: per spoke as observed, then client, CA, serving, sealing
/// (None: the fleet has no sealing certificate, as when every spoke is sops), API,
/// rotation, state.
pub fn evaluate(
    cfg: &AlertsConfig,
    spokes: &[Observation],
    sealing: Option<&SealingCert>,
    now: OffsetDateTime,
    tick: Option<&TickReport>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    // Each spoke's report by name: a look-up per spoke, not a scan of the list.
    let reports: std::collections::HashMap<&str, &crate::rotate::SpokeReport> = tick
        .map(|t| {
            t.spokes
                .iter()
                .rev()
                .map(|r| (r.spoke.as_str(), r))
                .collect()
        })
        .unwrap_or_default();
    for seen in spokes {
        let first = out.len();
        let spoke = seen.spoke.as_str();
        let probe = seen.probe.as_ref().and_then(|p| p.as_ref().ok());
        committed(cfg, seen, probe, now, &mut out);
        if let Some(p) = probe {
            out.push(expiry(cfg, spoke, Subject::Serving, p.not_after, now));
        }
        if let Some(sealing) = sealing {
            out.push(match sealing.not_after {
                Some(na) => expiry(cfg, spoke, Subject::Sealing, na, now),
                None => plain(
                    spoke,
                    Subject::Sealing,
                    Status::Ok,
                    format!("{} is a bare public key: no expiry date", sealing.source),
                ),
            });
        }
        match &seen.probe {
            Some(Ok(p)) => out.push(plain(
                spoke,
                Subject::Api,
                Status::Ok,
                format!("reachable at {}", p.server),
            )),
            Some(Err(e)) => out.push(unreachable(spoke, &e.to_string())),
            None => {}
        }
        if let Some(report) = reports.get(spoke).copied() {
            after_tick(cfg, spoke, report, first, &mut out);
        }
    }
    if let Some(u) = tick
        .and_then(|t| t.sealing.as_ref())
        .and_then(|c| c.untrusted.as_ref())
    {
        out.push(untrusted_sealing(u));
    }
    out
}

/// The committed credential's findings: its client certificate and its CA (checked
/// against what the probe saw), or why there is none to grade.
fn committed(
    cfg: &AlertsConfig,
    seen: &Observation,
    probe: Option<&ProbeReport>,
    now: OffsetDateTime,
    out: &mut Vec<Finding>,
) {
    let spoke = seen.spoke.as_str();
    match &seen.committed {
        Committed::Recorded(rec) => {
            let r = &rec.recorded;
            let mut client = match r.client_not_after {
                Some(na) => expiry(cfg, spoke, Subject::Client, na, now),
                None => plain(
                    spoke,
                    Subject::Client,
                    Status::Ok,
                    "no client certificate (token credential)".into(),
                ),
            };
            name_credential(&mut client, CredentialFacts::of(&r.credential));
            out.push(client);
            match probe.and(seen.ca.as_ref()).map(|j| j.check) {
                Some(CaCheck::NotSignedByCa) => out.push(ca_mismatch(spoke, &r.ca_sha256)),
                Some(CaCheck::UnusableCa) => out.push(plain(
                    spoke,
                    Subject::Ca,
                    Status::Unknown,
                    "the recorded CA (annotation spokekeeper.io/ca-data) does not parse: run `spokekeeper rotate` for this spoke".into(),
                )),
                // Still trusted through the cross-signature; the next tick rotates.
                Some(CaCheck::Verified | CaCheck::RootChanged) | None => {
                    out.push(expiry(cfg, spoke, Subject::Ca, r.ca_not_after, now))
                }
            }
        }
        Committed::Missing => out.push(plain(
            spoke,
            Subject::State,
            Status::Unknown,
            "never rotated: nothing committed yet (run `spokekeeper rotate`)".into(),
        )),
        Committed::Unreadable(_) | Committed::Invalid(_) => out.push(plain(
            spoke,
            Subject::State,
            Status::Unknown,
            format!(
                "committed SealedSecret unreadable: {} (`spokekeeper rotate` replaces it)",
                seen.committed.unreadable().unwrap_or_default()
            ),
        )),
    }
}

/// What the tick did for the spoke: its outcome, the hub's take-up, a pending review
/// (graded against this spoke's findings so far, from `first`).
fn after_tick(
    cfg: &AlertsConfig,
    spoke: &str,
    report: &crate::rotate::SpokeReport,
    first: usize,
    out: &mut Vec<Finding>,
) {
    out.push(rotation(spoke, report));
    if let Some(h) = &report.hub {
        out.push(hub(spoke, h));
    }
    if let Some(f) = review(cfg, spoke, report, &out[first..]) {
        out.push(f);
    }
}

fn span(d: Duration) -> String {
    Span(d).to_string()
}

#[cfg(test)]
mod tests;
