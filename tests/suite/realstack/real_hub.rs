//! spokekeeper against the real hub: the real kube-apiserver (RBAC), the real Sealed
//! Secrets controller behind the real service proxy, kubeseal, the Flux CRDs and Flux's
//! own kubeconfig loading (tests/support/src/realstack). Each test starts its own hub.

use crate::support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use spokekeeper::seal::RecoveryKey;
use support::NodeOptions;
use support::fleet::Fleet;
use support::git::git;
use support::realstack::access::{self, Lacking};
use support::realstack::controller_manager::ControllerManager;
use support::realstack::flux::LabFlux;
use support::realstack::hub::{CONTROLLER, CONTROLLER_NS, HubOptions, RealHub};
use support::realstack::kube::KubeApi;
use support::realstack::spoke::real_api;
use support::realstack::{list_namespaces, run};

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

fn kubeseal_fetch_cert(hub: &RealHub) -> String {
    run(hub.kubeseal().arg("--fetch-cert")).unwrap()
}

/// Scenario 1: the certificate spokekeeper fetches through the real service proxy is the
/// one `kubeseal --fetch-cert` gets, byte for byte.
#[test]
fn the_sealing_certificate_is_what_kubeseal_fetches() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let hub = RealHub::start(&HubOptions::default());
    let from_kubeseal = kubeseal_fetch_cert(&hub);
    assert!(from_kubeseal.starts_with("-----BEGIN CERTIFICATE-----"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ours = rt.block_on(async {
        let cfg = spokekeeper::config::HubConfig {
            kubeconfig: Some(hub.admin_kubeconfig().to_owned()),
            controller: spokekeeper::config::ControllerRef {
                namespace: CONTROLLER_NS.into(),
                name: CONTROLLER.into(),
                // The Service's first port, as the chart names it (http).
                port: None,
            },
            verify_timeout: Duration::from_secs(30),
            flux_default_service_account: None,
        };
        let hub = spokekeeper::hub::Hub::connect(&cfg).await.unwrap();
        hub.fetch_cert().await.unwrap()
    });
    assert_eq!(ours, from_kubeseal);
}

/// Scenario 2: rotations in all three scopes are unsealed by the real controller into
/// Secrets holding exactly the committed (validated) kubeconfig, and spokekeeper's hub
/// verification reads the real Synced condition.
#[test]
fn the_real_controller_unseals_rotations_in_every_scope() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES, &HubOptions::default(), "");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}\n{}", stack.hub.controller_log());
    // The first tick pinned the controller's certificate, as kubeseal fetches it.
    let pinned = std::fs::read_to_string(stack.fleet.clone.join(PINNED)).unwrap();
    assert_eq!(pinned, kubeseal_fetch_cert(&stack.hub));
    for (i, scope) in SCOPES.iter().enumerate() {
        let spoke = &report["spokes"][i];
        assert_eq!(spoke["action"], "rotated", "{spoke:#}");
        assert_eq!(spoke["hub"]["synced"]["ok"], true, "{spoke:#}");
        assert_eq!(spoke["hub"]["synced"]["status"], "True", "{spoke:#}");
        let committed = stack.fleet.remote_file(i);
        let scope_annotation = match *scope {
            "strict" => None,
            "namespace-wide" => Some("sealedsecrets.bitnami.com/namespace-wide: \"true\""),
            _ => Some("sealedsecrets.bitnami.com/cluster-wide: \"true\""),
        };
        if let Some(a) = scope_annotation {
            assert!(committed.contains(a), "{scope}: {committed}");
        }
        let value = stack.wait_unsealed(i, Duration::from_secs(60));
        assert_eq!(
            stack
                .hub
                .synced("flux-system", &format!("spoke{i}-kubeconfig")),
            Some(("True".into(), String::new()))
        );
        // The validated credential: it authenticates to the spoke.
        let rt = tokio::runtime::Runtime::new().unwrap();
        let live = rt.block_on(support::fleet::authenticates(
            &spokekeeper::secret::SecretBytes::from(value),
        ));
        assert_eq!(live.username, "system:admin", "{live:?}");
    }
}

/// Scenario 3: Flux's own kubeconfig loading accepts every unsealed Secret and calls the
/// spoke with it; the Kustomizations report Ready after spokekeeper's reconcile request.
#[test]
fn fluxs_code_deploys_with_every_unsealed_secret() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES, &HubOptions::default(), "");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    for i in 0..SCOPES.len() {
        stack.wait_unsealed(i, Duration::from_secs(60));
        let who = stack
            .hub
            .flux_calls_spoke("flux-system", &format!("spoke{i}-kubeconfig"))
            .unwrap();
        assert_eq!(who["username"], "system:admin", "{who}");
        assert!(
            who["gitVersion"].as_str().unwrap().starts_with("v1."),
            "{who}"
        );
        let spoke = &report["spokes"][i];
        assert_ready(spoke, &[&format!("Kustomization/flux-system/spoke{i}")]);
        assert!(spoke["hub"]["requested_at"].is_string(), "{spoke:#}");
    }
    assert!(stack.flux.as_ref().unwrap().reconciled() >= SCOPES.len());
}

/// Scenario 4: kubeseal opens every commit with the controller's keys, and for the same
/// Secret kubeseal and `spokekeeper seal` write the same manifest but for the ciphertext.
#[test]
fn kubeseal_opens_every_commit_and_seals_the_same_manifest() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES, &HubOptions::default(), "");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let cert = stack.fleet.clone.join(PINNED);
    for (i, scope) in SCOPES.iter().enumerate() {
        let value = stack.recovery_unsealed(i);
        assert_eq!(value, stack.wait_unsealed(i, Duration::from_secs(60)));
        let secret = stack.hub.dir().join(format!("secret{i}.json"));
        use base64::Engine as _;
        std::fs::write(
            &secret,
            serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("spoke{i}-kubeconfig"), "namespace": "flux-system"},
                "type": "Opaque",
                "data": {"value": base64::engine::general_purpose::STANDARD.encode(&value)},
            })
            .to_string(),
        )
        .unwrap();
        let kubeseal = run(stack
            .hub
            .kubeseal()
            .arg(format!("--cert={}", cert.display()))
            .arg(format!("--scope={scope}"))
            .args(["-o", "yaml"])
            .stdin(std::fs::File::open(&secret).unwrap()))
        .unwrap();
        let ours = run(
            std::process::Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
                .args(["seal", "--cert"])
                .arg(&cert)
                .arg(format!("--scope={scope}"))
                .args(["-o", "yaml"])
                .stdin(std::fs::File::open(&secret).unwrap()),
        )
        .unwrap();
        assert_eq!(
            mask_ciphertext(&ours),
            mask_ciphertext(&kubeseal),
            "{scope}"
        );
        assert_ne!(ours, kubeseal, "fresh ciphertext each time");
        // And the controller opens ours.
        let sealed = stack.hub.dir().join(format!("ours{i}.yaml"));
        std::fs::write(&sealed, &ours).unwrap();
        let keys = stack.hub.sealing_keys_files();
        let opened = stack.hub.recovery_unseal(&sealed, &keys).unwrap();
        assert_eq!(
            opened["data"]["value"].as_str().unwrap(),
            base64::engine::general_purpose::STANDARD.encode(&value)
        );
    }
}

