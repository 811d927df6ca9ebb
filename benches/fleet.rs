//! A whole fleet through the binary: `spokekeeper rotate --all` against N lab spokes, and
//! beside it, in the same run on the same nodes, the manual procedure as a shell loop.
//!
//! Per N (real sshd per node; N=1000 uses TLS-only nodes read with `source: local`,
//! which the healthy tick never reads anyway):
//! - healthy tick (nothing to rotate): wall, CPU (spokekeeper and what it ran), peak RSS,
//!   SSH logins the nodes' sshd accepted (must be 0);
//! - every node rebuilt (new CAs), then one tick: wall, per spoke, commits, push;
//! - baselines, per spoke `ssh cat` (spokekeeper's ssh options and key exchange), `sed` the
//!   address, a Secret, `spokekeeper seal`: (a) one after another, `git commit` each, one
//!   `git push` at the end; (b) the same 8 at a time (`xargs -P 8`), one commit and push at
//!   the end; the ratios to spokekeeper;
//! - CPU is everything each run started: the bench runs each command under itself as a
//!   child subreaper, which would also wait for detached processes (spokekeeper starts one
//!   ssh per spoke, its own child; the mux masters of earlier versions were detached);
//! - SSH key exchange: the client's cost of a handshake per KexAlgorithms choice.
//! - lab CPU: this process's own CPU during each run, the lab's API servers (the server
//!   side of every probe and live validation; the manual loops never reach them) and the
//!   peak sampler.
//!
//! `cargo bench --bench fleet` runs N = 10, 100, 1000; `cargo test` runs a smoke round.
//! FLEET_BENCH_SSH=10,100 and FLEET_BENCH_TLS=1000 override the sizes,
//! FLEET_BENCH_CONCURRENCY=8,32 the `--concurrency` values tried for each tick.
//! FLEET_BENCH_FEDERATED=K makes the last K spokes of each SSH fleet federated
//! (`credential.mode: federated`, on the lab's emulated issuer and trust; K at most N):
//! the fleet then has an emulated hub, which every tick's pushes are verified on, sealed
//! spokes' too, so compare such rows with each other, not with a hub-less run's. A
//! federated spoke's healthy tick is one TokenRequest and one SelfSubjectReview (no SSH);
//! its rebuilt tick writes its trust through the recipe's script, binds, and proves.
//! FLEET_BENCH_BASELINE another build of spokekeeper (e.g. the commit before a change),
//! run on the same rebuilt fleet right before each `--concurrency 8` rebuilt tick, its
//! row and its ratio to (b) printed beside (side by side: the load is the same for both).

#[path = "lab/measure.rs"]
mod measure;
use measure::{Measured, measure};
use spokekeeper_test_support as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use spokekeeper_lab::config::{ConfigBuilder, Spoke};
use support::federation::LabHub;
use support::fleet::{config_yaml, vectors};
use support::git::{fleet_remote, git};
use support::{Lab, Node, NodeOptions};

const BIN: &str = env!("CARGO_BIN_EXE_spokekeeper");

/// SSH logins every node's sshd has accepted so far.
fn ssh_logins(nodes: &[Node]) -> usize {
    nodes
        .iter()
        .map(|n| {
            std::fs::read_to_string(n.dir.join("sshd.log"))
                .unwrap_or_default()
                .matches("Accepted publickey")
                .count()
        })
        .sum()
}

struct Fleet {
    nodes: Vec<Node>,
    /// The emulated hub, when some spokes are federated (dropped before the directory).
    _hub: Option<LabHub>,
    _dir: tempfile::TempDir,
    remote: PathBuf,
    config: PathBuf,
}

impl Fleet {
    fn new(lab: &Lab, n: usize, sshd: bool) -> Fleet {
        Self::mixed(lab, n, sshd, 0)
    }

