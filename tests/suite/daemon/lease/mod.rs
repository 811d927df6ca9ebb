//! Leader election against an emulated Kubernetes API that implements Leases with real
//! optimistic concurrency: in-process contenders first, then two `spokekeeper run
//! --leader-elect` processes, recording who ticked when.

use crate::support;

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hyper::StatusCode;
use rustix::process::{Pid, Signal, kill_process};
use serde_json::Value;
use spokekeeper::daemon::lease::{self, LeaseLock, Observed, Timing};
use spokekeeper_lab::lease::{Emulator, Endpoint, NS};
use support::git::fleet_remote;
use tokio::sync::watch;

// ---------------------------------------------------------------------------------------
// In-process contenders.

const LONG: Duration = Duration::from_secs(15);

fn contender(emu: &Emulator, lease: &str, id: &str, duration: Duration) -> (Endpoint, LeaseLock) {
    let ep = emu.endpoint();
    let lock = LeaseLock::new(support::lease::client(emu, &ep), NS, lease, id, duration);
    (ep, lock)
}

#[test]
fn the_first_contender_creates_and_renews_the_other_sees_it_held() {
    let emu = Emulator::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_ea, a) = contender(&emu, "l1", "a", LONG);
    let (_eb, b) = contender(&emu, "l1", "b", LONG);
    // Expiry is on the monotonic clock (issue 19, item 6).
    let before = tokio::time::Instant::now();
    assert_eq!(
        rt.block_on(a.try_acquire_or_renew()).unwrap(),
        Observed::Leader
    );
    let created = emu.lease("l1").unwrap();
    assert_eq!(created["spec"]["holderIdentity"], "a");
    assert_eq!(created["spec"]["leaseDurationSeconds"], 15);
    assert_eq!(created["spec"]["leaseTransitions"], 0);
    match rt.block_on(b.try_acquire_or_renew()).unwrap() {
        Observed::Held { holder, expires } => {
            assert_eq!(holder, "a");
            let left = expires.duration_since(before);
            assert!(
                left > Duration::from_secs(14) && left <= Duration::from_secs(16),
                "{left:?}"
            );
        }
        other => panic!("b must see a's lease: {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        rt.block_on(a.try_acquire_or_renew()).unwrap(),
        Observed::Leader
    );
    let renewed = emu.lease("l1").unwrap();
    assert_eq!(
        renewed["spec"]["acquireTime"],
        created["spec"]["acquireTime"]
    );
    assert_ne!(renewed["spec"]["renewTime"], created["spec"]["renewTime"]);
    let rv = |l: &Value| {
        l["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(rv(&renewed) > rv(&created));
    assert_eq!(emu.writes("l1").len(), 2, "b wrote nothing");
}

#[test]
fn racing_contenders_one_wins_by_resource_version() {
    let emu = Emulator::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Both read before either writes.
    emu.shared.get_delay_ms.store(150, Ordering::SeqCst);
    for round in 0..3 {
        let name = format!("race{round}");
        let (_ea, a) = contender(&emu, &name, "a", LONG);
        let (_eb, b) = contender(&emu, &name, "b", LONG);
        // Nothing there: both create, the API answers one of them AlreadyExists.
        let (ra, rb) =
            rt.block_on(async { tokio::join!(a.try_acquire_or_renew(), b.try_acquire_or_renew()) });
        let outcomes = [ra.unwrap(), rb.unwrap()];
        assert_eq!(
            outcomes.iter().filter(|o| **o == Observed::Leader).count(),
            1,
            "{outcomes:?}"
        );
        assert!(outcomes.contains(&Observed::Lost), "{outcomes:?}");
        let winner = if outcomes[0] == Observed::Leader {
            "a"
        } else {
            "b"
        };
        assert_eq!(emu.holder(&name).as_deref(), Some(winner));

        // Expired (unchanged for its 1 s since both saw it): both update the same
        // resourceVersion, the API answers one 409 Conflict.
        emu.set_holder(&name, "gone", SystemTime::now(), 1);
        let (ra, rb) =
            rt.block_on(async { tokio::join!(a.try_acquire_or_renew(), b.try_acquire_or_renew()) });
        assert!(matches!(
            (ra.unwrap(), rb.unwrap()),
            (Observed::Held { .. }, Observed::Held { .. })
        ));
        std::thread::sleep(Duration::from_millis(1100));
        let (ra, rb) =
            rt.block_on(async { tokio::join!(a.try_acquire_or_renew(), b.try_acquire_or_renew()) });
        let outcomes = [ra.unwrap(), rb.unwrap()];
        assert_eq!(
            outcomes.iter().filter(|o| **o == Observed::Leader).count(),
            1,
            "{outcomes:?}"
        );
        assert!(outcomes.contains(&Observed::Lost), "{outcomes:?}");
        let winner = if outcomes[0] == Observed::Leader {
            "a"
        } else {
            "b"
        };
        let lease = emu.lease(&name).unwrap();
        assert_eq!(lease["spec"]["holderIdentity"], winner);
        assert_eq!(lease["spec"]["leaseTransitions"], 1, "one takeover");
    }
}

#[test]
fn an_expired_lease_is_taken_over_and_a_released_one_at_once() {
    let emu = Emulator::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_ea, a) = contender(&emu, "l2", "a", Duration::from_secs(1));
    let (_eb, b) = contender(&emu, "l2", "b", Duration::from_secs(1));
    assert_eq!(
        rt.block_on(a.try_acquire_or_renew()).unwrap(),
        Observed::Leader
    );
    assert!(matches!(
        rt.block_on(b.try_acquire_or_renew()).unwrap(),
        Observed::Held { .. }
    ));
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        rt.block_on(b.try_acquire_or_renew()).unwrap(),
        Observed::Leader
    );
    assert_eq!(emu.lease("l2").unwrap()["spec"]["leaseTransitions"], 1);
    // a comes back: b holds it now.
    match rt.block_on(a.try_acquire_or_renew()).unwrap() {
        Observed::Held { holder, .. } => assert_eq!(holder, "b"),
        other => panic!("{other:?}"),
    }
    assert!(
        !rt.block_on(a.release()).unwrap(),
        "a cannot release b's lease"
    );
    assert!(rt.block_on(b.release()).unwrap());
    assert_eq!(emu.holder("l2"), None);
    assert_eq!(
        rt.block_on(a.try_acquire_or_renew()).unwrap(),
        Observed::Leader
    );
    assert_eq!(emu.holder("l2").as_deref(), Some("a"));

    // Create, read, update: all within what the Helm chart grants (lease::ACCESS).
    let requests = emu.shared.requests.lock().unwrap().clone();
    let mut verbs = std::collections::BTreeSet::new();
    for (method, path) in &requests {
        let (group, resource, verb) = spokekeeper_lab::hub::rbac_attributes(method, path)
            .unwrap_or_else(|| panic!("{method} {path}"));
        assert!(
            lease::ACCESS
                .iter()
                .any(|a| a.group == group && a.resource == resource && a.verbs.contains(&verb)),
            "{method} {path}: {verb} {group}/{resource} is not in lease::ACCESS"
        );
        verbs.insert(verb);
    }
    assert_eq!(
        verbs.into_iter().collect::<Vec<_>>(),
        ["create", "get", "update"]
    );
}

