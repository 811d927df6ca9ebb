//! verify for a sops output against the emulated hub (the lab's `hub`): its
//! kustomize-controller decrypts with the age identity it holds (spokekeeper's sops
//! decryption, injected as the lab's `SopsKey`), and spokekeeper's hub verification reads
//! what it writes. The real controller is judged in realstack/flux_sops.rs.

use crate::support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spokekeeper::config::Config;
use spokekeeper::hub::verify::{Ask, Delivery, HubReport, verify_sops};
use spokekeeper::hub::{Consumer, Hub, Kind};
use spokekeeper::seal::SecretInput;
use spokekeeper::seal::sops::{self, AgeIdentities, AgeRecipients};
use spokekeeper::secret::SecretBytes;
use spokekeeper_lab::hub::{HubSim, SimSpoke, SopsKey};

const DEV: &str = "fluxcd/sops/dev-kubeconfig.yaml";
/// Outside the decrypting Kustomization's path (./fluxcd/sops).
const TEST: &str = "fluxcd/test-kubeconfig.yaml";

/// The emulated hub with its fleet repo (path -> file) and the age identity its
/// kustomize-controller holds; `dev` and `test` each deployed through its Secret.
struct SopsHub {
    hub: HubSim,
    files: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
    hub_key: age::x25519::Identity,
    dir: tempfile::TempDir,
    // Last: the hub runs on it.
    rt: tokio::runtime::Runtime,
}

