//! `spokekeeper run` through the binary, against the lab: real sshd nodes, mock TLS
//! APIs, a real bare git remote. The daemon listens on 127.0.0.1:0 and logs the address.
//!
//! Fast ticks use the hidden `--interval` flag (for tests only; the schedule is cron).

use crate::support;

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::process::{Pid, Signal, kill_process};
use spokekeeper::seal::{SealedSecret, SealingKey};
use spokekeeper_lab::config::{ConfigBuilder, Spoke};
use support::daemon::rss_kib;
use support::fleet::{extract_failures, unreachable_spokes, vectors};
use support::git::{fleet_remote, git};
use support::procs::ssh_clients_for;
use support::{Lab, Node, NodeOptions};

/// A bare remote with one seed commit, and spokekeeper's clone of it.
fn fleet_repo(dir: &Path) -> (PathBuf, PathBuf) {
    let (remote, mut clones) = fleet_remote(dir, 1);
    (remote, clones.remove(0))
}

/// The fleet repo `clone`, sealing to the vectors' certificate.
fn builder(clone: &Path) -> ConfigBuilder {
    ConfigBuilder::new(clone, vectors().join("key/cert.pem"))
}

struct Fleet {
    nodes: Vec<Node>,
    _dir: tempfile::TempDir,
    remote: PathBuf,
    clone: PathBuf,
    config: PathBuf,
    // Last: the lab's runtime outlives the nodes.
    _lab: Lab,
}

impl Fleet {
    fn new(opts: &[NodeOptions]) -> Fleet {
        let lab = Lab::new();
        let nodes: Vec<Node> = opts.iter().map(|o| lab.add_node(o.clone())).collect();
        let dir = tempfile::tempdir().unwrap();
        let (remote, clone) = fleet_repo(dir.path());
        let config = dir.path().join("spokekeeper.yaml");
        let fleet = Fleet {
            nodes,
            _dir: dir,
            remote,
            clone,
            config,
            _lab: lab,
        };
        let all: Vec<usize> = (0..fleet.nodes.len()).collect();
        fleet.write_config(&all, "");
        fleet
    }

    /// A config with the nodes `spokes` (by index); `slow` connects time out after 60s.
    fn yaml(&self, spokes: &[usize], slow: &[usize]) -> String {
        builder(&self.clone)
            .spokes(spokes.iter().map(|&i| {
                let timeout = if slow.contains(&i) { "60s" } else { "5s" };
                self.nodes[i].spoke(&format!("spoke{i}"), timeout)
            }))
            .yaml()
    }

    fn write_config(&self, spokes: &[usize], extra: &str) {
        fs::write(&self.config, format!("{}{extra}", self.yaml(spokes, &[]))).unwrap();
    }

    fn remote_log(&self) -> Vec<String> {
        git(&self.remote, &["log", "--format=%s", "main"])
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn committed(&self, i: usize) -> SealedSecret {
        let text = git(
            &self.remote,
            &[
                "show",
                &format!("main:fluxcd/spoke{i}-kubeconfig-sealed.yaml"),
            ],
        );
        SealedSecret::parse(text.as_bytes()).unwrap()
    }

    /// The clone has no uncommitted change, no stray temp file, and nothing unpushed.
    fn assert_clean(&self) {
        let status = git(&self.clone, &["status", "--porcelain", "--ignored"]);
        assert!(status.is_empty(), "clone not clean:\n{status}");
        let temps = find(&self.clone, ".spokekeeper-");
        assert!(temps.is_empty(), "half-written files left: {temps:?}");
        let lock = self.clone.join(".git/index.lock");
        assert!(!lock.exists(), "git's index.lock left behind");
    }

    fn unpushed(&self) -> usize {
        git(&self.clone, &["rev-list", "--count", "origin/main..HEAD"])
            .trim()
            .parse()
            .unwrap()
    }
}

fn find(root: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with(prefix) {
                hits.push(p.clone());
            }
            if p.is_dir() && !p.ends_with(".git/objects") {
                stack.push(p);
            }
        }
    }
    hits
}

/// A running `spokekeeper run`; killed on drop.
struct Daemon {
    child: Child,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    addr: SocketAddr,
}

