//! SOPS output on the real-Flux lab (RealFlux, flux_real/): the real kustomize-controller
//! decrypts a Secret spokekeeper encrypted for the hub's age key (`spec.decryption:
//! {provider: sops, secretRef}`), and a Kustomization whose `kubeConfig.secretRef` names
//! the decrypted Secret applies its ConfigMap to the real spoke through it. An altered
//! encrypted value is refused by the controller; an altered readable field is not (Flux
//! does not check the sops MAC), which this holds so the docs stay true.

use crate::support;

use std::collections::BTreeMap;

use spokekeeper::seal::SecretInput;
use spokekeeper::seal::sops::{self, AgeRecipients};
use spokekeeper::secret::SecretBytes;
use support::git::{clone, commit, git};

use support::realstack::flux_controllers as flux;
use support::realstack::real_flux::{AGE_SECRET, RealFlux};

/// The hub's side, as Flux's guide sets it up: the Secret holding the age identity, the
/// Kustomization that decrypts `./sops` onto the hub, and one that deploys
/// `./apps/spoke0-sops` to the spoke through the decrypted kubeconfig.
const KUSTOMIZATIONS: &str = "apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: sops-secrets
  namespace: flux-system
spec:
  interval: 10m
  retryInterval: 3s
  path: ./sops
  prune: true
  timeout: 30s
  sourceRef:
    kind: GitRepository
    name: fleet
  decryption:
    provider: sops
    secretRef:
      name: sops-age
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: spoke0-sops
  namespace: flux-system
spec:
  interval: 10m
  retryInterval: 3s
  path: ./apps/spoke0-sops
  prune: true
  timeout: 30s
  dependsOn:
    - name: sops-secrets
  sourceRef:
    kind: GitRepository
    name: fleet
  kubeConfig:
    secretRef:
      name: spoke0-kubeconfig-sops
";

const CONFIGMAP: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: spoke-app-sops
  namespace: default
data:
  spoke: spoke0-sops
";

