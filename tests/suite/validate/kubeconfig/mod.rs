//! Kubeconfigs as k3s, RKE2 and kubeadm write them: parse, sanitize, rewrite, serialize;
//! and hostile kubeconfigs, each refused with the field named.

use crate::kc_fixtures;
use crate::support;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kc_fixtures::{
    Shape, b64, fixture, fixture_with, openssl, validity, with_cluster_line, with_user_line,
};
use spokekeeper::certs::{self, KeyKind};
use spokekeeper::kubeconfig::{self, CertRole, KubeconfigError, Sanitized};
use time::OffsetDateTime;

fn sanitized(yaml: &str, name: &str) -> Sanitized {
    let kc = kubeconfig::parse(yaml.as_bytes()).expect("parses");
    kubeconfig::sanitize(&kc, name).expect("sanitizes")
}

fn refusal(yaml: &[u8]) -> KubeconfigError {
    match kubeconfig::parse(yaml) {
        Err(e) => e,
        Ok(kc) => kubeconfig::sanitize(&kc, "dev").expect_err("must be refused"),
    }
}

fn assert_refused_naming(yaml: &str, field: &str) -> KubeconfigError {
    let e = refusal(yaml.as_bytes());
    assert_eq!(e.field(), Some(field), "{e}");
    let msg = e.to_string();
    assert!(msg.starts_with(field), "{msg}");
    assert!(msg.contains("Fix:"), "says what to do: {msg}");
    e
}

/// Reads the sanitized YAML with kube-rs and returns (cluster, user, context) names,
/// server, CA data, client cert data, key data.
fn through_kube(s: &Sanitized) -> kube::config::Kubeconfig {
    let yaml = String::from_utf8(s.to_yaml().expose().to_vec()).unwrap();
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).expect("kube-rs reads the output");
    assert_eq!(kc.clusters.len(), 1);
    assert_eq!(kc.auth_infos.len(), 1);
    assert_eq!(kc.contexts.len(), 1);
    assert_eq!(kc.current_context.as_deref(), Some(s.name()));
    kc
}

#[test]
fn k3s_parses_sanitizes_and_rewrites() {
    let f = fixture(Shape::K3s);
    let mut s = sanitized(&f.yaml, "dev");
    assert_eq!(s.server().as_str(), "https://127.0.0.1:6443/");
    assert_eq!(s.ca_der(), f.ca.der.as_slice());
    let client = f.client_ca.as_ref().unwrap();
    assert_eq!(
        s.client_chain_der(),
        vec![f.leaf.der.clone(), client.der.clone()]
    );
    let roles: Vec<CertRole> = s.certificates().iter().map(|(r, _)| *r).collect();
    assert_eq!(
        roles,
        [CertRole::ClusterCa, CertRole::Client, CertRole::ClientChain]
    );
    assert!(s.has_client_key() && !s.has_token());

    s.rewrite_server("192.168.1.20", None, None).unwrap();
    assert_eq!(s.server_string(), "https://192.168.1.20:6443");

    let kc = through_kube(&s);
    let cluster = kc.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(kc.clusters[0].name, "dev");
    assert_eq!(cluster.server.as_deref(), Some("https://192.168.1.20:6443"));
    let ca_pem = STANDARD
        .decode(cluster.certificate_authority_data.as_ref().unwrap())
        .unwrap();
    assert_eq!(
        certs::certificates_der(&ca_pem).unwrap(),
        vec![f.ca.der.clone()]
    );
    let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
    let chain_pem = STANDARD
        .decode(user.client_certificate_data.as_ref().unwrap())
        .unwrap();
    assert_eq!(certs::certificates_der(&chain_pem).unwrap().len(), 2);
    let key_b64 =
        secrecy::ExposeSecret::expose_secret(user.client_key_data.as_ref().unwrap()).to_owned();
    let key_pem = String::from_utf8(STANDARD.decode(key_b64).unwrap()).unwrap();
    assert!(
        key_pem.starts_with("-----BEGIN EC PRIVATE KEY-----\n"),
        "keeps SEC1"
    );
    // Same key as the node's, re-encoded the way openssl writes it.
    assert_eq!(key_pem, f.key_pem);
}

