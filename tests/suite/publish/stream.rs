//! A tick's commits through one `git fast-import` (`Repo::commits`): the commits it
//! makes are those `git commit` makes, one after another; the branch moves only when the
//! stream ends, and the index and working tree then agree with HEAD.

use crate::support;

use std::path::Path;

use spokekeeper::repo::{Repo, RepoError};
use support::git::{fleet_remote, git, repo_config};

const SEALED: &[u8] = b"apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nspec:\n  encryptedData:\n    value: AgB=\n";

async fn open(path: &Path) -> Repo {
    let repo = Repo::open(&repo_config(path, None)).await.unwrap();
    repo.sync().await.unwrap();
    repo
}

/// HEAD, the index and the working tree agree: nothing staged, nothing modified.
fn consistent(clone: &Path) {
    let status = git(clone, &["status", "--porcelain", "--untracked-files=no"]);
    assert_eq!(status, "", "the index and working tree match HEAD");
}

#[tokio::test]
async fn stream_commits_are_the_commits_git_commit_makes() {
    let dir = tempfile::tempdir().unwrap();
    let (_remote, clones) = fleet_remote(dir.path(), 2);
    let repo = open(&clones[0]).await;
    let (a, b) = (Path::new("fluxcd/a.yaml"), Path::new("fluxcd/b.yaml"));
    let messages = [
        "a: rotate kubeconfig: CA changed\n\nserver: https://x\nCA: sha256:1\n",
        "b: rotate kubeconfig  \n\n\n\nvalidated: yes\n\n",
    ];
    let mut commits = repo.commits(&[a, b]).await.unwrap();
    let before = git(&clones[0], &["rev-parse", "HEAD"]);
    let mut made = Vec::new();
    for (rel, message) in [a, b].into_iter().zip(messages) {
        repo.write_atomic(rel, SEALED).unwrap();
        made.push(
            commits
                .commit(&repo, &[rel], message)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert_eq!(
        git(&clones[0], &["rev-parse", "HEAD"]),
        before,
        "the branch moves when the stream ends"
    );
    commits.finish(&repo).await.unwrap();
    consistent(&clones[0]);
    assert_eq!(git(&clones[0], &["rev-parse", "HEAD"]).trim(), made[1]);
    assert_eq!(
        git(&clones[0], &["rev-parse", &format!("{}^", made[1])]).trim(),
        made[0],
        "one commit after the other, in order"
    );
    // The same files and messages through `git commit -m` in the other clone.
    let other = &clones[1];
    for (rel, message) in [a, b].into_iter().zip(messages) {
        std::fs::create_dir_all(other.join("fluxcd")).unwrap();
        std::fs::write(other.join(rel), SEALED).unwrap();
        git(other, &["add", "--", &rel.display().to_string()]);
        let who = [
            "-c",
            "user.name=spokekeeper",
            "-c",
            "user.email=spokekeeper@example.org",
        ];
        git(
            other,
            &[&who[..], &["commit", "--quiet", "-m", message]].concat(),
        );
    }
    let log =
        |clone: &Path, f: &str, at: &str| git(clone, &["log", "-1", &format!("--format={f}"), at]);
    for at in ["HEAD", "HEAD^"] {
        for f in ["%B", "%T", "%an <%ae> %cn <%ce>"] {
            assert_eq!(log(&clones[0], f, at), log(other, f, at), "{f} of {at}");
        }
    }
    assert_eq!(log(&clones[0], "%P", "HEAD^"), log(other, "%P", "HEAD^"));
}

#[tokio::test]
async fn a_stream_ended_early_moves_nothing_and_the_next_sync_discards_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let (_remote, clones) = fleet_remote(dir.path(), 1);
    let repo = open(&clones[0]).await;
    let before = git(&clones[0], &["rev-parse", "HEAD"]);
    // A committed file: sync puts it back (a new one would stay untracked, as after a
    // crash between write and commit).
    let rel = Path::new("README.md");
    let mut commits = repo.commits(&[rel]).await.unwrap();
    repo.write_atomic(rel, SEALED).unwrap();
    let made = commits.commit(&repo, &[rel], "a").await.unwrap().unwrap();
    // Dropped unfinished, as a cancelled tick drops it: git is killed mid-stream.
    drop(commits);
    assert_eq!(git(&clones[0], &["rev-parse", "HEAD"]), before);
    let stored = std::process::Command::new("git")
        .arg("-C")
        .arg(&clones[0])
        .args(["cat-file", "-e", &made])
        .status()
        .unwrap();
    assert!(!stored.success(), "the commit was never stored");
    repo.sync().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(clones[0].join(rel)).unwrap(),
        "fleet\n",
        "the written file is put back"
    );
    consistent(&clones[0]);
    assert!(!clones[0].join(".git/refs/heads/main.lock").exists());
}

