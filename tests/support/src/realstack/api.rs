//! Only a hub's API server over etcd, on loopback: enough for what needs the API alone
//! (Leases), without the Sealed Secrets controller, its network namespace or the CRDs.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use spokekeeper_lab::Pki;

use super::kube::{Etcd, KubeApi, control_plane};

pub struct ApiOnly {
    // Drop order: the API server, then etcd, then the directory.
    pub api: KubeApi,
    pub etcd: Etcd,
    pub pki: Pki,
    pub dir: tempfile::TempDir,
}

impl ApiOnly {
    pub fn start() -> ApiOnly {
        let dir = crate::scratch_dir();
        let host = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (pki, etcd, api) = control_plane(dir.path(), host);
        ApiOnly {
            api,
            etcd,
            pki,
            dir,
        }
    }

    /// The admin's kubeconfig (system:masters).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.api.admin_kubeconfig
    }
}
