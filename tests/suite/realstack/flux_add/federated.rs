//! `spokekeeper add --credential federated` on the real components (issue 42): a spoke
//! whose node runs the federated recipe is onboarded in one command, its trust of the
//! hub written and proven, its ConfigMap committed with its Flux objects in one commit,
//! and Flux's real kustomize-controller and helm-controller deploy to it with their own
//! tokens through `spec.kubeConfig.configMapRef`.

use crate::support;

use super::{has_release, release};
use support::git::git;
use support::realstack::real_flux::{Format, RealFlux};

/// The seed's layout without spoke 1's Flux objects, with its manifests under spokes/ and
/// a root kustomization.yaml that lists what it applies.
fn spoke1_to_add(seed: &std::path::Path) {
    std::fs::remove_file(seed.join("fluxcd/spoke1.yaml")).unwrap();
    std::fs::remove_dir_all(seed.join("apps/spoke1")).unwrap();
    super::write(seed, "fluxcd/kustomization.yaml", super::ROOT);
    super::write(
        seed,
        "spokes/spoke1/apps/configmap.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: spoke-app\n  namespace: default\n\
         data:\n  spoke: spoke1\n",
    );
    super::write(
        seed,
        "spokes/spoke1/helmreleases/release.yaml",
        &release("spoke1", "spoke-config"),
    );
}

/// spokekeeper.yaml without spoke 1, its global `ssh:` (the lab's user) reaching node 1.
fn forget_spoke1(stack: &RealFlux) {
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    let start = text.find("  - name: spoke1\n").expect("spoke 1's entry");
    let end = start
        + 1
        + text[start..]
            .find("\nhub:\n")
            .expect("hub: after the spokes");
    let n = &stack.fleet.nodes[1];
    let ssh = format!(
        "ssh:\n  user: {}\n  port: {}\n  identity: \"{}\"\n  known_hosts: \"{}\"\n  connect_timeout: 5s\n",
        support::LAB_USER,
        n.ssh_port,
        n.identity_path.display(),
        n.known_hosts_path.display()
    );
    let text = format!("{}{}", &text[..start], &text[end..]).replacen(
        &format!("ssh:\n  user: {}\n", support::LAB_USER),
        &ssh,
        1,
    );
    assert!(text.contains(&ssh), "{text}");
    std::fs::write(&stack.fleet.config, text).unwrap();
}

#[test]
fn add_credential_federated_onboards_a_spoke_the_real_controllers_deploy_to_through_its_configmap()
{
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_format_with(2, "", Format::Federated, spoke1_to_add);
    forget_spoke1(&stack);
    add_spoke1(&stack);
    deployed_through_the_configmap(&stack);
    check_says_nothing(&stack);
}

/// `add spoke1 --credential federated`: the federated recipe printed, then one commit
/// holding the ConfigMap, the Flux objects that read it and the root's listing, and
/// spokekeeper.yaml with the spoke's own mode.
fn add_spoke1(stack: &RealFlux) {
    let before = stack.fleet.remote_log().len();
    let extra = ["--source", "fleet", "--credential", "federated"];
    let (code, out, err) = stack.fleet.add(1, &extra);
    assert_eq!(code, 0, "{out}\n{err}\n{}", stack.controllers.tail(30));
    assert!(
        out.contains("credential federated)") && out.contains("write-authentication-config"),
        "{out}"
    );

    // One commit: the ConfigMap, the Flux objects reading it, the root's listing (after
    // the tick's pin of the hub's sealing certificate, which this fleet configures).
    let log = stack.fleet.remote_log();
    assert_eq!(log.len(), before + 2, "{log:?}");
    assert_eq!(
        log[0], "spoke1: trust the hub (federated): initial credential",
        "{log:?}"
    );
    assert!(
        log[1].starts_with("sealing: pin the controller's certificate"),
        "{log:?}"
    );
    let files = git(
        &stack.fleet.remote,
        &["diff-tree", "--no-commit-id", "--name-only", "-r", "main"],
    );
    assert_eq!(
        files.lines().collect::<Vec<_>>(),
        [
            "fluxcd/kustomization.yaml",
            "fluxcd/spoke1-kubeconfig.yaml",
            "fluxcd/spoke1.yaml"
        ],
        "{log:?}"
    );
    let listed = git(
        &stack.fleet.remote,
        &["show", "main:fluxcd/kustomization.yaml"],
    );
    assert_eq!(
        listed,
        format!(
            "{}  - spoke1-kubeconfig.yaml\n  - spoke1.yaml\n",
            super::ROOT
        )
    );
    let committed = git(
        &stack.fleet.remote,
        &["show", "main:fluxcd/spoke1-kubeconfig.yaml"],
    );
    let committed: serde_json::Value =
        serde_saphyr::from_str(&committed).unwrap_or_else(|e| panic!("{e}: {committed}"));
    assert_eq!(
        (&committed["kind"], &committed["metadata"]["namespace"]),
        (&"ConfigMap".into(), &"spoke1".into()),
        "{committed:#}"
    );
    let objects = git(&stack.fleet.remote, &["show", "main:fluxcd/spoke1.yaml"]);
    assert!(!objects.contains("secretRef"), "{objects}");
    assert_eq!(objects.matches("configMapRef:").count(), 2, "{objects}");
    let config = std::fs::read_to_string(&stack.fleet.config).unwrap();
    assert!(
        config.contains("  - name: spoke1\n") && config.contains("credential: {mode: federated}"),
        "{config}"
    );
}

/// The real controllers, with their own tokens: the ConfigMap applied on spoke 1, the
/// release installed there through the patched configMapRef; neither on the hub, and no
/// Secret for spoke 1 there.
fn deployed_through_the_configmap(stack: &RealFlux) {
    stack.wait_ready_in("spoke1", "kustomization", "spoke1");
    stack.wait_ready_in("spoke1", "kustomization", "spoke1-helmreleases");
    stack.wait_ready_in("spoke1", "helmrelease", "spoke1");
    let hr = stack
        .hub
        .api
        .get_json(&["helmrelease", "spoke1", "-n", "spoke1"]);
    assert_eq!(
        hr["spec"]["kubeConfig"],
        serde_json::json!({"configMapRef": {"name": "spoke1-kubeconfig"}}),
        "{hr:#}"
    );
    stack.assert_deployed(1);
    assert!(!has_release(&stack.hub.api, "spoke-config"));
    let secrets = stack.hub.api.get_json(&["secrets", "-n", "spoke1"]);
    assert_eq!(
        secrets["items"].as_array().map(Vec::len),
        Some(0),
        "{secrets:#}"
    );
}

/// check has nothing to say about spoke 1's layout.
fn check_says_nothing(stack: &RealFlux) {
    let (_, out, err) = stack.fleet.run(&["check", "spoke1", "-o", "json"]);
    let report: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let flux: Vec<&serde_json::Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["cert"] == "flux")
        .collect();
    assert!(flux.is_empty(), "{report:#}");
}
