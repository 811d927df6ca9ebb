//! Review mode (`repo.mode: pull-request`) in the lab, through the binary: real sshd
//! spokes, real TLS API servers, a real bare git remote, and an emulated forge per kind
//! (lab/src/forge.rs) that checks paths, the token header and the JSON bodies.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::http::Method;
use serde_json::{Value, json};
use spokekeeper::repo::{Repo, Untrusted};
use spokekeeper_lab::forge::{Fault, ForgeSim, Kind, TOKEN};
use support::NodeOptions;
use support::fleet::{Fleet, action};
use support::git::{git, repo_config, signing_key, verifies_with};

const KINDS: [Kind; 3] = [Kind::Github, Kind::Gitlab, Kind::Gitea];

struct Review {
    fleet: Fleet,
    forge: ForgeSim,
    token_file: std::path::PathBuf,
    /// repo.signing_key: a fresh ed25519 key per test.
    signing_key: std::path::PathBuf,
}

/// A fleet of `n` spokes in review mode against an emulated forge of `kind`;
/// `extra` goes under `repo.forge`.
fn review(kind: Kind, n: usize, extra: &str) -> Review {
    let fleet = Fleet::new(&vec![NodeOptions::default(); n]);
    let forge = ForgeSim::start(kind, fleet.remote.clone());
    let token_file = fleet.dir.path().join("forge-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let signing_key = support::git::signing_key(&fleet.dir.path().join("signing-key"));
    let forge_yaml = forge.repo_yaml(&signing_key, &token_file)
        + "    timeout: 2s\n    rate_limit_wait: 3s\n"
        + extra;
    fleet
        .builder()
        .repo(&forge_yaml)
        .write(&fleet.config)
        .unwrap();
    Review {
        fleet,
        forge,
        token_file,
        signing_key,
    }
}

impl Review {
    fn rotate(&self) -> (i32, Value, String) {
        self.fleet.rotate_json(&["--all"])
    }

    fn branch_head(&self, spoke: usize) -> Option<String> {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&self.fleet.remote)
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("refs/heads/spokekeeper/spoke{spoke}"))
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn main_files(&self) -> String {
        git(
            &self.fleet.remote,
            &["ls-tree", "-r", "--name-only", "main"],
        )
    }

    /// Merges the review branch into main on the remote, as a reviewer would.
    fn merge(&self, spoke: usize) {
        self.merge_on_remote(spoke, false);
    }

    /// Squash-merges the review branch into main on the remote (GitHub's "Squash and
    /// merge"): a new commit on main with the branch's file; the branch stays.
    fn squash_merge(&self, spoke: usize) {
        self.merge_on_remote(spoke, true);
    }

    fn merge_on_remote(&self, spoke: usize, squash: bool) {
        let branch = format!("spokekeeper/spoke{spoke}");
        let dir = support::scratch_dir();
        let work = dir.path().join("merge");
        git(
            dir.path(),
            &[
                "clone",
                "--quiet",
                self.fleet.remote.to_str().unwrap(),
                work.to_str().unwrap(),
            ],
        );
        let from = format!("origin/{branch}");
        let reviewer = ["-c", "user.name=reviewer", "-c", "user.email=r@example.org"];
        if squash {
            git(&work, &["merge", "--quiet", "--squash", &from]);
            let commit = ["commit", "--quiet", "-m", "spoke: rotate (squashed)"];
            git(&work, &[&reviewer[..], &commit[..]].concat());
        } else {
            let merge = ["merge", "--quiet", "--no-ff", "-m", "Merge review", &from];
            git(&work, &[&reviewer[..], &merge[..]].concat());
        }
        git(&work, &["push", "--quiet", "origin", "HEAD:main"]);
        self.forge.mark_merged(&branch);
    }

    /// Pushes a commit on main that writes `files` to `spokekeeper/spoke{spoke}` as
    /// someone else would (force): signed with `key` when given, else unsigned. Returns it.
    fn push_foreign(&self, spoke: usize, files: &[(&str, &str)], key: Option<&Path>) -> String {
        let dir = support::scratch_dir();
        let work = dir.path().join("foreign");
        let remote = self.fleet.remote.to_str().unwrap();
        git(
            dir.path(),
            &["clone", "--quiet", remote, work.to_str().unwrap()],
        );
        for (path, text) in files {
            let file = work.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, text).unwrap();
            git(&work, &["add", path]);
        }
        let mut args = vec!["-c", "user.name=mallory", "-c", "user.email=m@example.org"];
        let signing = key.map(|k| format!("user.signingkey={}", k.display()));
        if let Some(k) = &signing {
            args.extend(["-c", "gpg.format=ssh", "-c", k, "commit", "-S"]);
        } else {
            args.push("commit");
        }
        args.extend([
            "--quiet",
            "-m",
            "spoke: rotate kubeconfig: initial credential",
        ]);
        git(&work, &args);
        let branch = format!("HEAD:refs/heads/spokekeeper/spoke{spoke}");
        git(&work, &["push", "--quiet", "--force", "origin", &branch]);
        git(&work, &["rev-parse", "HEAD"]).trim().to_string()
    }

    fn clone_is_on_main_and_clean(&self) {
        let head = git(&self.fleet.clone, &["symbolic-ref", "--short", "HEAD"]);
        assert_eq!(head.trim(), "main");
        let status = git(&self.fleet.clone, &["status", "--porcelain"]);
        assert_eq!(status.trim(), "", "the clone's working tree is untouched");
    }
}

