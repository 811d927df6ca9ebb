//! The fleet repo against a real bare remote: commit, push, races, plaintext refusal,
//! locking, crash leftovers, an unreachable remote.

use crate::support;

use std::path::{Path, PathBuf};

use spokekeeper::config::RepoConfig;
use spokekeeper::repo::{Pushed, Repo, RepoError};
use spokekeeper_lab::config::{ConfigBuilder, Spoke};
use support::git::{commit, fleet_remote, git, repo_config};

/// A bare remote with one commit on main, and `n` clones of it.
fn fleet(n: usize) -> (tempfile::TempDir, PathBuf, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let (remote, clones) = fleet_remote(dir.path(), n);
    (dir, remote, clones)
}

fn config(path: &Path) -> RepoConfig {
    repo_config(path, None)
}

async fn open(path: &Path) -> Repo {
    Repo::open(&config(path)).await.unwrap()
}

#[tokio::test]
async fn commit_push_and_idempotence() {
    let (_d, remote, clones) = fleet(1);
    let repo = open(&clones[0]).await;
    repo.sync().await.unwrap();
    let rel = Path::new("fluxcd/dev-kubeconfig-sealed.yaml");
    assert_eq!(repo.read(rel).await.unwrap(), None);
    repo.write_atomic(rel, b"kind: SealedSecret\n").unwrap();
    let sha = repo
        .commit(rel, "dev: initial credential")
        .await
        .unwrap()
        .expect("a commit");
    assert_eq!(
        repo.commit(rel, "again").await.unwrap(),
        None,
        "nothing changed, nothing committed"
    );
    assert_eq!(repo.unpushed().await.unwrap(), 1);
    assert_eq!(repo.push().await.unwrap(), Pushed::Done { rebases: 0 });
    assert_eq!(repo.push().await.unwrap(), Pushed::Nothing);
    let log = git(&remote, &["log", "--format=%H %an <%ae> %s", "main"]);
    let first = log.lines().next().unwrap();
    assert_eq!(
        first,
        format!("{sha} spokekeeper <spokekeeper@example.org> dev: initial credential")
    );
    assert_eq!(
        git(&remote, &["show", &format!("main:{}", rel.display())]),
        "kind: SealedSecret\n"
    );
}

#[tokio::test]
async fn push_rebases_over_a_concurrent_commit() {
    let (_d, remote, clones) = fleet(2);
    let ours = open(&clones[0]).await;
    let theirs = open(&clones[1]).await;
    ours.sync().await.unwrap();
    theirs.sync().await.unwrap();
    theirs.write_atomic(Path::new("b.yaml"), b"b\n").unwrap();
    theirs.commit(Path::new("b.yaml"), "theirs").await.unwrap();
    theirs.push().await.unwrap();
    // Our clone has not fetched: the first push is rejected, then rebased and pushed.
    ours.write_atomic(Path::new("a.yaml"), b"a\n").unwrap();
    ours.commit(Path::new("a.yaml"), "ours").await.unwrap();
    assert_eq!(ours.push().await.unwrap(), Pushed::Done { rebases: 1 });
    let subjects = git(&remote, &["log", "--format=%s", "main"]);
    assert_eq!(
        subjects.lines().take(2).collect::<Vec<_>>(),
        ["ours", "theirs"]
    );
}

#[tokio::test]
async fn plaintext_is_never_committed() {
    let (_d, _remote, clones) = fleet(1);
    let repo = open(&clones[0]).await;
    let cases: [(&str, &[u8]); 6] = [
        (
            "j.json",
            br#"{"apiVersion":"v1","kind":"Secret","data":{"value":"aGk="}}"#,
        ),
        (
            "l.yaml",
            b"kind: List\nitems:\n- kind: Secret\n  data:\n    value: aGk=\n",
        ),
        ("k.yaml", b"users:\n- user:\n    client-key-data: LS0t\n"),
        (
            "p.pem",
            b"-----BEGIN EC PRIVATE KEY-----\nMHc=\n-----END EC PRIVATE KEY-----\n",
        ),
        (
            "s.yaml",
            b"apiVersion: v1\nkind: Secret\ndata:\n  value: aGk=\n",
        ),
        (
            "t.yaml",
            b"apiVersion: v1\nkind: Config\nusers:\n- user:\n    token: abc\n",
        ),
    ];
    let head = git(&clones[0], &["rev-parse", "HEAD"]);
    for (file, bytes) in cases {
        repo.write_atomic(Path::new(file), bytes).unwrap();
        let err = repo.commit(Path::new(file), "leak").await.unwrap_err();
        assert!(matches!(err, RepoError::Plaintext { .. }), "{file}: {err}");
        assert!(err.to_string().contains("nothing was committed"), "{err}");
    }
    assert_eq!(
        git(&clones[0], &["rev-parse", "HEAD"]),
        head,
        "no commit was made"
    );
    assert_eq!(
        git(&clones[0], &["diff", "--cached", "--name-only"]),
        "",
        "nothing left staged"
    );
}

