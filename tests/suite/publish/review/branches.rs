//! Through the binary: a review branch spokekeeper did not push (unsigned, signed by another
//! key, replayed, for another spoke, with extra files, or unknown to a new clone) is replaced,
//! never endorsed; review mode needs a usable signing key.

use crate::support;

use super::{Review, review, spoke};
use serde_json::Value;
use spokekeeper_lab::forge::Kind;
use support::git::{git, signing_key, verifies_with};

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