fn spoke(report: &Value, i: usize) -> &Value {
    &report["spokes"][i]
}

/// Spoke 0's error in `report`, which must say it failed at the review stage.
fn review_failure(report: &Value) -> String {
    let s = spoke(report, 0);
    assert_eq!(
        (s["action"].as_str(), s["stage"].as_str()),
        (Some("failed"), Some("review")),
        "{report}"
    );
    s["error"].as_str().unwrap().to_string()
}

/// The title and body fields as each API names them.
fn body_field(kind: Kind) -> &'static str {
    match kind {
        Kind::Gitlab => "description",
        _ => "body",
    }
}

async fn open_update_merge(kind: Kind) {
    let mut r = review(kind, 1, "");
    // First rotation: a branch and a pull request; nothing on main.
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

    // Nothing changed: pending, nothing pushed, the pull request left alone.
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["action"], "pending", "{report}");
    assert_eq!(spoke(&report, 0)["change"], Value::Null, "{report}");
    assert_eq!(spoke(&report, 0)["commit"], Value::Null, "{report}");
    assert!(
        spoke(&report, 0)["pending_seconds"].as_u64().is_some(),
        "{report}"
    );
    assert_eq!(r.branch_head(0).as_deref(), Some(first.as_str()));
    let writes = |f: &ForgeSim| f.count("POST") + f.count("PATCH") + f.count("PUT");
    let before = writes(&r.forge);

    // Rebuilt before the merge: the branch is replaced, the same pull request updated.
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
    assert_eq!(writes(&r.forge), before + 1, "one update call");
    let body = &r.forge.open_pulls()[0].body;
    assert!(body.contains(&new_ca) && !body.contains(&old_ca), "{body}");

    // Merged: the next tick is healthy and touches nothing.
    r.merge(0);
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "healthy", "{report}");
    let live = support::fleet::authenticates(&r.fleet.unsealed(0)).await;
    assert_eq!(live.username, "system:admin");
    assert_eq!(r.forge.pulls().len(), 1);
    r.clone_is_on_main_and_clean();

    // Rebuilt after the merge: a new pull request that names both CAs.
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
            short(&new_ca),
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
    let (code, out, err) = r.fleet.run(&["check", "-o", "json"]);
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    assert_eq!(code, 1, "{json}");
    let review = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["cert"] == "review")
        .unwrap_or_else(|| panic!("{json}"));
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
    let (code, out, err) = r.fleet.run(&["check", "-o", "json"]);
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    assert_eq!(code, 2, "{json}");
    let review = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["cert"] == "review")
        .unwrap_or_else(|| panic!("{json}"));
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