/// Each `encryptedData` value replaced by a marker.
fn mask_ciphertext(manifest: &str) -> String {
    let mut out = String::new();
    let mut in_data = false;
    for line in manifest.lines() {
        let indent = line.len() - line.trim_start().len();
        if line.trim_start().starts_with("encryptedData:") {
            in_data = true;
            out.push_str(line);
        } else if in_data && indent > 2 {
            let key = line.split(':').next().unwrap();
            out.push_str(&format!("{key}: CIPHERTEXT"));
        } else {
            in_data = false;
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// Scenario 5: the controller renews its key (SIGUSR1, its own trigger); spokekeeper
/// notices at the next tick, pins the new certificate, re-seals every spoke to it, and
/// the controller unseals the new commits.
#[test]
fn a_controller_key_renewal_reseals_every_spoke() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES[..2], &HubOptions::default(), "");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let first = kubeseal_fetch_cert(&stack.hub);
    let old_keys = stack.hub.sealing_keys();
    assert_eq!(old_keys.len(), 1);

    stack.hub.renew_key();
    support::realstack::wait_until(
        "the controller serves a new certificate",
        Duration::from_secs(60),
        || {
            let now = kubeseal_fetch_cert(&stack.hub);
            if now != first {
                Ok(())
            } else {
                Err("same certificate".into())
            }
        },
    );
    let new_keys: Vec<String> = stack
        .hub
        .sealing_keys()
        .into_iter()
        .filter(|k| !old_keys.contains(k))
        .collect();
    assert_eq!(new_keys.len(), 1);
    let only_new = stack.hub.dir().join("newest-key.pem");
    std::fs::write(&only_new, &new_keys[0]).unwrap();

    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let renewed_fp = &report["sealing"]["renewed"];
    assert_eq!(renewed_fp["new"], report["sealing"]["sha256"], "{report:#}");
    assert_ne!(renewed_fp["old"], renewed_fp["new"], "{report:#}");
    let renewed = kubeseal_fetch_cert(&stack.hub);
    assert_eq!(
        std::fs::read_to_string(stack.fleet.clone.join(PINNED)).unwrap(),
        renewed
    );
    let log = git(&stack.fleet.remote, &["log", "--format=%s", "main"]);
    assert!(
        log.contains("sealing: controller certificate renewed"),
        "{log}"
    );
    for i in 0..2 {
        let spoke = &report["spokes"][i];
        assert_eq!(spoke["action"], "rotated", "{spoke:#}");
        assert_eq!(spoke["hub"]["synced"]["ok"], true, "{spoke:#}");
        stack.wait_unsealed(i, Duration::from_secs(60));
        // Sealed to the new key: the new key alone opens it.
        let opened = stack
            .hub
            .recovery_unseal(&stack.committed(i), only_new.to_str().unwrap());
        assert!(opened.is_ok(), "{opened:?}");
    }
}

/// The hub's ServiceAccount-less admin is not what production runs: scenario 7 runs
/// spokekeeper with a token of the chart's ServiceAccount, under the chart's RBAC only.
#[test]
fn the_charts_rbac_is_enough_and_nothing_more() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    let ns = "spokekeeper";
    stack.hub.api.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"
    ));
    // The chart grants by the names in its config: the lab's spoke.
    let values = stack.hub.dir().join("values.yaml");
    std::fs::write(
        &values,
        "config:\n  spokes:\n    - name: spoke0\n      address: 127.0.0.1\n",
    )
    .unwrap();
    let rendered = support::helm::run_helm(&[
        "template",
        "spokekeeper",
        support::helm::CHART,
        "--namespace",
        ns,
        "-f",
        values.to_str().unwrap(),
    ]);
    let mut applied = Vec::new();
    for doc in rendered.split("\n---") {
        let Ok(v) = serde_saphyr::from_str::<Value>(doc) else {
            continue;
        };
        let kind = v["kind"].as_str().unwrap_or("");
        if matches!(
            kind,
            "ServiceAccount" | "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding"
        ) {
            stack.hub.api.apply(&v.to_string());
            applied.push(format!(
                "{kind}/{}",
                v["metadata"]["name"].as_str().unwrap_or("")
            ));
        }
    }
    assert!(
        applied.iter().any(|a| a.starts_with("Role/")),
        "the chart renders a Role: {applied:?}"
    );
    let sa = support::realstack::wait_until(
        "the chart's ServiceAccount",
        Duration::from_secs(10),
        || {
            let list = stack.hub.api.get_json(&["serviceaccounts", "-n", ns]);
            list["items"]
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .find_map(|s| s["metadata"]["name"].as_str().map(String::from))
                })
                .ok_or_else(|| "none".to_string())
        },
    );
    let token = stack.hub.token(ns, &sa);
    let kubeconfig = stack.hub.token_kubeconfig("spokekeeper", &token);
    stack.hub.use_kubeconfig(&stack.fleet.config, &kubeconfig);

    let (code, report, err) = stack.rotate_json();
    assert_eq!(
        code, 0,
        "every call within the chart's RBAC: {report:#}\n{err}"
    );
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["hub"]["synced"]["ok"], true, "{spoke:#}");
    assert_ready(spoke, &["Kustomization/flux-system/spoke0"]);
    assert_eq!(report["sealing"]["reachable"], true, "{report:#}");

    // The daemon records its Events under the same Role: create, then a repeat's patch.
    stack.configure("alerts:\n  warn_before: 36500d\n");
    let daemon = support::daemon::Daemon::start(&stack.fleet.config, &["--interval", "2s"]);
    wait_ticks(&daemon, 2, Duration::from_secs(120));
    let log = daemon.log();
    drop(daemon);
    assert!(!log.contains("event not recorded"), "{log}");
    let events = our_events(&stack, "flux-system");
    let expiring = one_event(
        &events,
        "CredentialExpiring",
        "spoke0",
        "client certificate",
    );
    assert!(
        expiring["series"]["count"].as_u64().unwrap_or(0) >= 2,
        "patched under the chart's Role: {expiring:#}"
    );
    // Exactly create and patch on events.k8s.io Events, in the spokes' namespace only:
    // the real authorizer's answers for the chart's ServiceAccount.
    let can = |args: &[&str]| {
        let out = std::process::Command::new(support::realstack::bin("kubectl"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(["auth", "can-i"])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    for verb in ["create", "patch"] {
        assert!(
            can(&[verb, "events.events.k8s.io", "-n", "flux-system"]),
            "{verb}"
        );
    }
    for verb in [
        "get",
        "list",
        "watch",
        "update",
        "delete",
        "deletecollection",
    ] {
        assert!(
            !can(&[verb, "events.events.k8s.io", "-n", "flux-system"]),
            "{verb}"
        );
    }
    assert!(
        !can(&["create", "events", "-n", "flux-system"]),
        "core/v1 events"
    );
    assert!(
        !can(&["create", "events.events.k8s.io", "-n", "default"]),
        "another namespace"
    );

    // One call outside hub::ACCESS: the real authorizer refuses it.
    let denied = run(
        std::process::Command::new(support::realstack::bin("kubectl"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(["get", "secrets", "-n", "flux-system"]),
    );
    let err = denied.unwrap_err();
    assert!(
        err.contains("Forbidden") || err.contains("forbidden"),
        "{err}"
    );
}

/// spokekeeper's Events in `ns` as the real API server stores them (events.k8s.io/v1).
fn our_events(stack: &Stack, ns: &str) -> Vec<Value> {
    let list = stack
        .hub
        .api
        .get_json(&["events.v1.events.k8s.io", "-n", ns]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reportingController"] == "spokekeeper")
        .cloned()
        .collect()
}

/// The one Event with `reason` about Kustomization `name` whose note contains `note`;
/// panics with all of them if there is none or more than one.
fn one_event<'a>(events: &'a [Value], reason: &str, name: &str, note: &str) -> &'a Value {
    let found: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["reason"] == reason
                && e["regarding"]["name"] == name
                && e["note"].as_str().is_some_and(|n| n.contains(note))
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {reason} Event about {name}, {note:?}: {events:#?}"
    );
    found[0]
}

/// Waits until the daemon's log shows `n` finished ticks.
fn wait_ticks(daemon: &support::daemon::Daemon, n: usize, within: Duration) {
    support::realstack::wait_until(&format!("{n} ticks"), within, || {
        let log = daemon.log();
        match log.matches("tick finished").count() {
            k if k >= n => Ok(()),
            k => Err(format!("{k} ticks:\n{log}")),
        }
    });
}

/// Issue 32: with `hub:`, `spokekeeper run` records a rotation and an expiry warning as
/// Events on the spoke's Kustomization; the real API server stores them, the real
/// `kubectl events --for` lists them, and the warning repeated every tick is one Event
/// whose series counts the ticks (client-go's aggregation), not one Event per tick.
#[test]
fn events_on_the_real_hub_are_listed_for_the_kustomization_and_aggregate() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    // Every certificate is inside warn_before: each tick warns again.
    stack.configure("alerts:\n  warn_before: 36500d\n");
    let daemon = support::daemon::Daemon::start(&stack.fleet.config, &["--interval", "2s"]);
    wait_ticks(&daemon, 4, Duration::from_secs(180));
    let log = daemon.log();
    assert!(!log.contains("event not recorded"), "{log}");
    drop(daemon);

    let events = our_events(&stack, "flux-system");
    let rotated = one_event(&events, "CredentialRotated", "spoke0", "");
    assert_eq!(rotated["type"], "Normal", "{rotated:#}");
    assert_eq!(rotated["action"], "Rotate", "{rotated:#}");
    assert_eq!(
        rotated["regarding"]["apiVersion"], "kustomize.toolkit.fluxcd.io/v1",
        "{rotated:#}"
    );
    assert_eq!(rotated["regarding"]["kind"], "Kustomization", "{rotated:#}");
    assert!(
        rotated["reportingInstance"]
            .as_str()
            .is_some_and(|i| !i.is_empty())
    );
    let note = rotated["note"].as_str().unwrap();
    assert!(
        note.starts_with("spoke spoke0: a validated credential was committed"),
        "{note}"
    );

    let expiring = one_event(
        &events,
        "CredentialExpiring",
        "spoke0",
        "client certificate",
    );
    assert_eq!(expiring["type"], "Warning", "{expiring:#}");
    // The first tick created it, every later one counted: at least three in all.
    let count = expiring["series"]["count"].as_u64().unwrap_or(0);
    assert!(
        count >= 3,
        "the repeats aggregate into one Event's series: {expiring:#}"
    );
    assert!(
        expiring["series"]["lastObservedTime"].as_str().unwrap()
            > expiring["eventTime"].as_str().unwrap(),
        "{expiring:#}"
    );
    // No key material in any Event.
    let text = serde_json::to_string(&events).unwrap();
    assert!(!text.contains("BEGIN"), "{text}");
    stack.assert_no_plaintext();

    // The real kubectl lists them for the Kustomization, beside Flux's own.
    let listed = stack.hub.api.kubectl(&[
        "events",
        "--for",
        "kustomization/spoke0",
        "-n",
        "flux-system",
    ]);
    for reason in ["CredentialRotated", "CredentialExpiring"] {
        assert!(listed.contains(reason), "{reason} in:\n{listed}");
    }
    assert!(
        listed.contains(&format!("(x{count} over")),
        "kubectl shows the series' count:\n{listed}"
    );
    // Not for another object.
    let other = stack.hub.api.kubectl(&[
        "events",
        "--for",
        "kustomization/flux-system",
        "-n",
        "flux-system",
    ]);
    assert!(!other.contains("Credential"), "{other}");
}

/// Issue 32: `alerts.flux` posts spokekeeper's Events to Flux's real
/// notification-controller as the Flux controllers post theirs, so an existing Alert on a
/// spoke's Kustomization forwards them through its Provider (type generic, to a lab
/// receiver): after a rotation and after an expiry warning the receiver gets the
/// controller's own POST naming spokekeeper's reason; an Alert on another Kustomization
/// receives nothing.
#[test]
fn flux_alerts_forward_rotations_and_expiry_warnings_through_the_real_notification_controller() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    let nc = support::realstack::notification::NotificationController::start(&stack.hub);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (spoke, other) = rt.block_on(async {
        (
            spokekeeper_lab::webhook::Receiver::start("/spoke0").await,
            spokekeeper_lab::webhook::Receiver::start("/apps").await,
        )
    });
    // Another Kustomization, deploying with no spoke's Secret.
    stack.hub.api.apply(
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: apps\n  \
         namespace: flux-system\nspec:\n  interval: 10m\n  path: ./apps\n  prune: true\n  \
         sourceRef:\n    kind: GitRepository\n    name: fleet\n",
    );
    flux_alert(&stack, "spoke0", &spoke.url(), "spoke0", "");
    flux_alert(&stack, "apps", &other.url(), "apps", "");
    // Every certificate is inside warn_before: the first tick rotates and warns.
    stack.configure(&format!(
        "alerts:\n  warn_before: 36500d\n  flux:\n    address: {}\n",
        nc.events_url
    ));
    let daemon = support::daemon::Daemon::start(&stack.fleet.config, &["--interval", "2s"]);
    support::realstack::wait_until(
        "notification-controller forwards the rotation and the expiry warning",
        Duration::from_secs(120),
        || {
            let got = reasons(&spoke);
            match ["CredentialRotated", "CredentialExpiring"]
                .iter()
                .all(|r| got.iter().any(|g| g == r))
            {
                true => Ok(()),
                false => Err(format!(
                    "received {got:?}\n--- spokekeeper:\n{}\n--- notification-controller:\n{}",
                    daemon.log(),
                    nc.tail(40)
                )),
            }
        },
    );
    // More ticks: the repeats are not posted again, and nothing reaches the other Alert.
    wait_ticks(&daemon, 4, Duration::from_secs(60));
    let log = daemon.log();
    drop(daemon);
    assert!(!log.contains("event not recorded"), "{log}");
    spoke.assert_clean();
    other.assert_clean();
    assert_eq!(other.requests(), 0, "{:?}", other.posts());
    for p in spoke.posts() {
        let e = &p.body;
        assert_eq!(e["involvedObject"]["kind"], "Kustomization", "{e:#}");
        assert_eq!(e["involvedObject"]["name"], "spoke0", "{e:#}");
        assert_eq!(e["involvedObject"]["namespace"], "flux-system", "{e:#}");
        assert_eq!(e["reportingController"], "spokekeeper", "{e:#}");
        let severity = match e["reason"].as_str().unwrap() {
            "CredentialRotated" => "info",
            _ => "error",
        };
        assert_eq!(e["severity"], severity, "{e:#}");
        assert!(
            e["message"].as_str().unwrap().starts_with("spoke spoke0: "),
            "{e:#}"
        );
    }
    let got = reasons(&spoke);
    let expiring = got.iter().filter(|r| *r == "CredentialExpiring").count();
    // The client certificate's and the CA's: one each, however many ticks warned (the
    // repeats are not posted; notification-controller would also drop them as
    // duplicates within its --rate-limit-interval).
    assert_eq!(expiring, 2, "{got:?}");
}

/// A generic Provider posting to `url` and an Alert on the Kustomization `kustomization`,
/// both named `name`; `spec` is added to the Alert's spec.
fn flux_alert(stack: &Stack, name: &str, url: &str, kustomization: &str, spec: &str) {
    stack.hub.api.apply(&format!(
        "apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Provider\nmetadata:\n  name: {name}\n  \
         namespace: flux-system\nspec:\n  type: generic\n  address: {url}\n---\n\
         apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Alert\nmetadata:\n  name: {name}\n  \
         namespace: flux-system\nspec:\n  providerRef:\n    name: {name}\n  eventSeverity: info\n  \
         eventSources:\n    - kind: Kustomization\n      name: {kustomization}\n{spec}"
    ));
}

/// The reasons of what `r` received from notification-controller, in order.
fn reasons(r: &spokekeeper_lab::webhook::Receiver) -> Vec<String> {
    r.posts()
        .iter()
        .filter_map(|p| p.body["reason"].as_str().map(String::from))
        .collect()
}

/// Waits until `r` received an event of `reason`.
fn received(
    r: &spokekeeper_lab::webhook::Receiver,
    reason: &str,
    daemon: &support::daemon::Daemon,
) {
    support::realstack::wait_until(
        &format!("notification-controller forwards {reason}"),
        Duration::from_secs(120),
        || match reasons(r).iter().any(|g| g == reason) {
            true => Ok(()),
            false => Err(format!(
                "received {:?}\n--- spokekeeper:\n{}",
                reasons(r),
                daemon.log()
            )),
        },
    );
}

/// Issue 40 (6): a rotation failure in a tick whose listing of the Secret's consumers the
/// hub refuses is about the spoke's Kustomization found before (not its SealedSecret, which
/// no Alert can select), so the real notification-controller forwards it through the
/// Alert on that Kustomization.
#[test]
fn a_failure_the_hub_cannot_list_consumers_for_reaches_the_alert_on_the_spokes_kustomization() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    let nc = support::realstack::notification::NotificationController::start(&stack.hub);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let spoke = rt.block_on(spokekeeper_lab::webhook::Receiver::start("/spoke0"));
    flux_alert(&stack, "spoke0", &spoke.url(), "spoke0", "");
    // spokekeeper's own ServiceAccount: all rights first, then none on Flux's objects.
    let api = &stack.hub.api;
    api.kubectl(&[
        "create",
        "serviceaccount",
        "spokekeeper",
        "-n",
        "flux-system",
    ]);
    let sa = "--serviceaccount=flux-system:spokekeeper";
    api.kubectl(&[
        "create",
        "clusterrolebinding",
        "spokekeeper-all",
        "--clusterrole=cluster-admin",
        sa,
    ]);
    let token = stack.hub.token("flux-system", "spokekeeper");
    let kubeconfig = stack.hub.token_kubeconfig("spokekeeper", &token);
    stack.hub.use_kubeconfig(&stack.fleet.config, &kubeconfig);
    stack.configure(&format!(
        "alerts:\n  flux:\n    address: {}\n",
        nc.events_url
    ));
    let daemon = support::daemon::Daemon::start(&stack.fleet.config, &["--interval", "2s"]);
    received(&spoke, "CredentialRotated", &daemon);
    api.apply(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: no-flux\nrules:\n\
         - apiGroups: ['', events.k8s.io, bitnami.com]\n  resources: ['*']\n  verbs: ['*']\n",
    );
    api.kubectl(&[
        "create",
        "clusterrolebinding",
        "spokekeeper-no-flux",
        "--clusterrole=no-flux",
        sa,
    ]);
    api.kubectl(&["delete", "clusterrolebinding", "spokekeeper-all"]);
    support::realstack::wait_until(
        "Flux's objects are refused",
        Duration::from_secs(30),
        || {
            // `auth can-i` answers "no" with exit status 1.
            let can = api.try_kubectl(&[
                "auth",
                "can-i",
                "list",
                "kustomizations.kustomize.toolkit.fluxcd.io",
                "-n",
                "flux-system",
                "--as=system:serviceaccount:flux-system:spokekeeper",
            ]);
            match can {
                Err(no) if no.contains(": no") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    );
    // The spoke is gone: the next tick's rotation fails, and the hub lists nothing.
    stack.fleet.nodes[0].stop_api();
    stack.fleet.nodes[0].stop_sshd();
    received(&spoke, "RotationFailed", &daemon);
    drop(daemon);
    spoke.assert_clean();
    for p in spoke.posts() {
        let e = &p.body;
        assert_eq!(e["involvedObject"]["kind"], "Kustomization", "{e:#}");
        assert_eq!(e["involvedObject"]["name"], "spoke0", "{e:#}");
    }
}

/// Issue 40 (7, 9): the `inclusionList` and `exclusionList` docs/alerts.md shows, on the
/// real notification-controller (which matches them against the message, not the
/// reason): the first passes spokekeeper's notifications and not Flux's own event about
/// the same Kustomization, the second the reverse; an Alert with neither forwards both.
#[test]
fn the_docs_inclusion_and_exclusion_lists_split_spokekeepers_notifications_from_fluxs() {
    crate::support::requires!(ROOT, REAL_STACK);
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/alerts.md"),
    )
    .unwrap();
    let shown = |list: &str| -> String {
        let prefix = format!("{list}: ");
        docs.lines()
            .find_map(|l| {
                l.trim()
                    .trim_start_matches("# ")
                    .strip_prefix(prefix.as_str())
            })
            .map(|v| v.split("    #").next().unwrap().trim().to_string())
            .unwrap_or_else(|| panic!("docs/alerts.md shows no {list}"))
    };
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    let nc = support::realstack::notification::NotificationController::start(&stack.hub);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (included, excluded, all) = rt.block_on(async {
        (
            spokekeeper_lab::webhook::Receiver::start("/included").await,
            spokekeeper_lab::webhook::Receiver::start("/excluded").await,
            spokekeeper_lab::webhook::Receiver::start("/all").await,
        )
    });
    for (name, r, list) in [
        ("included", &included, "inclusionList"),
        ("excluded", &excluded, "exclusionList"),
    ] {
        let spec = format!("  {list}: {}\n", shown(list));
        flux_alert(&stack, name, &r.url(), "spoke0", &spec);
    }
    flux_alert(&stack, "all", &all.url(), "spoke0", "");
    stack.configure(&format!(
        "alerts:\n  flux:\n    address: {}\n",
        nc.events_url
    ));
    let daemon = support::daemon::Daemon::start(&stack.fleet.config, &["--interval", "2s"]);
    received(&included, "CredentialRotated", &daemon);
    // Flux's own event about the Kustomization, as kustomize-controller posts it.
    let own = serde_json::json!({
        "involvedObject": {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "namespace": "flux-system",
            "name": "spoke0"
        },
        "severity": "info",
        "timestamp": spokekeeper::rotate::state::rfc3339(time::OffsetDateTime::now_utc()),
        "message": "Reconciliation finished in 412ms, next run in 10m0s",
        "reason": "ReconciliationSucceeded",
        "reportingController": "kustomize-controller"
    });
    let status = nc.post(&own);
    assert!(
        matches!(status, Ok(200..=299)),
        "{status:?}\n{}",
        nc.tail(30)
    );
    received(&all, "ReconciliationSucceeded", &daemon);
    received(&excluded, "ReconciliationSucceeded", &daemon);
    received(&all, "CredentialRotated", &daemon);
    wait_ticks(&daemon, 3, Duration::from_secs(60));
    drop(daemon);
    for r in [&included, &excluded, &all] {
        r.assert_clean();
    }
    let flux_own =
        |p: &spokekeeper_lab::webhook::Post| p.body["reason"] == "ReconciliationSucceeded";
    assert!(
        included.posts().iter().all(|p| !flux_own(p)),
        "{:?}",
        reasons(&included)
    );
    for p in included.posts() {
        let message = p.body["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("spoke spoke0: "), "{:#}", p.body);
    }
    assert!(
        excluded.posts().iter().all(flux_own),
        "{:?}",
        reasons(&excluded)
    );
}

/// Scenario 6: two `spokekeeper run --leader-elect` replicas against the real hub:
/// exactly one ticks; killed, the other takes over within the lease duration and a retry
/// period; the Lease is a standard one.
#[test]
fn leader_election_on_a_real_lease() {
    crate::support::requires!(ROOT, REAL_STACK);
    // Its takeover is bounded by the lease duration: no other real stack starts beside it.
    let _alone = support::timing::exclusive();
    let stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    let ns = "spokekeeper";
    stack.hub.api.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"
    ));
    let start = |name: &str| {
        support::daemon::spawn_replica(
            &stack.fleet.config,
            stack.hub.admin_kubeconfig(),
            (name, ns),
            "2s",
            &[],
        )
    };
    let (mut a, a_lines) = start("replica-a");
    let (mut b, b_lines) = start("replica-b");
    let deadline = Instant::now() + Duration::from_secs(60);
    while ticks(&a_lines) + ticks(&b_lines) < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ta, tb) = (ticks(&a_lines), ticks(&b_lines));
    let (leader, follower, follower_lines, leader_child) = match (ta, tb) {
        (n, 0) if n >= 1 => ("replica-a", "replica-b", &b_lines, &mut a),
        (0, n) if n >= 1 => ("replica-b", "replica-a", &a_lines, &mut b),
        _ => panic!("exactly one ticks: a {ta}, b {tb}"),
    };
    let lease = stack.hub.api.get_json(&["lease", "spokekeeper", "-n", ns]);
    assert_eq!(lease["spec"]["holderIdentity"], leader, "{lease:#}");
    assert!(
        lease["spec"]["leaseDurationSeconds"].as_i64().unwrap() > 0,
        "{lease:#}"
    );
    assert!(lease["spec"]["renewTime"].is_string(), "{lease:#}");
    assert!(lease["spec"]["acquireTime"].is_string(), "{lease:#}");
    let duration = Duration::from_secs(lease["spec"]["leaseDurationSeconds"].as_u64().unwrap());

    let _ = leader_child.kill();
    let killed = Instant::now();
    let _ = leader_child.wait();
    let before = ticks(follower_lines);
    while ticks(follower_lines) == before && killed.elapsed() < duration + Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = killed.elapsed();
    assert!(
        ticks(follower_lines) > before,
        "no takeover within {took:?}"
    );
    eprintln!("takeover on the real Lease after the leader was killed: {took:?}");
    // Within the lease duration, plus the moments a busy machine takes to start a tick.
    assert!(took <= duration + Duration::from_secs(3), "took {took:?}");
    let lease = stack.hub.api.get_json(&["lease", "spokekeeper", "-n", ns]);
    assert_eq!(lease["spec"]["holderIdentity"], follower, "{lease:#}");
    assert!(
        lease["spec"]["leaseTransitions"].as_i64().unwrap_or(0) >= 1,
        "{lease:#}"
    );
    let _ = a.kill();
    let _ = b.kill();
    let _ = a.wait();
    let _ = b.wait();
}

