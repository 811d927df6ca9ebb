//! Federated credentials (issue 42) on the real components: a hub kube-apiserver that is
//! its own ServiceAccount issuer (tests/support/src/realstack/federated.rs), spokes whose
//! kube-apiserver 1.37 trusts it through `--authentication-config` on the file in the
//! node's `spokekeeper/` directory, and Flux's real kustomize-controller reaching a spoke
//! through a `provider: generic` ConfigMap. Each test writes the AuthenticationConfiguration
//! itself: these pin the facts spokekeeper's rendering relies on, not spokekeeper.
//!
//! Measured (2 cores shared with other builds, kube-apiserver v1.37.2): a file renamed
//! over the old one was run 10.4 s and 10.8 s later (a new issuer; a new audience),
//! `a_changed_file_is_run_without_a_restart`. The rename is seen at once (fsnotify); the
//! 10 s is the new authenticator's health poll (k8s pkg/kubeapiserver/authenticator/
//! config.go 321: its first check comes before the issuer's discovery and JWKS are
//! fetched), so expect 10-20 s, and at most the minute's poll plus a minute's timeout
//! when an event is missed or the hub does not answer.

use crate::support;

use spokekeeper_lab::{Pki, PkiOptions};
use support::Lab;
use support::realstack::bearer::Bearer;
use support::realstack::federated::{Trust, authentication_config, hub_token, start_issuer};
use support::realstack::kube::{Etcd, KubeApi};
use support::realstack::spoke::{RealSpoke, SpokeOptions};

mod flux;
mod tokens;

const NS: &str = "flux-system";
const KUSTOMIZE: &str = "kustomize-controller";

/// A hub that is its own issuer, on loopback.
struct Hub {
    api: KubeApi,
    pki: Pki,
}

impl Hub {
    fn start(name: &str, dir: &std::path::Path, etcd: &Etcd) -> Hub {
        let addr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
        let pki = Pki::generate(&PkiOptions {
            address: addr,
            address_in_sans: true,
            client_cert_days: 365,
        });
        let api = start_issuer(name, dir, etcd, addr, &pki);
        Hub { api, pki }
    }

    /// What a spoke with `audience` trusts of this hub: its kustomize-controller.
    fn trust(&self, audience: &str) -> Trust {
        Trust::kustomize_controller(&self.api, &self.pki.parts.ca_pem, audience)
    }

    /// A token of `sa` in flux-system for `audience`, presented to `spoke`.
    fn client(&self, sa: &str, audience: &str, spoke: &RealSpoke) -> Bearer {
        let token = hub_token(&self.api, NS, sa, audience);
        Bearer::new(&spoke.api.url, &spoke.node.pki().parts.ca_pem, &token)
    }
}

/// A hub and federated spokes, spoke i trusting the hub's kustomize-controller for
/// `audiences[i]`.
struct Federation {
    // Drop order: the spokes, the hub, etcd, then the files and the lab.
    spokes: Vec<RealSpoke>,
    hub: Hub,
    etcd: Etcd,
    dir: tempfile::TempDir,
    lab: Lab,
}

impl Federation {
    fn start(audiences: &[&str]) -> Federation {
        support::install_crypto_provider();
        let lab = Lab::new();
        let dir = support::scratch_dir();
        let etcd = Etcd::start(dir.path());
        let hub = Hub::start("hub", dir.path(), &etcd);
        let mut spokes = Vec::new();
        for audience in audiences {
            let spoke = federated_spoke(&lab, &etcd, dir.path());
            spoke.write_authentication_config(&authentication_config(&[hub.trust(audience)]));
            spokes.push(spoke);
        }
        Federation {
            spokes,
            hub,
            etcd,
            dir,
            lab,
        }
    }
}

/// A real spoke started with `--authentication-config`, trusting no issuer yet.
fn federated_spoke(lab: &Lab, etcd: &Etcd, dir: &std::path::Path) -> RealSpoke {
    RealSpoke::start_with(
        lab,
        etcd,
        dir,
        &SpokeOptions {
            signer: false,
            federated: true,
        },
    )
}