/// A forge that hangs is waited for once per tick, not once per spoke: the other spokes
/// fail at once (their branches pushed) and the next tick retries.
#[tokio::test(flavor = "multi_thread")]
async fn a_hung_forge_costs_one_timeout_per_tick_not_one_per_spoke() {
    crate::support::requires!(ROOT);
    let _quiet = support::timing::exclusive();
    let r = review(Kind::Github, 3, "");
    r.forge
        .fault(Method::GET, Fault::Delay(Duration::from_secs(8)));
    let started = std::time::Instant::now();
    let (code, report, err) = r.rotate();
    let took = started.elapsed();
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
    assert!(
        took < Duration::from_secs(6),
        "one 2s timeout, not three: {took:?}"
    );
    for i in 0..3 {
        assert!(r.branch_head(i).is_some(), "spoke{i}'s branch is pushed");
    }
    // The forge is back: the next tick opens all three.
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(r.forge.open_pulls().len(), 3);
}

/// The file spokekeeper's branch for `spoke` holds, with its ciphertext swapped for
/// someone else's: the annotations (CA, sealing fingerprint, names, server, hashes)
/// are all copied, so they look healthy.
fn copied_with_other_ciphertext(r: &Review, spoke: usize) -> (String, String) {
    let file = format!("fluxcd/spoke{spoke}-kubeconfig-sealed.yaml");
    let ours = git(
        &r.fleet.remote,
        &["show", &format!("spokekeeper/spoke{spoke}:{file}")],
    );
    let at = ours.find("value: Ag").expect("a sealed value") + "value: ".len();
    let forged = format!("{}AgBmallory{}", &ours[..at], &ours[at + 10..]);
    assert_ne!(forged, ours);
    (file, forged)
}

/// Defect 1: a review branch pushed by someone else, unsigned or signed with another
/// ssh key, whose manifest copies a healthy credential's annotations, is never endorsed:
/// the spoke is re-extracted and the branch replaced by a commit signed with
/// repo.signing_key; the pull request body and the log say which head was replaced.
#[tokio::test(flavor = "multi_thread")]
async fn a_branch_spokekeeper_did_not_sign_is_replaced_not_endorsed() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Github, 1, "");
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["change"], "opened", "{report}");
    let other_key = signing_key(&r.fleet.dir.path().join("mallory-key"));
    for key in [None, Some(other_key.as_path())] {
        let (file, forged) = copied_with_other_ciphertext(&r, 0);
        let foreign = r.push_foreign(0, &[(&file, &forged)], key);
        let (code, report, err) = r.rotate();
        assert_eq!(code, 0, "{key:?}: {report}\n{err}");
        let s = spoke(&report, 0);
        assert_eq!(s["action"], "pending", "{report}");
        assert_eq!(
            s["user"], "system:admin",
            "re-extracted and validated: {report}"
        );
        let head = r.branch_head(0).unwrap();
        assert_ne!(head, foreign, "the foreign head is replaced");
        assert_eq!(s["commit"], head.as_str(), "{report}");
        assert!(verifies_with(&r.fleet.remote, &r.signing_key, &head));
        assert_ne!(
            git(&r.fleet.remote, &["show", &format!("{head}:{file}")]),
            forged
        );
        assert_eq!(s["change"], "updated", "{report}");
        let pulls = r.forge.open_pulls();
        assert_eq!(pulls.len(), 1, "{pulls:?}");
        let line = format!("replaced branch head {foreign}: not signed by spokekeeper's key");
        assert!(pulls[0].body.starts_with(&line), "{}", pulls[0].body);
        assert!(
            err.contains("spokekeeper/spoke0")
                && err.contains(&foreign)
                && err.contains("not signed by spokekeeper's key"),
            "the log names the branch, its head and why: {err}"
        );
    }
    // spokekeeper's own branch is trusted again: pending, nothing extracted or pushed.
    let head = r.branch_head(0);
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["action"], "pending", "{report}");
    assert_eq!(spoke(&report, 0)["commit"], Value::Null, "{report}");
    assert_eq!(spoke(&report, 0)["user"], Value::Null, "no SSH: {report}");
    assert_eq!(r.branch_head(0), head);
}

