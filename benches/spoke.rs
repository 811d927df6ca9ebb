//! Reaching many spokes at once: TLS probes, SSH extractions and live checks against
//! lab nodes, all concurrent. `cargo bench --bench spoke` runs the full sizes;
//! `cargo test` runs it once with tiny sizes as a smoke test.
//!
//! Sizes can be overridden: SPOKE_BENCH_PROBE=10,100,500 SPOKE_BENCH_EXTRACT=10,50
//! SPOKE_BENCH_LIVE=10,100. Memory: this process's VmRSS when the phase starts (after
//! the nodes exist) and its VmHWM during the phase (reset first); both include the lab's
//! own API servers (same process) and allocator pages kept from earlier phases, not the
//! ssh client processes.

use spokekeeper_test_support as support;

use std::future::Future;
use std::time::{Duration, Instant};

use spokekeeper::spoke::{CaCheck, check_live, probe, read_over_ssh};
use support::{Lab, Node, NodeOptions};

struct Row {
    phase: &'static str,
    n: usize,
    setup: Duration,
    wall: Duration,
    latencies: Vec<Duration>,
    failures: usize,
    start_kib: Option<u64>,
    peak_kib: Option<u64>,
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let sizes = |var: &str, full_sizes: &[usize], smoke: &[usize]| -> Vec<usize> {
        match std::env::var(var) {
            Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
            Err(_) if full => full_sizes.to_vec(),
            Err(_) => smoke.to_vec(),
        }
    };
    let probe_sizes = sizes("SPOKE_BENCH_PROBE", &[10, 100, 500], &[2]);
    let extract_sizes = sizes("SPOKE_BENCH_EXTRACT", &[10, 50], &[1]);
    let live_sizes = sizes("SPOKE_BENCH_LIVE", &[10, 100], &[1]);

    support::install_crypto_provider();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "spoke benchmark: {cores} cores, {} build",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    let mut rows = Vec::new();

    let api_only = NodeOptions {
        sshd: false,
        ..NodeOptions::default()
    };
    for &n in &probe_sizes {
        rows.push(phase(&rt, &lab, "probe (TLS)", n, &api_only, |node| {
            let url = node.api_url.clone();
            let ca = node.server_ca_der();
            async move {
                let report = probe(&url, Duration::from_secs(30))
                    .await
                    .map_err(|e| e.to_string())?;
                match report.check_ca(&ca) {
                    CaCheck::Verified => Ok(()),
                    other => Err(format!("{url}: {other:?}")),
                }
            }
        }));
    }

    let ssh_only = NodeOptions {
        api: false,
        ..NodeOptions::default()
    };
    for &n in &extract_sizes {
        rows.push(phase(&rt, &lab, "extract (SSH)", n, &ssh_only, |node| {
            let address = node.address_string();
            let settings = node.ssh_settings("root");
            let path = node.kubeconfig_path_str().to_owned();
            let expected = node.kubeconfig_bytes();
            async move {
                let got = read_over_ssh(&address, &settings, &path)
                    .await
                    .map_err(|e| e.to_string())?;
                if got.expose() == &expected[..] {
                    Ok(())
                } else {
                    Err(format!("{address}: wrong bytes"))
                }
            }
        }));
    }

    for &n in &live_sizes {
        rows.push(phase(&rt, &lab, "live (kube)", n, &api_only, |node| {
            let kubeconfig = node.hub_kubeconfig();
            async move {
                let report = check_live(&kubeconfig, Duration::from_secs(30))
                    .await
                    .map_err(|e| e.to_string())?;
                if report.username == "system:admin" {
                    Ok(())
                } else {
                    Err(report.username)
                }
            }
        }));
    }

    print(&rows);
    let failed: usize = rows.iter().map(|r| r.failures).sum();
    assert_eq!(failed, 0, "{failed} operations failed");
}

fn phase<F, Fut>(
    rt: &tokio::runtime::Runtime,
    lab: &Lab,
    name: &'static str,
    n: usize,
    opts: &NodeOptions,
    op: F,
) -> Row
where
    F: Fn(&Node) -> Fut,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let started = Instant::now();
    let nodes = lab.add_nodes(n, opts);
    let setup = started.elapsed();
    let ops: Vec<Fut> = nodes.iter().map(&op).collect();
    let start_kib = support::rss_kib();
    support::reset_peak_rss();
    let started = Instant::now();
    let results = rt.block_on(async {
        let tasks: Vec<_> = ops
            .into_iter()
            .map(|fut| {
                tokio::spawn(async move {
                    let t = Instant::now();
                    let r = fut.await;
                    (t.elapsed(), r)
                })
            })
            .collect();
        let mut out = Vec::with_capacity(tasks.len());
        for t in tasks {
            out.push(t.await.expect("task"));
        }
        out
    });
    let wall = started.elapsed();
    let peak_kib = support::peak_rss_kib();
    let mut failures = 0;
    for (_, r) in &results {
        if let Err(e) = r {
            failures += 1;
            if failures <= 3 {
                eprintln!("{name}: {e}");
            }
        }
    }
    drop(nodes);
    Row {
        phase: name,
        n,
        setup,
        wall,
        latencies: results.into_iter().map(|(t, _)| t).collect(),
        failures,
        start_kib,
        peak_kib,
    }
}

fn print(rows: &[Row]) {
    println!(
        "{:<14} {:>5} {:>9} {:>10} {:>12} {:>10} {:>10} {:>11} {:>11} {:>6}",
        "phase",
        "N",
        "setup s",
        "wall ms",
        "wall/N ms",
        "p50 ms",
        "max ms",
        "RSS0 MiB",
        "VmHWM MiB",
        "failed"
    );
    for r in rows {
        let mut l = r.latencies.clone();
        l.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let p50 = l.get(l.len() / 2).copied().unwrap_or_default();
        let max = l.last().copied().unwrap_or_default();
        println!(
            "{:<14} {:>5} {:>9.1} {:>10.1} {:>12.2} {:>10.1} {:>10.1} {:>11} {:>11} {:>6}",
            r.phase,
            r.n,
            r.setup.as_secs_f64(),
            ms(r.wall),
            ms(r.wall) / r.n as f64,
            ms(p50),
            ms(max),
            mib(r.start_kib),
            mib(r.peak_kib),
            r.failures
        );
    }
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or("?".into(), |k| format!("{:.1}", k as f64 / 1024.0))
}
