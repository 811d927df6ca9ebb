//! The move to federated in review mode (`repo.mode: pull-request`), on the real
//! components and the emulated forge: once Flux reads the ConfigMap, the old SealedSecret
//! is removed by pull request, on a signed branch of its own whose one commit deletes the
//! file alone; nothing is deleted on the spoke before the merge; a look-alike pushed to
//! that branch is replaced, not endorsed; after the merge the next tick deletes the
//! minted binding, and the federated one stays.

use super::*;

use super::federated_migrate::{
    CONFIG_MAP, CONSUMERS, SEALED, moved, on_remote, on_secret_ref, plain_recipe, set_mode, tick,
};
use spokekeeper_lab::forge::{ForgeSim, Kind, TOKEN};

const BRANCH: &str = "spokekeeper/spoke0.remove-old-secret";
const MINTED: &str = "spokekeeper.hub.spoke0.g1";

/// spokekeeper.yaml in review mode against `forge`, signing with a fresh key.
fn review_mode(stack: &RealFlux, forge: &ForgeSim) {
    let dir = stack.fleet.dir.path();
    let token = dir.join("forge-token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let key = support::git::signing_key(&dir.join("signing-key"));
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    let edited = text.replacen(
        "repo:\n",
        &format!("repo:\n{}", forge.repo_yaml(&key, &token)),
        1,
    );
    assert_ne!(edited, text, "{text}");
    std::fs::write(&stack.fleet.config, edited).unwrap();
}

/// The remote's BRANCH head, if there is one.
fn branch_head(stack: &RealFlux) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(&stack.fleet.remote)
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("refs/heads/{BRANCH}"))
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// spoke 0's ClusterRoleBindings, by name.
fn bindings(stack: &RealFlux) -> String {
    stack.spoke_apis[0].kubectl(&["get", "clusterrolebindings", "-o", "name"])
}

/// A commit on main as someone else would push it to BRANCH (force): deleting `paths`,
/// unsigned, with spokekeeper's trailer copied. Returns it.
fn push_look_alike(stack: &RealFlux, paths: &[&str]) -> String {
    let dir = support::scratch_dir();
    let work = dir.path().join("foreign");
    let remote = stack.fleet.remote.to_str().unwrap();
    git(
        dir.path(),
        &["clone", "--quiet", remote, work.to_str().unwrap()],
    );
    for p in paths {
        git(&work, &["rm", "--quiet", p]);
    }
    let message = format!("spoke0: remove the old Secret\n\nSpokekeeper-Removes: {SEALED}");
    let who = ["-c", "user.name=mallory", "-c", "user.email=m@example.org"];
    git(
        &work,
        &[&who[..], &["commit", "--quiet", "-m", &message]].concat(),
    );
    let to = format!("HEAD:refs/heads/{BRANCH}");
    git(&work, &["push", "--quiet", "--force", "origin", &to]);
    git(&work, &["rev-parse", "HEAD"]).trim().to_string()
}

/// A reviewer merges BRANCH into main on the remote (a merge commit).
fn merge(stack: &RealFlux, forge: &ForgeSim) {
    let dir = support::scratch_dir();
    let work = dir.path().join("merge");
    let remote = stack.fleet.remote.to_str().unwrap();
    git(
        dir.path(),
        &["clone", "--quiet", remote, work.to_str().unwrap()],
    );
    let who = ["-c", "user.name=reviewer", "-c", "user.email=r@example.org"];
    let from = format!("origin/{BRANCH}");
    let args = ["merge", "--quiet", "--no-ff", "-m", "Merge removal", &from];
    git(&work, &[&who[..], &args[..]].concat());
    git(&work, &["push", "--quiet", "origin", "HEAD:main"]);
    forge.mark_merged(BRANCH);
}

