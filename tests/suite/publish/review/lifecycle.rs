//! A review branch and its pull request from opening to merge, on each forge kind: opened,
//! left alone, updated, merged, opened again; labels and reviewers; sops credentials.

use crate::support;

use std::time::Duration;

use super::{KINDS, Review, body_field, review, spoke};
use axum::http::Method;
use serde_json::{Value, json};
use spokekeeper_lab::forge::{Fault, ForgeSim, Kind};
use support::fleet::action;
use support::git::{git, verifies_with};

/// One spoke's review on a forge of `kind`, from the first rotation to a second pull
/// request after the merge.
async fn open_update_merge(kind: Kind) {
    let mut r = review(kind, 1, "");
    let (first, main) = first_rotation_opens(&r, kind);
    let before = unchanged_is_left_alone(&r, &first);
    let new_ca = rebuilt_before_the_merge_updates(&mut r, &first, &main, before);
    merged_is_healthy(&r).await;
    rebuilt_after_the_merge_opens_again(&mut r, &new_ca);
}

/// The number of write calls the forge has seen.
fn forge_writes(f: &ForgeSim) -> usize {
    f.count("POST") + f.count("PATCH") + f.count("PUT")
}

/// First rotation: a branch and a pull request; nothing on main. The branch head and
/// main's head.
fn first_rotation_opens(r: &Review, kind: Kind) -> (String, String) {
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    let s = spoke(&report, 0);
    assert_eq!(s["action"], "pending", "{report}");
    assert_eq!(s["change"], "opened", "{report}");
    assert_eq!(s["branch"], "spokekeeper/spoke0");
    let first = r.branch_head(0).expect("branch pushed");
    assert_eq!(s["commit"], first.as_str());
    assert!(
        verifies_with(&r.fleet.remote, &r.signing_key, &first),
        "the review commit is signed with repo.signing_key"
    );
    assert_eq!(s["pull_request"]["number"], 1);
    assert!(
        !r.main_files().contains("spoke0"),
        "main is untouched: {}",
        r.main_files()
    );
    let shown = git(
        &r.fleet.remote,
        &["show", "--format=%s", "--name-only", "spokekeeper/spoke0"],
    );
    assert!(
        shown.starts_with("spoke0: rotate kubeconfig: initial credential\n")
            && shown.contains("fluxcd/spoke0-kubeconfig-sealed.yaml"),
        "{shown}"
    );
    let parent = git(&r.fleet.remote, &["rev-parse", "spokekeeper/spoke0^"]);
    let main = git(&r.fleet.remote, &["rev-parse", "main"]);
    assert_eq!(parent, main, "the branch is one commit on main");
    r.clone_is_on_main_and_clean();
    let pulls = r.forge.open_pulls();
    assert_eq!(pulls.len(), 1);
    assert_eq!(
        (pulls[0].head.as_str(), pulls[0].base.as_str()),
        ("spokekeeper/spoke0", "main")
    );
    assert_eq!(
        pulls[0].title,
        "spoke0: rotate kubeconfig: initial credential"
    );
    assert!(
        pulls[0]
            .body
            .contains("validated: authenticated as system:admin")
            && pulls[0].body.contains("client certificate: sha256:")
            && pulls[0].body.contains("valid until"),
        "{}",
        pulls[0].body
    );
    let create = r
        .forge
        .seen()
        .into_iter()
        .find(|s| s.method == "POST")
        .unwrap();
    assert!(
        create.body[body_field(kind)].is_string(),
        "{:?}",
        create.body
    );
    (first, main)
}

/// Nothing changed: pending, nothing pushed, the pull request left alone. The forge's
/// write count.
fn unchanged_is_left_alone(r: &Review, first: &str) -> usize {
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["action"], "pending", "{report}");
    assert_eq!(spoke(&report, 0)["change"], Value::Null, "{report}");
    assert_eq!(spoke(&report, 0)["commit"], Value::Null, "{report}");
    assert!(
        spoke(&report, 0)["pending_seconds"].as_u64().is_some(),
        "{report}"
    );
    assert_eq!(r.branch_head(0).as_deref(), Some(first));
    forge_writes(&r.forge)
}

