//! A real spoke: a lab node (real sshd, its k3s.yaml readable over SSH) whose API is a
//! real kube-apiserver with the node's k3s-shaped PKI: a server CA, a client CA, and an
//! admin client certificate in `system:masters`; k3s.yaml names everything `default`
//! and says `server: https://127.0.0.1:<port>`, as k3s writes it. Beside it, unless
//! the options say otherwise, the spoke's kube-controller-manager signs approved CSRs for
//! `kubernetes.io/kube-apiserver-client` with the client CA, as a k3s server does.
//! distro.rs lays a node out file for file as k3s and RKE2 do (CA bundles, nochain
//! files, k3s's API server behind 6443); this one keeps the hub scenarios' simpler shape.

use std::path::Path;

use crate::{Lab, Node, NodeOptions};

use super::controller_manager::ControllerManager;
use super::kube::{Etcd, KubeApi};

/// A real API server for `node` (one without the emulated API) on its address and API
/// port, with its PKI; `generation` counts rebuilds, each over fresh storage, as a
/// reinstalled k3s starts.
pub fn real_api(node: &Node, etcd: &Etcd, dir: &Path, generation: u32) -> KubeApi {
    let name = format!("spoke-{}-{generation}", node.address);
    KubeApi::start(
        &name,
        dir,
        etcd,
        node.address,
        node.api_port,
        node.pki(),
        &["--anonymous-auth=false".to_string()],
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
}

impl Default for SpokeOptions {
    fn default() -> Self {
        SpokeOptions { signer: true }
    }
}

pub struct RealSpoke {
    // Drop order: the controller manager goes before its API server.
    pub signer: Option<ControllerManager>,
    pub api: KubeApi,
    pub node: Node,
    generation: u32,
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
        let api = real_api(&node, etcd, dir, 0);
        let signer = opts
            .signer
            .then(|| ControllerManager::start(&api, node.pki(), dir));
        RealSpoke {
            signer,
            api,
            node,
            generation: 0,
        }
    }

    /// A reinstall: new CAs and certificates, a new k3s.yaml, the API server (and the
    /// signer, if it ran) restarted on the same address and port over fresh storage.
    pub fn rebuild(&mut self, etcd: &Etcd, dir: &Path) {
        let signer = self.signer.take().map(|mut s| s.stop()).is_some();
        self.api.stop();
        self.node.rebuild();
        self.generation += 1;
        self.api = real_api(&self.node, etcd, dir, self.generation);
        if signer {
            self.signer = Some(ControllerManager::start(&self.api, self.node.pki(), dir));
        }
    }
}
