//! One rule per kind of finding: an expiry graded against the thresholds, a CA that
//! changed, an API that did not answer, a tick's outcome, the hub's take-up, a pull
//! request waiting for review, an untrusted sealing certificate.

use std::time::Duration;

use time::OffsetDateTime;

use super::{AlertName, CredentialFacts, Finding, Status, Subject, grade, span};
use crate::config::AlertsConfig;
use crate::fingerprint::{AgeRecipients, Ca, Fingerprint};
use crate::rotate::state::rfc3339;

/// The fleet repo's sealing certificate is not confirmed (fleet-wide: `spoke=""`); also
/// what `spokekeeper check` reports.
pub fn untrusted_sealing(u: &crate::hub::cert::Untrusted) -> Finding {
    let expected: Vec<String> = u.expected.iter().map(|e| e.short()).collect();
    let full: Vec<String> = u.expected.iter().map(ToString::to_string).collect();
    let commit = u
        .commit
        .as_deref()
        .map_or_else(String::new, |c| format!(", changed by commit {c}"));
    let detail = format!(
        "not trusted: {} (expected {}{commit})",
        u.sha256.short(),
        expected.join(", ")
    );
    Finding {
        alert: Some(AlertName::SealingCertUntrusted),
        summary: format!(
            "the sealing certificate {} is not trusted (expected {}{commit}): nothing is sealed to it",
            u.sha256,
            full.join(", ")
        ),
        description: u.error.clone(),
        ..plain("", Subject::Sealing, Status::Critical, detail)
    }
}

/// A pending pull request: a warning; critical with an alert once the hub's credential
/// is broken (this spoke's findings show a CA mismatch, an expired certificate, or
/// nothing usable committed) and the fix has waited longer than `pending_review_after`.
pub(super) fn review(
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
            alert: Some(AlertName::ReviewPending),
            summary: format!("spoke {spoke}: the fix for a broken hub credential waits for review"),
            description: format!(
                "The hub's credential for spoke {spoke} no longer works and its validated replacement has waited for review for {waited} (more than alerts.pending_review_after, {}): review and merge {at}.",
                span(cfg.pending_review_after)
            ),
            ..plain(spoke, Subject::Review, Status::Critical, detail)
        });
    }
    Some(plain(spoke, Subject::Review, Status::Warning, detail))
}

/// `check`: a sops spoke's age recipients cannot be read or are not trusted, so a tick
/// would fail it at `seal`.
pub fn sops_recipients(spoke: &str, detail: String) -> Finding {
    plain(spoke, Subject::Sealing, Status::Critical, detail)
}

/// A warning about the fleet repo's Flux objects for `spoke` (`check`'s layout traps).
pub fn flux_layout(spoke: &str, detail: String) -> Finding {
    plain(spoke, Subject::Flux, Status::Warning, detail)
}

/// Review mode: a federated spoke's old Secret's removal waits for review (`check`).
pub fn removal_pending(spoke: &str, file: &str, url: &str) -> Finding {
    let detail = format!("the removal of the old Secret {file} waits for review: {url}");
    plain(spoke, Subject::Review, Status::Ok, detail)
}

pub(super) fn plain(spoke: &str, subject: Subject, status: Status, detail: String) -> Finding {
    Finding {
        spoke: spoke.into(),
        subject,
        status,
        not_after: None,
        days_left: None,
        summary: format!("spoke {spoke}: {}: {detail}", subject.title()),
        description: match status {
            Status::Ok => String::new(),
            _ => detail.clone(),
        },
        detail,
        credential: None,
        alert: None,
    }
}

