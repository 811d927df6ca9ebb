//! A real spoke: a lab node (real sshd, its k3s.yaml readable over SSH) whose API is a
//! real kube-apiserver with the node's k3s-shaped PKI: a server CA, a client CA, and an
//! admin client certificate in `system:masters`; k3s.yaml names everything `default`
//! and says `server: https://127.0.0.1:<port>`, as k3s writes it. Beside it, unless
//! the options say otherwise, the spoke's kube-controller-manager signs approved CSRs for
//! `kubernetes.io/kube-apiserver-client` with the client CA, as a k3s server does.
//! distro.rs lays a node out file for file as k3s and RKE2 do (CA bundles, nochain
//! files, k3s's API server behind 6443); this one keeps the hub scenarios' simpler shape.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{Lab, Node, NodeOptions};

use super::controller_manager::ControllerManager;
use super::federated::{NO_ISSUERS, wait_config_loaded, write_config};
use super::kube::{Etcd, KubeApi};

/// A real API server for `node` (one without the emulated API) on its address and API
/// port, with its PKI; `generation` counts rebuilds, each over fresh storage, as a
/// reinstalled k3s starts.
pub fn real_api(node: &Node, etcd: &Etcd, dir: &Path, generation: u32) -> KubeApi {
    real_api_with(node, etcd, dir, generation, false)
}

/// Where a lab node keeps the AuthenticationConfiguration spokekeeper writes: a directory
/// of its own in the node's directory, as k3s's
/// /etc/rancher/k3s/spokekeeper/authentication-config.yaml.
pub fn authentication_config_path(node: &Node) -> PathBuf {
    node.dir.join(crate::FEDERATED_FILE)
}

/// [`real_api`], started with `--authentication-config` on the node's file when
/// `federated` (written as [`NO_ISSUERS`] first if missing), and then without
/// `--anonymous-auth=false`, as k3s leaves it out: the flag and the file's `anonymous`
/// block together stop the server (k8s pkg/kubeapiserver/options/authentication.go
/// 588-592); the file turns anonymous requests off instead.
pub fn real_api_with(
    node: &Node,
    etcd: &Etcd,
    dir: &Path,
    generation: u32,
    federated: bool,
) -> KubeApi {
    let name = format!("spoke-{}-{generation}", node.address);
    let flag = if federated {
        let path = authentication_config_path(node);
        if !path.exists() {
            write_config(&path, NO_ISSUERS);
        }
        format!("--authentication-config={}", path.display())
    } else {
        "--anonymous-auth=false".to_string()
    };
    KubeApi::start(
        &name,
        dir,
        etcd,
        node.address,
        node.api_port,
        node.pki(),
        &[flag],
    )
}

/// A real spoke's reinstall: `node` gets new CAs (empty storage), its API server `api` is
/// restarted on them as generation `generation`, and its signer too when it had one.
pub fn rebuild(
    node: &mut Node,
    api: &mut KubeApi,
    signer: &mut Option<ControllerManager>,
    etcd: &Etcd,
    dir: &Path,
    generation: u32,
) {
    let had_signer = signer.take().map(|mut s| s.stop()).is_some();
    api.stop();
    node.rebuild();
    *api = real_api(node, etcd, dir, generation);
    if had_signer {
        *signer = Some(ControllerManager::start(api, node.pki(), dir));
    }
}

/// How a real spoke is started.
#[derive(Clone, Debug)]
pub struct SpokeOptions {
    /// Run kube-controller-manager's CSR signer (true by default, as on every k3s
    /// server). Without it an approved CSR is never signed and never gets a condition:
    /// the "signer missing" case.
    pub signer: bool,
    /// Start the API server with `--authentication-config` on the node's file
    /// ([`authentication_config_path`]), trusting no issuer until one is written.
    pub federated: bool,
}

impl Default for SpokeOptions {
    fn default() -> Self {
        SpokeOptions {
            signer: true,
            federated: false,
        }
    }
}

pub struct RealSpoke {
    // Drop order: the controller manager goes before its API server.
    pub signer: Option<ControllerManager>,
    pub api: KubeApi,
    pub node: Node,
    generation: u32,
    federated: bool,
}

impl RealSpoke {
    /// A node with sshd and no emulated API; the real API server takes its address and
    /// port, its keys under `/spoke-ADDRESS-N` in `etcd`; and its CSR signer.
    pub fn start(lab: &Lab, etcd: &Etcd, dir: &Path) -> RealSpoke {
        Self::start_with(lab, etcd, dir, &SpokeOptions::default())
    }

    /// As [`RealSpoke::start`], with `opts` (e.g. no CSR signer).
    pub fn start_with(lab: &Lab, etcd: &Etcd, dir: &Path, opts: &SpokeOptions) -> RealSpoke {
        let node = lab.add_node(NodeOptions {
            api: false,
            ..NodeOptions::default()
        });
        let api = real_api_with(&node, etcd, dir, 0, opts.federated);
        let signer = opts
            .signer
            .then(|| ControllerManager::start(&api, node.pki(), dir));
        RealSpoke {
            signer,
            api,
            node,
            generation: 0,
            federated: opts.federated,
        }
    }

    /// A reinstall: new CAs and certificates, a new k3s.yaml, the API server (and the
    /// signer, if it ran) restarted on the same address and port over fresh storage.
    pub fn rebuild(&mut self, etcd: &Etcd, dir: &Path) {
        let signer = self.signer.take().map(|mut s| s.stop()).is_some();
        self.api.stop();
        self.node.rebuild();
        self.generation += 1;
        self.api = real_api_with(&self.node, etcd, dir, self.generation, self.federated);
        if signer {
            self.signer = Some(ControllerManager::start(&self.api, self.node.pki(), dir));
        }
    }

    /// Writes the node's AuthenticationConfiguration as spokekeeper does (a rename over
    /// the file) and waits until the API server runs it: how long that took.
    pub fn write_authentication_config(&self, text: &str) -> Duration {
        write_config(&authentication_config_path(&self.node), text);
        wait_config_loaded(&self.api, text, Duration::from_secs(150))
    }
}
