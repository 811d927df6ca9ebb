//! What a tick tells Flux users where they already look: each rotation, failure, hub
//! verification failure, revocation and expiry warning as a Kubernetes Event on the
//! spoke's Flux consumer (with `hub:`, `hub::recorder`) and as a Flux event to
//! notification-controller (`alerts.flux`, `flux.rs`).
//!
//! [`noted`] is pure (a tick report and its findings in, what to record out); [`Events`]
//! holds each sink's open series across ticks, so a repeat aggregates instead of
//! recording again.

use std::collections::HashMap;
use std::time::Duration;

use time::OffsetDateTime;

use super::flux::FluxSink;
use super::notify::{NotifyError, NotifyOptions, SinkError};
use super::{AlertName, Finding, Status, Subject};
use crate::config::Config;
use crate::hub::consumers::Listed;
use crate::hub::recorder::{Occurrence, Reason, Recorder, Regarding, regarding};
use crate::hub::{Hub, HubError};
use crate::rotate::{Gate, Outcome, TickReport};
use crate::text::one_line;

/// Bounds recording a tick's Events on the hub, connection and listing included.
const HUB_BOUND: Duration = Duration::from_secs(30);

/// One thing to record about a spoke, before knowing which objects it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Noted {
    pub spoke: String,
    pub reason: Reason,
    /// One line, spoke-supplied parts bounded (`text::one_line`); no secret material:
    /// built from errors, fingerprints, names and dates only.
    pub note: String,
}

/// What this tick and its findings record, per spoke in report order, then the expiry
/// findings.
pub(crate) fn noted(report: &TickReport, findings: &[Finding]) -> Vec<Noted> {
    let mut out = Vec::new();
    for s in &report.spokes {
        let spoke = s.spoke.as_str();
        let mut note = |reason, text: String| {
            out.push(Noted {
                spoke: spoke.to_string(),
                reason,
                note: one_line(&text, 900),
            })
        };
        match &s.outcome {
            Outcome::Rotated { commit } => {
                let why = s.reason.as_ref().map_or_else(String::new, |r| {
                    format!(" ({})", one_line(&r.to_string(), 300))
                });
                let short: String = commit.chars().take(12).collect();
                note(
                    Reason::CredentialRotated,
                    format!(
                        "spoke {spoke}: a validated credential was committed{why}, commit {short}"
                    ),
                );
            }
            Outcome::Failed(e) => note(
                Reason::RotationFailed,
                format!(
                    "spoke {spoke}: rotation failed at {}: {}; the committed credential is untouched",
                    e.stage(),
                    one_line(&e.to_string(), 600)
                ),
            ),
            _ => {}
        }
        if let Some(h) = &s.hub
            && !h.ok()
        {
            note(
                Reason::HubVerificationFailed,
                format!(
                    "spoke {spoke}: the hub is not using the pushed credential: {}",
                    one_line(&h.summary(), 600)
                ),
            );
        }
        if !s.revoked.is_empty() {
            let names: Vec<String> = s.revoked.iter().map(|b| one_line(b, 100)).collect();
            let federated = s.credential.as_ref().and_then(|c| c.audience.as_deref());
            note(
                Reason::CredentialRevoked,
                match federated {
                    Some(audience) => format!(
                        "spoke {spoke}: hub tokens for the revoked audience refused (ClusterRoleBinding {} bound nobody at once); the spoke trusts audience {} only",
                        names.join(", "),
                        one_line(audience, 300)
                    ),
                    None => format!(
                        "spoke {spoke}: superseded minted credentials revoked (ClusterRoleBindings deleted: {})",
                        names.join(", ")
                    ),
                },
            );
        }
        if let Some(e) = &s.revoke_error {
            note(
                Reason::RevocationFailed,
                format!(
                    "spoke {spoke}: superseded minted credentials not revoked: {}",
                    one_line(e, 600)
                ),
            );
        }
    }
    out.extend(findings.iter().filter_map(expiry));
    out
}