/// Every consumer of a spoke's Secret on the real CRDs: two Kustomizations and a
/// HelmRelease on it are each asked to reconcile and reported by kind and name; one on
/// another Secret and one in another namespace are not.
#[test]
fn every_consumer_on_the_real_crds_is_verified() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    let hr = |name: &str, ns: &str, secret: &str| {
        format!(
            "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: {name}\n  \
             namespace: {ns}\nspec:\n  interval: 10m\n  chart:\n    spec:\n      chart: podinfo\n      \
             sourceRef:\n        kind: HelmRepository\n        name: podinfo\n  kubeConfig:\n    \
             secretRef:\n      name: {secret}\n"
        )
    };
    let ks = |name: &str, ns: &str, secret: &str| {
        format!(
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: {name}\n  \
             namespace: {ns}\nspec:\n  interval: 10m\n  path: ./infra\n  prune: true\n  sourceRef:\n    \
             kind: GitRepository\n    name: fleet\n  kubeConfig:\n    secretRef:\n      name: {secret}\n"
        )
    };
    stack
        .hub
        .api
        .apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: elsewhere\n");
    stack
        .hub
        .api
        .apply(&ks("spoke0-infra", "flux-system", "spoke0-kubeconfig"));
    stack
        .hub
        .api
        .apply(&hr("spoke0-apps", "flux-system", "spoke0-kubeconfig"));
    stack
        .hub
        .api
        .apply(&ks("other", "flux-system", "other-kubeconfig"));
    stack
        .hub
        .api
        .apply(&ks("spoke0", "elsewhere", "spoke0-kubeconfig"));
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_ready(
        &report["spokes"][0],
        &[
            "HelmRelease/flux-system/spoke0-apps",
            "Kustomization/flux-system/spoke0",
            "Kustomization/flux-system/spoke0-infra",
        ],
    );
    // Each was asked through the annotation, and the others were not.
    let requested = |kind: &str, ns: &str, name: &str| {
        stack.hub.api.get_json(&[kind, name, "-n", ns])["metadata"]["annotations"]
            ["reconcile.fluxcd.io/requestedAt"]
            .is_string()
    };
    assert!(requested("helmrelease", "flux-system", "spoke0-apps"));
    assert!(requested("kustomization", "flux-system", "spoke0-infra"));
    assert!(!requested("kustomization", "flux-system", "other"));
    assert!(!requested("kustomization", "elsewhere", "spoke0"));
}

