//! Removal branches (a federated spoke's old Secret removed by pull request) against a
//! real remote: only the signed commit this clone pushed last, one commit on the target
//! branch deleting the old file alone with its trailer, is trusted; once the target no
//! longer holds the file, the clone's own record says the removal landed.

use crate::support;

use std::path::Path;

use super::{commit_as_someone, lib_repo, push_theirs};
use spokekeeper::repo::{Repo, Untrusted};
use support::git::{git, signing_key, verifies_with};

const OLD: &str = "fluxcd/edge-kubeconfig-sealed.yaml";
const BRANCH: &str = "spokekeeper/edge.remove-old-secret";
const TRAILER: &str = "Spokekeeper-Removes: fluxcd/edge-kubeconfig-sealed.yaml";

/// The old Secret's file committed on main from the second clone `work`; the fleet
/// clone synced.
async fn with_old_file(repo: &Repo, work: &Path) {
    let files = [(OLD, "kind: SealedSecret\n"), ("README.md", "fleet\n")];
    push_theirs(work, &files, None, "refs/heads/main");
    repo.sync().await.unwrap();
}

/// Someone else's commit in `work` deleting `paths` (and writing `writes`), with
/// `message`, signed with `sign` when given, force-pushed to BRANCH; the commit.
fn theirs(
    work: &Path,
    (paths, writes): (&[&str], &[&str]),
    sign: Option<&Path>,
    message: &str,
) -> String {
    for p in paths {
        git(work, &["rm", "--quiet", p]);
    }
    for p in writes {
        std::fs::write(work.join(p), "kind: SealedSecret\nv: 2\n").unwrap();
        git(work, &["add", p]);
    }
    commit_as_someone(work, sign, &["-m", message]);
    let head = git(work, &["rev-parse", "HEAD"]).trim().to_string();
    let to = format!("{head}:refs/heads/{BRANCH}");
    git(work, &["push", "--quiet", "--force", "origin", &to]);
    git(work, &["reset", "--quiet", "--hard", "origin/main"]);
    head
}

#[tokio::test]
async fn a_removal_commit_deletes_the_old_file_alone_and_is_trusted_only_as_pushed() {
    let (_dir, repo, clones, key) = lib_repo().await;
    let rel = Path::new(OLD);
    assert_eq!(
        repo.commit_removal(rel, "edge: remove").await.unwrap(),
        None,
        "the target branch does not hold it yet"
    );
    with_old_file(&repo, &clones[1]).await;
    let sha = repo
        .commit_removal(rel, "edge: remove the old Secret\n\nwhy\n")
        .await
        .unwrap()
        .unwrap();
    let clone = &clones[0];
    assert!(
        verifies_with(clone, &key, &sha),
        "signed with repo.signing_key"
    );
    let changed = git(
        clone,
        &["diff-tree", "--no-commit-id", "--name-status", "-r", &sha],
    );
    assert_eq!(changed, format!("D\t{OLD}\n"));
    let message = git(clone, &["log", "-1", "--format=%B", &sha]);
    assert_eq!(
        message.trim_end(),
        format!("edge: remove the old Secret\n\nwhy\n\n{TRAILER}")
    );
    assert_eq!(
        repo.removal_provenance(BRANCH, &sha, rel).await,
        Err(Untrusted::NoRecord),
        "not pushed yet"
    );
    repo.push_branch(BRANCH, &sha, None).await.unwrap();
    assert_eq!(repo.removal_provenance(BRANCH, &sha, rel).await, Ok(()));
    // Not a rotation of that file, and not the removal of another.
    assert!(matches!(
        repo.provenance(BRANCH, &sha, rel).await,
        Err(Untrusted::Changes { .. })
    ));
    let other = Path::new("fluxcd/prod-kubeconfig-sealed.yaml");
    assert!(matches!(
        repo.removal_provenance(BRANCH, &sha, other).await,
        Err(Untrusted::NoRemovalTrailer { .. })
    ));
}

