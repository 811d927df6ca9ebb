//! `spokekeeper inspect`, run as a binary: output, exit codes, and that no key material
//! or token ever reaches stdout or stderr.

use crate::kc_fixtures;

use std::path::Path;

use assert_cmd::cargo::cargo_bin_cmd;
use kc_fixtures::{Shape, b64, fixture, fixture_with, validity, with_user_line};
use spokekeeper::certs;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn inspect(args: &[&str], stdin: &[u8]) -> Run {
    let out = cargo_bin_cmd!("spokekeeper")
        .arg("inspect")
        .args(args)
        .env_remove("SPOKEKEEPER_CONFIG")
        .write_stdin(stdin)
        .output()
        .unwrap();
    Run {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn write(dir: &Path, name: &str, content: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Nothing secret in either stream: not the key (PEM body or base64), not the token.
fn assert_no_secrets(run: &Run, secrets: &[&str]) {
    for s in secrets {
        assert!(
            !run.stdout.contains(s) && !run.stderr.contains(s),
            "leaked {s:.12}…"
        );
    }
}

#[test]
fn k3s_kubeconfig_table_lists_every_certificate() {
    let f = fixture(Shape::K3s);
    let dir = tempfile::tempdir().unwrap();
    let run = inspect(&[&write(dir.path(), "k3s.yaml", f.yaml.as_bytes())], b"");
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("server: https://127.0.0.1:6443"),
        "{}",
        run.stdout
    );
    let client_ca = f.client_ca.as_ref().unwrap();
    for (role, der, subject) in [
        ("cluster CA", &f.ca.der, "CN=k3s-server-ca@1700000000"),
        ("client", &f.leaf.der, "CN=system:admin, O=system:masters"),
        (
            "client chain",
            &client_ca.der,
            "CN=k3s-client-ca@1700000000",
        ),
    ] {
        let line = run
            .stdout
            .lines()
            .find(|l| l.contains(&certs::fingerprint(der).to_string()))
            .unwrap_or_else(|| panic!("{role} missing:\n{}", run.stdout));
        assert!(line.starts_with(role) && line.ends_with(subject), "{line}");
    }
    assert!(run.stdout.contains("problems: none"));
    let key_line = f.key_pem.lines().nth(1).unwrap();
    assert_no_secrets(&run, &[&b64(&f.key_pem)[..40], key_line]);
}

#[test]
fn json_output_from_stdin_is_machine_readable() {
    let f = fixture(Shape::Kubeadm);
    let run = inspect(&["-o", "json", "-"], f.yaml.as_bytes());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["kind"], "kubeconfig");
    assert_eq!(v["context"], "kubernetes-admin@kubernetes");
    assert_eq!(v["refused"], false);
    assert_eq!(v["problems"].as_array().unwrap().len(), 0);
    let certs_json = v["certificates"].as_array().unwrap();
    assert_eq!(certs_json.len(), 2);
    assert_eq!(certs_json[0]["role"], "cluster CA");
    assert_eq!(
        certs_json[0]["fingerprint"],
        certs::fingerprint(&f.ca.der).to_string()
    );
    assert_eq!(
        certs_json[1]["fingerprint"],
        certs::fingerprint(&f.leaf.der).to_string()
    );
    let days = certs_json[1]["days_left"].as_i64().unwrap();
    assert!((363..=365).contains(&days), "{days}");
}

#[test]
fn exec_plugin_and_key_mismatch_exit_1_with_fields_named() {
    let f = fixture(Shape::K3s);
    let other = fixture(Shape::K3s);
    let yaml = with_user_line(&f.yaml, "exec: {command: /bin/sh, args: [-c, id]}")
        .replace(&b64(&f.key_pem), &b64(&other.key_pem));
    let run = inspect(&["-o", "json"], yaml.as_bytes());
    assert_eq!(run.code, 1);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["refused"], true);
    let fields: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "users[default].user.exec",
            "users[default].user.client-key-data"
        ]
    );
    assert!(
        run.stderr.contains("would refuse this kubeconfig"),
        "{}",
        run.stderr
    );
    assert_no_secrets(
        &run,
        &[
            &b64(&other.key_pem)[..40],
            other.key_pem.lines().nth(1).unwrap(),
        ],
    );
    // The table says the same to a person.
    let table = inspect(&[], yaml.as_bytes());
    assert_eq!(table.code, 1);
    assert!(
        table.stdout.contains("problems (2):") && table.stdout.contains("CVE-2022-24817"),
        "{}",
        table.stdout
    );
}

