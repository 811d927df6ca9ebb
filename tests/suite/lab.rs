//! The lab itself: nodes are isolated, k3s-shaped, answer like the API server, and
//! leave nothing running behind them.

use crate::support;

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use support::procs::sshd_pids_in;
use support::{Lab, NodeOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn nodes_are_isolated_and_everything_stops_on_drop() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let nodes = lab.add_nodes(3, &NodeOptions::default());
    let mut addresses: Vec<_> = nodes.iter().map(|n| n.address).collect();
    addresses.sort();
    addresses.dedup();
    assert_eq!(addresses.len(), 3, "each node has its own address");
    for n in &nodes {
        assert_ne!(n.address, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(sshd_pids_in(&n.dir).len(), 1);
        assert!(TcpStream::connect((n.address, n.ssh_port)).is_ok());
        assert!(TcpStream::connect((n.address, n.api_port)).is_ok());
        let mode = std::fs::metadata(&n.kubeconfig_path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "k3s.yaml is root-only like on a real node");
    }
    let gone: Vec<_> = nodes
        .iter()
        .map(|n| (n.address, n.ssh_port, n.api_port, n.dir.clone()))
        .collect();
    drop(nodes);
    // The address may already be another test's node: look for this node's own sshd and
    // sudoers rule (both name its directory), not for whatever serves the address now.
    for (address, ssh, api, dir) in gone {
        assert!(
            sshd_pids_in(&dir).is_empty(),
            "sshd for {address} still runs"
        );
        assert!(TcpStream::connect((address, ssh)).is_err());
        assert!(TcpStream::connect((address, api)).is_err());
        assert!(!dir.exists());
        let sudoers = format!(
            "/etc/sudoers.d/spokekeeper-lab-{}",
            address.to_string().replace('.', "-")
        );
        assert!(
            !std::fs::read_to_string(&sudoers)
                .is_ok_and(|rules| rules.contains(&*dir.to_string_lossy())),
            "{sudoers} left behind"
        );
    }
}

#[test]
fn a_panicking_test_still_stops_its_node() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let result = std::thread::spawn(move || {
        let node = lab.add_node(NodeOptions::default());
        assert_eq!(sshd_pids_in(&node.dir).len(), 1);
        tx.send(node.dir.clone()).unwrap();
        panic!("test failure while the node runs");
    })
    .join();
    assert!(result.is_err());
    let dir = rx.recv().unwrap();
    assert!(sshd_pids_in(&dir).is_empty());
}

#[test]
fn kubeconfig_is_k3s_shaped() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        sshd: false,
        ..NodeOptions::default()
    });
    let text = String::from_utf8(node.kubeconfig_bytes()).unwrap();
    assert!(
        text.starts_with("apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: ")
    );
    assert!(text.contains(&format!(
        "    server: https://127.0.0.1:{}\n  name: default\n",
        node.api_port
    )));
    assert!(text.contains(
        "current-context: default\nkind: Config\npreferences: {}\nusers:\n- name: default\n"
    ));
    let key = String::from_utf8(node.parts().client_key_pem.into_bytes()).unwrap();
    assert!(key.starts_with("-----BEGIN EC PRIVATE KEY-----\n"));
    let chain = node.parts().client_chain_pem;
    assert_eq!(
        chain.matches("-----BEGIN CERTIFICATE-----").count(),
        2,
        "leaf + client CA"
    );
    let hub = String::from_utf8(node.hub_kubeconfig().expose().to_vec()).unwrap();
    assert!(hub.contains(&format!("    server: {}\n", node.api_url)));
}

/// Raw HTTP/1.1 over TLS, optionally with a client certificate: the wire as kubectl sees it.
async fn raw_request(
    addr: SocketAddr,
    client: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    request: &str,
) -> String {
    #[derive(Debug)]
    struct AcceptAny;
    impl rustls::client::danger::ServerCertVerifier for AcceptAny {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            rustls::crypto::ring::default_provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .dangerous()
    .with_custom_certificate_verifier(Arc::new(AcceptAny));
    let config = match client {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).unwrap(),
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::from(addr.ip());
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_string(&mut out))
        .await
        .unwrap()
        .ok();
    out
}