/// Rebuilt before the merge: the branch is replaced, the same pull request updated. The
/// new CA's fingerprint.
fn rebuilt_before_the_merge_updates(
    r: &mut Review,
    first: &str,
    main: &str,
    before: usize,
) -> String {
    let old_ca = spokekeeper::certs::fingerprint(&r.fleet.nodes[0].server_ca_der()).to_string();
    r.fleet.nodes[0].rebuild();
    let new_ca = spokekeeper::certs::fingerprint(&r.fleet.nodes[0].server_ca_der()).to_string();
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["change"], "updated", "{report}");
    assert_eq!(spoke(&report, 0)["pull_request"]["number"], 1);
    let second = r.branch_head(0).unwrap();
    assert_ne!(second, first, "replaced with --force-with-lease");
    assert_eq!(
        git(&r.fleet.remote, &["rev-parse", "spokekeeper/spoke0^"]),
        main,
        "still one commit on main, not a stack"
    );
    assert_eq!(r.forge.pulls().len(), 1, "no second pull request");
    assert_eq!(forge_writes(&r.forge), before + 1, "one update call");
    let body = &r.forge.open_pulls()[0].body;
    assert!(body.contains(&new_ca) && !body.contains(&old_ca), "{body}");
    new_ca
}

/// Merged: the next tick is healthy and touches nothing.
async fn merged_is_healthy(r: &Review) {
    r.merge(0);
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "healthy", "{report}");
    let live = support::fleet::authenticates(&r.fleet.unsealed(0)).await;
    assert_eq!(live.username, "system:admin");
    assert_eq!(r.forge.pulls().len(), 1);
    r.clone_is_on_main_and_clean();
}

/// Rebuilt after the merge: a new pull request that names both CAs.
fn rebuilt_after_the_merge_opens_again(r: &mut Review, new_ca: &str) {
    let merged = r.fleet.remote_file(0);
    r.fleet.nodes[0].rebuild();
    let newest_ca = spokekeeper::certs::fingerprint(&r.fleet.nodes[0].server_ca_der()).to_string();
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["change"], "opened", "{report}");
    assert_eq!(spoke(&report, 0)["reason"]["kind"], "ca-changed");
    let open = r.forge.open_pulls();
    assert_eq!((open.len(), open[0].number), (1, 2), "{open:?}");
    let short = |fp: &str| format!("sha256:{}..", &fp[7..15]);
    assert_eq!(
        open[0].title,
        format!(
            "spoke0: rotate kubeconfig: CA changed {} -> {}",
            short(new_ca),
            short(&newest_ca)
        )
    );
    assert!(
        open[0].body.contains(&format!("previous CA: {new_ca}"))
            && open[0].body.contains(&format!("CA: {newest_ca}")),
        "{}",
        open[0].body
    );
    assert_eq!(
        r.fleet.remote_file(0),
        merged,
        "main keeps the merged credential until the next merge"
    );
    r.fleet.assert_no_plaintext();
}

