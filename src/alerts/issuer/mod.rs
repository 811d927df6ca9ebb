//! Federated spokes and the hub's issuer: what can be seen before a spoke refuses a
//! token. Per federated spoke, the issuer it trusts (the certificate serving its
//! discovery URL graded as every certificate is, and whether its document and keys
//! could be fetched from here with `issuer_ca`), and while `credential.federated.next`
//! is set, the next one and whether the spoke's file trusts it yet.
//!
//! A spoke's API server keeps the keys it fetched and fetches again only for a key it
//! does not know, so an issuer it cannot reach shows on the spoke only once the hub's
//! keys change or the API server restarts; these findings come first.

use std::collections::HashMap;

use time::OffsetDateTime;

use super::rules::{expiry, plain};
use super::{AlertName, Finding, Status, Subject};
use crate::config::{AlertsConfig, FederatedPolicy, SpokeConfig};
use crate::federate::issuer::{Looked, NextTrust, Role, Seen};
use crate::rotate::observe::Observation;

/// The federated spokes among `observed` with their policy.
fn federated<'a>(
    spokes: &'a [SpokeConfig],
    observed: &'a [Observation],
) -> impl Iterator<Item = (&'a Observation, &'a FederatedPolicy)> {
    let by_name: HashMap<&str, &SpokeConfig> =
        spokes.iter().map(|s| (s.name.as_str(), s)).collect();
    observed.iter().filter_map(move |o| {
        let policy = by_name
            .get(o.spoke.as_str())?
            .credential
            .federated
            .as_ref()?;
        Some((o, policy))
    })
}

/// Whether the spoke's committed record says its file says what `policy` says now
/// (with the tick's issuer CA files): for a next issuer, that its file trusts it.
fn trusts(seen: &Observation, policy: &FederatedPolicy, looked: &Looked) -> bool {
    let now = crate::federate::trust_fingerprint(policy, &looked.cas);
    seen.committed
        .recorded()
        .is_some_and(|r| r.trust_sha256 == Some(now))
}

/// Per next issuer, how many spokes' files trust it.
pub fn next_trust(
    spokes: &[SpokeConfig],
    observed: &[Observation],
    looked: &Looked,
) -> Vec<NextTrust> {
    let mut out: Vec<NextTrust> = Vec::new();
    for (seen, policy) in federated(spokes, observed) {
        let Some(next) = &policy.next else { continue };
        let at = match out.iter().position(|n| n.issuer == next.issuer) {
            Some(i) => i,
            None => {
                out.push(NextTrust {
                    issuer: next.issuer.clone(),
                    trusting: 0,
                    of: 0,
                    not_yet: Vec::new(),
                });
                out.len() - 1
            }
        };
        let count = &mut out[at];
        count.of += 1;
        if trusts(seen, policy, looked) {
            count.trusting += 1;
        } else if count.not_yet.len() < 5 {
            count.not_yet.push(seen.spoke.clone());
        }
    }
    out
}

/// Each federated spoke's issuer findings: its issuer, and its next one when set.
pub fn issuers(
    cfg: &AlertsConfig,
    spokes: &[SpokeConfig],
    observed: &[Observation],
    looked: &Looked,
    now: OffsetDateTime,
) -> Vec<Finding> {
    let find = |issuer: &str, role: Role| {
        looked
            .seen
            .iter()
            .find(|s| s.issuer == issuer && s.role == role)
    };
    let mut out = Vec::new();
    for (seen, policy) in federated(spokes, observed) {
        let spoke = seen.spoke.as_str();
        let current = find(&policy.issuer, Role::Current);
        out.push(graded(cfg, spoke, Subject::Issuer, current, now));
        let Some(next) = &policy.next else { continue };
        if trusts(seen, policy, looked) {
            let found = find(&next.issuer, Role::Next);
            out.push(graded(cfg, spoke, Subject::NextIssuer, found, now));
        } else {
            out.push(not_trusted(spoke, &next.issuer));
        }
    }
    out
}

/// An issuer as fetched: its certificate's grade when that is not ok, else what kept it
/// from being used, else the certificate's grade.
fn graded(
    cfg: &AlertsConfig,
    spoke: &str,
    subject: Subject,
    seen: Option<&Seen>,
    now: OffsetDateTime,
) -> Finding {
    let Some(seen) = seen else {
        return plain(
            spoke,
            subject,
            Status::Unknown,
            "not looked at this tick".into(),
        );
    };
    let cert = seen
        .not_after
        .map(|na| expiry(cfg, spoke, subject, na, now));
    match (cert, &seen.problem) {
        (Some(f), _) if f.status != Status::Ok => f,
        (_, Some(problem)) => unreachable(spoke, subject, seen, problem),
        (Some(mut f), None) => {
            f.detail = format!("{} at {}: {}", seen.issuer, seen.discovery, f.detail);
            f
        }
        (None, None) => plain(
            spoke,
            subject,
            Status::Unknown,
            format!("{}: no certificate read", seen.discovery),
        ),
    }
}

fn unreachable(spoke: &str, subject: Subject, seen: &Seen, problem: &str) -> Finding {
    let issuer = &seen.issuer;
    Finding {
        alert: Some(AlertName::IssuerUnreachable),
        summary: format!(
            "spoke {spoke}: the hub's {} {issuer} cannot be used",
            subject.title()
        ),
        description: format!(
            "spokekeeper, verifying with credential.federated.issuer_ca, cannot use the hub's {} {issuer} as spoke {spoke}'s API server must: {problem}. The spoke keeps the keys it fetched, so nothing is refused yet; it refuses the hub's tokens once the hub's keys change or its API server restarts. Fix the discovery endpoint or the CA file (docs/federated.md).",
            subject.title()
        ),
        ..plain(spoke, subject, Status::Warning, problem.to_string())
    }
}

fn not_trusted(spoke: &str, next: &str) -> Finding {
    let detail =
        format!("its file does not trust the next issuer {next} yet: the next rotation writes it");
    Finding {
        alert: Some(AlertName::NextIssuerNotTrusted),
        summary: format!("spoke {spoke}: does not trust the hub's next issuer {next} yet"),
        description: format!(
            "credential.federated.next names {next}, but spoke {spoke}'s committed record says its file does not trust it yet (its rotation has not run or failed: see its rotation finding). Do not make the hub sign as {next} until every spoke trusts it: this one would refuse the hub's tokens."
        ),
        ..plain(spoke, Subject::NextIssuer, Status::Warning, detail)
    }
}

#[cfg(test)]
mod tests;
