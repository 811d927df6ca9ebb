//! Federated spokes on the lab's emulators, for benches and tests that need many of them
//! cheaply (the real components are in [`crate::realstack`]): a hub issuer
//! ([`spokekeeper_lab::federation::Issuer`]), the emulated hub answering TokenRequests
//! with its tokens and applying each federated spoke's ConfigMap from the fleet repo,
//! and nodes whose emulated API server trusts it through the file the federated recipe's
//! script writes over the node's sshd. The emulators' replies are held to the real ones
//! by tests/suite/realstack/conformance/federated.rs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use spokekeeper_lab::config::Spoke;
use spokekeeper_lab::federation::{Issuer, Reachable};
use spokekeeper_lab::hub::{HubSim, Kind, SimSpoke, Source};

use crate::{LAB_USER, Node, NodeOptions};

/// The hub's `--service-account-issuer` in the lab: never fetched (each node is handed
/// the issuer's keys), so a name that resolves nowhere.
pub const ISSUER: &str = "https://issuer.hub.lab.invalid";

/// The hub ServiceAccounts tokens are asked for: Flux's controllers (what a federated
/// spoke binds by default) and spokekeeper's own check account (its default `check_as`).
pub const ACCOUNTS: [(&str, &str); 3] = [
    ("flux-system", "kustomize-controller"),
    ("flux-system", "helm-controller"),
    ("spokekeeper", "spokekeeper"),
];

/// The emulated hub of a mixed fleet (sealed and federated spokes), on its own runtime.
pub struct LabHub {
    pub sim: HubSim,
    pub issuer: Arc<Issuer>,
    /// A kubeconfig that reaches it (plain HTTP, no credential).
    pub kubeconfig: PathBuf,
    // Dropped after the hub it serves.
    _rt: tokio::runtime::Runtime,
}

impl LabHub {
    /// Starts the hub in `dir`: Flux applies what `remote`'s main holds, the Sealed
    /// Secrets controller opens what the test vectors' key sealed.
    pub fn start(dir: &Path, remote: &Path) -> LabHub {
        Self::with_issuer(dir, remote, Arc::new(Issuer::new(ISSUER)))
    }

    /// [`LabHub::start`] with `issuer` (e.g. one the nodes of an earlier hub trust).
    pub fn with_issuer(dir: &Path, remote: &Path, issuer: Arc<Issuer>) -> LabHub {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("lab-hub")
            .enable_all()
            .build()
            .expect("the hub's runtime");
        let remote = remote.to_path_buf();
        let source: Source = Arc::new(move |file: &str| {
            let out = Command::new("git")
                .arg("-C")
                .arg(&remote)
                .args(["show", &format!("main:{file}")])
                .output()
                .ok()?;
            out.status.success().then_some(out.stdout)
        });
        let cert = std::fs::read_to_string(crate::fleet::vectors().join("key/cert.pem"))
            .expect("the vectors' sealing certificate");
        let sim = HubSim::start(
            rt.handle(),
            "kube-system",
            "sealed-secrets-controller",
            &cert,
            crate::fleet::vectors_recovery_keys(),
            source,
        )
        .expect("the emulated hub");
        sim.set_issuer(issuer.clone());
        for (namespace, name) in ACCOUNTS {
            sim.add_service_account(namespace, name);
        }
        let kubeconfig = dir.join("hub.kubeconfig");
        std::fs::write(&kubeconfig, sim.kubeconfig_yaml()).expect("write the hub's kubeconfig");
        LabHub {
            sim,
            issuer,
            kubeconfig,
            _rt: rt,
        }
    }

    /// spokekeeper.yaml's `hub:` section for it.
    pub fn top(&self) -> String {
        format!(
            "hub:\n  kubeconfig: {}\n  verify_timeout: 30s\n",
            self.kubeconfig.display()
        )
    }

    /// How a federated node is made: its API server reads the federated file and can
    /// reach this hub's issuer.
    pub fn node_options(&self) -> NodeOptions {
        node_options(&self.issuer)
    }

    /// A sealed spoke `name` (its default Secret and output): the hub's Kustomization
    /// and HelmRelease reach it through its Secret.
    pub fn add_sealed(&self, name: &str) {
        let secret = format!("{name}-kubeconfig");
        self.sim
            .add_spoke(sim_spoke(name, &format!("fluxcd/{secret}-sealed.yaml")));
        self.sim.add_consumer(
            Kind::HelmRelease,
            "flux-system",
            &format!("{name}-apps"),
            Some(&secret),
        );
    }

    /// A federated spoke `name` on `node` (made with [`LabHub::node_options`]): the
    /// federated recipe installed there, the hub's consumers reaching it through its
    /// ConfigMap; its entry in spokekeeper.yaml (SSH as the recipe's user).
    pub fn add_federated(&self, node: &mut Node, name: &str) -> Spoke {
        crate::recipe::install_federated(node);
        let config_map = format!("{name}-kubeconfig");
        self.sim
            .add_federated_spoke(sim_spoke(name, &format!("fluxcd/{config_map}.yaml")));
        self.sim.add_config_map_consumer(
            Kind::HelmRelease,
            "flux-system",
            &format!("{name}-apps"),
            &config_map,
        );
        let ssh = format!(
            "{{ user: {LAB_USER}, port: {}, identity: {:?}, known_hosts: {:?}, connect_timeout: 5s }}",
            node.ssh_port,
            node.identity_path.display().to_string(),
            node.known_hosts_path.display().to_string(),
        );
        Spoke::new(name, node.address)
            .kubeconfig_path(&node.kubeconfig_path)
            .field("ssh", &ssh)
            .field(
                "credential",
                &format!("{{ mode: federated, federated: {{ issuer: {ISSUER:?} }} }}"),
            )
    }
}

/// A node whose API server reads the federated file and can reach `issuer`.
pub fn node_options(issuer: &Arc<Issuer>) -> NodeOptions {
    NodeOptions {
        trust: Some(Reachable::of(issuer)),
        ..NodeOptions::default()
    }
}

fn sim_spoke(name: &str, file: &str) -> SimSpoke {
    SimSpoke {
        secret_namespace: "flux-system".into(),
        secret_name: format!("{name}-kubeconfig"),
        kustomization_namespace: "flux-system".into(),
        kustomization_name: name.into(),
        file: file.into(),
    }
}
