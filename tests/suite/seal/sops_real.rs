//! SOPS output judged by the real sops CLI (built from its pinned Go module,
//! tests/realstack/sops): `sops -d` decrypts what spokekeeper writes, for one and several
//! age recipients, with and without a `.sops.yaml`; spokekeeper decrypts what `sops -e`
//! encrypts; a tampered value or MAC is refused by both. No skips: a missing binary fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use proptest::prelude::*;
use spokekeeper::seal::SecretInput;
use spokekeeper::seal::sops::{self, AgeIdentities, AgeRecipients, SopsError};
use spokekeeper::secret::SecretBytes;

use crate::support::realstack;

/// One age key pair: its key file (written for the real sops) and its recipient.
struct Key {
    file: PathBuf,
    recipient: String,
    identities: AgeIdentities,
}

fn key(dir: &Path, name: &str) -> Key {
    let id = age::x25519::Identity::generate();
    let secret = age::secrecy::ExposeSecret::expose_secret(&id.to_string()).to_string();
    let text = format!("# test key {name}\n{secret}\n");
    let file = dir.join(format!("{name}.agekey"));
    std::fs::write(&file, &text).unwrap();
    Key {
        file,
        recipient: id.to_public().to_string(),
        identities: AgeIdentities::parse(&SecretBytes::from(text)).unwrap(),
    }
}

fn secret(data: &[(&str, &[u8])]) -> SecretInput {
    SecretInput {
        name: "spoke-a-kubeconfig".into(),
        namespace: "flux-system".into(),
        labels: BTreeMap::from([("app.kubernetes.io/managed-by".into(), "spokekeeper".into())]),
        annotations: BTreeMap::from([(
            "spokekeeper.io/ca-sha256".into(),
            "sha256:0123456789abcdef".into(),
        )]),
        type_: Some("Opaque".into()),
        data: data
            .iter()
            .map(|(k, v)| (k.to_string(), SecretBytes::from(v.to_vec())))
            .collect(),
        ..SecretInput::default()
    }
}

/// The real sops in `dir` (where a `.sops.yaml` may be), with only `key`'s identity.
fn sops(dir: &Path, key: &Path) -> Command {
    let mut cmd = Command::new(realstack::bin("sops"));
    cmd.current_dir(dir)
        .env_clear()
        .env("HOME", dir)
        .env("PATH", "/usr/bin:/bin")
        .env("SOPS_AGE_KEY_FILE", key);
    cmd
}

fn real_decrypt(dir: &Path, key: &Path, file: &str) -> Result<SecretInput, String> {
    let out = realstack::run(sops(dir, key).args([
        "-d",
        "--input-type",
        "yaml",
        "--output-type",
        "yaml",
        file,
    ]))?;
    Ok(SecretInput::parse(out.as_bytes()).unwrap())
}

fn same(a: &SecretInput, b: &SecretInput) {
    assert_eq!(a.name, b.name);
    assert_eq!(a.namespace, b.namespace);
    assert_eq!(a.labels, b.labels);
    assert_eq!(a.annotations, b.annotations);
    assert_eq!(a.type_, b.type_);
    let keys = |s: &SecretInput| s.data.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(a), keys(b));
    for (k, v) in &a.data {
        assert!(v.expose() == b.data[k].expose(), "data.{k} differs");
    }
}

const KUBECONFIG: &[u8] =
    b"apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    client-key-data: c2VjcmV0\n";

#[test]
fn real_sops_decrypts_spokekeeper_output_for_each_recipient() {
    crate::support::requires!(REAL_STACK);
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (key(dir.path(), "a"), key(dir.path(), "b"));
    let input = secret(&[("value", KUBECONFIG), ("empty", b"")]);
    for recipients in [vec![&a], vec![&a, &b]] {
        let given: Vec<&str> = recipients.iter().map(|k| k.recipient.as_str()).collect();
        let out = sops::encrypt(&input, &AgeRecipients::parse(&given).unwrap()).unwrap();
        std::fs::write(dir.path().join("out.yaml"), &out).unwrap();
        for k in &recipients {
            let back = real_decrypt(dir.path(), &k.file, "out.yaml").unwrap();
            same(&input, &back);
        }
        if recipients.len() == 1 {
            let err = real_decrypt(dir.path(), &b.file, "out.yaml").unwrap_err();
            assert!(err.contains("Failed to get the data key"), "{err}");
        }
    }
}

