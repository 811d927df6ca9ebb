//! `spokekeeper seal` / `unseal` through the binary: bad input, merge, round trips in
//! every scope, and an independent implementation (kubesealpy) on the other side.

use std::path::{Path, PathBuf};

use super::bin;
use proptest::prelude::*;
use rsa::pkcs8::EncodePrivateKey;
use spokekeeper::seal::{RecoveryKey, Scope, SealedSecret, SealingKey, SecretInput};
use time::OffsetDateTime;

use crate::support::fleet::vectors;

fn cert() -> PathBuf {
    vectors().join("key/cert.pem")
}

fn key() -> Vec<RecoveryKey> {
    RecoveryKey::load_all(
        &std::fs::read(vectors().join("key/tls.key")).unwrap(),
        "tls.key",
    )
    .unwrap()
}

/// Runs `seal` with `stdin` and returns (exit code, stdout, stderr).
fn seal(args: &[&str], cert: &Path, stdin: impl Into<Vec<u8>>) -> (i32, Vec<u8>, String) {
    let out = bin()
        .arg("seal")
        .arg("--cert")
        .arg(cert)
        .args(args)
        .write_stdin(stdin.into())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn refused(args: &[&str], cert: &Path, stdin: &str, needle: &str) {
    let (code, stdout, stderr) = seal(args, cert, stdin);
    assert_eq!(code, 1, "exit code for {needle:?}: {stderr}");
    assert!(stdout.is_empty(), "nothing on stdout when refused");
    assert!(
        stderr.contains(needle),
        "stderr should name {needle:?}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

const SECRET: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: dev-kubeconfig\n  namespace: flux-system\nstringData:\n  value: hello\n";

#[test]
fn bad_secret_input_is_refused_clearly() {
    let c = cert();
    refused(&[], &c, "key: [unclosed", "neither YAML nor JSON");
    refused(&[], &c, "\u{0}\u{1}binary", "stdin");
    // A syntax error must not echo the Secret's values.
    let (_, _, stderr) = seal(
        &[],
        &c,
        "kind: Secret\nstringData:\n  a: topsecretvalue\n  b: [unclosed\n",
    );
    assert!(
        stderr.contains("neither YAML nor JSON") && !stderr.contains("topsecretvalue"),
        "{stderr}"
    );
    refused(
        &[],
        &c,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: y}\ndata: {a: b}\n",
        "found \"ConfigMap\"",
    );
    refused(
        &[],
        &c,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: x, namespace: y}\n",
        "no data",
    );
    refused(
        &[],
        &c,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: x, namespace: y}\ndata: {a: '%%%'}\n",
        "data.a is not valid base64",
    );
    refused(
        &[],
        &c,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\nstringData: {a: b}\n",
        "--namespace",
    );
    refused(
        &["--namespace", "other"],
        &c,
        SECRET,
        "metadata.namespace is \"flux-system\"",
    );
    refused(&["-o", "table"], &c, SECRET, "-o yaml or -o json");
}

