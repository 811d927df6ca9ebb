//! Daemons on one Lease through the binary: one ticks and the other takes over, never both; a lost lease cancels the tick and silences the alert sinks; the leader gauge and readiness.

use super::*;

/// A remote with a seed commit and a clone + config per contender. The one spoke is
/// unreachable (its SSH identity does not exist): ticks are quick and fail at extract.
fn fleet(dir: &Path, names: &[&str]) -> Vec<PathBuf> {
    let (_, clones) = fleet_remote(dir, names.len());
    names
        .iter()
        .zip(clones)
        .map(|(name, clone)| {
            let config = dir.join(format!("{name}.yaml"));
            support::fleet::one_unreachable(&clone, dir)
                .write(&config)
                .unwrap();
            config
        })
        .collect()
}

#[test]
fn two_daemons_one_ticks_the_other_takes_over_never_both() {
    let _quiet = support::timing::exclusive();
    let emu = Emulator::new();
    let dir = tempfile::tempdir().unwrap();
    let configs = fleet(dir.path(), &["a", "b", "c"]);
    let eps: Vec<Endpoint> = (0..3).map(|_| emu.endpoint()).collect();
    let kcs: Vec<PathBuf> = eps.iter().map(|e| emu.kubeconfig(e)).collect();
    let t0 = Instant::now();
    let mut procs = vec![
        Proc::start("a", &configs[0], &kcs[0]),
        Proc::start("b", &configs[1], &kcs[1]),
    ];
    std::thread::sleep(Duration::from_secs(6));
    let ticked: Vec<usize> = procs
        .iter()
        .map(|p| p.times("tick started").len())
        .collect();
    let leader = match ticked.as_slice() {
        [n, 0] if *n >= 3 => 0,
        [0, n] if *n >= 3 => 1,
        _ => panic!(
            "exactly one ticks: {ticked:?}\n{}\n---\n{}",
            procs[0].log(),
            procs[1].log()
        ),
    };
    let follower = 1 - leader;
    assert_eq!(
        emu.holder("spokekeeper").as_deref(),
        Some(procs[leader].name.as_str())
    );

    // The leader dies (no release): the follower takes over within the lease duration and
    // a retry period.
    procs[leader].signal(Signal::KILL);
    let killed = Instant::now();
    let _ = procs[leader].child.wait();
    let first = procs[follower]
        .wait_for("tick started", 1, Duration::from_secs(20))
        .unwrap_or_else(|| panic!("no takeover:\n{}", procs[follower].log()));
    let took = first - killed;
    eprintln!("takeover after the leader was killed: {took:?}");
    // Expiry counts from when the standby last saw a renewal, which it reads every retry
    // period (2 s): the lease duration (15 s) plus that, and half a second to start a tick.
    assert!(took <= Duration::from_millis(17_500), "took {took:?}");
    assert_eq!(
        emu.holder("spokekeeper").as_deref(),
        Some(procs[follower].name.as_str())
    );

    // A third replica waits; the leader stops gracefully and releases: it takes over
    // without waiting for the lease to expire.
    procs.push(Proc::start("c", &configs[2], &kcs[2]));
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        procs[2].times("tick started").is_empty(),
        "{}",
        procs[2].log()
    );
    procs[follower].signal(Signal::TERM);
    let stopped = Instant::now();
    let c_first = procs[2]
        .wait_for("tick started", 1, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no takeover after release:\n{}", procs[2].log()));
    eprintln!(
        "takeover after the leader released: {:?}",
        c_first - stopped
    );
    assert!(
        c_first - stopped < Duration::from_secs(7),
        "{:?}",
        c_first - stopped
    );
    let status = procs[follower].child.wait().unwrap();
    assert!(status.success());
    assert!(
        procs[follower].log().contains("released the lease"),
        "{}",
        procs[follower].log()
    );

    // Someone else takes the lease: c notices at its next renewal and stops ticking.
    emu.set_holder("spokekeeper", "intruder", SystemTime::now(), 15);
    let lost = procs[2]
        .wait_for("lost the lease", 1, Duration::from_secs(7))
        .unwrap_or_else(|| panic!("{}", procs[2].log()));
    std::thread::sleep(Duration::from_secs(3));
    let late: Vec<Instant> = procs[2]
        .times("tick started")
        .into_iter()
        .filter(|t| *t > lost)
        .collect();
    assert!(
        late.is_empty(),
        "ticked after losing the lease:\n{}",
        procs[2].log()
    );

    assert_one_ticked_at_a_time(&procs, (leader, killed), t0, &emu);
}

/// Over the whole test no two processes ticked at the same time (the killed leader until
/// it was killed), and the lease was renewed all along.
fn assert_one_ticked_at_a_time(
    procs: &[Proc],
    (leader, killed): (usize, Instant),
    t0: Instant,
    emu: &Emulator,
) {
    let end = Instant::now();
    let mut all: Vec<(Instant, Instant, String)> = Vec::new();
    for (i, p) in procs.iter().enumerate() {
        let until = if i == leader { killed } else { end };
        all.extend(
            p.ticks(until)
                .into_iter()
                .map(|(s, e)| (s, e, p.name.clone())),
        );
    }
    support::logs::assert_ticks_never_overlap(all, t0, 10);
    let holders: Vec<Option<String>> = emu
        .writes("spokekeeper")
        .into_iter()
        .map(|w| w.holder)
        .collect();
    assert!(holders.len() > 5, "{holders:?}");
}

