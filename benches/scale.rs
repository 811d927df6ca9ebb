//! Scale: a healthy tick over N spokes (TLS probe only) and the daemon's memory.
//!
//! The lab (benches/lab/scale.rs) serves every spoke's API from one thread of this
//! process. The committed state is written directly, no rotating tick first: per spoke a
//! SealedSecret sealed and annotated by the rotation's own `refresh::record` and
//! `Sealer::seal`, all in one commit, pushed.
//!
//! - `spokekeeper rotate --all -o json`: wall, CPU (it and what it ran), peak RSS (VmHWM
//!   sampled every 2 ms); every spoke must be healthy.
//! - `spokekeeper run --interval 1s` over the first M spokes: VmRSS before the first tick,
//!   VmHWM at the end of the first tick, VmRSS and VmHWM after T ticks.
//!
//! `cargo bench --bench scale`: N=1000,2000,5000,10000,20000 (and the per-spoke slope),
//! M=10000, T=100. `cargo test --bench scale`: a smoke round (N=3, M=3, T=2). SCALE_BENCH_N
//! (a list), SCALE_BENCH_DAEMON_N, SCALE_BENCH_TICKS override;
//! SCALE_BENCH_CONCURRENCY=8,32 the `--concurrency` values of the healthy tick;
//! SCALE_BENCH_WRAP a profiler to run the healthy tick under (`heaptrack -o FILE`);
//! SCALE_BENCH_BASELINE another build of spokekeeper (e.g. the commit before a change)
//! run on the same fleet right before each healthy tick, its figures and the ratios
//! printed beside (side by side in one run: the load is the same for both).
//! SCALE_BENCH_FEDERATED=K makes the last K spokes of every fleet federated: lab nodes
//! with a real sshd (run as root) whose emulated API server trusts an emulated hub's
//! issuer (tests/support/src/federation.rs); a first `rotate --all` writes their trust
//! through the recipe's script and commits their ConfigMaps before anything is measured.
//! The fleet then has that hub in its configuration, and each healthy federated spoke
//! costs one TokenRequest there and one SelfSubjectReview on the spoke: compare such runs
//! with each other.

#[path = "lab/measure.rs"]
mod measure;
use measure::{Measured, measure};
use spokekeeper_test_support as support;
use support::status_kib;

#[path = "lab/scale.rs"]
mod scale_lab;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use scale_lab::{ScaleLab, ScaleSpoke};
use spokekeeper::config::{Config, CredentialMode};
use spokekeeper::rotate::refresh;
use spokekeeper::seal::SealingKey;
use spokekeeper_lab::config::{ConfigBuilder, Spoke};
use spokekeeper_lab::federation::Issuer;
use std::sync::Arc;
use support::daemon::Daemon;
use support::federation::LabHub;
use support::fleet::vectors;
use support::git::{commit, fleet_remote, git};
use support::{Lab, Node};
use time::OffsetDateTime;

const BIN: &str = env!("CARGO_BIN_EXE_spokekeeper");

fn env_usize(var: &str, full: bool, full_n: usize, smoke: usize) -> usize {
    match std::env::var(var) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}={v}: not a number")),
        Err(_) if full => full_n,
        Err(_) => smoke,
    }
}

/// A fleet repo and config over the lab, in the state a rotating tick leaves.
struct Fleet {
    /// The emulated hub of a fleet with federated spokes.
    _hub: Option<LabHub>,
    dir: tempfile::TempDir,
    config: PathBuf,
}

/// The federated spokes of every fleet: their nodes, and the issuer they trust.
struct Federated {
    nodes: Vec<Node>,
    issuer: Arc<Issuer>,
}