/// A commit spokekeeper signed for spoke0, pushed to spoke1's branch (or one signed with
/// the real key that also changes another file) is not spoke1's fix.
#[tokio::test(flavor = "multi_thread")]
async fn a_signed_commit_for_another_spoke_or_with_extra_files_is_not_trusted() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Gitea, 2, "");
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    let spoke0 = r.branch_head(0).unwrap();
    let remote = r.fleet.remote.to_str().unwrap();
    let dir = support::scratch_dir();
    let work = dir.path().join("w");
    git(
        dir.path(),
        &["clone", "--quiet", remote, work.to_str().unwrap()],
    );
    git(
        &work,
        &[
            "push",
            "--quiet",
            "--force",
            "origin",
            &format!("{spoke0}:refs/heads/spokekeeper/spoke1"),
        ],
    );
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        spoke(&report, 0)["commit"],
        Value::Null,
        "spoke0 untouched: {report}"
    );
    let s = spoke(&report, 1);
    assert_eq!(s["action"], "pending", "{report}");
    let head = r.branch_head(1).unwrap();
    assert_ne!(head, spoke0);
    assert_eq!(
        s["commit"],
        head.as_str(),
        "re-extracted and pushed: {report}"
    );
    let body = &r
        .forge
        .open_pulls()
        .into_iter()
        .find(|p| p.head == "spokekeeper/spoke1")
        .unwrap()
        .body;
    assert!(
        body.starts_with(&format!(
            "replaced branch head {spoke0}: it changes more than fluxcd/spoke1"
        )) && body.contains("also fluxcd/spoke0\\-kubeconfig\\-sealed\\.yaml"),
        "{body}"
    );

    // Signed with spokekeeper's own key (a leaked key is a different problem), the
    // right file plus a workflow: not trusted either.
    let (file, _) = copied_with_other_ciphertext(&r, 1);
    let ours = git(
        &r.fleet.remote,
        &["show", &format!("spokekeeper/spoke1:{file}")],
    );
    let extra = r.push_foreign(
        1,
        &[(&file, &ours), (".github/workflows/x.yaml", "on: push\n")],
        Some(&r.signing_key),
    );
    assert!(verifies_with(&r.fleet.remote, &r.signing_key, &extra));
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_ne!(r.branch_head(1).unwrap(), extra, "{report}");
    assert!(
        err.contains(&extra) && err.contains("also .github/workflows/x.yaml"),
        "{err}"
    );
}

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

/// Defect 1, (d): review mode without repo.signing_key is refused at load, naming the
/// key, its line and the fix; so is a key with a passphrase.
#[test]
fn review_mode_without_a_usable_signing_key_is_refused() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Github, 1, "");
    let yaml = std::fs::read_to_string(&r.fleet.config).unwrap();
    let line = format!("  signing_key: {}\n", r.signing_key.display());
    // The config with `line` replaced by `signing`: refused; what it said.
    let refused_with = |signing: &str| -> String {
        std::fs::write(&r.fleet.config, yaml.replace(&line, signing)).unwrap();
        let (code, out, err) = r.fleet.rotate(&["--all"]);
        assert_ne!(code, 0, "{out}");
        err
    };
    let err = refused_with("");
    assert!(
        err.contains("repo.signing_key is required")
            && err.contains(": line ")
            && err.contains("ssh-keygen -t ed25519 -N '' -C spokekeeper"),
        "{err}"
    );
    let locked = r.fleet.dir.path().join("locked-key");
    let ok = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "a passphrase", "-f"])
        .arg(&locked)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let err = refused_with(&format!("  signing_key: {}\n", locked.display()));
    assert!(
        err.contains("repo.signing_key")
            && err.contains("has a passphrase")
            && err.contains(": line "),
        "{err}"
    );
    assert!(r.branch_head(0).is_none(), "nothing was pushed");
}

/// A fleet remote in a scratch directory with two clones: spokekeeper's (clones[0]),
/// opened signing with a fresh key, and a second one for someone else's pushes.
async fn lib_repo() -> (tempfile::TempDir, Repo, Vec<PathBuf>, PathBuf) {
    let dir = support::scratch_dir();
    let (_, clones) = support::git::fleet_remote(dir.path(), 2);
    let key = signing_key(&dir.path().join("signing-key"));
    let repo = Repo::open(&repo_config(&clones[0], Some(key.clone())))
        .await
        .unwrap();
    repo.sync().await.unwrap();
    (dir, repo, clones, key)
}

/// spokekeeper's review branch for the spoke "dev", and the file it writes there.
const DEV_BRANCH: &str = "spokekeeper/dev";
const DEV_FILE: &str = "fluxcd/dev-kubeconfig-sealed.yaml";

