//! The library's branch checks against a real remote: only the signed commit this clone
//! pushed last, one commit on the target branch writing the spoke's file, is trusted.

use crate::support;

use std::path::Path;

use super::{DEV_BRANCH, DEV_FILE, lib_repo, push_ours, push_theirs};
use spokekeeper::repo::{Repo, Untrusted};
use support::git::{git, repo_config, signing_key, verifies_with};

/// The branch checks themselves, against a real remote: only spokekeeper's signed
/// commit, one commit on the target branch writing the spoke's file, is trusted.
#[tokio::test]
async fn provenance_needs_our_signature_a_parent_on_target_and_only_our_file() {
    use spokekeeper::config::RepoConfig;
    use spokekeeper::repo::RepoError;
    let dir = support::scratch_dir();
    let (remote, clones) = support::git::fleet_remote(dir.path(), 2);
    let key = signing_key(&dir.path().join("signing-key"));
    let other = signing_key(&dir.path().join("other-key"));
    let config = repo_config(&clones[0], Some(key.clone()));
    let repo = Repo::open(&config).await.unwrap();
    repo.sync().await.unwrap();
    let rel = Path::new("fluxcd/dev-kubeconfig-sealed.yaml");
    let ours = repo
        .commit_on_target(rel, b"kind: SealedSecret\n", "dev: rotate")
        .await
        .unwrap();
    assert_eq!(
        repo.provenance("spokekeeper/dev", &ours, rel).await,
        Err(Untrusted::NoRecord),
        "not pushed yet"
    );
    repo.push_branch("spokekeeper/dev", &ours, None)
        .await
        .unwrap();
    assert_eq!(repo.provenance("spokekeeper/dev", &ours, rel).await, Ok(()));
    assert!(matches!(
        repo.provenance(
            "spokekeeper/dev",
            &ours,
            Path::new("fluxcd/prod-kubeconfig-sealed.yaml")
        )
        .await,
        Err(Untrusted::Changes { .. })
    ));

    // Commits made in another clone, fetched as a review branch would be.
    let work = &clones[1];
    let commit = |files: &[(&str, &str)], sign: Option<&Path>| {
        push_theirs(work, files, sign, "refs/heads/spokekeeper/t")
    };
    let check = |head: String| {
        let repo = &repo;
        async move {
            repo.fetch_review_branches().await.unwrap();
            assert_eq!(
                repo.remote_branch_head("spokekeeper/t").await,
                Some(head.clone())
            );
            repo.provenance("spokekeeper/t", &head, rel).await
        }
    };
    let file = [(rel.to_str().unwrap(), "kind: SealedSecret\nv: 2\n")];
    assert_eq!(
        check(commit(&file, Some(&key))).await,
        Err(Untrusted::NoRecord),
        "signed with the key in another clone, but not pushed by this one"
    );
    assert_eq!(check(commit(&file, None)).await, Err(Untrusted::Unsigned));
    assert_eq!(
        check(commit(&file, Some(&other))).await,
        Err(Untrusted::ForeignSignature)
    );
    let both = [file[0], ("README.md", "changed\n")];
    assert!(matches!(
        check(commit(&both, Some(&key))).await,
        Err(Untrusted::Changes { .. })
    ));
    // Two signed commits: the head's parent is not on main.
    git(
        work,
        &[
            "-c",
            "user.name=m",
            "-c",
            "user.email=m@m",
            "commit",
            "--quiet",
            "--allow-empty",
            "-m",
            "off main",
        ],
    );
    let off = commit(&file, Some(&key));
    assert!(matches!(check(off).await, Err(Untrusted::OffTarget { .. })));
    git(work, &["reset", "--quiet", "--hard", "origin/main"]);

    // Without repo.signing_key nothing is signed and nothing is trusted.
    let unsigned = Repo::open(&RepoConfig {
        signing_key: None,
        ..config.clone()
    })
    .await
    .unwrap();
    assert!(matches!(
        unsigned
            .commit_on_target(rel, b"kind: SealedSecret\n", "x")
            .await,
        Err(RepoError::NoSigningKey)
    ));
    assert_eq!(
        unsigned.provenance("spokekeeper/dev", &ours, rel).await,
        Err(Untrusted::NoKey)
    );
    let _ = remote;
}