impl Fleet {
    /// `spokes` sealed, then `federated`'s nodes federated (spoke names go on counting).
    fn new(spokes: &[ScaleSpoke], federated: Option<&mut Federated>) -> Fleet {
        let dir = support::scratch_dir();
        let (remote, mut clones) = fleet_remote(dir.path(), 1);
        let clone = clones.remove(0);
        let nodes = dir.path().join("nodes");
        std::fs::create_dir_all(&nodes).expect("nodes dir");
        let mut yaml = ConfigBuilder::new(&clone, vectors().join("key/cert.pem"));
        for (i, s) in spokes.iter().enumerate() {
            let path = nodes.join(format!("spoke{i}.yaml"));
            let kc = spokekeeper_lab::kubeconfig_yaml("https://127.0.0.1:6443", &s.parts, None, "");
            std::fs::write(&path, kc).expect("write kubeconfig");
            yaml = yaml.spoke(
                Spoke::new(format!("spoke{i}"), s.addr.ip())
                    .api_server(&format!("https://{}", s.addr))
                    .local(&path),
            );
        }
        let mut hub = None;
        if let Some(f) = federated {
            let lab_hub = LabHub::with_issuer(dir.path(), &remote, f.issuer.clone());
            for (j, node) in f.nodes.iter_mut().enumerate() {
                let name = format!("spoke{}", spokes.len() + j);
                yaml = yaml.spoke(lab_hub.add_federated(node, &name));
            }
            yaml = yaml.top(&lab_hub.top());
            hub = Some((lab_hub, f.nodes.len()));
        }
        let config = dir.path().join("spokekeeper.yaml");
        yaml.write(&config).expect("write config");
        commit_state(&config, &clone);
        if let Some((_, k)) = &hub {
            // What only a rotation makes: the trust on each node, bound, proven, committed.
            let mut cmd = Command::new(BIN);
            cmd.arg("--config")
                .arg(&config)
                .args(["rotate", "--all", "-o", "json"]);
            let m = measure(cmd);
            assert_eq!(m.code, 0, "the federated spokes' first tick: {}", m.stderr);
            let report: serde_json::Value = serde_json::from_str(&m.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}\n{}", m.stdout, m.stderr));
            let rotated = report["spokes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| s["action"] == "rotated")
                .count();
            assert_eq!(rotated, *k, "{}", m.stdout);
        }
        Fleet {
            _hub: hub.map(|(h, _)| h),
            dir,
            config,
        }
    }
}

/// Writes what a rotating tick commits, per spoke, into one commit, and pushes it.
fn commit_state(config_path: &Path, clone: &Path) {
    let config = Config::load(config_path).unwrap_or_else(|e| panic!("{e}"));
    let now = OffsetDateTime::now_utc();
    let pem = std::fs::read(vectors().join("key/cert.pem")).expect("sealing cert");
    let key = SealingKey::from_pem(&pem, "cert.pem", now).expect("sealing key");
    for spoke in &config.spokes {
        if spoke.credential.mode == CredentialMode::Federated {
            continue;
        }
        let bytes = std::fs::read(&spoke.kubeconfig_path).expect("read kubeconfig");
        let parsed = spokekeeper::kubeconfig::parse(&bytes).expect("parse kubeconfig");
        let mut kc = spokekeeper::kubeconfig::sanitize(&parsed, &spoke.name).expect("sanitize");
        kc.set_server(spoke.api_server.as_ref().expect("api_server"))
            .expect("set server");
        let yaml = kc.to_yaml();
        // Exactly what a rotation records and seals.
        let recorded = refresh::record(
            spoke,
            &kc,
            kc.content_sha256(),
            spokekeeper::rotate::state::SealedTo::Cert(key.fingerprint()),
            now,
        );
        let manifest = spokekeeper::seal::Sealer::SealedSecrets(&key)
            .seal(spoke, &yaml, &recorded.to_annotations(), now)
            .expect("seal");
        let path = clone.join(&spoke.output);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, manifest).expect("write manifest");
    }
    git(clone, &["add", "--all"]);
    commit(clone, "the state a rotating tick leaves");
    git(clone, &["push", "--quiet", "origin", "HEAD:main"]);
}