/// Scenario 8: spokes whose APIs are real kube-apiservers with k3s-shaped PKI, reached
/// through the lab's real sshd: live validation (version and SelfSubjectReview) runs
/// against them; one is rebuilt (new CAs, restart), the probe detects it, it is rotated,
/// the real controller unseals it and Flux's code deploys with it.
#[test]
fn real_spokes_are_validated_and_a_rebuilt_one_is_rotated() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = Stack::with_real_spokes(2);
    for node in &stack.fleet.nodes {
        let k3s = String::from_utf8(node.kubeconfig_bytes()).unwrap();
        assert!(k3s.contains("server: https://127.0.0.1:6443\n"), "{k3s}");
        assert!(k3s.contains("current-context: default\n"), "{k3s}");
    }
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    for i in 0..2 {
        let spoke = &report["spokes"][i];
        assert_eq!(spoke["action"], "rotated", "{spoke:#}");
        assert_eq!(spoke["user"], "system:admin", "{spoke:#}");
        assert_ready(spoke, &[&format!("Kustomization/flux-system/spoke{i}")]);
        stack.wait_unsealed(i, Duration::from_secs(60));
    }
    let first_ca = report["spokes"][1]["ca_sha256"].clone();

    // A reinstall of spoke1: new CAs, the API server restarted over fresh storage.
    stack.spoke_apis[1].stop();
    stack.fleet.nodes[1].rebuild();
    stack.spoke_apis[1] = real_api(&stack.fleet.nodes[1], &stack.hub.etcd, stack.hub.dir(), 1);
    // The committed credential no longer works against it.
    let stale = stack
        .hub
        .flux_calls_spoke("flux-system", "spoke1-kubeconfig");
    assert!(stale.is_err(), "{stale:?}");

    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][1];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_ne!(spoke["ca_sha256"], first_ca, "{spoke:#}");
    assert_ne!(report["spokes"][0]["action"], "rotated", "{report:#}");
    stack.wait_unsealed(1, Duration::from_secs(60));
    let who = stack
        .hub
        .flux_calls_spoke("flux-system", "spoke1-kubeconfig")
        .unwrap();
    assert_eq!(who["username"], "system:admin", "{who}");
    assert_ready(spoke, &["Kustomization/flux-system/spoke1"]);
}

