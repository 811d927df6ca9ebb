//! Alertmanager v2 (`POST /api/v2/alerts`): what to send, and what was active last time.
//!
//! Alertmanager forgets an alert at its `endsAt`, so active alerts are re-sent every
//! evaluation with `endsAt` a few evaluation periods ahead (as Prometheus does: a dead
//! spokekeeper's alerts resolve on their own), and an alert that went away is sent once
//! with `endsAt = now` so it clears at once. An alert is its label set: a warning that
//! turns critical resolves the warning and fires the critical one.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use super::Finding;

/// How many evaluation periods an active alert stays valid without being re-sent.
pub(crate) const VALID_FOR_PERIODS: u32 = 4;

pub(super) type Labels = BTreeMap<String, String>;

/// One element of the POSTed array (Alertmanager's `postableAlert`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PostableAlert {
    pub labels: Labels,
    pub annotations: BTreeMap<String, String>,
    #[serde(with = "time::serde::rfc3339")]
    pub(crate) starts_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub(crate) ends_at: OffsetDateTime,
}

/// What was active at the last send, and resolutions not delivered yet.
#[derive(Debug, Default)]
pub(crate) struct AlertmanagerState {
    active: BTreeMap<Labels, PostableAlert>,
    unsent_resolved: BTreeMap<Labels, PostableAlert>,
}

/// A batch to send and the state to keep once it is delivered (or not).
#[derive(Debug)]
pub(crate) struct Batch {
    pub alerts: Vec<PostableAlert>,
    active: BTreeMap<Labels, PostableAlert>,
    resolved: BTreeMap<Labels, PostableAlert>,
}

impl AlertmanagerState {
    /// The alerts to POST now: every active one (endsAt ahead), and each one that went
    /// away since the last delivered send (endsAt = now).
    pub(super) fn batch(
        &self,
        findings: &[Finding],
        now: OffsetDateTime,
        period: Duration,
    ) -> Batch {
        let valid_until = now + period.saturating_mul(VALID_FOR_PERIODS);
        let mut active = BTreeMap::new();
        for f in findings {
            let (Some(name), Some(severity)) = (f.alert, f.severity()) else {
                continue;
            };
            let mut labels = Labels::new();
            labels.insert("alertname".into(), name.as_str().into());
            labels.insert("spoke".into(), f.spoke.clone());
            if f.subject.is_cert() {
                labels.insert("cert".into(), f.subject.as_str().into());
            }
            labels.insert("severity".into(), severity.into());
            let starts_at = self
                .active
                .get(&labels)
                .or_else(|| self.unsent_resolved.get(&labels))
                .map_or(now, |a| a.starts_at);
            let annotations = BTreeMap::from([
                ("summary".to_string(), f.summary.clone()),
                ("description".to_string(), f.description.clone()),
            ]);
            active.insert(
                labels.clone(),
                PostableAlert {
                    labels,
                    annotations,
                    starts_at,
                    ends_at: valid_until,
                },
            );
        }
        let mut resolved = BTreeMap::new();
        for (labels, old) in self.active.iter().chain(&self.unsent_resolved) {
            if !active.contains_key(labels) {
                let mut gone = old.clone();
                gone.ends_at = now.max(gone.starts_at);
                resolved.insert(labels.clone(), gone);
            }
        }
        let alerts = active.values().chain(resolved.values()).cloned().collect();
        Batch {
            alerts,
            active,
            resolved,
        }
    }

    /// Keeps the batch's view; undelivered resolutions are sent again next time.
    pub(super) fn settle(&mut self, batch: Batch, delivered: bool) {
        self.active = batch.active;
        self.unsent_resolved = if delivered {
            BTreeMap::new()
        } else {
            batch.resolved
        };
    }

    pub(super) fn active(&self) -> impl Iterator<Item = &PostableAlert> {
        self.active.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::{AlertName, Status, Subject};

    fn finding(spoke: &str, subject: Subject, status: Status, alert: Option<AlertName>) -> Finding {
        Finding {
            spoke: spoke.into(),
            subject,
            status,
            not_after: None,
            days_left: None,
            detail: String::new(),
            credential: None,
            alert,
            summary: format!("{spoke} {status}"),
            description: "d".into(),
        }
    }

    fn t(secs: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000 + secs).unwrap()
    }

    const PERIOD: Duration = Duration::from_secs(900);

