//! A sealing certificate pushed to the fleet repo is not trusted by itself: without
//! `hub:`, only `sealing.sha256` (kept outside the repo) or, with no anchor at all, the
//! certificate the committed credentials record confirms it; first use only when no
//! spoke's output exists. Real sshd spokes, real git.

use crate::support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use spokekeeper::seal::{SealedSecret, SealingKey};
use support::NodeOptions;
use support::fleet::{Fleet, action, vectors};
use support::git::{clone, commit, git};

const PINNED: &str = "keys/sealing.pem";

fn fingerprint(pem: &str) -> String {
    SealingKey::from_pem(pem.as_bytes(), "test", time::OffsetDateTime::now_utc())
        .unwrap()
        .fingerprint()
        .to_string()
}

fn real_cert() -> String {
    std::fs::read_to_string(vectors().join("key/cert.pem")).unwrap()
}

/// Someone else's certificate (the upstream vectors' second key).
fn attacker_cert() -> String {
    std::fs::read_to_string(vectors().join("other-key/tls.crt")).unwrap()
}

/// A fleet whose sealing.cert is pinned in the fleet repo at keys/sealing.pem;
/// `sha256` (if any) goes in sealing.sha256.
fn fleet(n: usize, sha256: Option<&str>) -> Fleet {
    let fleet = Fleet::new(&vec![NodeOptions::default(); n]);
    std::fs::create_dir_all(fleet.clone.join("keys")).unwrap();
    std::fs::write(fleet.clone.join(PINNED), real_cert()).unwrap();
    commit_all(&fleet.clone, "pin the controller's certificate");
    git(&fleet.clone, &["push", "--quiet", "origin", "HEAD:main"]);
    let text = std::fs::read_to_string(&fleet.config).unwrap();
    let old = format!("  cert: {}\n", vectors().join("key/cert.pem").display());
    let mut new = format!("  cert: {}\n", fleet.clone.join(PINNED).display());
    if let Some(fp) = sha256 {
        new.push_str(&format!("  sha256: {fp}\n"));
    }
    assert!(text.contains(&old));
    std::fs::write(&fleet.config, text.replace(&old, &new)).unwrap();
    fleet
}

fn commit_all(dir: &Path, message: &str) {
    git(dir, &["add", "-A"]);
    commit(dir, message);
}

/// Someone with push access replaces the pinned certificate: the commit's id.
fn push_attacker_cert(fleet: &Fleet) -> String {
    let other: PathBuf = fleet.dir.path().join("attacker");
    clone(&fleet.remote, &other);
    std::fs::write(other.join(PINNED), attacker_cert()).unwrap();
    commit_all(&other, "keys: update the sealing certificate");
    git(&other, &["push", "--quiet", "origin", "HEAD:main"]);
    git(&other, &["rev-parse", "HEAD"]).trim().to_string()
}

fn remote_head(fleet: &Fleet) -> String {
    git(&fleet.remote, &["rev-parse", "main"])
        .trim()
        .to_string()
}

fn recorded_sealing(fleet: &Fleet, i: usize) -> String {
    let sealed = SealedSecret::parse(fleet.remote_file(i).as_bytes()).unwrap();
    sealed.annotations["spokekeeper.io/sealing-cert-sha256"].clone()
}

fn assert_untrusted(report: &Value, new: &str, old: &str, commit: &str) {
    let s = &report["sealing"];
    assert_eq!(s["trusted"], false, "{report}");
    let u = &s["untrusted"];
    assert_eq!(u["sha256"], new, "{report}");
    assert_eq!(u["expected"][0], old, "{report}");
    assert_eq!(u["commit"], commit, "{report}");
    let error = u["error"].as_str().unwrap();
    for needle in [new, old, commit, "sealing.sha256"] {
        assert!(error.contains(needle), "{needle} not in {error}");
    }
}

