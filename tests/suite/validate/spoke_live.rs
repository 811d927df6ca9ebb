//! Live validation against lab API servers: who a kubeconfig authenticates as, and a
//! clear reason when it does not work.

use crate::support;

use std::time::{Duration, Instant};

use spokekeeper::secret::SecretBytes;
use spokekeeper::spoke::{LiveError, LiveReport, check_live, read_over_ssh};
use support::{Hostile, KubeconfigParts, Lab, Node, NodeOptions, kubeconfig_yaml};

const LIMIT: Duration = Duration::from_secs(10);

fn api_only() -> NodeOptions {
    NodeOptions {
        sshd: false,
        ..NodeOptions::default()
    }
}

/// `node`'s k3s.yaml read over SSH and, as the kubeconfig module does, pointed at the
/// node's address instead of 127.0.0.1.
async fn extracted_for_the_hub(node: &Node) -> SecretBytes {
    let extracted = read_over_ssh(
        &node.address_string(),
        &node.ssh_settings("root"),
        node.kubeconfig_path_str(),
    )
    .await
    .unwrap();
    let text = std::str::from_utf8(extracted.expose()).unwrap();
    SecretBytes::from(text.replace("https://127.0.0.1:", &format!("https://{}:", node.address)))
}

/// check_live against `node` with its CA but the client certificate of another cluster
/// (a fresh node of `lab`); the error.
async fn check_with_a_foreign_certificate(lab: &Lab, node: &Node) -> LiveError {
    let other = lab.add_node(api_only());
    let mixed = KubeconfigParts {
        ca_pem: node.parts().ca_pem,
        ..other.parts()
    };
    let text = kubeconfig_yaml(&node.api_url, &mixed, None, "/nonexistent");
    check_live(&SecretBytes::from(text), LIMIT)
        .await
        .unwrap_err()
}

#[tokio::test]
async fn a_good_kubeconfig_authenticates_and_names_its_user() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        git_version: "v1.32.5+k3s1".into(),
        ..api_only()
    });
    let report = check_live(&node.hub_kubeconfig(), LIMIT).await.unwrap();
    assert_eq!(report.username, "system:admin");
    assert_eq!(report.groups, ["system:masters", "system:authenticated"]);
    assert_eq!(report.git_version, "v1.32.5+k3s1");
    assert_eq!(report.platform, "linux/amd64");
    assert_eq!(report.server, format!("{}/", node.api_url));
}

#[tokio::test]
async fn the_kubeconfig_extracted_over_ssh_works_once_pointed_at_the_node() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions::default());
    let report = check_live(&extracted_for_the_hub(&node).await, LIMIT)
        .await
        .unwrap();
    assert_eq!(report.username, "system:admin");
}

#[tokio::test]
async fn an_old_ca_fails_as_unknown_authority() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let mut node = lab.add_node(api_only());
    let stale = node.hub_kubeconfig();
    node.rebuild();
    let err = check_live(&stale, LIMIT).await.unwrap_err();
    assert!(matches!(err, LiveError::UnknownAuthority { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("x509: certificate signed by unknown authority"),
        "{err}"
    );
    // The fresh one works.
    assert!(check_live(&node.hub_kubeconfig(), LIMIT).await.is_ok());
}

#[tokio::test]
async fn an_expired_client_certificate_is_unauthorized() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        client_cert_days: -1,
        ..api_only()
    });
    let err = check_live(&node.hub_kubeconfig(), LIMIT).await.unwrap_err();
    assert!(matches!(err, LiveError::Unauthorized { .. }), "{err}");
    assert!(err.to_string().contains("401 Unauthorized"), "{err}");
    assert!(err.to_string().contains("expired"), "{err}");
}

#[tokio::test]
async fn a_client_certificate_from_another_cluster_is_unauthorized() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(api_only());
    let err = check_with_a_foreign_certificate(&lab, &node).await;
    assert!(matches!(err, LiveError::Unauthorized { .. }), "{err}");
}

#[tokio::test]
async fn a_server_certificate_without_the_address_fails_tls() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        address_in_sans: false,
        ..api_only()
    });
    let err = check_live(&node.hub_kubeconfig(), LIMIT).await.unwrap_err();
    assert!(matches!(err, LiveError::Tls { .. }), "{err}");
    assert!(
        err.to_string().contains("does not cover this address"),
        "{err}"
    );
}

