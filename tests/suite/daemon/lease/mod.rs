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

mod daemons;

mod renewal;
