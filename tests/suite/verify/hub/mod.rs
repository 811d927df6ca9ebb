//! The hub integration against the lab (real sshd spokes, a real git remote) and the
//! emulated hub API (the lab's `hub`), through the binary: the controller's certificate
//! fetched and pinned, a renewal re-sealing every spoke in one tick, the post-push
//! verification reaching Ready, a stuck SealedSecret, an unreachable hub, `status`, and
//! every request held to hub::ACCESS.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use spokekeeper::fingerprint::{Fingerprint, Sealing};
use spokekeeper::hub::ACCESS;
use spokekeeper::seal::{RecoveryKey, SealedSecret, SealingKey};
use spokekeeper_lab::config::ConfigBuilder;
use spokekeeper_lab::hub::{Controller, Flux, HubSim, Kind, SimSpoke, rbac_attributes};
use support::NodeOptions;
use support::fleet::{Fleet, action, authenticates, vectors};
use support::git::{clone, commit, git};

const PINNED: &str = "keys/sealed-secrets.pem";

pub(crate) struct HubLab {
    pub(crate) fleet: Fleet,
    pub(crate) hub: HubSim,
    /// The `hub:` section of the fleet's configuration.
    hub_yaml: String,
    // Last: the hub runs on it.
    rt: Option<tokio::runtime::Runtime>,
}

impl Drop for HubLab {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn key(dir: &str) -> RecoveryKey {
    RecoveryKey::load_all(
        &std::fs::read(vectors().join(dir).join("tls.key")).unwrap(),
        dir,
    )
    .unwrap()
    .remove(0)
}

fn cert(dir: &str) -> String {
    let file = if dir == "key" { "cert.pem" } else { "tls.crt" };
    std::fs::read_to_string(vectors().join(dir).join(file)).unwrap()
}

/// `n` spokes; sealing.cert pinned in the fleet repo under keys/ (the old key); the
/// hub's controller serves the same certificate; `hub_extra` goes under `hub:`.
pub(crate) fn lab(n: usize, hub_extra: &str) -> HubLab {
    let fleet = Fleet::new(&vec![NodeOptions::default(); n]);
    std::fs::create_dir_all(fleet.clone.join("keys")).unwrap();
    std::fs::write(fleet.clone.join(PINNED), cert("key")).unwrap();
    git(&fleet.clone, &["add", PINNED]);
    commit(&fleet.clone, "pin the controller's certificate");
    git(&fleet.clone, &["push", "--quiet", "origin", "HEAD:main"]);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let remote = fleet.remote.clone();
    // "Flux": what the fleet repo's main holds.
    let source = Arc::new(move |file: &str| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&remote)
            .args(["show", &format!("main:{file}")])
            .output()
            .ok()?;
        out.status.success().then_some(out.stdout)
    });
    let hub = HubSim::start(
        rt.handle(),
        "kube-system",
        "sealed-secrets-controller",
        &cert("key"),
        vec![key("key")],
        source,
    )
    .unwrap();
    for i in 0..n {
        hub.add_spoke(SimSpoke {
            secret_namespace: "flux-system".into(),
            secret_name: format!("spoke{i}-kubeconfig"),
            kustomization_namespace: "flux-system".into(),
            kustomization_name: format!("spoke{i}"),
            file: format!("fluxcd/spoke{i}-kubeconfig-sealed.yaml"),
        });
    }
    let kubeconfig = fleet.dir.path().join("hub.kubeconfig");
    std::fs::write(&kubeconfig, hub.kubeconfig_yaml()).unwrap();
    let hub_yaml = format!("hub:\n  kubeconfig: {}\n{hub_extra}", kubeconfig.display());
    let l = HubLab {
        fleet,
        hub,
        hub_yaml,
        rt: Some(rt),
    };
    l.builder().write(&l.fleet.config).unwrap();
    l
}

impl HubLab {
    /// The fleet's configuration: the pinned certificate, and the hub.
    pub(crate) fn builder(&self) -> ConfigBuilder {
        self.builder_of(self.fleet.nodes.len())
    }

    /// [`HubLab::builder`] with only the first `n` nodes' spokes (a lab's fleet has no
    /// extra lines of its own).
    pub(crate) fn builder_of(&self, n: usize) -> ConfigBuilder {
        support::fleet::config(&self.fleet.clone, &self.fleet.nodes[..n])
            .sealing_cert(self.fleet.clone.join(PINNED))
            .top(&self.hub_yaml)
    }

    fn sealed(&self, i: usize) -> SealedSecret {
        SealedSecret::parse(self.fleet.remote_file(i).as_bytes()).unwrap()
    }

    fn status(&self) -> (i32, Value, String) {
        let (code, out, err) = self.fleet.run(&["status", "-o", "json"]);
        let json = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
        (code, json, err)
    }

    /// Every request the hub saw is one the Helm chart's Role grants (hub::ACCESS).
    fn assert_within_access(&self) {
        let seen = self.hub.requests();
        assert!(!seen.is_empty());
        for r in &seen {
            let (group, resource, verb) = rbac_attributes(&r.method, &r.path)
                .unwrap_or_else(|| panic!("{} {} is not a named-object request", r.method, r.path));
            assert!(
                ACCESS
                    .iter()
                    .any(|a| a.group == group && a.resource == resource && a.verbs.contains(&verb)),
                "{} {} needs {verb} on {resource:?} in group {group:?}, which hub::ACCESS does not grant",
                r.method,
                r.path
            );
        }
    }
}

fn requests_to(hub: &HubSim, method: &str, suffix: &str) -> usize {
    hub.requests()
        .iter()
        .filter(|r| r.method == method && r.path.ends_with(suffix))
        .count()
}

/// Set `sealing.sha256` in the lab's config.
fn set_sealing_sha256(l: &HubLab, fp: &str) {
    let text = std::fs::read_to_string(&l.fleet.config).unwrap();
    let at = format!("  cert: {}\n", l.fleet.clone.join(PINNED).display());
    assert!(text.contains(&at));
    std::fs::write(
        &l.fleet.config,
        text.replace(&at, &format!("{at}  sha256: {fp}\n")),
    )
    .unwrap();
}

fn patches_to(hub: &HubSim, plural: &str, ns: &str, name: &str) -> usize {
    requests_to(hub, "PATCH", &format!("/namespaces/{ns}/{plural}/{name}"))
}

fn lists(hub: &HubSim) -> Vec<spokekeeper_lab::hub::Seen> {
    hub.requests()
        .into_iter()
        .filter(|r| {
            r.method == "GET"
                && (r.path.ends_with("/kustomizations") || r.path.ends_with("/helmreleases"))
        })
        .collect()
}

mod certificate;
mod consumers;
mod daemon;
mod push;
