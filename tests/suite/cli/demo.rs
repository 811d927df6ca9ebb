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

/// Whether the demo's federated spoke runs here: its node needs OpenSSH's sshd, which
/// CI installs (scripts/test); without it the demo leaves the spoke out. An sshd run as
/// root needs its privilege separation directory, which the lab makes too (the demo
/// touches nothing outside its own directory).
fn federated() -> bool {
    let _ = std::fs::create_dir_all("/run/sshd");
    std::path::Path::new("/usr/sbin/sshd").is_file()
}

#[test]
fn demo_runs_the_whole_loop_and_cleans_up() {
    let (stdout, stderr) = demo();
    let spokes = if federated() { 4 } else { 3 };
    let rotated_initial = stdout
        .lines()
        .filter(|l| l.contains("rotated  initial credential"))
        .count();
    assert_eq!(rotated_initial, spokes, "{stdout}");
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
        spokes,
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
    // Every push was verified on the simulated hub: the first credentials, one rebuild,
    // one revocation, each in both consumers of the spoke's Secret (edge's ConfigMap);
    // dev's sops file decrypted, edge's ConfigMap applied, the others' SealedSecrets
    // synced.
    let verified: Vec<&str> = stderr.lines().filter(|l| l.contains(": hub: ")).collect();
    assert_eq!(verified.len(), spokes + 2, "{stderr}");
    assert_eq!(
        verified[0],
        "dev: hub: decrypted, ready: Kustomization flux-system/dev, HelmRelease flux-system/dev-apps",
        "{stderr}"
    );
    assert!(
        verified[1..]
            .iter()
            .filter(|l| !l.starts_with("edge: "))
            .all(|l| l.contains(": hub: synced, ready: ")),
        "{stderr}"
    );
    assert_eq!(
        verified[spokes],
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

#[test]
fn the_federated_spoke_trusts_the_hub_over_ssh_and_git_holds_a_configmap_with_nothing_secret() {
    if !federated() {
        eprintln!("skipped: no /usr/sbin/sshd for the demo's federated spoke");
        return;
    }
    let (stdout, stderr) = demo();
    let shown: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("   edge is federated: "))
        .take_while(|l| !l.starts_with("== 3."))
        .collect();
    assert!(!shown.is_empty(), "no federated spoke in step 2: {stdout}");
    // The file on the node: the hub's issuer, edge's own audience (its API URL), the
    // accepted accounts, the prefix.
    let edge_url = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("edge  k3s API on "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no edge API in step 1: {stdout}"));
    for want in [
        "   |     url: \"https://issuer.hub.demo.invalid\"".to_string(),
        format!("   |     - \"{edge_url}\""),
        "   |       prefix: \"hub:\"".to_string(),
    ] {
        assert!(shown.contains(&want.as_str()), "{want}: {shown:#?}");
    }
    assert!(
        shown.contains(
            &"   ClusterRoleBinding spokekeeper.hub.edge.federated binds ClusterRole cluster-admin to \
              hub:system:serviceaccount:flux-system:kustomize-controller, hub:system:serviceaccount:flux-system:helm-controller"
        ),
        "{shown:#?}"
    );
    // Git holds a ConfigMap: the address, the CA, the audience; no Secret, no key.
    let config_map: Vec<&str> = shown
        .iter()
        .skip_while(|l| !l.contains("fluxcd/edge-kubeconfig.yaml is a ConfigMap"))
        .filter_map(|l| l.strip_prefix("   | "))
        .collect();
    for want in [
        "kind: ConfigMap",
        "  \"provider\": \"generic\"",
        &format!("  \"address\": \"{edge_url}\""),
    ] {
        assert!(config_map.contains(&want), "{want}: {config_map:#?}");
    }
    assert!(
        !config_map
            .iter()
            .any(|l| l.contains("Secret") || l.contains("PRIVATE")),
        "{config_map:#?}"
    );
    // Applied on the hub, healthy the next tick, and a hub token is the prefixed
    // controller on the spoke.
    assert!(
        stderr.lines().any(|l| l
            == "edge: hub: applied, ready: Kustomization flux-system/edge, HelmRelease flux-system/edge-apps"),
        "{stderr}"
    );
    let second = stdout
        .lines()
        .skip_while(|l| !l.starts_with("== 3."))
        .find(|l| l.starts_with("edge "))
        .unwrap_or_else(|| panic!("no edge in step 3: {stdout}"));
    assert_eq!(
        second.split_whitespace().nth(1),
        Some("healthy"),
        "{second}"
    );
    assert!(
        stdout.contains(
            "authenticates as hub:system:serviceaccount:flux-system:kustomize-controller (groups system:authenticated)"
        ),
        "{stdout}"
    );
}