/// The lab's kustomize-controller decrypting with `identity`, as spokekeeper decrypts.
fn sops_key(identity: &age::x25519::Identity) -> SopsKey {
    let text = age::secrecy::ExposeSecret::expose_secret(&identity.to_string()).to_string();
    let ids = AgeIdentities::parse(&SecretBytes::from(text)).unwrap();
    Arc::new(move |file: &[u8]| {
        sops::decrypt(file, &ids)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}

fn start() -> SopsHub {
    support::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let files = Arc::new(Mutex::new(BTreeMap::<String, Vec<u8>>::new()));
    let read = files.clone();
    let hub = HubSim::start(
        rt.handle(),
        "kube-system",
        "sealed-secrets-controller",
        spokekeeper_lab::DEMO_CERT_PEM,
        Vec::<spokekeeper::seal::RecoveryKey>::new(),
        Arc::new(move |file: &str| read.lock().unwrap().get(file).cloned()),
    )
    .unwrap();
    for (name, file) in [("dev", DEV), ("test", TEST)] {
        hub.add_spoke(SimSpoke {
            secret_namespace: "flux-system".into(),
            secret_name: format!("{name}-kubeconfig"),
            kustomization_namespace: "flux-system".into(),
            kustomization_name: name.into(),
            file: file.into(),
        });
    }
    let hub_key = age::x25519::Identity::generate();
    hub.add_sops_kustomization(
        "flux-system",
        "sops-secrets",
        "./fluxcd/sops",
        "sops-age",
        sops_key(&hub_key),
    );
    SopsHub {
        hub,
        files,
        hub_key,
        dir: tempfile::tempdir().unwrap(),
        rt,
    }
}

/// A kubeconfig Secret `name` encrypted for `to`, as spokekeeper writes it.
fn encrypted(name: &str, to: &age::x25519::Identity) -> Vec<u8> {
    let input = SecretInput {
        name: format!("{name}-kubeconfig"),
        namespace: "flux-system".into(),
        type_: Some("Opaque".into()),
        data: BTreeMap::from([(
            "value".into(),
            SecretBytes::from(b"apiVersion: v1\nkind: Config\n".to_vec()),
        )]),
        ..SecretInput::default()
    };
    let recipients = AgeRecipients::parse(&[to.to_public().to_string()]).unwrap();
    sops::encrypt(&input, &recipients).unwrap().into_bytes()
}

impl SopsHub {
    fn commit(&self, file: &str, bytes: Vec<u8>) {
        self.files.lock().unwrap().insert(file.into(), bytes);
    }

    /// spokekeeper's verification of dev (sops, in ./fluxcd/sops), its Kustomization
    /// `dev` the consumer.
    fn verify_dev(&self) -> HubReport {
        let kubeconfig = self.dir.path().join("hub.kubeconfig");
        std::fs::write(&kubeconfig, self.hub.kubeconfig_yaml()).unwrap();
        let recipient = self.hub_key.to_public().to_string();
        let text = format!(
            "repo: {{path: fleet}}\nsealing: {{cert: c.pem, age_recipients: [{recipient}]}}\nspokes:\n  - {{name: dev, address: 127.0.0.1, sealing: {{format: sops}}, output: {DEV}}}\nhub: {{kubeconfig: {}}}\n",
            kubeconfig.display()
        );
        let config = Config::parse(&text, "spokekeeper.yaml", self.dir.path()).unwrap();
        let hub_cfg = config.hub.clone().unwrap();
        let consumer = Consumer {
            kind: Kind::Kustomization,
            namespace: "flux-system".into(),
            name: "dev".into(),
        };
        self.rt.block_on(async {
            let hub = Hub::connect(&hub_cfg).await.unwrap();
            verify_sops(
                &hub,
                &config.spokes[0],
                Ok(vec![consumer]),
                Duration::from_secs(20),
                Ask::Now,
            )
            .await
        })
    }

    fn decrypter_ready(&self) -> (String, String, String) {
        let k = self
            .hub
            .kustomization("flux-system", "sops-secrets")
            .unwrap();
        let c = k["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone();
        let s = |f: &str| c[f].as_str().unwrap_or_default().to_string();
        (s("status"), s("reason"), s("message"))
    }
}

#[test]
fn a_sops_file_for_another_recipient_is_a_decryption_failure_not_ready() {
    let lab = start();
    let other = age::x25519::Identity::generate();
    lab.commit(DEV, encrypted("dev", &other));
    let refused = lab.verify_dev();
    let Delivery::Decrypted(check) = &refused.delivery else {
        panic!("{refused:?}");
    };
    assert!(!check.ok, "{refused:?}");
    assert_eq!(check.status, "DecryptionFailed", "{refused:?}");
    assert_eq!(check.reason.as_deref(), Some("BuildFailed"), "{refused:?}");
    assert!(
        check
            .message
            .starts_with("decryption failed for 'Secret.v1.[noGrp]/dev-kubeconfig': failed to decrypt and format 'flux-system/dev-kubeconfig' Secret data: ")
            && check.message.contains(&other.to_public().to_string()),
        "{refused:?}"
    );
    assert!(refused.consumers.is_empty(), "nothing asked: {refused:?}");
    let (status, reason, _) = lab.decrypter_ready();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "BuildFailed"));

    // The same Secret for the hub's own key: decrypted, and its consumer Ready.
    lab.commit(DEV, encrypted("dev", &lab.hub_key));
    let taken = lab.verify_dev();
    assert!(taken.ok(), "{taken:?}");
    assert!(
        matches!(&taken.delivery, Delivery::Decrypted(c) if c.ok),
        "{taken:?}"
    );
    assert_eq!(
        taken.summary(),
        "decrypted, ready: Kustomization flux-system/dev"
    );
    assert_eq!(lab.decrypter_ready().0, "True");
}

#[test]
fn only_the_sops_files_under_the_decrypting_path_are_decrypted() {
    let lab = start();
    // Outside ./fluxcd/sops: not this Kustomization's to decrypt, whatever its key.
    let other = age::x25519::Identity::generate();
    lab.commit(TEST, encrypted("test", &other));
    lab.commit(DEV, encrypted("dev", &lab.hub_key));
    let taken = lab.verify_dev();
    assert!(taken.ok(), "{taken:?}");
    // A file in the path that is no sops file is applied as it is, not decrypted.
    lab.commit(
        DEV,
        b"apiVersion: v1\nkind: Secret\nmetadata:\n  name: dev-kubeconfig\n  namespace: flux-system\ndata:\n  value: eA==\n"
            .to_vec(),
    );
    assert!(lab.verify_dev().ok());
    // Tampered after encryption for the hub's key: refused as well.
    let good = String::from_utf8(encrypted("dev", &lab.hub_key)).unwrap();
    let at = good.find("ENC[AES256_GCM,data:").unwrap() + "ENC[AES256_GCM,data:".len();
    let mut bad = good.into_bytes();
    bad[at] = if bad[at] == b'A' { b'B' } else { b'A' };
    lab.commit(DEV, bad);
    let refused = lab.verify_dev();
    assert_eq!(
        refused.delivery.check().status,
        "DecryptionFailed",
        "{refused:?}"
    );
}