#[test]
fn real_sops_with_a_sops_yaml_and_spokekeeper_agree_both_ways() {
    crate::support::requires!(REAL_STACK);
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (key(dir.path(), "a"), key(dir.path(), "b"));
    std::fs::create_dir(dir.path().join("clusters")).unwrap();
    std::fs::write(
        dir.path().join(".sops.yaml"),
        format!(
            "creation_rules:\n  - path_regex: clusters/.*\\.yaml$\n    encrypted_regex: ^(data|stringData)$\n    age: {},{}\n",
            a.recipient, b.recipient
        ),
    )
    .unwrap();
    let input = secret(&[("value", KUBECONFIG)]);
    // spokekeeper writes, sops (with the config present) reads.
    let out = sops::encrypt(
        &input,
        &AgeRecipients::parse(&[&a.recipient, &b.recipient]).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.path().join("clusters/mine.yaml"), &out).unwrap();
    same(
        &input,
        &real_decrypt(dir.path(), &b.file, "clusters/mine.yaml").unwrap(),
    );
    // sops writes by its creation rule, spokekeeper reads.
    std::fs::write(
        dir.path().join("clusters/theirs.yaml"),
        input.to_yaml().expose(),
    )
    .unwrap();
    realstack::run(sops(dir.path(), &a.file).args(["-e", "-i", "clusters/theirs.yaml"])).unwrap();
    let theirs = std::fs::read(dir.path().join("clusters/theirs.yaml")).unwrap();
    assert!(!String::from_utf8_lossy(&theirs).contains("c2VjcmV0"));
    for k in [&a, &b] {
        same(&input, &sops::decrypt(&theirs, &k.identities).unwrap());
    }
    let meta = sops::metadata(&theirs).unwrap();
    assert_eq!(meta.recipients, [a.recipient.clone(), b.recipient.clone()]);
}

#[test]
fn spokekeeper_decrypts_what_real_sops_encrypts_by_default_rules() {
    crate::support::requires!(REAL_STACK);
    // No rule: sops encrypts every value but those under keys ending in _unencrypted.
    let dir = tempfile::tempdir().unwrap();
    let a = key(dir.path(), "a");
    let input = secret(&[("value", KUBECONFIG), ("other", b"x")]);
    std::fs::write(dir.path().join("s.yaml"), input.to_yaml().expose()).unwrap();
    let enc =
        realstack::run(sops(dir.path(), &a.file).args(["-e", "--age", &a.recipient, "s.yaml"]))
            .unwrap();
    assert!(enc.contains("kind: ENC[AES256_GCM"), "{enc}");
    same(
        &input,
        &sops::decrypt(enc.as_bytes(), &a.identities).unwrap(),
    );
}