#[test]
fn expired_client_certificate_exits_1() {
    let f = fixture_with(Shape::Rke2, validity(-400, -2));
    let run = inspect(&[], f.yaml.as_bytes());
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stdout.contains("users[default].user.client-certificate-data: \"CN=system:admin, O=system:masters\" expired"), "{}", run.stdout);
}

#[test]
fn token_is_never_printed() {
    let f = fixture(Shape::K3s);
    let token = "t0ken.abcdefghijklmnop";
    let run = inspect(
        &["-o", "yaml"],
        with_user_line(&f.yaml, &format!("token: {token}")).as_bytes(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("credentials: client certificate and key, and a token"),
        "{}",
        run.stdout
    );
    assert_no_secrets(&run, &[token]);
}

#[test]
fn certificate_pem_lists_each_certificate_and_skips_keys() {
    let f = fixture(Shape::K3s);
    let client_ca = f.client_ca.as_ref().unwrap();
    let pem = format!("{}{}{}", f.leaf.pem, client_ca.pem, f.leaf.key_pem);
    let run = inspect(&["-o", "json"], pem.as_bytes());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let fps: Vec<&str> = v["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["fingerprint"].as_str().unwrap())
        .collect();
    assert_eq!(
        fps,
        [
            certs::fingerprint(&f.leaf.der).to_string(),
            certs::fingerprint(&client_ca.der).to_string()
        ]
    );
    assert_eq!(v["skipped_blocks"][0], "PRIVATE KEY");
    assert_no_secrets(&run, &[f.leaf.key_pem.lines().nth(1).unwrap()]);
    let expired = kc_fixtures::leaf(
        client_ca,
        "old",
        "org",
        kc_fixtures::Alg::P256,
        validity(-30, -1),
    );
    let run = inspect(&[], expired.pem.as_bytes());
    assert_eq!(run.code, 1);
    assert!(run.stdout.contains("has expired"), "{}", run.stdout);
}

#[test]
fn unreadable_input_exits_2_and_says_what_to_do() {
    let run = inspect(&["/nonexistent/k3s.yaml"], b"");
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("cannot read /nonexistent/k3s.yaml"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("fix:"), "{}", run.stderr);
    let dir = tempfile::tempdir().unwrap();
    let run = inspect(&[dir.path().to_str().unwrap()], b"");
    assert_eq!(run.code, 2, "a directory: {}", run.stderr);
}

#[test]
fn huge_and_garbage_inputs_are_refused_not_crashed() {
    let dir = tempfile::tempdir().unwrap();
    let big = write(dir.path(), "big.yaml", &vec![b'#'; 50 * 1024 * 1024]);
    let run = inspect(&[&big], b"");
    assert_eq!(run.code, 1);
    assert!(
        run.stdout.contains("52428800 bytes") && run.stdout.contains("limit"),
        "{}",
        run.stdout
    );
    let run = inspect(&[], &[0xff, 0xfe, 0x00, 0x01, b':', b'[']);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stdout.contains("not a readable kubeconfig"),
        "{}",
        run.stdout
    );
    let run = inspect(
        &[],
        b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    );
    assert_eq!(run.code, 1);
    assert!(run.stdout.contains("not base64"), "{}", run.stdout);
}
