//! What check, the table and the daemon say about pending reviews, and what review mode
//! endorses as pending: only the pull request showing the commit this clone pushed.

use crate::support;

use std::time::Duration;

use super::{Review, review, review_failure, spoke};
use serde_json::Value;
use spokekeeper_lab::forge::{Kind, TOKEN};

/// `check -o json`'s finding about the pending review; `check` exits `code`.
fn review_finding(r: &Review, code: i32) -> Value {
    let (got, out, err) = r.fleet.run(&["check", "-o", "json"]);
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    assert_eq!(got, code, "{json}");
    json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["cert"] == "review")
        .unwrap_or_else(|| panic!("{json}"))
        .clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn check_and_the_table_show_pending_reviews_and_their_age() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Github, 1, "");
    let (code, out, err) = r.fleet.rotate(&["--all"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("pending (opened)") && out.contains("#1"),
        "{out}"
    );
    assert!(
        err.contains("spoke0: waiting for review on spokekeeper/spoke0 for ")
            && err.contains("https://github.com/org/fleet/pull/1"),
        "{err}"
    );
    r.merge(0);
    // The hub's credential works; a forced rotation waits for review: a warning.
    let (code, report, err) = r.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["change"], "opened", "{report}");
    let review = review_finding(&r, 1);
    assert_eq!(review["severity"], "warning");
    assert_eq!(review["alertname"], Value::Null);
    assert!(
        review["detail"].as_str().unwrap().contains("/pull/2"),
        "{review}"
    );
}

#[test]
fn check_alerts_when_a_broken_credential_waits_longer_than_pending_review_after() {
    crate::support::requires!(ROOT);
    // Nothing usable on the target branch (never merged), the fix open for 5 hours.
    let r = review(Kind::Gitlab, 1, "");
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    let yaml = std::fs::read_to_string(&r.fleet.config).unwrap();
    std::fs::write(
        &r.fleet.config,
        format!("{yaml}alerts:\n  pending_review_after: 4h\n"),
    )
    .unwrap();
    r.forge.backdate(1, Duration::from_secs(5 * 3600));
    let before = r.forge.seen().len();
    let review = review_finding(&r, 2);
    assert_eq!(review["severity"], "critical");
    assert_eq!(review["alertname"], "SpokekeeperReviewPending");
    assert!(
        review["detail"].as_str().unwrap().contains("for 5h 0m"),
        "{review}"
    );
    assert!(
        r.forge.seen()[before..].iter().all(|s| s.method == "GET"),
        "check only reads"
    );
}

/// F2: `check` endorses a pull request only when the forge shows the commit this clone
/// pushed (and it passes provenance). A branch and pull request made by someone else
/// are "unverified", never a validated fix.
#[test]
fn check_calls_a_pull_request_it_did_not_push_unverified() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Github, 1, "");
    let yaml = std::fs::read_to_string(&r.fleet.config).unwrap();
    std::fs::write(
        &r.fleet.config,
        format!("{yaml}alerts:\n  pending_review_after: 4h\n"),
    )
    .unwrap();
    let foreign = r.push_foreign(
        0,
        &[(
            "fluxcd/spoke0-kubeconfig-sealed.yaml",
            "kind: SealedSecret\n",
        )],
        None,
    );
    r.forge
        .insert_pull("spokekeeper/spoke0", "main", Duration::from_secs(5 * 3600));
    let (_, out, err) = r.fleet.run(&["check", "-o", "json"]);
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let findings = json["findings"].as_array().unwrap();
    assert!(
        findings.iter().all(|f| f["cert"] != "review"),
        "not a pending review: {json}"
    );
    let shown = out.to_lowercase();
    assert!(!shown.contains("validated"), "{out}");
    let unverified = findings
        .iter()
        .find(|f| f.to_string().contains("unverified pull request"))
        .unwrap_or_else(|| panic!("{json}"));
    assert!(
        unverified
            .to_string()
            .contains("https://github.com/org/fleet/pull/1"),
        "{unverified}"
    );
    assert!(
        unverified
            .to_string()
            .contains("no record of spokekeeper pushing"),
        "{unverified} ({foreign})"
    );
}

/// `spokekeeper run` in review mode: /metrics carries the pending review and its age.
#[test]
fn the_daemon_exports_pending_reviews() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Github, 1, "");
    let (code, _, _) = r.rotate();
    assert_eq!(code, 0);
    let daemon = support::daemon::Daemon::start(&r.fleet.config, &[]);
    let text = daemon.wait_for("tick finished", Duration::from_secs(30));
    assert!(
        text.contains("waiting for review") && text.contains("/pull/1"),
        "{text}"
    );
    let body = daemon.metrics();
    assert!(
        body.lines()
            .any(|l| l == "spokekeeper_pending_review{spoke=\"spoke0\"} 1"),
        "{body}"
    );
    let age = body
        .lines()
        .find_map(|l| l.strip_prefix("spokekeeper_pending_review_age_seconds{spoke=\"spoke0\"} "))
        .unwrap_or_else(|| panic!("{body}"));
    assert!(age.trim().parse::<u64>().unwrap() < 600, "{age}");
}

/// F2: a pull request spokekeeper did not open (someone else opened it from
/// spokekeeper's branch, with their own title and body) gets spokekeeper's title and
/// body, naming the verified head.
#[test]
fn an_adopted_pull_request_gets_spokekeepers_title_and_body() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Github, 1, "");
    std::fs::write(&r.token_file, "wrong-token\n").unwrap();
    let (code, report, _) = r.rotate();
    assert_eq!(code, 1, "the forge refused: {report}");
    let head = r.branch_head(0).expect("the branch is pushed");
    std::fs::write(&r.token_file, format!("{TOKEN}\n")).unwrap();
    r.forge
        .insert_pull("spokekeeper/spoke0", "main", Duration::from_secs(60));
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["action"], "pending", "{report}");
    assert_eq!(spoke(&report, 0)["change"], "updated", "{report}");
    let pulls = r.forge.open_pulls();
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert_eq!(
        pulls[0].title,
        "spoke0: rotate kubeconfig: initial credential"
    );
    assert!(
        pulls[0]
            .body
            .ends_with(&format!("head {head}, signed by spokekeeper\n")),
        "{}",
        pulls[0].body
    );
    // Written once: the next tick finds the text in place.
    let patches = r.forge.count("PATCH");
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["change"], Value::Null, "{report}");
    assert_eq!(r.forge.count("PATCH"), patches);
}

/// F2: a pull request whose head on the forge is not the commit spokekeeper pushed
/// and verified is not reported as pending.
#[test]
fn a_pull_request_showing_another_head_is_not_endorsed() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Gitlab, 1, "");
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    let head = r.branch_head(0).unwrap();
    let other = "1".repeat(40);
    r.forge.show_head(1, &other);
    let (code, report, err) = r.rotate();
    assert_eq!(code, 1, "{report}\n{err}");
    let e = review_failure(&report);
    assert!(
        e.contains("unverified pull request")
            && e.contains(&format!("the forge shows head {other}, not {head}")),
        "{e}"
    );
}
