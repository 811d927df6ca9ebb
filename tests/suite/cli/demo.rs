//! `spokekeeper demo`, the README's main command: the whole loop, no setup.

use std::process::Command;

#[test]
fn demo_runs_the_whole_loop_and_cleans_up() {
    let out = Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
        .arg("demo")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rotated_initial = stdout
        .lines()
        .filter(|l| l.contains("rotated  initial credential"))
        .count();
    assert_eq!(rotated_initial, 3, "{stdout}");
    let log: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("== 8."))
        .skip(1)
        .take(6)
        .collect();
    // The newest commit is prod's revocation (step 7); the one before it the third tick
    // reported for `test`, and its message names the CA change that step 4's rebuild
    // printed.
    let (old_ca, new_ca) = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("CA sha256:"))
        .and_then(|l| l.split_once(" -> sha256:"))
        .unwrap_or_else(|| panic!("no CA change in step 4: {stdout}"));
    let commit = stdout
        .lines()
        .skip_while(|l| !l.starts_with("== 5."))
        .find(|l| l.starts_with("test ") && l.contains(" rotated "))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_else(|| panic!("no rotation of test in step 5: {stdout}"));
    let (hash, subject) = log[1].split_once(' ').unwrap();
    assert!(
        hash.len() >= 7 && commit.starts_with(hash),
        "{hash} is not {commit}"
    );
    assert_eq!(
        subject,
        format!(
            "test: rotate kubeconfig: CA changed sha256:{}.. -> sha256:{}..",
            &old_ca[..8],
            &new_ca[..8]
        ),
        "{log:?}"
    );
    assert_ne!(old_ca, new_ca);
    assert_eq!(
        log.iter()
            .filter(|l| l.contains("initial credential"))
            .count(),
        3,
        "{log:?}"
    );
    assert!(
        stdout.contains("unseals; it authenticates as system:admin"),
        "{stdout}"
    );
    // prod's credential is minted: its own user, outside system:masters; revoking it
    // mints the next generation and the previous one is refused at once.
    assert!(
        stdout.contains(
            "prod-kubeconfig-sealed.yaml unseals; it authenticates as spokekeeper:hub:prod:1:"
        ) && stdout.contains(" (groups system:authenticated)"),
        "{stdout}"
    );
    assert!(
        log[0].contains(" prod: rotate kubeconfig, minted spokekeeper:hub:prod:2:")
            && log[0].ends_with(": generation 1 revoked"),
        "{log:?}"
    );
    assert!(
        stdout.contains(
            "the previous generation's credential, still valid as a certificate: 403 Forbidden"
        ),
        "{stdout}"
    );
    // Every push was verified on the simulated hub: three first credentials, one rebuild,
    // one revocation, each in both consumers of the spoke's Secret.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let verified: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(": hub: synced, ready: "))
        .collect();
    assert_eq!(verified.len(), 5, "{stderr}");
    assert_eq!(
        verified[3],
        "test: hub: synced, ready: Kustomization flux-system/test, HelmRelease flux-system/test-apps",
        "{stderr}"
    );
    let dir = stdout.lines().next().unwrap().rsplit(' ').next().unwrap();
    assert!(
        dir.starts_with("/tmp/") || dir.contains("spokekeeper-demo-"),
        "{dir}"
    );
    assert!(
        !std::path::Path::new(dir).exists(),
        "the demo removed {dir}"
    );
}
