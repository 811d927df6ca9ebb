//! `spokekeeper run`: ticks on the schedule, one at a time, serves /metrics, /healthz
//! and /readyz, reloads on SIGHUP, and with leader election ticks only while it holds
//! the Lease.
//!
//! A tick runs in its own task, so an error or a panic in it is logged and counted and
//! never ends the daemon. Cancelling a tick drops it: the repo writes files atomically
//! and kills the git it started; the next tick's sync discards what was not committed.

pub mod http;
pub mod lease;
mod load;
pub mod schedule;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use load::{Loaded, load};

use crate::metrics::Metrics;
use crate::rotate::{self, Outcome, TickReport};
use http::Health;
use lease::LeaseLock;

/// How long a running tick may go on after SIGTERM or SIGINT; the process exits within
/// 10 s of the signal.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(7);
/// Long sleeps wake this often, so a stepped wall clock is noticed.
const MAX_NAP: Duration = Duration::from_secs(30);

pub struct LeaderElection {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub timing: lease::Timing,
}

pub struct Options {
    pub config: PathBuf,
    /// Overrides metrics.listen.
    pub listen: Option<SocketAddr>,
    /// Each tick starts up to this much after its slot, at random.
    pub jitter: Duration,
    /// Tick at once at start (with leader election: on becoming the leader).
    pub tick_now: bool,
    /// Testing: tick every `interval` instead of on the configured schedule.
    pub interval: Option<Duration>,
    pub concurrency: usize,
    pub leader: Option<LeaderElection>,
}

/// Runs until SIGTERM or SIGINT. Errors are startup errors.
pub async fn run(opts: Options) -> Result<(), String> {
    // Ticks run as local tasks: the compiler cannot prove rotate::tick's future Send
    // (rust-lang/rust#102211), and a task still isolates its errors and panics.
    tokio::task::LocalSet::new().run_until(serve(opts)).await
}

async fn serve(opts: Options) -> Result<(), String> {
    // First: SIGHUP's default action would end the process.
    let signals = Signals::new()?;
    let loaded = load(&opts.config, opts.interval).await?;
    let schedule = loaded.schedule.clone();
    if let Some(period) = schedule.period_at(SystemTime::now())
        && opts.jitter >= period
    {
        tracing::warn!(
            jitter_s = opts.jitter.as_secs(),
            period_s = period.as_secs(),
            "--jitter is not shorter than the schedule's period: ticks will often start late"
        );
    }
    let metrics = Arc::new(Metrics::new());
    metrics.set_sealing_not_after(loaded.context.sealing.not_after());
    let config_name = opts.config.display().to_string();
    let health = Arc::new(Health::new(
        schedule.clone(),
        opts.jitter,
        config_name,
        opts.leader.is_some(),
    ));
    let listen = opts.listen.unwrap_or(loaded.config().metrics_listen);
    let listener = http::bind(listen).await?;
    // Port 0 binds any free port: say which.
    let listen = listener.local_addr().unwrap_or(listen);
    let (stop_http, http_stopped) = oneshot::channel::<()>();
    let app = http::router(health.clone(), metrics.clone());
    let server = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = http_stopped.await;
            })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the HTTP server stopped");
        }
    });

    let (leader_tx, leader_rx) = watch::channel(opts.leader.is_none());
    let mut election: Option<(Arc<LeaseLock>, JoinHandle<()>)> = None;
    let mut _constant_leader = None;
    match &opts.leader {
        Some(le) => {
            let client = kube::Client::try_default().await.map_err(|e| {
                format!("--leader-elect: cannot build a client for the hub's API: {e} (run in a pod with a service account, or set KUBECONFIG)")
            })?;
            let lock = Arc::new(LeaseLock::new(
                client,
                &le.namespace,
                &le.name,
                &le.identity,
                le.timing.lease_duration,
            ));
            tracing::info!(lease = %format!("{}/{}", le.namespace, le.name), identity = %le.identity, "leader election: waiting for the lease");
            let task = tokio::spawn(lease::elect(lock.clone(), le.timing, leader_tx));
            election = Some((lock, task));
        }
        None => _constant_leader = Some(leader_tx),
    }
    tracing::info!(%listen, schedule = %schedule, spokes = loaded.config().spokes.len(), "running: serving /metrics, /healthz and /readyz");

    let mut daemon = Daemon {
        opts,
        loaded,
        metrics,
        health,
        leader: leader_rx,
        leader_alive: true,
        signals,
    };
    daemon.run().await;

    if let Some((lock, task)) = election {
        task.abort();
        let _ = task.await;
        match tokio::time::timeout(Duration::from_secs(1), lock.release()).await {
            Ok(Ok(true)) => tracing::info!("released the lease"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not release the lease: it expires on its own")
            }
            Err(_) => tracing::warn!("releasing the lease timed out: it expires on its own"),
        }
    }
    let _ = stop_http.send(());
    if tokio::time::timeout(Duration::from_secs(1), server)
        .await
        .is_err()
    {
        tracing::warn!("the HTTP server did not stop within 1s; exiting anyway");
    }
    tracing::info!("stopped");
    Ok(())
}

