//! Prometheus metrics of `spokekeeper run`, updated from each tick's report so the
//! pipeline itself carries no metrics plumbing.
//!
//! Gauges describe the last tick (a spoke that left the configuration leaves them);
//! counters only grow. Fleet-wide errors (sync, push, a tick that failed as a whole,
//! a rejected reload) carry `spoke=""`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use time::OffsetDateTime;

use crate::rotate::{Outcome, Reason, TickReport};

mod issuer;

/// What `/metrics` answers with (prometheus-client writes OpenMetrics text).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Timestamp = Gauge<f64, AtomicU64>;

/// A metric that may be absent from the exposition, descriptor and all (the registry
/// skips an empty metric): the sealing certificate's series when there is none.
#[derive(Clone, Debug)]
struct Shown<M> {
    metric: M,
    shown: Arc<AtomicBool>,
}

impl<M: Default> Default for Shown<M> {
    fn default() -> Self {
        Shown {
            metric: M::default(),
            shown: Arc::new(AtomicBool::new(true)),
        }
    }
}

impl<M> Shown<M> {
    fn show(&self, shown: bool) {
        self.shown.store(shown, Ordering::Relaxed);
    }
}

impl<M: EncodeMetric> EncodeMetric for Shown<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.metric.encode(encoder)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        self.metric.metric_type()
    }

    fn is_empty(&self) -> bool {
        !self.shown.load(Ordering::Relaxed)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertLabels {
    spoke: String,
    cert: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CredentialLabels {
    spoke: String,
    mode: &'static str,
    /// Minted only (empty when extracted): the user the certificate was signed for.
    user: String,
    /// Minted only (empty when extracted).
    generation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SpokeLabels {
    spoke: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RotationLabels {
    spoke: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    spoke: String,
    /// Only ever one of [`STAGE_LABELS`]: never text from an error.
    stage: &'static str,
}

/// The `stage` label values of `spokekeeper_errors_total` besides the spoke stages
/// ([`crate::rotate::Stage::metric_label`]) and the repo stages
/// ([`crate::rotate::RepoStage::metric_label`]): typed, so no other text can become one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OtherStage {
    /// The hub did not take a pushed credential (per spoke).
    Hub,
    /// A tick failed as a whole.
    Tick,
    /// Alerts could not be evaluated or sent.
    Alert,
    /// The configuration could not be reloaded.
    Reload,
}

impl OtherStage {
    #[cfg(test)]
    const ALL: [OtherStage; 4] = [Self::Hub, Self::Tick, Self::Alert, Self::Reload];

    fn metric_label(self) -> &'static str {
        match self {
            Self::Hub => "hub",
            Self::Tick => "tick",
            Self::Alert => "alert",
            Self::Reload => "reload",
        }
    }
}

/// `spokekeeper_last_rotation_timestamp_seconds`' reason for a rotation known only from
/// the committed annotations.
pub const RECORDED: &str = "recorded";

pub struct Metrics {
    registry: Registry,
    cert_not_after: Family<CertLabels, Timestamp>,
    credential: Family<CredentialLabels, Gauge>,
    spoke_up: Family<SpokeLabels, Gauge>,
    rotations: Family<RotationLabels, Counter>,
    last_rotation: Family<RotationLabels, Timestamp>,
    /// Each spoke's reason and time in `last_rotation`, so a new reason replaces its
    /// series and a recorded time never replaces a later one.
    last_reason: Mutex<HashMap<String, (&'static str, f64)>>,
    errors: Family<ErrorLabels, Counter>,
    tick_duration: Histogram,
    last_tick: Timestamp,
    /// These three hidden while the fleet has no sealing certificate (every spoke is
    /// sops): there is none to expire, fetch or trust.
    sealing_not_after: Shown<Timestamp>,
    hub_reachable: Shown<Gauge>,
    leader: Gauge,
    sealing_cert_trusted: Shown<Gauge>,
    hub_synced: Family<SpokeLabels, Gauge>,
    hub_ready: Family<SpokeLabels, Gauge>,
    pending_review: Family<SpokeLabels, Gauge>,
    pending_review_age: Family<SpokeLabels, Gauge>,
    issuers: issuer::IssuerMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("spokekeeper");
        let m = Metrics {
            cert_not_after: Family::default(),
            credential: Family::default(),
            spoke_up: Family::default(),
            rotations: Family::default(),
            last_rotation: Family::default(),
            last_reason: Mutex::default(),
            errors: Family::default(),
            // 0.25 s .. about 17 min.
            tick_duration: Histogram::new(exponential_buckets(0.25, 2.0, 13)),
            last_tick: Timestamp::default(),
            sealing_not_after: Shown::default(),
            hub_reachable: Shown::default(),
            leader: Gauge::default(),
            sealing_cert_trusted: Shown::default(),
            hub_synced: Family::default(),
            hub_ready: Family::default(),
            pending_review: Family::default(),
            pending_review_age: Family::default(),
            issuers: issuer::IssuerMetrics::default(),
            registry: Registry::default(),
        };
        m.register_credentials(&mut registry);
        m.register_ticks_and_hub(&mut registry);
        m.issuers.register(&mut registry);
        Metrics { registry, ..m }
    }

    /// The per-spoke credential series (registration order is exposition order).
    fn register_credentials(&self, r: &mut Registry) {
        r.register(
            "certificate_not_after_timestamp_seconds",
            "When a spoke credential's certificate expires (client: the committed client certificate, ca: the cluster CA, serving: what the API presents, sealing: what it is sealed to)",
            self.cert_not_after.clone(),
        );
        r.register(
            "credential_info",
            "1 per spoke: how its committed credential was made (mode extracted or minted; minted: the user and generation it was signed for)",
            self.credential.clone(),
        );
        r.register(
            "spoke_up",
            "1 when the spoke's API answered the last tick's probe, 0 when it did not",
            self.spoke_up.clone(),
        );
        // Counters get the _total suffix from the OpenMetrics encoder.
        r.register(
            "rotations",
            "Credentials committed, by spoke and reason",
            self.rotations.clone(),
        );
        r.register(
            "last_rotation_timestamp_seconds",
            "When the tick that committed the spoke's last credential finished, labelled with why it was rotated (one series per spoke)",
            self.last_rotation.clone(),
        );
        r.register(
            "errors",
            "Failures, by spoke (empty: the whole fleet) and pipeline stage",
            self.errors.clone(),
        );
    }

    /// The tick's, the sealing certificate's, the hub's and leadership's series.
    fn register_ticks_and_hub(&self, r: &mut Registry) {
        r.register(
            "tick_duration_seconds",
            "How long ticks took",
            self.tick_duration.clone(),
        );
        r.register(
            "last_tick_timestamp_seconds",
            "When the last tick finished",
            self.last_tick.clone(),
        );
        r.register(
            "sealing_certificate_not_after_timestamp_seconds",
            "When the sealing certificate in use expires",
            self.sealing_not_after.clone(),
        );
        r.register(
            "hub_reachable",
            "1 when the last tick fetched the sealing certificate from the hub, 0 when it sealed to the pinned copy (absent without hub:)",
            self.hub_reachable.clone(),
        );
        // 1 until a tick says otherwise: not known yet is not an alert.
        self.sealing_cert_trusted.metric.set(1);
        r.register(
            "sealing_cert_trusted",
            "0 when the last tick refused to seal to the sealing certificate because nothing outside the fleet repo confirms it (hub: or sealing.sha256), else 1",
            self.sealing_cert_trusted.clone(),
        );
        r.register(
            "hub_synced",
            "1 when the hub unsealed the spoke's last pushed credential (SealedSecret Synced), 0 when not within hub.verify_timeout",
            self.hub_synced.clone(),
        );
        r.register(
            "hub_ready",
            "1 when every Kustomization and HelmRelease using the spoke's Secret was Ready after the last pushed credential (and it was unsealed), 0 when not",
            self.hub_ready.clone(),
        );
        r.register(
            "pending_review",
            "1 when the spoke's fresh credential waits for review on its branch and pull request (repo.mode: pull-request), else 0",
            self.pending_review.clone(),
        );
        r.register(
            "pending_review_age_seconds",
            "How long the spoke's pull request has been open",
            self.pending_review_age.clone(),
        );
        r.register(
            "leader",
            "1 while this replica may tick (it holds the Lease, or runs without --leader-elect), else 0",
            self.leader.clone(),
        );
    }

    /// A replica that stops leading stops exporting what its last tick saw of each spoke:
    /// it goes stale while the leader's moves on, and a dashboard's min over replicas
    /// would show the stale one.
    pub(crate) fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
        if leading {
            return;
        }
        self.cert_not_after.clear();
        self.credential.clear();
        self.spoke_up.clear();
        self.pending_review.clear();
        self.pending_review_age.clear();
        self.hub_synced.clear();
        self.hub_ready.clear();
        self.issuers.clear();
        self.last_rotation.clear();
        self.last_reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Records a finished tick.
    pub fn observe_tick(&self, report: &TickReport, took: Duration, finished: SystemTime) {
        self.tick_duration.observe(took.as_secs_f64());
        self.last_tick.set(unix_seconds(finished));
        self.cert_not_after.clear();
        self.credential.clear();
        self.spoke_up.clear();
        self.pending_review.clear();
        self.pending_review_age.clear();
        for s in &report.spokes {
            let labels = SpokeLabels {
                spoke: s.spoke.clone(),
            };
            let pending = match &s.outcome {
                Outcome::Pending {
                    pending_seconds, ..
                } => Some(*pending_seconds),
                _ => None,
            };
            self.pending_review
                .get_or_create(&labels)
                .set(i64::from(pending.is_some()));
            if let Some(Some(age)) = pending {
                self.pending_review_age
                    .get_or_create(&labels)
                    .set(i64::try_from(age).unwrap_or(i64::MAX));
            }
            let probe_failed = matches!(&s.outcome, Outcome::Failed(e) if e.stage() == crate::rotate::Stage::Probe);
            self.spoke_up
                .get_or_create(&SpokeLabels {
                    spoke: s.spoke.clone(),
                })
                .set(i64::from(!probe_failed));
            if let Some(c) = &s.credential {
                let minted = c.mode == crate::config::CredentialMode::Minted;
                self.credential
                    .get_or_create(&CredentialLabels {
                        spoke: s.spoke.clone(),
                        mode: c.mode.as_str(),
                        user: c.user.clone().filter(|_| minted).unwrap_or_default(),
                        generation: c
                            .generation
                            .filter(|_| minted)
                            .map(|g| g.to_string())
                            .unwrap_or_default(),
                    })
                    .set(1);
            }
            for (cert, not_after) in [("client", s.client_not_after), ("ca", s.ca_not_after)] {
                if let Some(t) = not_after {
                    self.cert_not_after
                        .get_or_create(&CertLabels {
                            spoke: s.spoke.clone(),
                            cert,
                        })
                        .set(offset_seconds(t));
                }
            }
            match &s.outcome {
                Outcome::Rotated { .. } => {
                    let reason = s.reason.as_ref().map_or("unknown", Reason::kind);
                    self.rotations
                        .get_or_create(&RotationLabels {
                            spoke: s.spoke.clone(),
                            reason,
                        })
                        .inc();
                    self.last_rotated(&s.spoke, reason, unix_seconds(finished));
                }
                Outcome::Failed(e) => self.error(&s.spoke, e.metric_label()),
                _ => {}
            }
            if let Some(at) = s.rotated_at {
                self.recorded_rotation(&s.spoke, at);
            }
        }
        if let Some(c) = &report.sealing {
            if let Some(reachable) = c.reachable {
                self.hub_reachable.metric.set(i64::from(reachable));
            }
            self.sealing_cert_trusted.metric.set(i64::from(c.trusted));
        }
        for s in &report.spokes {
            let Some(h) = &s.hub else { continue };
            let labels = SpokeLabels {
                spoke: s.spoke.clone(),
            };
            self.hub_synced
                .get_or_create(&labels)
                .set(i64::from(h.delivery.check().ok));
            self.hub_ready.get_or_create(&labels).set(i64::from(h.ok()));
            if !h.ok() {
                self.other_error(&s.spoke, OtherStage::Hub);
            }
        }
        if let Some(e) = &report.repo_error {
            self.error("", e.stage().metric_label());
        }
    }

    /// The committed `rotated-at` of a spoke (at start, after a takeover, or committed by
    /// another process), as reason `recorded` (the annotations do not say why), unless a
    /// later rotation is exported.
    pub fn recorded_rotation(&self, spoke: &str, at: OffsetDateTime) {
        let at = offset_seconds(at);
        let later = self
            .last_reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(spoke)
            .is_none_or(|(_, exported)| *exported < at);
        if later {
            self.last_rotated(spoke, RECORDED, at);
        }
    }

    /// The spoke's last rotation, replacing the series of its previous reason.
    fn last_rotated(&self, spoke: &str, reason: &'static str, at: f64) {
        let mut last = self.last_reason.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((before, _)) = last.insert(spoke.to_string(), (reason, at))
            && before != reason
        {
            self.last_rotation.remove(&RotationLabels {
                spoke: spoke.to_string(),
                reason: before,
            });
        }
        self.last_rotation
            .get_or_create(&RotationLabels {
                spoke: spoke.to_string(),
                reason,
            })
            .set(at);
    }

    /// Counts one failure at `stage` (`spoke` empty: not about one spoke).
    /// One more error outside a spoke's stages (`spoke` empty: fleet-wide).
    pub(crate) fn other_error(&self, spoke: &str, stage: OtherStage) {
        self.error(spoke, stage.metric_label());
    }

    fn error(&self, spoke: &str, stage: &'static str) {
        self.errors
            .get_or_create(&ErrorLabels {
                spoke: spoke.to_string(),
                stage,
            })
            .inc();
    }

    /// The hub's issuers as the last tick fetched them, and how many spokes trust the
    /// next one.
    pub fn observe_issuers(
        &self,
        seen: &[crate::federate::issuer::Seen],
        next: &[crate::federate::issuer::NextTrust],
    ) {
        self.issuers.observe(seen, next);
    }

    /// A certificate's notAfter that the tick report does not carry (the serving
    /// certificate from the probe, the sealing certificate per spoke).
    pub fn set_cert_not_after(&self, spoke: &str, cert: &'static str, not_after: OffsetDateTime) {
        self.cert_not_after
            .get_or_create(&CertLabels {
                spoke: spoke.to_string(),
                cert,
            })
            .set(offset_seconds(not_after));
    }

    /// The sealing certificate in use expires at `not_after` (None: a bare public key).
    pub fn set_sealing_not_after(&self, not_after: Option<OffsetDateTime>) {
        self.sealing_not_after
            .metric
            .set(not_after.map_or(f64::NAN, offset_seconds));
        self.sealing_not_after.show(true);
        self.hub_reachable.show(true);
        self.sealing_cert_trusted.show(true);
    }

    /// The fleet's sealing key as loaded (None: no sealing.cert, every spoke is sops):
    /// without one the sealing series are absent, not 0.
    pub fn set_sealing_key(&self, key: Option<&crate::seal::SealingKey>) {
        match key {
            Some(key) => self.set_sealing_not_after(key.not_after()),
            None => {
                self.sealing_not_after.show(false);
                self.hub_reachable.show(false);
                self.sealing_cert_trusted.show(false);
                // As at start should a certificate come back: not known yet is no alert.
                self.sealing_cert_trusted.metric.set(1);
            }
        }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

fn offset_seconds(t: OffsetDateTime) -> f64 {
    t.unix_timestamp() as f64
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests;
