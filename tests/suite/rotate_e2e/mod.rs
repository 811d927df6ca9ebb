//! The rotation pipeline end to end, through the binary and a spokekeeper.yaml: real sshd
//! nodes, real TLS API servers, a real bare git remote, the upstream sealing key.

use crate::support;

use std::path::Path;

use support::fleet::{Fleet, action, authenticates, vectors};
use support::git::{clone, git};
use support::{Hostile, NodeOptions};

#[tokio::test(flavor = "multi_thread")]
async fn first_run_seals_every_spoke_second_commits_nothing_rebuild_commits_one() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::new(&[
        NodeOptions::default(),
        NodeOptions::default(),
        NodeOptions::default(),
    ]);
    let (code, out, err) = fleet.rotate(&["--all"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("SPOKE") && out.contains("rotated") && out.contains("initial credential"),
        "{out}"
    );
    let log = fleet.remote_log();
    assert_eq!(log.len(), 4, "seed + one commit per spoke, pushed: {log:?}");
    for i in 0..3 {
        assert!(
            log.contains(&format!("spoke{i}: rotate kubeconfig: initial credential")),
            "{log:?}"
        );
        let kc = fleet.unsealed(i);
        let text = std::str::from_utf8(kc.expose()).unwrap();
        let server = format!(
            "https://{}:{}",
            fleet.nodes[i].address, fleet.nodes[i].api_port
        );
        assert!(
            text.contains(&format!("server: \"{server}\"")),
            "server rewritten to {server}"
        );
        assert!(!text.contains("127.0.0.1:"), "the host was rewritten");
        let live = authenticates(&kc).await;
        assert_eq!(live.username, "system:admin");
    }

    // Nothing changed: nothing committed, no SSH needed.
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{err}");
    for i in 0..3 {
        assert_eq!(action(&report, i), "healthy", "{report}");
    }
    assert_eq!(fleet.remote_log().len(), 4);

    // Rebuild spoke1: exactly one new commit, for spoke1, naming the CA change.
    let mut needles = fleet.key_needles();
    let before: Vec<String> = (0..3).map(|i| fleet.remote_file(i)).collect();
    let old_ca = spokekeeper::certs::fingerprint(&fleet.nodes[1].server_ca_der()).to_string();
    fleet.nodes[1].rebuild();
    let new_ca = spokekeeper::certs::fingerprint(&fleet.nodes[1].server_ca_der()).to_string();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 1), "rotated");
    assert_eq!(report["spokes"][1]["reason"]["kind"], "ca-changed");
    assert_eq!(report["spokes"][1]["ca_sha256"], new_ca.as_str());
    let log = fleet.remote_log();
    assert_eq!(log.len(), 5, "{log:?}");
    let short = |fp: &str| format!("sha256:{}..", &fp[7..15]);
    assert_eq!(
        log[0],
        format!(
            "spoke1: rotate kubeconfig: CA changed {} -> {}",
            short(&old_ca),
            short(&new_ca)
        )
    );
    assert_eq!(
        fleet.remote_file(0),
        before[0],
        "other spokes byte-identical"
    );
    assert_eq!(
        fleet.remote_file(2),
        before[2],
        "other spokes byte-identical"
    );
    let kc = fleet.unsealed(1);
    authenticates(&kc).await;
    let body = git(&fleet.remote, &["log", "-1", "--format=%B", "main"]);
    assert!(
        body.contains("validated: authenticated as system:admin"),
        "{body}"
    );
    // Neither spoke1's old key nor any current one.
    needles.add_key(&fleet.nodes[1].parts().client_key_pem);
    assert_eq!(needles.keys(), 4);
    fleet.assert_no_plaintext_of(&needles);
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_spoke_is_refused_and_others_are_not_affected() {
    crate::support::requires!(ROOT);
    let hostile = NodeOptions {
        hostile: Some(Hostile::ExecPlugin),
        ..NodeOptions::default()
    };
    let fleet = Fleet::new(&[NodeOptions::default(), hostile]);
    let (code, report, _) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "a refused spoke fails the run: {report}");
    assert_eq!(action(&report, 0), "rotated");
    assert_eq!(action(&report, 1), "failed");
    assert_eq!(report["spokes"][1]["stage"], "validate");
    let error = report["spokes"][1]["error"].as_str().unwrap();
    assert!(error.contains("exec"), "the field is named: {error}");
    assert!(
        !fleet.nodes[1].exec_marker().exists(),
        "nothing was executed"
    );
    assert!(
        !fleet.output(1).exists(),
        "nothing written for the hostile spoke"
    );
    assert_eq!(
        fleet.remote_log().len(),
        2,
        "only the good spoke was committed"
    );
    // Neither key (the refused one was read from its node) in any output, commit or file.
    fleet.assert_no_plaintext();
}