enum Sig {
    Stop(&'static str),
    Reload,
}

struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    fn new() -> Result<Signals, String> {
        let install = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| format!("cannot handle {name}: {e}"))
        };
        Ok(Signals {
            term: install(SignalKind::terminate(), "SIGTERM")?,
            int: install(SignalKind::interrupt(), "SIGINT")?,
            hup: install(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    async fn recv(&mut self) -> Sig {
        tokio::select! {
            _ = self.term.recv() => Sig::Stop("SIGTERM"),
            _ = self.int.recv() => Sig::Stop("SIGINT"),
            _ = self.hup.recv() => Sig::Reload,
        }
    }
}

/// How a tick ended, for the loop.
enum Ended {
    /// Finished, failed or cancelled by a lost lease: carry on.
    Continue,
    /// A stop signal came during the tick.
    Stop,
}

struct Daemon {
    opts: Options,
    loaded: Loaded,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    leader: watch::Receiver<bool>,
    leader_alive: bool,
    signals: Signals,
}

impl Daemon {
    async fn run(&mut self) {
        let mut leading = *self.leader.borrow_and_update();
        // The slot the next tick belongs to, and when it starts (slot + jitter).
        let mut due = leading.then(|| self.first_slot());
        let mut wake = due.map(|s| s + schedule::jitter(self.opts.jitter));
        loop {
            let nap = wake.map_or(MAX_NAP, |w| {
                w.duration_since(SystemTime::now())
                    .unwrap_or_default()
                    .min(MAX_NAP)
            });
            tokio::select! {
                sig = self.signals.recv() => match sig {
                    Sig::Stop(name) => {
                        tracing::info!("{name}: stopping (no tick was running)");
                        return;
                    }
                    Sig::Reload => {
                        if self.reload().await && leading {
                            due = self.loaded.schedule.next_after(SystemTime::now());
                            wake = due.map(|s| s + schedule::jitter(self.opts.jitter));
                        }
                    }
                },
                changed = self.leader.changed(), if self.leader_alive => {
                    if changed.is_err() {
                        self.leader_alive = false;
                        tracing::error!("leader election stopped: not ticking");
                    }
                    let now_leading = self.leader_alive && *self.leader.borrow_and_update();
                    if now_leading != leading {
                        leading = now_leading;
                        self.health.leading(leading);
                        due = leading.then(|| self.first_slot());
                        wake = due.map(|s| s + schedule::jitter(self.opts.jitter));
                        if let Some(w) = wake {
                            tracing::info!(next = %rfc3339(w), "leading: ticking on the schedule");
                        }
                    }
                }
                _ = tokio::time::sleep(nap), if wake.is_some() => {
                    let (Some(slot), Some(w)) = (due, wake) else { continue };
                    if SystemTime::now() < w {
                        continue;
                    }
                    let ended = self.tick().await;
                    let end = SystemTime::now();
                    if matches!(ended, Ended::Stop) {
                        return;
                    }
                    leading = self.leader_alive && *self.leader.borrow_and_update();
                    if !leading {
                        self.health.leading(false);
                    }
                    due = leading.then(|| self.next_slot(slot, end));
                    wake = due.map(|s| s.max(end) + schedule::jitter(self.opts.jitter));
                }
            }
        }
    }

    fn first_slot(&self) -> SystemTime {
        let now = SystemTime::now();
        if self.opts.tick_now {
            return now;
        }
        self.loaded.schedule.next_after(now).unwrap_or(now)
    }

    /// The slot after `slot`; when the tick ran past it, now (late, never overlapping).
    fn next_slot(&self, slot: SystemTime, end: SystemTime) -> SystemTime {
        let schedule = &self.loaded.schedule;
        match schedule.next_after(slot) {
            Some(next) if next > end => next,
            Some(next) => {
                let took = end.duration_since(slot).unwrap_or_default();
                tracing::warn!(
                    took_s = took.as_secs(),
                    missed = %rfc3339(next),
                    schedule = %schedule,
                    "the tick ran past the next scheduled time: the next tick starts now instead (ticks never overlap)"
                );
                end
            }
            None => {
                tracing::error!(schedule = %schedule, "the schedule has no further time: no more ticks");
                end + Duration::from_secs(86_400 * 365)
            }
        }
    }

    /// Runs one tick to its end, unless a stop signal's grace runs out or the lease is
    /// lost, which cancel it.
    async fn tick(&mut self) -> Ended {
        let ctx = self.loaded.context.clone();
        let opts = rotate::Options {
            concurrency: self.opts.concurrency,
            ..rotate::Options::default()
        };
        let started = Instant::now();
        tracing::info!(spokes = ctx.config.spokes.len(), "tick started");
        let mut task = {
            let ctx = ctx.clone();
            tokio::task::spawn_local(async move { rotate::tick(&ctx, &opts).await })
        };
        let mut stop_by: Option<Instant> = None;
        let joined = loop {
            let grace = stop_by.unwrap_or_else(|| Instant::now() + MAX_NAP);
            tokio::select! {
                joined = &mut task => break Some(joined),
                sig = self.signals.recv() => match sig {
                    Sig::Reload => {
                        self.reload().await;
                    }
                    Sig::Stop(name) if stop_by.is_none() => {
                        tracing::info!(grace_s = SHUTDOWN_GRACE.as_secs(), "{name}: letting the running tick finish, then stopping");
                        stop_by = Some(Instant::now() + SHUTDOWN_GRACE);
                    }
                    Sig::Stop(name) => {
                        tracing::warn!("{name} again: cancelling the running tick");
                        break None;
                    }
                },
                _ = tokio::time::sleep_until(grace), if stop_by.is_some() => {
                    tracing::warn!(grace_s = SHUTDOWN_GRACE.as_secs(), "the tick did not finish in time after the stop signal: cancelling it");
                    break None;
                }
                changed = self.leader.changed(), if self.leader_alive => {
                    if changed.is_err() || !*self.leader.borrow() {
                        tracing::warn!("lost the lease: cancelling the running tick");
                        break None;
                    }
                }
            }
        };
        let took = started.elapsed();
        match joined {
            None => {
                task.abort();
                let _ = task.await;
                tracing::warn!(
                    took_ms = took.as_millis() as u64,
                    "tick cancelled: nothing it had not committed was kept"
                );
                self.report_unpushed(&ctx).await;
            }
            Some(Ok(Ok(report))) => {
                let now = SystemTime::now();
                self.metrics.observe_tick(&report, took, now);
                self.health.tick_finished(now);
                log_report(&report, took);
                if report
                    .repo_error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("push"))
                {
                    self.report_unpushed(&ctx).await;
                }
            }
            Some(Ok(Err(e))) => {
                tracing::error!(error = %e, "tick failed");
                self.metrics.error("", "tick");
            }
            Some(Err(e)) => {
                tracing::error!(error = %e, "tick failed unexpectedly (a bug: please report it)");
                self.metrics.error("", "tick");
            }
        }
        if stop_by.is_some() {
            Ended::Stop
        } else {
            Ended::Continue
        }
    }

    /// Says so when commits stay in the local clone only.
    async fn report_unpushed(&self, ctx: &rotate::Context) {
        if !ctx.config.repo.push {
            return;
        }
        match tokio::time::timeout(Duration::from_secs(1), ctx.repo.unpushed()).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::warn!(
                commits = n,
                repo = %ctx.repo.path().display(),
                "commits are in the local clone but not pushed: the next tick pushes them"
            ),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot tell whether commits are left unpushed")
            }
            Err(_) => tracing::warn!("cannot tell in time whether commits are left unpushed"),
        }
    }

    /// Returns whether the schedule changed. A broken file keeps the running config.
    async fn reload(&mut self) -> bool {
        let path = self.opts.config.display().to_string();
        tracing::info!(config = %path, "SIGHUP: reloading the configuration");
        match load(&self.opts.config, self.opts.interval).await {
            Ok(new) => {
                let old = self.loaded.config();
                if self.opts.listen.is_none() && new.config().metrics_listen != old.metrics_listen {
                    tracing::warn!(
                        listening = %old.metrics_listen,
                        configured = %new.config().metrics_listen,
                        "metrics.listen changed: restart to listen there"
                    );
                }
                let changed = new.schedule.to_string() != self.loaded.schedule.to_string();
                self.metrics
                    .set_sealing_not_after(new.context.sealing.not_after());
                self.health.config_loaded(new.schedule.clone(), path);
                tracing::info!(
                    spokes = new.config().spokes.len(),
                    schedule = %new.schedule,
                    "configuration reloaded"
                );
                self.loaded = new;
                changed
            }
            Err(e) => {
                tracing::error!(error = %e, "configuration not reloaded: still running on the previous one");
                self.metrics.error("", "reload");
                false
            }
        }
    }
}

fn log_report(report: &TickReport, took: Duration) {
    let mut rotated = 0;
    let mut failed = 0;
    for s in &report.spokes {
        match &s.outcome {
            Outcome::Rotated { commit } => {
                rotated += 1;
                let reason = s
                    .reason
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                tracing::info!(spoke = %s.spoke, %reason, %commit, "rotated");
            }
            Outcome::Failed { stage, error } => {
                failed += 1;
                tracing::warn!(spoke = %s.spoke, %stage, %error, "spoke failed");
            }
            Outcome::NotRenewed => tracing::warn!(
                spoke = %s.spoke,
                "the client certificate expires soon and the node has not renewed it: restart k3s on the node"
            ),
            _ => {}
        }
    }
    if let Some(e) = &report.repo_error {
        tracing::warn!(error = %e, "fleet repo");
    }
    tracing::info!(
        took_ms = took.as_millis() as u64,
        spokes = report.spokes.len(),
        rotated,
        failed,
        pushed = report.pushed,
        "tick finished"
    );
}

fn rfc3339(t: SystemTime) -> String {
    crate::rotate::state::rfc3339(time::OffsetDateTime::from(t))
}
