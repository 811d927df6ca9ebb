//! Only a hub's API server over etcd, on loopback: enough for what needs the API alone
//! (Leases), without the Sealed Secrets controller, its network namespace or the CRDs.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use spokekeeper::sim::{Pki, PkiOptions};

use super::free_port;
use super::kube::{Etcd, KubeApi};

pub struct ApiOnly {
    // Drop order: the API server, then etcd, then the directory.
    pub api: KubeApi,
    pub etcd: Etcd,
    pub pki: Pki,
    pub dir: tempfile::TempDir,
}

impl ApiOnly {
    pub fn start() -> ApiOnly {
        let dir = crate::support::scratch_dir();
        let host = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let pki = Pki::generate(&PkiOptions {
            address: host,
            address_in_sans: true,
            client_cert_days: 365,
        });
        let etcd = Etcd::start(dir.path());
        let api = KubeApi::start("hub", dir.path(), &etcd, host, free_port(host), &pki, &[]);
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
