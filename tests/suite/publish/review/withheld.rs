//! When review mode publishes nothing: a dry run, a refused leadership gate, commits left in
//! the clone.

use crate::support;

use super::{review, spoke};
use spokekeeper::repo::Repo;
use spokekeeper_lab::forge::Kind;
use support::fleet::action;
use support::git::git;

#[test]
fn a_dry_run_pushes_nothing_and_opens_nothing() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Gitea, 1, "");
    let (code, report, err) = r.fleet.rotate_json(&["--all", "--dry-run"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "would-rotate", "{report}");
    assert!(r.branch_head(0).is_none());
    assert!(r.forge.seen().is_empty());

    let (code, _, _) = r.rotate();
    assert_eq!(code, 0);
    let head = r.branch_head(0);
    let writes = r.forge.seen().iter().filter(|s| s.method != "GET").count();
    let (code, report, err) = r.fleet.rotate_json(&["--all", "--dry-run"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "pending", "{report}");
    assert_eq!(
        spoke(&report, 0)["pull_request"]["number"],
        1,
        "looked up, read-only"
    );
    assert_eq!(r.branch_head(0), head);
    assert_eq!(
        r.forge.seen().iter().filter(|s| s.method != "GET").count(),
        writes
    );
}

/// A commit left in the clone by an earlier direct-mode run is not published: review mode
/// never pushes the target branch, and says what to do.
#[tokio::test(flavor = "multi_thread")]
async fn review_mode_never_pushes_commits_left_in_the_clone() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Github, 1, "");
    let main_before = git(&r.fleet.remote, &["rev-parse", "main"]);
    std::fs::write(r.fleet.clone.join("NOTES.md"), "left behind\n").unwrap();
    git(&r.fleet.clone, &["add", "NOTES.md"]);
    support::git::commit(&r.fleet.clone, "a direct-mode leftover");
    let (code, report, err) = r.rotate();
    assert_eq!(code, 1, "{report}\n{err}");
    let e = report["repo_error"].as_str().unwrap();
    assert!(
        e.contains("1 commit(s)") && e.contains("never pushes the target branch"),
        "{e}"
    );
    assert_eq!(git(&r.fleet.remote, &["rev-parse", "main"]), main_before);
    assert_eq!(
        spoke(&report, 0)["action"],
        "pending",
        "the spoke is still proposed"
    );
    // Dropped by hand: the next tick is clean.
    git(
        &r.fleet.clone,
        &["reset", "--quiet", "--hard", "origin/main"],
    );
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(git(&r.fleet.remote, &["rev-parse", "main"]), main_before);
}

/// Leadership (issue 19, item 8) in review mode: a refused gate pushes no branch and
/// sends nothing to the forge; refused after the push, the branch stays and the forge
/// still hears nothing; a tick that may act opens the pull request.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_gate_pushes_no_branch_and_sends_nothing_to_the_forge() {
    crate::support::requires!(ROOT);
    use spokekeeper::rotate::{self, Context, Gate, Options, Outcome, RepoStage, Stage};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    const LOST: &str = "this replica no longer holds the lease";
    let r = review(Kind::Github, 1, "");
    let config = spokekeeper::config::Config::load(&r.fleet.config).unwrap();
    let sealing = spokekeeper::seal::SealingKey::from_pem(
        &std::fs::read(support::fleet::vectors().join("key/cert.pem")).unwrap(),
        "cert.pem",
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let repo = Repo::open(&config.repo).await.unwrap();
    let ctx = Context::new(config, sealing, repo).unwrap();
    let refused_push = |report: &rotate::TickReport| {
        let failure = report.repo_error.clone().expect("a repo error");
        assert_eq!(failure.stage(), RepoStage::Push);
        assert_eq!(failure.to_string(), format!("push: not pushed: {LOST}"));
    };

    let refused = Options {
        concurrency: 1,
        gate: Gate::new(|| Err(std::io::Error::other(LOST))),
        ..Options::default()
    };
    let report = rotate::tick(&ctx, &refused).await.unwrap();
    refused_push(&report);
    assert_eq!(
        report.spokes[0].outcome,
        Outcome::Failed(spokekeeper::rotate::SpokeError::NotPushed {
            branch: "spokekeeper/spoke0".into(),
            why: LOST.into(),
        })
    );
    assert_eq!(r.branch_head(0), None, "no branch pushed");
    assert!(r.forge.seen().is_empty(), "nothing sent to the forge");

    // The gate closes between the push and the forge.
    let asked = Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    let closing = Options {
        concurrency: 1,
        gate: Gate::new(move || match count.fetch_add(1, Ordering::SeqCst) {
            0 => Ok(()),
            _ => Err(std::io::Error::other(LOST)),
        }),
        ..Options::default()
    };
    let report = rotate::tick(&ctx, &closing).await.unwrap();
    refused_push(&report);
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    let pushed = r
        .branch_head(0)
        .expect("the branch was pushed while the gate was open");
    match &report.spokes[0].outcome {
        Outcome::Failed(error) => {
            assert_eq!(error.stage(), Stage::Review);
            let error = error.to_string();
            assert!(
                error.contains("branch spokekeeper/spoke0 pushed") && error.contains(LOST),
                "{error}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(r.forge.seen().is_empty(), "nothing sent to the forge");

    let open = Options {
        concurrency: 1,
        ..Options::default()
    };
    let report = rotate::tick(&ctx, &open).await.unwrap();
    assert!(report.repo_error.is_none(), "{:?}", report.repo_error);
    assert!(
        matches!(
            &report.spokes[0].outcome,
            Outcome::Pending {
                commit: None,
                change: Some(_),
                ..
            }
        ),
        "{:?}",
        report.spokes[0].outcome
    );
    assert_eq!(r.branch_head(0), Some(pushed), "not pushed again");
    assert_eq!(r.forge.open_pulls().len(), 1);
}
