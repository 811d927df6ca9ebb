//! What `add` prints for the operator before it rotates: the node recipe of the spoke's
//! credential mode (sealed: the kubeconfig one; federated: the script that also writes
//! the API server's AuthenticationConfiguration, and the API server's flag), the checked
//! host-key step, and the account Flux acts as on the spoke.

use spokekeeper::config::{CredentialMode, Distro, SpokeConfig};

/// The recipe for this spoke's kubeconfig path, then the host-key step: strict
/// known_hosts, so the key is compared with the node's own before it is trusted. Then, for
/// a federated spoke, the API server's flag; then the account Flux acts as on the spoke:
/// created when `account` is given, else a warning.
pub(super) fn node_steps(spoke: &SpokeConfig, account: Option<&str>) -> String {
    let (recipe, host_step, api_server) = recipe(spoke);
    let ssh = &spoke.ssh;
    let key = format!("{}.hostkey", spoke.name);
    let ns = &spoke.secret.namespace;
    let next = host_step + 1 + usize::from(!api_server.is_empty());
    let lockdown = match account {
        Some(sa) => format!(
            "# {next}. On the spoke, as its admin: the account Flux acts as there (serviceAccountName\n\
             #    {sa}, in namespace {ns}); narrow its role to what the spoke's manifests need.\n\
             kubectl create namespace {ns}\n\
             kubectl -n {ns} create serviceaccount {sa}\n\
             kubectl create clusterrolebinding {ns}-{sa} --clusterrole=cluster-admin --serviceaccount={ns}:{sa}\n\n"
        ),
        None => format!(
            "# Flux's controllers on the hub run with --default-service-account (the multi-tenancy\n\
             # lockdown)? Then they act on spoke {} as that account in namespace {ns}, which the\n\
             # spoke lacks: pass --service-account NAME, and add prints the step creating it.\n\n",
            spoke.name
        ),
    };
    // A federated spoke's trust is written on each server node: every one gets the recipe.
    let nodes: Vec<&str> = std::iter::once(spoke.address.as_str())
        .chain(spoke.servers.iter().map(String::as_str))
        .collect();
    let on = if nodes.len() > 1 {
        format!("on each of its server nodes {}", nodes.join(", "))
    } else {
        format!("on the node {}", spoke.address)
    };
    let scans: String = nodes
        .iter()
        .map(|address| {
            format!(
                "ssh-keyscan -p {port} -t ed25519 {address} > {key}\n\
                 ssh-keygen -lf {key}    # must equal, on {address}: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub\n\
                 cat {key} >> {known_hosts} && rm {key}\n",
                port = ssh.port,
                known_hosts = ssh.known_hosts.display(),
            )
        })
        .collect();
    format!(
        "# spoke {name}: {on} ({distro}, kubeconfig {path}, credential {mode})\n{recipe}\
         # {host_step}. On the hub: the node's host key. ssh.known_hosts is strict (an unknown key is\n\
         #    refused; none is trusted on first use): fetch it, compare its fingerprint with\n\
         #    the node's own, and only then add it. spokekeeper connects as {user} (ssh.user).\n\
         {scans}\n{api_server}{lockdown}",
        name = spoke.name,
        distro = spoke.distro,
        path = spoke.kubeconfig_path,
        mode = spoke.credential.mode,
        user = ssh.user,
    )
}

