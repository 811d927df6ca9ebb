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
//! let seen = rotate::observe::after_tick(&ctx.config, &ctx.repo, &report, probe_timeout).await;
//! let sealing = alerts::SealingCert::from_key(&ctx.sealing, "sealing.cert");
//! let findings = alerts::evaluate(&ctx.config.alerts, &seen, &sealing, now, Some(&report));
//! let failed_sinks = notifier.notify(&findings, now).await; // bounded, never fails the tick
//! ```

mod alertmanager;
mod events;
mod flux;
mod notify;
mod sealing;
mod webhook;

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use crate::config::{AlertsConfig, Span};
use crate::fingerprint::{Ca, Fingerprint};
use crate::rotate::TickReport;
use crate::rotate::observe::{Committed, Observation};
use crate::rotate::state::rfc3339;
use crate::spoke::CaCheck;

pub use alertmanager::PostableAlert;
pub use events::{EventError, Events};
pub use notify::{Notifier, NotifyOptions, Sink, SinkError};
pub use sealing::SealingCert;

/// How a finding is graded. Ordered from best to worst for `check`'s exit code, except
/// that critical and expired rank above unknown (see [`Status::exit_code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warning,
    /// Could not be checked: unreachable, never rotated, state unreadable.
    Unknown,
    Critical,
    Expired,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warning => "warning",
            Status::Unknown => "unknown",
            Status::Critical => "critical",
            Status::Expired => "expired",
        }
    }

    /// Nagios convention: 0 ok, 1 warning, 2 critical, 3 unknown.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Status::Ok => 0,
            Status::Warning => 1,
            Status::Critical | Status::Expired => 2,
            Status::Unknown => 3,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a finding is about. The four certificates carry the `cert` label in alerts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Subject {
    /// The client certificate in the hub's kubeconfig (recorded state).
    Client,
    /// The cluster CA the hub's kubeconfig trusts (recorded state).
    Ca,
    /// The spoke API's serving certificate (probe).
    Serving,
    /// The sealing certificate the spoke's credential is sealed to.
    Sealing,
    /// Whether the spoke API answered the probe.
    Api,
    /// The last tick's outcome for the spoke.
    Rotation,
    /// The committed SealedSecret and its annotations.
    State,
    /// Whether the hub unsealed the pushed credential and Flux deploys with it.
    Hub,
    /// A fresh credential waiting for review (`repo.mode: pull-request`).
    Review,
    /// How the fleet repo's Flux objects deploy to the spoke (`check` only).
    Flux,
}

impl Subject {
    pub fn as_str(self) -> &'static str {
        match self {
            Subject::Client => "client",
            Subject::Ca => "ca",
            Subject::Serving => "serving",
            Subject::Sealing => "sealing",
            Subject::Api => "api",
            Subject::Rotation => "rotation",
            Subject::State => "state",
            Subject::Hub => "hub",
            Subject::Review => "review",
            Subject::Flux => "flux",
        }
    }

    pub(crate) fn is_cert(self) -> bool {
        matches!(
            self,
            Subject::Client | Subject::Ca | Subject::Serving | Subject::Sealing
        )
    }

    fn title(self) -> &'static str {
        match self {
            Subject::Client => "client certificate",
            Subject::Ca => "cluster CA",
            Subject::Serving => "serving certificate",
            Subject::Sealing => "sealing certificate",
            Subject::Api => "API server",
            Subject::Rotation => "rotation",
            Subject::State => "recorded state",
            Subject::Hub => "hub",
            Subject::Review => "pull request",
            Subject::Flux => "Flux layout",
        }
    }
}

