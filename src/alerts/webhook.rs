//! Change detection for the webhook and the log: a finding is sent when its status (or
//! the alert it raises) differs from the last delivered one. A finding seen for the
//! first time counts as changed from ok, so a restart re-announces what is not ok; a
//! finding that disappears (spoke removed, state now recorded) counts as back to ok.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use time::OffsetDateTime;

use super::{AlertName, Finding, Status, Subject};

type Key = (String, Subject);

/// One change, as sent in the webhook's `changes` array.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Change {
    pub spoke: String,
    pub cert: Subject,
    pub previous: Status,
    pub severity: Status,
    pub alertname: Option<AlertName>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub not_after: Option<OffsetDateTime>,
    pub summary: String,
    pub description: String,
}

/// The last delivered status of every finding that was not fine (a finding absent here
/// was ok with no alert: at 10 000 spokes the fine ones are nearly all of them, and the
/// daemon keeps this between ticks).
#[derive(Debug, Default)]
pub(crate) struct WebhookState {
    last: BTreeMap<Key, (Status, Option<AlertName>)>,
}

/// What a finding is taken to have been when nothing is remembered of it.
const FINE: (Status, Option<AlertName>) = (Status::Ok, None);

impl WebhookState {
    pub(super) fn changes(&self, findings: &[Finding]) -> Vec<Change> {
        let mut out = Vec::new();
        // Only the remembered keys can vanish: the set holds no others.
        let mut seen = BTreeSet::new();
        for f in findings {
            let key = (f.spoke.clone(), f.subject);
            let now = (f.status, f.alert);
            let before = self.last.get(&key).copied().unwrap_or(FINE);
            if self.last.contains_key(&key) {
                seen.insert(key);
            }
            if before != now {
                out.push(Change {
                    spoke: f.spoke.clone(),
                    cert: f.subject,
                    previous: before.0,
                    severity: f.status,
                    alertname: f.alert,
                    not_after: f.not_after,
                    summary: f.summary.clone(),
                    description: match f.description.is_empty() {
                        true => f.summary.clone(),
                        false => f.description.clone(),
                    },
                });
            }
        }
        for ((spoke, subject), (status, _)) in &self.last {
            if *status != Status::Ok && !seen.contains(&(spoke.clone(), *subject)) {
                out.push(Change {
                    spoke: spoke.clone(),
                    cert: *subject,
                    previous: *status,
                    severity: Status::Ok,
                    alertname: None,
                    not_after: None,
                    summary: format!("spoke {spoke}: {} no longer reported", subject.as_str()),
                    description: format!(
                        "spoke {spoke}: the {} finding is gone (spoke removed from the configuration, or its state is now recorded)",
                        subject.as_str()
                    ),
                });
            }
        }
        out
    }

    /// Records what was delivered; call only after a successful send.
    pub(crate) fn remember(&mut self, findings: &[Finding]) {
        self.last = findings
            .iter()
            .filter(|f| (f.status, f.alert) != FINE)
            .map(|f| ((f.spoke.clone(), f.subject), (f.status, f.alert)))
            .collect();
    }
}

/// The webhook's JSON body.
#[derive(Debug, Serialize)]
pub(crate) struct Payload<'a> {
    pub source: &'static str,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub changes: &'a [Change],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(spoke: &str, subject: Subject, status: Status) -> Finding {
        Finding {
            spoke: spoke.into(),
            subject,
            status,
            not_after: None,
            days_left: None,
            detail: String::new(),
            credential: None,
            alert: (status != Status::Ok).then_some(AlertName::CertificateExpiring),
            summary: "s".into(),
            description: "d".into(),
        }
    }

    #[test]
    fn only_changes_are_reported() {
        let mut st = WebhookState::default();
        let first = [
            f("dev", Subject::Client, Status::Warning),
            f("dev", Subject::Ca, Status::Ok),
        ];
        let c = st.changes(&first);
        assert_eq!(c.len(), 1, "ok from the start is no change: {c:?}");
        assert_eq!(
            (c[0].previous, c[0].severity),
            (Status::Ok, Status::Warning)
        );
        st.remember(&first);
        assert!(st.changes(&first).is_empty(), "same again: nothing");

        let worse = [
            f("dev", Subject::Client, Status::Critical),
            f("dev", Subject::Ca, Status::Ok),
        ];
        let c = st.changes(&worse);
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].previous, c[0].severity),
            (Status::Warning, Status::Critical)
        );
        st.remember(&worse);

        // Only what is not fine is kept between sends.
        assert_eq!(st.last.len(), 1, "{:?}", st.last);

        let fixed = [
            f("dev", Subject::Client, Status::Ok),
            f("dev", Subject::Ca, Status::Ok),
        ];
        let c = st.changes(&fixed);
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].previous, c[0].severity),
            (Status::Critical, Status::Ok)
        );
        st.remember(&fixed);
        assert!(st.last.is_empty(), "{:?}", st.last);
        assert!(st.changes(&fixed).is_empty());
        // A fine finding that vanishes is no change; a bad one that vanishes resolves.
        assert!(st.changes(&[]).is_empty());
    }

    #[test]
    fn undelivered_changes_are_found_again_and_vanished_findings_resolve() {
        let mut st = WebhookState::default();
        let bad = [f("dev", Subject::State, Status::Unknown)];
        assert_eq!(st.changes(&bad).len(), 1);
        // Not remembered (the send failed): the same change is found next time.
        assert_eq!(st.changes(&bad).len(), 1);
        st.remember(&bad);
        let c = st.changes(&[f("dev", Subject::Client, Status::Ok)]);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].cert, Subject::State);
        assert_eq!(
            (c[0].previous, c[0].severity),
            (Status::Unknown, Status::Ok)
        );
    }
}
