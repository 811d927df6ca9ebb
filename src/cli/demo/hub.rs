//! The simulated hub: the Sealed Secrets controller holding a key made for this run, and
//! Flux applying what the fleet repo's main holds.

use std::path::Path;

use spokekeeper_lab::SealingPair;
use spokekeeper_lab::hub::{HubSim, Kind, Source};

use super::fleet::git;
use super::sim::SimSpoke;
use super::{DemoError, io, part};
use spokekeeper::seal::{RecoveryKey, SealedSecret};

/// The controller's private keys, as the hub's operator would load them.
pub(super) fn controller_keys(key_pem: &str) -> Result<Vec<RecoveryKey>, DemoError> {
    RecoveryKey::load_all(key_pem.as_bytes(), "the demo controller's key")
        .map_err(part("the demo controller's key"))
}

/// Starts the hub, each spoke's Secret consumed by a Kustomization and a HelmRelease.
pub(super) fn start(
    rt: &tokio::runtime::Handle,
    pair: &SealingPair,
    remote: &Path,
    spokes: &[SimSpoke],
) -> Result<HubSim, DemoError> {
    let keys = controller_keys(&pair.key_pem)?;
    let source_remote = remote.to_path_buf();
    let source: Source = std::sync::Arc::new(move |file: &str| {
        git(&source_remote, &["show", &format!("main:{file}")])
            .ok()
            .map(String::into_bytes)
    });
    let hub = HubSim::start(
        rt,
        "kube-system",
        "sealed-secrets-controller",
        &pair.cert_pem,
        keys.into_iter().map(ControllerKey),
        source,
    )
    .map_err(io("the simulated hub"))?;
    for s in spokes {
        hub.add_spoke(spokekeeper_lab::hub::SimSpoke {
            secret_namespace: "flux-system".into(),
            secret_name: format!("{}-kubeconfig", s.name),
            kustomization_namespace: "flux-system".into(),
            kustomization_name: s.name.into(),
            file: format!("fluxcd/{}-kubeconfig-sealed.yaml", s.name),
        });
        // A second consumer of the same Secret: apps deployed with Helm.
        hub.add_consumer(
            Kind::HelmRelease,
            "flux-system",
            &format!("{}-apps", s.name),
            Some(&format!("{}-kubeconfig", s.name)),
        );
    }
    Ok(hub)
}

/// One of the controller's keys, as the lab's hub holds it (a newtype: the binary may not
/// implement the lab's trait for the library's type).
struct ControllerKey(RecoveryKey);

/// The lab's hub emulates the Sealed Secrets controller; what one of its keys opens is
/// spokekeeper's own unsealing.
impl spokekeeper_lab::hub::Key for ControllerKey {
    fn opens(&self, sealed: &[u8]) -> bool {
        SealedSecret::parse(sealed).is_ok_and(|s| s.unseal(std::slice::from_ref(&self.0)).is_ok())
    }
}
