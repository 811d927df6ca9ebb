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
    crate::support::requires!(ROOT);
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
    crate::support::requires!(ROOT);
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
    crate::support::requires!(ROOT);
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
    crate::support::requires!(ROOT);
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
    crate::support::requires!(ROOT);
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

/// Serves TLS `version` on 127.0.0.1 with whichever certificate `current` holds at each
/// handshake, and rustls's default server session cache (TLS 1.2 session IDs) and
/// tickets (TLS 1.3): resumption is on offer.
fn swapping_server(
    current: std::sync::Arc<std::sync::Mutex<std::sync::Arc<rustls::sign::CertifiedKey>>>,
    version: &'static rustls::SupportedProtocolVersion,
) -> (String, tokio::task::JoinHandle<()>) {
    #[derive(Debug)]
    struct Current(std::sync::Arc<std::sync::Mutex<std::sync::Arc<rustls::sign::CertifiedKey>>>);
    impl rustls::server::ResolvesServerCert for Current {
        fn resolve(
            &self,
            _: rustls::server::ClientHello<'_>,
        ) -> Option<std::sync::Arc<rustls::sign::CertifiedKey>> {
            Some(self.0.lock().unwrap().clone())
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(std::sync::Arc::new(Current(current)));
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let serve = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    // Read to the client's close: the session tickets go out meanwhile.
                    let mut sink = Vec::new();
                    let _ = tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut sink).await;
                }
            });
        }
    });
    (url, serve)
}

/// A serving certificate renewed in place (k3s's listener swaps it without a restart) is
/// the one the next probe reports, probe after probe, over TLS 1.2 (a server behind an
/// older proxy) and 1.3: each is a full handshake, never a resumed session, which would
/// report the certificate of the session it resumes.
#[tokio::test]
async fn a_serving_certificate_renewed_in_place_is_seen_by_the_next_probe() {
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        renewed_in_place(version).await;
    }
}

async fn renewed_in_place(version: &'static rustls::SupportedProtocolVersion) {
    use std::sync::{Arc, Mutex};
    let certified = |pki: &spokekeeper_lab::Pki| {
        let key = rustls::crypto::ring::sign::any_supported_type(&pki.serving_key()).unwrap();
        Arc::new(rustls::sign::CertifiedKey::new(
            pki.serving_chain.clone(),
            key,
        ))
    };
    let options = spokekeeper_lab::PkiOptions {
        address: "127.0.0.1".parse().unwrap(),
        address_in_sans: true,
        client_cert_days: 365,
    };
    let (before, after) = (
        spokekeeper_lab::Pki::generate(&options),
        spokekeeper_lab::Pki::generate(&options),
    );
    let sha256 = |pki: &spokekeeper_lab::Pki| {
        spokekeeper::certs::fingerprint(&pki.serving_chain[0]).to_string()
    };
    let current = Arc::new(Mutex::new(certified(&before)));
    let (url, serve) = swapping_server(current.clone(), version);
    for _ in 0..3 {
        let seen = probe(&url, LIMIT).await.unwrap();
        assert_eq!(seen.serving_sha256.to_string(), sha256(&before));
    }
    *current.lock().unwrap() = certified(&after);
    for round in 0..3 {
        let seen = probe(&url, LIMIT).await.unwrap();
        assert_eq!(
            seen.serving_sha256.to_string(),
            sha256(&after),
            "{version:?}: probe {round} after the renewal reported the old certificate"
        );
    }
    serve.abort();
}
