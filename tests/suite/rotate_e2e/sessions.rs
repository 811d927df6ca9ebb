//! `--concurrency` bounds the spokes worked on at once, and so the SSH sessions open.

use crate::support;

use support::NodeOptions;
use support::fleet::{Fleet, vectors};
use support::git::git;

/// Established TCP connections to `node`'s sshd, seen from the client's side
/// (/proc/net/tcp: a remote address `node`:`port` in state 01).
fn sessions_to(node: &support::Node) -> usize {
    let std::net::IpAddr::V4(ip) = node.address else {
        panic!("lab nodes are IPv4: {}", node.address)
    };
    let remote = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(ip.octets()),
        node.ssh_port
    );
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(2) == Some(&remote.as_str()) && f.get(3) == Some(&"01")
        })
        .count()
}

/// Four rebuilt spokes, every sshd stopped (a connect succeeds, nothing answers), and
/// `--concurrency 2`: two spokes reach extraction and two SSH connections are open while
/// both sessions hang, no more; once the nodes answer, all four rotate and are pushed in
/// configuration order.
#[tokio::test(flavor = "multi_thread")]
async fn concurrency_bounds_the_ssh_sessions_open_at_once() {
    crate::support::requires!(ROOT);
    use spokekeeper::rotate::{self, Options, Progress, Step};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    support::install_crypto_provider();
    let mut fleet = Fleet::new(&vec![NodeOptions::default(); 4]);
    let spokes = fleet.nodes.iter().enumerate();
    spokekeeper_lab::config::ConfigBuilder::new(&fleet.clone, vectors().join("key/cert.pem"))
        .spokes(spokes.map(|(i, n)| n.spoke(&format!("spoke{i}"), "600s")))
        .write(&fleet.config)
        .unwrap();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    let base = git(&fleet.clone, &["rev-parse", "HEAD"]).trim().to_string();
    for node in &mut fleet.nodes {
        node.rebuild();
        node.sigstop();
    }

    let ctx = fleet.context().await;
    let extracting: Arc<Mutex<Vec<String>>> = Arc::default();
    let heard = extracting.clone();
    let options = Options {
        concurrency: 2,
        progress: Progress::new(move |step| {
            if let Step::Stage {
                spoke,
                stage: "extract and validate",
            } = step
            {
                heard.lock().unwrap().push(spoke.to_string());
            }
        }),
        ..Options::default()
    };
    let watch = async {
        let deadline = Instant::now() + Duration::from_secs(120);
        while extracting.lock().unwrap().len() < 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Time for a third spoke and connection to show, were the bound not held.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let reached = extracting.lock().unwrap().clone();
        let open: Vec<usize> = fleet.nodes.iter().map(sessions_to).collect();
        for node in &fleet.nodes {
            node.sigcont();
        }
        (reached, open)
    };
    let (report, (reached, open)) = tokio::join!(rotate::tick(&ctx, &options), watch);
    let report = report.unwrap();

    assert_eq!(reached.len(), 2, "spokes at extraction: {reached:?}");
    assert_eq!(
        open.iter().sum::<usize>(),
        2,
        "SSH connections per node while both sessions hang: {open:?}"
    );
    assert!(open.iter().all(|&n| n <= 1), "{open:?}");
    for (i, spoke) in report.spokes.iter().enumerate() {
        assert!(
            matches!(spoke.outcome, rotate::Outcome::Rotated { .. }),
            "spoke{i}: {:?}",
            spoke.outcome
        );
    }
    assert!(report.pushed);
    let pushed: Vec<String> = git(
        &fleet.remote,
        &["log", "--reverse", "--format=%s", &format!("{base}..main")],
    )
    .lines()
    .map(|s| s.split(':').next().unwrap_or_default().to_string())
    .collect();
    assert_eq!(pushed, ["spoke0", "spoke1", "spoke2", "spoke3"]);
}