    /// N spokes, the last `federated` of them federated (SSH nodes only).
    fn mixed(lab: &Lab, n: usize, sshd: bool, federated: usize) -> Fleet {
        let opts = NodeOptions {
            sshd,
            ..NodeOptions::default()
        };
        let dir = support::scratch_dir();
        let (remote, mut clones) = fleet_remote(dir.path(), 1);
        let clone = clones.remove(0);
        let config = dir.path().join("spokekeeper.yaml");
        let federated = federated.min(n);
        if federated > 0 {
            assert!(sshd, "federated spokes need their sshd");
            let hub = LabHub::start(dir.path(), &remote);
            let mut nodes = lab.add_nodes(n - federated, &opts);
            nodes.extend(lab.add_nodes(federated, &hub.node_options()));
            let yaml = federated_config(&clone, &mut nodes, &hub, n - federated);
            std::fs::write(&config, yaml).expect("write config");
            return Fleet {
                nodes,
                _hub: Some(hub),
                _dir: dir,
                remote,
                config,
            };
        }
        let nodes = lab.add_nodes(n, &opts);
        let yaml = if sshd {
            config_yaml(&clone, &nodes, "")
        } else {
            local_config(&clone, &nodes)
        };
        std::fs::write(&config, yaml).expect("write config");
        Fleet {
            nodes,
            _hub: None,
            _dir: dir,
            remote,
            config,
        }
    }

    fn rotate(&self, extra: &[&str]) -> Measured {
        self.rotate_with(BIN, extra)
    }

    fn rotate_with(&self, bin: &str, extra: &[&str]) -> Measured {
        let mut cmd = Command::new(bin);
        cmd.arg("--config")
            .arg(&self.config)
            .args(["rotate", "--all", "-o", "json"])
            .args(extra);
        measure(cmd)
    }

    fn commits(&self) -> usize {
        git(&self.remote, &["rev-list", "--count", "main"])
            .trim()
            .parse()
            .expect("count")
    }
}

/// The first `sealed` nodes sealed (read over SSH as root), the rest federated; every
/// spoke known to `hub`, which the configuration names.
fn federated_config(clone: &Path, nodes: &mut [Node], hub: &LabHub, sealed: usize) -> String {
    let mut spokes = Vec::new();
    for (i, node) in nodes.iter_mut().enumerate() {
        let name = format!("spoke{i}");
        if i < sealed {
            hub.add_sealed(&name);
            spokes.push(node.spoke(&name, "5s"));
        } else {
            spokes.push(hub.add_federated(node, &name));
        }
    }
    ConfigBuilder::new(clone, vectors().join("key/cert.pem"))
        .top(&hub.top())
        .spokes(spokes)
        .yaml()
}

/// TLS-only nodes: the kubeconfig is read on this host (`source: local`).
fn local_config(clone: &Path, nodes: &[Node]) -> String {
    ConfigBuilder::new(clone, vectors().join("key/cert.pem"))
        .spokes(
            nodes
                .iter()
                .enumerate()
                .map(|(i, n)| Spoke::new(format!("spoke{i}"), n.address).local(&n.kubeconfig_path)),
        )
        .yaml()
}