#[tokio::test]
async fn lock_is_exclusive_and_released_on_drop() {
    let (_d, _remote, clones) = fleet(1);
    let repo = open(&clones[0]).await;
    let held = repo.lock().unwrap();
    assert!(matches!(repo.lock(), Err(RepoError::Locked(_))));
    drop(held);
    repo.lock().unwrap();
}

/// A child forked by another thread holds a copy of the lock's descriptor until its
/// exec closes it; a lock just dropped must still be taken again by the same run.
#[tokio::test]
async fn a_dropped_lock_is_taken_again_while_other_threads_spawn_children() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let (_d, _remote, clones) = fleet(1);
    let repo = open(&clones[0]).await;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let spawned = std::sync::Arc::new(AtomicU32::new(0));
    let spawner = {
        let (stop, spawned) = (stop.clone(), spawned.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = std::process::Command::new("true").status();
                spawned.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // Lock and drop for as long as it takes the other thread to spawn 100 children, so
    // the two overlap however loaded the machine is.
    let mut round = 0u64;
    while spawned.load(Ordering::Relaxed) < 100 {
        let held = repo.lock().unwrap_or_else(|e| panic!("round {round}: {e}"));
        drop(held);
        round += 1;
    }
    stop.store(true, Ordering::Relaxed);
    spawner.join().unwrap();
    assert!(
        round > 0,
        "the lock was taken and dropped while children were spawned"
    );
}

#[tokio::test]
async fn sync_discards_crash_leftovers_and_keeps_unpushed_commits() {
    let (_d, remote, clones) = fleet(2);
    let repo = open(&clones[0]).await;
    // A committed but unpushed change survives a sync over a moved remote.
    repo.write_atomic(Path::new("kept.yaml"), b"kept\n")
        .unwrap();
    repo.commit(Path::new("kept.yaml"), "kept").await.unwrap();
    let other = open(&clones[1]).await;
    other.write_atomic(Path::new("other.yaml"), b"o\n").unwrap();
    other
        .commit(Path::new("other.yaml"), "other")
        .await
        .unwrap();
    other.push().await.unwrap();
    // A git killed mid-commit left its index lock.
    std::fs::write(clones[0].join(".git/index.lock"), "").unwrap();
    // A written but uncommitted change (crash between write and commit) is discarded.
    std::fs::write(clones[0].join("README.md"), "half-done\n").unwrap();
    repo.sync().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(clones[0].join("README.md")).unwrap(),
        "fleet\n"
    );
    assert!(
        clones[0].join("other.yaml").exists(),
        "rebased onto the remote"
    );
    assert_eq!(repo.unpushed().await.unwrap(), 1);
    repo.push().await.unwrap();
    assert!(git(&remote, &["log", "--format=%s", "main"]).contains("kept"));
}

#[tokio::test]
async fn unreachable_remote_fails_clearly_and_recovers() {
    let (d, remote, clones) = fleet(1);
    let repo = open(&clones[0]).await;
    repo.write_atomic(Path::new("a.yaml"), b"a\n").unwrap();
    repo.commit(Path::new("a.yaml"), "a").await.unwrap();
    let moved = d.path().join("moved.git");
    std::fs::rename(&remote, &moved).unwrap();
    let err = repo.push().await.unwrap_err();
    assert!(err.to_string().contains("git push"), "{err}");
    assert!(repo.sync().await.is_err(), "fetch fails too");
    assert_eq!(repo.unpushed().await.unwrap(), 1, "the commit stays local");
    std::fs::rename(&moved, &remote).unwrap();
    repo.sync().await.unwrap();
    assert_eq!(repo.push().await.unwrap(), Pushed::Done { rebases: 0 });
}

#[tokio::test]
async fn refuses_paths_outside_and_non_clones() {
    let (d, _remote, clones) = fleet(1);
    let repo = open(&clones[0]).await;
    for bad in ["../x.yaml", "/etc/passwd", ""] {
        assert!(
            matches!(
                repo.write_atomic(Path::new(bad), b"x"),
                Err(RepoError::OutsideRepo { .. })
            ),
            "{bad}"
        );
    }
    let plain = d.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let err = Repo::open(&config(&plain))
        .await
        .err()
        .expect("not a clone");
    assert!(err.to_string().contains("git clone"), "{err}");
    // A subdirectory of a clone is not the clone.
    std::fs::create_dir(clones[0].join("sub")).unwrap();
    assert!(Repo::open(&config(&clones[0].join("sub"))).await.is_err());
}

