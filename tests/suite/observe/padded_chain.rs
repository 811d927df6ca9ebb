//! A hostile spoke serving a padded chain (150 certificates after its own) while the
//! other spokes of the tick rotate (issue 39, defect 4): the padded one is refused at
//! the probe, naming the caps, without its chain being judged; the others rotate within
//! their deadlines. The lab's API serves the chain the test sets.

use crate::support;

use std::time::{Duration, Instant};

use support::NodeOptions;
use support::fleet::{Fleet, action};

/// `n` self-signed certificates of one name, as a padding: names alike are what a
/// climb comparing names first cannot skip.
fn padding(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|_| {
            let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            p.distinguished_name.push(rcgen::DnType::CommonName, "pad");
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let key = rcgen::KeyPair::generate().unwrap();
            p.self_signed(&key).unwrap().der().to_vec()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_padded_chain_is_refused_while_the_other_spokes_rotate() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::new(&vec![NodeOptions::default(); 3]);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    fleet.nodes[0].serve_also(&padding(150));
    let started = Instant::now();
    let (code, report, err) = fleet.rotate_json(&["--all", "--force"]);
    let took = started.elapsed();
    assert_ne!(code, 0, "{report:#}\n{err}");
    let padded = &report["spokes"][0];
    assert_eq!(action(&report, 0), "failed", "{padded:#}");
    let error = padded["error"].as_str().unwrap();
    for needle in [
        "presented a chain of 152 certificates",
        "over the 16 certificates or 65536 bytes",
        "--tls-cert-file",
    ] {
        assert!(error.contains(needle), "{needle:?} in {error}");
    }
    for i in 1..3 {
        assert_eq!(action(&report, i), "rotated", "{report:#}");
    }
    assert!(took < Duration::from_secs(30), "the tick took {took:?}");
    // `check` grades the padded spoke's API as unreachable, saying why.
    let (_, out, err) = fleet.run(&["check", "-o", "json"]);
    let findings: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let api = findings["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["spoke"] == "spoke0" && f["cert"] == "api")
        .unwrap_or_else(|| panic!("{findings:#}"));
    assert_eq!(api["alertname"], "SpokekeeperSpokeUnreachable", "{api:#}");
    assert!(
        api["detail"].as_str().unwrap().contains("152 certificates"),
        "{api:#}"
    );
}