/// Samples two contenders' leadership every few milliseconds. A contender whose
/// election was stopped (its sender dropped) does not lead, whatever it said last.
struct Watcher {
    rx: Arc<Mutex<Vec<watch::Receiver<bool>>>>,
    samples: Arc<Mutex<Vec<(Instant, bool, bool)>>>,
    stop: Arc<AtomicBool>,
}

impl Watcher {
    fn start(a: watch::Receiver<bool>, b: watch::Receiver<bool>) -> Watcher {
        let rx = Arc::new(Mutex::new(vec![a, b]));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s, st) = (rx.clone(), samples.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let leads = {
                    let r = r.lock().unwrap();
                    let lead = |x: &watch::Receiver<bool>| x.has_changed().is_ok() && *x.borrow();
                    (lead(&r[0]), lead(&r[1]))
                };
                s.lock().unwrap().push((Instant::now(), leads.0, leads.1));
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        Watcher { rx, samples, stop }
    }

    /// Contender `i` restarted with a new election.
    fn replace(&self, i: usize, rx: watch::Receiver<bool>) {
        self.rx.lock().unwrap()[i] = rx;
    }

    fn now(&self) -> (bool, bool) {
        let s = self.samples.lock().unwrap();
        s.last().map_or((false, false), |(_, a, b)| (*a, *b))
    }

    /// When `pred` first held at or after `from`.
    fn first(&self, from: Instant, pred: impl Fn(bool, bool) -> bool) -> Option<Instant> {
        let s = self.samples.lock().unwrap();
        s.iter()
            .find(|(t, a, b)| *t >= from && pred(*a, *b))
            .map(|(t, _, _)| *t)
    }

