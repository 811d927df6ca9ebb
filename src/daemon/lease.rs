//! Leader election on a coordination.k8s.io/v1 Lease, so only one replica ticks.
//!
//! Every write is guarded by the resourceVersion that was read: of two contenders
//! writing the same version, the API server accepts one and answers the other 409
//! Conflict. As in client-go, a holder's claim is judged on the local monotonic clock
//! only: it lasts leaseDurationSeconds from the moment this replica last saw the lease
//! record change, never from the holder's renewTime (its wall clock, which may be skewed).
//! The leader stops acting when it has not renewed for `renew_deadline`, which is
//! shorter than the lease, so it has stopped before anyone else may take over.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;

/// Everything leader election calls on the API (the Helm chart's Role grants these).
pub const ACCESS: &[crate::hub::Access] = &[crate::hub::Access {
    group: "coordination.k8s.io",
    resource: "leases",
    verbs: &["get", "create", "update"],
}];

/// Where the in-cluster service account's namespace is mounted.
pub(crate) const NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// leaseDurationSeconds written into the Lease.
    pub lease_duration: Duration,
    /// How often the leader renews and a follower looks.
    pub renew_every: Duration,
    /// The leader steps down when it could not renew for this long.
    pub renew_deadline: Duration,
    /// After a failed attempt, the next one comes this much later (client-go's RetryPeriod).
    pub retry_every: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
            renew_deadline: Duration::from_secs(10),
            retry_every: Duration::from_secs(2),
        }
    }
}

/// What one round of the election saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// We hold the lease (acquired or renewed just now).
    Leader,
    /// Someone else holds it until `expires`: leaseDurationSeconds after we last saw
    /// the record change.
    Held { holder: String, expires: Instant },
    /// Another contender wrote first (409): we do not hold it.
    Lost,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "cannot {op} lease {namespace}/{name}: {error} (check --lease-namespace and that the service account may get, create and update leases.coordination.k8s.io there)"
)]
pub struct LeaseError {
    op: &'static str,
    namespace: String,
    name: String,
    error: kube::Error,
}

pub struct LeaseLock {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    duration: Duration,
    seen: Mutex<Seen>,
}

/// The lease record as last read or written, and when (local monotonic time) it last
/// changed: the only clock expiry is judged by.
#[derive(Default)]
struct Seen {
    record: Option<(LeaseSpec, Instant)>,
}

impl Seen {
    /// Records `spec` as read at `now`; returns when it was first seen as it is.
    fn observe(&mut self, spec: &LeaseSpec, now: Instant) -> Instant {
        match &self.record {
            Some((last, at)) if last == spec => *at,
            _ => {
                self.record = Some((spec.clone(), now));
                now
            }
        }
    }
}

