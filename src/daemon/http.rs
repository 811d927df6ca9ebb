//! /healthz, /readyz and /metrics.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use super::schedule::Schedule;
use crate::metrics::{self, Metrics};

/// A standby is ready while its election rounds got an answer within this long (the
/// default lease duration: three rounds).
pub(crate) const STANDBY_ANSWER_WINDOW: Duration = Duration::from_secs(15);

/// What /readyz decides from; updated by the tick loop.
pub(crate) struct Health {
    state: Mutex<HealthState>,
}

struct HealthState {
    schedule: Schedule,
    jitter: Duration,
    config: String,
    /// The last tick's finish, or when we began waiting for the first one.
    since: SystemTime,
    ticked: bool,
    /// Some(false): a standby replica (leader election, not the leader).
    leader: Option<bool>,
    /// When an election round last got an answer from the hub API.
    answered: Option<SystemTime>,
    /// Since then, how long a standby stays ready without another answer.
    answer_window: Duration,
}

impl Health {
    pub(crate) fn new(
        schedule: Schedule,
        jitter: Duration,
        config: String,
        leader_elect: bool,
    ) -> Health {
        Health {
            state: Mutex::new(HealthState {
                schedule,
                jitter,
                config,
                since: SystemTime::now(),
                ticked: false,
                leader: leader_elect.then_some(false),
                answered: None,
                answer_window: STANDBY_ANSWER_WINDOW,
            }),
        }
    }

    pub(crate) fn config_loaded(&self, schedule: Schedule, config: String) {
        self.with(|s| {
            s.schedule = schedule;
            s.config = config;
        });
    }

    pub(crate) fn tick_finished(&self, at: SystemTime) {
        self.with(|s| {
            s.since = at;
            s.ticked = true;
        });
    }

    /// An election round ended; `answered` when the hub API answered it.
    pub(crate) fn election_round(&self, answered: bool, at: SystemTime) {
        if answered {
            self.with(|s| s.answered = Some(at));
        }
    }

    /// A new leader gets the same grace as a fresh start.
    pub(crate) fn leading(&self, leading: bool) {
        self.with(|s| {
            if leading && s.leader == Some(false) {
                s.since = SystemTime::now();
                s.ticked = false;
            }
            s.leader = s.leader.map(|_| leading);
        });
    }

    /// Ok with what is ready, or Err with why not.
    pub(crate) fn readiness(&self, now: SystemTime) -> Result<String, NotReady> {
        let s = self.state.lock().map_err(|_| NotReady::Poisoned)?;
        if s.leader == Some(false) {
            // A standby that cannot reach the Lease could not take over: say so.
            return match s.answered {
                Some(at) if now.duration_since(at).unwrap_or_default() <= s.answer_window => Ok(
                    format!("ready: standby (not the leader), config {}", s.config),
                ),
                Some(at) => Err(NotReady::ElectionSilent {
                    secs: now.duration_since(at).unwrap_or_default().as_secs(),
                }),
                None => Err(NotReady::ElectionUnanswered),
            };
        }
        // Ticks finish a little after their slot: allow up to the 2nd slot after the last
        // finish (before the first tick: one full period after it is due).
        let deadline = s
            .schedule
            .nth_after(s.since, 2)
            .and_then(|d| d.checked_add(s.jitter));
        let what = if s.ticked {
            "the last tick finished"
        } else {
            "started waiting for the first tick"
        };
        let ago = now.duration_since(s.since).unwrap_or_default().as_secs();
        match deadline {
            Some(d) if now <= d => Ok(format!("ready: {what} {ago}s ago, config {}", s.config)),
            _ => Err(NotReady::Late {
                what,
                ago,
                schedule: s.schedule.to_string(),
            }),
        }
    }

    fn with(&self, f: impl FnOnce(&mut HealthState)) {
        if let Ok(mut s) = self.state.lock() {
            f(&mut s);
        }
    }
}