/// The recipe's steps on the node (its own host-key step, which appends unchecked, cut),
/// for the spoke's kubeconfig path; the number of the host-key step; and, federated, the
/// API server's step, with what add does until the flag is there.
fn recipe(spoke: &SpokeConfig) -> (String, usize, String) {
    let path = spoke.kubeconfig_path.as_str();
    if spoke.credential.mode != CredentialMode::Federated {
        let recipe = spokekeeper::spoke::NODE_RECIPE;
        let steps = &recipe[..recipe.find("# 4. On the hub").unwrap_or(recipe.len())];
        return (
            steps.replace(Distro::K3s.kubeconfig_path(), path),
            4,
            String::new(),
        );
    }
    let recipe = spokekeeper::spoke::federated_recipe(spoke.distro)
        .replace(spoke.distro.kubeconfig_path(), path);
    let host = recipe.find("# 5. On the hub").unwrap_or(recipe.len());
    let api = recipe.find("# 6. The API server").unwrap_or(recipe.len());
    let api_server = format!(
        "{}#    Until the flag is there, add writes the file and stops at stage trust,\n\
         #    naming the flag, with nothing committed: add the flag, then run add again.\n\
         #    The hub's side (its issuer reachable from the spoke, the discovery binding,\n\
         #    the controllers' own tokens): docs/federated.md, \"On the hub\".\n\n",
        &recipe[api.max(host)..]
    );
    (recipe[..host].to_string(), 5, api_server)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn spoke(distro: &str, credential: &str) -> SpokeConfig {
        let text = format!(
            "repo: {{path: f}}\nsealing: {{cert: c.pem}}\nhub: {{}}\ncredential: {{federated: {{issuer: \"https://hub.example:6443\"}}}}\nspokes:\n  - {{name: edge-1, address: 10.0.0.9, distro: {distro}, credential: {credential}}}\n"
        );
        spokekeeper::config::Config::parse(&text, "spokekeeper.yaml", Path::new("/etc/sk"))
            .unwrap()
            .spokes
            .remove(0)
    }

    #[test]
    fn a_federated_spoke_gets_the_federated_recipe_of_its_distribution() {
        let steps = node_steps(&spoke("rke2", "{mode: federated}"), Some("flux-applier"));
        for want in [
            "credential federated)\n",
            "cat > /usr/local/sbin/spokekeeper-node <<'EOF'\n",
            "NOPASSWD: /usr/local/sbin/spokekeeper-node read, /usr/local/sbin/spokekeeper-node write-authentication-config, /usr/local/sbin/spokekeeper-node read-authentication-config-header\n",
            "/etc/rancher/rke2/rke2.yaml",
            "# 5. On the hub: the node's host key.",
            "ssh-keyscan -p 22 -t ed25519 10.0.0.9 > edge-1.hostkey\n",
            "# 6. The API server.",
            "kube-apiserver-extra-mount:",
            "add writes the file and stops at stage trust",
            "# 7. On the spoke, as its admin",
        ] {
            assert!(steps.contains(want), "{want:?} in {steps}");
        }
        // Only the checked host-key step, and nothing of the sealed recipe.
        assert_eq!(steps.matches("ssh-keyscan").count(), 1, "{steps}");
        assert!(!steps.contains("sudo -n cat"), "{steps}");
        assert!(
            steps.find("# 5. On the hub") < steps.find("# 6. The API server"),
            "{steps}"
        );
    }

    #[test]
    fn each_server_node_of_a_federated_spoke_gets_the_recipe_and_its_host_key_step() {
        let mut spoke = spoke("k3s", "{mode: federated}");
        spoke.servers = vec!["10.0.0.10".into(), "10.0.0.11".into()];
        let steps = node_steps(&spoke, None);
        assert!(
            steps.starts_with(
                "# spoke edge-1: on each of its server nodes 10.0.0.9, 10.0.0.10, 10.0.0.11 (k3s,"
            ),
            "{steps}"
        );
        for node in ["10.0.0.9", "10.0.0.10", "10.0.0.11"] {
            let scan = format!("ssh-keyscan -p 22 -t ed25519 {node} > edge-1.hostkey\n");
            assert!(steps.contains(&scan), "{scan:?} in {steps}");
            assert!(
                steps.contains(&format!("must equal, on {node}:")),
                "{steps}"
            );
        }
        assert_eq!(steps.matches("ssh-keyscan").count(), 3, "{steps}");
    }

    #[test]
    fn a_sealed_spoke_keeps_the_kubeconfig_recipe() {
        for mode in ["minted", "extracted"] {
            let steps = node_steps(&spoke("kubeadm", &format!("{{mode: {mode}}}")), None);
            for want in [
                "NOPASSWD: /usr/bin/cat /etc/kubernetes/admin.conf\n",
                "# 4. On the hub: the node's host key.",
            ] {
                assert!(steps.contains(want), "{want:?} in {steps}");
            }
            assert!(!steps.contains("spokekeeper-node"), "{steps}");
            assert!(!steps.contains("authentication-config"), "{steps}");
        }
    }
}
