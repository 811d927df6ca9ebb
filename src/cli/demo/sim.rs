//! The simulated k3s spokes: each its certificates, its k3s.yaml and its API server
//! (the federated one's reading the AuthenticationConfiguration on its node).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::{Arc, Mutex};

use spokekeeper_lab::federation::Reachable;
use spokekeeper_lab::federation::authn::SpokeTrust;
use spokekeeper_lab::objects::Objects;
use spokekeeper_lab::{ApiIdentity, ApiServer, Pki, PkiOptions, kubeconfig_yaml};

use super::{DemoError, FEDERATED, SPOKES, io, node, part};

/// A file trusting no issuer: what the federated spoke's API server starts on, before
/// spokekeeper writes its trust of the hub.
const NO_ISSUERS: &str = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt: []\nanonymous:\n  enabled: false\n";

/// One simulated k3s node: its certificates, its k3s.yaml, its API server.
pub(super) struct SimSpoke {
    pub(super) name: &'static str,
    pub(super) dir: PathBuf,
    pub(super) port: u16,
    pub(super) pki: Pki,
    /// `--authentication-config`: the hub issuers it can reach (a federated spoke).
    trust: Option<Reachable>,
    /// Its ClusterRoleBindings (and CSRs), as its API server stores them (once it runs).
    pub(super) objects: Option<Arc<Mutex<Objects>>>,
    api: Option<ApiServer>,
}

/// Starts every spoke of [`SPOKES`], saying where each serves; the federated one trusts
/// nobody yet and can reach the hub's issuer (`reachable`).
pub(super) fn start_all(
    root: &Path,
    rt: &tokio::runtime::Handle,
    reachable: &Reachable,
) -> Result<Vec<SimSpoke>, DemoError> {
    let mut spokes = Vec::new();
    for (i, name) in SPOKES.into_iter().enumerate() {
        let trust = (i == FEDERATED).then(|| reachable.clone());
        let s = SimSpoke::start(name, root, rt, trust)?;
        say!(
            "   {name:<5} k3s API on https://127.0.0.1:{}  kubeconfig {}",
            s.port,
            s.k3s_yaml().display()
        );
        spokes.push(s);
    }
    Ok(spokes)
}

impl SimSpoke {
    fn start(
        name: &'static str,
        root: &Path,
        rt: &tokio::runtime::Handle,
        trust: Option<Reachable>,
    ) -> Result<SimSpoke, DemoError> {
        let dir = root.join("nodes").join(name);
        std::fs::create_dir_all(&dir).map_err(io(dir.display()))?;
        if trust.is_some() {
            // The flag's file must exist before the API server starts.
            let file = node::authentication_config(&dir);
            let parent = file.parent().unwrap_or(&dir);
            std::fs::create_dir_all(parent).map_err(io(parent.display()))?;
            std::fs::write(&file, NO_ISSUERS).map_err(io(file.display()))?;
        }
        let mut spoke = SimSpoke {
            name,
            dir,
            port: 0,
            pki: new_pki(),
            trust,
            objects: None,
            api: None,
        };
        spoke.serve(rt, 0)?;
        spoke.write_k3s_yaml()?;
        Ok(spoke)
    }

    fn serve(&mut self, rt: &tokio::runtime::Handle, port: u16) -> Result<(), DemoError> {
        let mut identity = ApiIdentity::new(&self.pki, "v1.33.1+k3s1");
        if let Some(reachable) = &self.trust {
            let file = node::authentication_config(&self.dir);
            identity = identity.with_trust(SpokeTrust::new(file, reachable.clone()));
        }
        self.objects = Some(identity.objects());
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        let api = ApiServer::start(rt, addr, identity)
            .map_err(io(format!("{}: API server", self.name)))?;
        self.port = api.port;
        self.api = Some(api);
        Ok(())
    }

    /// What k3s writes: the server is https://127.0.0.1:PORT, root-only.
    fn write_k3s_yaml(&self) -> Result<(), DemoError> {
        let text = kubeconfig_yaml(
            &format!("https://127.0.0.1:{}", self.port),
            &self.pki.parts,
            None,
            "",
        );
        let path = self.k3s_yaml();
        spokekeeper::fsutil::write_atomic(&path, text.as_bytes()).map_err(io(path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(io(path.display()))
    }

    pub(super) fn k3s_yaml(&self) -> PathBuf {
        self.dir.join("k3s.yaml")
    }

    /// A reinstall: new CAs and certificates, a new k3s.yaml, the API back on its port.
    pub(super) fn rebuild(&mut self, rt: &tokio::runtime::Handle) -> Result<(), DemoError> {
        self.api = None;
        self.pki = new_pki();
        self.serve(rt, self.port)?;
        self.write_k3s_yaml()
    }
}

/// What the spoke answers a revoked credential that asks for namespaces: 403, as its
/// user is no longer bound to any role.
pub(super) async fn refused_now(
    kubeconfig: &spokekeeper::secret::SecretBytes,
) -> Result<String, DemoError> {
    let (client, _) = spokekeeper::spoke::live::client(kubeconfig, Duration::from_secs(10))
        .await
        .map_err(part("a client for the revoked generation"))?;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    match namespaces
        .list(&kube::api::ListParams::default().limit(1))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(format!("403 Forbidden ({})", s.message)),
        Ok(_) => Err(DemoError::StillListed),
        Err(e) => Err(DemoError::NotRefused(e)),
    }
}

fn new_pki() -> Pki {
    Pki::generate(&PkiOptions {
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        address_in_sans: true,
        client_cert_days: 365,
    })
}
