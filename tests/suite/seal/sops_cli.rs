//! `spokekeeper seal --format sops` and `unseal --age-key` through the binary, with the
//! real sops CLI on the other side, and their refusals (each names the flag and the fix,
//! never a key or a value).

use std::path::Path;

use super::bin;
use assert_cmd::Command;
use spokekeeper::seal::SecretInput;

use crate::support::realstack;

const SECRET: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: dev-kubeconfig\n  namespace: flux-system\nstringData:\n  value: hello-kubeconfig\n";

/// A key pair: (key file path, recipient).
fn key(dir: &Path, name: &str) -> (std::path::PathBuf, String) {
    let id = age::x25519::Identity::generate();
    let secret = age::secrecy::ExposeSecret::expose_secret(&id.to_string()).to_string();
    let file = dir.join(format!("{name}.agekey"));
    std::fs::write(&file, format!("# {name}\n{secret}\n")).unwrap();
    (file, id.to_public().to_string())
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn seal_format_sops_is_read_by_real_sops_and_unseal_reads_real_sops() {
    crate::support::requires!(REAL_STACK);
    let dir = tempfile::tempdir().unwrap();
    let (a_key, a) = key(dir.path(), "a");
    let (b_key, b) = key(dir.path(), "b");
    std::fs::write(
        dir.path().join("recipients.txt"),
        format!("# team b\n{b}\n"),
    )
    .unwrap();
    let (code, out, err) = run(bin()
        .args(["seal", "--format", "sops", "--age", &a, "--age-file"])
        .arg(dir.path().join("recipients.txt"))
        .write_stdin(SECRET));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("encrypted for {a}, {b}")), "{err}");
    assert!(
        !out.contains("hello-kubeconfig") && !out.contains("aGVsbG8ta3ViZWNvbmZpZw"),
        "{out}"
    );
    std::fs::write(dir.path().join("dev.sops.yaml"), &out).unwrap();
    for k in [&a_key, &b_key] {
        let plain = realstack::run(
            std::process::Command::new(realstack::bin("sops"))
                .current_dir(dir.path())
                .env_clear()
                .env("HOME", dir.path())
                .env("SOPS_AGE_KEY_FILE", k)
                .args(["-d", "dev.sops.yaml"]),
        )
        .unwrap();
        let back = SecretInput::parse(plain.as_bytes()).unwrap();
        assert_eq!(back.data["value"].expose(), b"hello-kubeconfig");
        assert_eq!(back.name, "dev-kubeconfig");
    }
    // The other way: the real sops encrypts, `unseal --age-key` decrypts.
    std::fs::write(dir.path().join("plain.yaml"), SECRET).unwrap();
    let enc = realstack::run(
        std::process::Command::new(realstack::bin("sops"))
            .current_dir(dir.path())
            .env_clear()
            .env("HOME", dir.path())
            .args([
                "-e",
                "--age",
                &b,
                "--encrypted-regex",
                "^(data|stringData)$",
                "plain.yaml",
            ]),
    )
    .unwrap();
    let (code, out, err) = run(bin()
        .args(["unseal", "--age-key"])
        .arg(&b_key)
        .write_stdin(enc.clone()));
    assert_eq!(code, 0, "{err}");
    let back = SecretInput::parse(out.as_bytes()).unwrap();
    assert_eq!(back.data["value"].expose(), b"hello-kubeconfig");
    // A tampered file is refused, naming the MAC.
    let tampered = enc.replace("name: dev-kubeconfig", "name: prod-kubeconfig");
    let (code, out, err) = run(bin()
        .args(["unseal", "--age-key"])
        .arg(&b_key)
        .write_stdin(tampered));
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains("MAC mismatch"), "{err}");
    // The wrong key names the file's recipients.
    let (code, _, err) = run(bin()
        .args(["unseal", "--age-key"])
        .arg(&a_key)
        .write_stdin(enc));
    assert_eq!(code, 1);
    assert!(
        err.contains("no age identity decrypted") && err.contains(&b),
        "{err}"
    );
}

#[test]
fn sops_flags_are_refused_where_they_do_not_apply() {
    let dir = tempfile::tempdir().unwrap();
    let (key_file, a) = key(dir.path(), "a");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["seal".into()],
            "seal needs --cert CERT (Sealed Secrets), or --format sops",
        ),
        (
            vec!["seal".into(), "--format".into(), "sops".into()],
            "no age recipient given",
        ),
        (
            vec!["seal".into(), "--age".into(), a.clone()],
            "--age does not apply to --format sealed-secrets: add --format sops",
        ),
        (
            vec![
                "seal".into(),
                "--format".into(),
                "sops".into(),
                "--age".into(),
                a.clone(),
                "--scope".into(),
                "cluster-wide".into(),
            ],
            "--scope does not apply to --format sops",
        ),
        (
            vec![
                "seal".into(),
                "--format".into(),
                "sops".into(),
                "--age".into(),
                "age1notakey".into(),
            ],
            "--age: age recipient #1 is not an age X25519 recipient",
        ),
        (
            vec![
                "-o".into(),
                "json".into(),
                "seal".into(),
                "--format".into(),
                "sops".into(),
                "--age".into(),
                a.clone(),
            ],
            "-o json/table does not apply to --format sops",
        ),
    ];
    for (args, needle) in cases {
        let (code, out, err) = run(bin().args(&args).write_stdin(SECRET));
        assert_eq!((code, out.as_str()), (1, ""), "{args:?}: {err}");
        assert!(
            err.contains(needle),
            "{args:?}: expected {needle:?} in {err}"
        );
    }
    // A key file with a bad line: its line is named, its content never.
    let bad = dir.path().join("bad.agekey");
    std::fs::write(&bad, "# ok\nAGE-SECRET-KEY-1NOTAREALKEYBUTSECRETLOOKING\n").unwrap();
    let (code, _, err) = run(bin()
        .args(["unseal", "--age-key"])
        .arg(&bad)
        .write_stdin(SECRET));
    assert_eq!(code, 1);
    assert!(err.contains("line 2 is not an age identity"), "{err}");
    assert!(!err.contains("NOTAREALKEY"), "{err}");
    // A plain Secret is not a sops file.
    let (code, _, err) = run(bin()
        .args(["unseal", "--age-key"])
        .arg(&key_file)
        .write_stdin(SECRET));
    assert_eq!(code, 1);
    assert!(err.contains("not a sops file"), "{err}");
}

