//! `add` in review mode: one signed onboarding branch and one pull request with every file, kept through a rebuild, trusted only as pushed, and merged into a normal spoke.

use super::*;

/// Review mode: spokekeeper.yaml with spoke0, node 1 reachable, `repo.mode:
/// pull-request` against an emulated forge; the forge and the signing key.
fn review_fleet() -> (Fleet, spokekeeper_lab::forge::ForgeSim, std::path::PathBuf) {
    use spokekeeper_lab::forge::{ForgeSim, Kind, TOKEN};
    let fleet = fleet();
    let forge = ForgeSim::start(Kind::Github, fleet.remote.clone());
    let token_file = fleet.dir.path().join("forge-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let key = support::git::signing_key(&fleet.dir.path().join("signing-key"));
    let n1 = &fleet.nodes[1];
    let top = format!(
        "ssh:\n  port: {}\n  identity: \"{}\"\n  known_hosts: \"{}\"\n  connect_timeout: 5s\n",
        n1.ssh_port,
        n1.identity_path.display(),
        n1.known_hosts_path.display()
    );
    config(&fleet.clone, &fleet.nodes[..1])
        .top(&top)
        .repo(&(forge.repo_yaml(&key, &token_file) + "    timeout: 2s\n"))
        .write(&fleet.config)
        .unwrap();
    (fleet, forge, key)
}

/// The open pull requests of `branch` (spoke0 gets its own on a tick).
fn pulls_of(
    forge: &spokekeeper_lab::forge::ForgeSim,
    branch: &str,
) -> Vec<spokekeeper_lab::forge::Pull> {
    forge
        .open_pulls()
        .into_iter()
        .filter(|p| p.head == branch)
        .collect()
}

/// A path as a pull request body quotes it (escaped Markdown).
fn quoted(path: &str) -> String {
    path.replace('-', "\\-").replace('.', "\\.")
}

/// Issue 32: `add` in review mode puts the credential and its Flux objects on one
/// signed branch with one pull request whose body names every file, and main is not
/// touched; the next tick finds the branch its own and pending, a new credential before
/// the merge keeps the files, and after the merge the spoke is a normal one: healthy,
/// nothing proposed.
#[test]
fn add_in_review_mode_opens_one_branch_and_one_pull_request_with_every_file() {
    crate::support::requires!(ROOT);
    let (mut fleet, forge, key) = review_fleet();
    let root = "resources:\n  - spoke0.yaml\n";
    push_to_remote(
        &fleet,
        &[
            ("fluxcd/kustomization.yaml", root),
            ("spokes/spoke1/apps/configmap.yaml", "kind: ConfigMap\n"),
        ],
    );
    let main_before = fleet.remote_log();
    let (code, out, err) = add(&fleet, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("pushed its credential with") && err.contains("to branch spokekeeper/spoke1"),
        "{err}"
    );
    assert_eq!(fleet.remote_log(), main_before, "main is untouched");
    let branch = "spokekeeper/spoke1";
    let head = git(&fleet.remote, &["rev-parse", branch])
        .trim()
        .to_string();
    assert!(support::git::verifies_with(&fleet.remote, &key, &head));
    let parent = git(&fleet.remote, &["rev-parse", &format!("{branch}^")]);
    assert_eq!(
        parent,
        git(&fleet.remote, &["rev-parse", "main"]),
        "one commit on main"
    );
    assert_eq!(files_of(&fleet, branch), ONBOARDED);
    let listed = git(
        &fleet.remote,
        &["show", &format!("{branch}:fluxcd/kustomization.yaml")],
    );
    assert_eq!(
        listed,
        format!("{root}  - spoke1-kubeconfig-sealed.yaml\n  - spoke1.yaml\n")
    );
    let pulls = forge.open_pulls();
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert_eq!(pulls[0].head, branch);
    for file in ONBOARDED {
        assert!(
            pulls[0].body.contains(&quoted(file)),
            "{file} in {}",
            pulls[0].body
        );
    }
    let loaded = spokekeeper::config::Config::load(&fleet.config).unwrap();
    assert_eq!(loaded.spokes[1].name, "spoke1");

    // The next tick: the onboarding branch is spokekeeper's own, and waits for review.
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(support::fleet::action(&report, 1), "pending", "{report}");
    assert_eq!(
        report["spokes"][1]["commit"],
        serde_json::Value::Null,
        "{report}"
    );
    assert!(!err.contains("not trusted"), "{err}");
    assert_eq!(git(&fleet.remote, &["rev-parse", branch]).trim(), head);
    assert_eq!(pulls_of(&forge, branch).len(), 1);

    // The node rebuilt before the merge: the new credential keeps add's files on the
    // branch, still trusted, still listed in the pull request.
    fleet.nodes[1].rebuild();
    let (code, report, err) = fleet.rotate_json(&["spoke1"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let head = git(&fleet.remote, &["rev-parse", branch])
        .trim()
        .to_string();
    assert_eq!(report["spokes"][0]["commit"], head.as_str(), "{report}");
    assert_eq!(files_of(&fleet, branch), ONBOARDED);
    let (code, report, err) = fleet.rotate_json(&["spoke1"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["spokes"][0]["action"], "pending", "{report}");
    assert_eq!(
        report["spokes"][0]["commit"],
        serde_json::Value::Null,
        "{report}"
    );
    let pulls = pulls_of(&forge, branch);
    assert_eq!(pulls.len(), 1);
    for file in ONBOARDED {
        assert!(
            pulls[0].body.contains(&quoted(file)),
            "{file} in {}",
            pulls[0].body
        );
    }

    merged_it_is_a_normal_spoke(&fleet, &forge, branch, &head);
}

/// A reviewer merges the onboarding branch: the spoke is then a normal one, healthy, with
/// nothing more to commit and no pull request left.
fn merged_it_is_a_normal_spoke(
    fleet: &Fleet,
    forge: &spokekeeper_lab::forge::ForgeSim,
    branch: &str,
    head: &str,
) {
    let work = fleet.dir.path().join("merge");
    git(
        fleet.dir.path(),
        &[
            "clone",
            "--quiet",
            fleet.remote.to_str().unwrap(),
            work.to_str().unwrap(),
        ],
    );
    let reviewer = ["-c", "user.name=reviewer", "-c", "user.email=r@example.org"];
    let merge = [
        "merge",
        "--quiet",
        "--no-ff",
        "-m",
        "Merge review",
        &format!("origin/{branch}"),
    ];
    git(&work, &[&reviewer[..], &merge[..]].concat());
    git(&work, &["push", "--quiet", "origin", "HEAD:main"]);
    forge.mark_merged(branch);
    let merged = fleet.remote_log();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(support::fleet::action(&report, 1), "healthy", "{report}");
    assert_eq!(fleet.remote_log(), merged);
    assert_eq!(git(&fleet.remote, &["rev-parse", branch]).trim(), head);
    assert!(pulls_of(forge, branch).is_empty());
    let kc = spokekeeper::kubeconfig::parse(fleet.unsealed_in(1, "spoke1").expose()).unwrap();
    assert!(spokekeeper::kubeconfig::sanitize(&kc, "spoke1").is_ok());
    fleet.assert_no_plaintext();
}

/// A pusher who adds a file to the trusted onboarding branch (signed with spokekeeper's
/// own key, the same trailer), or appends a commit with one: the next tick does not
/// trust it and replaces the branch, as for any other branch, and the pull request
/// names the replaced head.
#[test]
fn an_onboarding_branch_with_a_file_added_by_a_pusher_is_replaced() {
    crate::support::requires!(ROOT);
    let (fleet, forge, key) = review_fleet();
    let (code, out, err) = add(&fleet, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    let branch = "spokekeeper/spoke1";
    let work = fleet.dir.path().join("pusher");
    git(
        fleet.dir.path(),
        &[
            "clone",
            "--quiet",
            fleet.remote.to_str().unwrap(),
            work.to_str().unwrap(),
        ],
    );
    let k = format!("user.signingkey={}", key.display());
    let sign = [
        "-c",
        "user.name=m",
        "-c",
        "user.email=m@m",
        "-c",
        "gpg.format=ssh",
        "-c",
        &k,
    ];
    for (file, amend) in [("fluxcd/job.yaml", true), ("fluxcd/later.yaml", false)] {
        git(&work, &["fetch", "--quiet", "origin", branch]);
        git(&work, &["checkout", "--quiet", "--detach", "FETCH_HEAD"]);
        std::fs::write(work.join(file), "kind: Job\n").unwrap();
        git(&work, &["add", file]);
        let how: &[&str] = if amend {
            &["--amend", "--no-edit"]
        } else {
            &["-m", "later"]
        };
        git(
            &work,
            &[&sign[..], &["commit", "-S", "--quiet"], how].concat(),
        );
        let theirs = git(&work, &["rev-parse", "HEAD"]).trim().to_string();
        git(
            &work,
            &[
                "push",
                "--quiet",
                "--force",
                "origin",
                &format!("HEAD:refs/heads/{branch}"),
            ],
        );
        let (code, report, err) = fleet.rotate_json(&["--all"]);
        assert_eq!(code, 0, "{report}\n{err}");
        assert!(
            err.contains("review branch not trusted") && err.contains(&theirs),
            "{err}"
        );
        let head = git(&fleet.remote, &["rev-parse", branch])
            .trim()
            .to_string();
        assert_ne!(head, theirs, "replaced: {report}");
        assert_eq!(report["spokes"][1]["commit"], head.as_str(), "{report}");
        assert_eq!(
            files_of(&fleet, branch),
            ["fluxcd/spoke1-kubeconfig-sealed.yaml"],
            "the replacement carries the credential alone"
        );
        let pulls = pulls_of(&forge, branch);
        assert_eq!(pulls.len(), 1);
        assert!(
            pulls[0]
                .body
                .starts_with(&format!("replaced branch head {theirs}: ")),
            "{}",
            pulls[0].body
        );
    }
}

/// In review mode add may only add lines to the root's kustomization.yaml: one whose
/// last line has no line break (the edit would change that line) is refused, naming the
/// file and the fix, with nothing pushed and spokekeeper.yaml unchanged.
#[test]
fn add_in_review_mode_refuses_a_root_kustomization_it_could_not_only_append_to() {
    crate::support::requires!(ROOT);
    let (fleet, forge, _) = review_fleet();
    push_to_remote(
        &fleet,
        &[("fluxcd/kustomization.yaml", "resources:\n  - spoke0.yaml")],
    );
    let config_before = std::fs::read_to_string(&fleet.config).unwrap();
    let (code, out, err) = add(&fleet, &[]);
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("fluxcd/kustomization.yaml: its last line has no line break")
            && err.contains("end the file with one on main"),
        "{err}"
    );
    let heads = git(
        &fleet.remote,
        &["for-each-ref", "--format=%(refname)", "refs/heads/"],
    );
    assert_eq!(heads.trim(), "refs/heads/main", "no branch pushed");
    assert!(forge.pulls().is_empty());
    assert_eq!(
        std::fs::read_to_string(&fleet.config).unwrap(),
        config_before
    );
}
