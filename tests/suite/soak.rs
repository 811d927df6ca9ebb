//! Soak (opt-in: `scripts/soak`, or `cargo test --release --test suite -- --ignored soak::`):
//! `spokekeeper run` with minted credentials, logging at debug, ticking every few seconds
//! over a large lab fleet while the nodes are rebuilt, renew their client certificates,
//! lose their API or sshd, wedge, and while someone else pushes to the fleet repo. At the
//! end every spoke's committed credential unseals and authenticates, no client key (any
//! admin key a node ever had, any minted key committed, read back by unsealing every
//! SealedSecret in the repos' objects) is in the daemon's log, the fleet's files or git
//! objects, or the daemon's TMPDIR, and the daemon's RSS did not grow. A short variant of
//! the same checks runs with the suite.
//!
//! SOAK_SPOKES (200), SOAK_MINUTES (30), SOAK_TICK_SECS (5), SOAK_SEED (from the clock),
//! SOAK_LOG (a file for the daemon's log).

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::NodeOptions;
use support::fleet::{Fleet, Openers, authenticates, sealed_keys, vectors_recovery_keys};
use support::git::{clone, git};
use support::leak::Needles;

fn env_or(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// xorshift64*: reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The daemon; killed and reaped on drop.
struct Daemon {
    child: Child,
    lines: support::logs::Lines,
}

/// Minted credentials (the default ttl and renew_before), on top of `extra`.
const MINTED: &str = "credential:\n  mode: minted\n";

impl Daemon {
    /// `spokekeeper run` over `fleet`, a tick every `tick_secs`, logging at debug (every
    /// crate, as an operator sets `SPOKEKEEPER_LOG=debug`), with its own TMPDIR
    /// (`daemon-tmp` in the fleet's directory, so that it is scanned with the fleet).
    fn start(fleet: &Fleet, tick_secs: u64) -> Daemon {
        let daemon_tmp = fleet.dir.path().join("daemon-tmp");
        std::fs::create_dir(&daemon_tmp).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
            .arg("--config")
            .arg(&fleet.config)
            .args(["run", "--now", "--listen", "127.0.0.1:0", "--interval"])
            .arg(format!("{tick_secs}s"))
            .env("SPOKEKEEPER_LOG", "debug")
            .env("NO_COLOR", "1")
            .env("TMPDIR", &daemon_tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = support::logs::capture_stderr(&mut child);
        Daemon { child, lines }
    }

    /// Everything it logged so far.
    fn log(&self) -> String {
        let lines = self.lines.lock().unwrap();
        let text: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
        text.join("\n")
    }

    fn count(&self, needle: &str) -> usize {
        support::logs::count(&self.lines, needle)
    }

    fn rss_kib(&self) -> Option<u64> {
        support::status_kib(self.child.id(), "VmRSS:")
    }

    fn wait_ticks(&self, more: usize, timeout: Duration) -> bool {
        let target = self.count("tick finished") + more;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.count("tick finished") >= target {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    ApiDown,
    SshdDown,
    SshdWedged,
}

/// Someone else's commit on the remote, racing the daemon's push.
fn push_race(racer: &Path, n: u64) -> bool {
    let run = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(racer)
            .args(args)
            .env("GIT_AUTHOR_NAME", "racer")
            .env("GIT_AUTHOR_EMAIL", "r@r")
            .env("GIT_COMMITTER_NAME", "racer")
            .env("GIT_COMMITTER_EMAIL", "r@r")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !run(&["pull", "--quiet", "--rebase", "origin", "main"]) {
        return false;
    }
    std::fs::create_dir_all(racer.join("other")).unwrap();
    std::fs::write(
        racer.join(format!("other/{}.txt", n % 20)),
        format!("{n}\n"),
    )
    .unwrap();
    run(&["add", "other"])
        && run(&["commit", "--quiet", "-m", "unrelated change"])
        && run(&["push", "--quiet", "origin", "HEAD:main"])
}

/// What the chaos loop left broken: spoke i, its fault, until when.
type Broken = BTreeMap<usize, (Fault, Instant)>;

/// Brings spoke i back from `fault`.
fn heal(fleet: &mut Fleet, i: usize, fault: Fault) {
    match fault {
        Fault::ApiDown => fleet.nodes[i].start_api(),
        Fault::SshdDown => fleet.nodes[i].start_sshd(),
        Fault::SshdWedged => fleet.nodes[i].sigcont(),
    }
}

/// The soak's fleet while the daemon runs: what it broke, every admin key a node had,
/// and the racer's clone.
struct Chaos {
    fleet: Fleet,
    rng: Rng,
    broken: Broken,
    needles: Needles,
    racer: std::path::PathBuf,
}

impl Chaos {
    /// Heals what is due.
    fn heal_due(&mut self) {
        let now = Instant::now();
        let due: Vec<usize> = self
            .broken
            .iter()
            .filter(|(_, (_, until))| *until <= now)
            .map(|(i, _)| *i)
            .collect();
        for i in due {
            heal(&mut self.fleet, i, self.broken.remove(&i).unwrap().0);
        }
    }

    /// Breaks spoke i for `hold`: its API or sshd stopped, or sshd wedged.
    fn break_one(&mut self, i: usize, hold: Duration) -> &'static str {
        let node = &mut self.fleet.nodes[i];
        let fault = match self.rng.below(3) {
            0 => {
                node.stop_api();
                Fault::ApiDown
            }
            1 => {
                node.stop_sshd();
                Fault::SshdDown
            }
            _ => {
                node.sigstop();
                Fault::SshdWedged
            }
        };
        self.broken.insert(i, (fault, Instant::now() + hold));
        match fault {
            Fault::ApiDown => "API outage",
            Fault::SshdDown => "sshd outage",
            Fault::SshdWedged => "sshd wedged",
        }
    }

    /// One random action (the `n`th) on a random spoke: a rebuild, a renewed client
    /// certificate, an outage, or a push racing the daemon's.
    fn act(&mut self, n: u64) -> &'static str {
        let spokes = self.fleet.nodes.len();
        let i = self.rng.below(spokes as u64) as usize;
        let hold = Duration::from_secs(5 + self.rng.below(40));
        match self.rng.below(100) {
            0..30 => {
                self.fleet.nodes[i].rebuild();
                self.needles
                    .add_key(&self.fleet.nodes[i].parts().client_key_pem);
                "rebuild"
            }
            30..45 => {
                self.fleet.nodes[i].renew_client_cert(365);
                "client cert renewed"
            }
            45..75 if !self.broken.contains_key(&i) && self.broken.len() < spokes / 10 + 1 => {
                self.break_one(i, hold)
            }
            45..75 => "skipped (node already broken)",
            _ => {
                if push_race(&self.racer, n) {
                    "push race"
                } else {
                    "push race (racer lost)"
                }
            }
        }
    }

    /// Acts until `end`, sampling the daemon's RSS every 10 s; what it did, and the
    /// samples (seconds since the start, KiB). Then heals everything.
    fn run(
        &mut self,
        daemon: &Daemon,
        end: Instant,
    ) -> (BTreeMap<&'static str, usize>, Vec<(f64, u64)>) {
        let mut actions = BTreeMap::new();
        let mut rss: Vec<(f64, u64)> = Vec::new();
        let chaos_start = Instant::now();
        let mut next_sample = Instant::now();
        let mut n = 0u64;
        while Instant::now() < end {
            n += 1;
            self.heal_due();
            *actions.entry(self.act(n)).or_insert(0) += 1;
            if Instant::now() >= next_sample {
                if let Some(kib) = daemon.rss_kib() {
                    rss.push((chaos_start.elapsed().as_secs_f64(), kib));
                }
                next_sample += Duration::from_secs(10);
            }
            std::thread::sleep(Duration::from_millis(500 + self.rng.below(2500)));
        }
        for (i, (fault, _)) in std::mem::take(&mut self.broken) {
            heal(&mut self.fleet, i, fault);
        }
        (actions, rss)
    }

    /// No key in plaintext anywhere: every key any node ever had and every minted key
    /// committed (in any object of the remote or a clone, the racer's included), looked
    /// for in the daemon's log, the fleet directory (the remote, the clones, both
    /// TMPDIRs) and every git object. (admin keys, sealed kubeconfigs read.)
    fn assert_no_key_leaked(&mut self, log: &str) -> (usize, usize) {
        let recovery = vectors_recovery_keys();
        let admin_keys = self.needles.keys();
        let fleet = &self.fleet;
        let sealed: usize = [&fleet.remote, &fleet.clone, &self.racer]
            .iter()
            .map(|repo| {
                sealed_keys(
                    &mut self.needles,
                    repo,
                    &Openers {
                        recovery: &recovery,
                        age: None,
                    },
                )
            })
            .sum();
        let needles = &self.needles;
        assert!(
            needles.keys() > admin_keys + fleet.nodes.len(),
            "{} keys, {admin_keys} of them admin keys: the minted keys were not all read",
            needles.keys()
        );
        needles.assert_absent("the daemon's log", log.as_bytes());
        fleet.assert_no_plaintext_of(needles);
        let racer_hits = needles.git_objects_containing(&self.racer);
        assert!(
            racer_hits.is_empty(),
            "plaintext key material in the racer's clone: {racer_hits:?}"
        );
        (admin_keys, sealed)
    }
}

/// The median KiB of the first and of the last quarter of the samples, and the largest.
fn rss_quarters(rss: &[(f64, u64)]) -> (u64, u64, u64) {
    let q = (rss.len() / 4).max(1);
    let median = |s: &[(f64, u64)]| {
        let mut v: Vec<u64> = s.iter().map(|(_, k)| *k).collect();
        v.sort();
        v[v.len() / 2]
    };
    let max = rss.iter().map(|(_, k)| *k).max().unwrap_or(0);
    (median(&rss[..q]), median(&rss[rss.len() - q..]), max)
}

/// The remote's commits on main by author, and in all.
fn commits_by_author(remote: &Path) -> BTreeMap<&'static str, usize> {
    let authors = git(remote, &["log", "--format=%an", "main"]);
    let by = |who: &str| authors.lines().filter(|a| *a == who).count();
    let mut commits = BTreeMap::new();
    for who in ["spokekeeper", "racer", "t"] {
        commits.insert(who, by(who));
    }
    commits.insert("total", authors.lines().count());
    commits
}

/// The final `rotate --all`'s actions, counted.
fn final_actions(fleet: &Fleet) -> BTreeMap<String, usize> {
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let mut final_actions: BTreeMap<String, usize> = BTreeMap::new();
    for s in report["spokes"].as_array().unwrap() {
        *final_actions
            .entry(s["action"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    final_actions
}

/// A fleet of `spokes` with minted credentials, the racer's clone beside it, and each
/// node's first admin key.
fn soak_fleet(spokes: usize, seed: u64) -> Chaos {
    let fleet = Fleet::with(
        &vec![NodeOptions::default(); spokes],
        &format!("verify_every: 5m\nrenew_before: 30d\n{MINTED}"),
    );
    let mut needles = Needles::new();
    for node in &fleet.nodes {
        needles.add_key(&node.parts().client_key_pem);
    }
    let racer = fleet.dir.path().join("racer");
    clone(&fleet.remote, &racer);
    Chaos {
        fleet,
        rng: Rng(seed),
        broken: BTreeMap::new(),
        needles,
        racer,
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "soak: minutes long; run scripts/soak"]
async fn soak() {
    let _heavy = support::timing::heavy();
    let spokes = env_or("SOAK_SPOKES", 200) as usize;
    let minutes = env_or("SOAK_MINUTES", 30);
    let tick_secs = env_or("SOAK_TICK_SECS", 5);
    let seed = env_or(
        "SOAK_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1,
    );
    println!("soak: {spokes} spokes, {minutes} min, a tick every {tick_secs}s, SOAK_SEED={seed}");
    let started = Instant::now();
    let mut chaos = soak_fleet(spokes, seed);
    println!("soak: lab up in {:.0}s", started.elapsed().as_secs_f64());

    let daemon = Daemon::start(&chaos.fleet, tick_secs);
    assert!(
        daemon.wait_ticks(1, Duration::from_secs(600)),
        "the first tick never finished"
    );
    println!(
        "soak: first tick (every spoke rotated) done at {:.0}s",
        started.elapsed().as_secs_f64()
    );
    let end = Instant::now() + Duration::from_secs(minutes * 60);
    let (actions, rss) = chaos.run(&daemon, end);

    // Let the daemon catch up.
    assert!(
        daemon.wait_ticks(2, Duration::from_secs(600)),
        "the daemon stopped ticking"
    );
    let ticks = daemon.count("tick finished");
    // The ticker's lines only: an alert resolving reads "rotation: rotated spoke=" too.
    let rotated = daemon.count("daemon::ticker: rotated spoke=");
    let spoke_failures = daemon.count("daemon::ticker: spoke failed spoke=");
    let repo_warnings = daemon.count("fleet repo");
    let panics = daemon.count("panicked");
    let debug_lines = daemon.count(" DEBUG ");
    let log = daemon.log();
    if let Ok(path) = std::env::var("SOAK_LOG") {
        std::fs::write(&path, &log).unwrap();
    }
    drop(daemon);
    assert!(debug_lines > 0, "the daemon did not log at debug");

    // The next run finds nothing left to do, and every credential works.
    let final_actions = final_actions(&chaos.fleet);
    for i in 0..spokes {
        authenticates(&chaos.fleet.unsealed(i)).await;
    }
    let (admin_keys, sealed) = chaos.assert_no_key_leaked(&log);

    let (first, last, max) = rss_quarters(&rss);
    let commits = commits_by_author(&chaos.fleet.remote);
    println!("soak summary");
    println!("  spokes {spokes}, chaos for {minutes} min, seed {seed}");
    println!(
        "  daemon ticks {ticks}, rotations logged {rotated}, spoke failures logged {spoke_failures}, repo warnings {repo_warnings}"
    );
    println!("  remote commits by author {commits:?}");
    println!("  chaos actions {actions:?}");
    println!("  final rotate: exit 0, {final_actions:?}");
    println!("  all {spokes} committed credentials unseal and authenticate");
    println!(
        "  plaintext scan: {} distinct needles from {} client keys ({admin_keys} admin, the rest minted, from {sealed} sealed kubeconfigs); daemon log ({debug_lines} lines at debug), final run's output, fleet directory (repos, clones, TMPDIRs), git objects: none found",
        chaos.needles.len(),
        chaos.needles.keys()
    );
    println!(
        "  daemon RSS: first quarter median {:.1} MiB, last quarter median {:.1} MiB, max {:.1} MiB ({} samples)",
        first as f64 / 1024.0,
        last as f64 / 1024.0,
        max as f64 / 1024.0,
        rss.len()
    );
    println!("  total {:.0}s", started.elapsed().as_secs_f64());
    assert_eq!(panics, 0, "the daemon panicked");
    assert!(
        last <= first + first / 5 + 2048,
        "RSS grew: {first} KiB -> {last} KiB"
    );
}

/// The soak's checks in a few ticks, with the suite: minted credentials, the daemon at
/// debug, two spokes each rebuilt once (new CAs: a new admin key, and a new generation
/// minted). Every key, admin or minted (read back by unsealing every committed output),
/// is looked for in the daemon's log, the repos' objects, the clone and the TMPDIRs.
#[test]
fn a_short_minted_run_at_debug_leaks_no_key_into_logs_repos_or_tmp() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::with(&[NodeOptions::default(), NodeOptions::default()], MINTED);
    let mut needles = Needles::new();
    for node in &fleet.nodes {
        needles.add_key(&node.parts().client_key_pem);
    }
    let daemon = Daemon::start(&fleet, 1);
    assert!(
        daemon.wait_ticks(1, Duration::from_secs(30)),
        "the first tick never finished:\n{}",
        daemon.log()
    );
    for i in 0..2 {
        fleet.nodes[i].rebuild();
        needles.add_key(&fleet.nodes[i].parts().client_key_pem);
        assert!(
            daemon.wait_ticks(2, Duration::from_secs(30)),
            "no tick after rebuilding node {i}:\n{}",
            daemon.log()
        );
    }
    let debug_lines = daemon.count(" DEBUG ");
    let log = daemon.log();
    drop(daemon);
    assert!(debug_lines > 0, "the daemon did not log at debug:\n{log}");

    let recovery = vectors_recovery_keys();
    let openers = Openers {
        recovery: &recovery,
        age: None,
    };
    let sealed = sealed_keys(&mut needles, &fleet.remote, &openers)
        + sealed_keys(&mut needles, &fleet.clone, &openers);
    assert!(sealed >= 4, "{sealed} sealed kubeconfigs");
    // 4 admin keys (2 nodes, 2 installs each), generations 1 and 2 of each spoke.
    assert_eq!(needles.keys(), 4 + 4, "{log}");
    needles.assert_absent("the daemon's log", log.as_bytes());
    fleet.assert_no_plaintext_of(&needles);
    for i in 0..2 {
        let kc = fleet.unsealed(i);
        let text = std::str::from_utf8(kc.expose()).unwrap();
        assert_eq!(needles.find(text.as_bytes()).map(|_| ()), Some(()));
    }
}