fn actions(m: &Measured) -> std::collections::BTreeMap<String, usize> {
    let report: serde_json::Value = serde_json::from_str(&m.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", m.stdout, m.stderr));
    let mut counts = std::collections::BTreeMap::new();
    for s in report["spokes"].as_array().expect("spokes") {
        let a = s["action"].as_str().unwrap_or("?").to_string();
        if a == "failed" && !counts.contains_key("failed") {
            eprintln!("first failure: {s}");
        }
        *counts.entry(a).or_insert(0) += 1;
    }
    counts
}

/// spokekeeper's ssh options (src/spoke/ssh.rs) that change the cost of a session, for the
/// manual baselines: the same key exchange (curve25519 first), publickey only.
const SSH_OPTS: &str = "-F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes \
-o GlobalKnownHostsFile=/dev/null -o IdentitiesOnly=yes -o IdentityAgent=none \
-o PreferredAuthentications=publickey -o GSSAPIAuthentication=no -o ClearAllForwardings=yes \
-o KexAlgorithms=curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256,ecdh-sha2-nistp384,ecdh-sha2-nistp521,diffie-hellman-group16-sha512,diffie-hellman-group18-sha512,diffie-hellman-group14-sha256";

/// One spoke of the manual procedure: `ssh cat`, `sed` the address, a Secret, `spokekeeper
/// seal` into the clone. Arguments: name addr port identity known_hosts path.
const ONE_SPOKE: &str = r#"set -eu
name=$1 addr=$2 port=$3 id=$4 kh=$5 path=$6
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ssh -n $SSH_OPTS -o UserKnownHostsFile="$kh" -i "$id" -p "$port" \
    "root@$addr" cat "$path" > "$work/k3s.yaml"
sed "s/127.0.0.1/$addr/" "$work/k3s.yaml" > "$work/hub.yaml"
{
  printf 'apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s-kubeconfig\n  namespace: flux-system\ntype: Opaque\ndata:\n  value: ' "$name"
  base64 -w0 "$work/hub.yaml"
  echo
} | "$SK" seal --cert "$CERT" > "$CLONE/fluxcd/$name-kubeconfig-sealed.yaml"
"#;

/// (a) The seed's procedure: one spoke after another, a commit each, one push at the end.
const SEQUENTIAL: &str = r#"set -eu
mkdir -p "$CLONE/fluxcd"
while read -r name addr port id kh path; do
  sh "$ONE" "$name" "$addr" "$port" "$id" "$kh" "$path"
  git -C "$CLONE" add "fluxcd/$name-kubeconfig-sealed.yaml"
  git -C "$CLONE" -c user.name=ops -c user.email=ops@example.org commit -q -m "rotate $name kubeconfig"
done < "$LIST"
git -C "$CLONE" push -q origin HEAD:main
"#;

/// (b) The best a person would script: 8 spokes at a time, one commit and one push at the end
/// (parallel commits would fight over the index lock).
const PARALLEL: &str = r#"set -eu
mkdir -p "$CLONE/fluxcd"
xargs -P 8 -L 1 sh "$ONE" < "$LIST"
git -C "$CLONE" add fluxcd
git -C "$CLONE" -c user.name=ops -c user.email=ops@example.org commit -q -m "rotate kubeconfigs"
git -C "$CLONE" push -q origin HEAD:main
"#;

/// Runs a manual baseline over `nodes`; returns it and the commits it pushed.
fn baseline(nodes: &[Node], script: &str) -> (Measured, usize) {
    let dir = support::scratch_dir();
    let (remote, mut clones) = fleet_remote(dir.path(), 1);
    let clone = clones.remove(0);
    let one = dir.path().join("one-spoke.sh");
    std::fs::write(&one, ONE_SPOKE).expect("write script");
    let list = dir.path().join("spokes");
    let lines: String = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            format!(
                "spoke{i} {} {} {} {} {}\n",
                n.address,
                n.ssh_port,
                n.identity_path.display(),
                n.known_hosts_path.display(),
                n.kubeconfig_path.display()
            )
        })
        .collect();
    std::fs::write(&list, lines).expect("write list");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .env("SSH_OPTS", SSH_OPTS)
        .env("ONE", &one)
        .env("LIST", &list)
        .env("CLONE", &clone)
        .env("CERT", vectors().join("key/cert.pem"))
        .env("SK", BIN);
    let m = measure(cmd);
    assert_eq!(m.code, 0, "baseline failed: {}", m.stderr);
    let commits: usize = git(&remote, &["rev-list", "--count", "main"])
        .trim()
        .parse()
        .expect("count");
    (m, commits - 1)
}