impl LeaseLock {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        lease_duration: Duration,
    ) -> LeaseLock {
        LeaseLock {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            duration: lease_duration,
            seen: Mutex::new(Seen::default()),
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// One round: create the Lease, renew it, or take it over once it expired.
    pub async fn try_acquire_or_renew(&self) -> Result<Observed, LeaseError> {
        let now = SystemTime::now();
        let Some(current) = self.read().await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.duration_secs()),
                    acquire_time: Some(micro(now)),
                    renew_time: Some(micro(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created.spec.unwrap_or_default());
                    Ok(Observed::Leader)
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() || s.is_conflict() => {
                    Ok(Observed::Lost)
                }
                Err(e) => Err(self.err("create", e)),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let seen_at = self.observe(&spec);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let mine = holder.as_deref() == Some(self.identity.as_str());
        if !mine && let Some(holder) = holder {
            let expires = seen_at + lease_duration(&spec, self.duration);
            if expires > Instant::now() {
                return Ok(Observed::Held { holder, expires });
            }
        }
        // Renew ours, or take over an expired or released one; `current` carries the
        // resourceVersion that guards the write.
        let mut next = current;
        let spec = next.spec.get_or_insert_with(LeaseSpec::default);
        if !mine {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(micro(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.renew_time = Some(micro(now));
        spec.lease_duration_seconds = Some(self.duration_secs());
        match self.replace(&next, "update").await? {
            Some(written) => {
                self.observe(&written.spec.unwrap_or_default());
                Ok(Observed::Leader)
            }
            None => Ok(Observed::Lost),
        }
    }

    /// Gives the lease up when we hold it, so a standby need not wait for it to expire.
    /// Ok(true) when it was released.
    pub async fn release(&self) -> Result<bool, LeaseError> {
        let Some(mut lease) = self.read().await? else {
            return Ok(false);
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.renew_time = Some(micro(SystemTime::now()));
        spec.lease_duration_seconds = Some(1);
        Ok(self.replace(&lease, "release").await?.is_some())
    }

    async fn read(&self) -> Result<Option<Lease>, LeaseError> {
        self.api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.err("read", e))
    }

    /// Writes `lease` guarded by its resourceVersion; None when another writer came first
    /// (409 Conflict).
    async fn replace(&self, lease: &Lease, op: &'static str) -> Result<Option<Lease>, LeaseError> {
        match self
            .api
            .replace(&self.name, &PostParams::default(), lease)
            .await
        {
            Ok(written) => Ok(Some(written)),
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(None),
            Err(e) => Err(self.err(op, e)),
        }
    }

    fn observe(&self, spec: &LeaseSpec) -> Instant {
        let now = Instant::now();
        match self.seen.lock() {
            Ok(mut seen) => seen.observe(spec, now),
            Err(_) => now,
        }
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    fn err(&self, op: &'static str, error: kube::Error) -> LeaseError {
        LeaseError {
            op,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            error,
        }
    }
}

/// What one election round told: whether the API answered it, and whether we lead now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Round {
    pub answered: bool,
    pub leading: bool,
    /// While leading: when we must stop acting unless renewed by then.
    pub(crate) lead_until: Option<Instant>,
}

/// A leader starts a side effect (a push, telling the alert sinks) only with at least
/// this much of its renew deadline left.
pub(crate) const ACT_MARGIN: Duration = Duration::from_secs(2);

/// Why a replica may not start a side effect now.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ActError {
    #[error("this replica no longer holds the lease")]
    NotHeld,
    #[error("the lease was not renewed and this replica must stop within {millis}ms")]
    Expiring { millis: u128 },
}

/// Ok when a replica leading until `lead_until` may start a side effect at `now`.
pub(crate) fn may_act(lead_until: Option<Instant>, now: Instant) -> Result<(), ActError> {
    match lead_until {
        None => Err(ActError::NotHeld),
        Some(t) if t.saturating_duration_since(now) < ACT_MARGIN => Err(ActError::Expiring {
            millis: t.saturating_duration_since(now).as_millis(),
        }),
        Some(_) => Ok(()),
    }
}

/// How long a replica leading until `lead_until` may still start side effects at `now`
/// (its tenure less [`ACT_MARGIN`]), or why it may not.
pub(crate) fn act_window(lead_until: Option<Instant>, now: Instant) -> Result<Duration, ActError> {
    may_act(lead_until, now)?;
    let left = lead_until.map_or(Duration::ZERO, |t| t.saturating_duration_since(now));
    Ok(left.saturating_sub(ACT_MARGIN))
}

/// Runs the election for as long as it is polled, publishing on `leader` whether we
/// lead right now. Drop it (abort its task) to stop, then [`LeaseLock::release`].
pub async fn elect(lock: Arc<LeaseLock>, timing: Timing, leader: watch::Sender<bool>) {
    elect_reporting(lock, timing, leader, |_| {}).await;
}

/// [`elect`], telling `on_round` after every round (for /readyz and the leader gauge).
pub(crate) async fn elect_reporting(
    lock: Arc<LeaseLock>,
    timing: Timing,
    leader: watch::Sender<bool>,
    mut on_round: impl FnMut(Round),
) {
    let mut lead_until: Option<Instant> = None;
    let set = |leading: bool| {
        leader.send_if_modified(|v| std::mem::replace(v, leading) != leading);
    };
    loop {
        let started = Instant::now();
        // A leader's request must not outlive its right to act.
        let budget = lead_until.map_or(timing.renew_every, |t| {
            t.saturating_duration_since(started).min(timing.renew_every)
        });
        let mut wait = timing.renew_every;
        let mut answered = true;
        match tokio::time::timeout(budget, lock.try_acquire_or_renew()).await {
            Ok(Ok(Observed::Leader)) => {
                if lead_until.is_none() {
                    tracing::info!(identity = lock.identity(), "acquired the lease: leading");
                }
                lead_until = Some(started + timing.renew_deadline);
                set(true);
            }
            Ok(Ok(Observed::Held { holder, expires })) => {
                if lead_until.take().is_some() {
                    tracing::warn!(identity = lock.identity(), %holder, "lost the lease: stopping");
                }
                set(false);
                // A standby reads the record every retry period, as client-go's does: expiry
                // counts from when it last saw the record change, so reading only every
                // renew period could add a whole one to a takeover. And it looks again right
                // when the lease expires.
                let left = expires.saturating_duration_since(Instant::now());
                wait = timing.retry_every.min(left + Duration::from_millis(50));
            }
            Ok(Ok(Observed::Lost)) if lead_until.is_some() => {
                // Someone else wrote the record (a label, another contender's failed
                // take-over): re-read it; only a record naming another holder ends our lead.
                tracing::info!(
                    identity = lock.identity(),
                    "the lease changed while leading: reading it again"
                );
                wait = Duration::from_millis(200);
            }
            Ok(Ok(Observed::Lost)) => {
                set(false);
                // Read who won, and when their claim ends.
                wait = Duration::from_millis(200);
            }
            Ok(Err(e)) => {
                answered = false;
                wait = timing.retry_every;
                tracing::warn!(error = %e, "leader election");
            }
            Err(_) => {
                answered = false;
                wait = timing.retry_every;
                tracing::warn!(
                    secs = budget.as_secs_f32(),
                    "leader election: the hub API did not answer in time"
                );
            }
        }
        if let Some(t) = lead_until
            && Instant::now() >= t
        {
            tracing::warn!(
                identity = lock.identity(),
                secs = timing.renew_deadline.as_secs(),
                "could not renew the lease in time: stepping down"
            );
            lead_until = None;
            set(false);
        }
        on_round(Round {
            answered,
            leading: lead_until.is_some(),
            lead_until,
        });
        // A failed attempt is retried `retry_every` after it started, not after it ended.
        let mut next = if answered {
            Instant::now() + wait
        } else {
            (started + wait).max(Instant::now())
        };
        if let Some(t) = lead_until {
            next = next.min(t);
        }
        tokio::time::sleep_until(next).await;
    }
}

/// POD_NAME, else the host name with a random suffix (as client-go does), so two
/// replicas on one host never share an identity.
pub fn default_identity() -> Result<String, IdentityError> {
    if let Ok(name) = std::env::var("POD_NAME")
        && !name.trim().is_empty()
    {
        return Ok(name.trim().to_string());
    }
    host_identity()
}

/// No identity for leader election: says to set POD_NAME.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("no identity for leader election: set POD_NAME (the downward API's metadata.name)")]
    NoHostName,
    #[error(
        "no identity for leader election: no random suffix for the host name ({0}): set POD_NAME"
    )]
    NoRandom(getrandom::Error),
}