/// A value of the wrong type is named by its field and kind, never echoed: serde's own
/// messages quote it (``invalid type: integer `12345678` ``), and it may be the secret.
#[test]
fn type_errors_name_the_field_and_never_the_value() {
    let c = cert();
    // (YAML value, JSON value, what the error calls it, the secret that must not show)
    let cases = [
        ("12345678", "12345678", "an integer", "12345678"),
        ("3.14159", "3.14159", "a number", "3.14159"),
        ("true", "true", "a boolean", "true"),
        ("~", "null", "null", "null"),
        (
            "[S3cr3tV4lu3]",
            r#"["S3cr3tV4lu3"]"#,
            "a list",
            "S3cr3tV4lu3",
        ),
        (
            "{x: S3cr3tV4lu3}",
            r#"{"x":"S3cr3tV4lu3"}"#,
            "a map",
            "S3cr3tV4lu3",
        ),
        ("!!binary S3cr3tV4lu3", r#""S3cr3tV4lu3"#, "", "S3cr3tV4lu3"),
    ];
    for field in ["data", "stringData"] {
        for (yaml_v, json_v, kind, secret) in cases {
            let yaml = format!(
                "kind: Secret\nmetadata: {{name: a, namespace: b}}\n{field}:\n  pw: {yaml_v}\n"
            );
            let json = format!(
                r#"{{"kind":"Secret","metadata":{{"name":"a","namespace":"b"}},"{field}":{{"pw":{json_v}}}}}"#
            );
            for input in [yaml, json] {
                let (code, stdout, stderr) = seal(&[], &c, input.as_str());
                assert_eq!(code, 1, "{input}: {stderr}");
                assert!(stdout.is_empty(), "{input}");
                if !kind.is_empty() {
                    let want = format!("{field}.pw is {kind}");
                    assert!(stderr.contains(&want), "{input}: {stderr}");
                }
                // "null" and "true" are the kind's own words; the rest must not appear.
                if secret != kind.trim_start_matches("a ") && secret != "true" {
                    assert!(!stderr.contains(secret), "{input}: {stderr}");
                }
                assert!(!stderr.contains("invalid type"), "{input}: {stderr}");
            }
        }
    }
    // Invalid base64 names the key, not the offending character (`!` is symbol 33).
    for input in [
        "kind: Secret\nmetadata: {name: a, namespace: b}\ndata:\n  pw: S3cr3tV4lu3!\n",
        r#"{"kind":"Secret","metadata":{"name":"a","namespace":"b"},"data":{"pw":"S3cr3tV4lu3!"}}"#,
    ] {
        let (code, _, stderr) = seal(&[], &c, input);
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains("data.pw is not valid base64"), "{stderr}");
        assert!(
            !stderr.contains("S3cr3tV4lu3") && !stderr.contains("33"),
            "{stderr}"
        );
    }
    // Not UTF-8 inside a value: the bytes are not shown either.
    let mut bad = b"{\"kind\":\"Secret\",\"metadata\":{\"name\":\"a\",\"namespace\":\"b\"},\"stringData\":{\"pw\":\"S3cr3t".to_vec();
    bad.extend_from_slice(b"\xff\xfeV4lu3\"}}");
    let (code, _, stderr) = seal(&[], &c, bad);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("UTF-8") && !stderr.contains("S3cr3t"),
        "{stderr}"
    );
    // Metadata, too, is reported by field.
    refused(
        &[],
        &c,
        "kind: Secret\nmetadata: {name: a, namespace: b, annotations: {x: 12345678}}\nstringData: {pw: v}\n",
        "metadata.annotations.x is an integer",
    );
}

#[test]
fn bad_certificates_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    // An EC certificate.
    let ec = rcgen::generate_simple_self_signed(vec!["x".into()]).unwrap();
    refused(
        &[],
        &write("ec.pem", &ec.cert.pem()),
        SECRET,
        "ECDSA, not RSA",
    );
    // An expired RSA certificate, signed by the vector key.
    let der = key()[0].private_key().to_pkcs8_der().unwrap();
    let kp = rcgen::KeyPair::try_from(der.as_bytes()).unwrap();
    let mut params = rcgen::CertificateParams::new(vec![]).unwrap();
    params.not_before = OffsetDateTime::from_unix_timestamp(1_500_000_000).unwrap();
    params.not_after = OffsetDateTime::from_unix_timestamp(1_600_000_000).unwrap();
    let expired = params.self_signed(&kp).unwrap();
    refused(
        &[],
        &write("expired.pem", &expired.pem()),
        SECRET,
        "expired on 2020-09-13T12:26:40Z",
    );
    // A private key given where the certificate belongs.
    let p = vectors().join("key/tls.key");
    refused(&[], &p, SECRET, "this is a private key");
    refused(&[], &write("junk.pem", "not a pem"), SECRET, "no PEM block");
    refused(
        &[],
        &dir.path().join("missing.pem"),
        SECRET,
        "cannot read --cert",
    );
    // A 1024-bit RSA public key.
    use rsa::pkcs8::EncodePublicKey;
    let small = rsa::PrivateKey::new(&mut getrandom::SysRng, 1024).unwrap();
    let pem = small
        .to_public_key()
        .to_public_key_pem(rsa::pkcs8::LineEnding::LF)
        .unwrap();
    refused(
        &[],
        &write("small.pem", &pem),
        SECRET,
        "1024 bits; at least 2048",
    );
}

