//! The tick with `sealing.format: sops`: a spoke's credential is committed as a Secret
//! the real sops CLI (tests/realstack/sops) decrypts with the age key, spokekeeper's
//! annotations readable beside it; observe reads it back (healthy next tick); a change
//! of recipients re-encrypts that spoke alone; minted credentials are encrypted the same.

use std::path::Path;
use std::process::Command;

use spokekeeper::seal::SecretInput;
use spokekeeper::seal::sops::{AgeIdentities, recipients_fingerprint};
use spokekeeper::secret::SecretBytes;

use crate::support::fleet::{Fleet, Openers, action, authenticates, vectors_recovery_keys};
use crate::support::git::git;
use crate::support::{NodeOptions, realstack};

/// An age key pair: its key file (for the real sops) and its recipient.
pub(crate) struct AgeKey {
    pub file: std::path::PathBuf,
    pub recipient: String,
}

impl AgeKey {
    /// The identity, as the leak checks open a sops Secret with it.
    pub(crate) fn identities(&self) -> AgeIdentities {
        AgeIdentities::parse(&SecretBytes::from(std::fs::read(&self.file).unwrap())).unwrap()
    }
}

pub(crate) fn age_key(dir: &Path, name: &str) -> AgeKey {
    let id = age::x25519::Identity::generate();
    let secret = age::secrecy::ExposeSecret::expose_secret(&id.to_string()).to_string();
    let file = dir.join(format!("{name}.agekey"));
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    AgeKey {
        file,
        recipient: id.to_public().to_string(),
    }
}

/// `text` decrypted by the real `sops -d` with only `key`.
pub(crate) fn real_sops_decrypt(dir: &Path, key: &Path, text: &str) -> Result<SecretInput, String> {
    let file = dir.join("committed.sops.yaml");
    std::fs::write(&file, text).unwrap();
    let out = realstack::run(
        Command::new(realstack::bin("sops"))
            .current_dir(dir)
            .env_clear()
            .env("HOME", dir)
            .env("PATH", "/usr/bin:/bin")
            .env("SOPS_AGE_KEY_FILE", key)
            .args(["-d", "--input-type", "yaml", "--output-type", "yaml"])
            .arg(&file),
    );
    std::fs::remove_file(&file).unwrap();
    Ok(SecretInput::parse(out?.as_bytes()).unwrap())
}