pub(super) fn expiry(
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
        not_after: Some(not_after),
        days_left: Some(days),
        alert: match status {
            Status::Warning | Status::Critical => Some(AlertName::CertificateExpiring),
            Status::Expired => Some(AlertName::CertificateExpired),
            _ => None,
        },
        summary: format!("spoke {spoke}: the {title} {when}"),
        description: match status {
            Status::Ok => String::new(),
            _ => format!(
                "The {title} of spoke {spoke} {when} (spokekeeper warns below {}, critical below {}). {}",
                span(cfg.warn_before),
                span(cfg.critical_before),
                advice(subject, spoke)
            ),
        },
        ..plain(spoke, subject, status, detail)
    }
}

/// A minted certificate's finding names its user and generation, and its advice is
/// spokekeeper's own renewal, not the node's.
pub(super) fn name_credential(f: &mut Finding, facts: CredentialFacts) {
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
    f.credential = Some(Box::new(facts));
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
        Subject::Issuer | Subject::NextIssuer => "Renew the certificate serving the hub issuer's discovery URL (and keep credential.federated.issuer_ca verifying it): once it expires, the spoke's API server cannot fetch the issuer's keys, and refuses the hub's tokens when the keys change or it restarts.".into(),
        _ => "Fetch the controller's current certificate (`kubeseal --fetch-cert`) into sealing.cert; spokekeeper then re-seals every spoke to it.".into(),
    }
}

pub(super) fn ca_mismatch(spoke: &str, recorded: &Fingerprint<Ca>) -> Finding {
    let detail = format!(
        "the API presents a certificate not signed by the recorded CA {}: spoke rebuilt?",
        recorded.short()
    );
    Finding {
        alert: Some(AlertName::CaMismatch),
        summary: format!("spoke {spoke}: its CA changed; the hub's kubeconfig no longer trusts it"),
        description: format!(
            "Spoke {spoke}'s API server presents a serving certificate that is not signed by the CA recorded for the hub's kubeconfig ({recorded}): Flux cannot reach the spoke (x509: certificate signed by unknown authority). Run `spokekeeper rotate {spoke}` to commit a fresh kubeconfig."
        ),
        ..plain(spoke, Subject::Ca, Status::Critical, detail)
    }
}

pub(super) fn unreachable(spoke: &str, error: &str) -> Finding {
    Finding {
        alert: Some(AlertName::SpokeUnreachable),
        summary: format!("spoke {spoke}: the API server cannot be probed"),
        description: format!(
            "spokekeeper could not probe spoke {spoke}'s API server: {error}. The committed kubeconfig is left as it is; check the API server and the network from the hub."
        ),
        ..plain(spoke, Subject::Api, Status::Unknown, error.into())
    }
}