/// Review branches: a plumbing commit on the remote target branch, pushed with a lease;
/// the clone's checkout and working tree are never touched.
#[tokio::test]
async fn review_branches_commit_beside_the_checkout_and_push_with_a_lease() {
    let (d, remote, clones) = fleet(2);
    let key = support::git::signing_key(&d.path().join("signing-key"));
    let repo = Repo::open(&RepoConfig {
        signing_key: Some(key.clone()),
        ..config(&clones[0])
    })
    .await
    .unwrap();
    repo.sync().await.unwrap();
    let rel = Path::new("fluxcd/dev-kubeconfig-sealed.yaml");
    let branch = "spokekeeper/dev";
    let first = repo
        .commit_on_target(
            rel,
            b"kind: SealedSecret\nv: 1\n",
            "dev: rotate kubeconfig: initial credential",
        )
        .await
        .unwrap();
    repo.push_branch(branch, &first, None).await.unwrap();
    assert_eq!(
        repo.remote_branch_head(branch).await.as_deref(),
        Some(first.as_str())
    );
    assert_eq!(
        git(&remote, &["show", &format!("{branch}:{}", rel.display())]),
        "kind: SealedSecret\nv: 1\n"
    );
    assert_eq!(
        git(&clones[0], &["symbolic-ref", "--short", "HEAD"]).trim(),
        "main"
    );
    assert_eq!(git(&clones[0], &["status", "--porcelain"]).trim(), "");
    assert_eq!(
        repo.read(rel).await.unwrap(),
        None,
        "the working tree has no trace of it"
    );
    assert!(!repo.merged(branch, &first, rel).await);
    assert!(
        support::git::verifies_with(&remote, &key, &first),
        "signed with repo.signing_key"
    );

    // "Create" when the branch exists is refused: someone else's branch is never clobbered.
    let second = repo
        .commit_on_target(rel, b"kind: SealedSecret\nv: 2\n", "dev: again")
        .await
        .unwrap();
    let e = repo.push_branch(branch, &second, None).await.unwrap_err();
    assert!(matches!(e, RepoError::Git { .. }), "{e}");

    // Another client moved the branch: a lease on the head we saw is refused.
    let other = &clones[1];
    git(
        other,
        &["fetch", "--quiet", "origin", &format!("{branch}:{branch}")],
    );
    git(other, &["checkout", "--quiet", branch]);
    std::fs::write(other.join("note"), "x").unwrap();
    git(other, &["add", "note"]);
    git(
        other,
        &[
            "-c",
            "user.name=o",
            "-c",
            "user.email=o@o",
            "commit",
            "--quiet",
            "-m",
            "other",
        ],
    );
    git(other, &["push", "--quiet", "origin", branch]);
    let e = repo
        .push_branch(branch, &second, Some(&first))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("stale info"), "{e}");

    // With the head the remote really has, the branch is replaced (not stacked).
    repo.fetch_review_branches().await.unwrap();
    let now = repo.remote_branch_head(branch).await.unwrap();
    assert_ne!(now, first);
    repo.push_branch(branch, &second, Some(&now)).await.unwrap();
    let parent = git(&remote, &["rev-parse", &format!("{branch}^")]);
    assert_eq!(
        parent,
        git(&remote, &["rev-parse", "main"]),
        "one commit on main"
    );

    plaintext_is_refused_on_a_review_branch_too(&repo, rel, &clones[0]).await;
}

/// The plaintext guard holds for review commits too, and leaves no private index behind.
async fn plaintext_is_refused_on_a_review_branch_too(repo: &Repo, rel: &Path, clone: &Path) {
    let e = repo
        .commit_on_target(rel, b"users:\n- user:\n    client-key-data: AAAA\n", "leak")
        .await
        .unwrap_err();
    assert!(matches!(e, RepoError::Plaintext { .. }), "{e}");
    let left: Vec<_> = std::fs::read_dir(clone.join(".git"))
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("spokekeeper-index")
        })
        .collect();
    assert!(left.is_empty(), "private indexes are removed: {left:?}");
}

