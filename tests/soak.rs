//! Soak (opt-in: `scripts/soak`, or `cargo test --release --test soak -- --ignored`):
//! `spokekeeper run` ticking every few seconds over a large lab fleet while the nodes are
//! rebuilt, renew their client certificates, lose their API or sshd, wedge, and while
//! someone else pushes to the fleet repo. At the end every spoke's committed credential
//! unseals and authenticates, no plaintext key is on disk, and the daemon's RSS did not
//! grow.
//!
//! SOAK_SPOKES (200), SOAK_MINUTES (30), SOAK_TICK_SECS (5), SOAK_SEED (from the clock),
//! SOAK_LOG (a file for the daemon's log).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::NodeOptions;
use support::fleet::{Fleet, authenticates};
use support::git::git;

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

impl Daemon {
    fn count(&self, needle: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, l)| l.contains(needle))
            .count()
    }

    fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
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

/// Files under `root` (not following links, skipping `skip` and files over 4 MiB) that
/// contain any of `needles`.
fn find_any(root: &Path, needles: &[String], skip: &[PathBuf]) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if skip.iter().any(|s| p.starts_with(s)) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(p);
            } else if meta.is_file()
                && meta.len() <= 4 << 20
                && let Ok(bytes) = std::fs::read(&p)
                && needles
                    .iter()
                    .any(|n| bytes.windows(n.len()).any(|w| w == n.as_bytes()))
            {
                hits.push(p);
            }
        }
    }
    hits
}