/// libfaketime (Debian's libfaketime), to run a daemon with its wall clock shifted.
fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.is_file());
    found.expect("libfaketime is missing: apt-get install libfaketime (scripts/test does)")
}

/// Issue 19, item 6: three daemons on a real Lease, two with their wall clocks shifted by
/// libfaketime (+12 s and -10 min; the monotonic clock is not shifted). The one 12 s
/// ahead never takes a healthy leader's lease, and when leaders die, whichever replica is
/// left takes over within the lease duration, the one 10 min behind too; no two ever
/// tick at once.
#[test]
fn skewed_daemons_on_a_real_lease_never_tick_at_once() {
    crate::support::requires!(REAL_STACK);
    // Its takeover is bounded by the lease duration: no other real stack starts beside it.
    let _alone = support::timing::exclusive();
    let hub = support::realstack::api::ApiOnly::start();
    let ns = "spokekeeper";
    hub.api.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"
    ));
    let dir = tempfile::tempdir().unwrap();
    let (_, clones) = support::git::fleet_remote(dir.path(), 3);
    let faketime = libfaketime();
    let names = ["steady", "ahead", "behind"];
    let skews = [None, Some("+12s"), Some("-10m")];
    let start = |i: usize| {
        let config = dir.path().join(format!("{}.yaml", names[i]));
        support::fleet::one_unreachable(&clones[i], dir.path())
            .write(&config)
            .unwrap();
        let mut envs: Vec<(&str, &std::ffi::OsStr)> = Vec::new();
        if let Some(skew) = skews[i] {
            envs.push(("LD_PRELOAD", faketime.as_os_str()));
            envs.push(("FAKETIME", skew.as_ref()));
            envs.push(("FAKETIME_DONT_FAKE_MONOTONIC", "1".as_ref()));
        }
        support::daemon::spawn_replica(&config, hub.admin_kubeconfig(), (names[i], ns), "1s", &envs)
    };
    let t0 = Instant::now();
    let mut procs = vec![start(0)];
    let log = support::logs::text;
    let wait_ticks = |lines: &support::logs::Lines, within: Duration| {
        let end = Instant::now() + within;
        while ticks(lines) == 0 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
        }
        ticks(lines) > 0
    };
    assert!(
        wait_ticks(&procs[0].1, Duration::from_secs(30)),
        "{}",
        log(&procs[0].1)
    );
    procs.push(start(1));
    procs.push(start(2));
    // Long enough for many renewals: with renewTime compared to its own clock, the one
    // 12 s ahead would see each renewal expire 3 s after it was written.
    std::thread::sleep(Duration::from_secs(25));
    for p in &procs[1..] {
        assert_eq!(
            ticks(&p.1),
            0,
            "a standby ticked under a healthy leader:\n{}",
            log(&p.1)
        );
    }
    let lease = hub.api.get_json(&["lease", "spokekeeper", "-n", ns]);
    assert_eq!(lease["spec"]["holderIdentity"], "steady", "{lease:#}");
    let duration = Duration::from_secs(lease["spec"]["leaseDurationSeconds"].as_u64().unwrap());

    // The holder's renewTime, against our clock: shows the holder's skew is real.
    let renew_offset = || {
        let lease = hub.api.get_json(&["lease", "spokekeeper", "-n", ns]);
        let renewed = lease["spec"]["renewTime"].as_str().unwrap().to_string();
        let renewed =
            time::OffsetDateTime::parse(&renewed, &time::format_description::well_known::Rfc3339)
                .unwrap_or_else(|e| panic!("{renewed}: {e}"));
        let holder = lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        (
            holder,
            (renewed - time::OffsetDateTime::now_utc()).as_seconds_f64(),
        )
    };
    let mut dead = vec![0];
    let mut killed_at = Vec::new();
    for round in 0..2 {
        let leader = *dead.last().unwrap();
        let _ = procs[leader].0.kill();
        let _ = procs[leader].0.wait();
        let killed = Instant::now();
        killed_at.push((leader, killed));
        let live: Vec<usize> = (0..3).filter(|i| !dead.contains(i)).collect();
        let end = killed + duration + Duration::from_secs(10);
        let next = loop {
            if let Some(&i) = live.iter().find(|&&i| ticks(&procs[i].1) > 0) {
                break i;
            }
            assert!(
                Instant::now() < end,
                "round {round}: no takeover within {:?}:\n{}",
                end - killed,
                live.iter()
                    .map(|&i| log(&procs[i].1))
                    .collect::<Vec<_>>()
                    .join("\n---\n")
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let took = killed.elapsed();
        eprintln!("round {round}: {} took over after {took:?}", names[next]);
        assert!(took <= duration + Duration::from_secs(7), "took {took:?}");
        let (holder, offset) = renew_offset();
        assert_eq!(holder, names[next]);
        let want = if next == 1 { 12.0 } else { -600.0 };
        assert!(
            (offset - want).abs() < 8.0,
            "{holder} renews {offset:.1}s off, want {want}"
        );
        dead.push(next);
    }

    // Over the whole test, no two daemons ticked at the same time.
    let end = Instant::now();
    let mut all = Vec::new();
    for (i, p) in procs.iter().enumerate() {
        let until = killed_at
            .iter()
            .find(|(k, _)| *k == i)
            .map_or(end, |(_, t)| *t);
        all.extend(
            support::logs::tick_spans(&p.1, until)
                .into_iter()
                .map(|(s, e)| (s, e, names[i].to_string())),
        );
    }
    support::logs::assert_ticks_never_overlap(all, t0, 10);
    for p in &mut procs {
        let _ = p.0.kill();
        let _ = p.0.wait();
    }
}

/// Issue 19, item 1, on the real API server: the controller Service's port unnamed, as
/// upstream controller.yaml installs it. kubeseal asks for `http:NAME:`; spokekeeper
/// reaches it with `port: ""`, and with the chart's `http` it says what to set.
#[test]
fn an_unnamed_controller_port_is_reached_as_kubeseal_asks() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let opts = HubOptions {
        unnamed_port: true,
        ..HubOptions::default()
    };
    let stack = Stack::start(&SCOPES[..1], &opts, "  controller: {port: \"\"}\n");
    assert_eq!(kubeseal_fetch_cert(&stack.hub), stack.hub.cert_pem());
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_ready(&report["spokes"][0], &["Kustomization/flux-system/spoke0"]);
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    std::fs::write(
        &stack.fleet.config,
        text.replace(
            "  controller: {port: \"\"}\n",
            "  controller: {port: http}\n",
        ),
    )
    .unwrap();
    let (_, report, err) = stack.rotate_json();
    let all = format!("{report}\n{err}");
    assert!(
        all.contains("503") && all.contains("hub.controller.port to \\\"\\\" or 8080"),
        "{all}"
    );
}