/// `rounds` sequential `ssh true` with spokekeeper's options and `kex` (None: ssh's
/// default), in each of `parallel` loops at once.
fn handshakes(node: &Node, kex: Option<&str>, rounds: usize, parallel: usize) -> Measured {
    let mut one = String::new();
    for _ in 0..rounds {
        one.push_str(&format!(
            "ssh -n -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={} \
             -o GlobalKnownHostsFile=/dev/null -o IdentitiesOnly=yes -i {} -p {} {} root@{} true\n",
            node.known_hosts_path.display(),
            node.identity_path.display(),
            node.ssh_port,
            kex.map(|k| format!("-o KexAlgorithms={k}"))
                .unwrap_or_default(),
            node.address
        ));
    }
    let mut script = String::from("set -eu\npids=\n");
    for _ in 0..parallel {
        script.push_str(&format!("( set -e\n{one}) &\npids=\"$pids $!\"\n"));
    }
    script.push_str("for p in $pids; do wait $p; done\n");
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script);
    let m = measure(cmd);
    assert_eq!(m.code, 0, "ssh failed: {}", m.stderr);
    m
}

struct Row {
    what: String,
    n: usize,
    wall: Duration,
    cpu: Duration,
    peak_kib: Option<u64>,
    ssh: Option<usize>,
    commits: Option<usize>,
    /// This process's CPU meanwhile: the lab's API servers (the server side of every
    /// probe and live validation) and the 2 ms peak sampler.
    lab_cpu: Duration,
}

fn sizes(var: &str, full: bool, full_sizes: &[usize], smoke: &[usize]) -> Vec<usize> {
    match std::env::var(var) {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) if full => full_sizes.to_vec(),
        Err(_) => smoke.to_vec(),
    }
}