#[test]
fn rke2_rewrites_to_ipv6_with_port_and_tls_server_name() {
    let f = fixture(Shape::Rke2);
    let mut s = sanitized(&f.yaml, "test");
    assert!(s.client_certs()[1].subject.contains("rke2-client-ca@"));
    s.rewrite_server("fd00::20", Some(7443), Some("api.test.example"))
        .unwrap();
    assert_eq!(s.server_string(), "https://[fd00::20]:7443");
    assert_eq!(s.tls_server_name(), Some("api.test.example"));
    s.rewrite_server("[fd00::21]", None, None).unwrap();
    assert_eq!(s.server_string(), "https://[fd00::21]:7443", "port kept");
    assert_eq!(
        s.tls_server_name(),
        Some("api.test.example"),
        "kept when not given"
    );
    let kc = through_kube(&s);
    let cluster = kc.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(cluster.server.as_deref(), Some("https://[fd00::21]:7443"));
    assert_eq!(cluster.tls_server_name.as_deref(), Some("api.test.example"));
}

#[test]
fn kubeadm_selects_its_context_and_keeps_rsa_pkcs1() {
    let f = fixture(Shape::Kubeadm);
    let kc = kubeconfig::parse(f.yaml.as_bytes()).unwrap();
    assert_eq!(kc.current_context(), Some("kubernetes-admin@kubernetes"));
    let mut s = kubeconfig::sanitize(&kc, "prod-1").unwrap();
    assert_eq!(s.server_string(), "https://10.0.0.10:6443");
    assert_eq!(s.client_chain_der(), vec![f.leaf.der.clone()]);
    s.rewrite_server("API.Prod.example.org", None, None)
        .unwrap();
    assert_eq!(s.server_string(), "https://api.prod.example.org:6443");
    let yaml = String::from_utf8(s.to_yaml().expose().to_vec()).unwrap();
    assert!(
        !yaml.contains("kubernetes-admin"),
        "entries renamed after the spoke:\n{yaml}"
    );
    let kc = through_kube(&s);
    assert_eq!(kc.auth_infos[0].name, "prod-1");
    let key_b64 = secrecy::ExposeSecret::expose_secret(
        kc.auth_infos[0]
            .auth_info
            .as_ref()
            .unwrap()
            .client_key_data
            .as_ref()
            .unwrap(),
    )
    .to_owned();
    let key_pem = String::from_utf8(STANDARD.decode(key_b64).unwrap()).unwrap();
    assert!(key_pem.starts_with("-----BEGIN RSA PRIVATE KEY-----\n"));
}

#[tokio::test]
async fn kube_rs_builds_a_client_from_the_output() {
    // Goes as far as kube-rs goes without a server: loads the CA, the client
    // certificate and key into its TLS configuration.
    let _ = rustls::crypto::ring::default_provider().install_default();
    for shape in [Shape::K3s, Shape::Kubeadm] {
        let mut s = sanitized(&fixture(shape).yaml, "dev");
        s.rewrite_server("192.0.2.1", None, None).unwrap();
        let kc = through_kube(&s);
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .expect("kube-rs accepts the kubeconfig");
        assert_eq!(config.cluster_url.to_string(), "https://192.0.2.1:6443/");
        kube::Client::try_from(config).expect("kube-rs builds a TLS client with the identity");
    }
}

#[test]
fn output_is_idempotent_and_hash_matches_sha256() {
    let f = fixture(Shape::K3s);
    let s = sanitized(&f.yaml, "dev");
    let once = s.to_yaml();
    let again = sanitized(std::str::from_utf8(once.expose()).unwrap(), "dev");
    assert_eq!(
        again.to_yaml().expose(),
        once.expose(),
        "sanitizing the output changes nothing"
    );
    let openssl_hex =
        String::from_utf8(openssl(&["dgst", "-sha256", "-r"], once.expose())).unwrap();
    assert_eq!(
        s.content_sha256().to_string(),
        openssl_hex.split_whitespace().next().unwrap()
    );
}