/// Issue 19, item 2, on the real controller run as one that writes no status (before
/// v0.17 without --update-status; here v0.36.6 with --update-status=false): it unseals,
/// and verification says the controller does not report status and the minimum version,
/// instead of a bare timeout.
#[test]
fn a_controller_that_writes_no_status_is_named_as_such() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    stack.hub.start_controller_with(&["--update-status=false"]);
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    std::fs::write(
        &stack.fleet.config,
        text.replace("verify_timeout: 90s", "verify_timeout: 15s"),
    )
    .unwrap();
    let (_, report, err) = stack.rotate_json();
    let synced = &report["spokes"][0]["hub"]["synced"];
    assert_eq!(synced["ok"], false, "{report:#}\n{err}");
    let message = synced["message"].as_str().unwrap();
    // The chart labels the Service app.kubernetes.io/version (issue 19, item 2): a
    // supported version, so the message names the flag, not an upgrade.
    let version = report["sealing"]["controller_version"]
        .as_str()
        .unwrap_or_else(|| panic!("the chart's version label is read: {report:#}"));
    assert!(
        message.contains("--update-status=false")
            && message.contains(&format!("Sealed Secrets v{version}"))
            && !message.contains("does not support"),
        "{message}"
    );
    stack.wait_unsealed(0, Duration::from_secs(30));
}

/// How many ticks a daemon's log says it started.
fn ticks(lines: &support::logs::Lines) -> usize {
    support::logs::count(lines, "tick started")
}

/// The ClusterRoleBindings spokekeeper made on a spoke.
fn our_bindings(api: &KubeApi) -> Vec<String> {
    let list = api.get_json(&[
        "clusterrolebindings",
        "-l",
        "app.kubernetes.io/managed-by=spokekeeper",
    ]);
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// Minted end to end on a real spoke with its real signer: the hub's real controller
/// unseals the minted kubeconfig and Flux's code authenticates as the minted user (not
/// system:masters); a renewal (credential.renew_before reached) mints generation 2 and,
/// once the hub verified it, deletes generation 1's binding, so that credential is
/// refused (403); `spokekeeper revoke` refuses generation 2 at once and mints 3; a
/// reinstalled spoke (new CAs) is minted again (4); the periodic check finds the binding
/// deleted by hand and mints 5. No CSR is left behind, the admin kubeconfig is never
/// committed.
#[test]
fn minted_credentials_renew_revoke_and_survive_a_rebuild() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = Stack::with_signing_spokes(&[true]);
    stack.configure("credential:\n  mode: minted\n  ttl: 1h\n  renew_before: 3590s\n");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert!(
        spoke["user"]
            .as_str()
            .unwrap()
            .starts_with("spokekeeper:hub:spoke0:1:"),
        "{spoke:#}"
    );
    assert_eq!(spoke["credential"]["mode"], "minted", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 1, "{spoke:#}");
    let not_after = time::OffsetDateTime::parse(
        spoke["credential"]["not_after"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert!(
        not_after <= time::OffsetDateTime::now_utc() + time::Duration::hours(1),
        "{spoke:#}"
    );
    assert_ready(spoke, &["Kustomization/flux-system/spoke0"]);
    stack.wait_unsealed(0, Duration::from_secs(60));
    let who = stack
        .hub
        .flux_calls_spoke("flux-system", "spoke0-kubeconfig")
        .unwrap();
    assert!(
        who["username"]
            .as_str()
            .unwrap()
            .starts_with("spokekeeper:hub:spoke0:1:"),
        "{who}"
    );
    assert!(!who.to_string().contains("system:masters"), "{who}");
    let unsealed = String::from_utf8(stack.recovery_unsealed(0)).unwrap();
    let admin = String::from_utf8(stack.fleet.nodes[0].kubeconfig_bytes()).unwrap();
    let admin_cert = admin
        .lines()
        .find(|l| l.contains("client-certificate-data"))
        .unwrap();
    assert!(!unsealed.contains(admin_cert.split_whitespace().last().unwrap()));
    let subject = stack.fleet.remote_log();
    assert!(
        subject[0].contains("minted spokekeeper:hub:spoke0:1:"),
        "{subject:?}"
    );
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g1"]
    );
    let csrs = stack.spoke_apis[0].kubectl(&["get", "csr", "-o", "name"]);
    assert!(!csrs.contains("spokekeeper-"), "{csrs}");
    let gen1 = stack.committed_kubeconfig(0, "gen1.yaml");
    list_namespaces(&gen1).expect("generation 1 works");

    // renew_before (3590s of a 1h certificate) is reached 10s after the mint.
    std::thread::sleep(Duration::from_secs(11));
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["reason"]["kind"], "client-expiring", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 2, "{spoke:#}");
    assert_eq!(
        spoke["revoked"],
        serde_json::json!(["spokekeeper.hub.spoke0.g1"]),
        "{spoke:#}"
    );
    assert_ready(spoke, &["Kustomization/flux-system/spoke0"]);
    stack.wait_unsealed(0, Duration::from_secs(60));
    let refused = list_namespaces(&gen1).expect_err("generation 1 is revoked");
    assert!(
        refused.contains("Forbidden") || refused.contains("forbidden"),
        "{refused}"
    );
    let who = stack
        .hub
        .flux_calls_spoke("flux-system", "spoke0-kubeconfig")
        .unwrap();
    assert!(
        who["username"]
            .as_str()
            .unwrap()
            .starts_with("spokekeeper:hub:spoke0:2:"),
        "{who}"
    );
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g2"]
    );

    // revoke: generation 2 is refused at once, generation 3 is committed and works.
    let gen2 = stack.committed_kubeconfig(0, "gen2.yaml");
    list_namespaces(&gen2).expect("generation 2 works");
    let (code, out, err) = stack.fleet.run(&["revoke", "spoke0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("deleted ClusterRoleBinding spokekeeper.hub.spoke0.g2"),
        "{err}"
    );
    assert!(
        err.contains("minted generation 3 for spokekeeper:hub:spoke0:3:"),
        "{err}"
    );
    assert!(
        err.contains("kubectl auth can-i '*' '*' --as spokekeeper:hub:spoke0:2:"),
        "{err}"
    );
    let refused = list_namespaces(&gen2).expect_err("generation 2 is revoked");
    assert!(refused.to_lowercase().contains("forbidden"), "{refused}");
    stack.wait_unsealed(0, Duration::from_secs(60));
    let gen3 = stack.committed_kubeconfig(0, "gen3.yaml");
    list_namespaces(&gen3).expect("generation 3 works");
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g3"]
    );

    // A reinstall: new CAs; the probe sees it and generation 4 is minted on the new cluster.
    let admin_key_before_rebuild = stack.fleet.nodes[0].parts().client_key_pem.clone();
    stack.rebuild(0, 1);
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["reason"]["kind"], "ca-changed", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 4, "{spoke:#}");
    stack.wait_unsealed(0, Duration::from_secs(60));
    let who = stack
        .hub
        .flux_calls_spoke("flux-system", "spoke0-kubeconfig")
        .unwrap();
    assert!(
        who["username"]
            .as_str()
            .unwrap()
            .starts_with("spokekeeper:hub:spoke0:4:"),
        "{who}"
    );
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g4"]
    );

    // The periodic check (verify_every) looks at the binding with the admin credential:
    // present, nothing to do; deleted by hand, generation 5 is minted.
    stack.configure("verify_every: 1s\n");
    std::thread::sleep(Duration::from_secs(2));
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(report["spokes"][0]["action"], "unchanged", "{report:#}");
    stack.spoke_apis[0].kubectl(&["delete", "clusterrolebinding", "spokekeeper.hub.spoke0.g4"]);
    std::thread::sleep(Duration::from_secs(2));
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["reason"]["kind"], "binding-missing", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 5, "{spoke:#}");
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g5"]
    );
    // Every committed generation unsealed with the controller's keys: the admin keys of
    // both installs and the five minted keys, none of them in plaintext anywhere.
    let mut needles = stack.fleet.key_needles_unsealing(&stack.recovery_keys());
    needles.add_key(&admin_key_before_rebuild);
    assert_eq!(needles.keys(), 2 + 5);
    stack.fleet.assert_no_plaintext_of(&needles);
}