/// Issue 19, item 8: a git call that is dropped (a tick cancelled when the lease is lost)
/// ends what git started too, so no push can finish afterwards. The remote is an `ext::`
/// helper that records its pid and hangs, as a slow ssh would.
#[tokio::test]
async fn a_cancelled_push_ends_everything_git_started() {
    let (d, _remote, clones) = fleet(1);
    let pidfile = d.path().join("helper.pid");
    let helper = d.path().join("helper.sh");
    std::fs::write(
        &helper,
        format!("echo $$ > {}\nexec sleep 60\n", pidfile.display()),
    )
    .unwrap();
    git(&clones[0], &["config", "protocol.ext.allow", "always"]);
    git(
        &clones[0],
        &[
            "config",
            "remote.origin.url",
            &format!("ext::sh {}", helper.display()),
        ],
    );
    let repo = open(&clones[0]).await;
    repo.write_atomic(Path::new("a.yaml"), b"a\n").unwrap();
    repo.commit(Path::new("a.yaml"), "a").await.unwrap();
    let push = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let pushing = repo.push();
        tokio::pin!(pushing);
        // Until the helper runs, then drop the push.
        loop {
            tokio::select! {
                r = &mut pushing => panic!("the push ended: {r:?}"),
                _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {
                    if std::fs::read_to_string(&pidfile).is_ok_and(|p| p.ends_with('\n')) {
                        break;
                    }
                }
            }
        }
    })
    .await;
    assert!(push.is_ok(), "the helper never started");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let alive = || {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ")
    };
    let end = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while alive() && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        !alive(),
        "the remote helper (pid {pid}) outlived the cancelled push"
    );
}

/// What `read` answers, as text to compare: the bytes, "none", or the error's kind.
fn answer(r: Result<Option<Vec<u8>>, RepoError>) -> String {
    match r {
        Ok(Some(b)) => format!("bytes {:?}", String::from_utf8_lossy(&b)),
        Ok(None) => "none".into(),
        Err(RepoError::Symlink(_)) => "symlink".into(),
        Err(RepoError::Io { .. }) => "not a regular file".into(),
        Err(e) => format!("other: {e}"),
    }
}

#[tokio::test]
async fn a_snapshot_reads_what_read_reads_as_head_held_it_when_listed() {
    let (d, _remote, clones) = fleet(1);
    let outside = d.path().join("outside.yaml");
    std::fs::write(&outside, "outside\n").unwrap();
    let clone = &clones[0];
    for (rel, text) in [("fluxcd/a.yaml", "a\n"), ("fluxcd/b.yaml", "")] {
        std::fs::create_dir_all(clone.join(rel).parent().unwrap()).unwrap();
        std::fs::write(clone.join(rel), text).unwrap();
    }
    let repo = with_committed_links(clone, &[("fluxcd/link.yaml", &outside)]).await;
    let files = repo.snapshot().await.unwrap();
    let paths = [
        "fluxcd/a.yaml",
        "fluxcd/b.yaml",
        "fluxcd/link.yaml",
        "fluxcd",
        "fluxcd/missing.yaml",
        "missing/a.yaml",
    ];
    let mut seen = Vec::new();
    for rel in paths {
        let rel = Path::new(rel);
        let direct = answer(repo.read(rel).await);
        assert_eq!(answer(files.read(rel).await), direct, "{}", rel.display());
        seen.push(direct);
    }
    assert_eq!(
        seen,
        [
            "bytes \"a\\n\"",
            "bytes \"\"",
            "symlink",
            "not a regular file",
            "none",
            "none"
        ]
    );

    // A later commit is not in the snapshot: it holds HEAD as listed; a new one sees it.
    let rel = Path::new("fluxcd/a.yaml");
    repo.write_atomic(rel, b"a, again\n").unwrap();
    repo.commit(rel, "a again")
        .await
        .unwrap()
        .expect("a commit");
    assert_eq!(answer(files.read(rel).await), "bytes \"a\\n\"");
    let again = repo.snapshot().await.unwrap();
    assert_eq!(answer(again.read(rel).await), answer(repo.read(rel).await));
    assert_eq!(answer(again.read(rel).await), "bytes \"a, again\\n\"");
}

/// Commits `links` (path in the clone -> target) as symbolic links and pushes them, as a
/// hostile or careless fleet repo would; the clone syncs to it.
async fn with_committed_links(clone: &Path, links: &[(&str, &Path)]) -> Repo {
    for (at, target) in links {
        let at = clone.join(at);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, &at).unwrap();
    }
    git(clone, &["add", "-A"]);
    commit(clone, "links");
    git(clone, &["push", "--quiet", "origin", "HEAD:main"]);
    let repo = open(clone).await;
    repo.sync().await.unwrap();
    repo
}

mod confined;