    fn wait(&self, timeout: Duration, pred: impl Fn(bool, bool) -> bool) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            let (a, b) = self.now();
            if pred(a, b) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    fn never_both(&self) {
        let s = self.samples.lock().unwrap();
        assert!(s.len() > 1000, "sampled {} times", s.len());
        assert!(!s.iter().any(|(_, a, b)| *a && *b), "two leaders at once");
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[test]
fn elections_never_have_two_leaders_through_death_and_partition() {
    let _quiet = support::timing::exclusive();
    let timing = Timing {
        lease_duration: Duration::from_secs(3),
        renew_every: Duration::from_secs(1),
        renew_deadline: Duration::from_secs(2),
        retry_every: Duration::from_millis(500),
    };
    let emu = Emulator::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ids = ["a", "b"];
    let contenders: Vec<(Endpoint, Arc<LeaseLock>)> = ids
        .iter()
        .map(|id| {
            let (ep, lock) = contender(&emu, "l3", id, timing.lease_duration);
            (ep, Arc::new(lock))
        })
        .collect();
    let (ta, ra) = watch::channel(false);
    let (tb, rb) = watch::channel(false);
    let watcher = Watcher::start(ra, rb);
    let mut tasks = vec![
        rt.spawn(lease::elect(contenders[0].1.clone(), timing, ta)),
        rt.spawn(lease::elect(contenders[1].1.clone(), timing, tb)),
    ];
    assert!(
        watcher.wait(Duration::from_secs(2), |a, b| a ^ b),
        "one leader"
    );
    std::thread::sleep(Duration::from_secs(3));
    let (a_leads, b_leads) = watcher.now();
    assert!(
        a_leads ^ b_leads,
        "still exactly one after several renewals"
    );
    let leads = |i: usize| move |a: bool, b: bool| if i == 0 { a } else { b };

    // The leader dies without releasing: the other takes over within the lease duration.
    let (dead, survivor) = if a_leads { (0, 1) } else { (1, 0) };
    tasks[dead].abort();
    let died = Instant::now();
    assert!(
        watcher.wait(Duration::from_secs(5), leads(survivor)),
        "takeover"
    );
    let took = watcher.first(died, leads(survivor)).unwrap() - died;
    assert!(
        took <= timing.lease_duration + Duration::from_millis(500),
        "took {took:?}"
    );

    // The dead one comes back as a standby and the survivor keeps the lease.
    let (tx, rx) = watch::channel(false);
    watcher.replace(dead, rx);
    tasks[dead] = rt.spawn(lease::elect(contenders[dead].1.clone(), timing, tx));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(emu.holder("l3").as_deref(), Some(ids[survivor]));

    // The leader is cut off from the API: it steps down within the renew deadline, and
    // the standby takes over only once the lease expired.
    contenders[survivor]
        .0
        .partitioned
        .store(true, Ordering::SeqCst);
    let cut = Instant::now();
    let survivor_down = move |a: bool, b: bool| !leads(survivor)(a, b);
    assert!(watcher.wait(Duration::from_secs(4), survivor_down));
    let down = watcher.first(cut, survivor_down).unwrap() - cut;
    assert!(
        down <= timing.renew_deadline + Duration::from_millis(500),
        "stepped down after {down:?}"
    );
    assert!(
        watcher.wait(Duration::from_secs(6), leads(dead)),
        "the standby took over"
    );
    let up = watcher.first(cut, leads(dead)).unwrap() - cut;
    assert!(
        up > down,
        "the standby led only after the cut-off leader stopped"
    );
    assert_eq!(emu.holder("l3").as_deref(), Some(ids[dead]));
    contenders[survivor]
        .0
        .partitioned
        .store(false, Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !leads(survivor)(watcher.now().0, watcher.now().1),
        "the healed one stays standby"
    );
    watcher.never_both();
    for t in &tasks {
        t.abort();
    }
    rt.shutdown_background();
}

// ---------------------------------------------------------------------------------------
// Two daemons.

struct Proc {
    name: String,
    child: Child,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Proc {
    fn start(name: &str, config: &Path, kubeconfig: &Path) -> Proc {
        let (child, lines) =
            support::daemon::spawn_replica(config, kubeconfig, (name, NS), "1s", &[]);
        Proc {
            name: name.into(),
            child,
            lines,
        }
    }

    fn times(&self, needle: &str) -> Vec<Instant> {
        support::logs::times(&self.lines, needle)
    }

    fn log(&self) -> String {
        support::logs::text(&self.lines)
    }

    fn wait_for(&self, needle: &str, count: usize, timeout: Duration) -> Option<Instant> {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if let Some(t) = self.times(needle).get(count - 1) {
                return Some(*t);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    fn signal(&self, sig: Signal) {
        kill_process(Pid::from_raw(self.child.id() as i32).unwrap(), sig).unwrap();
    }

    /// Tick intervals [start, end]; a tick still open ends at `until`.
    fn ticks(&self, until: Instant) -> Vec<(Instant, Instant)> {
        support::logs::tick_spans(&self.lines, until)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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

    // Over the whole test: no two processes ticked at the same time.
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

/// Issue 19, item 6: expiry is judged by when this replica saw the record change, on its
/// own monotonic clock, whatever the holder's renewTime says (its clock may be skewed).
#[test]
fn expiry_ignores_the_holders_renew_time() {
    let emu = Emulator::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_eb, b) = contender(&emu, "skew", "b", Duration::from_secs(2));
    // A live holder whose clock is 10 minutes behind: not expired to us.
    emu.set_holder(
        "skew",
        "behind",
        SystemTime::now() - Duration::from_secs(600),
        2,
    );
    assert!(
        matches!(rt.block_on(b.try_acquire_or_renew()).unwrap(), Observed::Held { ref holder, .. } if holder == "behind")
    );
    // It renews (a new record): held again for a whole lease duration from now.
    std::thread::sleep(Duration::from_millis(1500));
    emu.set_holder(
        "skew",
        "behind",
        SystemTime::now() - Duration::from_secs(600),
        2,
    );
    std::thread::sleep(Duration::from_millis(1000));
    assert!(matches!(
        rt.block_on(b.try_acquire_or_renew()).unwrap(),
        Observed::Held { .. }
    ));
    // A dead holder whose clock was an hour ahead: taken once the record stood still
    // for its lease duration.
    emu.set_holder(
        "skew",
        "ahead",
        SystemTime::now() + Duration::from_secs(3600),
        2,
    );
    assert!(matches!(
        rt.block_on(b.try_acquire_or_renew()).unwrap(),
        Observed::Held { .. }
    ));
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(
        rt.block_on(b.try_acquire_or_renew()).unwrap(),
        Observed::Leader
    );
    assert_eq!(emu.holder("skew").as_deref(), Some("b"));
}

/// Issue 19, item 7 (emulated: the real API server answers 500 or a bare 409 on no
/// cue): a failed renewal is retried within the deadline, and a 409 that shows no other
/// holder is read again; neither steps the leader down.
#[test]
fn failed_renewals_are_retried_and_a_conflict_is_read_again_while_leading() {
    let timing = Timing {
        lease_duration: Duration::from_secs(6),
        renew_every: Duration::from_secs(2),
        renew_deadline: Duration::from_secs(4),
        retry_every: Duration::from_millis(500),
    };
    let emu = Emulator::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_ea, a) = contender(&emu, "retry", "a", timing.lease_duration);
    let (_eb, b) = contender(&emu, "retry", "b", timing.lease_duration);
    let (ta, ra) = watch::channel(false);
    let (tb, rb) = watch::channel(false);
    let watcher = Watcher::start(ra, rb);
    let task_a = rt.spawn(lease::elect(Arc::new(a), timing, ta));
    assert!(watcher.wait(Duration::from_secs(2), |a, _| a), "a leads");
    let task_b = rt.spawn(lease::elect(Arc::new(b), timing, tb));
    let leading = Instant::now();
    let writes = |emu: &Emulator| emu.writes("retry").len();

    // Two failed renewals in a row: the third attempt, 1 s after the first, succeeds.
    std::thread::sleep(Duration::from_millis(500));
    emu.shared
        .put_faults
        .lock()
        .unwrap()
        .extend([StatusCode::INTERNAL_SERVER_ERROR; 2]);
    let before = writes(&emu);
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        emu.shared.put_faults.lock().unwrap().is_empty(),
        "both faults were hit"
    );
    assert!(writes(&emu) > before, "renewed after the failures");

    // A conflict from a metadata-only write: re-read and renewed, still leading.
    emu.shared
        .put_faults
        .lock()
        .unwrap()
        .push(StatusCode::CONFLICT);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        emu.shared.put_faults.lock().unwrap().is_empty(),
        "the conflict was hit"
    );
    assert_eq!(emu.holder("retry").as_deref(), Some("a"));
    let s = watcher.samples.lock().unwrap();
    let after: Vec<_> = s.iter().filter(|(t, _, _)| *t >= leading).collect();
    assert!(after.len() > 1000, "sampled {} times", after.len());
    assert!(
        after.iter().all(|(_, a, b)| *a && !*b),
        "a stepped down, or b led"
    );
    drop(s);
    task_a.abort();
    task_b.abort();
    rt.shutdown_background();
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

/// A webhook sink on 127.0.0.1 that answers 400 to every POST and records when each
/// arrived. A 400 is not retried and does not count as delivered, so the daemon sends the
/// same changes again at every evaluation it tells the sinks about.
struct RefusingWebhook {
    url: String,
    posts: Arc<Mutex<Vec<Instant>>>,
}

impl RefusingWebhook {
    fn start() -> RefusingWebhook {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let posts = Arc::new(Mutex::new(Vec::new()));
        let seen = posts.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let at = Instant::now();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut length = 0;
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    line.clear();
                }
                let _ = reader.take(length).read_to_end(&mut Vec::new());
                seen.lock().unwrap().push(at);
                let _ = stream.write_all(
                    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            }
        });
        RefusingWebhook { url, posts }
    }

    fn posts(&self) -> Vec<Instant> {
        self.posts.lock().unwrap().clone()
    }
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