/// The alert a non-ok finding raises (x509-certificate-exporter / cert-manager style).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum AlertName {
    #[serde(rename = "SpokekeeperCertificateExpiring")]
    CertificateExpiring,
    #[serde(rename = "SpokekeeperCertificateExpired")]
    CertificateExpired,
    #[serde(rename = "SpokekeeperCaMismatch")]
    CaMismatch,
    #[serde(rename = "SpokekeeperSpokeUnreachable")]
    SpokeUnreachable,
    #[serde(rename = "SpokekeeperRotationFailing")]
    RotationFailing,
    #[serde(rename = "SpokekeeperHubNotReady")]
    HubNotReady,
    #[serde(rename = "SpokekeeperReviewPending")]
    ReviewPending,
    #[serde(rename = "SpokekeeperSealingCertUntrusted")]
    SealingCertUntrusted,
}

impl AlertName {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertName::CertificateExpiring => "SpokekeeperCertificateExpiring",
            AlertName::CertificateExpired => "SpokekeeperCertificateExpired",
            AlertName::CaMismatch => "SpokekeeperCaMismatch",
            AlertName::SpokeUnreachable => "SpokekeeperSpokeUnreachable",
            AlertName::RotationFailing => "SpokekeeperRotationFailing",
            AlertName::HubNotReady => "SpokekeeperHubNotReady",
            AlertName::ReviewPending => "SpokekeeperReviewPending",
            AlertName::SealingCertUntrusted => "SpokekeeperSealingCertUntrusted",
        }
    }
}

/// One graded fact about one spoke.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub spoke: String,
    #[serde(rename = "cert")]
    pub subject: Subject,
    #[serde(rename = "severity")]
    pub status: Status,
    #[serde(with = "time::serde::rfc3339::option")]
    pub not_after: Option<OffsetDateTime>,
    /// Whole days left, rounded down; negative once expired.
    pub days_left: Option<i64>,
    /// One line for the table.
    pub detail: String,
    #[serde(rename = "alertname")]
    pub alert: Option<AlertName>,
    /// The client certificate's finding: how the committed credential was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential: Option<CredentialFacts>,
    /// Alert annotations: one line, and the full story with exact dates and what to do.
    #[serde(skip)]
    pub summary: String,
    #[serde(skip)]
    pub description: String,
}

/// How the committed credential was made, as recorded in its annotations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CredentialFacts {
    pub mode: crate::config::CredentialMode,
    /// Minted: the user the certificate was signed for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Minted: its generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
}

impl CredentialFacts {
    pub fn of(r: &crate::rotate::state::RecordedCredential) -> CredentialFacts {
        let minted = r.mode == crate::config::CredentialMode::Minted;
        CredentialFacts {
            mode: r.mode,
            user: r.user.clone().filter(|_| minted),
            generation: Some(r.generation).filter(|_| minted),
        }
    }

    /// `minted for USER (generation N)`; None when extracted.
    pub(crate) fn describe(&self) -> Option<String> {
        match (&self.user, self.generation) {
            (Some(u), Some(g)) => Some(format!(
                "minted for {} (generation {g})",
                crate::text::one_line(u, 200)
            )),
            _ => None,
        }
    }
}

