//! A forge that refuses, limits, hangs or redirects: each is reported, the token stays out of
//! every message, and the pushed branch is kept for the next tick.

use crate::support;

use std::time::Duration;

use super::{KINDS, review, review_failure, spoke};
use axum::http::Method;
use serde_json::{Value, json};
use spokekeeper_lab::forge::{Fault, Kind, TOKEN};

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_token_keeps_the_branch_and_the_next_tick_opens_the_pull_request() {
    crate::support::requires!(ROOT);
    for kind in KINDS {
        let r = review(kind, 1, "");
        std::fs::write(&r.token_file, "wrong-token\n").unwrap();
        let (code, report, err) = r.rotate();
        assert_eq!(code, 1, "{kind:?}: {report}");
        let e = review_failure(&report);
        assert!(
            e.contains("401")
                && e.contains("repo.forge.token_file")
                && e.contains("branch spokekeeper/spoke0 pushed"),
            "{e}"
        );
        assert!(
            !e.contains("wrong-token") && !err.contains("wrong-token"),
            "{e}"
        );
        let pushed = r.branch_head(0).expect("the branch push is not lost");
        assert!(r.forge.pulls().is_empty());

        std::fs::write(&r.token_file, format!("{TOKEN}\n")).unwrap();
        let (code, report, err) = r.rotate();
        assert_eq!(code, 0, "{report}\n{err}");
        assert_eq!(spoke(&report, 0)["change"], "opened", "{report}");
        assert_eq!(
            spoke(&report, 0)["commit"],
            Value::Null,
            "not extracted or pushed again"
        );
        assert_eq!(r.branch_head(0), Some(pushed));
        assert_eq!(r.forge.open_pulls().len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn forbidden_wrong_repository_and_missing_token_are_reported() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Github, 1, "");
    r.forge.fault(
        Method::POST,
        Fault::Status(
            403,
            vec![],
            json!({"message": "Resource not accessible by personal access token", "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request", "status": "403"}),
        ),
    );
    let (code, report, _) = r.rotate();
    assert_eq!(code, 1);
    let e = spoke(&report, 0)["error"].as_str().unwrap();
    assert!(
        e.contains("403") && e.contains("permission") && e.contains("Resource not accessible"),
        "{e}"
    );
    assert!(r.branch_head(0).is_some());

    // A forge that echoes the token in an error: it is cut out.
    r.forge.fault(
        Method::POST,
        Fault::Status(
            500,
            vec![],
            json!({"message": format!("internal error for Bearer {TOKEN}")}),
        ),
    );
    let (code, report, err) = r.rotate();
    assert_eq!(code, 1);
    let e = spoke(&report, 0)["error"].as_str().unwrap();
    assert!(e.contains("500") && e.contains("Bearer [redacted]"), "{e}");
    assert!(
        !report.to_string().contains(TOKEN) && !err.contains(TOKEN),
        "{e}"
    );

    let yaml = std::fs::read_to_string(&r.fleet.config).unwrap();
    std::fs::write(
        &r.fleet.config,
        yaml.replace("repository: org/fleet", "repository: org/other"),
    )
    .unwrap();
    let (code, report, _) = r.rotate();
    assert_eq!(code, 1);
    let e = spoke(&report, 0)["error"].as_str().unwrap();
    assert!(
        e.contains("404") && e.contains("repo.forge.repository (org/other)"),
        "{e}"
    );

    let yaml = std::fs::read_to_string(&r.fleet.config).unwrap();
    let yaml = yaml.replace(
        &format!("token_file: {}", r.token_file.display()),
        "token_env: SPOKEKEEPER_TEST_NO_SUCH_VAR",
    );
    std::fs::write(&r.fleet.config, yaml).unwrap();
    let (code, report, _) = r.rotate();
    assert_eq!(code, 1);
    let e = spoke(&report, 0)["error"].as_str().unwrap();
    assert!(
        e.contains("SPOKEKEEPER_TEST_NO_SUCH_VAR") && e.contains("not set"),
        "{e}"
    );
    assert!(r.forge.pulls().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn rate_limits_are_waited_out_when_short_and_reported_when_long() {
    crate::support::requires!(ROOT);
    // GitHub: 403 with x-ratelimit-remaining 0 until x-ratelimit-reset.
    let r = review(Kind::Github, 1, "");
    let reset = time::OffsetDateTime::now_utc().unix_timestamp() + 1;
    r.forge.fault(
        Method::GET,
        Fault::Status(
            403,
            vec![("x-ratelimit-remaining", "0".into()), ("x-ratelimit-reset", reset.to_string())],
            json!({"message": "API rate limit exceeded for user ID 1.", "documentation_url": "https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting"}),
        ),
    );
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["change"], "opened");
    assert_eq!(r.forge.count("GET"), 2, "asked again after the reset");

    // GitLab: 429 with Retry-After: spoke0's create waits 1s once, then is told 3600s
    // (reported, branch kept); spoke1 is not sent into the same limit in this tick.
    let r = review(Kind::Gitlab, 2, "");
    for wait in ["1", "3600"] {
        r.forge.fault(
            Method::POST,
            Fault::Status(
                429,
                vec![("retry-after", wait.into())],
                json!({"message": "Retry later"}),
            ),
        );
    }
    let started = std::time::Instant::now();
    let (code, report, _) = r.rotate();
    assert!(started.elapsed() < Duration::from_secs(60), "bounded wait");
    assert_eq!(code, 1, "{report}");
    let e = spoke(&report, 0)["error"].as_str().unwrap();
    assert!(
        e.contains("rate limit") && e.contains("3600s") && e.contains("next tick"),
        "{e}"
    );
    assert_eq!(
        r.forge.count("POST"),
        2,
        "one retry after the short wait, none after the long, none for spoke1"
    );
    let e1 = spoke(&report, 1)["error"].as_str().unwrap();
    assert!(e1.contains("not tried") && e1.contains("3600s"), "{e1}");
    assert!(r.branch_head(0).is_some(), "the branch stays pushed");
    assert!(r.branch_head(1).is_some(), "the branch stays pushed");
    let (code, report, _) = r.rotate();
    assert_eq!(code, 0, "{report}");
    assert_eq!(spoke(&report, 0)["change"], "opened");
    assert_eq!(spoke(&report, 1)["change"], "opened");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_forge_times_out_and_the_branch_stays() {
    crate::support::requires!(ROOT);
    let _quiet = support::timing::exclusive();
    let r = review(Kind::Gitea, 1, "");
    r.forge
        .fault(Method::GET, Fault::Delay(Duration::from_secs(8)));
    let started = std::time::Instant::now();
    let (code, report, _) = r.rotate();
    assert_eq!(code, 1, "{report}");
    let e = spoke(&report, 0)["error"].as_str().unwrap();
    assert!(e.contains("did not answer") && e.contains("2s"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the timeout, not the hang, ended it"
    );
    assert!(r.branch_head(0).is_some());
}

/// A forge that hangs is waited for once per tick, not once per spoke: the other spokes
/// fail at once (their branches pushed) and the next tick retries.
#[tokio::test(flavor = "multi_thread")]
async fn a_hung_forge_costs_one_timeout_per_tick_not_one_per_spoke() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Github, 3, "");
    r.forge
        .fault(Method::GET, Fault::Delay(Duration::from_secs(8)));
    let (code, report, err) = r.rotate();
    assert_eq!(code, 1, "{report}\n{err}");
    let errors: Vec<&str> = (0..3)
        .map(|i| spoke(&report, i)["error"].as_str().unwrap())
        .collect();
    assert!(errors[0].contains("did not answer"), "{errors:?}");
    for e in &errors[1..] {
        assert!(
            e.contains("not tried") && e.contains("did not answer"),
            "{e}"
        );
    }
    // One request timed out (it would have been answered after 8 s) and no spoke after
    // it asked the forge again: one timeout, not three.
    assert_eq!(r.forge.count("GET"), 1, "{:?}", r.forge.seen());
    for i in 0..3 {
        assert!(r.branch_head(i).is_some(), "spoke{i}'s branch is pushed");
    }
    // The forge is back: the next tick opens all three.
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(r.forge.open_pulls().len(), 3);
}

/// A redirect is an error, not followed: GitLab's PRIVATE-TOKEN header would go along to
/// wherever it points.
#[tokio::test(flavor = "multi_thread")]
async fn a_redirecting_forge_is_refused_and_the_token_stays_home() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Gitlab, 1, "");
    r.forge.fault(
        Method::GET,
        Fault::Status(
            301,
            vec![(
                "Location",
                "https://elsewhere.invalid/api/v4/projects?token=x".to_string(),
            )],
            json!({"message": "moved"}),
        ),
    );
    let (code, report, err) = r.rotate();
    assert_eq!(code, 1, "{report}\n{err}");
    let e = spoke(&report, 0)["error"].as_str().unwrap();
    assert!(
        e.contains("redirect to https://elsewhere.invalid/api/v4/projects")
            && e.contains("does not follow redirects")
            && !e.contains("token=x"),
        "{e}"
    );
    assert!(!format!("{report}{err}").contains(TOKEN));
    assert!(r.branch_head(0).is_some(), "the branch push is kept");
}