fn identity_of(node: &support::Node) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let parts = node.parts();
    let chain =
        rustls::pki_types::pem::PemObject::pem_slice_iter(parts.client_chain_pem.as_bytes())
            .collect::<Result<Vec<CertificateDer<'static>>, _>>()
            .unwrap();
    let key =
        rustls::pki_types::pem::PemObject::from_pem_slice(parts.client_key_pem.as_bytes()).unwrap();
    (chain, key)
}

#[tokio::test]
async fn api_answers_like_kube_apiserver() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        sshd: false,
        ..NodeOptions::default()
    });
    let other = lab.add_node(NodeOptions {
        sshd: false,
        ..NodeOptions::default()
    });
    let addr = SocketAddr::new(node.address, node.api_port);
    let get = "GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

    // No certificate, or another cluster's: the handshake succeeds, the request gets 401.
    for client in [None, Some(identity_of(&other))] {
        let resp = raw_request(addr, client, get).await;
        assert!(resp.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{resp}");
        assert!(
            resp.to_ascii_lowercase()
                .contains("content-type: application/json\r\n"),
            "{resp}"
        );
        let body = resp.split_once("\r\n\r\n").unwrap().1;
        let status: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            status,
            serde_json::json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                               "message":"Unauthorized","reason":"Unauthorized","code":401})
        );
    }

    let resp = raw_request(addr, Some(identity_of(&node)), get).await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    let info: serde_json::Value =
        serde_json::from_str(resp.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(info["gitVersion"], "v1.33.1+k3s1");
    assert_eq!(info["platform"], "linux/amd64");

    let body =
        r#"{"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1","metadata":{}}"#;
    let post = format!(
        "POST /apis/authentication.k8s.io/v1/selfsubjectreviews HTTP/1.1\r\nHost: x\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let resp = raw_request(addr, Some(identity_of(&node)), &post).await;
    assert!(resp.starts_with("HTTP/1.1 201 Created\r\n"), "{resp}");
    let review: serde_json::Value =
        serde_json::from_str(resp.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(review["kind"], "SelfSubjectReview");
    assert_eq!(review["status"]["userInfo"]["username"], "system:admin");
    assert_eq!(
        review["status"]["userInfo"]["groups"],
        serde_json::json!(["system:masters", "system:authenticated"])
    );

    let resp = raw_request(
        addr,
        Some(identity_of(&node)),
        "GET /api/v1/secrets HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 404 Not Found\r\n"), "{resp}");
}

#[test]
fn visudo_guards_the_sudoers_drop_in() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let mut node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    let err = node
        .set_sudoers("spokelab ALL=(root) NOPASSWD /usr/bin/cat\n")
        .unwrap_err();
    assert!(err.contains("visudo rejected"), "{err}");
}

#[tokio::test]
async fn the_emulated_apis_bindings_survive_a_restart_not_a_rebuild() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let mut node = lab.add_node(NodeOptions {
        sshd: false,
        ..NodeOptions::default()
    });
    let body = r#"{"metadata":{"name":"kept"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},"subjects":[{"kind":"User","name":"u"}]}"#;
    let post = format!(
        "POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let get = "GET /apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kept HTTP/1.1\r\n\
               Host: x\r\nConnection: close\r\n\r\n";
    let addr = SocketAddr::new(node.address, node.api_port);
    let resp = raw_request(addr, Some(identity_of(&node)), &post).await;
    assert!(resp.starts_with("HTTP/1.1 201 Created\r\n"), "{resp}");

    // Like an API server restarted over the same etcd.
    node.stop_api();
    node.start_api();
    let resp = raw_request(addr, Some(identity_of(&node)), get).await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    assert_eq!(
        node.api_objects().lock().unwrap().binding_names(),
        vec!["kept"]
    );

    // A reinstall starts over.
    node.rebuild();
    let resp = raw_request(addr, Some(identity_of(&node)), get).await;
    assert!(resp.starts_with("HTTP/1.1 404 Not Found\r\n"), "{resp}");
}