/// Two entries for one real spoke (issue 28, defect 8e): the real API server answers the
/// scoped label selectors, each entry gets its own binding, renewing spoke0 revokes only
/// spoke0's older generation (spoke1's credential keeps working on the real spoke), and
/// `revoke spoke1` leaves spoke0's alone.
#[test]
fn two_entries_on_one_real_spoke_keep_their_own_bindings() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::with_signing_spokes(&[true]);
    let mut text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    let start = text.find("  - name: spoke0\n").unwrap();
    let end = start + text[start..].find("\nhub:\n").unwrap() + 1;
    let second = text[start..end].replace("name: spoke0", "name: spoke1");
    text.insert_str(end, &second);
    std::fs::write(&stack.fleet.config, text).unwrap();
    stack.add_kustomizations(2);
    stack.configure("credential:\n  mode: minted\n");
    let api = &stack.spoke_apis[0];
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let (first0, first1) = (
        stack.committed_kubeconfig(0, "first0.yaml"),
        stack.committed_kubeconfig(1, "first1.yaml"),
    );
    list_namespaces(&first0).expect("spoke0's generation 1 works");
    list_namespaces(&first1).expect("spoke1's generation 1 works");
    assert_eq!(
        our_bindings(api),
        ["spokekeeper.hub.spoke0.g1", "spokekeeper.hub.spoke1.g1"]
    );

    // spoke0 alone renewed.
    let (code, report, err) = stack.fleet.rotate_json(&["spoke0", "--force"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(
        report["spokes"][0]["revoked"],
        serde_json::json!(["spokekeeper.hub.spoke0.g1"]),
        "{report:#}"
    );
    assert_eq!(
        our_bindings(api),
        ["spokekeeper.hub.spoke0.g2", "spokekeeper.hub.spoke1.g1"]
    );
    let refused = list_namespaces(&first0).expect_err("spoke0's generation 1 is revoked");
    assert!(refused.to_lowercase().contains("forbidden"), "{refused}");
    list_namespaces(&first1).expect("spoke1's generation 1 still works");

    let (code, out, err) = stack.fleet.run(&["revoke", "spoke1"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        our_bindings(api),
        ["spokekeeper.hub.spoke0.g2", "spokekeeper.hub.spoke1.g2"]
    );
    let refused = list_namespaces(&first1).expect_err("spoke1's generation 1 is revoked");
    assert!(refused.to_lowercase().contains("forbidden"), "{refused}");
    list_namespaces(&stack.committed_kubeconfig(0, "second0.yaml"))
        .expect("spoke0's generation 2 still works");
    list_namespaces(&stack.committed_kubeconfig(1, "second1.yaml"))
        .expect("spoke1's generation 2 works");
}

/// Pushes, as someone with push access to the fleet repo, spoke i's committed file with
/// its `spokekeeper.io/credential-generation` annotation set to `value`.
fn push_generation(stack: &Stack, i: usize, value: &str) {
    support::git::push_annotation(
        &stack.fleet.remote,
        &stack.hub.dir().join(format!("theirs-{value}")),
        &format!("fluxcd/spoke{i}-kubeconfig-sealed.yaml"),
        "spokekeeper.io/credential-generation",
        value,
    );
}

/// The generation counter against someone with push access to the fleet repo, on a real
/// spoke with its real signer. Frozen (`18446744073709551614`, which saturated to the same
/// user on every mint): a rotation is refused at `mint`, naming the annotation, its value,
/// the file and the fix, and nothing new is bound nor requested; `revoke` still deletes
/// the live binding (its credential gets 403) and binds nothing. Lowered below the live
/// generation: `revoke` deletes the live generation's binding, which the annotation no
/// longer names, says the two disagree, and that credential gets 403, even though the
/// mint after it fails (approvals denied).
#[test]
fn a_frozen_or_lowered_generation_annotation_neither_rebinds_nor_hides_the_live_binding() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::with_signing_spokes(&[true]);
    stack.configure("credential:\n  mode: minted\n  ttl: 1h\n");
    for generation in [1, 2] {
        let (code, report, err) = stack.fleet.rotate_json(&["--all", "--force"]);
        assert_eq!(code, 0, "{report:#}\n{err}");
        let spoke = &report["spokes"][0];
        assert_eq!(spoke["credential"]["generation"], generation, "{spoke:#}");
    }
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g2"]
    );
    let gen2 = stack.committed_kubeconfig(0, "gen2.yaml");
    list_namespaces(&gen2).expect("generation 2 works");
    let api = &stack.spoke_apis[0];
    let csrs = || api.kubectl(&["get", "csr", "-o", "name"]);

    // Frozen: refused, loudly; nothing bound, nothing requested, the commit untouched.
    push_generation(&stack, 0, "18446744073709551614");
    let frozen = stack.fleet.remote_file(0);
    let (code, report, err) = stack.fleet.rotate_json(&["--all", "--force"]);
    assert_ne!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "failed", "{spoke:#}");
    assert_eq!(spoke["stage"], "mint", "{spoke:#}");
    let error = spoke["error"].as_str().unwrap();
    for needle in [
        "refusing to mint for spoke0",
        "fluxcd/spoke0-kubeconfig-sealed.yaml",
        "annotation spokekeeper.io/credential-generation",
        // Shown by its length: a malformed annotation is fleet-repo text, never quoted.
        "20 bytes",
        "git log -p",
    ] {
        assert!(error.contains(needle), "{needle:?} not in {error}");
    }
    assert!(err.contains("refusing to mint"), "no warning logged: {err}");
    assert_eq!(our_bindings(api), ["spokekeeper.hub.spoke0.g2"]);
    assert!(!csrs().contains("spokekeeper-"), "{}", csrs());
    assert_eq!(stack.fleet.remote_file(0), frozen);
    // revoke still revokes: the live binding goes, and no user is bound again.
    let (code, out, err) = stack.fleet.run(&["revoke", "spoke0"]);
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("deleted ClusterRoleBinding spokekeeper.hub.spoke0.g2"),
        "{err}"
    );
    assert_eq!(our_bindings(api), Vec::<String>::new());
    let refused = list_namespaces(&gen2).expect_err("generation 2 is revoked");
    assert!(refused.to_lowercase().contains("forbidden"), "{refused}");
    assert_eq!(stack.fleet.remote_file(0), frozen);

    // Restored: the next generation is above it (3), and works.
    push_generation(&stack, 0, "2");
    let (code, report, err) = stack.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(
        report["spokes"][0]["credential"]["generation"], 3,
        "{report:#}"
    );
    assert_eq!(our_bindings(api), ["spokekeeper.hub.spoke0.g3"]);
    let gen3 = stack.committed_kubeconfig(0, "gen3.yaml");
    list_namespaces(&gen3).expect("generation 3 works");

    // Lowered to 1: revoke deletes generation 3's binding all the same, and says why.
    push_generation(&stack, 0, "1");
    access::deny_csr_approvals(api);
    let (code, out, err) = stack.fleet.run(&["revoke", "spoke0"]);
    assert_ne!(code, 0, "the mint is denied: {out}\n{err}");
    assert!(
        err.contains("deleted ClusterRoleBinding spokekeeper.hub.spoke0.g3"),
        "{err}"
    );
    assert!(
        err.contains(
            "spokekeeper.io/credential-generation says 1, but the spoke bound generations [3]"
        ),
        "{err}"
    );
    assert!(
        err.contains("kubectl auth can-i '*' '*' --as spokekeeper:hub:spoke0:3:"),
        "{err}"
    );
    assert_eq!(our_bindings(api), Vec::<String>::new());
    let refused = list_namespaces(&gen3).expect_err("generation 3 is revoked");
    assert!(refused.to_lowercase().contains("forbidden"), "{refused}");
    assert!(!csrs().contains("spokekeeper-"), "{}", csrs());
    stack.assert_no_plaintext();
}

