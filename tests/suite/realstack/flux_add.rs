//! `spokekeeper add` and `check`'s HelmRelease traps, judged by Flux's real controllers
//! (the real-Flux lab of flux_real.rs): after one `add`, kustomize-controller applies the
//! new spoke's ConfigMap on the spoke and helm-controller installs its release there, not
//! on the hub; then the two layouts `check` warns about put their releases where `check`
//! says they go.

use crate::support;

use std::path::Path;

use support::git::{commit, git};
use support::realstack::flux_controllers::{self as flux, ready};

use support::realstack::real_flux::RealFlux;

/// The hub's root lists what it applies (kustomization.yaml), so `add` must list the new
/// spoke's files there; spoke 1 has manifests waiting in the layout `add` writes
/// Kustomizations for, and no Flux objects yet.
const ROOT: &str = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
    # The hub's root: each spoke's Flux objects and sealed credential.\nresources:\n  - spoke0.yaml\n";

/// A HelmRelease of the fleet's chart, named `name`, with no spec.kubeConfig.
fn release(name: &str, release_name: &str) -> String {
    format!(
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: {name}\n\
         spec:\n  interval: 10m\n  timeout: 30s\n  releaseName: {release_name}\n  \
         targetNamespace: default\n  storageNamespace: default\n  chart:\n    spec:\n      \
         chart: ./charts/spoke-config\n      sourceRef:\n        kind: GitRepository\n        \
         name: fleet\n  values:\n    spoke: spoke1\n"
    )
}

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The seed's layout without spoke 1's Flux objects, with its manifests under spokes/.
fn spoke1_to_add(seed: &Path) {
    std::fs::remove_file(seed.join("fluxcd/spoke1.yaml")).unwrap();
    std::fs::remove_dir_all(seed.join("apps/spoke1")).unwrap();
    write(seed, "fluxcd/kustomization.yaml", ROOT);
    write(
        seed,
        "spokes/spoke1/apps/configmap.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: spoke-app\n  namespace: default\n\
         data:\n  spoke: spoke1\n",
    );
    write(
        seed,
        "spokes/spoke1/helmreleases/release.yaml",
        &release("spoke1", "spoke-config"),
    );
}

/// spokekeeper.yaml without spoke 1, and with global `ssh:` settings that reach node 1
/// (an operator's defaults for a new node).
fn forget_spoke1(stack: &RealFlux) {
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    let start = text.find("  - name: spoke1\n").expect("spoke1's entry");
    let end = start + text[start..].find("hub:\n").expect("hub: after the spokes");
    let n1 = &stack.fleet.nodes[1];
    let text = format!(
        "{}{}ssh:\n  port: {}\n  identity: \"{}\"\n  known_hosts: \"{}\"\n  connect_timeout: 5s\n",
        &text[..start],
        &text[end..],
        n1.ssh_port,
        n1.identity_path.display(),
        n1.known_hosts_path.display()
    );
    std::fs::write(&stack.fleet.config, text).unwrap();
}

/// Whether `api` holds the Helm release `name` (its storage Secret, deployed) and the
/// chart's ConfigMap of that name.
fn has_release(api: &support::realstack::kube::KubeApi, name: &str) -> bool {
    let selector = format!("owner=helm,name={name},status=deployed");
    let secrets = api.get_json(&["secrets", "-n", "default", "-l", &selector]);
    let stored = secrets["items"].as_array().is_some_and(|i| !i.is_empty());
    let configmap = api
        .try_kubectl(&["get", "configmap", name, "-n", "default"])
        .is_ok();
    assert_eq!(stored, configmap, "{name}: {secrets:#}");
    stored
}

