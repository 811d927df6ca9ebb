//! Leader election on a real Lease, with replicas' clocks apart.

use crate::support;

use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use super::{SCOPES, Stack};
use support::logs::Lines;
use support::realstack::api::ApiOnly;
use support::realstack::hub::HubOptions;

/// Scenario 6: two `spokekeeper run --leader-elect` replicas against the real hub:
/// exactly one ticks; killed, the other takes over within the lease duration and a retry
/// period; the Lease is a standard one.
#[test]
fn leader_election_on_a_real_lease() {
    crate::support::requires!(ROOT, REAL_STACK);
    // Its takeover is bounded by the lease duration: no other real stack starts beside it.
    let _alone = support::timing::exclusive();
    let stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    let ns = "spokekeeper";
    stack.hub.api.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"
    ));
    let start = |name: &str| {
        support::daemon::spawn_replica(
            &stack.fleet.config,
            stack.hub.admin_kubeconfig(),
            (name, ns),
            "2s",
            &[],
        )
    };
    let (mut a, a_lines) = start("replica-a");
    let (mut b, b_lines) = start("replica-b");
    let deadline = Instant::now() + Duration::from_secs(60);
    while ticks(&a_lines) + ticks(&b_lines) < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ta, tb) = (ticks(&a_lines), ticks(&b_lines));
    let (leader, follower, follower_lines, leader_child) = match (ta, tb) {
        (n, 0) if n >= 1 => ("replica-a", "replica-b", &b_lines, &mut a),
        (0, n) if n >= 1 => ("replica-b", "replica-a", &a_lines, &mut b),
        _ => panic!("exactly one ticks: a {ta}, b {tb}"),
    };
    let lease = stack.hub.api.get_json(&["lease", "spokekeeper", "-n", ns]);
    assert_eq!(lease["spec"]["holderIdentity"], leader, "{lease:#}");
    assert!(
        lease["spec"]["leaseDurationSeconds"].as_i64().unwrap() > 0,
        "{lease:#}"
    );
    assert!(lease["spec"]["renewTime"].is_string(), "{lease:#}");
    assert!(lease["spec"]["acquireTime"].is_string(), "{lease:#}");
    let duration = Duration::from_secs(lease["spec"]["leaseDurationSeconds"].as_u64().unwrap());

    let _ = leader_child.kill();
    let killed = Instant::now();
    let _ = leader_child.wait();
    let before = ticks(follower_lines);
    while ticks(follower_lines) == before && killed.elapsed() < duration + Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = killed.elapsed();
    assert!(
        ticks(follower_lines) > before,
        "no takeover within {took:?}"
    );
    eprintln!("takeover on the real Lease after the leader was killed: {took:?}");
    // Within the lease duration, plus the moments a busy machine takes to start a tick.
    assert!(took <= duration + Duration::from_secs(3), "took {took:?}");
    let lease = stack.hub.api.get_json(&["lease", "spokekeeper", "-n", ns]);
    assert_eq!(lease["spec"]["holderIdentity"], follower, "{lease:#}");
    assert!(
        lease["spec"]["leaseTransitions"].as_i64().unwrap_or(0) >= 1,
        "{lease:#}"
    );
    let _ = a.kill();
    let _ = b.kill();
    let _ = a.wait();
    let _ = b.wait();
}

/// libfaketime (Debian's libfaketime), to run a daemon with its wall clock shifted.
fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.is_file());
    found.expect("libfaketime is missing: apt-get install libfaketime (scripts/test does)")
}