    #[test]
    fn active_alerts_are_resent_with_ends_at_ahead_and_keep_starts_at() {
        let mut st = AlertmanagerState::default();
        let f = [
            finding(
                "dev",
                Subject::Client,
                Status::Critical,
                Some(AlertName::CertificateExpiring),
            ),
            finding("dev", Subject::Ca, Status::Ok, None),
        ];
        let b = st.batch(&f, t(0), PERIOD);
        assert_eq!(b.alerts.len(), 1, "ok findings raise nothing");
        let a = &b.alerts[0];
        assert_eq!(
            a.labels,
            Labels::from([
                ("alertname".into(), "SpokekeeperCertificateExpiring".into()),
                ("spoke".into(), "dev".into()),
                ("cert".into(), "client".into()),
                ("severity".into(), "critical".into()),
            ])
        );
        assert_eq!(a.ends_at, t(3600));
        st.settle(b, true);
        let b = st.batch(&f, t(900), PERIOD);
        assert_eq!(b.alerts.len(), 1);
        assert_eq!(b.alerts[0].starts_at, t(0), "first seen, not re-stamped");
        assert_eq!(b.alerts[0].ends_at, t(4500));
    }

    #[test]
    fn resolved_alerts_are_sent_once_with_ends_at_now() {
        let mut st = AlertmanagerState::default();
        let firing = [finding(
            "dev",
            Subject::Api,
            Status::Unknown,
            Some(AlertName::SpokeUnreachable),
        )];
        let b = st.batch(&firing, t(0), PERIOD);
        assert!(
            !b.alerts[0].labels.contains_key("cert"),
            "not a certificate"
        );
        assert_eq!(b.alerts[0].labels["severity"], "warning");
        st.settle(b, true);
        let b = st.batch(&[], t(900), PERIOD);
        assert_eq!(b.alerts.len(), 1);
        assert_eq!(b.alerts[0].ends_at, t(900));
        assert_eq!(b.alerts[0].starts_at, t(0));
        st.settle(b, true);
        assert!(
            st.batch(&[], t(1800), PERIOD).alerts.is_empty(),
            "sent once"
        );
    }

    #[test]
    fn undelivered_resolutions_are_sent_again() {
        let mut st = AlertmanagerState::default();
        let firing = [finding(
            "dev",
            Subject::Api,
            Status::Unknown,
            Some(AlertName::SpokeUnreachable),
        )];
        let b = st.batch(&firing, t(0), PERIOD);
        st.settle(b, true);
        let b = st.batch(&[], t(900), PERIOD);
        st.settle(b, false);
        let b = st.batch(&[], t(1800), PERIOD);
        assert_eq!(b.alerts.len(), 1, "still to clear");
        assert_eq!(b.alerts[0].ends_at, t(1800));
        st.settle(b, true);
        assert!(st.batch(&[], t(2700), PERIOD).alerts.is_empty());
    }

    #[test]
    fn warning_turning_critical_resolves_the_warning() {
        let mut st = AlertmanagerState::default();
        let warn = [finding(
            "dev",
            Subject::Client,
            Status::Warning,
            Some(AlertName::CertificateExpiring),
        )];
        let b = st.batch(&warn, t(0), PERIOD);
        st.settle(b, true);
        let crit = [finding(
            "dev",
            Subject::Client,
            Status::Critical,
            Some(AlertName::CertificateExpiring),
        )];
        let b = st.batch(&crit, t(900), PERIOD);
        let by_sev: BTreeMap<&str, &PostableAlert> = b
            .alerts
            .iter()
            .map(|a| (a.labels["severity"].as_str(), a))
            .collect();
        assert_eq!(by_sev.len(), 2);
        assert_eq!(by_sev["warning"].ends_at, t(900));
        assert_eq!(by_sev["critical"].ends_at, t(900 + 3600));
        assert_eq!(by_sev["critical"].starts_at, t(900));
    }

    #[test]
    fn payload_is_alertmanager_v2_json() {
        let st = AlertmanagerState::default();
        let f = [finding(
            "dev",
            Subject::Sealing,
            Status::Expired,
            Some(AlertName::CertificateExpired),
        )];
        let b = st.batch(&f, t(0), PERIOD);
        let v = serde_json::to_value(&b.alerts).unwrap();
        assert_eq!(v[0]["startsAt"], "2027-01-15T08:00:00Z");
        assert_eq!(v[0]["endsAt"], "2027-01-15T09:00:00Z");
        assert_eq!(v[0]["labels"]["cert"], "sealing");
        assert_eq!(v[0]["labels"]["severity"], "critical");
        assert_eq!(v[0]["annotations"]["summary"], "dev expired");
        assert_eq!(v[0].as_object().unwrap().len(), 4);
    }
}