#[tokio::test(flavor = "multi_thread")]
async fn outages_leave_the_committed_credential_and_the_next_run_recovers() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed: Vec<String> = (0..2).map(|i| fleet.remote_file(i)).collect();

    // spoke0's API down: reported at the probe, no SSH, nothing touched.
    fleet.nodes[0].stop_api();
    let (code, report, _) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1);
    assert_eq!(report["spokes"][0]["stage"], "probe", "{report}");
    assert!(
        report["spokes"][0]["error"]
            .as_str()
            .unwrap()
            .contains("unreachable"),
        "{report}"
    );
    assert_eq!(action(&report, 1), "healthy");
    assert_eq!(fleet.remote_file(0), committed[0]);
    fleet.nodes[0].start_api();
    assert_eq!(
        fleet.rotate_json(&["--all"]).1["spokes"][0]["action"],
        "healthy"
    );

    // spoke1 rebuilt AND its host key changed: the rebuild is seen, the extraction is
    // refused with the host-key message, the old credential stays.
    fleet.nodes[1].rebuild();
    fleet.nodes[1].rotate_host_key();
    let (code, report, _) = fleet.rotate_json(&["spoke1"]);
    assert_eq!(code, 1);
    assert_eq!(
        report["spokes"][0]["reason"]["kind"], "ca-changed",
        "{report}"
    );
    assert_eq!(report["spokes"][0]["stage"], "extract");
    assert!(
        report["spokes"][0]["error"]
            .as_str()
            .unwrap()
            .contains("CHANGED"),
        "{report}"
    );
    assert_eq!(
        fleet.remote_file(1),
        committed[1],
        "committed credential intact"
    );
    // The operator accepts the new host key: the next run rotates.
    let line = fleet.nodes[1].host_key_line();
    std::fs::write(&fleet.nodes[1].known_hosts_path, format!("{line}\n")).unwrap();
    let (code, report, err) = fleet.rotate_json(&["spoke1"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated");
    authenticates(&fleet.unsealed(1)).await;

    // The remote is unreachable: the rotation is committed locally, the run fails
    // clearly, and the next run pushes it.
    fleet.nodes[0].rebuild();
    let moved = fleet.dir.path().join("moved.git");
    std::fs::rename(&fleet.remote, &moved).unwrap();
    let (code, report, _) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1);
    assert_eq!(action(&report, 0), "rotated", "{report}");
    assert!(
        report["repo_error"].as_str().unwrap().contains("push"),
        "{report}"
    );
    std::fs::rename(&moved, &fleet.remote).unwrap();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["pushed"], true);
    assert_eq!(
        action(&report, 0),
        "healthy",
        "the local commit was kept, not redone"
    );
    authenticates(&fleet.unsealed(0)).await;
    fleet.assert_no_plaintext();
}