/// The fleet's configuration with `sealing` lines, spoke0 alone in sops format.
fn configure(fleet: &Fleet, sealing: &str) {
    let yaml = fleet.builder().sealing(sealing).yaml();
    let yaml = yaml.replacen(
        "  - name: spoke0\n",
        "  - name: spoke0\n    sealing: {format: sops}\n",
        1,
    );
    std::fs::write(&fleet.config, yaml).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tick_in_sops_format_commits_a_secret_the_real_sops_opens() {
    crate::support::requires!(ROOT, REAL_STACK);
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    let keys = tempfile::tempdir().unwrap();
    let (a, b) = (age_key(keys.path(), "a"), age_key(keys.path(), "b"));
    configure(&fleet, &format!("  age_recipients: [{}]\n", a.recipient));
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(action(&report, 0), "rotated", "{report:#}");
    assert_eq!(action(&report, 1), "rotated", "{report:#}");

    // spoke0: a sops Secret at the usual path, opened by the real sops with key a.
    let text = fleet.remote_file(0);
    assert!(text.contains("\nsops:\n"), "{text}");
    assert!(!text.contains("SealedSecret"), "{text}");
    let secret = real_sops_decrypt(keys.path(), &a.file, &text).unwrap();
    assert_eq!(
        (secret.namespace.as_str(), secret.name.as_str()),
        ("flux-system", "spoke0-kubeconfig")
    );
    assert_eq!(secret.labels["reconcile.fluxcd.io/watch"], "Enabled");
    assert_eq!(secret.annotations["spokekeeper.io/spoke"], "spoke0");
    assert_eq!(
        secret.annotations["spokekeeper.io/age-recipients-sha256"],
        recipients_fingerprint([&a.recipient]).to_string()
    );
    assert!(
        !secret
            .annotations
            .contains_key("spokekeeper.io/sealing-cert-sha256")
    );
    let kc = secret.data["value"].clone();
    assert_eq!(authenticates(&kc).await.username, "system:admin");
    // The annotations are readable without the key; the kubeconfig is not.
    assert!(text.contains("spokekeeper.io/spoke: spoke0"), "{text}");
    let plain = std::str::from_utf8(kc.expose()).unwrap();
    let key = plain
        .lines()
        .find_map(|l| l.trim().strip_prefix("client-key-data: "))
        .expect("a client key");
    assert!(!text.contains(key.trim_matches('"')));
    // spoke1 stays a SealedSecret.
    authenticates(&fleet.unsealed(1)).await;
    let body = git(&fleet.remote, &["log", "--format=%B", "main"]);
    assert!(
        body.contains(&format!(
            "encrypted with sops for age recipients {} (flux-system/spoke0-kubeconfig)",
            recipients_fingerprint([&a.recipient])
        )),
        "{body}"
    );

    // Read back next tick: nothing to do for either.
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(action(&report, 0), "healthy", "{report:#}");
    assert_eq!(action(&report, 1), "healthy", "{report:#}");
    let commits = fleet.remote_log().len();

    // Another recipient: spoke0 alone is re-encrypted, for both.
    let sealed1 = fleet.remote_file(1);
    configure(
        &fleet,
        &format!("  age_recipients: [{}, {}]\n", a.recipient, b.recipient),
    );
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(action(&report, 0), "rotated", "{report:#}");
    assert_eq!(
        report["spokes"][0]["reason"]["kind"], "recipients-changed",
        "{report:#}"
    );
    assert_eq!(action(&report, 1), "healthy", "{report:#}");
    let log = fleet.remote_log();
    assert_eq!(log.len(), commits + 1, "{log:?}");
    assert!(
        log[0].starts_with("spoke0: rotate kubeconfig: age recipients changed sha256:"),
        "{log:?}"
    );
    assert_eq!(fleet.remote_file(1), sealed1, "spoke1 byte-identical");
    let text = fleet.remote_file(0);
    for key in [&a, &b] {
        let opened = real_sops_decrypt(keys.path(), &key.file, &text).unwrap();
        assert_eq!(opened.data["value"].expose(), kc.expose());
    }
    let (recovery, ids) = (vectors_recovery_keys(), a.identities());
    fleet.assert_no_plaintext_of(&fleet.key_needles_opening(&Openers {
        recovery: &recovery,
        age: Some(&ids),
    }));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_minted_credential_is_committed_in_sops_format() {
    crate::support::requires!(ROOT, REAL_STACK);
    let fleet = Fleet::with(&[NodeOptions::default()], "credential:\n  mode: minted\n");
    let keys = tempfile::tempdir().unwrap();
    let a = age_key(keys.path(), "a");
    configure(&fleet, &format!("  age_recipients: [{}]\n", a.recipient));
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(action(&report, 0), "rotated", "{report:#}");
    let user = report["spokes"][0]["credential"]["user"].as_str().unwrap();
    assert!(user.starts_with("spokekeeper:hub:spoke0:1:"), "{report:#}");
    let secret = real_sops_decrypt(keys.path(), &a.file, &fleet.remote_file(0)).unwrap();
    assert_eq!(secret.annotations["spokekeeper.io/credential-user"], user);
    let live = authenticates(&secret.data["value"]).await;
    assert_eq!(live.username, user);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(action(&report, 0), "healthy", "{report:#}");
    // The minted key exists only inside the sops file: the leak checks read it there.
    let (recovery, ids) = (vectors_recovery_keys(), a.identities());
    let needles = fleet.key_needles_opening(&Openers {
        recovery: &recovery,
        age: Some(&ids),
    });
    assert_eq!(needles.keys(), 2, "the node's admin key and the minted key");
    fleet.assert_no_plaintext_of(&needles);
}

/// Someone with push access rewrites the pinned recipients file in the fleet repo: the
/// next tick encrypts nothing for the new recipients (the spoke fails at `seal`, its
/// committed credential untouched) and `check` is critical, naming the fix.
#[tokio::test(flavor = "multi_thread")]
async fn a_recipients_file_changed_by_a_push_is_refused_until_pinned() {
    crate::support::requires!(ROOT, REAL_STACK);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    let keys = tempfile::tempdir().unwrap();
    let (a, b) = (age_key(keys.path(), "a"), age_key(keys.path(), "b"));
    std::fs::create_dir_all(fleet.clone.join("keys")).unwrap();
    std::fs::write(
        fleet.clone.join("keys/age.txt"),
        format!("# ops\n{}\n", a.recipient),
    )
    .unwrap();
    git(&fleet.clone, &["add", "-A"]);
    crate::support::git::commit(&fleet.clone, "keys: age recipients");
    git(&fleet.clone, &["push", "--quiet", "origin", "HEAD:main"]);
    let pin_a = recipients_fingerprint([&a.recipient]).to_string();
    let file = fleet.clone.join("keys/age.txt");
    let sealing = |pin: &str| {
        format!(
            "  age_recipients: {}\n  age_sha256: {pin}\n",
            file.display()
        )
    };
    configure(&fleet, &sealing(&pin_a));
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(action(&report, 0), "rotated", "{report:#}");
    let committed = fleet.remote_file(0);

    let other = fleet.dir.path().join("attacker");
    crate::support::git::clone(&fleet.remote, &other);
    std::fs::write(other.join("keys/age.txt"), format!("{}\n", b.recipient)).unwrap();
    git(&other, &["add", "-A"]);
    crate::support::git::commit(&other, "keys: update the age recipients");
    git(&other, &["push", "--quiet", "origin", "HEAD:main"]);
    let head = git(&fleet.remote, &["rev-parse", "main"]);

    let pin_b = recipients_fingerprint([&b.recipient]).to_string();
    let (code, report, err) = fleet.rotate_json(&["--all", "--force"]);
    assert_ne!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["stage"], "seal", "{spoke:#}");
    let error = spoke["error"].as_str().unwrap();
    for needle in [
        "keys/age.txt",
        "not trusted",
        "in the fleet repo",
        &format!("set sealing.age_sha256: {pin_b}"),
    ] {
        assert!(error.contains(needle), "{needle:?} in {error}");
    }
    assert_eq!(
        git(&fleet.remote, &["rev-parse", "main"]),
        head,
        "nothing pushed"
    );
    assert_eq!(fleet.remote_file(0), committed);
    let (code, out, err) = fleet.run(&["check"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains(&format!("set sealing.age_sha256: {pin_b}")),
        "{err}"
    );

    // Pinned by the operator: encrypted for b, which the real sops opens.
    configure(&fleet, &sealing(&pin_b));
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(report["spokes"][0]["reason"]["kind"], "recipients-changed");
    real_sops_decrypt(keys.path(), &b.file, &fleet.remote_file(0)).unwrap();
    assert!(real_sops_decrypt(keys.path(), &a.file, &fleet.remote_file(0)).is_err());
    let (code, out, err) = fleet.run(&["check"]);
    assert_eq!(code, 0, "{out}\n{err}");
}
