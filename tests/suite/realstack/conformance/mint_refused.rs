//! Minting refused, on the mock and a real spoke alike: no signer, and a denied approval.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use super::mint::{CSRS, MINTED_CSR, condition_types, create_and_approve, poll_csr};
use super::{assert_same, call, client_from_yaml};
use serde_json::{Value, json};
use spokekeeper_lab::{ApiIdentity, ApiServer};
use support::Lab;
use support::realstack::kube::Etcd;
use support::realstack::spoke::RealSpoke;

/// Without a signer, nothing ever happens to an approved CSR: no certificate, no
/// condition but Approved, within a bound a client would wait.
async fn unsigned_transcript(admin: &kube::Client) -> Vec<(String, Value)> {
    let mut t = Vec::new();
    let (created, a) = create_and_approve(admin, MINTED_CSR).await;
    t.push(("create".into(), json!({"http": created.code})));
    t.push(("approve".into(), json!({"http": a.code})));
    let a = poll_csr(admin, MINTED_CSR, Duration::from_secs(8)).await;
    t.push((
        "8 s later".into(),
        json!({"http": a.code, "certificate": a.body["status"]["certificate"],
               "conditions": condition_types(&a.body)}),
    ));
    t
}

#[test]
fn without_a_signer_neither_the_mock_nor_a_real_spoke_signs() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let lab = Lab::new();
    let dir = support::scratch_dir();
    let etcd = Etcd::start(dir.path());
    let spoke = support::realstack::spoke::RealSpoke::start_with(
        &lab,
        &etcd,
        dir.path(),
        &support::realstack::spoke::SpokeOptions {
            signer: false,
            ..Default::default()
        },
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pki = spoke.node.pki();
    let mock = ApiServer::start(
        rt.handle(),
        SocketAddr::new(spoke.node.address, 0),
        ApiIdentity::new(pki, "v1.37.2").without_signer(),
    )
    .unwrap();
    let mock_url = format!("https://{}:{}", spoke.node.address, mock.port);
    let admin =
        |url: &str| client_from_yaml(&rt, &support::kubeconfig_yaml(url, &pki.parts, None, ""));
    let real = rt.block_on(unsigned_transcript(&admin(&spoke.api.url)));
    let emulated = rt.block_on(unsigned_transcript(&admin(&mock_url)));
    assert_same(&emulated, &real);
    assert_eq!(real[2].1["certificate"], Value::Null, "{real:#?}");
    assert_eq!(
        real[2].1["conditions"],
        json!([["Approved", "True", "SpokekeeperMint"]])
    );
    drop(mock);
}

/// An approval the spoke turns into a denial: the approver's answer and every later read
/// say Denied, and the signer (running) never signs.
async fn denied_transcript(admin: &kube::Client) -> Vec<(String, Value)> {
    let mut t = Vec::new();
    let (created, a) = create_and_approve(admin, MINTED_CSR).await;
    t.push(("create".into(), json!({"http": created.code})));
    t.push((
        "approve".into(),
        json!({"http": a.code, "conditions": condition_types(&a.body)}),
    ));
    let a = poll_csr(admin, MINTED_CSR, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = call(admin, "GET", &format!("{CSRS}/{MINTED_CSR}"), "", None).await;
    t.push((
        "read after the denial, and 2 s later".into(),
        json!({"http": a.code, "conditions": condition_types(&a.body),
               "certificate": a.body["status"]["certificate"],
               "later": later.body["status"]["certificate"]}),
    ));
    t
}

#[test]
fn a_denied_approval_reads_the_same_from_the_mock_and_a_real_spoke() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let lab = Lab::new();
    let dir = support::scratch_dir();
    let etcd = Etcd::start(dir.path());
    let spoke = RealSpoke::start(&lab, &etcd, dir.path());
    spoke.deny_csr_approvals();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pki = spoke.node.pki();
    let identity = ApiIdentity::new(pki, "v1.37.2");
    identity.objects().lock().unwrap().deny_approvals();
    let mock = ApiServer::start(
        rt.handle(),
        SocketAddr::new(spoke.node.address, 0),
        identity,
    )
    .unwrap();
    let mock_url = format!("https://{}:{}", spoke.node.address, mock.port);
    let admin =
        |url: &str| client_from_yaml(&rt, &support::kubeconfig_yaml(url, &pki.parts, None, ""));
    let real = rt.block_on(denied_transcript(&admin(&spoke.api.url)));
    let emulated = rt.block_on(denied_transcript(&admin(&mock_url)));
    assert_same(&emulated, &real);
    assert_eq!(
        real[2].1["conditions"],
        json!([["Denied", "True", "LabDenied"]]),
        "{real:#?}"
    );
    assert_eq!(real[2].1["later"], Value::Null);
    drop(mock);
}
