//! `spokekeeper add --credential federated` on the lab's nodes: the spoke is refused,
//! naming what is missing, until the configuration or the flags give its issuer; then add
//! prints the federated node recipe of its distribution and commits nothing until the
//! the spoke's node and the hub are set up for it. The real components onboard one:
//! realstack/flux_add/federated.rs.

use super::{add, fleet, left_as_it_was, ssh_to_node1};
use support::git::git;

use crate::support;

#[test]
fn a_federated_add_needs_an_issuer_prints_the_federated_recipe_and_commits_nothing_until_trusted() {
    crate::support::requires!(ROOT);
    let fleet = fleet();
    let known_hosts = fleet.nodes[1].known_hosts_path.clone();
    let hub = fleet.dir.path().join("hub.kubeconfig");
    let write = |top: &str| {
        support::fleet::config(&fleet.clone, &fleet.nodes[..1])
            .top(&format!("{}{top}", ssh_to_node1(&fleet, &known_hosts)))
            .write(&fleet.config)
            .unwrap();
        std::fs::read_to_string(&fleet.config).unwrap()
    };
    let config_before = write(&format!("hub: {{kubeconfig: \"{}\"}}\n", hub.display()));
    let before = fleet.remote_log();
    let unchanged = |what: &str| {
        assert_eq!(fleet.remote_log(), before, "{what}");
        let config = std::fs::read_to_string(&fleet.config).unwrap();
        assert!(!config.contains("spoke1"), "{what}: {config}");
    };

    // No issuer anywhere: refused before anything is printed, naming the key and the flag.
    let (code, out, err) = add(&fleet, &["--credential", "federated"]);
    assert_ne!(code, 0);
    assert_eq!(out, "");
    assert!(
        err.contains(
            "spokes[1].credential.mode is federated but credential.federated.issuer is not set"
        ) && err.contains("or pass --issuer URL"),
        "{err}"
    );
    unchanged("no issuer");
    // An issuer for a spoke that is not federated is refused too.
    let (code, out, err) = add(&fleet, &["--issuer", "https://hub.example:6443"]);
    assert_ne!(code, 0);
    assert_eq!(out, "");
    assert!(
        err.contains("--issuer is credential.federated.issuer, but spoke1's credential.mode is extracted: pass --credential federated"),
        "{err}"
    );
    unchanged("issuer without federated");

    // The issuer as the fleet-wide default: the federated recipe for k3s is printed, and
    // a rotation that fails leaves everything as it was.
    let top = format!(
        "hub: {{kubeconfig: \"{}\"}}\ncredential: {{federated: {{issuer: \"https://hub.example:6443\"}}}}\n",
        hub.display()
    );
    assert_ne!(write(&top), config_before);
    let config_before = std::fs::read_to_string(&fleet.config).unwrap();
    let (code, out, err) = add(&fleet, &["--credential", "federated", "--root", "fluxcd"]);
    assert_ne!(code, 0, "{out}\n{err}");
    for want in [
        "credential federated)\n",
        "cat > /usr/local/sbin/spokekeeper-node <<'EOF'\n",
        "write-authentication-config",
        "# 6. The API server.",
        "kube-apiserver-arg:",
        "add writes the file and stops at stage trust",
    ] {
        assert!(out.contains(want), "{want:?} in {out}");
    }
    assert!(!out.contains("sudo -n cat"), "{out}");
    // The lab's node runs the kubeconfig recipe: the rotation stops at extract, naming
    // the federated one, before the node or the hub is asked for anything else.
    assert!(
        err.contains("spoke1: failed at extract")
            && err.contains("Fix: install the federated node recipe")
            && err.contains("spoke1 was not added"),
        "{err}"
    );
    left_as_it_was(&fleet, &before, &config_before);
    let status = git(&fleet.clone, &["status", "--porcelain"]);
    assert_eq!(status, "", "the clone is as the remote has it");
}
