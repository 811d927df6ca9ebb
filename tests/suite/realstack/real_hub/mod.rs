//! spokekeeper against the real hub: the real kube-apiserver (RBAC), the real Sealed
//! Secrets controller behind the real service proxy, kubeseal, the Flux CRDs and Flux's
//! own kubeconfig loading (tests/support/src/realstack). Each test starts its own hub.
//! Here: the stack they start, and what a Ready consumer reads as.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use spokekeeper::seal::RecoveryKey;
use support::NodeOptions;
use support::fleet::Fleet;
use support::realstack::controller_manager::ControllerManager;
use support::realstack::flux::LabFlux;
use support::realstack::hub::{HubOptions, RealHub};
use support::realstack::kube::KubeApi;
use support::realstack::spoke::real_api;

mod consumers;
mod events;
mod leader;
mod mint_failures;
mod minted;
mod rbac;
mod sealing;

const PINNED: &str = "keys/sealed-secrets.pem";

const SCOPES: [&str; 3] = ["strict", "namespace-wide", "cluster-wide"];

/// A real hub, lab spokes, the fleet repo, and the lab's Flux applying the repo.
struct Stack {
    flux: Option<LabFlux>,
    /// Spoke i's CSR signer (kube-controller-manager), for minted stacks; dropped before
    /// the API servers.
    signers: Vec<Option<ControllerManager>>,
    /// Spoke i's real API server, for stacks with real spokes.
    spoke_apis: Vec<KubeApi>,
    fleet: Fleet,
    hub: RealHub,
}

impl Stack {
    /// The hub controller's keys, which open every SealedSecret this stack committed.
    fn recovery_keys(&self) -> Vec<RecoveryKey> {
        self.hub
            .sealing_keys()
            .iter()
            .flat_map(|pem| RecoveryKey::load_all(pem.as_bytes(), "controller key").unwrap())
            .collect()
    }

    /// No key of the fleet (admin or minted, every committed generation unsealed with the
    /// controller's keys) in plaintext anywhere the fleet helper looks.
    fn assert_no_plaintext(&self) {
        let needles = self.fleet.key_needles_unsealing(&self.recovery_keys());
        self.fleet.assert_no_plaintext_of(&needles);
    }

    /// `scopes[i]` is spoke i's scope (spokes with the emulated API); `hub_extra` goes
    /// under `hub:`.
    fn start(scopes: &[&str], opts: &HubOptions, hub_extra: &str) -> Stack {
        Self::build(scopes, false, opts, hub_extra)
    }

    /// `n` spokes whose APIs are real kube-apiservers, strict scope.
    fn with_real_spokes(n: usize) -> Stack {
        Self::build(&vec!["strict"; n], true, &HubOptions::default(), "")
    }

    fn build(scopes: &[&str], real: bool, opts: &HubOptions, hub_extra: &str) -> Stack {
        let hub = RealHub::start(opts);
        // A real spoke's API listens on 6443 of its node's address, and its k3s.yaml says
        // https://127.0.0.1:6443, as k3s writes it.
        let node = NodeOptions {
            api: !real,
            api_port: if real { 6443 } else { 0 },
            ..NodeOptions::default()
        };
        let fleet = Fleet::new(&vec![node; scopes.len()]);
        let spoke_apis = if real {
            fleet
                .nodes
                .iter()
                .map(|n| real_api(n, &hub.etcd, hub.dir(), 0))
                .collect()
        } else {
            Vec::new()
        };
        let mut text = std::fs::read_to_string(&fleet.config).unwrap();
        let vectors = support::fleet::vectors().join("key/cert.pem");
        // Not pinned yet: the first tick pins what the real controller serves.
        text = text.replace(
            vectors.to_str().unwrap(),
            fleet.clone.join(PINNED).to_str().unwrap(),
        );
        for (i, scope) in scopes.iter().enumerate() {
            text = text.replace(
                &format!("  - name: spoke{i}\n"),
                &format!("  - name: spoke{i}\n    scope: {scope}\n"),
            );
        }
        text.push_str(&format!(
            "hub:\n  kubeconfig: {}\n  verify_timeout: 90s\n{hub_extra}",
            hub.admin_kubeconfig().display()
        ));
        std::fs::write(&fleet.config, text).unwrap();
        let mut stack = Stack {
            flux: None,
            signers: Vec::new(),
            spoke_apis,
            fleet,
            hub,
        };
        stack.add_kustomizations(scopes.len());
        stack.flux = Some(LabFlux::start(
            stack.hub.admin_kubeconfig(),
            &stack.fleet.remote,
            "main",
        ));
        stack
    }

    /// Real spokes, spoke i with a CSR signer when `signers[i]`, as a k3s server has one.
    fn with_signing_spokes(signers: &[bool]) -> Stack {
        let mut stack = Self::with_real_spokes(signers.len());
        stack.signers = signers
            .iter()
            .enumerate()
            .map(|(i, &on)| {
                on.then(|| {
                    let pki = stack.fleet.nodes[i].pki();
                    ControllerManager::start(&stack.spoke_apis[i], pki, stack.hub.dir())
                })
            })
            .collect();
        stack
    }