/// spokekeeper commits `text` as DEV_FILE on the target branch and pushes it to
/// DEV_BRANCH over `previous`; the commit.
async fn push_ours(repo: &Repo, text: &[u8], previous: Option<&str>) -> String {
    let commit = repo
        .commit_on_target(Path::new(DEV_FILE), text, "dev: rotate")
        .await
        .unwrap();
    repo.push_branch(DEV_BRANCH, &commit, previous)
        .await
        .unwrap();
    commit
}

/// Someone else's commit in `work` (another clone) writing `files` over its checkout,
/// signed with `sign` when given, force-pushed to the ref `to`; the commit. `work` is
/// left at origin/main (the new commit, when `to` is main).
fn push_theirs(work: &Path, files: &[(&str, &str)], sign: Option<&Path>, to: &str) -> String {
    for (path, text) in files {
        let file = work.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, text).unwrap();
        git(work, &["add", path]);
    }
    let k = sign.map(|k| format!("user.signingkey={}", k.display()));
    let mut args = vec![
        "-c",
        "user.name=m",
        "-c",
        "user.email=m@m",
        "-c",
        "gpg.format=ssh",
    ];
    if let Some(k) = &k {
        args.extend(["-c", k, "commit", "-S"]);
    } else {
        args.push("commit");
    }
    args.extend(["--quiet", "--allow-empty", "-m", "x"]);
    git(work, &args);
    let head = git(work, &["rev-parse", "HEAD"]).trim().to_string();
    git(
        work,
        &[
            "push",
            "--quiet",
            "--force",
            "origin",
            &format!("{head}:{to}"),
        ],
    );
    git(work, &["reset", "--quiet", "--hard", "origin/main"]);
    head
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

/// F1: a commit signed with spokekeeper's key that is not the one this clone pushed
/// last (an older rotation of the same spoke, pushed back) is replaced, not endorsed.
#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_signed_commit_is_replaced_not_endorsed() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Github, 1, "");
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    let pushed = r.branch_head(0).unwrap();
    let file = "fluxcd/spoke0-kubeconfig-sealed.yaml";
    let ours = git(&r.fleet.remote, &["show", &format!("{pushed}:{file}")]);
    let replay = r.push_foreign(0, &[(file, &ours)], Some(&r.signing_key));
    assert!(verifies_with(&r.fleet.remote, &r.signing_key, &replay));
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    let s = spoke(&report, 0);
    assert_eq!(s["action"], "pending", "{report}");
    let head = r.branch_head(0).unwrap();
    assert!(head != replay && head != pushed, "{report}");
    assert_eq!(
        s["commit"],
        head.as_str(),
        "re-extracted and pushed: {report}"
    );
    let body = &r.forge.open_pulls()[0].body;
    assert!(
        body.starts_with(&format!(
            "replaced branch head {replay}: not the commit spokekeeper last pushed to it"
        )) && body.ends_with(&format!("head {head}, signed by spokekeeper\n")),
        "{body}"
    );
}