#[test]
fn reordered_and_restyled_input_gives_the_same_bytes() {
    let f = fixture(Shape::K3s);
    let ca = b64(&f.ca.pem);
    let chain = b64(&format!(
        "{}{}",
        f.leaf.pem,
        f.client_ca.as_ref().unwrap().pem
    ));
    let key = b64(&f.key_pem);
    // Same content: keys in another order, flow style, quoting, wrapped base64, comments,
    // and fields that are dropped.
    let wrapped: String = key
        .as_bytes()
        .chunks(60)
        .map(|c| format!("      {}\n", std::str::from_utf8(c).unwrap()))
        .collect();
    let reordered = format!(
        "# written by hand\nusers:\n- user:\n    client-key-data: >-\n{wrapped}    client-certificate-data: \"{chain}\"\n    as: someone-else\n  name: default\n\
         kind: Config\ncurrent-context: 'default'\npreferences: {{colors: true}}\n\
         contexts: [{{name: default, context: {{user: default, namespace: kube-system, cluster: default}}}}]\n\
         clusters:\n- name: default\n  cluster: {{server: \"https://127.0.0.1:6443\", certificate-authority-data: {ca}, disable-compression: true}}\napiVersion: v1\n"
    );
    let a = sanitized(&f.yaml, "dev");
    let b = sanitized(&reordered, "dev");
    assert_eq!(a.to_yaml().expose(), b.to_yaml().expose());
    assert_eq!(a.content_sha256(), b.content_sha256());
    let text = String::from_utf8(b.to_yaml().expose().to_vec()).unwrap();
    for dropped in [
        "someone-else",
        "kube-system",
        "colors",
        "disable-compression",
    ] {
        assert!(!text.contains(dropped), "{dropped} dropped:\n{text}");
    }
}

#[test]
fn output_has_only_the_kept_fields() {
    let f = fixture(Shape::K3s);
    let yaml = with_user_line(&f.yaml, "token: abc.def");
    let yaml = with_cluster_line(&yaml, "tls-server-name: k3s.example");
    let text = String::from_utf8(sanitized(&yaml, "dev").to_yaml().expose().to_vec()).unwrap();
    let keys: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_start().trim_start_matches("- ").split(':').next())
        .collect();
    assert_eq!(
        keys,
        [
            "apiVersion",
            "clusters",
            "cluster",
            "certificate-authority-data",
            "server",
            "tls-server-name",
            "name",
            "contexts",
            "context",
            "cluster",
            "user",
            "name",
            "current-context",
            "kind",
            "preferences",
            "users",
            "name",
            "user",
            "client-certificate-data",
            "client-key-data",
            "token",
        ]
    );
}

#[test]
fn token_only_user_is_kept_and_never_printed() {
    let f = fixture(Shape::Kubeadm);
    let secret_token = "sktok3n.e1e2e3e4e5e6e7e8";
    let start = f.yaml.find("    client-certificate-data").unwrap();
    let token_only = format!("{}    token: {secret_token}\n", &f.yaml[..start]);
    let kc = kubeconfig::parse(token_only.as_bytes()).unwrap();
    let s = kubeconfig::sanitize(&kc, "dev").unwrap();
    assert!(s.has_token() && !s.has_client_key() && s.client_certs().is_empty());
    let shown = format!("{kc:?} {s:?} {s:#?} {:?}", s.to_yaml());
    assert!(!shown.contains(secret_token), "{shown}");
    let out =
        kube::config::Kubeconfig::from_yaml(std::str::from_utf8(s.to_yaml().expose()).unwrap())
            .unwrap();
    let token = out.auth_infos[0]
        .auth_info
        .as_ref()
        .unwrap()
        .token
        .as_ref()
        .unwrap();
    assert_eq!(secrecy::ExposeSecret::expose_secret(token), secret_token);
    // A token that could break out of its quotes is refused, without being echoed.
    let quoted = token_only.replace(secret_token, "'sk\"tok'");
    let e = assert_refused_naming(&quoted, "users[kubernetes-admin].user.token");
    assert!(!e.to_string().contains("sk\""), "{e}");
}

#[test]
fn key_material_never_appears_in_debug_or_errors() {
    let f = fixture(Shape::K3s);
    let key_b64 = b64(&f.key_pem);
    let key_body: String = f.key_pem.lines().nth(1).unwrap().to_owned();
    let kc = kubeconfig::parse(f.yaml.as_bytes()).unwrap();
    let s = kubeconfig::sanitize(&kc, "dev").unwrap();
    let review = kubeconfig::review(&kc, OffsetDateTime::now_utc());
    let shown = format!("{kc:?} {kc:#?} {s:?} {s:#?} {review:?}");
    // Errors that mention the key field, including a parse error right at the key.
    let mismatch = refusal(
        f.yaml
            .replace(&key_b64, &b64(&fixture(Shape::K3s).key_pem))
            .as_bytes(),
    );
    let typed = refusal(
        with_cluster_line(&f.yaml, &format!("insecure-skip-tls-verify: \"{key_b64}\"")).as_bytes(),
    );
    let errors = format!("{mismatch} {mismatch:?} {typed} {typed:?}");
    for text in [&shown, &errors] {
        assert!(!text.contains(&key_b64[..40]), "{text}");
        assert!(!text.contains(&key_body), "{text}");
    }
}