    /// One real spoke whose signer signs for at most `duration`
    /// (`--cluster-signing-duration`).
    fn with_limited_signer(duration: &str) -> Stack {
        let mut stack = Self::with_real_spokes(1);
        let pki = stack.fleet.nodes[0].pki();
        stack.signers = vec![Some(ControllerManager::start_with(
            &stack.spoke_apis[0],
            pki,
            stack.hub.dir(),
            Some(duration),
        ))];
        stack
    }

    /// Replaces `from` by `to` in the configuration (once; it must be there).
    fn reconfigure(&self, from: &str, to: &str) {
        let text = std::fs::read_to_string(&self.fleet.config).unwrap();
        assert!(text.contains(from), "{from:?} not in {text}");
        std::fs::write(&self.fleet.config, text.replacen(from, to, 1)).unwrap();
    }

    /// Appends top-level `yaml` (e.g. a `credential:` section) to the configuration.
    fn configure(&self, yaml: &str) {
        let mut text = std::fs::read_to_string(&self.fleet.config).unwrap();
        text.push_str(yaml);
        std::fs::write(&self.fleet.config, text).unwrap();
    }

    /// Spoke i's committed kubeconfig, as a file for kubectl.
    fn committed_kubeconfig(&self, i: usize, name: &str) -> PathBuf {
        let path = self.hub.dir().join(name);
        std::fs::write(&path, self.recovery_unsealed(i)).unwrap();
        path
    }

    /// Spoke i's reinstall: new CAs, the API server and its signer restarted.
    fn rebuild(&mut self, i: usize, generation: u32) {
        support::realstack::spoke::rebuild(
            &mut self.fleet.nodes[i],
            &mut self.spoke_apis[i],
            &mut self.signers[i],
            &self.hub.etcd,
            self.hub.dir(),
            generation,
        );
    }

    /// Spoke i's Kustomization, deploying with its kubeconfig Secret.
    fn add_kustomizations(&self, n: usize) {
        for i in 0..n {
            self.hub.api.apply(&format!(
                "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  \
                 name: spoke{i}\n  namespace: flux-system\nspec:\n  interval: 10m\n  path: ./apps\n  \
                 prune: true\n  sourceRef:\n    kind: GitRepository\n    name: fleet\n  \
                 kubeConfig:\n    secretRef:\n      name: spoke{i}-kubeconfig\n"
            ));
        }
    }

    fn rotate_json(&self) -> (i32, Value, String) {
        let (code, report, err) = self.fleet.rotate_json(&["--all"]);
        let flux = self.flux.as_ref().map(|f| f.log()).unwrap_or_default();
        (code, report, format!("{err}\n--- the lab's Flux:\n{flux}"))
    }

    /// The committed SealedSecret of spoke i, as a file.
    fn committed(&self, i: usize) -> PathBuf {
        let path = self.hub.dir().join(format!("committed{i}.yaml"));
        std::fs::write(&path, self.fleet.remote_file(i)).unwrap();
        path
    }

    /// kubeseal --recovery-unseal of spoke i's commit with the controller's keys: the
    /// `value` of the Secret it holds.
    fn recovery_unsealed(&self, i: usize) -> Vec<u8> {
        let keys = self.hub.sealing_keys_files();
        let secret = self.hub.recovery_unseal(&self.committed(i), &keys).unwrap();
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["value"].as_str().expect("data.value"))
            .unwrap()
    }

    /// Waits until the real controller unsealed spoke i's committed ciphertext.
    fn wait_unsealed(&self, i: usize, within: Duration) -> Vec<u8> {
        let name = format!("spoke{i}-kubeconfig");
        let expected = self.recovery_unsealed(i);
        support::realstack::wait_until("the controller unseals the commit", within, || {
            match self.hub.secret_value("flux-system", &name, "value") {
                Some(v) if v == expected => Ok(v),
                other => Err(format!(
                    "Secret value {} the commit's; Synced: {:?}\n{}",
                    if other.is_some() {
                        "differs from"
                    } else {
                        "missing, not"
                    },
                    self.hub.synced("flux-system", &name),
                    self.hub.controller_log()
                )),
            }
        })
    }
}

/// The spoke's hub report lists exactly `consumers` (KIND/NS/NAME), each Ready.
fn assert_ready(spoke: &Value, consumers: &[&str]) {
    let listed = spoke["hub"]["consumers"]
        .as_array()
        .unwrap_or_else(|| panic!("{spoke:#}"));
    let mut names: Vec<String> = listed
        .iter()
        .map(|c| {
            format!(
                "{}/{}/{}",
                c["kind"].as_str().unwrap(),
                c["namespace"].as_str().unwrap(),
                c["name"].as_str().unwrap()
            )
        })
        .collect();
    names.sort();
    let mut want: Vec<String> = consumers.iter().map(|c| c.to_string()).collect();
    want.sort();
    assert_eq!(names, want, "{spoke:#}");
    for c in listed {
        assert_eq!(c["ready"]["ok"], true, "{spoke:#}");
        assert_eq!(c["ready"]["status"], "True", "{spoke:#}");
    }
}