/// `--sops-config` picks the creation rule for `--path` as the real sops does: for each
/// path, spokekeeper's output and `sops -e`'s (same .sops.yaml, same path) list the same
/// recipients, and the real sops decrypts spokekeeper's.
#[test]
fn seal_honours_the_sops_yaml_creation_rule_for_the_path_as_sops_does() {
    crate::support::requires!(REAL_STACK);
    let dir = tempfile::tempdir().unwrap();
    let (a_key, a) = key(dir.path(), "a");
    let (b_key, b) = key(dir.path(), "b");
    let config = format!(
        "creation_rules:\n  - path_regex: ^clusters/prod/.*\\.yaml$\n    encrypted_regex: ^(data|stringData)$\n    age: {a},{b}\n  - path_regex: \\.yaml$\n    encrypted_regex: ^(data|stringData)$\n    age: [{b}]\n"
    );
    std::fs::write(dir.path().join(".sops.yaml"), &config).unwrap();
    for (path, recipients, key_file) in [
        ("clusters/prod/dev.yaml", vec![a.clone(), b.clone()], &a_key),
        ("clusters/dev/dev.yaml", vec![b.clone()], &b_key),
    ] {
        let (code, ours, err) = run(bin()
            .args(["seal", "--format", "sops", "--sops-config"])
            .arg(dir.path().join(".sops.yaml"))
            .args(["--path", path])
            .write_stdin(SECRET));
        assert_eq!(code, 0, "{path}: {err}");
        let file = dir.path().join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, SECRET).unwrap();
        let sops = |args: &[&str], key: &Path| {
            realstack::run(
                std::process::Command::new(realstack::bin("sops"))
                    .current_dir(dir.path())
                    .env_clear()
                    .env("HOME", dir.path())
                    .env("SOPS_AGE_KEY_FILE", key)
                    .args(args),
            )
            .unwrap()
        };
        let theirs = sops(&["-e", path], key_file);
        let listed = |text: &str| sops_meta(text).recipients;
        assert_eq!(listed(&ours), recipients, "{path}: {ours}");
        assert_eq!(listed(&theirs), recipients, "{path}: {theirs}");
        std::fs::write(&file, &ours).unwrap();
        let plain = sops(&["-d", path], key_file);
        let back = SecretInput::parse(plain.as_bytes()).unwrap();
        assert_eq!(back.data["value"].expose(), b"hello-kubeconfig", "{path}");
    }
    // A path no rule matches is refused, as sops -e refuses it.
    std::fs::write(
        dir.path().join(".sops.yaml"),
        config.replace("\\.yaml$", "\\.json$"),
    )
    .unwrap();
    let (code, out, err) = run(bin()
        .args(["seal", "--format", "sops", "--sops-config"])
        .arg(dir.path().join(".sops.yaml"))
        .args(["--path", "clusters/dev/dev.yaml"])
        .write_stdin(SECRET));
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("has no rule whose path_regex matches \"clusters/dev/dev.yaml\""),
        "{err}"
    );
}

fn sops_meta(text: &str) -> spokekeeper::seal::sops::SopsMetadata {
    spokekeeper::seal::sops::metadata(text.as_bytes()).unwrap()
}

/// `--age-sha256` pins the recipient set as `--sha256` pins a certificate: the printed
/// fingerprint lets the same recipients through in any order, another set is refused
/// naming both fingerprints, and nothing is written.
#[test]
fn age_sha256_pins_the_recipient_set() {
    let dir = tempfile::tempdir().unwrap();
    let (_, a) = key(dir.path(), "a");
    let (_, b) = key(dir.path(), "b");
    let (code, _, err) = run(bin()
        .args(["seal", "--format", "sops", "--age", &format!("{a},{b}")])
        .write_stdin(SECRET));
    assert_eq!(code, 0, "{err}");
    let fp = err
        .split("(recipients ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no fingerprint printed: {err}"))
        .to_string();
    assert!(fp.starts_with("sha256:") && fp.len() == 71, "{fp}");
    let (code, out, err) = run(bin()
        .args([
            "seal",
            "--format",
            "sops",
            "--age",
            &format!("{b},{a}"),
            "--age-sha256",
            &fp,
        ])
        .write_stdin(SECRET));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sops:"), "{out}");
    let (code, out, err) = run(bin()
        .args(["seal", "--format", "sops", "--age", &b, "--age-sha256", &fp])
        .write_stdin(SECRET));
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains(&format!(
            "but --age-sha256 allows only {fp}: nothing encrypted"
        )),
        "{err}"
    );
    let (code, _, err) = run(bin()
        .args([
            "seal",
            "--format",
            "sops",
            "--age",
            &b,
            "--age-sha256",
            "sha256:abc",
        ])
        .write_stdin(SECRET));
    assert_eq!(code, 1);
    assert!(err.contains("--age-sha256"), "{err}");
}