/// An expiry alert on the hub's credential (its client certificate or CA). The note
/// names the date, not the days left, so that it repeats unchanged from tick to tick.
fn expiry(f: &Finding) -> Option<Noted> {
    let (Subject::Client | Subject::Ca, Some(na)) = (f.subject, f.not_after) else {
        return None;
    };
    let reason = match f.alert? {
        AlertName::CertificateExpiring => Reason::CredentialExpiring,
        AlertName::CertificateExpired => Reason::CredentialExpired,
        _ => return None,
    };
    let date = crate::rotate::state::rfc3339(na);
    let what = match f
        .credential
        .as_deref()
        .and_then(super::CredentialFacts::describe)
    {
        Some(minted) => format!("{} {minted}", f.subject.title()),
        None => f.subject.title().to_string(),
    };
    let note = match f.status {
        Status::Expired => format!("spoke {}: the {what} expired on {date}", f.spoke),
        status => format!("spoke {}: the {what} expires on {date} ({status})", f.spoke),
    };
    Some(Noted {
        spoke: f.spoke.clone(),
        reason,
        note: one_line(&note, 900),
    })
}

/// Why an Event was not recorded or a Flux event not sent.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("hub Events: {0}")]
    Hub(HubError),
    #[error("hub Events: not recorded within {}s", HUB_BOUND.as_secs())]
    HubTimeout,
    #[error(transparent)]
    Flux(#[from] SinkError),
    /// No Alert could select anything else: a Flux event about the credential's own
    /// object would reach nobody.
    #[error(
        "alerts.flux: spoke {spoke}: {reason} not sent: no Flux object of the spoke is known (its consumers could not be listed on the hub); set spokes[].kustomization to the Kustomization your Alert selects"
    )]
    NoFluxObject { spoke: String, reason: Reason },
}

/// The Event sinks and their open series: hold one across ticks.
pub struct Events {
    /// With `hub:`.
    recorder: Option<Recorder>,
    /// With `alerts.flux`.
    flux: Option<FluxSink>,
    /// Each spoke's Flux consumers as last found: a tick that cannot list them (the hub
    /// check failed) still regards them.
    known: HashMap<String, Vec<Regarding>>,
}

impl Events {
    /// `instance` is the reportingInstance (the pod's name); a series stays open for
    /// `window` after its last occurrence (keep it above the tick period).
    pub fn new(
        config: &Config,
        instance: &str,
        window: Duration,
        opts: NotifyOptions,
    ) -> Result<Events, NotifyError> {
        Ok(Events {
            recorder: config.hub.as_ref().map(|_| Recorder::new(instance, window)),
            flux: config
                .alerts
                .flux
                .as_ref()
                .map(|a| FluxSink::new(a, instance, window, opts))
                .transpose()?,
            known: HashMap::new(),
        })
    }

    /// Records what `report` and `findings` note, each Event and notification only if
    /// `gate` is open right before it (a replica that lost the lease records nothing
    /// more). Bounded in time; never panics.
    pub async fn record(
        &mut self,
        config: &Config,
        report: &TickReport,
        findings: &[Finding],
        now: OffsetDateTime,
        gate: &Gate,
    ) -> Vec<EventError> {
        let noted = noted(report, findings);
        let none = self.recorder.is_none() && self.flux.is_none();
        if noted.is_empty() || none || gate.check().is_err() {
            return Vec::new();
        }
        let mut errors = Vec::new();
        let hub = match (&config.hub, &self.recorder) {
            (Some(cfg), Some(_)) => match Hub::connect_bounded(cfg).await {
                Ok(h) => Some(h),
                Err(e) => {
                    errors.push(EventError::Hub(e));
                    None
                }
            },
            _ => None,
        };
        let listed = match &hub {
            Some(h) => listed(h, config, report, &noted).await,
            None => Listed::new(),
        };
        let targeted = targeted(config, report, &listed, &mut self.known, noted);
        if let (Some(hub), Some(recorder)) = (&hub, &mut self.recorder) {
            let all = async {
                let mut failed = Vec::new();
                for o in targeted.iter().flat_map(Targeted::on_hub) {
                    if gate.check().is_err() {
                        break;
                    }
                    if let Err(e) = recorder.record(hub, &o, now).await {
                        failed.push(EventError::Hub(e));
                    }
                }
                failed
            };
            match tokio::time::timeout(HUB_BOUND, all).await {
                Ok(failed) => errors.extend(failed),
                Err(_) => errors.push(EventError::HubTimeout),
            }
        }
        if let Some(flux) = &mut self.flux {
            errors.extend(send_flux(flux, &targeted, gate, now).await);
        }
        errors
    }
}