#[test]
fn after_add_the_real_controllers_deploy_to_the_new_spoke_and_the_traps_land_where_check_says() {
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_with(2, false, "", spoke1_to_add);
    forget_spoke1(&stack);
    let n1 = &stack.fleet.nodes[1];
    let address = n1.address_string();
    let (code, out, err) = stack.fleet.run(&[
        "add",
        "spoke1",
        "--address",
        &address,
        "--distro",
        "k3s",
        "--kubeconfig-path",
        n1.kubeconfig_path_str(),
        "--source",
        "fleet",
    ]);
    assert_eq!(code, 0, "{out}\n{err}\n{}", stack.controllers.tail(30));
    let listed = git(
        &stack.fleet.remote,
        &["show", "main:fluxcd/kustomization.yaml"],
    );
    assert_eq!(
        listed,
        format!("{ROOT}  - spoke1-kubeconfig-sealed.yaml\n  - spoke1.yaml\n")
    );

    // The real controllers: the ConfigMap applied on spoke 1 by kustomize-controller, the
    // release installed there by helm-controller through the patched spec.kubeConfig.
    stack.wait_ready("kustomization", "spoke1", None);
    stack.wait_ready("kustomization", "spoke1-helmreleases", None);
    stack.wait_ready("helmrelease", "spoke1", None);
    let hr = stack
        .hub
        .api
        .get_json(&["helmrelease", "spoke1", "-n", flux::NS]);
    assert_eq!(
        hr["spec"]["kubeConfig"]["secretRef"]["name"], "spoke1-kubeconfig",
        "{hr:#}"
    );
    stack.assert_deployed(1);
    // Not on the hub.
    assert!(!has_release(&stack.hub.api, "spoke-config"));
    assert!(
        stack
            .hub
            .api
            .try_kubectl(&["get", "configmap", "spoke-app", "-n", "default"])
            .is_err()
    );

    // The traps, pushed by hand: a hub-side Kustomization copied without the patch
    // (its HelmRelease has no spec.kubeConfig), and a HelmRelease put beside the
    // spoke's plain manifests under a Kustomization that targets the spoke.
    let seed = stack.fleet.dir.path().join("seed");
    git(&seed, &["pull", "--quiet", "--rebase", "origin", "main"]);
    let kustomization = |name: &str, path: &str, tail: &str| {
        format!(
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  \
             name: {name}\n  namespace: {}\nspec:\n  interval: 10m\n  retryInterval: 5s\n  \
             timeout: 30s\n  path: ./{path}\n  prune: true\n  targetNamespace: {}\n  \
             sourceRef:\n    kind: GitRepository\n    name: fleet\n{tail}",
            flux::NS,
            flux::NS
        )
    };
    write(
        &seed,
        "fluxcd/spoke1-traps.yaml",
        &format!(
            "{}---\n{}",
            kustomization("spoke1-on-hub", "spokes/spoke1/charts", ""),
            kustomization(
                "spoke1-on-spoke",
                "spokes/spoke1/more-apps",
                "  kubeConfig:\n    secretRef:\n      name: spoke1-kubeconfig\n      key: value\n"
            )
        ),
    );
    write(
        &seed,
        "spokes/spoke1/charts/release.yaml",
        &release("spoke1-on-hub", "spoke-on-hub"),
    );
    write(
        &seed,
        "spokes/spoke1/more-apps/release.yaml",
        &release("spoke1-on-spoke", "spoke-on-spoke"),
    );
    let root = std::fs::read_to_string(seed.join("fluxcd/kustomization.yaml")).unwrap();
    write(
        &seed,
        "fluxcd/kustomization.yaml",
        &format!("{root}  - spoke1-traps.yaml\n"),
    );
    git(&seed, &["add", "-A"]);
    commit(&seed, "spoke1: two HelmReleases, laid out by hand");
    git(&seed, &["push", "--quiet", "origin", "HEAD:main"]);
    git(
        &stack.fleet.clone,
        &["pull", "--quiet", "--ff-only", "origin", "main"],
    );

    // check names both, for spoke 1.
    let (code, out, err) = stack.fleet.run(&["check", "spoke1", "-o", "json"]);
    let report: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    assert_eq!(code, 1, "warning: {report:#}\n{err}");
    let warned: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["cert"] == "flux")
        .map(|f| {
            assert_eq!(
                (&f["spoke"], &f["severity"]),
                (&"spoke1".into(), &"warning".into())
            );
            f["detail"].as_str().unwrap()
        })
        .collect();
    assert_eq!(warned.len(), 2, "{report:#}");
    let on_hub = warned
        .iter()
        .find(|d| d.contains("HelmRelease flux-system/spoke1-on-hub"))
        .unwrap_or_else(|| panic!("{warned:?}"));
    assert!(
        on_hub.contains("helm-controller installs it on the hub, not on spoke spoke1"),
        "{on_hub}"
    );
    let on_spoke = warned
        .iter()
        .find(|d| d.contains("HelmRelease flux-system/spoke1-on-spoke"))
        .unwrap_or_else(|| panic!("{warned:?}"));
    assert!(
        on_spoke.contains("applied on the spoke, where no helm-controller runs"),
        "{on_spoke}"
    );

    // The real controllers agree: the first release is installed on the hub and not on
    // the spoke; the second is sent to the spoke, which has no HelmRelease kind, and is
    // installed nowhere.
    stack.wait_ready("helmrelease", "spoke1-on-hub", None);
    assert!(has_release(&stack.hub.api, "spoke-on-hub"));
    assert!(!has_release(&stack.spoke_apis[1], "spoke-on-hub"));
    let failed = stack.wait_for("kustomization", "spoke1-on-spoke", "Ready=False", |r| {
        r.status == "False" && r.message.contains("HelmRelease")
    });
    assert!(failed.message.contains("no matches for kind"), "{failed:?}");
    assert!(ready(&stack.hub, "helmrelease", "spoke1-on-spoke").is_none());
    assert!(!has_release(&stack.spoke_apis[1], "spoke-on-spoke"));
    assert!(!has_release(&stack.hub.api, "spoke-on-spoke"));
    stack.assert_deployed(1);
}