/// Issue 19, item 6: three daemons on a real Lease, two with their wall clocks shifted by
/// libfaketime (+12 s and -10 min; the monotonic clock is not shifted). The one 12 s
/// ahead never takes a healthy leader's lease, and when leaders die, whichever replica is
/// left takes over within the lease duration, the one 10 min behind too; no two ever
/// tick at once.
#[test]
fn skewed_daemons_on_a_real_lease_never_tick_at_once() {
    crate::support::requires!(REAL_STACK);
    // Its takeover is bounded by the lease duration: no other real stack starts beside it.
    let _alone = support::timing::exclusive();
    let hub = support::realstack::api::ApiOnly::start();
    let ns = "spokekeeper";
    hub.api.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"
    ));
    let dir = tempfile::tempdir().unwrap();
    let (_, clones) = support::git::fleet_remote(dir.path(), 3);
    let faketime = libfaketime();
    let names = ["steady", "ahead", "behind"];
    let skews = [None, Some("+12s"), Some("-10m")];
    let start = |i: usize| {
        let config = dir.path().join(format!("{}.yaml", names[i]));
        support::fleet::one_unreachable(&clones[i], dir.path())
            .write(&config)
            .unwrap();
        let mut envs: Vec<(&str, &std::ffi::OsStr)> = Vec::new();
        if let Some(skew) = skews[i] {
            envs.push(("LD_PRELOAD", faketime.as_os_str()));
            envs.push(("FAKETIME", skew.as_ref()));
            envs.push(("FAKETIME_DONT_FAKE_MONOTONIC", "1".as_ref()));
        }
        support::daemon::spawn_replica(&config, hub.admin_kubeconfig(), (names[i], ns), "1s", &envs)
    };
    let t0 = Instant::now();
    let mut procs = vec![start(0)];
    let log = support::logs::text;
    assert!(
        ticked_within(&procs[0].1, Duration::from_secs(30)),
        "{}",
        log(&procs[0].1)
    );
    procs.push(start(1));
    procs.push(start(2));
    // Long enough for many renewals: with renewTime compared to its own clock, the one
    // 12 s ahead would see each renewal expire 3 s after it was written.
    std::thread::sleep(Duration::from_secs(25));
    for p in &procs[1..] {
        assert_eq!(
            ticks(&p.1),
            0,
            "a standby ticked under a healthy leader:\n{}",
            log(&p.1)
        );
    }
    let lease = hub.api.get_json(&["lease", "spokekeeper", "-n", ns]);
    assert_eq!(lease["spec"]["holderIdentity"], "steady", "{lease:#}");
    let duration = Duration::from_secs(lease["spec"]["leaseDurationSeconds"].as_u64().unwrap());

    let mut dead = vec![0];
    let mut killed_at = Vec::new();
    for round in 0..2 {
        let leader = *dead.last().unwrap();
        let _ = procs[leader].0.kill();
        let _ = procs[leader].0.wait();
        let killed = Instant::now();
        killed_at.push((leader, killed));
        let live: Vec<usize> = (0..3).filter(|i| !dead.contains(i)).collect();
        let end = killed + duration + Duration::from_secs(10);
        let next = loop {
            if let Some(&i) = live.iter().find(|&&i| ticks(&procs[i].1) > 0) {
                break i;
            }
            assert!(
                Instant::now() < end,
                "round {round}: no takeover within {:?}:\n{}",
                end - killed,
                live.iter()
                    .map(|&i| log(&procs[i].1))
                    .collect::<Vec<_>>()
                    .join("\n---\n")
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let took = killed.elapsed();
        eprintln!("round {round}: {} took over after {took:?}", names[next]);
        assert!(took <= duration + Duration::from_secs(7), "took {took:?}");
        let (holder, offset) = renew_offset(&hub, ns);
        assert_eq!(holder, names[next]);
        let want = if next == 1 { 12.0 } else { -600.0 };
        assert!(
            (offset - want).abs() < 8.0,
            "{holder} renews {offset:.1}s off, want {want}"
        );
        dead.push(next);
    }

    no_two_ticked_at_once(&procs, &killed_at, &names, t0);
    for p in &mut procs {
        let _ = p.0.kill();
        let _ = p.0.wait();
    }
}

/// How many ticks a daemon's log says it started.
fn ticks(lines: &support::logs::Lines) -> usize {
    support::logs::count(lines, "tick started")
}

/// Whether `lines` show a tick within `within`.
fn ticked_within(lines: &Lines, within: Duration) -> bool {
    let end = Instant::now() + within;
    while ticks(lines) == 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    ticks(lines) > 0
}

/// The Lease's holder and its renewTime against our clock: shows the holder's skew is
/// real.
fn renew_offset(hub: &ApiOnly, ns: &str) -> (String, f64) {
    let lease = hub.api.get_json(&["lease", "spokekeeper", "-n", ns]);
    let renewed = lease["spec"]["renewTime"].as_str().unwrap().to_string();
    let renewed =
        time::OffsetDateTime::parse(&renewed, &time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|e| panic!("{renewed}: {e}"));
    let holder = lease["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (
        holder,
        (renewed - time::OffsetDateTime::now_utc()).as_seconds_f64(),
    )
}

/// Over the whole test, no two daemons ticked at the same time: each one's ticks until it
/// was killed (`killed_at`) or until now.
fn no_two_ticked_at_once(
    procs: &[(Child, Lines)],
    killed_at: &[(usize, Instant)],
    names: &[&str],
    t0: Instant,
) {
    let end = Instant::now();
    let mut all = Vec::new();
    for (i, p) in procs.iter().enumerate() {
        let until = killed_at
            .iter()
            .find(|(k, _)| *k == i)
            .map_or(end, |(_, t)| *t);
        all.extend(
            support::logs::tick_spans(&p.1, until)
                .into_iter()
                .map(|(s, e)| (s, e, names[i].to_string())),
        );
    }
    support::logs::assert_ticks_never_overlap(all, t0, 10);
}
