//! Time to recovery of a rebuilt spoke on the real stack (issue 27): a real hub with Flux's
//! real source-, kustomize- and helm-controller (tests/support/src/realstack/real_flux.rs),
//! one real spoke, the fleet repo in Flux's layout with Flux's usual intervals
//! (GitRepository 1m, the root Kustomization and the spoke's Kustomization and HelmRelease
//! 10m). Side by side in one run, on the same stack:
//! - assisted: the spoke rebuilt (new CAs, empty storage), then one `rotate --all` with
//!   `hub:` configured, which asks the GitRepository, the Kustomization that applies the
//!   SealedSecret, then the consumers to reconcile, and waits for their Ready;
//! - unassisted: the spoke rebuilt again, then one `rotate --all` without `hub:` (it
//!   commits and pushes, and asks nothing), the layout left to its intervals.
//!
//! - federated: a second stack whose spoke is `credential.mode: federated` (the spoke
//!   trusts the hub's ServiceAccount issuer; git holds a ConfigMap), rebuilt, then one
//!   `rotate --all` (`hub:` is required: the check token comes from the hub), which writes
//!   the spoke's trust, waits for its API server to load it and proves it before the push.
//!
//! A consumer is recovered when what it deploys is back on the rebuilt spoke (the
//! Kustomization's ConfigMap, the Helm release's deployed record) and its Ready is True
//! at its generation: both polled every 500 ms from the start of the tick. The push's
//! time is what a post-receive hook in the fleet remote records. An unassisted wait is
//! cut at a cap (RECOVERY_BENCH_CAP seconds, 180 by default) and reported as "> cap".
//!
//! `cargo bench --bench recovery` (as root, SPOKEKEEPER_REALSTACK set); skipped with a
//! reason under `cargo test` (minutes of both cores) or without the real stack.

use spokekeeper_test_support as support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::realstack::flux_controllers::ready;
use support::realstack::real_flux::{Format, Intervals, RealFlux};

/// Spoke 0's consumers: (kind, what is back on the rebuilt spoke when it recovered).
const CONSUMERS: [(&str, &[&str]); 2] = [
    (
        "kustomization",
        &["get", "configmap", "spoke-app", "-n", "default"],
    ),
    (
        "helmrelease",
        &[
            "get",
            "secrets",
            "-n",
            "default",
            "-l",
            "owner=helm,name=spoke-config,status=deployed",
            "-o",
            "name",
        ],
    ),
];

const POLL: Duration = Duration::from_millis(500);

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

/// Is consumer `kind` spoke0 recovered: its objects back on the spoke, Ready True at its
/// generation?
fn recovered(stack: &RealFlux, kind: &str, on_spoke: &[&str]) -> bool {
    let back = stack.spoke_apis[0]
        .try_kubectl(on_spoke)
        .is_ok_and(|out| !out.trim().is_empty());
    back && ready(&stack.hub, kind, "spoke0")
        .is_some_and(|r| r.status == "True" && r.observed_generation == r.generation)
}

/// When each consumer recovered, from `start`, polled until all did or `cap` passed.
fn wait_recovered(stack: &RealFlux, start: Instant, cap: Duration) -> Vec<Option<Duration>> {
    let mut at: Vec<Option<Duration>> = vec![None; CONSUMERS.len()];
    while at.iter().any(Option::is_none) && start.elapsed() < cap {
        for (i, (kind, on_spoke)) in CONSUMERS.iter().enumerate() {
            if at[i].is_none() && recovered(stack, kind, on_spoke) {
                at[i] = Some(start.elapsed());
            }
        }
        std::thread::sleep(POLL);
    }
    at
}

/// The pushes the fleet remote received, as Unix times, since the file was made.
fn pushes(file: &Path) -> Vec<f64> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

struct Round {
    name: &'static str,
    tick: Duration,
    /// From the start of the tick to its push.
    push: Option<Duration>,
    consumers: Vec<Option<Duration>>,
}

