//! Review mode (`repo.mode: pull-request`) in the lab, through the binary: real sshd
//! spokes, real TLS API servers, a real bare git remote, and an emulated forge per kind
//! (lab/src/forge/) that checks paths, the token header and the JSON bodies; and the
//! library's branch checks against a real remote. Here: the two fixtures.

use crate::support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use spokekeeper::repo::Repo;
use spokekeeper_lab::forge::{ForgeSim, Kind, TOKEN};
use support::NodeOptions;
use support::fleet::Fleet;
use support::git::{git, repo_config, signing_key};

mod branches;
mod forge_faults;
mod lifecycle;
mod onboarding;
mod provenance;
mod removal;
mod reported;
mod withheld;

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
    commit_as_someone(work, sign, &["-m", "x"]);
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

/// Commits what is staged in `work` as someone else ("m"), signed with `sign` when given;
/// `tail` ends the `git commit` arguments.
fn commit_as_someone(work: &Path, sign: Option<&Path>, tail: &[&str]) {
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
    args.extend(["--quiet", "--allow-empty"]);
    args.extend(tail);
    git(work, &args);
}