#[test]
fn a_pushed_sealing_certificate_is_not_sealed_to_until_sealing_sha256_confirms_it() {
    crate::support::requires!(ROOT);
    let mut fleet = fleet(2, None);
    let (old, new) = (fingerprint(&real_cert()), fingerprint(&attacker_cert()));
    // A fresh install without anchors works as before: first use.
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["sealing"]["trusted"], true, "{report}");
    assert!(
        report["sealing"]["trust"]
            .as_str()
            .unwrap()
            .contains("first use")
    );
    assert!(err.contains("set sealing.sha256"), "{err}");
    assert_eq!(recorded_sealing(&fleet, 0), old);

    let attack = push_attacker_cert(&fleet);
    let head = remote_head(&fleet);
    let files = [fleet.remote_file(0), fleet.remote_file(1)];
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    assert_untrusted(&report, &new, &old, &attack);
    assert_eq!(report["sealing"]["untrusted"]["anchor"], "committed");
    // Healthy spokes stay healthy; nothing re-sealed, nothing pushed.
    assert_eq!(action(&report, 0), "healthy", "{report}");
    assert_eq!(action(&report, 1), "healthy", "{report}");
    assert_eq!(remote_head(&fleet), head);
    assert_eq!([fleet.remote_file(0), fleet.remote_file(1)], files);
    assert!(err.contains(&attack), "{err}");

    // A spoke that needs rotating for another reason fails at seal and keeps its file.
    fleet.nodes[0].rebuild();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    assert_eq!(action(&report, 0), "failed", "{report}");
    assert_eq!(report["spokes"][0]["stage"], "seal", "{report}");
    assert_eq!(
        report["spokes"][0]["reason"]["kind"], "ca-changed",
        "{report}"
    );
    let error = report["spokes"][0]["error"].as_str().unwrap();
    assert!(
        error.contains(&new) && error.contains(&old) && error.contains(&attack),
        "{error}"
    );
    assert_eq!(action(&report, 1), "healthy", "{report}");
    assert_eq!(remote_head(&fleet), head);
    assert_eq!([fleet.remote_file(0), fleet.remote_file(1)], files);

    // The operator checked it with the controller and confirms it: every spoke re-sealed.
    let text = std::fs::read_to_string(&fleet.config).unwrap();
    let at = format!("  cert: {}\n", fleet.clone.join(PINNED).display());
    std::fs::write(
        &fleet.config,
        text.replace(&at, &format!("{at}  sha256: {new}\n")),
    )
    .unwrap();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["sealing"]["trusted"], true, "{report}");
    assert_eq!(report["sealing"]["trust"], "listed in sealing.sha256");
    assert_eq!(action(&report, 0), "rotated", "{report}");
    assert_eq!(action(&report, 1), "rotated", "{report}");
    assert_eq!(report["spokes"][1]["reason"]["kind"], "sealing-key-changed");
    assert_eq!(recorded_sealing(&fleet, 0), new);
    assert_eq!(recorded_sealing(&fleet, 1), new);
}

#[test]
fn sealing_sha256_that_does_not_match_refuses_even_a_fresh_install() {
    crate::support::requires!(ROOT);
    let other = format!("sha256:{}", "ab".repeat(32));
    let fleet = fleet(1, Some(&other));
    let head = remote_head(&fleet);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let u = &report["sealing"]["untrusted"];
    assert_eq!(u["anchor"], "sealing.sha256", "{report}");
    assert_eq!(u["expected"][0], other.as_str());
    assert_eq!(report["spokes"][0]["stage"], "seal", "{report}");
    assert_eq!(remote_head(&fleet), head, "nothing committed");
    assert!(!fleet.output(0).exists());

    // A list: one of them matches.
    let text = std::fs::read_to_string(&fleet.config).unwrap();
    let real = fingerprint(&real_cert());
    std::fs::write(
        &fleet.config,
        text.replace(
            &format!("sha256: {other}"),
            &format!("sha256: [{other}, {real}]"),
        ),
    )
    .unwrap();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated");
}

/// The daemon raises SpokekeeperSealingCertUntrusted naming both fingerprints and the
/// commit, and /metrics says spokekeeper_sealing_cert_trusted 0.
#[test]
fn the_daemon_alerts_on_an_untrusted_sealing_certificate() {
    crate::support::requires!(ROOT);
    let fleet = fleet(1, None);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let attack = push_attacker_cert(&fleet);
    let daemon = support::daemon::Daemon::start(&fleet.config, &[]);
    let log = daemon.wait_for("tick finished", std::time::Duration::from_secs(60));
    let alert = log
        .lines()
        .find(|l| l.contains("SpokekeeperSealingCertUntrusted"))
        .unwrap_or_else(|| panic!("no alert in {log}"));
    for needle in [
        fingerprint(&real_cert()),
        fingerprint(&attacker_cert()),
        attack,
    ] {
        assert!(alert.contains(&needle), "{needle} not in {alert}");
    }
    assert!(alert.contains("critical"), "{alert}");
    let metrics = daemon.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l == "spokekeeper_sealing_cert_trusted 0"),
        "{metrics}"
    );
}