#[test]
fn losing_the_lease_cancels_the_running_tick() {
    let _quiet = support::timing::exclusive();
    let emu = Emulator::new();
    let dir = tempfile::tempdir().unwrap();
    let config = fleet(dir.path(), &["a"]).remove(0);
    // The spoke's SSH port accepts and never answers: the tick waits on it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for conn in silent.incoming().map_while(Result::ok) {
            keep.lock().unwrap().push(conn);
        }
    });
    let (identity, known_hosts) = support::fleet::ssh_client_files(dir.path());
    let yaml = fs::read_to_string(&config).unwrap();
    let spoke = yaml.split("spokes:\n").next().unwrap().to_string()
        + &format!(
            "spokes:\n  - name: hanging\n    address: 127.0.0.1\n    ssh: {{ port: {port}, identity: {}, known_hosts: {}, connect_timeout: 60s }}\n",
            identity.display(),
            known_hosts.display()
        );
    fs::write(&config, spoke).unwrap();
    let ep = emu.endpoint();
    let p = Proc::start("a", &config, &emu.kubeconfig(&ep));
    let started = p
        .wait_for("tick started", 1, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("{}", p.log()));
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !held.lock().unwrap().is_empty(),
        "the tick is waiting on SSH"
    );
    assert!(p.times("tick finished").is_empty());

    emu.set_holder("spokekeeper", "intruder", SystemTime::now(), 15);
    let cancelled = p
        .wait_for("tick cancelled", 1, Duration::from_secs(8))
        .unwrap_or_else(|| panic!("{}", p.log()));
    assert!(
        p.log()
            .contains("lost the lease: cancelling the running tick"),
        "{}",
        p.log()
    );
    assert!(cancelled - started < Duration::from_secs(8));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(p.times("tick started").len(), 1, "{}", p.log());
    assert!(p.times("tick finished").is_empty(), "{}", p.log());
}

fn http_addr(p: &Proc) -> SocketAddr {
    let line = p
        .wait_for("listen=", 1, Duration::from_secs(30))
        .map(|_| p.log())
        .unwrap_or_else(|| panic!("{}", p.log()));
    line.split("listen=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no listen address in:\n{line}"))
}