impl Daemon {
    fn start(config: &Path, args: &[&str]) -> Daemon {
        let mut d = Self::spawn(config, args);
        assert!(
            d.wait_for("running: serving", 1, Duration::from_secs(20)),
            "the daemon did not start:\n{}",
            d.log()
        );
        let log = d.log();
        let addr = log
            .split("listen=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no listen address in:\n{log}"));
        d.addr = addr;
        d
    }

    fn spawn(config: &Path, args: &[&str]) -> Daemon {
        let run = ["run", "--listen", "127.0.0.1:0"];
        let (child, lines) = support::daemon::spawn(config, &[&run[..], args].concat(), &[]);
        Daemon {
            child,
            lines,
            addr: "127.0.0.1:0".parse().unwrap(),
        }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32).unwrap()
    }

    fn log(&self) -> String {
        support::logs::text(&self.lines)
    }

    fn count(&self, needle: &str) -> usize {
        support::logs::count(&self.lines, needle)
    }

    /// When each line containing `needle` arrived.
    fn times(&self, needle: &str) -> Vec<Instant> {
        support::logs::times(&self.lines, needle)
    }

    fn wait_for(&self, needle: &str, count: usize, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if self.count(needle) >= count {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn signal(&self, sig: Signal) {
        kill_process(self.pid(), sig).unwrap();
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn get(&self, path: &str) -> Response {
        get(self.addr, path)
    }

    fn metrics(&self) -> String {
        let r = self.get("/metrics");
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Response {
    status: u16,
    content_type: String,
    body: String,
}

/// A plain HTTP/1.1 GET.
fn get(addr: SocketAddr, path: &str) -> Response {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type:")
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default();
    Response {
        status,
        content_type,
        body: body.to_string(),
    }
}

/// The value of the sample `series` (name and labels exactly as rendered).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn rfc3339_seconds(s: &str) -> f64 {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .unwrap()
        .unix_timestamp() as f64
}

/// Every "tick started" is followed by its end before the next one starts.
fn assert_ticks_never_overlap(d: &Daemon) {
    let lines = d.lines.lock().unwrap();
    let mut open = false;
    for (_, l) in lines.iter() {
        if l.contains("tick started") {
            assert!(!open, "a tick started while another ran");
            open = true;
        } else if l.contains("tick finished")
            || l.contains("tick cancelled")
            || l.contains("tick failed")
        {
            open = false;
        }
    }
}

const FIVE_S: Duration = Duration::from_secs(5);

#[test]
fn ticks_on_the_interval_and_the_endpoints_follow_the_committed_state() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    let mut d = Daemon::start(&fleet.config, &["--interval", "1s"]);
    // Before the first tick: alive and (within its grace) ready.
    assert_eq!(d.get("/healthz").status, 200);
    let ready = d.get("/readyz");
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert!(ready.body.contains("first tick"), "{}", ready.body);

    assert!(
        d.wait_for("tick finished", 3, Duration::from_secs(30)),
        "{}",
        d.log()
    );
    assert_ticks_never_overlap(&d);
    let starts = d.times("tick started");
    for w in starts.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap >= Duration::from_millis(800),
            "ticks 1s apart, not {gap:?}"
        );
    }
    let log = fleet.remote_log();
    assert_eq!(log.len(), 3, "seed + one commit per spoke, once: {log:?}");

    let h = d.get("/healthz");
    assert_eq!((h.status, h.body.as_str()), (200, "ok\n"));
    let r = d.get("/readyz");
    assert_eq!(r.status, 200);
    assert!(r.body.contains("last tick finished"), "{}", r.body);
    assert_eq!(d.get("/nosuch").status, 404);

    let m = d.get("/metrics");
    assert!(
        m.content_type.starts_with("application/openmetrics-text"),
        "{}",
        m.content_type
    );
    let m = m.body;
    for i in 0..2 {
        assert_spoke_series(&fleet, &m, i);
    }
    assert!(!m.contains("spokekeeper_errors_total{"), "no errors: {m}");
    let sealing = SealingKey::from_pem(
        &fs::read(vectors().join("key/cert.pem")).unwrap(),
        "cert.pem",
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    assert_eq!(
        sample(
            &m,
            "spokekeeper_sealing_certificate_not_after_timestamp_seconds"
        ),
        Some(sealing.not_after().unwrap().unix_timestamp() as f64)
    );
    let last = sample(&m, "spokekeeper_last_tick_timestamp_seconds").unwrap();
    assert!((unix_now() - last).abs() < 3.0, "last tick {last}");
    let ticks = sample(&m, "spokekeeper_tick_duration_seconds_count").unwrap();
    assert!(ticks >= 3.0, "{m}");

    // spoke0's API goes down: the next tick reports it down and counts the error.
    fleet.nodes[0].stop_api();
    let seen = d.count("tick finished");
    assert!(d.wait_for("tick finished", seen + 2, Duration::from_secs(20)));
    let m = d.metrics();
    assert_eq!(
        sample(&m, "spokekeeper_spoke_up{spoke=\"spoke0\"}"),
        Some(0.0),
        "{m}"
    );
    assert_eq!(
        sample(&m, "spokekeeper_spoke_up{spoke=\"spoke1\"}"),
        Some(1.0)
    );
    assert!(
        sample(
            &m,
            "spokekeeper_errors_total{spoke=\"spoke0\",stage=\"probe\"}"
        )
        .is_some_and(|v| v >= 1.0),
        "{m}"
    );
    assert_eq!(fleet.remote_log().len(), 3, "nothing committed for it");

    let sent = Instant::now();
    d.signal(Signal::TERM);
    let status = d
        .wait_exit(Duration::from_secs(10))
        .expect("exits within 10s");
    assert!(status.success(), "{status:?}\n{}", d.log());
    assert!(sent.elapsed() < Duration::from_secs(10));
    fleet.assert_clean();
    assert_eq!(fleet.unpushed(), 0);
}

/// Spoke `i`'s series after its first rotation: the committed certificates' expiry, up,
/// one initial rotation.
fn assert_spoke_series(fleet: &Fleet, m: &str, i: usize) {
    let committed = fleet.committed(i);
    let not_after = rfc3339_seconds(&committed.annotations["spokekeeper.io/client-cert-not-after"]);
    assert_eq!(
        sample(
            m,
            &format!(
                "spokekeeper_certificate_not_after_timestamp_seconds{{spoke=\"spoke{i}\",cert=\"client\"}}"
            )
        ),
        Some(not_after),
        "{m}"
    );
    let series = |cert: &str| {
        sample(
            m,
            &format!(
                "spokekeeper_certificate_not_after_timestamp_seconds{{spoke=\"spoke{i}\",cert=\"{cert}\"}}"
            ),
        )
    };
    let ca = rfc3339_seconds(&committed.annotations["spokekeeper.io/ca-not-after"]);
    assert_eq!(series("ca"), Some(ca), "{m}");
    assert!(series("serving").is_some_and(|t| t > unix_now()), "{m}");
    assert!(series("sealing").is_some_and(|t| t > unix_now()), "{m}");
    assert_eq!(
        sample(m, &format!("spokekeeper_spoke_up{{spoke=\"spoke{i}\"}}")),
        Some(1.0)
    );
    assert_eq!(
        sample(
            m,
            &format!("spokekeeper_rotations_total{{spoke=\"spoke{i}\",reason=\"initial\"}}")
        ),
        Some(1.0),
        "one rotation, then healthy ticks: {m}"
    );
}

#[test]
fn startup_errors_name_what_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (_, clone) = fleet_repo(dir.path());
    let config = dir.path().join("spokekeeper.yaml");
    let with_spoke = builder(&clone).spoke(Spoke::new("a", "127.255.0.1"));
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
            .arg("--config")
            .arg(&config)
            .arg("run")
            .args(args)
            .output()
            .unwrap()
    };
    with_spoke
        .clone()
        .top("schedule: \"*/15 * *\"\n")
        .write(&config)
        .unwrap();
    let out = run(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(config.to_str().unwrap())
            && err.contains("\"*/15 * *\"")
            && err.contains("@hourly"),
        "{err}"
    );

    // The listen address is taken.
    with_spoke.write(&config).unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run(&["--listen", &addr]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&addr) && err.contains("--listen"), "{err}");

    // A zero test interval is refused rather than spinning.
    let out = run(&["--interval", "0s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("longer than 0s"), "{err}");
}

#[test]
fn memory_with_100_spokes_idle_and_during_a_tick() {
    let dir = support::scratch_dir();
    let (_, clone) = fleet_repo(dir.path());
    // 127.255.0.0/16 is outside the lab's 127.0.0.0/16.
    let config = dir.path().join("spokekeeper.yaml");
    builder(&clone)
        .spokes(unreachable_spokes(dir.path(), 100, "127.255"))
        .write(&config)
        .unwrap();

    let d = Daemon::start(&config, &["--interval", "4s"]);
    let pid = d.child.id();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(d.count("tick started"), 0, "still idle");
    let (idle, _) = rss_kib(pid);
    let mut during = 0;
    let end = Instant::now() + Duration::from_secs(60);
    while d.count("tick finished") == 0 && Instant::now() < end {
        if d.count("tick started") > 0 {
            during = during.max(rss_kib(pid).0);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(d.count("tick finished"), 1, "{}", d.log());
    let (_, peak) = rss_kib(pid);
    std::thread::sleep(Duration::from_secs(1));
    let (after, _) = rss_kib(pid);
    let m = d.metrics();
    assert_eq!(extract_failures(&m), 100, "every spoke was worked on: {m}");
    eprintln!(
        "spokekeeper run, 100 spokes (debug build): idle VmRSS {idle} KiB; during the tick VmRSS up to {during} KiB, VmHWM {peak} KiB; after it VmRSS {after} KiB"
    );
    assert!(idle < 48 * 1024, "idle RSS {idle} KiB");
    assert!(peak < 128 * 1024, "peak RSS {peak} KiB");
}

mod signals;

mod ticks;
