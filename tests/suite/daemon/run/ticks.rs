//! Ticks that go wrong: one longer than the interval delays the next, a failing one is counted and readiness follows.

use super::*;

#[test]
fn a_tick_longer_than_the_interval_delays_the_next_and_says_so() {
    crate::support::requires!(ROOT);
    let _quiet = support::timing::exclusive();
    let fleet = Fleet::new(&[NodeOptions::default()]);
    let mut yaml = fleet.yaml(&[0], &[]);
    yaml = yaml.replace("connect_timeout: 5s", "connect_timeout: 3s");
    fs::write(&fleet.config, yaml).unwrap();
    fleet.nodes[0].sigstop();
    let d = Daemon::start(&fleet.config, &["--now", "--interval", "1s"]);
    assert!(
        d.wait_for("tick finished", 2, Duration::from_secs(20)),
        "{}",
        d.log()
    );
    fleet.nodes[0].sigcont();
    let log = d.log();
    assert!(
        log.contains("the tick ran past the next scheduled time"),
        "{log}"
    );
    assert_ticks_never_overlap(&d);
    let finished = d.times("tick finished");
    let started = d.times("tick started");
    assert!(started[0] + Duration::from_secs(2) < finished[0], "{log}");
    // Late, not skipped: the next tick starts as soon as the long one ends.
    assert!(
        started[1] - finished[0] < Duration::from_millis(500),
        "{log}"
    );
}

#[test]
fn a_failing_tick_is_counted_the_daemon_keeps_going_and_readiness_follows() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    // Another run holds the repo lock: every tick fails as a whole.
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(fleet.clone.join(".git/spokekeeper.lock"))
        .unwrap();
    lock.try_lock().unwrap();
    let mut d = Daemon::start(&fleet.config, &["--interval", "1s"]);
    assert!(
        d.wait_for("tick failed", 3, Duration::from_secs(10)),
        "{}",
        d.log()
    );
    assert!(d.alive());
    assert!(
        d.log().contains("another spokekeeper run holds"),
        "{}",
        d.log()
    );
    let m = d.metrics();
    assert!(
        sample(&m, "spokekeeper_errors_total{spoke=\"\",stage=\"tick\"}").is_some_and(|v| v >= 3.0),
        "{m}"
    );
    // No tick finished for more than two periods: not ready.
    let r = d.get("/readyz");
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("not ready"), "{}", r.body);

    drop(lock);
    assert!(
        d.wait_for("tick finished", 1, Duration::from_secs(10)),
        "{}",
        d.log()
    );
    let r = d.get("/readyz");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(fleet.remote_log().len(), 2);
}
