//! TLS probe against lab API servers: healthy, rebuilt (CA changed), SANs, and the
//! ways a probe can fail without saying anything about the CA.

use crate::support;

use std::time::{Duration, Instant};

use spokekeeper::spoke::{CaCheck, ProbeError, probe};
use support::{Lab, NodeOptions};
use time::OffsetDateTime;

const LIMIT: Duration = Duration::from_secs(5);

fn api_only() -> NodeOptions {
    NodeOptions {
        sshd: false,
        ..NodeOptions::default()
    }
}

#[tokio::test]
async fn a_healthy_spoke_verifies_against_its_ca() {
    let lab = Lab::new();
    let node = lab.add_node(api_only());
    let report = probe(&node.api_url, LIMIT).await.unwrap();

    assert_eq!(report.check_ca(&node.server_ca_der()), CaCheck::Verified);
    assert_eq!(report.server, format!("{}:{}", node.address, node.api_port));
    assert_eq!(
        report.chain.len(),
        2,
        "k3s presents the serving certificate and its CA"
    );
    assert_eq!(report.chain[1], node.server_ca_der());
    assert!(report.address_in_sans);
    assert!(report.ip_addresses.contains(&node.address));
    assert!(
        report
            .dns_names
            .iter()
            .any(|n| n == "kubernetes.default.svc")
    );
    let days = (report.not_after - OffsetDateTime::now_utc()).whole_days();
    assert!(
        (364..=365).contains(&days),
        "serving cert valid for {days} more days"
    );
    assert_eq!(
        report.serving_sha256.to_string(),
        spokekeeper::certs::fingerprint(&report.chain[0]).to_string()
    );

    // The client CA (or any other certificate) does not sign the serving chain.
    assert_eq!(
        report.check_ca(&node.client_ca_der()),
        CaCheck::NotSignedByCa
    );
    assert_eq!(report.check_ca(b"not a certificate"), CaCheck::UnusableCa);
}

#[tokio::test]
async fn a_rebuilt_spoke_shows_up_as_a_ca_change() {
    let lab = Lab::new();
    let mut node = lab.add_node(api_only());
    let recorded_ca = node.server_ca_der();
    let before = probe(&node.api_url, LIMIT).await.unwrap();
    assert_eq!(before.check_ca(&recorded_ca), CaCheck::Verified);

    node.rebuild();
    let after = probe(&node.api_url, LIMIT).await.unwrap();
    assert_eq!(after.check_ca(&recorded_ca), CaCheck::NotSignedByCa);
    assert_eq!(after.check_ca(&node.server_ca_der()), CaCheck::Verified);
    assert_ne!(before.serving_sha256, after.serving_sha256);
    assert_eq!(
        after.server, before.server,
        "same address and port after a rebuild"
    );
}

#[tokio::test]
async fn an_address_missing_from_the_sans_is_reported() {
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        address_in_sans: false,
        ..api_only()
    });
    let report = probe(&node.api_url, LIMIT).await.unwrap();
    assert!(!report.address_in_sans);
    assert!(!report.ip_addresses.contains(&node.address));
    assert!(
        report.ip_addresses.contains(&"127.0.0.1".parse().unwrap()),
        "{:?}",
        report.ip_addresses
    );
    // Still the same CA: coverage and CA are separate findings.
    assert_eq!(report.check_ca(&node.server_ca_der()), CaCheck::Verified);
}

#[tokio::test]
async fn an_api_that_is_down_is_unreachable_not_a_ca_change() {
    let lab = Lab::new();
    let mut node = lab.add_node(api_only());
    node.stop_api();
    let err = probe(&node.api_url, LIMIT).await.unwrap_err();
    assert!(matches!(err, ProbeError::Refused { .. }), "{err}");
    assert!(err.is_unreachable());
    assert!(
        err.to_string()
            .contains("is unreachable: connection refused"),
        "{err}"
    );

    node.start_api();
    let report = probe(&node.api_url, LIMIT).await.unwrap();
    assert_eq!(report.check_ca(&node.server_ca_der()), CaCheck::Verified);
}

#[tokio::test]
async fn a_silent_server_times_out_within_the_limit() {
    let _quiet = support::timing::exclusive();
    let (addr, hold) = support::net::silent_server().await;
    let started = Instant::now();
    let err = probe(&format!("https://{addr}"), Duration::from_millis(1500))
        .await
        .unwrap_err();
    let took = started.elapsed();
    drop(hold);
    assert!(
        matches!(
            err,
            ProbeError::TimedOut {
                phase: "in the TLS handshake",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.is_unreachable());
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_millis(3000),
        "took {took:?}"
    );
}

#[tokio::test]
async fn a_port_that_is_not_tls_is_named_as_such() {
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        api: true,
        ..NodeOptions::default()
    });
    let ssh_url = format!("https://{}:{}", node.address, node.ssh_port);
    let err = probe(&ssh_url, LIMIT).await.unwrap_err();
    assert!(matches!(err, ProbeError::NotTls { .. }), "{err}");
    assert!(!err.is_unreachable());
}