fn main() {
    measure::reaper_if_asked();
    let full = std::env::args().any(|a| a == "--bench");
    let ssh_sizes = sizes("FLEET_BENCH_SSH", full, &[10, 100], &[2]);
    let tls_sizes = sizes("FLEET_BENCH_TLS", full, &[1000], &[3]);
    // 8 (the default) must be among them: the ratio to the baseline uses it.
    let concurrency = sizes("FLEET_BENCH_CONCURRENCY", full, &[8, 32], &[8]);
    assert!(
        concurrency.contains(&8),
        "FLEET_BENCH_CONCURRENCY must include 8"
    );
    // Each TLS-only node holds a listener and a lease file in this process: N TLS-only
    // nodes need 2N descriptors and more: raised (see `raise_nofile`), and said.
    let most = tls_sizes
        .iter()
        .chain(&ssh_sizes)
        .max()
        .copied()
        .unwrap_or(0) as u64;
    let limit = measure::raise_nofile(4 * most + 4096);
    println!(
        "RLIMIT_NOFILE soft limit raised from {:?} to {:?}",
        limit.0, limit.1
    );
    let lab = Lab::new();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "fleet benchmark: {cores} cores, {} build of spokekeeper",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    let baseline_bin = std::env::var("FLEET_BENCH_BASELINE").ok();
    let federated: usize = std::env::var("FLEET_BENCH_FEDERATED")
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("FLEET_BENCH_FEDERATED={v}: not a number"))
        })
        .unwrap_or(0);

    for &n in &ssh_sizes {
        let setup = Instant::now();
        let mut fleet = Fleet::mixed(&lab, n, true, federated);
        let first = fleet.rotate(&[]);
        assert_eq!(first.code, 0, "first tick: {}", first.stderr);
        assert_eq!(actions(&first).get("rotated"), Some(&n));
        eprintln!(
            "N={n} ({} federated): lab and first tick in {:.1}s",
            federated.min(n),
            setup.elapsed().as_secs_f64()
        );

        let logins = ssh_logins(&fleet.nodes);
        let commits = fleet.commits();
        let lab0 = measure::self_cpu();
        let healthy = fleet.rotate(&[]);
        let lab_cpu = measure::self_cpu().saturating_sub(lab0);
        assert_eq!(healthy.code, 0, "healthy tick: {}", healthy.stderr);
        assert_eq!(actions(&healthy).get("healthy"), Some(&n));
        let ssh = ssh_logins(&fleet.nodes) - logins;
        assert_eq!(ssh, 0, "a healthy tick opens no SSH session");
        // The rows of a mixed fleet say how many of its spokes are federated.
        let fed = match federated.min(n) {
            0 => String::new(),
            k => format!(", {k} fed"),
        };
        rows.push(Row {
            what: format!("healthy tick{fed}"),
            n,
            wall: healthy.wall,
            cpu: healthy.cpu,
            peak_kib: Some(healthy.peak_kib),
            ssh: Some(ssh),
            commits: Some(fleet.commits() - commits),
            lab_cpu,
        });

        let mut rebuilt_wall = Duration::MAX;
        let mut baseline_wall = None;
        for &c in &concurrency {
            if let (8, Some(bin)) = (c, &baseline_bin) {
                baseline_wall = Some(rebuilt_by(&mut fleet, bin, n, &mut rows));
            }
            for node in &mut fleet.nodes {
                node.rebuild();
            }
            let logins = ssh_logins(&fleet.nodes);
            let commits = fleet.commits();
            let lab0 = measure::self_cpu();
            let rebuilt = fleet.rotate(&["--concurrency", &c.to_string()]);
            let lab_cpu = measure::self_cpu().saturating_sub(lab0);
            assert_eq!(rebuilt.code, 0, "rebuilt tick: {}", rebuilt.stderr);
            assert_eq!(actions(&rebuilt).get("rotated"), Some(&n));
            rows.push(Row {
                what: format!("all rebuilt tick, c={c}{fed}"),
                n,
                wall: rebuilt.wall,
                cpu: rebuilt.cpu,
                peak_kib: Some(rebuilt.peak_kib),
                ssh: Some(ssh_logins(&fleet.nodes) - logins),
                commits: Some(fleet.commits() - commits),
                lab_cpu,
            });
            if c == 8 {
                rebuilt_wall = rebuilt.wall;
            }
        }

        let mut manual = Vec::new();
        for (what, script) in [
            ("(a) sequential sh loop", SEQUENTIAL),
            ("(b) xargs -P 8 sh loop", PARALLEL),
        ] {
            let logins = ssh_logins(&fleet.nodes);
            let lab0 = measure::self_cpu();
            let (m, commits) = baseline(&fleet.nodes, script);
            let lab_cpu = measure::self_cpu().saturating_sub(lab0);
            rows.push(Row {
                what: what.into(),
                n,
                wall: m.wall,
                cpu: m.cpu,
                peak_kib: None,
                ssh: Some(ssh_logins(&fleet.nodes) - logins),
                commits: Some(commits),
                lab_cpu,
            });
            manual.push(m.wall);
        }
        ratios.push((n, rebuilt_wall, manual[0], manual[1], baseline_wall));
    }

    for &n in &tls_sizes {
        let setup = Instant::now();
        let fleet = Fleet::new(&lab, n, false);
        let first = fleet.rotate(&[]);
        assert_eq!(first.code, 0, "first tick: {}", first.stderr);
        assert_eq!(actions(&first).get("rotated"), Some(&n));
        eprintln!(
            "N={n} (TLS-only): lab and first tick in {:.1}s",
            setup.elapsed().as_secs_f64()
        );
        for &c in &concurrency {
            let commits = fleet.commits();
            let lab0 = measure::self_cpu();
            let healthy = fleet.rotate(&["--concurrency", &c.to_string()]);
            let lab_cpu = measure::self_cpu().saturating_sub(lab0);
            assert_eq!(healthy.code, 0, "healthy tick: {}", healthy.stderr);
            assert_eq!(actions(&healthy).get("healthy"), Some(&n));
            rows.push(Row {
                what: format!("healthy tick, TLS, c={c}"),
                n,
                wall: healthy.wall,
                cpu: healthy.cpu,
                peak_kib: Some(healthy.peak_kib),
                ssh: Some(0),
                commits: Some(fleet.commits() - commits),
                lab_cpu,
            });
        }
    }

    print(&rows);

    // The client's side of one SSH handshake, per key exchange.
    let node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    let rounds = if full { 30 } else { 2 };
    for kex in [None, Some("curve25519-sha256")] {
        let m = handshakes(&node, kex, rounds, 1);
        println!(
            "ssh handshake, KexAlgorithms {:<32} wall {:>6.1} ms, client CPU {:>5.1} ms (mean of {rounds})",
            kex.unwrap_or("(default)"),
            m.wall.as_secs_f64() * 1000.0 / rounds as f64,
            m.cpu.as_secs_f64() * 1000.0 / rounds as f64,
        );
    }
    // The machine's limit for session setup: 8 loops of `ssh true` at once.
    let m = handshakes(&node, Some("curve25519-sha256"), rounds, 8);
    let rate = (8 * rounds) as f64 / m.wall.as_secs_f64();
    println!("ssh sessions, curve25519-sha256, 8 at once: {rate:.1} sessions/s");
    for (n, ours, seq, par, before) in &ratios {
        if let Some(before) = before {
            println!(
                "N={n}, all rebuilt, c=8: baseline build {:.2}s, ratio to (b) {:.2}; this build {:.2}s, ratio to (b) {:.2}; this / baseline {:.2}",
                before.as_secs_f64(),
                before.as_secs_f64() / par.as_secs_f64(),
                ours.as_secs_f64(),
                ours.as_secs_f64() / par.as_secs_f64(),
                ours.as_secs_f64() / before.as_secs_f64(),
            );
        }
        let floor = *n as f64 / rate;
        println!(
            "N={n}, all rebuilt: spokekeeper {:.2}s (validates each against the live API); \
             (a) sequential {:.2}s: {:.1}x faster; (b) xargs -P 8 {:.2}s: ratio spokekeeper / (b) {:.2}; \
             floor (N sessions at {rate:.1}/s) {floor:.2}s: spokekeeper / floor {:.2}",
            ours.as_secs_f64(),
            seq.as_secs_f64(),
            seq.as_secs_f64() / ours.as_secs_f64(),
            par.as_secs_f64(),
            ours.as_secs_f64() / par.as_secs_f64(),
            ours.as_secs_f64() / floor
        );
    }
}