impl Finding {
    /// The Alertmanager `severity` label, when this finding raises an alert.
    pub fn severity(&self) -> Option<&'static str> {
        self.alert?;
        match self.status {
            Status::Ok => None,
            Status::Warning | Status::Unknown => Some("warning"),
            Status::Critical | Status::Expired => Some("critical"),
        }
    }
}

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
pub(crate) fn overall(findings: &[Finding]) -> Status {
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

/// Grades every spoke. Order: per spoke as observed, then client, CA, serving, sealing,
/// API, rotation, state.
pub fn evaluate(
    cfg: &AlertsConfig,
    spokes: &[Observation],
    sealing: &SealingCert,
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
                match probe.map(|p| r.check_ca(p)) {
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
        if let Some(p) = probe {
            out.push(expiry(cfg, spoke, Subject::Serving, p.not_after, now));
        }
        out.push(match sealing.not_after {
            Some(na) => expiry(cfg, spoke, Subject::Sealing, na, now),
            None => plain(
                spoke,
                Subject::Sealing,
                Status::Ok,
                format!("{} is a bare public key: no expiry date", sealing.source),
            ),
        });
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
            out.push(rotation(spoke, report));
            if let Some(h) = &report.hub {
                out.push(hub(spoke, h));
            }
            if let Some(f) = review(cfg, spoke, report, &out[first..]) {
                out.push(f);
            }
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

/// The fleet repo's sealing certificate is not confirmed (fleet-wide: `spoke=""`); also
/// what `spokekeeper check` reports.
pub(crate) fn untrusted_sealing(u: &crate::hub::cert::Untrusted) -> Finding {
    let expected: Vec<String> = u.expected.iter().map(|e| e.short()).collect();
    let full: Vec<String> = u.expected.iter().map(ToString::to_string).collect();
    let commit = u
        .commit
        .as_deref()
        .map_or_else(String::new, |c| format!(", changed by commit {c}"));
    Finding {
        spoke: String::new(),
        subject: Subject::Sealing,
        status: Status::Critical,
        not_after: None,
        days_left: None,
        credential: None,
        alert: Some(AlertName::SealingCertUntrusted),
        summary: format!(
            "the sealing certificate {} is not trusted (expected {}{commit}): nothing is sealed to it",
            u.sha256,
            full.join(", ")
        ),
        description: u.error.clone(),
        detail: format!(
            "not trusted: {} (expected {}{commit})",
            u.sha256.short(),
            expected.join(", ")
        ),
    }
}

/// A pending pull request: a warning; critical with an alert once the hub's credential
/// is broken (this spoke's findings show a CA mismatch, an expired certificate, or
/// nothing usable committed) and the fix has waited longer than `pending_review_after`.
fn review(
    cfg: &AlertsConfig,
    spoke: &str,
    report: &crate::rotate::SpokeReport,
    found: &[Finding],
) -> Option<Finding> {
    let crate::rotate::Outcome::Pending {
        branch,
        pull_request,
        pending_seconds,
        ..
    } = &report.outcome
    else {
        return None;
    };
    let age = Duration::from_secs(pending_seconds.unwrap_or(0));
    let broken = found.iter().any(|f| {
        f.alert == Some(AlertName::CaMismatch)
            || (matches!(f.subject, Subject::Client | Subject::Ca) && f.status == Status::Expired)
            || (f.subject == Subject::State && f.status == Status::Unknown)
    });
    let at = pull_request
        .as_ref()
        .map_or_else(|| format!("branch {branch}"), |p| p.url.clone());
    let waited = crate::rotate::review::human(age.as_secs());
    let detail = format!("waiting for review for {waited}: {at}");
    if broken && age > cfg.pending_review_after {
        return Some(Finding {
            spoke: spoke.into(),
            subject: Subject::Review,
            status: Status::Critical,
            not_after: None,
            days_left: None,
            credential: None,
            alert: Some(AlertName::ReviewPending),
            summary: format!("spoke {spoke}: the fix for a broken hub credential waits for review"),
            description: format!(
                "The hub's credential for spoke {spoke} no longer works and its validated replacement has waited for review for {waited} (more than alerts.pending_review_after, {}): review and merge {at}.",
                span(cfg.pending_review_after)
            ),
            detail,
        });
    }
    Some(plain(spoke, Subject::Review, Status::Warning, detail))
}

/// A warning about the fleet repo's Flux objects for `spoke` (`check`'s layout traps).
pub(crate) fn flux_layout(spoke: &str, detail: String) -> Finding {
    plain(spoke, Subject::Flux, Status::Warning, detail)
}

fn plain(spoke: &str, subject: Subject, status: Status, detail: String) -> Finding {
    Finding {
        spoke: spoke.into(),
        subject,
        status,
        not_after: None,
        days_left: None,
        summary: format!("spoke {spoke}: {}: {detail}", subject.title()),
        description: detail.clone(),
        detail,
        credential: None,
        alert: None,
    }
}

fn expiry(
    cfg: &AlertsConfig,
    spoke: &str,
    subject: Subject,
    not_after: OffsetDateTime,
    now: OffsetDateTime,
) -> Finding {
    let status = grade(not_after, now, cfg);
    let days = crate::certs::days_until(not_after, now);
    let date = rfc3339(not_after);
    let when = match status {
        Status::Expired => format!("expired on {date}"),
        _ if days == 0 => format!("expires within a day, on {date}"),
        _ if days == 1 => format!("expires in 1 day, on {date}"),
        _ => format!("expires in {days} days, on {date}"),
    };
    let detail = match status {
        Status::Ok => format!("valid for {days} more days"),
        Status::Warning => format!(
            "expires in {days} days (warning below {})",
            span(cfg.warn_before)
        ),
        Status::Critical => format!(
            "expires in {days} days (critical below {})",
            span(cfg.critical_before)
        ),
        _ => format!("expired {} days ago", -days),
    };
    let title = subject.title();
    Finding {
        spoke: spoke.into(),
        subject,
        status,
        not_after: Some(not_after),
        days_left: Some(days),
        credential: None,
        alert: match status {
            Status::Warning | Status::Critical => Some(AlertName::CertificateExpiring),
            Status::Expired => Some(AlertName::CertificateExpired),
            _ => None,
        },
        summary: format!("spoke {spoke}: the {title} {when}"),
        description: format!(
            "The {title} of spoke {spoke} {when} (spokekeeper warns below {}, critical below {}). {}",
            span(cfg.warn_before),
            span(cfg.critical_before),
            advice(subject, spoke)
        ),
        detail,
    }
}

/// A minted certificate's finding names its user and generation, and its advice is
/// spokekeeper's own renewal, not the node's.
fn name_credential(f: &mut Finding, facts: CredentialFacts) {
    if let Some(minted) = facts.describe() {
        let spoke = f.spoke.clone();
        let title = Subject::Client.title();
        let named = format!("{title} {minted}");
        f.summary = f.summary.replacen(title, &named, 1);
        f.description = f
            .description
            .replacen(title, &named, 1)
            .replace(&advice(Subject::Client, &spoke), &minted_advice(&spoke));
        if f.not_after.is_some() {
            f.detail = format!("{} ({minted})", f.detail);
        }
    }
    f.credential = Some(facts);
}

fn minted_advice(spoke: &str) -> String {
    format!(
        "spokekeeper mints the next generation when credential.renew_before is reached; if it has not, see why (`spokekeeper check {spoke}`, a failure at stage mint) and run `spokekeeper rotate {spoke} --force`."
    )
}

fn advice(subject: Subject, spoke: &str) -> String {
    match subject {
        Subject::Client => format!(
            "Renew it on the node (k3s and RKE2 renew client certificates on restart within 120 days of expiry; kubeadm: `kubeadm certs renew admin.conf`), then run `spokekeeper rotate {spoke} --force` or wait for the periodic check to commit it."
        ),
        Subject::Ca => format!(
            "Rotate the cluster CA on the spoke (k3s: `k3s certificate rotate-ca`); spokekeeper sees the new CA and commits a fresh kubeconfig for {spoke}."
        ),
        Subject::Serving => "Renew the API server's serving certificate on the node (k3s renews it on restart within 120 days of expiry).".into(),
        _ => "Fetch the controller's current certificate (`kubeseal --fetch-cert`) into sealing.cert; spokekeeper then re-seals every spoke to it.".into(),
    }
}

fn ca_mismatch(spoke: &str, recorded: &Fingerprint<Ca>) -> Finding {
    let detail = format!(
        "the API presents a certificate not signed by the recorded CA {}: spoke rebuilt?",
        recorded.short()
    );
    Finding {
        spoke: spoke.into(),
        subject: Subject::Ca,
        status: Status::Critical,
        not_after: None,
        days_left: None,
        credential: None,
        alert: Some(AlertName::CaMismatch),
        summary: format!("spoke {spoke}: its CA changed; the hub's kubeconfig no longer trusts it"),
        description: format!(
            "Spoke {spoke}'s API server presents a serving certificate that is not signed by the CA recorded for the hub's kubeconfig ({recorded}): Flux cannot reach the spoke (x509: certificate signed by unknown authority). Run `spokekeeper rotate {spoke}` to commit a fresh kubeconfig."
        ),
        detail,
    }
}

fn unreachable(spoke: &str, error: &str) -> Finding {
    Finding {
        spoke: spoke.into(),
        subject: Subject::Api,
        status: Status::Unknown,
        not_after: None,
        days_left: None,
        credential: None,
        alert: Some(AlertName::SpokeUnreachable),
        summary: format!("spoke {spoke}: the API server cannot be probed"),
        description: format!(
            "spokekeeper could not probe spoke {spoke}'s API server: {error}. The committed kubeconfig is left as it is; check the API server and the network from the hub."
        ),
        detail: error.into(),
    }
}

fn rotation(spoke: &str, report: &crate::rotate::SpokeReport) -> Finding {
    use crate::rotate::Outcome;
    match &report.outcome {
        Outcome::Failed(error) => {
            let stage = error.stage();
            Finding {
                spoke: spoke.into(),
                subject: Subject::Rotation,
                status: Status::Warning,
                not_after: None,
                days_left: None,
                credential: None,
                alert: Some(AlertName::RotationFailing),
                summary: format!("spoke {spoke}: rotation failed at {stage}"),
                description: format!(
                    "The last tick for spoke {spoke} failed at {stage}: {error}. The committed kubeconfig is untouched; `spokekeeper rotate {spoke}` shows the same check."
                ),
                detail: format!("failed at {stage}: {error}"),
            }
        }
        other => {
            let what = serde_json::to_value(other)
                .ok()
                .and_then(|v| v["action"].as_str().map(str::to_string))
                .unwrap_or_default();
            plain(spoke, Subject::Rotation, Status::Ok, what)
        }
    }
}

/// After a push: a SealedSecret the controller did not unseal, or a consumer (Kustomization
/// or HelmRelease) not Ready with the new credential. The commit stays; this says the hub
/// is not using it. No consumer at all is a warning without an alert: nothing deploys
/// with the Secret, so nothing is broken by it (hub::verify::HubReport::unused).
fn hub(spoke: &str, h: &crate::hub::verify::HubReport) -> Finding {
    let detail = h.summary();
    if h.unused() {
        return plain(spoke, Subject::Hub, Status::Warning, detail);
    }
    if h.ok() {
        return plain(spoke, Subject::Hub, Status::Ok, detail);
    }
    let advice = if !h.synced.ok {
        "Check the Sealed Secrets controller (`kubectl -n kube-system logs deploy/sealed-secrets-controller`) and the SealedSecret's status; if its key was replaced, spokekeeper re-seals once it serves the new certificate.".to_string()
    } else if h.list_error.is_some() {
        "Check that spokekeeper may list Kustomizations and HelmReleases in the Secret's namespace (the chart's Role), or set spokes[].kustomization.".to_string()
    } else {
        let not_ready: Vec<String> = h
            .consumers
            .iter()
            .filter(|c| !c.ready.ok)
            .take(5)
            .map(|c| c.consumer.to_string())
            .collect();
        format!(
            "Check {} (`flux get kustomizations`, `flux get helmreleases`) and their events.",
            not_ready.join(", ")
        )
    };
    Finding {
        spoke: spoke.into(),
        subject: Subject::Hub,
        status: Status::Warning,
        not_after: None,
        days_left: None,
        credential: None,
        alert: Some(AlertName::HubNotReady),
        summary: format!("spoke {spoke}: the hub is not using the pushed kubeconfig: {detail}"),
        description: format!(
            "spokekeeper pushed a validated kubeconfig for spoke {spoke}, but on the hub it is {detail}. The commit is kept. {advice}"
        ),
        detail,
    }
}

fn span(d: Duration) -> String {
    Span(d).to_string()
}

#[cfg(test)]
mod tests;
