//! Signals to a running daemon: SIGTERM lets a tick finish or cancels a wedged one, a second signal cancels at once, SIGHUP reloads only a valid configuration.

use super::*;

#[test]
fn sigterm_during_a_tick_lets_it_finish_and_leaves_the_repo_clean() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[
        NodeOptions::default(),
        NodeOptions::default(),
        NodeOptions::default(),
    ]);
    let mut d = Daemon::start(&fleet.config, &["--now", "--interval", "1h"]);
    assert!(d.wait_for("tick started", 1, FIVE_S), "{}", d.log());
    let sent = Instant::now();
    d.signal(Signal::TERM);
    let status = d
        .wait_exit(Duration::from_secs(10))
        .expect("exits within 10s");
    assert!(sent.elapsed() < Duration::from_secs(10));
    let log = d.log();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("letting the running tick finish"), "{log}");
    assert!(log.contains("tick finished"), "{log}");
    assert_eq!(
        fleet.remote_log().len(),
        4,
        "all three committed and pushed"
    );
    fleet.assert_clean();
    assert_eq!(fleet.unpushed(), 0);
}

#[test]
fn sigterm_with_a_wedged_spoke_cancels_the_tick_and_exits_within_10s() {
    crate::support::requires!(ROOT);
    let _quiet = support::timing::exclusive();
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    // spoke1's sshd accepts connections and never answers; its connect timeout is 60s.
    fs::write(&fleet.config, fleet.yaml(&[0, 1], &[1])).unwrap();
    fleet.nodes[1].sigstop();
    let mut d = Daemon::start(&fleet.config, &["--now", "--interval", "1h"]);
    assert!(d.wait_for("tick started", 1, FIVE_S), "{}", d.log());
    std::thread::sleep(Duration::from_secs(1));
    let node1 = fleet.nodes[1].address;
    assert!(
        !ssh_clients_for(node1).is_empty(),
        "an ssh to the wedged node is waiting"
    );
    let sent = Instant::now();
    d.signal(Signal::TERM);
    let status = d
        .wait_exit(Duration::from_secs(10))
        .expect("exits within 10s");
    let took = sent.elapsed();
    let leftovers = ssh_clients_for(node1);
    assert!(leftovers.is_empty(), "ssh left running: {leftovers:?}");
    fleet.nodes[1].sigcont();
    let log = d.log();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(
        took >= Duration::from_secs(6),
        "the tick had its grace first: {took:?}"
    );
    assert!(log.contains("did not finish in time"), "{log}");
    assert!(log.contains("tick cancelled"), "{log}");
    assert!(!log.contains("tick finished"), "{log}");
    assert_eq!(
        fleet.remote_log().len(),
        1,
        "commits come after every spoke is done"
    );
    fleet.assert_clean();
}

#[test]
fn sighup_keeps_the_running_config_when_the_new_one_is_broken_and_takes_a_valid_one() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    fleet.write_config(&[0], "");
    let mut d = Daemon::start(&fleet.config, &["--interval", "1s"]);
    assert!(
        d.wait_for("tick finished", 1, Duration::from_secs(20)),
        "{}",
        d.log()
    );
    assert_eq!(fleet.remote_log().len(), 2);

    // A typo on the last line: refused, named, and the daemon keeps ticking on the old one.
    fleet.write_config(&[0, 1], "verify_evry: 12h\n");
    let lines = fs::read_to_string(&fleet.config).unwrap().lines().count();
    d.signal(Signal::HUP);
    assert!(
        d.wait_for("configuration not reloaded", 1, FIVE_S),
        "{}",
        d.log()
    );
    let log = d.log();
    let line = log
        .lines()
        .find(|l| l.contains("configuration not reloaded"))
        .unwrap();
    assert!(
        line.contains(fleet.config.to_str().unwrap()),
        "names the file: {line}"
    );
    assert!(
        line.contains("verify_evry") && line.contains(&format!("line {lines}")),
        "names the key and line {lines}: {line}"
    );
    let seen = d.count("tick finished");
    assert!(d.wait_for("tick finished", seen + 2, Duration::from_secs(10)));
    assert!(d.alive());
    assert_eq!(fleet.remote_log().len(), 2, "spoke1 is not configured yet");
    let m = d.metrics();
    assert_eq!(
        sample(&m, "spokekeeper_errors_total{spoke=\"\",stage=\"reload\"}"),
        Some(1.0),
        "{m}"
    );
    assert!(!m.contains("spoke=\"spoke1\""), "{m}");

    // Fixed: picked up, and spoke1 is rotated by the next tick.
    fleet.write_config(&[0, 1], "verify_every: 12h\n");
    d.signal(Signal::HUP);
    assert!(
        d.wait_for("configuration reloaded", 1, FIVE_S),
        "{}",
        d.log()
    );
    let seen = d.count("tick finished");
    assert!(d.wait_for("tick finished", seen + 2, Duration::from_secs(20)));
    let log = fleet.remote_log();
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(
        log[0].starts_with("spoke1: rotate kubeconfig: initial"),
        "{log:?}"
    );
    let m = d.metrics();
    assert_eq!(
        sample(&m, "spokekeeper_spoke_up{spoke=\"spoke1\"}"),
        Some(1.0),
        "{m}"
    );
    d.signal(Signal::TERM);
    assert!(d.wait_exit(Duration::from_secs(10)).unwrap().success());
    fleet.assert_clean();
}

#[test]
fn a_second_signal_cancels_the_running_tick_at_once() {
    crate::support::requires!(ROOT);
    let _quiet = support::timing::exclusive();
    let fleet = Fleet::new(&[NodeOptions::default()]);
    fs::write(&fleet.config, fleet.yaml(&[0], &[0])).unwrap();
    fleet.nodes[0].sigstop();
    let mut d = Daemon::start(&fleet.config, &["--now", "--interval", "1h"]);
    assert!(d.wait_for("tick started", 1, FIVE_S), "{}", d.log());
    d.signal(Signal::TERM);
    assert!(d.wait_for("letting the running tick finish", 1, FIVE_S));
    std::thread::sleep(Duration::from_millis(500));
    assert!(d.alive(), "still in its grace");
    let sent = Instant::now();
    d.signal(Signal::INT);
    let status = d.wait_exit(Duration::from_secs(5)).expect("exits");
    let took = sent.elapsed();
    fleet.nodes[0].sigcont();
    let log = d.log();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(log.contains("SIGINT while stopping: cancelling"), "{log}");
    assert!(log.contains("tick cancelled"), "{log}");
    fleet.assert_clean();
}