/// F1: a clone with no record of its pushes (a new clone) does not trust the branches
/// it finds: it replaces each once, says why, and trusts its own from then on.
#[tokio::test(flavor = "multi_thread")]
async fn a_clone_without_a_record_replaces_the_branch_once() {
    crate::support::requires!(ROOT);
    let r = review(Kind::Gitea, 1, "");
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    let first = r.branch_head(0).unwrap();
    git(
        &r.fleet.clone,
        &["update-ref", "-d", "refs/spokekeeper/pushed/spoke0"],
    );
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    let second = r.branch_head(0).unwrap();
    assert_ne!(second, first);
    assert_eq!(spoke(&report, 0)["commit"], second.as_str(), "{report}");
    assert!(
        err.contains(&first) && err.contains("this clone has no record"),
        "{err}"
    );
    let body = &r.forge.open_pulls()[0].body;
    assert!(
        body.starts_with(&format!(
            "replaced branch head {first}: this clone has no record"
        )),
        "{body}"
    );
    let (code, report, err) = r.rotate();
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(spoke(&report, 0)["action"], "pending", "{report}");
    assert_eq!(spoke(&report, 0)["commit"], Value::Null, "{report}");
    assert_eq!(
        spoke(&report, 0)["change"],
        Value::Null,
        "the body, with its note, is left as it is: {report}"
    );
    assert!(
        r.forge.open_pulls()[0]
            .body
            .starts_with("replaced branch head ")
    );
    assert_eq!(r.branch_head(0).as_deref(), Some(second.as_str()));
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

/// `spokekeeper add` in review mode: the onboarding commit spokekeeper makes (the
/// credential, new Flux objects, lines added to a kustomization.yaml) and pushes is
/// trusted, and its trailer names every file. The same commit with an extra file, an
/// existing file modified, an added file swapped for a symlink, replayed for another
/// spoke, or with a commit appended, is not: each is signed with spokekeeper's own key,
/// so the onboarding rule, not the signature, refuses it.
#[tokio::test]
async fn an_onboarding_commit_is_trusted_only_as_pushed_for_its_own_spoke() {
    use spokekeeper::repo::{Beside, RepoError};
    let (_dir, repo, clones, key) = lib_repo().await;
    let root = "resources:\n  - flux-system\n";
    push_theirs(
        &clones[1],
        &[("fluxcd/kustomization.yaml", root)],
        None,
        "refs/heads/main",
    );
    repo.sync().await.unwrap();
    let rel = Path::new(DEV_FILE);
    let listed = format!("{root}  - dev-kubeconfig-sealed.yaml\n  - dev.yaml\n");
    let beside = vec![
        Beside {
            rel: "fluxcd/dev.yaml".into(),
            bytes: b"kind: Kustomization\n".to_vec(),
            was: None,
        },
        Beside {
            rel: "spokes/dev/apps/kustomization.yaml".into(),
            bytes: b"resources: []\n".to_vec(),
            was: None,
        },
        Beside {
            rel: "fluxcd/kustomization.yaml".into(),
            bytes: listed.clone().into_bytes(),
            was: Some(root.as_bytes().to_vec()),
        },
    ];
    let onboard = |beside: Vec<Beside>| {
        let repo = &repo;
        async move {
            repo.commit_onboarding("dev", rel, b"kind: SealedSecret\n", &beside, "dev: add")
                .await
        }
    };
    let ours = onboard(beside.clone()).await.unwrap();
    repo.push_branch(DEV_BRANCH, &ours, None).await.unwrap();
    assert_eq!(repo.provenance(DEV_BRANCH, &ours, rel).await, Ok(()));
    let message = git(&clones[0], &["log", "-1", "--format=%B", &ours]);
    assert!(
        message.trim_end().ends_with(
            "\n\nSpokekeeper-Onboards: dev\n\
             Spokekeeper-Adds: fluxcd/dev-kubeconfig-sealed.yaml\n\
             Spokekeeper-Adds: fluxcd/dev.yaml\n\
             Spokekeeper-Adds: spokes/dev/apps/kustomization.yaml\n\
             Spokekeeper-Lists: fluxcd/kustomization.yaml"
        ),
        "{message}"
    );

    // What spokekeeper itself refuses to commit: a file that moved since add read it,
    // or a change that is not an addition.
    let mut moved = beside.clone();
    moved[2].was = Some(b"resources: []\n".to_vec());
    assert!(matches!(
        onboard(moved).await,
        Err(RepoError::BesideMoved { .. })
    ));
    let mut readme = beside.clone();
    readme.push(Beside {
        rel: "README.md".into(),
        bytes: b"changed\n".to_vec(),
        was: Some(b"fleet\n".to_vec()),
    });
    let e = onboard(readme).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("README.md is changed, and only a kustomization.yaml may be"),
        "{e}"
    );
    let mut unlisted = beside.clone();
    unlisted[2].bytes = b"resources:\n  - dev.yaml\n".to_vec();
    let e = onboard(unlisted).await.unwrap_err();
    assert!(e.to_string().contains("loses or changes lines"), "{e}");

    // A pusher's variants of the trusted commit, signed with spokekeeper's key.
    let work = &clones[1];
    git(work, &["fetch", "--quiet", "origin", DEV_BRANCH]);
    let variant = |edit: &dyn Fn(&Path), amend: bool, to: &str| {
        git(work, &["checkout", "--quiet", "--detach", &ours]);
        edit(work);
        git(work, &["add", "-A"]);
        let k = format!("user.signingkey={}", key.display());
        let mut args = vec![
            "-c",
            "user.name=m",
            "-c",
            "user.email=m@m",
            "-c",
            "gpg.format=ssh",
        ];
        args.extend(["-c", &k, "commit", "-S", "--quiet", "--allow-empty"]);
        if amend {
            // The same message, so the same trailer.
            args.extend(["--amend", "--no-edit"]);
        } else {
            args.extend(["-m", "later"]);
        }
        git(work, &args);
        let head = git(work, &["rev-parse", "HEAD"]).trim().to_string();
        let spec = format!("+{head}:refs/heads/{to}");
        git(work, &["push", "--quiet", "origin", &spec]);
        git(work, &["checkout", "--quiet", "main"]);
        git(work, &["reset", "--quiet", "--hard", "origin/main"]);
        assert!(verifies_with(work, &key, &head));
        head
    };
    let judge = |head: String, branch: &'static str, rel: &'static str| {
        let repo = &repo;
        async move {
            repo.fetch_review_branches().await.unwrap();
            assert_eq!(repo.remote_branch_head(branch).await, Some(head.clone()));
            repo.provenance(branch, &head, Path::new(rel)).await
        }
    };
    let onboarding = |e: Result<(), Untrusted>, want: &str| match e {
        Err(Untrusted::Onboarding(why)) => assert!(why.to_string().contains(want), "{why}"),
        other => panic!("{other:?}, not {want}"),
    };
    let write = |rel: &'static str, text: &'static str| {
        move |w: &Path| {
            let f = w.join(rel);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        }
    };
    let extra = variant(&write("fluxcd/extra.yaml", "kind: Job\n"), true, DEV_BRANCH);
    onboarding(
        judge(extra, DEV_BRANCH, DEV_FILE).await,
        "also changes fluxcd/extra.yaml, which its trailer does not name",
    );
    let modified = variant(&write("README.md", "changed\n"), true, DEV_BRANCH);
    onboarding(
        judge(modified, DEV_BRANCH, DEV_FILE).await,
        "also changes README.md",
    );
    let relisted = variant(
        &write("fluxcd/kustomization.yaml", "resources:\n  - dev.yaml\n"),
        true,
        DEV_BRANCH,
    );
    onboarding(
        judge(relisted, DEV_BRANCH, DEV_FILE).await,
        "fluxcd/kustomization.yaml loses or changes lines",
    );
    let symlink = |w: &Path| {
        let f = w.join("fluxcd/dev.yaml");
        std::fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink("../README.md", f).unwrap();
    };
    let linked = variant(&symlink, true, DEV_BRANCH);
    onboarding(
        judge(linked, DEV_BRANCH, DEV_FILE).await,
        "fluxcd/dev.yaml is not added as a new regular file (mode 000000 -> 120000",
    );
    let appended = variant(
        &write("fluxcd/later.yaml", "kind: Job\n"),
        false,
        DEV_BRANCH,
    );
    assert!(matches!(
        judge(appended, DEV_BRANCH, DEV_FILE).await,
        Err(Untrusted::OffTarget { .. })
    ));
    // The onboarding commit itself, pushed to another spoke's branch.
    let spec = format!("+{ours}:refs/heads/spokekeeper/prod");
    git(work, &["push", "--quiet", "origin", &spec]);
    onboarding(
        judge(
            ours.clone(),
            "spokekeeper/prod",
            "fluxcd/prod-kubeconfig-sealed.yaml",
        )
        .await,
        "it onboards \"dev\", not \"prod\"",
    );
    // Pushed back as it was, the original is still the one this clone recorded.
    git(
        work,
        &[
            "push",
            "--quiet",
            "origin",
            &format!("+{ours}:refs/heads/{DEV_BRANCH}"),
        ],
    );
    assert_eq!(judge(ours, DEV_BRANCH, DEV_FILE).await, Ok(()));
}

/// Review mode with `sealing.format: sops`: the branch carries a sops Secret the real sops
/// opens; the next tick leaves the pull request alone (the branch's file is read back as
/// the same credential); once merged, the spoke is healthy.
#[tokio::test(flavor = "multi_thread")]
async fn a_sops_credential_is_proposed_for_review_and_healthy_once_merged() {
    crate::support::requires!(ROOT);
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