/// Not in a pod and no namespace given.
#[derive(Debug, thiserror::Error)]
#[error(
    "no namespace for the lease: pass --lease-namespace or set POD_NAMESPACE ({NAMESPACE_FILE} is not there: not running in a pod)"
)]
pub struct NoNamespace;

fn host_identity() -> Result<String, IdentityError> {
    let uname = rustix::system::uname();
    let host = uname.nodename().to_string_lossy().trim().to_string();
    if host.is_empty() {
        return Err(IdentityError::NoHostName);
    }
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(IdentityError::NoRandom)?;
    let hex: String = suffix.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{host}_{hex}"))
}

/// The in-cluster namespace (POD_NAMESPACE is read by the command line).
pub fn default_namespace() -> Result<String, NoNamespace> {
    match std::fs::read_to_string(NAMESPACE_FILE) {
        Ok(ns) if !ns.trim().is_empty() => Ok(ns.trim().to_string()),
        _ => Err(NoNamespace),
    }
}

/// The holder's leaseDurationSeconds, or ours when it wrote none.
fn lease_duration(spec: &LeaseSpec, default: Duration) -> Duration {
    spec.lease_duration_seconds
        .and_then(|d| u64::try_from(d).ok())
        .filter(|d| *d > 0)
        .map_or(default, Duration::from_secs)
}

