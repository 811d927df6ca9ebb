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
            registry: Registry::default(),
        };
        m.register_credentials(&mut registry);
        m.register_ticks_and_hub(&mut registry);
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
mod tests {
    use super::*;
    use crate::rotate::{RepoFailure, RepoStage, SpokeReport, Stage};

    fn spoke(name: &str, outcome: Outcome, reason: Option<Reason>) -> SpokeReport {
        SpokeReport {
            reason,
            ca_not_after: Some(time::macros::datetime!(2036-01-02 03:04:05 UTC)),
            client_not_after: Some(time::macros::datetime!(2030-01-02 03:04:05 UTC)),
            ..SpokeReport::new(name, outcome)
        }
    }

    #[test]
    fn the_last_rotation_is_the_committed_one_until_this_process_rotates() {
        let m = Metrics::new();
        let committed = time::macros::datetime!(2026-12-01 08:00 UTC);
        let mut healthy = spoke("dev", Outcome::Healthy, None);
        healthy.rotated_at = Some(committed);
        let tick = |s: &SpokeReport, at: SystemTime| {
            m.observe_tick(&TickReport::of(vec![s.clone()]), Duration::from_secs(1), at);
            m.encode().unwrap()
        };
        let recorded = format!(
            "spokekeeper_last_rotation_timestamp_seconds{{spoke=\"dev\",reason=\"recorded\"}} {}.0",
            committed.unix_timestamp()
        );
        let text = tick(&healthy, SystemTime::now());
        assert!(text.lines().any(|l| l == recorded), "{text}");
        // Rotated here: its reason and time replace the recorded one, and the next tick's
        // annotation (a moment older than the tick's end) does not come back.
        let end = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut rotated = spoke(
            "dev",
            Outcome::Rotated { commit: "a".into() },
            Some(Reason::Initial),
        );
        rotated.rotated_at = Some(committed);
        tick(&rotated, end);
        healthy.rotated_at =
            Some(time::macros::datetime!(2027-01-15 08:00 UTC) - time::Duration::seconds(2));
        let text = tick(&healthy, end);
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("spokekeeper_last_rotation_timestamp_seconds{"))
            .collect();
        assert_eq!(
            series,
            [
                "spokekeeper_last_rotation_timestamp_seconds{spoke=\"dev\",reason=\"initial\"} 1800000000.0"
            ]
        );
        // Another process committed later: that one is shown.
        healthy.rotated_at = Some(time::macros::datetime!(2027-02-01 00:00 UTC));
        let text = tick(&healthy, end);
        assert!(
            text.contains("{spoke=\"dev\",reason=\"recorded\"} 1801440000.0"),
            "{text}"
        );
        assert!(!text.contains("reason=\"initial\"} 1800000000"), "{text}");
    }

    #[test]
    fn a_replica_that_stops_leading_stops_exporting_its_spokes() {
        let m = Metrics::new();
        let mut dev = spoke("dev", Outcome::Healthy, None);
        dev.rotated_at = Some(time::macros::datetime!(2026-12-01 08:00 UTC));
        m.set_leader(true);
        m.observe_tick(
            &TickReport::of(vec![dev]),
            Duration::from_secs(1),
            SystemTime::now(),
        );
        let spoke_series = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| !l.starts_with('#') && l.contains("spoke=\"dev\""))
                .map(String::from)
                .collect()
        };
        let before = spoke_series(&m.encode().unwrap());
        for family in ["certificate_not_after", "spoke_up", "last_rotation"] {
            assert!(
                before.iter().any(|l| l.contains(family)),
                "{family}: {before:#?}"
            );
        }
        m.set_leader(false);
        let text = m.encode().unwrap();
        assert_eq!(spoke_series(&text), Vec::<String>::new(), "{text}");
        assert!(text.contains("spokekeeper_leader 0"), "{text}");
    }

    #[test]
    fn hub_verification_becomes_series() {
        use crate::hub::verify::{Check, ConsumerCheck, Delivery, FoundBy, HubReport};
        use crate::hub::{Consumer, Kind};
        let check = |ok: bool, status: &str| Check {
            ok,
            status: status.into(),
            reason: None,
            message: String::new(),
        };
        let m = Metrics::new();
        let mut good = spoke("dev", Outcome::Rotated { commit: "a".into() }, None);
        good.hub = Some(Box::new(HubReport {
            delivery: Delivery::Synced(check(true, "True")),
            secret: "flux-system/dev-kubeconfig".into(),
            found_by: FoundBy::Listed,
            list_error: None,
            consumers: vec![ConsumerCheck {
                consumer: Consumer {
                    kind: Kind::HelmRelease,
                    namespace: "flux-system".into(),
                    name: "apps".into(),
                },
                ready: check(true, "True"),
                requested_at: None,
            }],
            requested_at: None,
        }));
        let mut stuck = spoke("test", Outcome::Rotated { commit: "b".into() }, None);
        stuck.hub = Some(Box::new(HubReport {
            delivery: Delivery::Synced(check(false, "False")),
            secret: "flux-system/test-kubeconfig".into(),
            found_by: FoundBy::Listed,
            list_error: None,
            consumers: Vec::new(),
            requested_at: None,
        }));
        let report = TickReport {
            spokes: vec![good, stuck],
            pushed: true,
            repo_error: None,
            sealing: Some(crate::hub::cert::CertReport {
                reachable: Some(true),
                trusted: true,
                ..crate::hub::cert::CertReport::new(crate::fingerprint::Fingerprint::of(b"cert"))
            }),
            sealing_key: None,
            observed: Vec::new(),
        };
        m.observe_tick(&report, Duration::from_secs(1), SystemTime::now());
        let text = m.encode().unwrap();
        for line in [
            "spokekeeper_hub_reachable 1",
            "spokekeeper_sealing_cert_trusted 1",
            "spokekeeper_hub_synced{spoke=\"dev\"} 1",
            "spokekeeper_hub_ready{spoke=\"dev\"} 1",
            "spokekeeper_hub_synced{spoke=\"test\"} 0",
            "spokekeeper_hub_ready{spoke=\"test\"} 0",
            "spokekeeper_errors_total{spoke=\"test\",stage=\"hub\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "want {line:?} in:\n{text}");
        }
        assert!(!text.contains("{spoke=\"dev\",stage=\"hub\"}"), "{text}");
    }

    #[test]
    fn the_credential_of_each_spoke_is_one_series_that_follows_the_generation() {
        use crate::config::CredentialMode;
        use crate::rotate::CredentialReport;
        let m = Metrics::new();
        let with = |mode, user: Option<&str>, generation| {
            let mut s = spoke("dev", Outcome::Healthy, None);
            s.credential = Some(CredentialReport {
                mode,
                user: user.map(String::from),
                generation,
                not_after: None,
                shortened: None,
            });
            TickReport::of(vec![s])
        };
        let series = |m: &Metrics| -> Vec<String> {
            let text = m.encode().unwrap();
            text.lines()
                .filter(|l| l.starts_with("spokekeeper_credential_info{"))
                .map(String::from)
                .collect()
        };
        m.observe_tick(
            &with(CredentialMode::Extracted, Some("system:admin"), None),
            Duration::from_secs(1),
            SystemTime::now(),
        );
        assert_eq!(
            series(&m),
            [
                "spokekeeper_credential_info{spoke=\"dev\",mode=\"extracted\",user=\"\",generation=\"\"} 1"
            ],
            "an extracted credential's user is the node's, not one spokekeeper answers for"
        );
        for g in [3, 4] {
            let user = format!("spokekeeper:hub:{g}");
            m.observe_tick(
                &with(CredentialMode::Minted, Some(&user), Some(g)),
                Duration::from_secs(1),
                SystemTime::now(),
            );
            assert_eq!(
                series(&m),
                [format!(
                    "spokekeeper_credential_info{{spoke=\"dev\",mode=\"minted\",user=\"{user}\",generation=\"{g}\"}} 1"
                )],
                "the previous generation's series is gone"
            );
        }
    }

    /// Without a sealing certificate (every spoke sops) the sealing series are absent,
    /// descriptor and all; a certificate loaded again brings them back.
    #[test]
    fn a_fleet_without_a_sealing_key_exports_no_sealing_series() {
        let sealing = [
            "spokekeeper_sealing_certificate_not_after_timestamp_seconds",
            "spokekeeper_hub_reachable",
            "spokekeeper_sealing_cert_trusted",
        ];
        let m = Metrics::new();
        m.set_sealing_key(None);
        let report = TickReport::of(vec![spoke("dev", Outcome::Healthy, None)]);
        m.observe_tick(&report, Duration::from_secs(1), SystemTime::now());
        let text = m.encode().unwrap();
        assert!(
            text.contains("spokekeeper_spoke_up{spoke=\"dev\"} 1"),
            "{text}"
        );
        for name in sealing {
            assert!(!text.contains(name), "{name} in:\n{text}");
        }
        m.set_sealing_not_after(Some(time::macros::datetime!(2031-01-01 00:00:00 UTC)));
        let text = m.encode().unwrap();
        for line in [
            "spokekeeper_sealing_certificate_not_after_timestamp_seconds 1924992000.0",
            "spokekeeper_hub_reachable 0",
            "spokekeeper_sealing_cert_trusted 1",
        ] {
            assert!(text.lines().any(|l| l == line), "want {line:?} in:\n{text}");
        }
    }

    #[test]
    fn a_tick_report_becomes_series() {
        let m = Metrics::new();
        let report = TickReport {
            spokes: vec![
                spoke(
                    "dev",
                    Outcome::Rotated {
                        commit: "abc".into(),
                    },
                    Some(Reason::Initial),
                ),
                spoke(
                    "test",
                    Outcome::Failed(crate::rotate::SpokeError::Unreachable(
                        crate::spoke::ProbeError::Refused {
                            server: "https://10.0.0.1:6443".into(),
                        },
                    )),
                    None,
                ),
                spoke(
                    "stage",
                    Outcome::Pending {
                        branch: "spokekeeper/stage".into(),
                        commit: None,
                        pull_request: None,
                        change: None,
                        pending_seconds: Some(5400),
                    },
                    Some(Reason::Initial),
                ),
            ],
            pushed: true,
            repo_error: Some(crate::rotate::RepoFailure::NotPushed {
                why: "rejected".into(),
            }),
            sealing: Some(crate::hub::cert::CertReport {
                reachable: Some(false),
                trusted: false,
                ..crate::hub::cert::CertReport::new(crate::fingerprint::Fingerprint::of(b"cert"))
            }),
            sealing_key: None,
            observed: Vec::new(),
        };
        m.observe_tick(
            &report,
            Duration::from_millis(1500),
            UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        );
        m.set_sealing_not_after(Some(time::macros::datetime!(2031-01-01 00:00:00 UTC)));
        let text = m.encode().unwrap();
        for line in [
            "spokekeeper_certificate_not_after_timestamp_seconds{spoke=\"dev\",cert=\"client\"} 1893553445.0",
            "spokekeeper_certificate_not_after_timestamp_seconds{spoke=\"dev\",cert=\"ca\"} 2082855845.0",
            "spokekeeper_spoke_up{spoke=\"dev\"} 1",
            "spokekeeper_spoke_up{spoke=\"test\"} 0",
            "spokekeeper_rotations_total{spoke=\"dev\",reason=\"initial\"} 1",
            "spokekeeper_last_rotation_timestamp_seconds{spoke=\"dev\",reason=\"initial\"} 1700000000.0",
            "spokekeeper_errors_total{spoke=\"test\",stage=\"probe\"} 1",
            "spokekeeper_errors_total{spoke=\"\",stage=\"push\"} 1",
            "spokekeeper_pending_review{spoke=\"stage\"} 1",
            "spokekeeper_pending_review{spoke=\"dev\"} 0",
            "spokekeeper_pending_review_age_seconds{spoke=\"stage\"} 5400",
            "spokekeeper_tick_duration_seconds_count 1",
            "spokekeeper_tick_duration_seconds_bucket{le=\"2.0\"} 1",
            "spokekeeper_tick_duration_seconds_bucket{le=\"1.0\"} 0",
            "spokekeeper_last_tick_timestamp_seconds 1700000000.0",
            "spokekeeper_sealing_certificate_not_after_timestamp_seconds 1924992000.0",
            "spokekeeper_hub_reachable 0",
            "spokekeeper_sealing_cert_trusted 0",
        ] {
            assert!(text.lines().any(|l| l == line), "want {line:?} in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));

        // A later tick without "test": its gauges go, its counters stay.
        let later = TickReport::of(vec![spoke("dev", Outcome::Healthy, None)]);
        m.observe_tick(&later, Duration::from_secs(1), SystemTime::now());
        let text = m.encode().unwrap();
        assert!(
            !text.contains("spokekeeper_spoke_up{spoke=\"test\"}"),
            "{text}"
        );
        assert!(text.contains("spokekeeper_errors_total{spoke=\"test\",stage=\"probe\"} 1"));
        assert!(text.contains("spokekeeper_rotations_total{spoke=\"dev\",reason=\"initial\"} 1"));
        assert!(
            text.contains("spokekeeper_last_rotation_timestamp_seconds{spoke=\"dev\",reason=\"initial\"} 1700000000.0"),
            "a tick without a rotation keeps the last one: {text}"
        );

        // Rotated again for another reason: one series, the new reason and time.
        let forced = TickReport::of(vec![spoke(
            "dev",
            Outcome::Rotated {
                commit: "def".into(),
            },
            Some(Reason::Forced),
        )]);
        m.observe_tick(
            &forced,
            Duration::from_secs(1),
            UNIX_EPOCH + Duration::from_secs(1_700_000_900),
        );
        let text = m.encode().unwrap();
        let last: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("spokekeeper_last_rotation_timestamp_seconds{"))
            .collect();
        assert_eq!(
            last,
            [
                "spokekeeper_last_rotation_timestamp_seconds{spoke=\"dev\",reason=\"forced\"} 1700000900.0"
            ]
        );
    }

    /// Every `stage` label value the code can produce.
    fn stage_labels() -> Vec<&'static str> {
        Stage::ALL
            .iter()
            .map(|s| s.metric_label())
            .chain(RepoStage::ALL.iter().map(|s| s.metric_label()))
            .chain(OtherStage::ALL.iter().map(|s| s.metric_label()))
            .collect()
    }

    #[test]
    fn stage_labels_are_a_fixed_set_of_plain_names() {
        let labels = stage_labels();
        for l in &labels {
            assert!(
                !l.is_empty() && l.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                "{l:?}"
            );
        }
        // The spoke stage label is the name the JSON report uses.
        for s in Stage::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.metric_label());
        }
    }

    /// A failure at `stage` whose texts are all `text`.
    fn failing_at(stage: Stage, text: &str) -> crate::rotate::SpokeError {
        use crate::rotate::{ReviewError, SpokeError};
        use std::sync::Arc;
        let repo = || Arc::new(crate::repo::RepoError::Locked(text.into()));
        match stage {
            Stage::Observe => SpokeError::Read(repo()),
            Stage::Probe => SpokeError::Unreachable(crate::spoke::ProbeError::Refused {
                server: text.into(),
            }),
            Stage::Extract => SpokeError::Extract(Arc::new(crate::spoke::ExtractError::Ssh {
                target: text.into(),
                detail: text.into(),
            })),
            Stage::Validate => {
                SpokeError::Kubeconfig(Arc::new(crate::kubeconfig::KubeconfigError::Yaml {
                    line: None,
                    column: None,
                    reason: text.into(),
                }))
            }
            Stage::Mint => SpokeError::RevokeExtracted { spoke: text.into() },
            Stage::Seal => SpokeError::Untrusted(text.into()),
            Stage::Commit => SpokeError::Commit(repo()),
            Stage::Push => SpokeError::NotPushed {
                branch: text.into(),
                why: text.into(),
            },
            Stage::Review => SpokeError::Review(ReviewError::Unverified(text.into())),
        }
    }

    #[test]
    fn error_texts_never_become_label_values() {
        let hostile = "the clone has 2 commit(s) that origin/main does not: x\"} 1\nevil{a=\"";
        let m = Metrics::new();
        for stage in RepoStage::ALL {
            let mut spokes: Vec<SpokeReport> = Stage::ALL
                .iter()
                .map(|&stage| {
                    let outcome =
                        Outcome::Failed(failing_at(stage, &format!("{hostile}: {stage}")));
                    spoke(&format!("s-{stage}"), outcome, None)
                })
                .collect();
            spokes.push(spoke("ok", Outcome::Healthy, None));
            let report = TickReport {
                repo_error: Some(match stage {
                    RepoStage::Sync => {
                        RepoFailure::Sync(std::sync::Arc::new(crate::repo::RepoError::Git {
                            args: hostile.into(),
                            stderr: hostile.into(),
                        }))
                    }
                    RepoStage::Push => RepoFailure::NotPushed {
                        why: hostile.into(),
                    },
                    RepoStage::Unpushed => RepoFailure::Unpushed {
                        commits: 2,
                        remote: hostile.into(),
                        branch: hostile.into(),
                        clone: hostile.into(),
                    },
                }),
                ..TickReport::of(spokes)
            };
            m.observe_tick(&report, Duration::from_secs(1), SystemTime::now());
        }
        let text = m.encode().unwrap();
        // The set docs/metrics.md documents, written out: not derived from the code under test.
        let allowed = [
            "observe", "probe", "extract", "validate", "mint", "seal", "commit", "push", "review",
            "hub", "sync", "unpushed", "tick", "alert", "reload",
        ];
        let mut seen = 0;
        for part in text.split("stage=\"").skip(1) {
            let value = &part[..part.find('"').unwrap()];
            assert!(allowed.contains(&value), "label {value:?} in:\n{text}");
            seen += 1;
        }
        assert_eq!(seen, Stage::ALL.len() + RepoStage::ALL.len(), "{text}");
        assert!(!text.contains("commit(s)"), "{text}");
    }
}