/// Without anchors, outputs that exist but record no valid sealing fingerprint
/// (unparsable, unannotated, a malformed annotation) are not a fresh install: a pushed
/// certificate is not sealed to, and the annotation's text never reaches the error raw.
#[test]
fn corrupted_or_unannotated_outputs_do_not_reach_first_use() {
    crate::support::requires!(ROOT);
    let fleet = fleet(2, None);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let attack = push_attacker_cert(&fleet);
    git(
        &fleet.clone,
        &["pull", "--quiet", "--ff-only", "origin", "main"],
    );
    // Spoke 0's output is garbage; spoke 1's loses its sealing annotation.
    std::fs::write(fleet.output(0), "not: [a sealed secret\n").unwrap();
    let text = std::fs::read_to_string(fleet.output(1)).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("spokekeeper.io/sealing-cert-sha256"))
        .unwrap()
        .to_string();
    std::fs::write(fleet.output(1), text.replace(&format!("{line}\n"), "")).unwrap();
    commit_all(&fleet.clone, "start over");
    git(&fleet.clone, &["push", "--quiet", "origin", "HEAD:main"]);
    let head = remote_head(&fleet);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let u = &report["sealing"]["untrusted"];
    assert_eq!(u["anchor"], "committed", "{report}");
    assert_eq!(u["commit"], attack.as_str(), "{report}");
    let error = u["error"].as_str().unwrap();
    assert!(
        error.contains("no fresh install") && error.contains("spoke0, spoke1"),
        "{error}"
    );
    assert_eq!(
        remote_head(&fleet),
        head,
        "nothing sealed to the pushed key"
    );

    // A malformed annotation (terminal escapes) counts as none, and is never shown.
    let hostile = text.replace(
        &line,
        &line.replace(line.split_once(": ").unwrap().1, "\"sha256:\\e[2J\\a\""),
    );
    assert_ne!(hostile, text);
    std::fs::write(fleet.output(1), hostile).unwrap();
    commit_all(&fleet.clone, "hostile annotation");
    git(&fleet.clone, &["push", "--quiet", "origin", "HEAD:main"]);
    let head = remote_head(&fleet);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let error = report["sealing"]["untrusted"]["error"].as_str().unwrap();
    assert!(error.contains("no fresh install"), "{error}");
    assert!(
        !error.contains('\u{1b}') && !err.contains('\u{1b}'),
        "{error}"
    );
    assert_eq!(remote_head(&fleet), head);
}

/// A minted fleet whose pinned sealing certificate was replaced by a pusher: the
/// configuration mints, the first tick sealed to the controller's certificate.
fn minted_fleet_then_attacked() -> (Fleet, String) {
    let fleet = fleet(1, None);
    let mut text = std::fs::read_to_string(&fleet.config).unwrap();
    text.push_str("credential:\n  mode: minted\n");
    std::fs::write(&fleet.config, text).unwrap();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        report["spokes"][0]["credential"]["generation"], 1,
        "{report}"
    );
    push_attacker_cert(&fleet);
    let file = fleet.remote_file(0);
    (fleet, file)
}

/// Each minted tick against an untrusted sealing certificate fails at `seal` before it
/// mints: no CSR and no new ClusterRoleBinding pile up on the spoke, one per tick.
#[test]
fn minted_ticks_against_an_untrusted_sealing_certificate_bind_nothing_new() {
    crate::support::requires!(ROOT);
    let (fleet, file) = minted_fleet_then_attacked();
    let objects = fleet.nodes[0].api_objects();
    for _ in 0..3 {
        let (code, report, err) = fleet.rotate_json(&["--all", "--force"]);
        assert_eq!(code, 1, "{report}\n{err}");
        assert_eq!(action(&report, 0), "failed", "{report}");
        assert_eq!(report["spokes"][0]["stage"], "seal", "{report}");
        let o = objects.lock().unwrap();
        assert_eq!(o.binding_names(), ["spokekeeper.hub.spoke0.g1"]);
        assert!(o.csr_names().is_empty(), "{:?}", o.csr_names());
    }
    assert_eq!(fleet.remote_file(0), file);
}

/// `revoke` against an untrusted sealing certificate still deletes the binding (the
/// leaked credential is refused) but mints no replacement it could not seal.
#[test]
fn revoke_against_an_untrusted_sealing_certificate_deletes_and_binds_nothing() {
    crate::support::requires!(ROOT);
    let (fleet, file) = minted_fleet_then_attacked();
    let (code, out, err) = fleet.run(&["revoke", "spoke0"]);
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("deleted ClusterRoleBinding spokekeeper.hub.spoke0.g1"),
        "{err}"
    );
    let objects = fleet.nodes[0].api_objects();
    let o = objects.lock().unwrap();
    assert!(o.binding_names().is_empty(), "{:?}", o.binding_names());
    assert!(o.csr_names().is_empty(), "{:?}", o.csr_names());
    assert_eq!(fleet.remote_file(0), file);
}
