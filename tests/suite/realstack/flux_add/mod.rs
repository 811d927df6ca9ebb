//! `spokekeeper add` and `check`'s HelmRelease traps, judged by Flux's real controllers
//! (the real-Flux lab of flux_real/): after one `add`, kustomize-controller applies the
//! new spoke's ConfigMap on the spoke and helm-controller installs its release there, not
//! on the hub; then the two layouts `check` warns about put their releases where `check`
//! says they go. Two spokes added side by side, each in its own hub namespace, keep
//! same-named releases apart, and a writer of one spoke's hub-side directory can reach
//! neither the hub nor the other spoke (issue 40, items 0, 1 and 3). Here: the fleet's
//! files and the steps both scenarios take.

use crate::support;

use std::path::Path;

use support::git::{commit, git};
use support::realstack::flux_controllers as flux;
use support::realstack::real_flux::RealFlux;

mod federated;
mod one_spoke;
mod two_spokes;

/// The hub's root lists what it applies (kustomization.yaml), so `add` must list the new
/// spoke's files there; spoke 1 has manifests waiting in the layout `add` writes
/// Kustomizations for, and no Flux objects yet.
const ROOT: &str = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
    # The hub's root: each spoke's Flux objects and sealed credential.\nresources:\n  - spoke0.yaml\n";

/// A HelmRelease of the fleet's chart (its GitRepository in flux-system), named `name`,
/// with no spec.kubeConfig, for spoke 1.
fn release(name: &str, release_name: &str) -> String {
    release_for(name, release_name, 1)
}

/// [`release`] for spoke `i`: its chart's ConfigMap says `spoke{i}`.
fn release_for(name: &str, release_name: &str, i: usize) -> String {
    format!(
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: {name}\n\
         spec:\n  interval: 10m\n  timeout: 30s\n  releaseName: {release_name}\n  \
         targetNamespace: default\n  storageNamespace: default\n  chart:\n    spec:\n      \
         chart: ./charts/spoke-config\n      sourceRef:\n        kind: GitRepository\n        \
         name: fleet\n        namespace: {}\n  values:\n    spoke: spoke{i}\n",
        flux::NS
    )
}

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// spokekeeper.yaml without spoke `i`'s entry, and with global `ssh:` settings (the last
/// key, in place of any written before) that reach node `i`.
fn forget(stack: &RealFlux, i: usize) {
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    let text = match text.find("\nssh:\n") {
        Some(at) => text[..=at].to_string(),
        None => text,
    };
    let start = text
        .find(&format!("  - name: spoke{i}\n"))
        .expect("the spoke's entry");
    let rest = &text[start..];
    let end = start
        + 1
        + ["\n  - name: ", "\nhub:\n"]
            .iter()
            .filter_map(|m| rest.find(m))
            .min()
            .expect("hub: after the spokes");
    let n = &stack.fleet.nodes[i];
    let text = format!(
        "{}{}ssh:\n  port: {}\n  identity: \"{}\"\n  known_hosts: \"{}\"\n  connect_timeout: 5s\n",
        &text[..start],
        &text[end..],
        n.ssh_port,
        n.identity_path.display(),
        n.known_hosts_path.display()
    );
    std::fs::write(&stack.fleet.config, text).unwrap();
}

/// `add spoke{i}` for node `i`, reading the GitRepository `source`; must succeed. Its
/// stderr.
fn add(stack: &RealFlux, i: usize, source: &str) -> String {
    let n = &stack.fleet.nodes[i];
    let address = n.address_string();
    let name = format!("spoke{i}");
    let (code, out, err) = stack.fleet.run(&[
        "add",
        &name,
        "--address",
        &address,
        "--distro",
        "k3s",
        "--kubeconfig-path",
        n.kubeconfig_path_str(),
        "--source",
        source,
    ]);
    assert_eq!(code, 0, "{out}\n{err}\n{}", stack.controllers.tail(30));
    err
}

/// Pushes the seed's work tree as it is, and brings the fleet's clone up to it.
fn push(stack: &RealFlux, seed: &Path, message: &str) {
    git(seed, &["add", "-A"]);
    commit(seed, message);
    git(seed, &["push", "--quiet", "origin", "HEAD:main"]);
    git(
        &stack.fleet.clone,
        &["pull", "--quiet", "--ff-only", "origin", "main"],
    );
}

/// Whether `api` holds the Helm release `name` (its storage Secret, deployed) and the
/// chart's ConfigMap of that name; both or neither, once settled.
fn has_release(api: &support::realstack::kube::KubeApi, name: &str) -> bool {
    let (stored, configmap) = release_parts(api, name);
    assert_eq!(
        stored, configmap,
        "{name}: stored {stored}, ConfigMap {configmap}"
    );
    stored
}

/// The release `name`'s storage Secret (deployed) and chart ConfigMap on `api`, each
/// there or not: an uninstall deletes the ConfigMap before the Secret, so a wait sees one
/// without the other for a moment.
fn release_parts(api: &support::realstack::kube::KubeApi, name: &str) -> (bool, bool) {
    let selector = format!("owner=helm,name={name},status=deployed");
    let secrets = api.get_json(&["secrets", "-n", "default", "-l", &selector]);
    let stored = secrets["items"].as_array().is_some_and(|i| !i.is_empty());
    let configmap = api
        .try_kubectl(&["get", "configmap", name, "-n", "default"])
        .is_ok();
    (stored, configmap)
}