/// `spoke`'s migration proposed on BRANCH with its pull request, both consumers Ready,
/// nothing deleted on the spoke.
fn assert_proposed(spoke: &Value) {
    let m = &spoke["migration"];
    assert_eq!(
        (
            m["state"].as_str(),
            m["branch"].as_str(),
            m["file"].as_str()
        ),
        (Some("proposed"), Some(BRANCH), Some(SEALED)),
        "{spoke:#}"
    );
    let mut ready: Vec<&str> = m["ready"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    ready.sort();
    assert_eq!(ready, CONSUMERS, "{spoke:#}");
    assert!(m["pull_request"]["url"].as_str().is_some(), "{spoke:#}");
    assert!(
        spoke["revoked"].is_null(),
        "nothing deleted before the merge: {spoke:#}"
    );
}

/// `status` and `check` name the removal's pull request `url`.
fn assert_pending_in_status_and_check(stack: &RealFlux, url: &str) {
    let json = |args: &[&str]| {
        let (_, out, err) = stack.fleet.run(args);
        serde_json::from_str::<Value>(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"))
    };
    let status = json(&["status", "-o", "json"]);
    let removal = &status["spokes"][0]["removal"];
    assert_eq!(
        (removal["state"].as_str(), removal["pull_request"].as_str()),
        (Some("pending-review"), Some(url)),
        "{status:#}"
    );
    let check = json(&["check", "-o", "json"]);
    let said = format!("the removal of the old Secret {SEALED} waits for review: {url}");
    let findings = check["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .any(|f| f["detail"].as_str() == Some(said.as_str())),
        "{check:#}"
    );
}

/// Spoke 0 minted, then federated (its ConfigMap beside the SealedSecret) in direct
/// mode, its consumers moved to the ConfigMap; then review mode against a GitHub forge.
fn moved_from_minted_then_review_mode() -> (RealFlux, ForgeSim) {
    let mut stack = on_secret_ref(true);
    plain_recipe(&mut stack);
    set_mode(&stack, "federated", "minted");
    assert_eq!(tick(&stack)["action"], "rotated");
    support::recipe::install_federated(&mut stack.fleet.nodes[0]);
    set_mode(&stack, "minted", "federated");
    let spoke = tick(&stack);
    assert_eq!(spoke["action"], "rotated", "the ConfigMap: {spoke:#}");
    moved(&stack);
    let forge = ForgeSim::start(Kind::Github, stack.fleet.remote.clone());
    review_mode(&stack, &forge);
    (stack, forge)
}

/// The files `commit` changes on the remote, as `git diff-tree --name-status` says.
fn changed(stack: &RealFlux, commit: &str) -> String {
    let args = ["diff-tree", "--no-commit-id", "--name-status", "-r", commit];
    git(&stack.fleet.remote, &args)
}

#[test]
fn in_review_mode_the_old_secret_goes_by_pull_request_and_the_minted_binding_after_the_merge() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let (stack, forge) = moved_from_minted_then_review_mode();

    // Proposed: one signed commit deleting the old file alone, and its pull request.
    let spoke = tick(&stack);
    let head = branch_head(&stack).expect("the removal branch");
    assert_proposed(&spoke);
    assert_eq!(
        spoke["migration"]["commit"].as_str(),
        Some(head.as_str()),
        "{spoke:#}"
    );
    assert_eq!(changed(&stack, &head), format!("D\t{SEALED}\n"));
    let parent = git(&stack.fleet.remote, &["rev-parse", &format!("{head}^")]);
    assert_eq!(
        parent.trim(),
        git(&stack.fleet.remote, &["rev-parse", "main"]).trim()
    );
    let pulls = forge.open_pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    assert_eq!(pulls[0].head, BRANCH);
    assert!(
        pulls[0]
            .body
            .ends_with(&format!("head {head}, signed by spokekeeper\n")),
        "{}",
        pulls[0].body
    );
    assert!(on_remote(&stack, SEALED) && on_remote(&stack, CONFIG_MAP));
    assert!(
        bindings(&stack).contains(MINTED),
        "before the merge nothing is deleted"
    );
    let url = spoke["migration"]["pull_request"]["url"].as_str().unwrap();
    assert_pending_in_status_and_check(&stack, url);
    // Kept as it is on the next tick: nothing pushed again.
    let spoke = tick(&stack);
    assert_proposed(&spoke);
    assert!(spoke["migration"]["commit"].is_null(), "{spoke:#}");
    assert_eq!(branch_head(&stack).as_deref(), Some(head.as_str()));

    // A look-alike deleting the ConfigMap too is replaced, not endorsed.
    let foreign = push_look_alike(&stack, &[SEALED, CONFIG_MAP]);
    let spoke = tick(&stack);
    let replaced = branch_head(&stack).unwrap();
    assert_ne!(replaced, foreign);
    assert_proposed(&spoke);
    assert_eq!(
        spoke["migration"]["commit"].as_str(),
        Some(replaced.as_str()),
        "{spoke:#}"
    );
    assert_eq!(changed(&stack, &replaced), format!("D\t{SEALED}\n"));
    let pulls = forge.open_pulls();
    assert_eq!(pulls.len(), 1, "the same pull request: {pulls:#?}");
    assert!(
        pulls[0]
            .body
            .starts_with(&format!("replaced branch head {foreign}: ")),
        "{}",
        pulls[0].body
    );
    assert!(
        bindings(&stack).contains(MINTED),
        "before the merge nothing is deleted"
    );

    // Merged: the next tick checks again and deletes the minted binding.
    merge(&stack, &forge);
    assert!(!on_remote(&stack, SEALED));
    // Flux may be reconciling the merge: a tick that finds a consumer mid-run waits and
    // says so, and the next one tries again.
    let mut removed = Value::Null;
    wait_until("the merged removal taken up", WAIT, || {
        removed = tick(&stack);
        match removed["migration"]["problem"].as_str() {
            Some(p) if p.starts_with("after the merge: ") => Err(p.to_string()),
            _ => Ok(()),
        }
    });
    let m = &removed["migration"];
    assert_eq!(
        (m["state"].as_str(), m["commit"].as_str()),
        (Some("removed"), Some(replaced.as_str())),
        "{removed:#}"
    );
    assert!(m["problem"].is_null(), "{removed:#}");
    assert_eq!(
        removed["revoked"],
        serde_json::json!([MINTED]),
        "{removed:#}"
    );
    let now = bindings(&stack);
    assert!(!now.contains(MINTED), "{now}");
    assert!(now.contains("spokekeeper.hub.spoke0.federated"), "{now}");
    // Done with: nothing left to move, nothing deleted again.
    let spoke = tick(&stack);
    assert!(spoke["migration"].is_null(), "{spoke:#}");
    assert!(spoke["revoked"].is_null(), "{spoke:#}");
}
