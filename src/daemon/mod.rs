//! `spokekeeper run`: ticks on the schedule, one at a time, serves /metrics, /healthz
//! and /readyz, reloads on SIGHUP, and with leader election ticks only while it holds
//! the Lease.

pub mod http;
pub mod lease;
mod load;
pub(crate) mod schedule;
mod serve;
mod signals;
mod ticker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

pub use http::BindError;
pub use load::{LoadError, Loaded, load};
pub use signals::SignalError;

use crate::metrics::Metrics;
use http::Health;
use lease::LeaseLock;
use signals::Signals;
use ticker::Ticker;

/// How long a running tick may go on after SIGTERM or SIGINT; the process exits within
/// 10 s of the signal.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(7);
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

/// Why the daemon did not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Signals(#[from] SignalError),
    /// Boxed: the reasons a configuration does not load are the largest by far.
    #[error(transparent)]
    Load(Box<LoadError>),
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error(
        "--leader-elect: cannot build a client for the hub's API: {0} (run in a pod with a service account, or set KUBECONFIG)"
    )]
    LeaseClient(kube::Error),
    /// The alert client (alerts' `NotifyError`, which `alerts` does not re-export yet).
    #[error("alerts: {0}")]
    Alerts(Box<dyn std::error::Error + Send + Sync>),
}

impl From<LoadError> for DaemonError {
    fn from(e: LoadError) -> DaemonError {
        DaemonError::Load(Box::new(e))
    }
}

/// Runs until SIGTERM or SIGINT. Errors are startup errors.
pub async fn run(opts: Options) -> Result<(), DaemonError> {
    // Ticks run as local tasks: the compiler cannot prove rotate::tick's future Send
    // (rust-lang/rust#102211), and a task still isolates its errors and panics.
    tokio::task::LocalSet::new().run_until(serve(opts)).await
}

async fn serve(opts: Options) -> Result<(), DaemonError> {
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
    metrics.set_leader(opts.leader.is_none());
    metrics.set_sealing_key(loaded.context.sealing.as_ref());
    if opts.leader.is_none() {
        let committed = &loaded.context;
        for (spoke, at) in
            crate::rotate::observe::rotated_at(&committed.config, &committed.repo).await
        {
            metrics.recorded_rotation(&spoke, at);
        }
    }
    let health = Arc::new(Health::new(
        schedule.clone(),
        opts.jitter,
        opts.config.display().to_string(),
        opts.leader.is_some(),
    ));
    let listen = opts.listen.unwrap_or(loaded.config().metrics_listen);
    let http = Http::start(listen, health.clone(), metrics.clone()).await?;
    let (leadership, leader, gate) =
        Leadership::start(opts.leader.as_ref(), health.clone(), metrics.clone()).await?;
    tracing::info!(listen = %http.addr, schedule = %schedule, spokes = loaded.config().spokes.len(), header_timeout_s = serve::HEADER_READ_TIMEOUT.as_secs(), connection_lifetime_s = serve::CONNECTION_LIFETIME.as_secs(), max_connections = serve::MAX_CONNECTIONS, max_head_bytes = serve::MAX_HEAD_BYTES, "running: serving /metrics, /healthz and /readyz");

    let notifier = ticker::notifier(&loaded)?;
    let events = ticker::events(&loaded, opts.jitter)?;
    Ticker {
        notifier,
        events,
        opts,
        loaded,
        metrics,
        health,
        leader,
        leader_alive: true,
        gate,
        signals,
    }
    .run()
    .await;

    leadership.stop().await;
    http.stop().await;
    tracing::info!("stopped");
    Ok(())
}

struct Http {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Http {
    async fn start(
        listen: SocketAddr,
        health: Arc<Health>,
        metrics: Arc<Metrics>,
    ) -> Result<Http, DaemonError> {
        let listener = http::bind(listen).await?;
        // Port 0 binds any free port: say which.
        let addr = listener.local_addr().unwrap_or(listen);
        let (stop, stopped) = oneshot::channel::<()>();
        let app = http::router(health, metrics);
        let task = tokio::spawn(serve::serve(listener, app, stopped));
        Ok(Http { addr, stop, task })
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        if tokio::time::timeout(Duration::from_secs(1), self.task)
            .await
            .is_err()
        {
            tracing::warn!("the HTTP server did not stop within 1s; exiting anyway");
        }
    }
}

/// Who may tick: this process always, or whoever holds the Lease.
enum Leadership {
    /// The sender is kept so the loop never sees the channel closed.
    Always { _sender: watch::Sender<bool> },
    Lease {
        lock: Arc<LeaseLock>,
        task: JoinHandle<()>,
    },
}

impl Leadership {
    async fn start(
        election: Option<&LeaderElection>,
        health: Arc<Health>,
        metrics: Arc<Metrics>,
    ) -> Result<(Leadership, watch::Receiver<bool>, crate::rotate::Gate), DaemonError> {
        let (tx, rx) = watch::channel(election.is_none());
        let Some(le) = election else {
            return Ok((
                Leadership::Always { _sender: tx },
                rx,
                crate::rotate::Gate::default(),
            ));
        };
        let client = kube::Client::try_default()
            .await
            .map_err(DaemonError::LeaseClient)?;
        let lock = Arc::new(LeaseLock::new(
            client,
            &le.namespace,
            &le.name,
            &le.identity,
            le.timing.lease_duration,
        ));
        tracing::info!(lease = %format!("{}/{}", le.namespace, le.name), identity = %le.identity, "leader election: waiting for the lease");
        let tenure = Arc::new(std::sync::Mutex::new(None));
        let until = tenure.clone();
        let gate = crate::rotate::Gate::with_tenure(move || {
            // A poisoned record of the tenure says nothing: not held.
            let lead_until = until.lock().map_err(|_| lease::ActError::NotHeld)?;
            lease::act_window(*lead_until, tokio::time::Instant::now()).map(Some)
        });
        let on_round = move |round: lease::Round| {
            health.election_round(round.answered, SystemTime::now());
            metrics.set_leader(round.leading);
            if let Ok(mut t) = tenure.lock() {
                *t = round.lead_until;
            }
        };
        let task = tokio::spawn(lease::elect_reporting(
            lock.clone(),
            le.timing,
            tx,
            on_round,
        ));
        Ok((Leadership::Lease { lock, task }, rx, gate))
    }

    /// Stops the election and gives the lease up when held.
    async fn stop(self) {
        let Leadership::Lease { lock, task } = self else {
            return;
        };
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
}