#[tokio::test]
async fn a_look_alike_removal_is_not_trusted() {
    let (dir, repo, clones, key) = lib_repo().await;
    let other = signing_key(&dir.path().join("other-key"));
    let work = &clones[1];
    with_old_file(&repo, work).await;
    let rel = Path::new(OLD);
    let with_trailer = format!("edge: remove\n\n{TRAILER}");
    let check = |head: String| {
        let repo = &repo;
        async move {
            repo.fetch_review_branches().await.unwrap();
            assert_eq!(repo.remote_branch_head(BRANCH).await, Some(head.clone()));
            repo.removal_provenance(BRANCH, &head, rel).await
        }
    };
    let only = (&[OLD][..], &[][..]);
    assert_eq!(
        check(theirs(work, only, None, &with_trailer)).await,
        Err(Untrusted::Unsigned)
    );
    assert_eq!(
        check(theirs(work, only, Some(&other), &with_trailer)).await,
        Err(Untrusted::ForeignSignature)
    );
    assert_eq!(
        check(theirs(work, only, Some(&key), &with_trailer)).await,
        Err(Untrusted::NoRecord),
        "signed with the key in another clone, but not pushed by this one"
    );
    let no_trailer = theirs(work, only, Some(&key), "edge: remove");
    assert!(matches!(
        check(no_trailer).await,
        Err(Untrusted::NoRemovalTrailer { .. })
    ));
    let both = (&[OLD, "README.md"][..], &[][..]);
    let e = check(theirs(work, both, Some(&key), &with_trailer))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("also README.md"), "{e}");
    let rewrites = (&[][..], &[OLD][..]);
    let e = check(theirs(work, rewrites, Some(&key), &with_trailer))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("is not deleted as a regular file"),
        "{e}"
    );
}

#[tokio::test]
async fn a_merged_removal_lands_by_the_clones_record_even_when_the_forge_deleted_the_branch() {
    let (_dir, repo, clones, _key) = lib_repo().await;
    let work = &clones[1];
    with_old_file(&repo, work).await;
    let rel = Path::new(OLD);
    let sha = repo
        .commit_removal(rel, "edge: remove")
        .await
        .unwrap()
        .unwrap();
    repo.push_branch(BRANCH, &sha, None).await.unwrap();
    assert_eq!(repo.removal_landed(BRANCH, rel).await, None, "not merged");
    assert!(
        repo.pushed_branches()
            .await
            .unwrap()
            .contains(&BRANCH.to_string())
    );
    // A squash merge by a reviewer (a new commit on main), then the branch deleted.
    git(work, &["fetch", "--quiet", "origin"]);
    git(work, &["reset", "--quiet", "--hard", "origin/main"]);
    git(work, &["rm", "--quiet", OLD]);
    commit_as_someone(work, None, &["-m", "edge: remove (squashed)"]);
    git(work, &["push", "--quiet", "origin", "HEAD:main"]);
    git(
        work,
        &[
            "push",
            "--quiet",
            "origin",
            &format!(":refs/heads/{BRANCH}"),
        ],
    );
    repo.sync().await.unwrap();
    repo.fetch_review_branches().await.unwrap();
    assert_eq!(repo.remote_branch_head(BRANCH).await, None);
    assert_eq!(repo.removal_landed(BRANCH, rel).await, Some(sha.clone()));
    assert_eq!(
        repo.removed_file(&sha, rel).await.unwrap().as_deref(),
        Some(&b"kind: SealedSecret\n"[..]),
        "what the removal took away"
    );
    repo.forget_pushed(BRANCH).await.unwrap();
    assert_eq!(repo.removal_landed(BRANCH, rel).await, None, "done with");
    assert!(
        !repo
            .pushed_branches()
            .await
            .unwrap()
            .contains(&BRANCH.to_string())
    );
}