/// Issue 19, item 9 (the emulator, to cut one replica off the API): the leader gauge is
/// 1 on the leader and 0 on the standby, and a standby whose election rounds get no
/// answer turns unready, and ready again once they do.
#[test]
fn the_leader_gauge_and_a_cut_off_standby_turns_unready() {
    let emu = Emulator::new();
    let dir = tempfile::tempdir().unwrap();
    let configs = fleet(dir.path(), &["a", "b"]);
    let eps: Vec<Endpoint> = (0..2).map(|_| emu.endpoint()).collect();
    let a = Proc::start("a", &configs[0], &emu.kubeconfig(&eps[0]));
    a.wait_for("tick started", 1, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("{}", a.log()));
    let b = Proc::start("b", &configs[1], &emu.kubeconfig(&eps[1]));
    let (a_addr, b_addr) = (http_addr(&a), http_addr(&b));
    let gauge = |addr| {
        let (code, text) = support::peers::http_get(addr, "/metrics");
        assert_eq!(code, 200);
        text.lines()
            .find(|l| l.starts_with("spokekeeper_leader "))
            .unwrap_or_else(|| panic!("no spokekeeper_leader in:\n{text}"))
            .to_string()
    };
    let ready = |addr| support::peers::http_get(addr, "/readyz");
    let until = |what: &str, within: Duration, f: &dyn Fn() -> bool| {
        let end = Instant::now() + within;
        while !f() {
            assert!(
                Instant::now() < end,
                "{what}: not within {within:?}\n{}",
                b.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    until("b's standby is ready", Duration::from_secs(10), &|| {
        ready(b_addr).0 == 200
    });
    assert_eq!(gauge(a_addr), "spokekeeper_leader 1");
    assert_eq!(gauge(b_addr), "spokekeeper_leader 0");
    assert!(ready(b_addr).1.contains("standby"), "{:?}", ready(b_addr));

    eps[1].partitioned.store(true, Ordering::SeqCst);
    let cut = Instant::now();
    until("b unready while cut off", Duration::from_secs(25), &|| {
        ready(b_addr).0 == 503
    });
    assert!(
        cut.elapsed() >= Duration::from_secs(14),
        "{:?}",
        cut.elapsed()
    );
    let (_, why) = ready(b_addr);
    assert!(why.contains("last answered leader election"), "{why}");
    assert_eq!(gauge(b_addr), "spokekeeper_leader 0");

    eps[1].partitioned.store(false, Ordering::SeqCst);
    until("b ready again", Duration::from_secs(15), &|| {
        ready(b_addr).0 == 200
    });
    assert_eq!(gauge(a_addr), "spokekeeper_leader 1");
    assert!(b.times("tick started").is_empty(), "{}", b.log());
}

/// Issue 19, item 8 (the emulator, to cut the leader off the API): in the last 2 s before
/// its renew deadline a leader that cannot renew still ticks but no longer tells the
/// alert sinks (a real HTTP webhook hears nothing), and then steps down.
#[test]
fn a_leader_that_cannot_renew_stops_telling_alert_sinks_before_its_deadline() {
    let emu = Emulator::new();
    let dir = tempfile::tempdir().unwrap();
    let config = fleet(dir.path(), &["a"]).remove(0);
    let hook = RefusingWebhook::start();
    let yaml = fs::read_to_string(&config).unwrap();
    fs::write(&config, format!("{yaml}alerts:\n  webhook: {}\n", hook.url)).unwrap();
    let ep = emu.endpoint();
    let p = Proc::start("a", &config, &emu.kubeconfig(&ep));
    p.wait_for("tick finished", 2, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("{}", p.log()));
    assert!(
        p.times("not telling the alert sinks").is_empty(),
        "{}",
        p.log()
    );
    assert!(
        hook.posts().len() >= 2,
        "the leader tells the webhook at every tick while it refuses: {}",
        p.log()
    );
    ep.partitioned.store(true, Ordering::SeqCst);
    let down = p
        .wait_for("stepping down", 1, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("{}", p.log()));
    let refused = p.times("not telling the alert sinks");
    assert!(!refused.is_empty(), "{}", p.log());
    assert!(refused.iter().all(|t| *t <= down), "{}", p.log());
    assert!(
        p.log().contains("must stop within"),
        "the reason names the time left:\n{}",
        p.log()
    );
    // A tick's sends end before the next tick starts: none after the first refusal.
    std::thread::sleep(Duration::from_secs(1));
    let late: Vec<_> = hook
        .posts()
        .into_iter()
        .filter(|t| *t >= refused[0])
        .collect();
    assert!(
        late.is_empty(),
        "{} POST(s) reached the webhook in the gated window or after:\n{}",
        late.len(),
        p.log()
    );
}

/// A daemon with a webhook that hangs (each of its three tries waits out the 5 s
/// timeout) and Flux's receiver after it: the first tick's alerts take about 17 s, and
/// Flux hears of the failed spoke at their end. `partition`: the leader is cut off the
/// API while the webhook hangs. Returns the Flux POSTs' arrival times, when the
/// partition began, and the daemon's log.
fn flux_told_after_a_hung_webhook(
    partition: bool,
) -> (
    Vec<time::OffsetDateTime>,
    Option<time::OffsetDateTime>,
    String,
) {
    use spokekeeper_lab::webhook::{Mode, Receiver};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let emu = Emulator::new();
    let dir = tempfile::tempdir().unwrap();
    let config = fleet(dir.path(), &["a"]).remove(0);
    let hook = rt.block_on(Receiver::start("/hook"));
    hook.set(Mode::Hang);
    let flux = rt.block_on(Receiver::start("/"));
    // alerts.flux without hub: needs each spoke's Kustomization named.
    let yaml = fs::read_to_string(&config).unwrap().replace(
        "  - name: unreachable\n",
        "  - name: unreachable\n    kustomization: {name: unreachable}\n",
    );
    let alerts = format!(
        "alerts:\n  webhook: {}\n  flux:\n    address: {}\n",
        hook.url(),
        flux.url()
    );
    fs::write(&config, format!("{yaml}{alerts}")).unwrap();
    let ep = emu.endpoint();
    let p = Proc::start("a", &config, &emu.kubeconfig(&ep));
    let deadline = Instant::now() + Duration::from_secs(30);
    while hook.requests() == 0 {
        assert!(Instant::now() < deadline, "{}", p.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let cut = partition.then(|| {
        ep.partitioned.store(true, Ordering::SeqCst);
        time::OffsetDateTime::now_utc()
    });
    // Past the webhook's three tries and the Flux notification after them.
    std::thread::sleep(Duration::from_secs(22));
    let at = flux.posts().iter().map(|p| p.at).collect();
    (at, cut, p.log())
}

/// Issue 39, defect 6: a leader that loses the lease while its alert sinks are being
/// told sends nothing after: the sends end with its tenure, and the gate asked before
/// the Flux notification is closed. Without the cut, Flux is told when the webhook's
/// tries end.
#[test]
fn a_leader_losing_the_lease_mid_alert_sends_nothing_after() {
    let (told, _, log) = flux_told_after_a_hung_webhook(false);
    assert!(
        !told.is_empty(),
        "the leader tells Flux after the webhook:\n{log}"
    );
    let (told, cut, log) = flux_told_after_a_hung_webhook(true);
    let cut = cut.unwrap();
    let late: Vec<_> = told.iter().filter(|t| **t >= cut).collect();
    assert!(
        late.is_empty(),
        "Flux told after the lease was lost: {late:?}\n{log}"
    );
    assert!(log.contains("not telling the alert sinks"), "{log}");
    assert!(log.contains("stepping down"), "{log}");
}
