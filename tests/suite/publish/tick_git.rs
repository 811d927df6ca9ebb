//! The git processes of a tick, counted through a `git` first on PATH: the commits of a
//! tick are one `git fast-import`, however many spokes rotate, and the tick runs as many
//! git processes for three commits as for one.

use crate::support;

use support::NodeOptions;
use support::fleet::{Fleet, action};
use support::git::{GitWrapper, git};

/// What `git commit` used per commit before (staging, checks, commit, rev-parse): none
/// of it runs per spoke now.
const PER_COMMIT_BEFORE: [&str; 6] = [
    "commit",
    "hash-object",
    "update-index",
    "diff",
    "check-attr",
    "config",
];

fn count(calls: &[String], sub: &str) -> usize {
    calls.iter().filter(|c| *c == sub).count()
}

#[tokio::test(flavor = "multi_thread")]
async fn one_git_process_makes_every_commit_of_a_tick() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::new(&vec![NodeOptions::default(); 3]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let pushed_before = fleet.remote_log().len();
    let wrapper = GitWrapper::new("");
    fleet.path = Some(wrapper.path());

    let (code, report, err) = fleet.rotate_json(&["spoke1", "--force"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated", "{report}");
    let one = wrapper.take_calls();
    assert_eq!(fleet.remote_log().len(), pushed_before + 1);

    let (code, report, err) = fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let three = wrapper.take_calls();
    let log = fleet.remote_log();
    assert_eq!(log.len(), pushed_before + 4, "one commit a spoke");
    for (i, subject) in log[..3].iter().rev().enumerate() {
        assert!(
            subject.starts_with(&format!("spoke{i}: rotate kubeconfig")),
            "configuration order: {log:?}"
        );
        let commit = report["spokes"][i]["commit"].as_str().unwrap();
        let at = format!("main~{}", 2 - i);
        assert_eq!(git(&fleet.remote, &["rev-parse", &at]).trim(), commit);
    }
    assert_eq!(count(&three, "fast-import"), 1, "{three:?}");
    for sub in PER_COMMIT_BEFORE {
        assert!(
            count(&three, sub) <= 1,
            "{sub} once a tick at most: {three:?}"
        );
    }
    assert_eq!(
        three.len(),
        one.len(),
        "as many git processes for three commits as for one: {three:?} / {one:?}"
    );
    let status = git(&fleet.clone, &["status", "--porcelain"]);
    assert_eq!(status, "", "HEAD, index and working tree agree");
    assert_eq!(
        git(&fleet.clone, &["rev-parse", "HEAD"]),
        git(&fleet.remote, &["rev-parse", "main"])
    );
}
