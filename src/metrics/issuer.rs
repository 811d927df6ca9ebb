//! The hub's issuers federated spokes trust, one series per issuer (not per spoke: a
//! fleet shares one): the certificate serving its discovery URL, whether spokekeeper
//! could use it as a spoke's API server must, and how many spokes' files trust the next
//! one.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Timestamp;
use crate::federate::issuer::{NextTrust, Role, Seen};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IssuerLabels {
    issuer: String,
    /// `current` (credential.federated.issuer) or `next` (credential.federated.next).
    role: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NextLabels {
    issuer: String,
    /// Whether the spokes counted run a file trusting it.
    trusting: &'static str,
}

#[derive(Clone, Debug, Default)]
pub(super) struct IssuerMetrics {
    not_after: Family<IssuerLabels, Timestamp>,
    up: Family<IssuerLabels, Gauge>,
    next_spokes: Family<NextLabels, Gauge>,
}

impl IssuerMetrics {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "issuer_certificate_not_after_timestamp_seconds",
            "When the certificate serving a hub issuer's discovery URL expires (federated spokes; role current or next)",
            self.not_after.clone(),
        );
        r.register(
            "issuer_up",
            "1 when spokekeeper fetched the issuer's discovery document (naming it) and keys, verified with its issuer_ca, in the last tick, else 0",
            self.up.clone(),
        );
        r.register(
            "next_issuer_spokes",
            "Federated spokes configured with credential.federated.next, by whether their file trusts it (trusting true or false)",
            self.next_spokes.clone(),
        );
    }

    pub(super) fn clear(&self) {
        self.not_after.clear();
        self.up.clear();
        self.next_spokes.clear();
    }

    /// What the last tick saw of the issuers.
    pub(super) fn observe(&self, seen: &[Seen], next: &[NextTrust]) {
        self.clear();
        for s in seen {
            let labels = IssuerLabels {
                issuer: s.issuer.clone(),
                role: match s.role {
                    Role::Current => "current",
                    Role::Next => "next",
                },
            };
            if let Some(t) = s.not_after {
                self.not_after
                    .get_or_create(&labels)
                    .set(super::offset_seconds(t));
            }
            self.up
                .get_or_create(&labels)
                .set(i64::from(s.problem.is_none()));
        }
        for n in next {
            for (trusting, count) in [("true", n.trusting), ("false", n.of - n.trusting)] {
                self.next_spokes
                    .get_or_create(&NextLabels {
                        issuer: n.issuer.clone(),
                        trusting,
                    })
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
        }
    }
}
