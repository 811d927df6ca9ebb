//! A real spoke: a lab node (real sshd, its k3s.yaml readable over SSH) whose API is a
//! real kube-apiserver with the node's k3s-shaped PKI: a server CA, a client CA, and an
//! admin client certificate in `system:masters`; k3s.yaml names everything `default`
//! and says `server: https://127.0.0.1:<port>`, as k3s writes it.

use std::path::Path;

use crate::support::{Lab, Node, NodeOptions};

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

pub struct RealSpoke {
    pub api: KubeApi,
    pub node: Node,
    generation: u32,
}

impl RealSpoke {
    /// A node with sshd and no emulated API; the real API server takes its address and
    /// port, its keys under `/spoke-ADDRESS-N` in `etcd`.
    pub fn start(lab: &Lab, etcd: &Etcd, dir: &Path) -> RealSpoke {
        let node = lab.add_node(NodeOptions {
            api: false,
            ..NodeOptions::default()
        });
        let api = Self::start_api(&node, etcd, dir, 0);
        RealSpoke {
            api,
            node,
            generation: 0,
        }
    }

    fn start_api(node: &Node, etcd: &Etcd, dir: &Path, generation: u32) -> KubeApi {
        real_api(node, etcd, dir, generation)
    }

    /// A reinstall: new CAs and certificates, a new k3s.yaml, the API server restarted on
    /// the same address and port over fresh storage.
    pub fn rebuild(&mut self, etcd: &Etcd, dir: &Path) {
        self.api.stop();
        self.node.rebuild();
        self.generation += 1;
        self.api = Self::start_api(&self.node, etcd, dir, self.generation);
    }
}
