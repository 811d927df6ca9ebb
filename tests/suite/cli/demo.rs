//! `spokekeeper demo`, the README's main command: the whole loop, no setup.

use std::process::Command;

/// `spokekeeper demo`'s stdout and stderr, once it succeeded.
fn demo() -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
        .arg("demo")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

#[test]
fn demo_runs_the_whole_loop_and_cleans_up() {
    let (stdout, stderr) = demo();
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
    // one revocation, each in both consumers of the spoke's Secret; dev's sops file
    // decrypted, the others' SealedSecrets synced.
    let verified: Vec<&str> = stderr.lines().filter(|l| l.contains(": hub: ")).collect();
    assert_eq!(verified.len(), 5, "{stderr}");
    assert_eq!(
        verified[0],
        "dev: hub: decrypted, ready: Kustomization flux-system/dev, HelmRelease flux-system/dev-apps",
        "{stderr}"
    );
    assert!(
        verified[1..]
            .iter()
            .all(|l| l.contains(": hub: synced, ready: ")),
        "{stderr}"
    );
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

/// The age recipient step 1 names (kustomize-controller's, made for the run), and what
/// step 2 shows of dev's committed file (the lines after `dev is sops:`, its header).
fn sops_shown(stdout: &str) -> (&str, &str, Vec<&str>) {
    let recipient = stdout
        .lines()
        .find_map(|l| l.split("(recipient ").nth(1))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no recipient in step 1: {stdout}"));
    let mut lines = stdout
        .lines()
        .skip_while(|l| !l.starts_with("   dev is sops: fluxcd/sops/dev-kubeconfig.yaml "));
    let header = lines
        .next()
        .unwrap_or_else(|| panic!("no sops file in step 2: {stdout}"));
    let file = lines.map_while(|l| l.strip_prefix("   | ")).collect();
    (recipient, header, file)
}

#[test]
fn the_sops_spoke_is_encrypted_for_a_recipient_made_for_the_run_and_healthy_after_its_rotation() {
    let (stdout, stderr) = demo();
    let (recipient, header, file) = sops_shown(&stdout);
    assert!(recipient.starts_with("age1"), "{recipient}");
    assert!(
        header.contains(&format!("encrypted for age recipient {recipient} ")),
        "{header}"
    );
    // A Secret whose value is sops-encrypted, spokekeeper's annotations readable, and
    // the data key wrapped for the run's recipient alone.
    assert!(file.contains(&"kind: Secret"), "{file:#?}");
    assert!(
        file.iter()
            .any(|l| l.starts_with("    value: ENC[AES256_GCM,data:")),
        "{file:#?}"
    );
    assert!(
        file.contains(&"        spokekeeper.io/spoke: dev"),
        "{file:#?}"
    );
    let recipients: Vec<&str> = file
        .iter()
        .filter_map(|l| l.trim_start().strip_prefix("recipient: "))
        .collect();
    assert_eq!(recipients, [recipient], "{file:#?}");
    assert!(file.contains(&"    version: 3.13.2"), "{file:#?}");
    // The hub's kustomize-controller decrypted it, and both consumers took it.
    assert!(
        stderr.lines().any(|l| l
            == "dev: hub: decrypted, ready: Kustomization flux-system/dev, HelmRelease flux-system/dev-apps"),
        "{stderr}"
    );
    // The next tick finds it healthy: nothing to rotate.
    let second = stdout
        .lines()
        .skip_while(|l| !l.starts_with("== 3."))
        .find(|l| l.starts_with("dev "))
        .unwrap_or_else(|| panic!("no dev in step 3: {stdout}"));
    assert_eq!(
        second.split_whitespace().nth(1),
        Some("healthy"),
        "{second}"
    );
    // The identity is made for the run, never a fixed key: another run has another.
    let (again, _) = demo();
    assert_ne!(sops_shown(&again).0, recipient);
}
