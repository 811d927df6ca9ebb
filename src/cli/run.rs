//! `spokekeeper run`: the daemon.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use super::{Chain, fail};
use spokekeeper::config::Span;
use spokekeeper::daemon::{self, LeaderElection, lease};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Serve /metrics, /healthz and /readyz on ADDR (overrides metrics.listen).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Start each tick up to DURATION (e.g. 30s) after its scheduled time, at random.
    #[arg(long, value_name = "DURATION", default_value = "0s")]
    pub(crate) jitter: Span,
    /// Tick once at start (with --leader-elect: on becoming the leader), then on the schedule.
    #[arg(long)]
    pub now: bool,
    /// How many spokes are worked on at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Tick only while holding a coordination.k8s.io Lease on the hub (replicas in Kubernetes).
    #[arg(long)]
    pub leader_elect: bool,
    /// The Lease's name.
    #[arg(long, value_name = "NAME", default_value = "spokekeeper")]
    pub lease_name: String,
    /// The Lease's namespace [default: the pod's namespace].
    #[arg(long, value_name = "NS", env = "POD_NAMESPACE")]
    pub(crate) lease_namespace: Option<String>,
    /// For tests only: tick every DURATION instead of on `schedule`.
    #[arg(long, value_name = "DURATION", hide = true)]
    pub interval: Option<Span>,
}

pub(super) fn run(args: &RunArgs, config_path: &Path) -> ExitCode {
    let leader = if args.leader_elect {
        let namespace = match args
            .lease_namespace
            .clone()
            .filter(|ns| !ns.trim().is_empty())
            .map_or_else(lease::default_namespace, Ok)
        {
            Ok(ns) => ns,
            Err(e) => return fail("run", Chain(&e)),
        };
        let identity = match lease::default_identity() {
            Ok(id) => id,
            Err(e) => return fail("run", Chain(&e)),
        };
        Some(LeaderElection {
            namespace,
            name: args.lease_name.clone(),
            identity,
            timing: lease::Timing::default(),
        })
    } else {
        None
    };
    let opts = daemon::Options {
        config: config_path.to_path_buf(),
        listen: args.listen,
        jitter: args.jitter.0,
        tick_now: args.now,
        interval: args.interval.map(|s| s.0),
        concurrency: args.concurrency.max(1),
        leader,
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => return fail("run", format!("cannot start the runtime: {e}")),
    };
    let result = runtime.block_on(daemon::run(opts));
    // Whatever is still running (an ssh being killed) must not hold up the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail("run", Chain(&e)),
    }
}