#[tokio::test(flavor = "multi_thread")]
async fn rejected_push_is_reported_and_retried_next_run() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    // The remote refuses one push (a hook, as a protected branch would).
    let hook = fleet.remote.join("hooks/pre-receive");
    let marker = fleet.dir.path().join("rejected-once");
    std::fs::write(
        &hook,
        format!("#!/bin/sh\nif [ ! -e {m} ]; then touch {m}; echo 'denied by test hook' >&2; exit 1; fi\n", m = marker.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, report, _) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1);
    assert!(
        report["repo_error"]
            .as_str()
            .unwrap()
            .contains("denied by test hook"),
        "{report}"
    );
    assert_eq!(fleet.remote_log().len(), 1, "nothing reached the remote");
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["pushed"], true);
    assert_eq!(fleet.remote_log().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_run_changes_nothing_and_force_rotates() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    let (code, report, err) = fleet.rotate_json(&["--all", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(action(&report, 0), "would-rotate");
    assert_eq!(fleet.remote_log().len(), 1);
    assert!(!fleet.output(0).exists());
    assert_eq!(fleet.rotate(&["spoke0"]).0, 0);
    let (code, report, _) = fleet.rotate_json(&["spoke0", "--force"]);
    assert_eq!(code, 0);
    assert_eq!(report["spokes"][0]["reason"]["kind"], "forced");
    assert_eq!(fleet.remote_log()[0], "spoke0: rotate kubeconfig: forced");
    // Usage errors are clear.
    let (code, _, err) = fleet.rotate(&[]);
    assert_eq!(code, 1);
    assert!(err.contains("--all"), "{err}");
    let (code, _, err) = fleet.rotate(&["nosuch"]);
    assert_eq!(code, 1);
    assert!(err.contains("no spoke named \"nosuch\""), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn expiring_client_certificate_is_reported_until_the_node_renews_it() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::new(&[NodeOptions {
        client_cert_days: 5,
        ..NodeOptions::default()
    }]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let (code, report, _) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(action(&report, 0), "not-renewed");
    assert_eq!(report["spokes"][0]["reason"]["kind"], "client-expiring");
    assert_eq!(fleet.remote_log().len(), 2, "nothing new committed");
    assert!(
        fleet
            .rotate(&["--all"])
            .2
            .contains("has not renewed it yet"),
        "a person is told what to do"
    );

    // The node renews (k3s restarted): the next run re-extracts and commits it.
    let old_client = fleet.unsealed_client_not_after(0);
    fleet.nodes[0].renew_client_cert(365);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated");
    assert_eq!(report["spokes"][0]["reason"]["kind"], "client-expiring");
    let log = fleet.remote_log();
    assert!(
        log[0].starts_with("spoke0: rotate kubeconfig: client certificate expiring on "),
        "{log:?}"
    );
    assert!(fleet.unsealed_client_not_after(0) > old_client + time::Duration::days(300));
    authenticates(&fleet.unsealed(0)).await;
    assert_eq!(action(&fleet.rotate_json(&["--all"]).1, 0), "healthy");
}

#[test]
fn the_demo_sealing_key_is_refused_outside_the_demo() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("keys/demo/tls.crt");
    let text = std::fs::read_to_string(&fleet.config).unwrap();
    let cert = vectors().join("key/cert.pem");
    std::fs::write(
        &fleet.config,
        text.replace(cert.to_str().unwrap(), demo.to_str().unwrap()),
    )
    .unwrap();
    let (code, out, err) = fleet.rotate(&["--all"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains("demo key") && err.contains("kubeseal --fetch-cert"),
        "{err}"
    );
    assert_eq!(fleet.remote_log().len(), 1, "nothing committed");
}

/// The demo key is recognised by its RSA key, not its certificate's fingerprint: as a
/// bare PUBLIC KEY, as a PKCS#1 RSA PUBLIC KEY and in another self-signed certificate.
#[test]
fn the_demo_key_in_any_wrapping_is_refused_outside_the_demo() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    let (rewrapped, spki, pkcs1) = support::fleet::demo_key_wrappings(fleet.dir.path());
    let text = std::fs::read_to_string(&fleet.config).unwrap();
    let cert = vectors().join("key/cert.pem");
    for wrapped in [&spki, &pkcs1, &rewrapped] {
        std::fs::write(
            &fleet.config,
            text.replace(cert.to_str().unwrap(), wrapped.to_str().unwrap()),
        )
        .unwrap();
        let (code, out, err) = fleet.rotate(&["--all"]);
        assert_eq!(code, 1, "{}: {out}", wrapped.display());
        assert!(err.contains("demo key"), "{}: {err}", wrapped.display());
    }
    assert_eq!(fleet.remote_log().len(), 1, "nothing committed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_concurrent_commit_on_the_remote_is_rebased_over() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    // Someone else pushes to the fleet repo right as spokekeeper pushes: a pre-push hook
    // in spokekeeper's clone lands a commit on the remote first (once).
    let other = fleet.dir.path().join("other");
    clone(&fleet.remote, &other);
    let marker = fleet.dir.path().join("raced-once");
    let hook = fleet.clone.join(".git/hooks/pre-push");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\nif [ ! -e {m} ]; then touch {m}\n cd {o} && echo x > apps.yaml && git add apps.yaml && \
             git -c user.name=o -c user.email=o@o commit -q -m 'someone else' && git push -q origin HEAD:main\nfi\n",
            m = marker.display(),
            o = other.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert!(marker.exists(), "the race happened");
    let log = fleet.remote_log();
    assert_eq!(
        log.len(),
        4,
        "seed, theirs, and our two rebased on top: {log:?}"
    );
    assert_eq!(log[2], "someone else");
    for i in 0..2 {
        authenticates(&fleet.unsealed(i)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn periodic_check_catches_what_a_probe_cannot_see() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::new(&[NodeOptions::default()]);
    let mut config = std::fs::read_to_string(&fleet.config).unwrap();
    config.push_str("verify_every: 1s\n");
    std::fs::write(&fleet.config, config).unwrap();
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // Re-extracted on schedule, same content: nothing committed.
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "unchanged", "{report}");
    assert_eq!(fleet.remote_log().len(), 2);
    // The node renewed its client certificate early: same CA, nothing for a probe to see.
    fleet.nodes[0].renew_client_cert(400);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated", "{report}");
    assert_eq!(report["spokes"][0]["reason"]["kind"], "content-changed");
    assert_eq!(
        fleet.remote_log()[0],
        "spoke0: rotate kubeconfig: content changed on the node (periodic check)"
    );
    authenticates(&fleet.unsealed(0)).await;
}

/// Issue 19, item 8: the push asks the gate (the daemon's: the lease held with time
/// left) right before it starts; refused, the commit stays in the clone, reported as not
/// pushed, and the next allowed tick pushes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_gate_keeps_the_commit_local_until_a_tick_may_push() {
    crate::support::requires!(ROOT);
    use spokekeeper::rotate::{self, Context, Gate, Options, RepoStage};
    let fleet = Fleet::new(&[NodeOptions::default()]);
    let config = spokekeeper::config::Config::load(&fleet.config).unwrap();
    let sealing = spokekeeper::seal::SealingKey::from_pem(
        &std::fs::read(vectors().join("key/cert.pem")).unwrap(),
        "cert.pem",
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let repo = spokekeeper::repo::Repo::open(&config.repo).await.unwrap();
    let ctx = Context::new(config, sealing, repo).unwrap();
    let refused = Options {
        concurrency: 1,
        gate: Gate::new(|| {
            Err(std::io::Error::other(
                "this replica no longer holds the lease",
            ))
        }),
        ..Options::default()
    };
    let report = rotate::tick(&ctx, &refused).await.unwrap();
    let failure = report.repo_error.clone().expect("a repo error");
    assert_eq!(failure.stage(), RepoStage::Push);
    assert_eq!(
        failure.to_string(),
        "push: not pushed: this replica no longer holds the lease"
    );
    assert!(!report.pushed);
    assert_eq!(fleet.remote_log().len(), 1, "only the seed on the remote");
    assert_eq!(ctx.repo.unpushed().await.unwrap(), 1);

    let open = Options {
        concurrency: 1,
        ..Options::default()
    };
    let report = rotate::tick(&ctx, &open).await.unwrap();
    assert!(report.pushed, "{:?}", report.repo_error);
    assert_eq!(fleet.remote_log().len(), 2, "{:?}", fleet.remote_log());
}

/// A tick commits each spoke once it and every spoke before it are through, while later
/// spokes are still being extracted, and only in configuration order. All three nodes
/// rebuilt, spoke1's sshd stopped (its connects hang): spoke0's commit is made (in the
/// tick's commit stream, which moves the branch at its end) while spoke1 still waits,
/// spoke2's is not although spoke2 is done; once spoke1's sshd
/// answers, the push holds spoke0, spoke1, spoke2 in that order.
#[tokio::test(flavor = "multi_thread")]
async fn each_commit_is_made_in_configuration_order_while_later_spokes_are_extracted() {
    crate::support::requires!(ROOT);
    use spokekeeper::rotate::{self, Options, Progress, Step};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    support::install_crypto_provider();
    let mut fleet = Fleet::new(&vec![NodeOptions::default(); 3]);
    // A connect that outlasts the test: spoke1 waits until its sshd is resumed.
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
    }
    fleet.nodes[1].sigstop();

    let ctx = fleet.context().await;
    let done: Arc<Mutex<Vec<String>>> = Arc::default();
    let published: Arc<Mutex<Vec<String>>> = Arc::default();
    let (heard, publishing) = (done.clone(), published.clone());
    let options = Options {
        concurrency: 3,
        progress: Progress::new(move |step| match step {
            Step::Done { spoke } => heard.lock().unwrap().push(spoke.to_string()),
            Step::Stage {
                spoke,
                stage: "commit",
            } => publishing.lock().unwrap().push(spoke.to_string()),
            _ => {}
        }),
        ..Options::default()
    };
    let watch = async {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let committed = published.lock().unwrap().clone();
            let finished = done.lock().unwrap().clone();
            if !committed.is_empty() && finished.contains(&"spoke2".to_string()) {
                fleet.nodes[1].sigcont();
                return (committed, finished);
            }
            if Instant::now() > deadline {
                fleet.nodes[1].sigcont();
                return (committed, finished);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (report, (committed, finished)) = tokio::join!(rotate::tick(&ctx, &options), watch);
    let report = report.unwrap();

    assert!(
        !finished.contains(&"spoke1".to_string()),
        "spoke1 was held until the others were seen: {finished:?}"
    );
    assert_eq!(
        committed.len(),
        1,
        "only spoke0 while spoke1 waits: {committed:?}"
    );
    assert_eq!(committed[0], "spoke0", "{committed:?}");
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
    assert_eq!(pushed, ["spoke0", "spoke1", "spoke2"]);
}

mod federated_servers;
mod minted;
mod revoke_pushed;
mod sessions;