/// Each way a mint fails on a real spoke stops at stage `mint` with what is missing and
/// the committed credential untouched: no signer (the request is never signed), an
/// approval turned into a denial, an admin credential that may not create bindings, one
/// that may not approve.
#[test]
fn minting_failures_leave_the_committed_credential_untouched() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::with_signing_spokes(&[false, true, true, true]);
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let before: Vec<String> = (0..4).map(|i| stack.fleet.remote_file(i)).collect();
    access::deny_csr_approvals(&stack.spoke_apis[1]);
    let limited = access::limited_admin(
        &stack.spoke_apis[2],
        &stack.fleet.nodes[2],
        Lacking::CreateBinding,
    );
    access::write_k3s_yaml(&stack.fleet.nodes[2], &limited);
    let limited = access::limited_admin(
        &stack.spoke_apis[3],
        &stack.fleet.nodes[3],
        Lacking::Approve,
    );
    access::write_k3s_yaml(&stack.fleet.nodes[3], &limited);
    stack.configure("credential:\n  mode: minted\n");

    let (code, report, err) = stack.rotate_json();
    assert_ne!(code, 0, "{report:#}\n{err}");
    let failed = |i: usize, needles: &[&str]| {
        let spoke = &report["spokes"][i];
        assert_eq!(spoke["action"], "failed", "{spoke:#}");
        assert_eq!(spoke["stage"], "mint", "{spoke:#}");
        assert_eq!(spoke["reason"]["kind"], "config-changed", "{spoke:#}");
        let error = spoke["error"].as_str().unwrap();
        for n in needles {
            assert!(error.contains(n), "{n:?} not in {error}");
        }
        assert_eq!(
            stack.fleet.remote_file(i),
            before[i],
            "spoke{i}'s commit changed"
        );
    };
    failed(
        0,
        &[
            "no certificate within 30s",
            "does not sign kubernetes.io/kube-apiserver-client",
            "/var/lib/rancher/k3s/server/tls/client-ca.nochain.crt",
            "/var/lib/rancher/rke2/agent/pod-manifests/kube-controller-manager.yaml",
            "kubeadm",
        ],
    );
    failed(
        1,
        &[
            "is Denied (LabDenied",
            "the lab denies every client certificate request",
        ],
    );
    failed(2, &["may not create clusterrolebindings", "403"]);
    failed(
        3,
        &[
            "may not update certificatesigningrequests/approval and approve on signers kubernetes.io/kube-apiserver-client",
            "403",
        ],
    );
    // The committed (extracted) credentials still work; no request is left behind.
    for i in 0..4 {
        let who = stack
            .hub
            .flux_calls_spoke("flux-system", &format!("spoke{i}-kubeconfig"))
            .unwrap();
        assert_eq!(who["username"], "system:admin", "{who}");
        let csrs = stack.spoke_apis[i].kubectl(&["get", "csr", "-o", "name"]);
        assert!(!csrs.contains("spokekeeper-"), "{csrs}");
    }
}

/// A spoke whose real kube-controller-manager signs for 24h at most
/// (`--cluster-signing-duration=24h`) while credential.ttl asks 30d: with renew_before
/// 12h the mint warns that it was cut short (and why) and succeeds, and the next tick
/// leaves it alone; with renew_before 2d (not below what is issued) each tick fails at
/// `mint` naming ttl, renew_before, what was issued and the fix, and nothing is
/// committed, bound or left behind: no mint loop.
#[test]
fn a_signer_shorter_than_renew_before_fails_at_mint_instead_of_looping() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::with_limited_signer("24h");
    stack.configure("credential:\n  mode: minted\n  ttl: 30d\n  renew_before: 12h\n");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 1, "{spoke:#}");
    let shortened = spoke["credential"]["shortened"]
        .as_str()
        .unwrap_or_else(|| panic!("{spoke:#}"));
    assert!(
        shortened.contains("for 23h5") && shortened.contains("not the 30d asked"),
        "{shortened}"
    );
    assert!(
        shortened.contains("kube-controller-manager --cluster-signing-duration"),
        "{shortened}"
    );
    assert!(
        err.contains("renewed sooner than credential.ttl implies"),
        "{err}"
    );
    let not_after = time::OffsetDateTime::parse(
        spoke["credential"]["not_after"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let left = not_after - time::OffsetDateTime::now_utc();
    assert!(
        left <= time::Duration::hours(24) && left > time::Duration::hours(23),
        "{spoke:#}"
    );
    let commits = stack.fleet.remote_log().len();
    let committed = stack.fleet.remote_file(0);
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g1"]
    );

    // 23h55m left is more than 12h: nothing to do.
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(report["spokes"][0]["action"], "healthy", "{report:#}");
    assert_eq!(stack.fleet.remote_log().len(), commits);

    // renew_before 2d: every certificate this signer issues is due at once.
    stack.reconfigure("  renew_before: 12h\n", "  renew_before: 2d\n");
    for tick in 0..2 {
        let (code, report, err) = stack.rotate_json();
        assert_ne!(code, 0, "tick {tick}: {report:#}\n{err}");
        let spoke = &report["spokes"][0];
        assert_eq!(spoke["action"], "failed", "tick {tick}: {spoke:#}");
        assert_eq!(spoke["stage"], "mint", "tick {tick}: {spoke:#}");
        assert_eq!(spoke["reason"]["kind"], "client-expiring", "{spoke:#}");
        let error = spoke["error"].as_str().unwrap();
        for needle in [
            "the spoke issued a certificate for 23h5",
            "not the 30d asked (credential.ttl)",
            "kube-controller-manager --cluster-signing-duration",
            "not longer than credential.renew_before (2d)",
            "every tick would mint a new generation",
            "lower credential.renew_before below what is issued, or raise the signer's --cluster-signing-duration",
        ] {
            assert!(
                error.contains(needle),
                "tick {tick}: {needle:?} not in {error}"
            );
        }
        assert_eq!(
            stack.fleet.remote_log().len(),
            commits,
            "tick {tick} committed"
        );
        assert_eq!(stack.fleet.remote_file(0), committed);
        assert_eq!(
            our_bindings(&stack.spoke_apis[0]),
            ["spokekeeper.hub.spoke0.g1"],
            "tick {tick} bound another generation"
        );
        let csrs = stack.spoke_apis[0].kubectl(&["get", "csr", "-o", "name"]);
        assert!(!csrs.contains("spokekeeper-"), "{csrs}");
    }
    // The committed generation still works.
    let gen1 = stack.committed_kubeconfig(0, "gen1.yaml");
    list_namespaces(&gen1).expect("generation 1 works");
    stack.assert_no_plaintext();
}