#[tokio::test]
async fn each_commit_follows_the_last_and_an_unchanged_file_makes_none() {
    let dir = tempfile::tempdir().unwrap();
    let (_remote, clones) = fleet_remote(dir.path(), 1);
    let repo = open(&clones[0]).await;
    let rel = Path::new("fluxcd/a.yaml");
    let mut commits = repo.commits(&[rel]).await.unwrap();
    repo.write_atomic(rel, SEALED).unwrap();
    let first = commits.commit(&repo, &[rel], "one").await.unwrap().unwrap();
    assert_eq!(
        commits.commit(&repo, &[rel], "same bytes").await.unwrap(),
        None,
        "the stream's last commit already holds them"
    );
    let changed = [SEALED, b"# changed\n"].concat();
    repo.write_atomic(rel, &changed).unwrap();
    let second = commits.commit(&repo, &[rel], "two").await.unwrap().unwrap();
    commits.finish(&repo).await.unwrap();
    assert_eq!(git(&clones[0], &["rev-parse", "HEAD^"]).trim(), first);
    assert_eq!(git(&clones[0], &["rev-parse", "HEAD"]).trim(), second);
    assert_eq!(
        git(&clones[0], &["show", "HEAD:fluxcd/a.yaml"]).as_bytes(),
        &changed[..]
    );
    consistent(&clones[0]);
    // And across streams: the next one starts from HEAD.
    assert_eq!(repo.commit(rel, "same again").await.unwrap(), None);
}

#[tokio::test]
async fn a_refused_file_is_put_back_and_the_stream_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (_remote, clones) = fleet_remote(dir.path(), 1);
    let repo = open(&clones[0]).await;
    let (leak, good) = (Path::new("leak.yaml"), Path::new("good.yaml"));
    std::fs::write(clones[0].join(leak), SEALED).unwrap();
    git(&clones[0], &["add", "leak.yaml"]);
    support::git::commit(&clones[0], "sealed");
    let mut commits = repo.commits(&[leak, good]).await.unwrap();
    repo.write_atomic(leak, b"apiVersion: v1\nkind: Secret\ndata:\n  k: aGk=\n")
        .unwrap();
    let e = commits.commit(&repo, &[leak], "leak").await.unwrap_err();
    assert!(matches!(e, RepoError::Plaintext { .. }), "{e}");
    assert_eq!(
        std::fs::read(clones[0].join(leak)).unwrap(),
        SEALED,
        "put back as committed"
    );
    repo.write_atomic(good, SEALED).unwrap();
    let made = commits
        .commit(&repo, &[good], "good")
        .await
        .unwrap()
        .unwrap();
    commits.finish(&repo).await.unwrap();
    assert_eq!(git(&clones[0], &["rev-parse", "HEAD"]).trim(), made);
    let files = git(&clones[0], &["show", "--name-only", "--format=", "HEAD"]);
    assert_eq!(files.trim(), "good.yaml");
    consistent(&clones[0]);
}

/// A federated spoke's old Secret goes in a commit of its own, after the commit that
/// wrote another file in the same stream: the clone's index and working tree follow, a
/// second removal makes none, and a stream that broke puts the file back.
#[tokio::test]
async fn a_removal_is_a_commit_of_its_own_and_the_clone_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_remote, clones) = fleet_remote(dir.path(), 1);
    let repo = open(&clones[0]).await;
    let (old, new) = (
        Path::new("fluxcd/edge-kubeconfig-sealed.yaml"),
        Path::new("fluxcd/a.yaml"),
    );
    repo.write_atomic(old, SEALED).unwrap();
    repo.commit(old, "sealed").await.unwrap().unwrap();

    let mut commits = repo.commits(&[old, new]).await.unwrap();
    repo.write_atomic(new, SEALED).unwrap();
    let wrote = commits.commit(&repo, &[new], "a").await.unwrap().unwrap();
    let removed = commits
        .remove(&repo, &[old], "edge: remove the old Secret")
        .await
        .unwrap()
        .unwrap();
    assert!(!clones[0].join(old).exists(), "gone from the working tree");
    assert_eq!(
        commits.remove(&repo, &[old], "again").await.unwrap(),
        None,
        "the stream's last commit no longer holds it"
    );
    commits.finish(&repo).await.unwrap();
    consistent(&clones[0]);
    assert_eq!(git(&clones[0], &["rev-parse", "HEAD"]).trim(), removed);
    assert_eq!(git(&clones[0], &["rev-parse", "HEAD^"]).trim(), wrote);
    let changed = git(
        &clones[0],
        &["show", "--name-status", "--format=%s", "HEAD"],
    );
    assert_eq!(
        changed.trim(),
        "edge: remove the old Secret\n\nD\tfluxcd/edge-kubeconfig-sealed.yaml"
    );
    let listed = git(&clones[0], &["ls-files", "fluxcd"]);
    assert_eq!(listed.trim(), "fluxcd/a.yaml");

    // A stream dropped after a removal moves nothing; the next sync puts the file back.
    repo.write_atomic(old, SEALED).unwrap();
    repo.commit(old, "sealed again").await.unwrap().unwrap();
    let before = git(&clones[0], &["rev-parse", "HEAD"]);
    let mut commits = repo.commits(&[old]).await.unwrap();
    commits.remove(&repo, &[old], "cut").await.unwrap().unwrap();
    drop(commits);
    assert_eq!(git(&clones[0], &["rev-parse", "HEAD"]), before);
    repo.sync().await.unwrap();
    assert_eq!(std::fs::read(clones[0].join(old)).unwrap(), SEALED);
    consistent(&clones[0]);
}