#[tokio::test]
async fn an_api_that_is_down_is_unreachable() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let mut node = lab.add_node(api_only());
    node.stop_api();
    let err = check_live(&node.hub_kubeconfig(), LIMIT).await.unwrap_err();
    assert!(matches!(err, LiveError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("connection refused"), "{err}");
}

#[tokio::test]
async fn a_silent_server_is_cut_off_by_the_timeout() {
    crate::support::requires!(ROOT);
    let _quiet = support::timing::exclusive();
    let lab = Lab::new();
    let node = lab.add_node(api_only());
    let (addr, hold) = support::net::silent_server().await;
    let text = kubeconfig_yaml(
        &format!("https://{addr}"),
        &node.parts(),
        None,
        "/nonexistent",
    );
    let started = Instant::now();
    let err = check_live(&SecretBytes::from(text), Duration::from_secs(2))
        .await
        .unwrap_err();
    let took = started.elapsed();
    drop(hold);
    assert!(matches!(err, LiveError::TimedOut { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("https://{addr}/ did not answer within 2s")),
        "{err}"
    );
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_millis(3500),
        "took {took:?}"
    );
}

#[tokio::test]
async fn hostile_kubeconfigs_from_a_node_are_refused_before_use() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    for hostile in [
        Hostile::ExecPlugin,
        Hostile::InsecureSkipTlsVerify,
        Hostile::CaFile,
        Hostile::AuthProvider,
    ] {
        let node = lab.add_node(NodeOptions {
            hostile: Some(hostile),
            ..NodeOptions::default()
        });
        let err = check_live(&extracted_for_the_hub(&node).await, LIMIT)
            .await
            .unwrap_err();
        assert!(matches!(err, LiveError::Unsafe(_)), "{hostile:?}: {err}");
        assert!(!node.exec_marker().exists(), "the exec plugin ran");
    }
}

fn playing(git_version: &str) -> NodeOptions {
    NodeOptions {
        git_version: git_version.into(),
        ..api_only()
    }
}

/// What check_live reports for a fresh node playing `git_version`, which it must name.
async fn live_report_of(git_version: &str) -> LiveReport {
    let lab = Lab::new();
    let node = lab.add_node(playing(git_version));
    let report = check_live(&node.hub_kubeconfig(), LIMIT).await.unwrap();
    assert_eq!(report.git_version, git_version);
    report
}

#[tokio::test]
async fn a_1_28_spoke_answers_the_v1_self_subject_review() {
    crate::support::requires!(ROOT);
    let report = live_report_of("v1.28.15+k3s1").await;
    assert_eq!(report.username, "system:admin");
}

#[tokio::test]
async fn a_1_27_spoke_answers_the_v1beta1_self_subject_review() {
    crate::support::requires!(ROOT);
    let report = live_report_of("v1.27.16+k3s1").await;
    assert_eq!(report.username, "system:admin");
    assert_eq!(report.groups, ["system:masters", "system:authenticated"]);
}

#[tokio::test]
async fn a_1_26_spoke_is_validated_by_an_access_review_with_the_user_unknown() {
    crate::support::requires!(ROOT);
    let report = live_report_of("v1.26.15+k3s1").await;
    assert_eq!(report.username, "(unknown: pre-1.27 API)");
    assert!(report.groups.is_empty());
}

#[tokio::test]
async fn a_credential_taken_as_anonymous_fails_on_every_version() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    for version in ["v1.26.15+k3s1", "v1.27.16+k3s1", "v1.33.1+k3s1"] {
        // Anonymous auth on (kube-apiserver's default): a foreign client certificate is
        // not a 401 but system:anonymous, who may read /version and nothing more.
        let node = lab.add_node(NodeOptions {
            anonymous: true,
            ..playing(version)
        });
        let err = check_with_a_foreign_certificate(&lab, &node).await;
        assert!(
            matches!(err, LiveError::Anonymous { .. }),
            "{version}: {err}"
        );
        assert!(err.to_string().contains("system:anonymous"), "{err}");
        // Its own credential still works.
        check_live(&node.hub_kubeconfig(), LIMIT).await.unwrap();
    }
}

#[tokio::test]
async fn a_1_26_spoke_without_anonymous_auth_refuses_a_foreign_certificate() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(playing("v1.26.15+k3s1"));
    let err = check_with_a_foreign_certificate(&lab, &node).await;
    assert!(matches!(err, LiveError::Unauthorized { .. }), "{err}");
}