/// Posts each noted thing about each of its spoke's Flux objects; one without any is an
/// error, not a notification about an object no Alert can select.
async fn send_flux(
    flux: &mut FluxSink,
    targeted: &[Targeted],
    gate: &Gate,
    now: OffsetDateTime,
) -> Vec<EventError> {
    let mut errors = Vec::new();
    for t in targeted {
        if t.consumers.is_empty() {
            errors.push(EventError::NoFluxObject {
                spoke: t.noted.spoke.clone(),
                reason: t.noted.reason,
            });
            continue;
        }
        for o in t.occurrences(&t.consumers) {
            // A replica that lost the lease mid-send tells nothing more.
            if gate.check().is_err() {
                return errors;
            }
            if let Err(e) = flux.send(&o, &t.noted.spoke, now).await {
                errors.push(e.into());
                // The receiver is down: the others would wait as long.
                return errors;
            }
        }
    }
    errors
}

/// The consumers of the spokes whose objects this tick's verification did not list.
async fn listed(hub: &Hub, config: &Config, report: &TickReport, noted: &[Noted]) -> Listed {
    let unknown = config.spokes.iter().filter(|s| {
        noted.iter().any(|n| n.spoke == s.name)
            && !report.spokes.iter().any(|r| {
                r.spoke == s.name && r.hub.as_ref().is_some_and(|h| !h.consumers.is_empty())
            })
    });
    hub.list_consumers(unknown, HUB_BOUND / 3).await
}

/// One noted thing and the objects it is about.
#[derive(Debug)]
struct Targeted {
    noted: Noted,
    /// The spoke's Flux consumers (this tick's, else the last known); may be none.
    consumers: Vec<Regarding>,
    /// The committed credential's object on the hub.
    credential: Regarding,
}

impl Targeted {
    fn occurrences(&self, about: &[Regarding]) -> Vec<Occurrence> {
        about
            .iter()
            .map(|r| Occurrence {
                regarding: r.clone(),
                reason: self.noted.reason,
                note: self.noted.note.clone(),
            })
            .collect()
    }

    /// The hub's Events: on the consumers, else on the credential's object (`kubectl
    /// events` lists Events on any object).
    fn on_hub(&self) -> Vec<Occurrence> {
        match self.consumers.is_empty() {
            true => self.occurrences(std::slice::from_ref(&self.credential)),
            false => self.occurrences(&self.consumers),
        }
    }
}

/// Each noted thing with the objects it is about; `known` keeps each spoke's consumers
/// for the ticks that cannot find them.
fn targeted(
    config: &Config,
    report: &TickReport,
    listed: &Listed,
    known: &mut HashMap<String, Vec<Regarding>>,
    noted: Vec<Noted>,
) -> Vec<Targeted> {
    let mut out = Vec::new();
    for n in noted {
        let Some(spoke) = config.spokes.iter().find(|s| s.name == n.spoke) else {
            continue;
        };
        let verified = report
            .spokes
            .iter()
            .find(|r| r.spoke == n.spoke)
            .and_then(|r| r.hub.as_deref());
        let found = regarding(spoke, verified, listed);
        let consumers = match found.is_empty() {
            true => known.get(&n.spoke).cloned().unwrap_or_default(),
            false => {
                known.insert(n.spoke.clone(), found.clone());
                found
            }
        };
        out.push(Targeted {
            noted: n,
            consumers,
            credential: Regarding::credential(spoke),
        });
    }
    out
}

#[cfg(test)]
mod tests;