/// Spoke 0 rebuilt (`generation`), then one tick and the wait for its consumers.
fn round(
    stack: &mut RealFlux,
    name: &'static str,
    generation: u32,
    push_log: &Path,
    cap: Duration,
) -> Round {
    stack.rebuild(0, generation);
    let _ = std::fs::remove_file(push_log);
    let (start, start_unix) = (Instant::now(), now_unix());
    let (code, report, err) = stack.rotate_json();
    let tick = start.elapsed();
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{name}: {report:#}\n{err}");
    assert!(code == 0, "{name}: exit {code}: {report:#}\n{err}");
    let consumers = wait_recovered(stack, start, cap);
    let push = pushes(push_log)
        .first()
        .map(|t| Duration::from_secs_f64((t - start_unix).max(0.0)));
    Round {
        name,
        tick,
        push,
        consumers,
    }
}

/// When the last consumer recovered, if every one did.
fn all(r: &Round) -> Option<Duration> {
    r.consumers
        .iter()
        .copied()
        .try_fold(Duration::ZERO, |m, c| c.map(|c| m.max(c)))
}

fn secs(d: Option<Duration>, cap: Duration) -> String {
    match d {
        Some(d) => format!("{:.1} s", d.as_secs_f64()),
        None => format!("> {} s", cap.as_secs()),
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "recovery: skipped under cargo test (minutes of both cores): cargo bench --bench recovery"
        );
        return;
    }
    if std::env::var_os("SPOKEKEEPER_REALSTACK").is_none() {
        println!(
            "recovery: skipped: SPOKEKEEPER_REALSTACK is unset (the real components, built by scripts/build-realstack)"
        );
        return;
    }
    let cap = Duration::from_secs(
        std::env::var("RECOVERY_BENCH_CAP")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(180),
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "recovery benchmark: {cores} cores, {} build of spokekeeper, intervals {:?}, unassisted cap {} s",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        Intervals::FLUX,
        cap.as_secs()
    );
    let (mut stack, push_log) = served(Format::SealedSecrets);
    let assisted = round(&mut stack, "assisted (hub: configured)", 1, &push_log, cap);
    // Unassisted: the same tick without `hub:`, so nothing asks Flux to reconcile.
    let text = std::fs::read_to_string(&stack.fleet.config).expect("config");
    let at = text.find("\nhub:\n").expect("the hub: section");
    std::fs::write(&stack.fleet.config, &text[..=at]).expect("config");
    let unassisted = round(
        &mut stack,
        "unassisted (Flux's intervals)",
        2,
        &push_log,
        cap,
    );

    drop(stack);
    let (mut stack, push_log) = served(Format::Federated);
    let federated = round(&mut stack, "federated (hub: configured)", 1, &push_log, cap);
    drop(stack);

    println!(
        "\n| round | tick (s) | push after tick start | Kustomization recovered | HelmRelease recovered | all recovered | all, after the push |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in [&assisted, &unassisted, &federated] {
        let all = all(r);
        let after_push = all.zip(r.push).map(|(a, p)| a.saturating_sub(p));
        println!(
            "| {} | {:.1} | {} | {} | {} | {} | {} |",
            r.name,
            r.tick.as_secs_f64(),
            secs(r.push, cap),
            secs(r.consumers[0], cap),
            secs(r.consumers[1], cap),
            secs(all, cap),
            secs(after_push, cap),
        );
    }
    let (a, u) = (all(&assisted), all(&unassisted));
    match (a, u) {
        (Some(a), Some(u)) => println!(
            "\nunassisted / assisted, all recovered: {:.1}x",
            u.as_secs_f64() / a.as_secs_f64()
        ),
        (Some(a), None) => println!(
            "\nunassisted / assisted, all recovered: > {:.1}x (unassisted cut at the cap)",
            cap.as_secs_f64() / a.as_secs_f64()
        ),
        _ => println!("\nunassisted / assisted: the assisted round did not recover within the cap"),
    }
    let after_push = |r: &Round| all(r).zip(r.push).map(|(a, p)| a.saturating_sub(p));
    if let (Some(f), Some(a)) = (after_push(&federated), after_push(&assisted)) {
        println!(
            "federated / sealed (assisted), all recovered after the push: {:.2}x",
            f.as_secs_f64() / a.as_secs_f64()
        );
    }
    let goal = Duration::from_secs(30);
    for r in [&assisted, &federated] {
        let met = after_push(r).is_some_and(|d| d <= goal);
        println!(
            "goal ({}, every consumer Ready within 30 s of the push): {}",
            r.name,
            if met { "met" } else { "NOT met" }
        );
    }
}

/// A stack in `format` with Flux's intervals, its remote's pushes logged, after a first
/// rotation: its spoke served by the hub, ready for the rounds.
fn served(format: Format) -> (RealFlux, std::path::PathBuf) {
    let stack = RealFlux::launch(1, false, "", Intervals::FLUX, format, |_| {});
    let push_log = stack.fleet.dir.path().join("pushes");
    let hook = stack.fleet.remote.join("hooks/post-receive");
    std::fs::write(
        &hook,
        format!("#!/bin/sh\ndate +%s.%N >> {}\n", push_log.display()),
    )
    .expect("the post-receive hook");
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    stack.assert_consumers_ready(&report, 0);
    stack.assert_deployed(0);
    (stack, push_log)
}