/// Every node rebuilt, then one `--concurrency 8` tick by `bin` (FLEET_BENCH_BASELINE):
/// its row, and its wall.
fn rebuilt_by(fleet: &mut Fleet, bin: &str, n: usize, rows: &mut Vec<Row>) -> Duration {
    for node in &mut fleet.nodes {
        node.rebuild();
    }
    let logins = ssh_logins(&fleet.nodes);
    let commits = fleet.commits();
    let lab0 = measure::self_cpu();
    let m = fleet.rotate_with(bin, &["--concurrency", "8"]);
    let lab_cpu = measure::self_cpu().saturating_sub(lab0);
    assert_eq!(m.code, 0, "baseline rebuilt tick: {}", m.stderr);
    assert_eq!(actions(&m).get("rotated"), Some(&n));
    rows.push(Row {
        what: "all rebuilt, c=8, baseline".into(),
        n,
        wall: m.wall,
        cpu: m.cpu,
        peak_kib: Some(m.peak_kib),
        ssh: Some(ssh_logins(&fleet.nodes) - logins),
        commits: Some(fleet.commits() - commits),
        lab_cpu,
    });
    m.wall
}

fn print(rows: &[Row]) {
    println!(
        "{:<34} {:>5} {:>9} {:>11} {:>9} {:>10} {:>5} {:>8} {:>9}",
        "run", "N", "wall s", "per spoke", "CPU s", "peak MiB", "SSH", "commits", "lab CPU s"
    );
    for r in rows {
        println!(
            "{:<34} {:>5} {:>9.2} {:>8.1} ms {:>9.2} {:>10} {:>5} {:>8} {:>9.2}",
            r.what,
            r.n,
            r.wall.as_secs_f64(),
            r.wall.as_secs_f64() * 1000.0 / r.n as f64,
            r.cpu.as_secs_f64(),
            r.peak_kib
                .map_or("-".into(), |k| format!("{:.1}", k as f64 / 1024.0)),
            r.ssh.map_or("-".into(), |s| s.to_string()),
            r.commits.map_or("-".into(), |c| c.to_string()),
            r.lab_cpu.as_secs_f64(),
        );
    }
}