#[tokio::test(flavor = "multi_thread")]
async fn github_opens_updates_and_merges() {
    crate::support::requires!(ROOT);
    open_update_merge(Kind::Github).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gitlab_opens_updates_and_merges() {
    crate::support::requires!(ROOT);
    open_update_merge(Kind::Gitlab).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gitea_opens_updates_and_merges() {
    crate::support::requires!(ROOT);
    open_update_merge(Kind::Gitea).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_spokes_give_two_pull_requests_with_labels_and_reviewers() {
    crate::support::requires!(ROOT);
    for kind in KINDS {
        let reviewer = if kind == Kind::Gitlab {
            "\"42\""
        } else {
            "alice"
        };
        let r = review(
            kind,
            2,
            &format!("    labels: [spokekeeper, security]\n    reviewers: [{reviewer}]\n"),
        );
        let (code, report, err) = r.rotate();
        assert_eq!(code, 0, "{kind:?}: {report}\n{err}");
        let pulls = r.forge.open_pulls();
        assert_eq!(pulls.len(), 2, "{kind:?}: {pulls:?}");
        for (i, p) in pulls.iter().enumerate() {
            assert_eq!(spoke(&report, i)["change"], "opened");
            assert_eq!(p.head, format!("spokekeeper/spoke{i}"));
            assert_eq!(p.labels, ["spokekeeper", "security"], "{kind:?}");
            if kind != Kind::Gitea {
                assert_eq!(p.reviewers.len(), 1, "{kind:?}");
            }
        }
        let seen = r.forge.seen();
        let posts: Vec<_> = seen.iter().filter(|s| s.method == "POST").collect();
        match kind {
            Kind::Github => {
                let labels = posts
                    .iter()
                    .find(|s| s.path.ends_with("/issues/1/labels"))
                    .unwrap();
                assert_eq!(labels.body, json!({"labels": ["spokekeeper", "security"]}));
                let rev = posts
                    .iter()
                    .find(|s| s.path == "/repos/org/fleet/pulls/1/requested_reviewers")
                    .unwrap();
                assert_eq!(rev.body, json!({"reviewers": ["alice"]}));
                let list = seen.iter().find(|s| s.method == "GET").unwrap();
                assert!(
                    list.query.contains("head=org%3Aspokekeeper%2Fspoke")
                        && list.query.contains("state=open"),
                    "{}",
                    list.query
                );
            }
            Kind::Gitlab => {
                let c = posts[0];
                assert_eq!(c.path, "/api/v4/projects/org%2Ffleet/merge_requests");
                assert_eq!(c.body["labels"], "spokekeeper,security");
                assert_eq!(c.body["reviewer_ids"], json!([42]));
                assert_eq!(c.body["target_branch"], "main");
            }
            Kind::Gitea => {
                let c = posts
                    .iter()
                    .find(|s| s.path == "/api/v1/repos/org/fleet/pulls")
                    .unwrap();
                assert_eq!(
                    c.body["labels"],
                    json!([3, 4]),
                    "label ids, looked up by name"
                );
                let rev = posts
                    .iter()
                    .find(|s| s.path.ends_with("/requested_reviewers"))
                    .unwrap();
                assert_eq!(rev.body, json!({"reviewers": ["alice"]}));
            }
        }
        r.merge(0);
        r.merge(1);
        let (code, report, err) = r.rotate();
        assert_eq!(code, 0, "{report}\n{err}");
        assert_eq!(
            (action(&report, 0), action(&report, 1)),
            ("healthy".into(), "healthy".into())
        );
        assert!(r.main_files().contains("spoke0") && r.main_files().contains("spoke1"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pull_request_that_already_exists_is_updated_not_duplicated() {
    crate::support::requires!(ROOT);
    for kind in KINDS {
        let r = review(kind, 1, "");
        // Another client opened it 5 hours ago; the list call misses it (a race).
        let n = r
            .forge
            .insert_pull("spokekeeper/spoke0", "main", Duration::from_secs(5 * 3600));
        r.forge.fault(Method::GET, Fault::HideList);
        let (code, report, err) = r.rotate();
        assert_eq!(code, 0, "{kind:?}: {report}\n{err}");
        let s = spoke(&report, 0);
        assert_eq!(s["change"], "updated", "{kind:?}: {report}");
        assert_eq!(s["pull_request"]["number"], n);
        assert!(
            s["pending_seconds"].as_u64().unwrap() >= 5 * 3600,
            "{report}"
        );
        let statuses: Vec<_> = r.forge.seen().iter().map(|s| s.method.clone()).collect();
        assert!(
            statuses.iter().filter(|m| *m == "POST").count() >= 1,
            "{statuses:?}"
        );
        assert_eq!(r.forge.pulls().len(), 1, "{kind:?}");
        assert_eq!(
            r.forge.pulls()[0].title,
            "spoke0: rotate kubeconfig: initial credential"
        );
    }
}

/// A squash merge leaves the branch's commit outside main: the branch still counts as
/// merged (main holds its file), so a periodic re-check proposes nothing again.
#[tokio::test(flavor = "multi_thread")]
async fn a_squash_merged_branch_is_not_proposed_again() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Github, 1, "");
    let yaml = std::fs::read_to_string(&r.fleet.config).unwrap();
    std::fs::write(
        &r.fleet.config,
        yaml.replacen("repo:\n", "verify_every: 1s\nrepo:\n", 1),
    )
    .unwrap();
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["change"], "opened", "{report}");
    r.squash_merge(0);
    let head = r
        .branch_head(0)
        .expect("the branch stays after a squash merge");
    std::thread::sleep(Duration::from_millis(1100));
    // verify_every is due: the spoke is re-extracted, found unchanged, and no pull
    // request is opened from the merged branch.
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["action"], "unchanged", "{report}");
    assert_eq!(r.forge.pulls().len(), 1, "{:?}", r.forge.pulls());
    assert_eq!(r.forge.open_pulls().len(), 0);
    assert_eq!(r.branch_head(0).as_deref(), Some(head.as_str()));
}

/// Labels and reviewers come after the pull request exists: their failure is logged, and
/// the pull request is reported open (not failed, and not opened again next tick).
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_reviewer_request_still_reports_the_open_pull_request() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Github, 1, "    reviewers: [alice]\n");
    r.forge.fault(
        Method::POST,
        Fault::StatusAt(
            "/requested_reviewers",
            422,
            json!({"message": "Reviews may only be requested from collaborators."}),
        ),
    );
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["action"], "pending", "{report}");
    assert_eq!(spoke(&report, 0)["change"], "opened", "{report}");
    assert!(err.contains("requesting reviewers failed"), "{err}");
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(r.forge.pulls().len(), 1, "not opened twice");
}

