//! Against the real components (tests/support/src/realstack): spokekeeper against a real hub,
//! and each emulator held to its real counterpart.

use crate::support::realstack::kube::KubeApi;

mod conformance;
mod distros;
mod federated;
mod flux_add;
mod flux_real;
mod flux_sops;
mod kubeadm;
mod real_hub;

/// The ClusterRoleBindings spokekeeper made on a spoke.
fn our_bindings(api: &KubeApi) -> Vec<String> {
    let list = api.get_json(&[
        "clusterrolebindings",
        "-l",
        "app.kubernetes.io/managed-by=spokekeeper",
    ]);
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}