/// Writes `files` into a fresh clone of the fleet repo and pushes them.
fn push(stack: &RealFlux, name: &str, files: &[(&str, &str)], message: &str) {
    let work = stack.fleet.dir.path().join(name);
    if !work.exists() {
        clone(&stack.fleet.remote, &work);
    }
    git(&work, &["pull", "--quiet", "--rebase", "origin", "main"]);
    for (rel, text) in files {
        let path = work.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    git(&work, &["add", "-A"]);
    commit(&work, message);
    git(&work, &["push", "--quiet", "origin", "HEAD:main"]);
}

#[test]
fn the_real_kustomize_controller_decrypts_spokekeepers_sops_kubeconfig_and_deploys_through_it() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start(1, false, "");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    stack.assert_deployed(0);
    // The kubeconfig spokekeeper validated for spoke 0, as the hub holds it.
    let kubeconfig = stack
        .hub
        .secret_value("flux-system", "spoke0-kubeconfig", "value")
        .expect("the unsealed kubeconfig");

    // Encrypted for the hub's age key and an operator's, as spokekeeper writes sops.
    let hub_key = age::x25519::Identity::generate();
    let operator = age::x25519::Identity::generate();
    let encrypted = sops_kubeconfig(&kubeconfig, &[&hub_key, &operator]);
    flux::age_secret(&stack.hub, AGE_SECRET, &hub_key);

    a_flipped_byte_is_refused(&stack, &encrypted);

    // A readable field changed after encryption: kustomize-controller does not check the
    // sops MAC (its checkSopsMac is off, as Flux documents), so it applies it. sops -d
    // refuses the same file (sops_real.rs); docs/sealing.md and SECURITY.md say so.
    let renamed = encrypted.replace(
        "spokekeeper.io/spoke: spoke0",
        "spokekeeper.io/spoke: spoke1",
    );
    assert_ne!(renamed, encrypted);
    push(
        &stack,
        "sops-work",
        &[("sops/spoke0-kubeconfig.yaml", &renamed)],
        "sops: an annotation changed after encryption",
    );
    stack.wait_for(
        "kustomization",
        "sops-secrets",
        "the renamed file applied",
        |r| r.status == "True",
    );
    let annotations =
        stack
            .hub
            .api
            .get_json(&["secret", "spoke0-kubeconfig-sops", "-n", "flux-system"]);
    assert_eq!(
        annotations["metadata"]["annotations"]["spokekeeper.io/spoke"], "spoke1",
        "{annotations:#}"
    );

    // The file as spokekeeper wrote it: decrypted onto the hub, then used to deploy.
    push(
        &stack,
        "sops-work",
        &[("sops/spoke0-kubeconfig.yaml", &encrypted)],
        "sops: spoke0's kubeconfig for the hub's age key",
    );
    stack.wait_for("kustomization", "sops-secrets", "the original annotation back", |_| {
        stack.hub.api.get_json(&["secret", "spoke0-kubeconfig-sops", "-n", "flux-system"])
            ["metadata"]["annotations"]["spokekeeper.io/spoke"]
            == "spoke0"
    });
    stack.wait_ready("kustomization", "sops-secrets", None);
    let on_hub = stack
        .hub
        .secret_value("flux-system", "spoke0-kubeconfig-sops", "value")
        .expect("the decrypted Secret");
    assert!(
        on_hub == kubeconfig,
        "the controller decrypted another value"
    );
    stack.wait_ready("kustomization", "spoke0-sops", None);
    let app = stack.spoke_apis[0].get_json(&[
        "configmap",
        "spoke-app-sops",
        "-n",
        "default",
        "--show-managed-fields",
    ]);
    assert_eq!(app["data"]["spoke"], "spoke0-sops", "{app:#}");
    let managers: Vec<&str> = app["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, ["kustomize-controller"], "{app:#}");
}

/// spokekeeper's hub verification for a sops output, judged by the real
/// kustomize-controller: a file encrypted to another age key than the hub's is reported
/// as `DecryptionFailed` with what the controller wrote (Ready False, BuildFailed, its
/// "decryption failed" message), and nothing further is asked; the file encrypted to the
/// hub's key is `decrypted`, and the spoke's consumer Ready.
#[test]
fn hub_verification_reports_a_sops_file_the_real_controller_cannot_decrypt() {
    crate::support::requires!(ROOT, REAL_STACK);
    use spokekeeper::hub::verify::{Ask, Delivery, verify_sops};
    use spokekeeper::hub::{Consumer, Hub, Kind};
    use std::time::Duration;

    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let stack = RealFlux::start(1, false, "");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let kubeconfig = stack
        .hub
        .secret_value("flux-system", "spoke0-kubeconfig", "value")
        .expect("the unsealed kubeconfig");
    let hub_key = age::x25519::Identity::generate();
    let other_key = age::x25519::Identity::generate();
    let encrypt_to = |key: &age::x25519::Identity| sops_kubeconfig(&kubeconfig, &[key]);
    flux::age_secret(&stack.hub, AGE_SECRET, &hub_key);

    let (hub_cfg, spoke) = sops_spoke(&stack);
    let consumer = Consumer {
        kind: Kind::Kustomization,
        namespace: "flux-system".into(),
        name: "spoke0-sops".into(),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let verify = || {
        rt.block_on(async {
            let hub = Hub::connect(&hub_cfg).await.unwrap();
            let consumers = Ok(vec![consumer.clone()]);
            verify_sops(&hub, &spoke, consumers, Duration::from_secs(90), Ask::Now).await
        })
    };

    // Encrypted to a key the hub does not hold.
    push(
        &stack,
        "sops-work",
        &[
            ("sops/spoke0-kubeconfig.yaml", &encrypt_to(&other_key)),
            ("apps/spoke0-sops/configmap.yaml", CONFIGMAP),
            ("fluxcd/sops.yaml", KUSTOMIZATIONS),
        ],
        "sops: spoke0's kubeconfig for another age key",
    );
    stack.wait_for(
        "kustomization",
        "sops-secrets",
        "applied by the root",
        |_| true,
    );
    let refused = verify();
    let Delivery::Decrypted(check) = &refused.delivery else {
        panic!("{refused:?}");
    };
    assert_eq!(check.status, "DecryptionFailed", "{refused:?}");
    assert_eq!(check.reason.as_deref(), Some("BuildFailed"), "{refused:?}");
    assert!(
        check.message.starts_with("decryption failed for '")
            && check.message.contains("spoke0-kubeconfig-sops"),
        "{refused:?}"
    );
    assert!(refused.consumers.is_empty(), "nothing asked: {refused:?}");
    assert!(
        refused.summary().starts_with("not decrypted: "),
        "{}",
        refused.summary()
    );

    // Encrypted to the hub's key: decrypted, and the spoke's consumer deploys with it.
    push(
        &stack,
        "sops-work",
        &[("sops/spoke0-kubeconfig.yaml", &encrypt_to(&hub_key))],
        "sops: spoke0's kubeconfig for the hub's age key",
    );
    let taken = verify();
    assert!(taken.ok(), "{taken:?}");
    assert!(
        matches!(&taken.delivery, Delivery::Decrypted(c) if c.ok),
        "{taken:?}"
    );
    assert_eq!(taken.consumers.len(), 1, "{taken:?}");
    assert!(
        taken
            .summary()
            .starts_with("decrypted, ready: Kustomization flux-system/spoke0-sops"),
        "{}",
        taken.summary()
    );
    let on_hub = stack
        .hub
        .secret_value("flux-system", "spoke0-kubeconfig-sops", "value")
        .expect("the decrypted Secret");
    assert!(
        on_hub == kubeconfig,
        "the controller decrypted another value"
    );
}

/// spoke0's kubeconfig as spokekeeper writes it in sops format, for `recipients`.
fn sops_kubeconfig(kubeconfig: &[u8], recipients: &[&age::x25519::Identity]) -> String {
    let recipients = AgeRecipients::parse(
        &recipients
            .iter()
            .map(|r| r.to_public().to_string())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let input = SecretInput {
        name: "spoke0-kubeconfig-sops".into(),
        namespace: "flux-system".into(),
        type_: Some("Opaque".into()),
        annotations: BTreeMap::from([("spokekeeper.io/spoke".into(), "spoke0".into())]),
        data: BTreeMap::from([("value".into(), SecretBytes::from(kubeconfig.to_vec()))]),
        ..SecretInput::default()
    };
    sops::encrypt(&input, &recipients).unwrap()
}

/// The stack's hub configuration, and spoke0's entry with its sops Secret and output.
fn sops_spoke(
    stack: &RealFlux,
) -> (
    spokekeeper::config::HubConfig,
    spokekeeper::config::SpokeConfig,
) {
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    let config =
        spokekeeper::config::Config::parse(&text, "spokekeeper.yaml", stack.fleet.dir.path())
            .unwrap();
    let mut spoke = config.spokes[0].clone();
    spoke.secret.name = "spoke0-kubeconfig-sops".into();
    spoke.output = "sops/spoke0-kubeconfig.yaml".into();
    (config.hub.unwrap(), spoke)
}

/// A flipped byte in the encrypted value: AES-GCM refuses it, nothing reaches the hub.
fn a_flipped_byte_is_refused(stack: &RealFlux, encrypted: &str) {
    let at = encrypted.find("    value: ENC[AES256_GCM,data:").unwrap() + 31;
    let mut flipped = encrypted.to_string().into_bytes();
    flipped[at] = if flipped[at] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).unwrap();
    push(
        stack,
        "sops-work",
        &[
            ("sops/spoke0-kubeconfig.yaml", &flipped),
            ("apps/spoke0-sops/configmap.yaml", CONFIGMAP),
            ("fluxcd/sops.yaml", KUSTOMIZATIONS),
        ],
        "sops: spoke0's kubeconfig for the hub's age key (a value altered)",
    );
    let refused = stack.wait_for(
        "kustomization",
        "sops-secrets",
        "the decryption failure",
        |r| r.status == "False" && r.message.contains("failed to decrypt"),
    );
    assert!(
        refused.message.contains("spoke0-kubeconfig-sops"),
        "{refused:?}"
    );
    let absent = |stack: &RealFlux| {
        stack
            .hub
            .secret_value("flux-system", "spoke0-kubeconfig-sops", "value")
            .is_none()
    };
    assert!(absent(stack), "nothing decrypted from an altered value");
}