#[derive(Clone)]
struct Shared {
    health: Arc<Health>,
    metrics: Arc<Metrics>,
}

pub(crate) fn router(health: Arc<Health>, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(Shared { health, metrics })
}

async fn readyz(State(s): State<Shared>) -> Response {
    match s.health.readiness(SystemTime::now()) {
        Ok(msg) => (StatusCode::OK, format!("{msg}\n")).into_response(),
        Err(msg) => (StatusCode::SERVICE_UNAVAILABLE, format!("{msg}\n")).into_response(),
    }
}

async fn metrics_text(State(s): State<Shared>) -> Response {
    match s.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot encode the metrics\n",
        )
            .into_response(),
    }
}

/// Why /readyz answers 503: the body says it, and where to look.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotReady {
    #[error("the health state is poisoned")]
    Poisoned,
    #[error(
        "not ready: standby, the hub API last answered leader election {secs}s ago: see the log for why"
    )]
    ElectionSilent { secs: u64 },
    #[error(
        "not ready: standby, the hub API has not answered leader election yet: see the log for why"
    )]
    ElectionUnanswered,
    #[error(
        "not ready: {what} {ago}s ago, more than two periods of schedule {schedule}: see the log for why ticks do not finish"
    )]
    Late {
        what: &'static str,
        ago: u64,
        schedule: String,
    },
}

/// The metrics and health address cannot be listened on.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot listen on {addr} for /metrics, /healthz and /readyz: {error} (set metrics.listen in the config, or pass --listen ADDR)"
)]
pub struct BindError {
    addr: SocketAddr,
    error: std::io::Error,
}

/// Binds `addr`; the error says which address and how to pick another.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr).await.map_err(|source| BindError {
        addr,
        error: source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_until_two_slots_after_the_last_tick() {
        let h = Health::new(
            Schedule::every(Duration::from_secs(10)).unwrap(),
            Duration::from_secs(1),
            "c.yaml".into(),
            false,
        );
        let start = SystemTime::now();
        assert!(h.readiness(start).unwrap().contains("first tick"));
        assert!(h.readiness(start + Duration::from_secs(20)).is_ok());
        let e = h
            .readiness(start + Duration::from_secs(23))
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than two periods"), "{e}");
        h.tick_finished(start + Duration::from_secs(15));
        assert!(
            h.readiness(start + Duration::from_secs(35))
                .unwrap()
                .contains("last tick")
        );
        assert!(h.readiness(start + Duration::from_secs(37)).is_err());
    }

    #[test]
    fn a_standby_is_ready_while_election_is_answered_and_a_new_leader_gets_grace() {
        let h = Health::new(
            Schedule::every(Duration::from_secs(10)).unwrap(),
            Duration::ZERO,
            "c.yaml".into(),
            true,
        );
        let now = SystemTime::now();
        let e = h.readiness(now).unwrap_err().to_string();
        assert!(e.contains("has not answered leader election yet"), "{e}");
        h.election_round(true, now);
        assert!(h.readiness(now).unwrap().contains("standby"));
        assert!(h.readiness(now + Duration::from_secs(15)).is_ok());
        h.election_round(false, now + Duration::from_secs(10));
        let e = h
            .readiness(now + Duration::from_secs(16))
            .unwrap_err()
            .to_string();
        assert!(e.contains("last answered leader election 16s ago"), "{e}");
        h.election_round(true, now + Duration::from_secs(16));
        assert!(h.readiness(now + Duration::from_secs(16)).is_ok());
        let later = now + Duration::from_secs(3600);
        h.election_round(true, later);
        assert!(h.readiness(later).unwrap().contains("standby"));
        h.leading(true);
        let now = SystemTime::now();
        assert!(h.readiness(now + Duration::from_secs(5)).is_ok());
        assert!(h.readiness(now + Duration::from_secs(25)).is_err());
    }
}
