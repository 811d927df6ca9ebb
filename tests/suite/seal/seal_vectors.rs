//! The upstream Sealed Secrets vectors (tests/vectors/sealed-secrets, made by the Bitnami
//! code): every file unseals or fails exactly as expected/outcomes.json says, through the
//! library and through `spokekeeper unseal`; our output has kubeseal's structure.

use std::collections::BTreeMap;
use std::path::Path;

use super::bin;
use assert_cmd::Command;
use base64::Engine;
use spokekeeper::seal::{
    RecoveryKey, Scope, SealedSecret, SealingKey, SecretInput, hybrid_decrypt,
};
use time::OffsetDateTime;

use crate::kc_fixtures::openssl_fingerprint;
use crate::support::fleet::vectors;

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(vectors().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn keys(rel: &str) -> Vec<RecoveryKey> {
    RecoveryKey::load_all(&read(rel), rel).unwrap()
}

fn outcomes() -> serde_json::Map<String, serde_json::Value> {
    serde_json::from_slice(&read("expected/outcomes.json")).unwrap()
}

fn expected_plaintext() -> BTreeMap<String, String> {
    serde_json::from_slice(&read("expected/plaintext.json")).unwrap()
}

fn unsealed_map(
    sealed: &SealedSecret,
    keys: &[RecoveryKey],
) -> Result<BTreeMap<String, String>, String> {
    let secret = sealed.unseal(keys).map_err(|e| e.to_string())?;
    Ok(secret
        .data
        .iter()
        .map(|(k, v)| (k.clone(), String::from_utf8(v.expose().to_vec()).unwrap()))
        .collect())
}

#[test]
fn vector_checksums_hold() {
    let sums = String::from_utf8(read("SHA256SUMS")).unwrap();
    let mut checked = 0;
    for line in sums.lines().filter(|l| !l.trim().is_empty()) {
        let (hex, file) = line.split_once("  ").unwrap();
        let file = file.trim_start_matches("./");
        use sha2::Digest;
        let got = sha2::Sha256::digest(read(file));
        let got: String = got.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, hex, "{file} differs from the upstream vector");
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} files listed");
}