/// Review mode with `sealing.format: sops`: the branch carries a sops Secret the real sops
/// opens; the next tick leaves the pull request alone (the branch's file is read back as
/// the same credential); once merged, the spoke is healthy.
#[tokio::test(flavor = "multi_thread")]
async fn a_sops_credential_is_proposed_for_review_and_healthy_once_merged() {
    crate::support::requires!(ROOT, REAL_STACK);
    use crate::seal::sops_tick::{age_key, real_sops_decrypt};
    let r = review(Kind::Github, 1, "");
    let keys = tempfile::tempdir().unwrap();
    let a = age_key(keys.path(), "a");
    let yaml = std::fs::read_to_string(&r.fleet.config).unwrap();
    let cert = yaml.lines().find(|l| l.starts_with("  cert: ")).unwrap();
    let sops = format!(
        "{cert}\n  format: sops\n  age_recipients: [{}]",
        a.recipient
    );
    std::fs::write(&r.fleet.config, yaml.replacen(cert, &sops, 1)).unwrap();
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["change"], "opened", "{report}");
    let head = r.branch_head(0).expect("branch pushed");
    let file = git(
        &r.fleet.remote,
        &[
            "show",
            "spokekeeper/spoke0:fluxcd/spoke0-kubeconfig-sealed.yaml",
        ],
    );
    let secret = real_sops_decrypt(keys.path(), &a.file, &file).unwrap();
    support::fleet::authenticates(&secret.data["value"]).await;
    assert!(
        r.forge.open_pulls()[0]
            .body
            .contains("encrypted with sops for age recipients sha256:"),
        "{}",
        r.forge.open_pulls()[0].body
    );

    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["action"], "pending", "{report}");
    assert_eq!(spoke(&report, 0)["commit"], Value::Null, "{report}");
    assert_eq!(r.branch_head(0).as_deref(), Some(head.as_str()));

    r.merge(0);
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["action"], "healthy", "{report}");
    assert_eq!(r.forge.open_pulls().len(), 0);
    let (recovery, ids) = (support::fleet::vectors_recovery_keys(), a.identities());
    r.fleet
        .assert_no_plaintext_of(&r.fleet.key_needles_opening(&support::fleet::Openers {
            recovery: &recovery,
            age: Some(&ids),
        }));
}
