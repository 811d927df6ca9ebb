//! The simulated hub: the Sealed Secrets controller holding a key made for this run, and
//! Flux applying what the fleet repo's main holds, its kustomize-controller decrypting
//! sops files with an age identity made for this run; its ServiceAccount issuer signing
//! the tokens Flux presents to the federated spoke.

use std::path::Path;

use spokekeeper_lab::SealingPair;
use spokekeeper_lab::hub::{HubSim, Kind, SopsKey, Source};

use super::fleet::git;
use super::sim::SimSpoke;
use std::sync::Arc;

use spokekeeper_lab::federation::Issuer;

use super::{DemoError, FEDERATED, SOPS_DIR, io, output, part};
use spokekeeper::seal::RecoveryKey;
use spokekeeper::seal::sops::{self, AgeIdentities};
use spokekeeper::secret::SecretBytes;

/// The controller's private keys, as the hub's operator would load them.
pub(super) fn controller_keys(key_pem: &str) -> Result<Vec<RecoveryKey>, DemoError> {
    RecoveryKey::load_all(key_pem.as_bytes(), "the demo controller's key")
        .map_err(part("the demo controller's key"))
}

/// The age identity in the hub's `sops-age` Secret, as kustomize-controller decrypts
/// with it: spokekeeper's sops decryption, the plaintext dropped at once.
pub(super) fn age_identities(key: &age::x25519::Identity) -> Result<AgeIdentities, DemoError> {
    let text = age::secrecy::ExposeSecret::expose_secret(&key.to_string()).to_string();
    AgeIdentities::parse(&SecretBytes::from(text)).map_err(part("the demo's age identity"))
}

/// Starts the hub, each spoke's Secret consumed by a Kustomization and a HelmRelease;
/// the sops files under SOPS_DIR decrypted with `age_key`.
pub(super) fn start(
    rt: &tokio::runtime::Handle,
    pair: &SealingPair,
    age_key: &age::x25519::Identity,
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
        keys,
        source,
    )
    .map_err(io("the simulated hub"))?;
    let identities = age_identities(age_key)?;
    let decrypt: SopsKey = std::sync::Arc::new(move |file: &[u8]| {
        sops::decrypt(file, &identities)
            .map(drop)
            .map_err(|e| e.to_string())
    });
    hub.add_sops_kustomization(
        "flux-system",
        "sops-secrets",
        &format!("./{SOPS_DIR}"),
        "sops-age",
        decrypt,
    );
    for (i, s) in spokes.iter().enumerate() {
        let spoke = spokekeeper_lab::hub::SimSpoke {
            secret_namespace: "flux-system".into(),
            secret_name: format!("{}-kubeconfig", s.name),
            kustomization_namespace: "flux-system".into(),
            kustomization_name: s.name.into(),
            file: output(i, s.name),
        };
        let apps = format!("{}-apps", s.name);
        // A second consumer of the same Secret (or the federated spoke's ConfigMap):
        // apps deployed with Helm.
        if i == FEDERATED {
            let config_map = spoke.secret_name.clone();
            hub.add_federated_spoke(spoke);
            hub.add_config_map_consumer(Kind::HelmRelease, "flux-system", &apps, &config_map);
            continue;
        }
        hub.add_spoke(spoke);
        hub.add_consumer(
            Kind::HelmRelease,
            "flux-system",
            &apps,
            Some(&format!("{}-kubeconfig", s.name)),
        );
    }
    Ok(hub)
}

/// The hub's ServiceAccount issuer and the accounts tokens are asked for: Flux's
/// controllers and spokekeeper's own check account.
pub(super) fn federate(hub: &HubSim, issuer: &Arc<Issuer>) {
    hub.set_issuer(issuer.clone());
    for (namespace, name) in ACCOUNTS {
        hub.add_service_account(namespace, name);
    }
}

/// Flux's controllers (the users a federated spoke binds) and spokekeeper's check account.
pub(super) const ACCOUNTS: [(&str, &str); 3] = [
    ("flux-system", "kustomize-controller"),
    ("flux-system", "helm-controller"),
    ("spokekeeper", "spokekeeper"),
];