#[test]
fn expired_and_future_certificates_are_reported_by_field() {
    let expired = fixture_with(Shape::K3s, validity(-400, -5));
    let s = sanitized(&expired.yaml, "dev");
    let now = OffsetDateTime::now_utc();
    let problems = s.validity_problems(now);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        matches!(&problems[0], KubeconfigError::Expired { field, .. } if field == "users[dev].user.client-certificate-data")
    );
    assert!(s.client_certs()[0].days_left(now) < -4);
    let future = fixture_with(Shape::Kubeadm, validity(3, 300));
    let kc = kubeconfig::parse(future.yaml.as_bytes()).unwrap();
    let review = kubeconfig::review(&kc, now);
    assert!(
        matches!(&review.problems[..], [KubeconfigError::NotYetValid { field, .. }] if field == "users[kubernetes-admin].user.client-certificate-data"),
        "{:?}",
        review.problems
    );
    assert!(
        sanitized(&fixture(Shape::K3s).yaml, "dev")
            .validity_problems(now)
            .is_empty()
    );
}

#[test]
fn review_lists_every_problem() {
    let f = fixture(Shape::K3s);
    let yaml = with_user_line(&f.yaml, "exec: {command: x}");
    let yaml = with_cluster_line(&yaml, "insecure-skip-tls-verify: true");
    let yaml = yaml.replace(&b64(&f.key_pem), &b64(&fixture(Shape::K3s).key_pem));
    let kc = kubeconfig::parse(yaml.as_bytes()).unwrap();
    let review = kubeconfig::review(&kc, OffsetDateTime::now_utc());
    let fields: Vec<&str> = review.problems.iter().filter_map(|p| p.field()).collect();
    assert_eq!(
        fields,
        [
            "clusters[default].cluster.insecure-skip-tls-verify",
            "users[default].user.exec",
            "users[default].user.client-key-data"
        ]
    );
    assert_eq!(
        review.certificates.len(),
        3,
        "certificates are shown even when refused"
    );
    assert_eq!(review.server.as_deref(), Some("https://127.0.0.1:6443"));
}

#[test]
fn key_kinds_are_preserved() {
    // Keys pass through unchanged in kind; PKCS#8 stays PKCS#8.
    let f = fixture(Shape::K3s);
    let yaml = f.yaml.replace(&b64(&f.key_pem), &b64(&f.leaf.key_pem));
    let s = sanitized(&yaml, "dev");
    let text = String::from_utf8(s.to_yaml().expose().to_vec()).unwrap();
    let key_line = text
        .lines()
        .find(|l| l.contains("client-key-data"))
        .unwrap();
    let key_pem = STANDARD
        .decode(key_line.split(": ").nth(1).unwrap())
        .unwrap();
    assert!(
        key_pem.starts_with(format!("-----BEGIN {}-----", KeyKind::Pkcs8.pem_label()).as_bytes())
    );
}

#[test]
fn an_api_server_url_is_taken_whole_port_and_path_included() {
    let f = fixture(Shape::K3s);
    let mut s = sanitized(&f.yaml, "dev");
    assert_eq!(s.server_string(), "https://127.0.0.1:6443");
    // A load balancer on 443: the default port is kept, not the node's 6443.
    s.set_server(&url::Url::parse("https://lb.example.org").unwrap())
        .unwrap();
    assert_eq!(s.server_string(), "https://lb.example.org");
    assert_eq!(s.server().port_or_known_default(), Some(443));
    // A reverse proxy under a path.
    s.set_server(&url::Url::parse("https://10.0.0.1:8443/k8s/clusters/c-1").unwrap())
        .unwrap();
    assert_eq!(s.server_string(), "https://10.0.0.1:8443/k8s/clusters/c-1");
    let kc = through_kube(&s);
    assert_eq!(
        kc.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
        Some("https://10.0.0.1:8443/k8s/clusters/c-1")
    );
    for bad in ["https://u:p@lb.example.org", "https://lb.example.org/?x=1"] {
        let e = s.set_server(&url::Url::parse(bad).unwrap()).unwrap_err();
        assert_eq!(e.field(), Some("api_server"), "{bad}: {e}");
    }
}

mod refused;
