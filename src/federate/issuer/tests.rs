use super::*;
use crate::config::Config;
use crate::federate::trust_fingerprint;

/// A self-signed CA certificate, PEM.
fn ca_pem() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.self_signed(&key).unwrap().pem()
}

fn policy(dir: &Path, federated: &str) -> FederatedPolicy {
    let text = format!(
        "repo: {{path: f}}\nsealing: {{cert: c}}\nhub: {{}}\nspokes:\n- {{name: dev, address: 10.0.0.1, credential: {{mode: federated, federated: {federated}}}}}\n"
    );
    let mut c = Config::parse(&text, "t.yaml", dir).unwrap();
    c.spokes.remove(0).credential.federated.unwrap()
}

#[test]
fn an_edit_of_the_issuer_ca_files_content_changes_the_fingerprint_once_per_read() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hub-ca.pem");
    let old = ca_pem();
    std::fs::write(&file, &old).unwrap();
    let p = policy(
        dir.path(),
        "{issuer: \"https://hub\", issuer_ca: hub-ca.pem}",
    );
    let before = IssuerCas::read([&p]);
    let fingerprint = trust_fingerprint(&p, &before);
    // The same content read again: the same fingerprint.
    assert_eq!(trust_fingerprint(&p, &IssuerCas::read([&p])), fingerprint);
    // The hub's new CA beside the old one: every spoke's file is to be rewritten.
    std::fs::write(&file, format!("{old}{}", ca_pem())).unwrap();
    let both = IssuerCas::read([&p]);
    assert_ne!(trust_fingerprint(&p, &both), fingerprint);
    assert_eq!(
        crate::certs::certificates_der(both.pem(&file).unwrap().as_bytes())
            .unwrap()
            .len(),
        2
    );
    // What a tick read stays what it uses: the file's later edits wait for the next.
    assert_eq!(trust_fingerprint(&p, &before), fingerprint);
    // An unreadable file fingerprints apart and fails the rotation naming the field.
    std::fs::write(&file, "not a certificate").unwrap();
    let broken = IssuerCas::read([&p]);
    assert_ne!(trust_fingerprint(&p, &broken), fingerprint);
    let e = broken.pem(&file).unwrap_err().to_string();
    assert!(e.starts_with("credential.federated.issuer_ca "), "{e}");
}

#[test]
fn a_next_issuer_or_an_own_account_changes_the_fingerprint_and_a_policy_without_either_keeps_its_old_one()
 {
    let dir = tempfile::tempdir().unwrap();
    let p = policy(dir.path(), "{issuer: \"https://hub\"}");
    let cas = IssuerCas::read([&p]);
    // What every federated spoke recorded before next existed: unchanged, no churn.
    let legacy = serde_json::json!({
        "issuer": "https://hub",
        "discovery": "https://hub/.well-known/openid-configuration",
        "issuer_ca": null,
        "accounts": ["flux-system/kustomize-controller", "flux-system/helm-controller"],
        "check_as": "spokekeeper/spokekeeper",
        "prefix": "hub:",
    });
    assert_eq!(
        trust_fingerprint(&p, &cas),
        crate::fingerprint::Fingerprint::of(legacy.to_string().as_bytes())
    );
    // A spoke's own hub account changes it too, and only when set (the legacy above).
    let mut own = p.clone();
    own.own_account = Some(p.service_accounts[0].clone());
    assert_ne!(trust_fingerprint(&own, &cas), trust_fingerprint(&p, &cas));
    let next = policy(
        dir.path(),
        "{issuer: \"https://hub\", next: {issuer: \"https://new\"}}",
    );
    let other = policy(
        dir.path(),
        "{issuer: \"https://hub\", next: {issuer: \"https://new\", discovery_url: \"https://10.0.0.9/doc\"}}",
    );
    let all = [
        trust_fingerprint(&p, &cas),
        trust_fingerprint(&next, &cas),
        trust_fingerprint(&other, &cas),
    ];
    assert_eq!(
        all.iter().collect::<std::collections::BTreeSet<_>>().len(),
        3
    );
}

#[test]
fn each_ca_file_is_read_once_and_the_probe_is_aimed_at_the_discovery_urls_origin() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.pem"), ca_pem()).unwrap();
    let p = policy(
        dir.path(),
        "{issuer: \"https://hub\", issuer_ca: a.pem, next: {issuer: \"https://new\", issuer_ca: b.pem}}",
    );
    let cas = IssuerCas::read([&p, &p]);
    assert_eq!(cas.read.len(), 2);
    assert!(cas.pem(&dir.path().join("a.pem")).is_ok());
    // b.pem is missing: the next issuer's trust cannot be written, saying which file.
    let e = cas.pem(&dir.path().join("b.pem")).unwrap_err().to_string();
    assert!(e.contains("b.pem"), "{e}");
    assert_eq!(
        origin("https://hub.example/.well-known/openid-configuration").as_deref(),
        Some("https://hub.example:443")
    );
    assert_eq!(
        origin("https://[fd00::1]:6443/x").as_deref(),
        Some("https://[fd00::1]:6443")
    );
    assert_eq!(origin("not a url"), None);
}
