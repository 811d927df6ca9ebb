//! Leader election on a coordination.k8s.io/v1 Lease, so only one replica ticks.
//!
//! Every write is guarded by the resourceVersion that was read: of two contenders
//! writing the same version, the API server accepts one and answers the other 409
//! Conflict. A holder's claim lasts until its renewTime + leaseDurationSeconds; the
//! leader stops acting when it has not renewed for `renew_deadline`, which is shorter
//! than the lease, so it has stopped before anyone else may take over.

use std::sync::Arc;
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
pub const NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// leaseDurationSeconds written into the Lease.
    pub lease_duration: Duration,
    /// How often the leader renews and a follower looks.
    pub renew_every: Duration,
    /// The leader steps down when it could not renew for this long.
    pub renew_deadline: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
            renew_deadline: Duration::from_secs(10),
        }
    }
}

/// What one round of the election saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// We hold the lease (acquired or renewed just now).
    Leader,
    /// Someone else holds it until `expires` (their renewTime + leaseDurationSeconds).
    Held { holder: String, expires: SystemTime },
    /// Another contender wrote first (409): we do not hold it.
    Lost,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "cannot {op} lease {namespace}/{name}: {source} (check --lease-namespace and that the service account may get, create and update leases.coordination.k8s.io there)"
)]
pub struct LeaseError {
    op: &'static str,
    namespace: String,
    name: String,
    #[source]
    source: kube::Error,
}

pub struct LeaseLock {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    duration: Duration,
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
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// One round: create the Lease, renew it, or take it over once it expired.
    pub async fn try_acquire_or_renew(&self) -> Result<Observed, LeaseError> {
        let now = SystemTime::now();
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.err("read", e))?;
        let Some(current) = current else {
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
                Ok(_) => Ok(Observed::Leader),
                Err(kube::Error::Api(s)) if s.is_already_exists() || s.is_conflict() => {
                    Ok(Observed::Lost)
                }
                Err(e) => Err(self.err("create", e)),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let mine = holder.as_deref() == Some(self.identity.as_str());
        if !mine && let Some(holder) = holder {
            let expires = expiry(&spec, self.duration);
            if expires > now {
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
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(_) => Ok(Observed::Leader),
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(Observed::Lost),
            Err(e) => Err(self.err("update", e)),
        }
    }

    /// Gives the lease up when we hold it, so a standby need not wait for it to expire.
    /// Ok(true) when it was released.
    pub async fn release(&self) -> Result<bool, LeaseError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.err("read", e))?
        else {
            return Ok(false);
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.renew_time = Some(micro(SystemTime::now()));
        spec.lease_duration_seconds = Some(1);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(false),
            Err(e) => Err(self.err("release", e)),
        }
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    fn err(&self, op: &'static str, source: kube::Error) -> LeaseError {
        LeaseError {
            op,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }
}

/// Runs the election for as long as it is polled, publishing on `leader` whether we
/// lead right now. Drop it (abort its task) to stop, then [`LeaseLock::release`].
pub async fn elect(lock: Arc<LeaseLock>, timing: Timing, leader: watch::Sender<bool>) {
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
                // Look again right when it expires, to take over within the lease duration.
                let left = expires
                    .duration_since(SystemTime::now())
                    .unwrap_or_default();
                wait = wait.min(left + Duration::from_millis(50));
            }
            Ok(Ok(Observed::Lost)) => {
                if lead_until.take().is_some() {
                    tracing::warn!(
                        identity = lock.identity(),
                        "lost the lease: another contender updated it first; stopping"
                    );
                }
                set(false);
                // Read who won, and when their claim ends.
                wait = Duration::from_millis(200);
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "leader election"),
            Err(_) => tracing::warn!(
                secs = budget.as_secs_f32(),
                "leader election: the hub API did not answer in time"
            ),
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
        let mut next = Instant::now() + wait;
        if let Some(t) = lead_until {
            next = next.min(t);
        }
        tokio::time::sleep_until(next).await;
    }
}

/// POD_NAME, else the host name.
pub fn default_identity() -> Result<String, String> {
    if let Ok(name) = std::env::var("POD_NAME")
        && !name.trim().is_empty()
    {
        return Ok(name.trim().to_string());
    }
    let uname = rustix::system::uname();
    let host = uname.nodename().to_string_lossy().trim().to_string();
    if host.is_empty() {
        return Err(
            "no identity for leader election: set POD_NAME (the downward API's metadata.name)"
                .into(),
        );
    }
    Ok(host)
}

/// The in-cluster namespace (POD_NAMESPACE is read by the command line).
pub fn default_namespace() -> Result<String, String> {
    match std::fs::read_to_string(NAMESPACE_FILE) {
        Ok(ns) if !ns.trim().is_empty() => Ok(ns.trim().to_string()),
        _ => Err(format!(
            "no namespace for the lease: pass --lease-namespace or set POD_NAMESPACE ({NAMESPACE_FILE} is not there: not running in a pod)"
        )),
    }
}

fn expiry(spec: &LeaseSpec, default: Duration) -> SystemTime {
    let duration = spec
        .lease_duration_seconds
        .and_then(|d| u64::try_from(d).ok())
        .filter(|d| *d > 0)
        .map_or(default, Duration::from_secs);
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map_or(UNIX_EPOCH, |t| system_time(&t.0));
    renewed + duration
}

fn micro(t: SystemTime) -> MicroTime {
    let us = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    MicroTime(Timestamp::from_microsecond(us).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn system_time(t: &Timestamp) -> SystemTime {
    u64::try_from(t.as_microsecond())
        .map_or(UNIX_EPOCH, |us| UNIX_EPOCH + Duration::from_micros(us))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_renew_time_plus_the_holders_duration() {
        let renewed = UNIX_EPOCH + Duration::from_secs(1_000);
        let spec = LeaseSpec {
            renew_time: Some(micro(renewed)),
            lease_duration_seconds: Some(7),
            ..LeaseSpec::default()
        };
        assert_eq!(
            expiry(&spec, Duration::from_secs(15)),
            renewed + Duration::from_secs(7)
        );
        let spec = LeaseSpec {
            acquire_time: Some(micro(renewed)),
            ..LeaseSpec::default()
        };
        assert_eq!(
            expiry(&spec, Duration::from_secs(15)),
            renewed + Duration::from_secs(15)
        );
        assert_eq!(
            expiry(&LeaseSpec::default(), Duration::from_secs(15)),
            UNIX_EPOCH + Duration::from_secs(15)
        );
    }

    #[test]
    fn micro_time_round_trips() {
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(system_time(&micro(t).0), t);
    }
}