fn actions(m: &Measured) -> std::collections::BTreeMap<String, usize> {
    let report: serde_json::Value = serde_json::from_str(&m.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", m.stdout, m.stderr));
    let mut counts = std::collections::BTreeMap::new();
    for s in report["spokes"].as_array().expect("spokes") {
        let a = s["action"].as_str().unwrap_or("?").to_string();
        if a != "healthy" && !counts.contains_key(&a) {
            eprintln!("first {a}: {s}");
        }
        *counts.entry(a).or_insert(0) += 1;
    }
    counts
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// `spokekeeper run` over `fleet`: VmRSS idle, VmHWM after the first tick, VmRSS and
/// VmHWM after `ticks` ticks.
fn daemon(fleet: &Fleet, n: usize, ticks: usize) {
    let d = Daemon::start_args(
        &fleet.config,
        &["run", "--interval", "1s", "--listen", "127.0.0.1:0"],
    );
    let pid = d.pid();
    let count = |needle: &str| d.log().lines().filter(|l| l.contains(needle)).count();
    let wait = |what: &str, cond: &dyn Fn() -> bool, within: Duration| {
        let end = Instant::now() + within;
        while !cond() {
            assert!(
                Instant::now() < end,
                "daemon: no {what} within {within:?}:\n{}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait(
        "startup",
        &|| count("running:") > 0,
        Duration::from_secs(30),
    );
    assert_eq!(count("tick started"), 0, "sampled idle after a tick began");
    let idle = status_kib(pid, "VmRSS:").expect("VmRSS");
    wait(
        "first tick",
        &|| count("tick finished") >= 1,
        Duration::from_secs(120),
    );
    let first_peak = status_kib(pid, "VmHWM:").expect("VmHWM");
    let started = Instant::now();
    // The trend: VmRSS once tick k has finished.
    let mut trend = Vec::new();
    for k in [10, 25, 50, 75, ticks] {
        if k > ticks || k < 2 || trend.iter().any(|(t, _)| *t == k) {
            continue;
        }
        wait(
            "ticks",
            &|| count("tick finished") >= k,
            Duration::from_secs(30 + 10 * ticks as u64),
        );
        let rss = status_kib(pid, "VmRSS:").expect("VmRSS");
        trend.push((k, rss));
    }
    let after_rss = status_kib(pid, "VmRSS:").expect("VmRSS");
    let after_peak = status_kib(pid, "VmHWM:").expect("VmHWM");
    let log = d.log();
    let unhealthy: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("tick finished") && !(l.contains("failed=0") && l.contains("rotated=0"))
        })
        .collect();
    assert!(unhealthy.is_empty(), "ticks not all healthy: {unhealthy:?}");
    println!(
        "daemon, {n} spokes, --interval 1s: VmRSS idle (before the first tick) {:.1} MiB; \
         peak during the first tick (VmHWM after it) {:.1} MiB; after {ticks} ticks VmRSS {:.1} MiB, \
         VmHWM {:.1} MiB (ticks 2..{ticks} took {:.0} s)",
        mib(idle),
        mib(first_peak),
        mib(after_rss),
        mib(after_peak),
        started.elapsed().as_secs_f64()
    );
    let trend: Vec<String> = trend
        .iter()
        .map(|(k, rss)| format!("after {k}: {:.1}", mib(*rss)))
        .collect();
    println!("daemon VmRSS (MiB) {}", trend.join(", "));
}

/// Least-squares line through (x, y): (slope, intercept).
fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (slope, my - slope * mx)
}

fn main() {
    measure::reaper_if_asked();
    let full = std::env::args().any(|a| a == "--bench");
    let sizes: Vec<usize> = match std::env::var("SCALE_BENCH_N") {
        Ok(v) => v
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("SCALE_BENCH_N={v}: not a list of numbers"))
            })
            .collect(),
        Err(_) if full => vec![1000, 2000, 5000, 10_000, 20_000],
        Err(_) => vec![3],
    };
    let daemon_n = env_usize("SCALE_BENCH_DAEMON_N", full, 10_000, 3);
    let ticks = env_usize("SCALE_BENCH_TICKS", full, 100, 2);
    let concurrency: Vec<usize> = std::env::var("SCALE_BENCH_CONCURRENCY")
        .unwrap_or_else(|_| "8".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let wanted = sizes.iter().copied().max().unwrap_or(0).max(daemon_n);
    // One listener per spoke in this process: the descriptor limit is raised (where
    // allowed), and a size it cannot hold is cut to what it can, and said.
    let limit = measure::raise_nofile(wanted as u64 + 4096);
    let room = limit
        .1
        .map_or(usize::MAX, |l| (l as usize).saturating_sub(1000));
    let sizes: Vec<usize> = sizes
        .into_iter()
        .map(|n| {
            if n > room {
                println!(
                    "N={n} needs more descriptors than the limit {:?}: cut to {room}",
                    limit.1
                );
            }
            n.min(room)
        })
        .collect();
    let most = sizes.iter().copied().max().unwrap_or(0).max(daemon_n);
    println!(
        "scale benchmark: {} cores, {} build of spokekeeper; RLIMIT_NOFILE soft limit raised from {:?} to {:?}",
        std::thread::available_parallelism().map_or(1, |c| c.get()),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        limit.0,
        limit.1
    );

    let setup = Instant::now();
    let lab = ScaleLab::start(most);
    println!(
        "lab ({most} spokes, one PKI each) in {:.1} s; each API presents {} bytes of DER",
        setup.elapsed().as_secs_f64(),
        lab.spokes[0].chain_bytes
    );
    // For profiling: a command the tick runs under, e.g. `heaptrack -o /tmp/sk` (its
    // figures then include the wrapper's cost).
    let wrap: Vec<String> = std::env::var("SCALE_BENCH_WRAP")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let baseline = std::env::var("SCALE_BENCH_BASELINE").ok();
    let k = env_usize("SCALE_BENCH_FEDERATED", false, 0, 0);
    assert!(
        sizes.iter().chain([&daemon_n]).all(|&n| n >= k),
        "SCALE_BENCH_FEDERATED={k} is more than a fleet's N"
    );
    let node_lab = (k > 0).then(Lab::new);
    let mut federated = node_lab.as_ref().map(|l| {
        let issuer = Arc::new(Issuer::new(support::federation::ISSUER));
        let opts = support::federation::node_options(&issuer);
        Federated {
            nodes: l.add_nodes(k, &opts),
            issuer,
        }
    });
    let mut rows = Vec::new();
    for &n in &sizes {
        let setup = Instant::now();
        let fleet = Fleet::new(&lab.spokes[..n - k], federated.as_mut());
        eprintln!(
            "N={n} ({k} federated): fleet repo and config in {:.1} s",
            setup.elapsed().as_secs_f64()
        );
        for c in &concurrency {
            let tick = |bin: &str| {
                let mut cmd = match wrap.split_first() {
                    Some((prog, args)) => {
                        let mut cmd = Command::new(prog);
                        cmd.args(args).arg(bin);
                        cmd
                    }
                    None => Command::new(bin),
                };
                cmd.arg("--config").arg(&fleet.config).args([
                    "rotate",
                    "--all",
                    "-o",
                    "json",
                    "--concurrency",
                    &c.to_string(),
                ]);
                let lab0 = measure::self_cpu();
                let m = measure(cmd);
                let lab_cpu = measure::self_cpu().saturating_sub(lab0);
                let counts = actions(&m);
                assert_eq!(m.code, 0, "healthy tick exited {}: {}", m.code, m.stderr);
                assert_eq!(counts.get("healthy"), Some(&n), "{counts:?}");
                (m, lab_cpu)
            };
            let before = baseline.as_deref().map(tick);
            let (m, lab_cpu) = tick(BIN);
            println!(
                "healthy tick, N={n}, --concurrency {c}: wall {:.2} s, CPU {:.2} s, peak RSS {:.1} MiB \
                 (the lab's servers, this process, meanwhile: CPU {:.2} s)",
                m.wall.as_secs_f64(),
                m.cpu.as_secs_f64(),
                mib(m.peak_kib),
                lab_cpu.as_secs_f64()
            );
            if let Some((b, b_lab)) = before {
                println!(
                    "  baseline just before: wall {:.2} s, CPU {:.2} s, peak RSS {:.1} MiB (lab CPU {:.2} s); \
                     this build against it: wall {:.2}x, CPU {:.2}x, peak RSS {:.2}x",
                    b.wall.as_secs_f64(),
                    b.cpu.as_secs_f64(),
                    mib(b.peak_kib),
                    b_lab.as_secs_f64(),
                    m.wall.as_secs_f64() / b.wall.as_secs_f64(),
                    m.cpu.as_secs_f64() / b.cpu.as_secs_f64(),
                    m.peak_kib as f64 / b.peak_kib as f64
                );
            }
            rows.push((n, *c, m));
        }
    }
    if sizes.len() > 1 {
        let c = concurrency[0];
        let of = |f: &dyn Fn(&Measured) -> f64| -> Vec<(f64, f64)> {
            rows.iter()
                .filter(|(_, rc, _)| *rc == c)
                .map(|(n, _, m)| (*n as f64, f(m)))
                .collect()
        };
        let (wall, wall0) = fit(&of(&|m| m.wall.as_secs_f64() * 1000.0));
        let (cpu, cpu0) = fit(&of(&|m| m.cpu.as_secs_f64() * 1000.0));
        let (rss, rss0) = fit(&of(&|m| m.peak_kib as f64));
        println!(
            "healthy tick, --concurrency {c}, least squares over N: wall {wall:.3} ms/spoke + {wall0:.0} ms, \
             CPU {cpu:.3} ms/spoke + {cpu0:.0} ms, peak RSS {rss:.2} KiB/spoke + {:.1} MiB",
            rss0 / 1024.0
        );
    }

    let dfleet = Fleet::new(&lab.spokes[..daemon_n - k], federated.as_mut());
    daemon(&dfleet, daemon_n, ticks);
    let _ = dfleet.dir.path();
}