fn micro(t: SystemTime) -> MicroTime {
    let us = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    MicroTime(Timestamp::from_microsecond(us).unwrap_or(Timestamp::UNIX_EPOCH))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_counts_from_when_the_record_last_changed_not_its_renew_time() {
        let t0 = Instant::now();
        let mut seen = Seen::default();
        // The holder's clock is far ahead: its renewTime says nothing about expiry here.
        let ahead = LeaseSpec {
            holder_identity: Some("a".into()),
            renew_time: Some(micro(SystemTime::now() + Duration::from_secs(3600))),
            lease_duration_seconds: Some(7),
            ..LeaseSpec::default()
        };
        assert_eq!(seen.observe(&ahead, t0), t0);
        assert_eq!(
            seen.observe(&ahead, t0 + Duration::from_secs(5)),
            t0,
            "unchanged"
        );
        let renewed = LeaseSpec {
            renew_time: Some(micro(UNIX_EPOCH)),
            ..ahead.clone()
        };
        let t1 = t0 + Duration::from_secs(6);
        assert_eq!(
            seen.observe(&renewed, t1),
            t1,
            "a renewal restarts the count"
        );
        assert_eq!(
            lease_duration(&renewed, Duration::from_secs(15)),
            Duration::from_secs(7)
        );
        assert_eq!(
            lease_duration(&LeaseSpec::default(), Duration::from_secs(15)),
            Duration::from_secs(15)
        );
    }

    #[test]
    fn side_effects_need_the_lease_with_time_left() {
        let now = Instant::now();
        assert!(may_act(Some(now + Duration::from_secs(8)), now).is_ok());
        let e = may_act(Some(now + Duration::from_millis(1500)), now)
            .unwrap_err()
            .to_string();
        assert!(e.contains("must stop within 1500ms"), "{e}");
        assert!(may_act(Some(now), now + Duration::from_secs(1)).is_err());
        let e = may_act(None, now).unwrap_err().to_string();
        assert!(e.contains("no longer holds the lease"), "{e}");
    }

    /// What a leader may still start is bounded by its tenure less the margin.
    #[test]
    fn the_act_window_is_the_tenure_less_the_margin() {
        let now = Instant::now();
        let left = act_window(Some(now + Duration::from_secs(8)), now).unwrap();
        assert_eq!(left, Duration::from_secs(8) - ACT_MARGIN);
        assert!(act_window(Some(now + Duration::from_millis(1500)), now).is_err());
        assert!(act_window(None, now).is_err());
    }

    #[test]
    fn the_fallback_identity_is_the_host_name_with_a_random_suffix() {
        let (a, b) = (host_identity().unwrap(), host_identity().unwrap());
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .trim()
            .to_string();
        assert!(a.starts_with(&format!("{host}_")), "{a}");
        assert_eq!(a.len(), host.len() + 17, "{a}");
        assert_ne!(a, b);
    }

    fn system_time(t: &Timestamp) -> SystemTime {
        u64::try_from(t.as_microsecond())
            .map_or(UNIX_EPOCH, |us| UNIX_EPOCH + Duration::from_micros(us))
    }

    #[test]
    fn micro_time_round_trips() {
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(system_time(&micro(t).0), t);
    }
}