/// What would betray a node's client key: a slice of its PEM body and of its base64.
fn needles(node: &support::Node) -> [String; 2] {
    use base64::Engine;
    let key = node.parts().client_key_pem;
    let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(key.as_bytes());
    [body[..40].to_string(), b64[..40].to_string()]
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "soak: minutes long; run scripts/soak"]
async fn soak() {
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
    let mut fleet = Fleet::with(
        &vec![NodeOptions::default(); spokes],
        "verify_every: 5m\nrenew_before: 30d\n",
    );
    println!("soak: lab up in {:.0}s", started.elapsed().as_secs_f64());
    let mut secrets: Vec<String> = fleet.nodes.iter().flat_map(needles).collect();
    let racer = fleet.dir.path().join("racer");
    git(
        fleet.dir.path(),
        &[
            "clone",
            "--quiet",
            fleet.remote.to_str().unwrap(),
            racer.to_str().unwrap(),
        ],
    );

    let mut child = Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
        .arg("--config")
        .arg(&fleet.config)
        .args(["run", "--now", "--listen", "127.0.0.1:0", "--interval"])
        .arg(format!("{tick_secs}s"))
        .env("SPOKEKEEPER_LOG", "spokekeeper=info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = support::logs::capture_stderr(&mut child);
    let daemon = Daemon { child, lines };
    assert!(
        daemon.wait_ticks(1, Duration::from_secs(600)),
        "the first tick never finished"
    );
    println!(
        "soak: first tick (every spoke rotated) done at {:.0}s",
        started.elapsed().as_secs_f64()
    );

    let mut rng = Rng(seed);
    let mut broken: BTreeMap<usize, (Fault, Instant)> = BTreeMap::new();
    let mut actions: BTreeMap<&str, usize> = BTreeMap::new();
    let mut rss: Vec<(f64, u64)> = Vec::new();
    let chaos_start = Instant::now();
    let end = chaos_start + Duration::from_secs(minutes * 60);
    let mut next_sample = Instant::now();
    let mut n = 0u64;
    while Instant::now() < end {
        n += 1;
        // Heal what is due.
        let now = Instant::now();
        let due: Vec<usize> = broken
            .iter()
            .filter(|(_, (_, until))| *until <= now)
            .map(|(i, _)| *i)
            .collect();
        for i in due {
            match broken.remove(&i).unwrap().0 {
                Fault::ApiDown => fleet.nodes[i].start_api(),
                Fault::SshdDown => fleet.nodes[i].start_sshd(),
                Fault::SshdWedged => fleet.nodes[i].sigcont(),
            }
        }
        let i = rng.below(spokes as u64) as usize;
        let hold = Duration::from_secs(5 + rng.below(40));
        let action = match rng.below(100) {
            0..30 => {
                fleet.nodes[i].rebuild();
                secrets.extend(needles(&fleet.nodes[i]));
                "rebuild"
            }
            30..45 => {
                fleet.nodes[i].renew_client_cert(365);
                secrets.extend(needles(&fleet.nodes[i]));
                "client cert renewed"
            }
            45..75 if !broken.contains_key(&i) && broken.len() < spokes / 10 + 1 => {
                let fault = match rng.below(3) {
                    0 => {
                        fleet.nodes[i].stop_api();
                        Fault::ApiDown
                    }
                    1 => {
                        fleet.nodes[i].stop_sshd();
                        Fault::SshdDown
                    }
                    _ => {
                        fleet.nodes[i].sigstop();
                        Fault::SshdWedged
                    }
                };
                broken.insert(i, (fault, Instant::now() + hold));
                match fault {
                    Fault::ApiDown => "API outage",
                    Fault::SshdDown => "sshd outage",
                    Fault::SshdWedged => "sshd wedged",
                }
            }
            45..75 => "skipped (node already broken)",
            _ => {
                if push_race(&racer, n) {
                    "push race"
                } else {
                    "push race (racer lost)"
                }
            }
        };
        *actions.entry(action).or_insert(0) += 1;
        if Instant::now() >= next_sample {
            if let Some(kib) = daemon.rss_kib() {
                rss.push((chaos_start.elapsed().as_secs_f64(), kib));
            }
            next_sample += Duration::from_secs(10);
        }
        std::thread::sleep(Duration::from_millis(500 + rng.below(2500)));
    }

    // Heal everything and let the daemon catch up.
    for (i, (fault, _)) in std::mem::take(&mut broken) {
        match fault {
            Fault::ApiDown => fleet.nodes[i].start_api(),
            Fault::SshdDown => fleet.nodes[i].start_sshd(),
            Fault::SshdWedged => fleet.nodes[i].sigcont(),
        }
    }
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
    if let Ok(path) = std::env::var("SOAK_LOG") {
        let lines = daemon.lines.lock().unwrap();
        let text: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
        std::fs::write(&path, text.join("\n")).unwrap();
    }
    drop(daemon);

    // The next run finds nothing left to do, and every credential works.
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let mut final_actions: BTreeMap<String, usize> = BTreeMap::new();
    for s in report["spokes"].as_array().unwrap() {
        *final_actions
            .entry(s["action"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    for i in 0..spokes {
        authenticates(&fleet.unsealed(i)).await;
    }
    fleet.assert_no_plaintext();
    let history = git(&fleet.remote, &["log", "-p", "--all", "--format=%B"]);
    for s in &secrets {
        assert!(
            !history.contains(s.as_str()),
            "a client key in the remote history"
        );
    }
    let node_dirs: Vec<PathBuf> = fleet.nodes.iter().map(|n| n.dir.clone()).collect();
    let leaked = find_any(Path::new("/tmp"), &secrets, &node_dirs);
    assert!(
        leaked.is_empty(),
        "plaintext key material on disk: {leaked:?}"
    );

    // RSS: the first and the last quarter of the samples.
    let q = (rss.len() / 4).max(1);
    let median = |s: &[(f64, u64)]| {
        let mut v: Vec<u64> = s.iter().map(|(_, k)| *k).collect();
        v.sort();
        v[v.len() / 2]
    };
    let first = median(&rss[..q]);
    let last = median(&rss[rss.len() - q..]);
    let max = rss.iter().map(|(_, k)| *k).max().unwrap_or(0);
    let authors = git(&fleet.remote, &["log", "--format=%an", "main"]);
    let by = |who: &str| authors.lines().filter(|a| *a == who).count();
    let mut commits = BTreeMap::new();
    for who in ["spokekeeper", "racer", "t"] {
        commits.insert(who, by(who));
    }
    commits.insert("total", authors.lines().count());
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
        "  plaintext scan: {} key needles, remote history + /tmp: none found",
        secrets.len()
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
