//! The fault matrix: each fault leaves every committed credential intact and valid,
//! reports clearly, and the next run recovers.

mod support;

use support::NodeOptions;
use support::fleet::{Fleet, action, authenticates, vectors};
use support::git::git;

fn set_config(fleet: &Fleet, from: &str, to: &str) {
    let text = std::fs::read_to_string(&fleet.config).unwrap();
    assert!(text.contains(from), "{from} not in the config");
    std::fs::write(&fleet.config, text.replace(from, to)).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn kubeconfig_truncated_mid_file() {
    let mut fleet = Fleet::new(&[NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed = fleet.remote_file(0);
    fleet.nodes[0].rebuild();
    let full = fleet.nodes[0].kubeconfig_bytes();
    fleet.nodes[0].write_file("k3s.yaml", &full[..full.len() * 2 / 3]);
    let (code, report, _) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1);
    assert_eq!(
        report["spokes"][0]["reason"]["kind"], "ca-changed",
        "{report}"
    );
    assert_eq!(report["spokes"][0]["stage"], "validate", "{report}");
    assert_eq!(
        fleet.remote_file(0),
        committed,
        "the committed credential is intact"
    );
    fleet.nodes[0].write_file("k3s.yaml", &full);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated");
    authenticates(&fleet.unsealed(0)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn api_answers_401_to_a_foreign_client_certificate() {
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    // spoke0's node serves a kubeconfig whose client certificate belongs to spoke1's cluster.
    let mut parts = fleet.nodes[0].parts().clone();
    let foreign = fleet.nodes[1].parts();
    parts.client_chain_pem = foreign.client_chain_pem.clone();
    parts.client_key_pem = foreign.client_key_pem.clone();
    let server = format!("https://127.0.0.1:{}", fleet.nodes[0].api_port);
    let text = support::kubeconfig_yaml(&server, &parts, None, "");
    fleet.nodes[0].write_file("k3s.yaml", text.as_bytes());
    let (code, report, _) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1);
    assert_eq!(report["spokes"][0]["stage"], "validate");
    let error = report["spokes"][0]["error"].as_str().unwrap();
    assert!(error.contains("401 Unauthorized"), "{error}");
    assert!(
        !fleet.output(0).exists(),
        "a credential that does not work is never written"
    );
    assert_eq!(
        action(&report, 1),
        "rotated",
        "the other spoke is not affected"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn committed_manifest_corrupted_by_hand() {
    let fleet = Fleet::new(&[NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    // Someone edits the file on the remote and breaks it.
    let other = fleet.dir.path().join("editor");
    git(
        fleet.dir.path(),
        &[
            "clone",
            "--quiet",
            fleet.remote.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    let file = other.join("fluxcd/spoke0-kubeconfig-sealed.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace("spokekeeper.io/ca-sha256", "spokekeeper.io/ca-sha265"),
    )
    .unwrap();
    git(
        &other,
        &[
            "-c",
            "user.name=e",
            "-c",
            "user.email=e@e",
            "commit",
            "--quiet",
            "-am",
            "hand edit",
        ],
    );
    git(&other, &["push", "--quiet", "origin", "HEAD:main"]);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        report["spokes"][0]["reason"]["kind"], "unreadable",
        "{report}"
    );
    assert!(
        report["spokes"][0]["reason"]["detail"]
            .as_str()
            .unwrap()
            .contains("ca-sha256"),
        "{report}"
    );
    assert_eq!(action(&report, 0), "rotated");
    authenticates(&fleet.unsealed(0)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sealing_certificate_replaced_reseals_every_spoke() {
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let old = vectors().join("key/cert.pem");
    let new = vectors().join("other-key/tls.crt");
    set_config(&fleet, old.to_str().unwrap(), new.to_str().unwrap());
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let keys = spokekeeper::seal::RecoveryKey::load_all(
        &std::fs::read(vectors().join("other-key/tls.key")).unwrap(),
        "other",
    )
    .unwrap();
    for i in 0..2 {
        assert_eq!(
            report["spokes"][i]["reason"]["kind"], "sealing-key-changed",
            "{report}"
        );
        let sealed =
            spokekeeper::seal::SealedSecret::parse(fleet.remote_file(i).as_bytes()).unwrap();
        let mut secret = sealed.unseal(&keys).expect("sealed to the new key");
        authenticates(&secret.data.remove("value").unwrap()).await;
    }
    assert!(fleet.remote_log()[0].contains("sealing key changed"));
}

#[tokio::test(flavor = "multi_thread")]
async fn sealing_certificate_expired_is_refused_and_nothing_changes() {
    let fleet = Fleet::new(&[NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed = fleet.remote_file(0);
    let expired = fleet.dir.path().join("expired.pem");
    // ring cannot generate RSA keys: sign with the vector key.
    let der = {
        use rsa::pkcs8::EncodePrivateKey;
        let k = spokekeeper::seal::RecoveryKey::load_all(
            &std::fs::read(vectors().join("key/tls.key")).unwrap(),
            "k",
        )
        .unwrap();
        k[0].private_key().to_pkcs8_der().unwrap()
    };
    let kp = rcgen::KeyPair::try_from(der.as_bytes()).unwrap();
    let mut params = rcgen::CertificateParams::new(vec![]).unwrap();
    params.not_before = time::OffsetDateTime::from_unix_timestamp(1_500_000_000).unwrap();
    params.not_after = time::OffsetDateTime::from_unix_timestamp(1_600_000_000).unwrap();
    std::fs::write(&expired, params.self_signed(&kp).unwrap().pem()).unwrap();
    set_config(
        &fleet,
        vectors().join("key/cert.pem").to_str().unwrap(),
        expired.to_str().unwrap(),
    );
    let (code, _, err) = fleet.rotate(&["--all", "--force"]);
    assert_eq!(code, 1);
    assert!(err.contains("expired on 2020-09-13T12:26:40Z"), "{err}");
    assert_eq!(fleet.remote_file(0), committed);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_runs_at_once_never_interleave() {
    let fleet = Fleet::new(&[NodeOptions::default()]);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(fleet.clone.join(".git/spokekeeper.lock"))
        .unwrap();
    lock.lock().unwrap();
    let (code, _, err) = fleet.rotate(&["--all"]);
    assert_eq!(code, 1);
    assert!(err.contains("another spokekeeper run holds"), "{err}");
    assert_eq!(fleet.remote_log().len(), 1);
    drop(lock);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    assert_eq!(fleet.remote_log().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_between_write_and_commit_or_commit_and_push() {
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    // Between commit and push: commit only, as a run killed before its push would leave it.
    set_config(&fleet, "repo:\n", "repo:\n  push: false\n");
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    assert_eq!(fleet.remote_log().len(), 1, "nothing pushed yet");
    // Between write and commit: a half-written change in the clone.
    std::fs::write(fleet.output(0), "half-written").unwrap();
    set_config(&fleet, "repo:\n  push: false\n", "repo:\n");
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["pushed"], true, "the unpushed commits went out");
    for i in 0..2 {
        assert_eq!(action(&report, i), "healthy", "kept, not redone: {report}");
        authenticates(&fleet.unsealed(i)).await;
    }
    assert_eq!(fleet.remote_log().len(), 3);
    let status = git(&fleet.clone, &["status", "--porcelain"]);
    assert!(status.trim().is_empty(), "{status}");
}