/// F1: an older commit spokekeeper signed for the same spoke, pushed back over the one
/// it pushed last, or its last commit re-encoded with a junk `gpgsig-sha256` header
/// (a new id, the signature still good), is not trusted: only the exact commit this
/// clone recorded when it pushed is.
#[tokio::test]
async fn provenance_needs_the_exact_commit_this_clone_pushed_last() {
    let (_dir, repo, clones, key) = lib_repo().await;
    let (branch, rel) = (DEV_BRANCH, Path::new(DEV_FILE));
    let c1 = push_ours(&repo, b"kind: SealedSecret\nv: 1\n", None).await;
    let c2 = push_ours(&repo, b"kind: SealedSecret\nv: 2\n", Some(&c1)).await;
    assert_eq!(repo.provenance(branch, &c2, rel).await, Ok(()));

    let force = |commit: &str| {
        let spec = format!("+{commit}:refs/heads/{branch}");
        git(&clones[0], &["push", "--quiet", "origin", &spec]);
    };
    force(&c1);
    repo.fetch_review_branches().await.unwrap();
    assert_eq!(repo.remote_branch_head(branch).await, Some(c1.clone()));
    assert!(verifies_with(&clones[0], &key, &c1), "c1 is really signed");
    assert_eq!(
        repo.provenance(branch, &c1, rel).await,
        Err(Untrusted::NotPushed {
            recorded: c2.clone()
        }),
        "a replayed older commit"
    );

    let raw = git(&clones[0], &["cat-file", "commit", &c2]);
    let (head, rest) = raw.split_once("\ngpgsig ").expect("a signed commit");
    let junk = format!("{head}\ngpgsig-sha256 junk\ngpgsig {rest}");
    let mut hash = std::process::Command::new("git")
        .arg("-C")
        .arg(&clones[0])
        .args(["hash-object", "-t", "commit", "-w", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    hash.stdin
        .take()
        .unwrap()
        .write_all(junk.as_bytes())
        .unwrap();
    let out = hash.wait_with_output().unwrap();
    assert!(out.status.success());
    let c2x = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_ne!(c2x, c2);
    assert!(
        verifies_with(&clones[0], &key, &c2x),
        "the signature survives the junk header"
    );
    force(&c2x);
    repo.fetch_review_branches().await.unwrap();
    assert_eq!(
        repo.provenance(branch, &c2x, rel).await,
        Err(Untrusted::NotPushed { recorded: c2 }),
        "a re-encoded commit"
    );
}

/// H1: a replace ref in the clone (`git replace ATTACKER OURS`) does not make an
/// unsigned commit verify as spokekeeper's.
#[tokio::test]
async fn a_replace_ref_in_the_clone_does_not_make_a_commit_verify() {
    let (_dir, repo, clones, _) = lib_repo().await;
    let (branch, rel) = (DEV_BRANCH, Path::new(DEV_FILE));
    let ours = push_ours(&repo, b"kind: SealedSecret\n", None).await;
    let theirs = push_theirs(
        &clones[1],
        &[(DEV_FILE, "kind: SealedSecret\nforged: 1\n")],
        None,
        &format!("refs/heads/{branch}"),
    );
    repo.fetch_review_branches().await.unwrap();
    git(&clones[0], &["replace", &theirs, &ours]);
    assert_eq!(
        repo.provenance(branch, &theirs, rel).await,
        Err(Untrusted::Unsigned),
        "verify-commit reads the commit itself, not its replacement"
    );
}

/// F3: a branch that leaves the spoke's file as on the target branch but adds another
/// file counts as merged only when it is spokekeeper's own (a squash merge); anyone
/// else's is not merged, so it is not ignored.
#[tokio::test]
async fn merged_by_content_needs_spokekeepers_own_commit() {
    let (_dir, repo, clones, _) = lib_repo().await;
    let (branch, rel) = (DEV_BRANCH, Path::new(DEV_FILE));
    let work = &clones[1];
    // spokekeeper's branch, squash-merged: main gets the same file in a new commit.
    let ours = push_ours(&repo, b"kind: SealedSecret\nv: 1\n", None).await;
    push_theirs(
        work,
        &[(DEV_FILE, "kind: SealedSecret\nv: 1\n")],
        None,
        "refs/heads/main",
    );
    repo.sync().await.unwrap();
    assert!(repo.merged(branch, &ours, rel).await, "squash-merged");

    // Someone else's branch: the spoke's file as on main, plus a Flux manifest.
    let backdoor = push_theirs(
        work,
        &[("fluxcd/backdoor.yaml", "kind: Kustomization\n")],
        None,
        &format!("refs/heads/{branch}"),
    );
    repo.fetch_review_branches().await.unwrap();
    assert_eq!(
        repo.remote_branch_head(branch).await,
        Some(backdoor.clone())
    );
    assert!(
        !repo.merged(branch, &backdoor, rel).await,
        "the same file is not enough"
    );

    // Anything already in main is merged, whoever made it.
    let on_main = push_theirs(work, &[("README.md", "x\n")], None, "refs/heads/main");
    repo.sync().await.unwrap();
    assert!(repo.merged(branch, &on_main, rel).await);
}
