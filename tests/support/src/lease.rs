//! A kube client for the lab's Lease emulator (`spokekeeper_lab::lease`); kube stays out
//! of the lab crate.

use spokekeeper_lab::lease::{Emulator, Endpoint};

pub fn client(emu: &Emulator, endpoint: &Endpoint) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let yaml = std::fs::read_to_string(emu.kubeconfig(endpoint)).unwrap();
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let rt = emu.runtime();
    let config = rt
        .block_on(kube::Config::from_custom_kubeconfig(
            kc,
            &kube::config::KubeConfigOptions::default(),
        ))
        .unwrap();
    // The client's connection tasks run on the caller's runtime.
    let _guard = rt.enter();
    kube::Client::try_from(config).unwrap()
}