/// The demo key's private half is published (keys/demo/): `seal` refuses it however it is
/// wrapped, and says which file, that it is the demo key, and what to use instead.
#[test]
fn seal_refuses_the_published_demo_key_in_every_wrapping() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    // A re-issued certificate for the same key (another fingerprint, another subject),
    // and the key bare as SPKI and as PKCS#1.
    let (reissued, spki, pkcs1) = crate::support::fleet::demo_key_wrappings(dir.path());
    // A chain whose first certificate is a usable key and whose second is the demo's.
    let chain = path("chain.pem");
    let demo_cert = std::fs::read_to_string(root.join("keys/demo/tls.crt")).unwrap();
    let vectors_cert = std::fs::read_to_string(cert()).unwrap();
    std::fs::write(&chain, format!("{vectors_cert}{demo_cert}")).unwrap();
    let cases = [
        (root.join("keys/demo/tls.crt"), "the certificate"),
        (reissued, "the certificate"),
        (chain, "certificate 2 of the 2 in the file"),
        (spki, "the public key"),
        (pkcs1, "the RSA public key"),
    ];
    for (file, what) in &cases {
        for needle in [
            format!(
                "{}: {what} is spokekeeper's published demo key",
                file.display()
            ),
            "kubeseal --fetch-cert".to_string(),
        ] {
            refused(&[], file, SECRET, &needle);
        }
        // --raw seals no manifest, and goes through the same loader.
        refused(
            &["--raw", "--namespace", "ns", "--name", "n"],
            file,
            "value",
            "published demo key",
        );
    }
    // The usable certificate alone still seals.
    let (code, _, stderr) = seal(&[], &cert(), SECRET);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn bad_sealed_input_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let key = vectors().join("key/tls.key");
    let original = std::fs::read_to_string(vectors().join("sealed/strict.yaml")).unwrap();
    let sealed = SealedSecret::parse(original.as_bytes()).unwrap();
    let token = &sealed.encrypted_data["token"];
    let cases = [
        (
            "truncated",
            original.replace(token.as_str(), &token[..40]),
            "too short",
        ),
        (
            "garbage",
            original.replace(token.as_str(), "AgBnYXJiYWdl"),
            "too short",
        ),
        (
            "not-base64",
            original.replace(token.as_str(), "AgA!!!"),
            "encryptedData.token is not base64",
        ),
        (
            "wrong-label",
            original.replace(
                "name: cluster-kubeconfig\n  namespace",
                "name: renamed\n  namespace",
            ),
            "no key decrypted it",
        ),
        (
            "tampered",
            {
                // Flip one ciphertext byte after the RSA part: the tag must catch it.
                use base64::Engine;
                let b64 = base64::engine::general_purpose::STANDARD;
                let mut ct = b64.decode(token).unwrap();
                let last = ct.len() - 20;
                ct[last] ^= 1;
                original.replace(token.as_str(), &b64.encode(ct))
            },
            "did not authenticate",
        ),
        ("not-yaml", "{{{".to_string(), "neither YAML nor JSON"),
        (
            "a-secret",
            std::fs::read_to_string(vectors().join("plaintext/secret.yaml")).unwrap(),
            "expected kind SealedSecret",
        ),
    ];
    for (name, text, needle) in cases {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, text).unwrap();
        let out = bin()
            .arg("unseal")
            .arg("--recovery-key")
            .arg(&key)
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{name}: want {needle:?} in {stderr}"
        );
        assert!(out.stdout.is_empty(), "{name}");
    }
    // A recovery key that is not a key.
    let out = bin()
        .args(["unseal", "--recovery-key"])
        .arg(cert())
        .arg(vectors().join("sealed/strict.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no RSA private key found"));
}