pub(super) fn rotation(spoke: &str, report: &crate::rotate::SpokeReport) -> Finding {
    use crate::rotate::{Outcome, Reason};
    if let (Outcome::Rotated { commit }, Some(Reason::RecipientsChanged { old, new })) =
        (&report.outcome, &report.reason)
    {
        return recipients_changed(spoke, commit, old, new);
    }
    if let Some(finding) = dropped(spoke, report) {
        return finding;
    }
    match &report.outcome {
        Outcome::Failed(error) => {
            let stage = error.stage();
            rotation_warning(
                spoke,
                AlertName::RotationFailing,
                format!("spoke {spoke}: rotation failed at {stage}"),
                format!(
                    "The last tick for spoke {spoke} failed at {stage}: {error}. The committed kubeconfig is untouched; `spokekeeper rotate {spoke}` shows the same check."
                ),
                format!("failed at {stage}: {error}"),
            )
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

/// A federated spoke whose file trusts no issuer (`revoke --drop-issuer`): this tick
/// dropped it, or refused to trust the hub again. Flux fails against the spoke until
/// `rotate SPOKE --force`, which is wanted; the alert keeps it from being forgotten.
fn dropped(spoke: &str, report: &crate::rotate::SpokeReport) -> Option<Finding> {
    use crate::federate::FederateError;
    use crate::rotate::{Outcome, Reason, SpokeError};
    let at = match (&report.outcome, &report.reason) {
        (Outcome::Failed(SpokeError::Federate(e)), _) => match &**e {
            FederateError::IssuerDropped { at, .. } => at.clone(),
            _ => return None,
        },
        (Outcome::Failed(_), _) => return None,
        (_, Some(Reason::IssuerDropped { at, .. })) => at.clone(),
        _ => return None,
    };
    Some(rotation_warning(
        spoke,
        AlertName::IssuerDropped,
        format!("spoke {spoke}: trusts no hub token since {at} (revoke --drop-issuer)"),
        format!(
            "`spokekeeper revoke {spoke} --drop-issuer` dropped the hub's issuer from the spoke's AuthenticationConfiguration at {at}: its API server refuses every hub token and Flux cannot deploy to it. No tick trusts the hub again by itself. Once the hub is safe again (its service-account signing key rotated), run `spokekeeper rotate {spoke} --force`."
        ),
        format!("the hub's issuer dropped at {at}: rotate {spoke} --force trusts it again"),
    ))
}

/// A commit that encrypted the spoke's credential for other age recipients: every one
/// is told, since the recipients come from the fleet repo (its `.sops.yaml` or
/// recipients file) and whoever holds one of the new identities reads the credential.
fn recipients_changed(
    spoke: &str,
    commit: &str,
    old: &Fingerprint<AgeRecipients>,
    new: &Fingerprint<AgeRecipients>,
) -> Finding {
    let short: String = commit.chars().take(12).collect();
    rotation_warning(
        spoke,
        AlertName::RecipientsChanged,
        format!(
            "spoke {spoke}: the credential was encrypted for other age recipients ({} -> {})",
            old.short(),
            new.short()
        ),
        format!(
            "Commit {short} encrypted the credential of spoke {spoke} for the age recipients {new}; it was encrypted for {old}. The recipients come from the fleet repo (sealing.sops_config or a recipients file in it), pinned by sealing.age_sha256: check that the change was wanted, since whoever holds an identity of {new} can read the credential; if not, revert it and rotate the spoke's credential."
        ),
        format!(
            "re-encrypted for age recipients {} (was {}), commit {short}",
            new.short(),
            old.short()
        ),
    )
}

/// A warning about the tick's outcome for `spoke`, raising `alert`.
fn rotation_warning(
    spoke: &str,
    alert: AlertName,
    summary: String,
    description: String,
    detail: String,
) -> Finding {
    Finding {
        alert: Some(alert),
        summary,
        description,
        ..plain(spoke, Subject::Rotation, Status::Warning, detail)
    }
}

/// After a push: a SealedSecret the controller did not unseal, or a consumer (Kustomization
/// or HelmRelease) not Ready with the new credential. The commit stays; this says the hub
/// is not using it. No consumer at all is a warning without an alert: nothing deploys
/// with the Secret, so nothing is broken by it (hub::verify::HubReport::unused).
pub(super) fn hub(spoke: &str, h: &crate::hub::verify::HubReport) -> Finding {
    use crate::hub::verify::Delivery;
    let detail = h.summary();
    if h.unused() {
        return plain(spoke, Subject::Hub, Status::Warning, detail);
    }
    if h.ok() {
        return plain(spoke, Subject::Hub, Status::Ok, detail);
    }
    let advice = if let Delivery::Decrypted(c) = &h.delivery
        && !c.ok
    {
        "Check the Kustomization that decrypts the file (`flux get kustomizations`, spec.decryption) and that its age key Secret holds the identity of one of sealing.age_recipients.".to_string()
    } else if !h.delivery.check().ok {
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
        alert: Some(AlertName::HubNotReady),
        summary: format!("spoke {spoke}: the hub is not using the pushed kubeconfig: {detail}"),
        description: format!(
            "spokekeeper pushed a validated kubeconfig for spoke {spoke}, but on the hub it is {detail}. The commit is kept. {advice}"
        ),
        ..plain(spoke, Subject::Hub, Status::Warning, detail)
    }
}