#[test]
fn every_sealed_vector_behaves_as_outcomes_say() {
    let key = keys("key/tls.key");
    let other = keys("other-key/tls.key");
    let want = expected_plaintext();
    let mut seen = 0;
    for (file, outcome) in outcomes() {
        let Some(outcome) = outcome.as_str() else {
            continue;
        };
        if !file.starts_with("sealed/") {
            continue;
        }
        seen += 1;
        let sealed = SealedSecret::parse(&read(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let result = unsealed_map(&sealed, &key);
        if outcome.starts_with("ok") {
            assert_eq!(result.as_ref(), Ok(&want), "{file}");
        } else {
            let err = result.expect_err(&file);
            assert!(err.contains("no key decrypted it"), "{file}: {err}");
            if outcome.contains("ok with other-key") {
                assert_eq!(
                    unsealed_map(&sealed, &other).as_ref(),
                    Ok(&want),
                    "{file} with other-key"
                );
                // Both keys together: the right one is found.
                let mut both = keys("key/tls.key");
                both.extend(keys("other-key/tls.key"));
                assert_eq!(
                    unsealed_map(&sealed, &both).as_ref(),
                    Ok(&want),
                    "{file} with both keys"
                );
            }
        }
    }
    assert_eq!(
        seen, 12,
        "every sealed/* vector listed in outcomes.json is exercised"
    );
}

#[test]
fn raw_vectors_decrypt_with_their_labels() {
    let key = keys("key/tls.key");
    let plaintext = read("plaintext/kubeconfig");
    let mut seen = 0;
    for (file, spec) in outcomes() {
        let Some(spec) = spec.as_object() else {
            continue;
        };
        let b64 = String::from_utf8(read(&file)).unwrap();
        let ct = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .unwrap();
        let scope: Scope = spec["scope"].as_str().unwrap().parse().unwrap();
        let label = scope.label(
            spec["namespace"].as_str().unwrap(),
            spec["name"].as_str().unwrap(),
        );
        assert_eq!(label, spec["label"].as_str().unwrap().as_bytes(), "{file}");
        let plain = hybrid_decrypt(&key, &label, &ct).unwrap();
        assert_eq!(plain.expose(), plaintext.as_slice(), "{file}");
        // The wrong label must not decrypt.
        assert!(
            hybrid_decrypt(&key, b"tenant-b/other", &ct).is_err(),
            "{file}"
        );
        seen += 1;
    }
    assert_eq!(seen, 3);
}

#[test]
fn key_secret_yaml_loads_the_same_key() {
    let from_pem = keys("key/tls.key");
    let from_secret = keys("key/sealed-secrets-key.yaml");
    assert_eq!(from_secret.len(), 1);
    assert_eq!(
        from_pem[0].public_fingerprint(),
        from_secret[0].public_fingerprint()
    );
    let sealed = SealedSecret::parse(&read("sealed/strict.yaml")).unwrap();
    assert_eq!(
        unsealed_map(&sealed, &from_secret).unwrap(),
        expected_plaintext()
    );
}

/// Replaces every ciphertext with a marker so structures can be compared.
fn mask(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let is_value = ["kubeconfig", "token", "\"kubeconfig\"", "\"token\""]
            .iter()
            .any(|k| trimmed.starts_with(&format!("{k}:")) && trimmed.contains("Ag"));
        if is_value {
            let (k, _) = line.split_once(':').unwrap();
            let comma = if line.trim_end().ends_with(',') {
                ","
            } else {
                ""
            };
            out.push_str(&format!("{k}: CIPHERTEXT{comma}\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[test]
fn our_manifests_have_kubeseals_structure() {
    let cert =
        SealingKey::from_pem(&read("key/cert.pem"), "cert.pem", OffsetDateTime::now_utc()).unwrap();
    let input = SecretInput::parse(&read("plaintext/secret.yaml")).unwrap();
    let key = keys("key/tls.key");
    for (scope, name) in [
        (Scope::Strict, "strict"),
        (Scope::NamespaceWide, "namespace-wide"),
        (Scope::ClusterWide, "cluster-wide"),
    ] {
        let sealed = SealedSecret::seal(&input, &cert, scope).unwrap();
        let yaml = sealed.to_yaml();
        let json = sealed.to_json();
        let want_yaml = String::from_utf8(read(&format!("sealed/{name}.yaml"))).unwrap();
        let want_json = String::from_utf8(read(&format!("sealed/{name}.json"))).unwrap();
        assert_eq!(mask(&yaml), mask(&want_yaml), "{name}.yaml");
        assert_eq!(mask(&json), mask(&want_json), "{name}.json");
        assert_ne!(mask(&yaml), yaml, "the mask replaced the ciphertexts");
        // And what we wrote unseals, read back through both formats.
        for text in [&yaml, &json] {
            let back = SealedSecret::parse(text.as_bytes()).unwrap();
            assert_eq!(back, sealed);
            assert_eq!(
                unsealed_map(&back, &key).unwrap(),
                expected_plaintext(),
                "{name}"
            );
        }
    }
}

#[test]
fn unseal_command_follows_outcomes() {
    let key = vectors().join("key/tls.key");
    let other = vectors().join("other-key/tls.key");
    let want = expected_plaintext();
    for (file, outcome) in outcomes() {
        let Some(outcome) = outcome.as_str() else {
            continue;
        };
        if !file.starts_with("sealed/") {
            continue;
        }
        let out = bin()
            .arg("unseal")
            .arg("--recovery-key")
            .arg(&key)
            .arg(vectors().join(&file))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if outcome.starts_with("ok") {
            assert!(out.status.success(), "{file}: {stderr}");
            let secret = SecretInput::parse(&out.stdout).unwrap();
            for (k, v) in &want {
                assert_eq!(secret.data[k].expose(), v.as_bytes(), "{file}: {k}");
            }
            // The controller names the Secret after the SealedSecret, wherever it moved.
            let sealed = SealedSecret::parse(&read(&file)).unwrap();
            assert_eq!(
                (secret.name, secret.namespace),
                (sealed.name, sealed.namespace),
                "{file}"
            );
        } else {
            assert_eq!(out.status.code(), Some(1), "{file}");
            assert!(out.stdout.is_empty(), "{file}: nothing on stdout");
            assert!(
                stderr.contains("tls.key") && stderr.contains("no key decrypted"),
                "{file}: {stderr}"
            );
        }
    }
    // Several keys, comma-separated: the one that works is used.
    let both = format!("{},{}", other.display(), key.display());
    bin()
        .args(["unseal", "--recovery-key", &both])
        .arg(vectors().join("sealed/wrong-key.yaml"))
        .assert()
        .success();
}

#[test]
fn seal_command_output_unseals_with_the_vector_key() {
    let cert = vectors().join("key/cert.pem");
    let key = keys("key/tls.key");
    for (scope, format) in [
        ("strict", "yaml"),
        ("namespace-wide", "json"),
        ("cluster-wide", "yaml"),
    ] {
        let out = bin()
            .args(["seal", "--cert"])
            .arg(&cert)
            .args(["--scope", scope, "-o", format])
            .write_stdin(read("plaintext/secret.yaml"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let sealed = SealedSecret::parse(&out.stdout).unwrap();
        assert_eq!(sealed.scope().to_string(), scope);
        assert_eq!(unsealed_map(&sealed, &key).unwrap(), expected_plaintext());
    }
}

/// Upstream's kubeseal (the real-stack build, tests/realstack/sealed) opens what we seal,
/// offline with the vector key, in every scope: the OAEP encoding and RSA operation of
/// src/seal/oaep.rs are upstream's.
#[test]
fn upstream_kubeseal_recovery_unseals_our_output() {
    crate::support::requires!(REAL_STACK);
    let kubeseal = crate::support::realstack::bin("kubeseal");
    for scope in ["strict", "namespace-wide", "cluster-wide"] {
        let sealed = bin()
            .args(["seal", "--cert"])
            .arg(vectors().join("key/cert.pem"))
            .args(["--scope", scope])
            .write_stdin(read("plaintext/secret.yaml"))
            .output()
            .unwrap();
        assert!(sealed.status.success(), "{scope}");
        let out = Command::new(&kubeseal)
            .args(["--recovery-unseal", "-o", "json", "--recovery-private-key"])
            .arg(vectors().join("key/tls.key"))
            .env("KUBECONFIG", "/dev/null")
            .write_stdin(sealed.stdout)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{scope}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let secret: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let data: BTreeMap<String, String> = secret["data"]
            .as_object()
            .expect("data")
            .iter()
            .map(|(k, v)| {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v.as_str().expect("base64 string"))
                    .unwrap();
                (k.clone(), String::from_utf8(bytes).unwrap())
            })
            .collect();
        assert_eq!(data, expected_plaintext(), "{scope}");
    }
}

#[test]
fn raw_seal_matches_the_controllers_label() {
    let cert = vectors().join("key/cert.pem");
    let key = keys("key/tls.key");
    let plaintext = read("plaintext/kubeconfig");
    let out = bin()
        .args([
            "seal",
            "--raw",
            "--namespace",
            "tenant-a",
            "--name",
            "cluster-kubeconfig",
            "--cert",
        ])
        .arg(&cert)
        .write_stdin(plaintext.clone())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.stdout.ends_with(b"\n"),
        "bare base64, like kubeseal --raw"
    );
    let ct = base64::engine::general_purpose::STANDARD
        .decode(&out.stdout)
        .unwrap();
    let plain = hybrid_decrypt(&key, b"tenant-a/cluster-kubeconfig", &ct).unwrap();
    assert_eq!(plain.expose(), plaintext.as_slice());
    bin()
        .args(["seal", "--raw", "--namespace", "tenant-a", "--cert"])
        .arg(&cert)
        .write_stdin("x")
        .assert()
        .failure()
        .stderr(predicates::str::contains("--name"));
}

#[test]
fn sealing_fingerprint_is_what_openssl_says() {
    let pem = read("key/cert.pem");
    let key = SealingKey::from_pem(&pem, "cert.pem", OffsetDateTime::now_utc()).unwrap();
    assert_eq!(
        key.fingerprint().to_string(),
        openssl_fingerprint(std::str::from_utf8(&pem).unwrap())
    );
    assert!(!key.is_demo());
    // The demo key is not loaded at all (seal::key's tests and seal_cli.rs say how).
    let demo =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("keys/demo/tls.crt")).unwrap();
    let refused = SealingKey::from_pem(&demo, "demo", OffsetDateTime::now_utc()).unwrap_err();
    assert!(
        refused.to_string().contains("published demo key"),
        "{refused}"
    );
}