#[test]
fn merge_into_adds_and_replaces_keys_in_place() {
    let dir = tempfile::tempdir().unwrap();
    for (name, format) in [("m.yaml", "yaml"), ("m.json", "json")] {
        let path = dir.path().join(name);
        let (code, stdout, stderr) = seal(
            &["-o", format, "--scope", "namespace-wide"],
            &cert(),
            SECRET,
        );
        assert_eq!(code, 0, "{stderr}");
        std::fs::write(&path, &stdout).unwrap();
        let update = SECRET.replace("value: hello", "value: changed\n  extra: more");
        let (code, stdout, stderr) =
            seal(&["--merge-into", path.to_str().unwrap()], &cert(), update);
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.is_empty());
        let text = std::fs::read(&path).unwrap();
        assert_eq!(text.first() == Some(&b'{'), format == "json", "format kept");
        let merged = SealedSecret::parse(&text).unwrap();
        assert_eq!(merged.scope(), Scope::NamespaceWide);
        let plain = merged.unseal(&key()).unwrap();
        assert_eq!(plain.data["value"].expose(), b"changed");
        assert_eq!(plain.data["extra"].expose(), b"more");
        // A scope that contradicts the file is refused, and the file is left as it was.
        let (code, _, stderr) = seal(
            &["--merge-into", path.to_str().unwrap(), "--scope", "strict"],
            &cert(),
            SECRET,
        );
        assert_eq!(code, 1);
        assert!(stderr.contains("sealed namespace-wide"), "{stderr}");
        assert_eq!(std::fs::read(&path).unwrap(), text);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random plaintexts (binary included) round-trip in every scope and both formats.
    #[test]
    fn round_trip_random_values(value in proptest::collection::vec(any::<u8>(), 0..4096), scope_i in 0..3usize, json in any::<bool>()) {
        let scope = [Scope::Strict, Scope::NamespaceWide, Scope::ClusterWide][scope_i];
        let sealing = SealingKey::from_pem(&std::fs::read(cert()).unwrap(), "cert", OffsetDateTime::now_utc()).unwrap();
        let mut input = SecretInput { name: "s".into(), namespace: "ns".into(), ..Default::default() };
        input.data.insert("v".into(), value.clone().into());
        let sealed = SealedSecret::seal(&input, &sealing, scope).unwrap();
        let text = if json { sealed.to_json() } else { sealed.to_yaml() };
        let back = SealedSecret::parse(text.as_bytes()).unwrap();
        let plain = back.unseal(&key()).unwrap();
        prop_assert_eq!(plain.data["v"].expose(), value.as_slice());
    }
}

/// `seal` says which certificate it sealed to, and with `--sha256` refuses a certificate
/// file that was swapped (the fleet repo's copy, say), naming both fingerprints.
#[test]
fn seal_names_the_certificate_and_refuses_one_sha256_does_not_list() {
    let fp = SealingKey::from_pem(
        &std::fs::read(cert()).unwrap(),
        "cert",
        OffsetDateTime::now_utc(),
    )
    .unwrap()
    .fingerprint()
    .to_string();
    let (code, stdout, stderr) = seal(&["--sha256", &fp], &cert(), SECRET);
    assert_eq!(code, 0, "{stderr}");
    assert!(SealedSecret::parse(&stdout).is_ok());
    assert_eq!(stderr.trim(), format!("sealed to {fp}"));

    // Without --sha256 it still says so.
    let (code, _, stderr) = seal(&[], &cert(), SECRET);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stderr.trim(), format!("sealed to {fp}"));

    // A swapped file: refused, nothing sealed, both fingerprints named.
    let swapped = vectors().join("other-key/tls.crt");
    let other = SealingKey::from_pem(
        &std::fs::read(&swapped).unwrap(),
        "other",
        OffsetDateTime::now_utc(),
    )
    .unwrap()
    .fingerprint()
    .to_string();
    refused(&["--sha256", &fp], &swapped, SECRET, &other);
    refused(&["--sha256", &fp], &swapped, SECRET, &fp);
    // Any listed fingerprint matches (a planned rollover).
    let (code, _, stderr) = seal(&["--sha256", &fp, "--sha256", &other], &swapped, SECRET);
    assert_eq!(code, 0, "{stderr}");
    // A malformed fingerprint is named, not taken as a mismatch.
    refused(&["--sha256", "sha256:XYZ"], &cert(), SECRET, "--sha256");
}

mod interop;