#[test]
fn a_tampered_value_or_mac_is_refused_by_both() {
    crate::support::requires!(REAL_STACK);
    let dir = tempfile::tempdir().unwrap();
    let a = key(dir.path(), "a");
    let input = secret(&[("value", KUBECONFIG)]);
    let out = sops::encrypt(&input, &AgeRecipients::parse(&[&a.recipient]).unwrap()).unwrap();
    let meta = sops::metadata(out.as_bytes()).unwrap();
    let mac_at = out.find("    mac: ENC[AES256_GCM,data:").unwrap() + 29;
    let value_at = out.find("    value: ENC[AES256_GCM,data:").unwrap() + 31;
    let flip = |at: usize| {
        let mut b = out.clone().into_bytes();
        b[at] = if b[at] == b'A' { b'B' } else { b'A' };
        String::from_utf8(b).unwrap()
    };
    let cases: [(&str, String, &str); 5] = [
        ("value", flip(value_at), "Could not decrypt value"),
        ("mac", flip(mac_at), "Cannot decrypt MAC"),
        (
            "name",
            out.replace("name: spoke-a-kubeconfig", "name: spoke-b-kubeconfig"),
            "MAC mismatch",
        ),
        (
            "annotation",
            out.replace("sha256:0123456789abcdef", "sha256:fedcba9876543210"),
            "MAC mismatch",
        ),
        (
            "lastmodified",
            out.replace(&meta.lastmodified, "2020-01-01T00:00:00Z"),
            "Cannot decrypt MAC",
        ),
    ];
    for (what, text, sops_says) in cases {
        assert_ne!(text, out, "{what}: nothing was changed");
        std::fs::write(dir.path().join("t.yaml"), &text).unwrap();
        let err = real_decrypt(dir.path(), &a.file, "t.yaml").unwrap_err();
        assert!(err.contains(sops_says), "{what}: sops said {err}");
        let ours = sops::decrypt(text.as_bytes(), &a.identities).unwrap_err();
        assert!(
            matches!(
                ours,
                SopsError::Altered { .. } | SopsError::MacAltered | SopsError::MacMismatch
            ),
            "{what}: spokekeeper said {ours}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Any data keys and values: the real sops gives back exactly what was encrypted.
    #[test]
    fn real_sops_round_trips_any_data(
        data in prop::collection::btree_map("[a-zA-Z0-9._-]{1,20}", prop::collection::vec(any::<u8>(), 0..200), 1..5),
    ) {
        crate::support::requires!(proptest: REAL_STACK);
        let dir = tempfile::tempdir().unwrap();
        let a = key(dir.path(), "a");
        let pairs: Vec<(&str, &[u8])> = data.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
        let input = secret(&pairs);
        let out = sops::encrypt(&input, &AgeRecipients::parse(&[&a.recipient]).unwrap()).unwrap();
        std::fs::write(dir.path().join("p.yaml"), &out).unwrap();
        same(&input, &real_decrypt(dir.path(), &a.file, "p.yaml").unwrap());
        same(&input, &sops::decrypt(out.as_bytes(), &a.identities).unwrap());
    }
}

/// The fleet repo's plaintext guard commits sops files, spokekeeper's and the real sops'
/// alike, and refuses one whose value under data was put back in the clear.
#[tokio::test]
async fn the_plaintext_guard_commits_sops_files_and_refuses_a_clear_value() {
    crate::support::requires!(REAL_STACK);
    use spokekeeper::repo::{Repo, RepoError};
    let dir = tempfile::tempdir().unwrap();
    let (_remote, clones) = crate::support::git::fleet_remote(dir.path(), 1);
    let repo = Repo::open(&crate::support::git::repo_config(&clones[0], None))
        .await
        .unwrap();
    let a = key(dir.path(), "a");
    let input = secret(&[("value", KUBECONFIG)]);
    let ours = sops::encrypt(&input, &AgeRecipients::parse(&[&a.recipient]).unwrap()).unwrap();
    std::fs::write(dir.path().join("plain.yaml"), input.to_yaml().expose()).unwrap();
    let theirs = realstack::run(sops(dir.path(), &a.file).args([
        "-e",
        "--age",
        &a.recipient,
        "--encrypted-regex",
        "^(data|stringData)$",
        "plain.yaml",
    ]))
    .unwrap();
    for (file, text) in [("ours.yaml", &ours), ("theirs.yaml", &theirs)] {
        repo.write_atomic(Path::new(file), text.as_bytes()).unwrap();
        repo.commit(Path::new(file), "sops output").await.unwrap();
    }
    // One value replaced by its plaintext base64, the rest of the file intact.
    let start = ours.find("    value: ").unwrap() + 11;
    let end = start + ours[start..].find('\n').unwrap();
    let leaked = format!("{}{}{}", &ours[..start], "c2VjcmV0", &ours[end..]);
    repo.write_atomic(Path::new("leaked.yaml"), leaked.as_bytes())
        .unwrap();
    let err = repo
        .commit(Path::new("leaked.yaml"), "leak")
        .await
        .unwrap_err();
    assert!(matches!(err, RepoError::Plaintext { .. }), "{err}");
    assert!(err.to_string().contains("not ENC[AES256_GCM"), "{err}");
}

/// The case the property test found: the real `sops -d` writes `"\t\n"` back as null
/// when it writes YAML (JSON keeps it), so spokekeeper refuses to write it at all; the
/// same value without the tab goes through the real sops unchanged.
#[test]
fn a_tab_with_a_line_break_sops_loses_is_refused_and_a_line_break_alone_is_not() {
    crate::support::requires!(REAL_STACK);
    let dir = tempfile::tempdir().unwrap();
    let a = key(dir.path(), "a");
    let recipients = AgeRecipients::parse(&[&a.recipient]).unwrap();
    let mut input = secret(&[("value", b"v")]);
    input.annotations = BTreeMap::from([("-/-".to_string(), "\t\n".to_string())]);
    let err = sops::encrypt(&input, &recipients).unwrap_err();
    assert!(matches!(err, SopsError::Unwritable { .. }), "{err}");
    input.annotations = BTreeMap::from([("-/-".to_string(), "\n".to_string())]);
    let out = sops::encrypt(&input, &recipients).unwrap();
    std::fs::write(dir.path().join("p.yaml"), &out).unwrap();
    same(
        &input,
        &real_decrypt(dir.path(), &a.file, "p.yaml").unwrap(),
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Readable fields of any text (quotes, colons, `#`, leading spaces, line breaks,
    /// unicode) are written so that the real sops reads back the very strings the MAC
    /// was computed over.
    #[test]
    fn real_sops_reads_any_annotation_as_written(
        annotations in prop::collection::btree_map(
            "[a-z0-9.-]{1,12}/[a-zA-Z0-9_.-]{1,16}",
            "(\\PC|[ \\n\\t:#'\"|>-]){0,40}",
            1..4,
        ),
    ) {
        crate::support::requires!(proptest: REAL_STACK);
        let dir = tempfile::tempdir().unwrap();
        let a = key(dir.path(), "a");
        let mut input = secret(&[("value", b"v")]);
        input.annotations = annotations;
        let written = sops::encrypt(&input, &AgeRecipients::parse(&[&a.recipient]).unwrap());
        // What the real sops writes back as null is refused (a_readable_value_sops_would_
        // write_back_as_null_is_refused); everything else must come back as written.
        let loses = |v: &String| v.contains('\t') && (v.contains('\n') || v.contains('\r'));
        if input.annotations.values().any(loses) {
            let refused = matches!(written, Err(SopsError::Unwritable { .. }));
            prop_assert!(refused);
            return Ok(());
        }
        let out = written.unwrap();
        std::fs::write(dir.path().join("p.yaml"), &out).unwrap();
        let back = real_decrypt(dir.path(), &a.file, "p.yaml");
        prop_assert!(back.is_ok(), "{:?}\n{}", back.err(), out);
        same(&input, &back.unwrap());
        same(&input, &sops::decrypt(out.as_bytes(), &a.identities).unwrap());
    }
}

/// Issue 40 (13): the real sops on spokekeeper's output. `sops updatekeys` refuses it
/// without a `.sops.yaml`; with the rule docs/sealing.md shows it adds a recipient, whose
/// identity then opens the file in sops and in spokekeeper alike; `sops edit` changes a
/// value, the annotations stay readable and spokekeeper decrypts the edit.
#[test]
fn sops_edit_and_updatekeys_with_the_documented_rule_work_on_spokekeepers_output() {
    crate::support::requires!(REAL_STACK);
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (key(dir.path(), "a"), key(dir.path(), "b"));
    let input = secret(&[("value", KUBECONFIG)]);
    let out = sops::encrypt(&input, &AgeRecipients::parse(&[&a.recipient]).unwrap()).unwrap();
    std::fs::create_dir(dir.path().join("fluxcd")).unwrap();
    let file = "fluxcd/spoke-a-kubeconfig-sealed.yaml";
    std::fs::write(dir.path().join(file), &out).unwrap();
    let updatekeys = || realstack::run(sops(dir.path(), &a.file).args(["updatekeys", "-y", file]));
    let err = updatekeys().unwrap_err();
    assert!(err.to_lowercase().contains("config"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join(file)).unwrap(),
        out,
        "unchanged"
    );

    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sealing.md"))
            .unwrap();
    let start = docs
        .find("creation_rules:\n  - path_regex: fluxcd/")
        .expect("the docs' rule");
    let rule = &docs[start..start + docs[start..].find("```").unwrap()];
    let rule = rule.replace(
        "age1hub...,age1recovery...",
        &format!("{},{}", a.recipient, b.recipient),
    );
    std::fs::write(dir.path().join(".sops.yaml"), rule).unwrap();
    updatekeys().unwrap();
    let updated = std::fs::read(dir.path().join(file)).unwrap();
    let meta = sops::metadata(&updated).unwrap();
    assert_eq!(meta.recipients, [a.recipient.clone(), b.recipient.clone()]);
    same(&input, &real_decrypt(dir.path(), &b.file, file).unwrap());
    same(&input, &sops::decrypt(&updated, &b.identities).unwrap());

    // sops edit, with an editor that replaces the value (base64 "edited").
    let editor = dir.path().join("editor");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/^\\( *value: \\).*/\\1ZWRpdGVk/' \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    realstack::run(
        sops(dir.path(), &b.file)
            .env("EDITOR", &editor)
            .args(["edit", file]),
    )
    .unwrap();
    let edited = std::fs::read(dir.path().join(file)).unwrap();
    let text = String::from_utf8_lossy(&edited);
    assert!(
        text.contains("spokekeeper.io/ca-sha256: sha256:0123456789abcdef"),
        "{text}"
    );
    assert!(!text.contains("ZWRpdGVk"), "the edit is encrypted: {text}");
    let back = sops::decrypt(&edited, &a.identities).unwrap();
    assert_eq!(back.data["value"].expose(), b"edited");
    assert_eq!(back.annotations, input.annotations);
}
