//! Minted credentials: the mock's CSRs, approval, signing and ClusterRoleBindings against a
//! real spoke and its kube-controller-manager (issue 16's wire contract).

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use super::spoke_api::{SSAR, SSR};
use super::{Answer, assert_same, call, client_from_yaml, status_of};
use serde_json::{Value, json};
use spokekeeper_lab::{ApiIdentity, ApiServer, Pki};
use support::Lab;
use support::realstack::access::Lacking;
use support::realstack::kube::Etcd;
use support::realstack::spoke::RealSpoke;

pub(super) const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

const CRBS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";

const MINTED_USER: &str = "spokekeeper:hub:conform:7:0a1b2c3d";

pub(super) const MINTED_CSR: &str = "spokekeeper-conform-g7-0a1b2c3d";

const BINDING: &str = "spokekeeper.hub.conform.g7";

const TTL: i64 = 3600;

/// A CSR as the mint client sends it: ECDSA P-256, CN = the user, no O; and its key.
fn mint_request(name: &str, seconds: i64) -> (Value, rcgen::KeyPair) {
    use base64::Engine as _;
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, MINTED_USER);
    let pem = params.serialize_request(&key).unwrap().pem().unwrap();
    let csr = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "spokekeeper"}},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": "kubernetes.io/kube-apiserver-client", "expirationSeconds": seconds,
            "usages": ["client auth"]}});
    (csr, key)
}

fn binding_body() -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": BINDING, "labels": {"app.kubernetes.io/managed-by": "spokekeeper",
            "spokekeeper.io/generation": "7", "spokekeeper.io/hub": "hub",
            "spokekeeper.io/spoke": "conform"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": MINTED_USER}]})
}

/// Creates a CSR named `name` for the client signer and approves it: both answers.
pub(super) async fn create_and_approve(client: &kube::Client, name: &str) -> (Answer, Answer) {
    let (csr, _key) = mint_request(name, TTL);
    let created = call(client, "POST", CSRS, "application/json", Some(&csr)).await;
    let approved = call(
        client,
        "PUT",
        &format!("{CSRS}/{name}/approval"),
        "application/json",
        Some(&approval(created.body.clone())),
    )
    .await;
    (created, approved)
}

fn approval(mut csr: Value) -> Value {
    csr["status"]["conditions"] = json!([{"type": "Approved", "status": "True",
        "reason": "SpokekeeperMint", "message": "minted by spokekeeper"}]);
    csr
}

pub(super) fn condition_types(csr: &Value) -> Value {
    json!(
        csr["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!([c["type"], c["status"], c["reason"]]))
            .collect::<Vec<_>>()
    )
}

/// What a client reads of a signed certificate: how many PEM blocks, the CN and groups,
/// the issuer (is it the client CA?), and whether notAfter is within the requested TTL.
fn issued(csr: &Value, client_ca_der: &[u8]) -> Value {
    use base64::Engine as _;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use x509_parser::prelude::{FromDer, X509Certificate};
    let Some(b64) = csr["status"]["certificate"].as_str() else {
        return Value::Null;
    };
    let pem = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .unwrap();
    let (_, leaf) = X509Certificate::from_der(&certs[0]).unwrap();
    let (_, ca) = X509Certificate::from_der(client_ca_der).unwrap();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let not_after = leaf.validity().not_after.timestamp();
    let not_before = leaf.validity().not_before.timestamp();
    json!({
        "blocks": certs.len(),
        "cn": leaf.subject().iter_common_name().next().and_then(|c| c.as_str().ok()),
        "organizations": leaf.subject().iter_organization().count(),
        "issued by the client CA": leaf.issuer() == ca.subject(),
        "notAfter within the TTL": not_after <= now + TTL && not_after > now + TTL - 600,
        "notBefore in the past": not_before <= now,
        "is a CA": leaf.is_ca(),
    })
}

/// A kubeconfig for the minted certificate (status.certificate) and its key.
fn minted_kubeconfig(url: &str, pki: &Pki, csr: &Value, key: &rcgen::KeyPair) -> String {
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(csr["status"]["certificate"].as_str().expect("signed"))
        .unwrap();
    let parts = spokekeeper_lab::KubeconfigParts {
        ca_pem: pki.parts.ca_pem.clone(),
        client_chain_pem: String::from_utf8(pem).unwrap(),
        client_key_pem: key.serialize_pem(),
    };
    support::kubeconfig_yaml(url, &parts, None, "")
}

/// The minted user's view: who it is, whether it may do everything, and a call only a
/// binding allows. Polled until `want` (RBAC's cache follows a binding within moments).
async fn minted_view(minted: &kube::Client, want_allowed: bool) -> Value {
    let ssar = json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
        "spec": {"resourceAttributes": {"verb": "*", "group": "*", "resource": "*"}}});
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let allowed = loop {
        let a = call(minted, "POST", SSAR, "application/json", Some(&ssar)).await;
        let allowed = a.body["status"]["allowed"].clone();
        if allowed == json!(want_allowed) || std::time::Instant::now() > deadline {
            break json!({"http": a.code, "allowed": allowed});
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let ssr = json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1"});
    let who = call(minted, "POST", SSR, "application/json", Some(&ssr)).await;
    let list = call(
        minted,
        "GET",
        &format!("{CRBS}?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dspokekeeper"),
        "application/json",
        None,
    )
    .await;
    let list = if list.code == 200 {
        json!({"http": 200, "kind": list.body["kind"]})
    } else {
        status_of(&list)
    };
    let version = call(minted, "GET", "/version", "application/json", None).await;
    // Any other request: RBAC decides before routing, in the API server's words.
    let ns = call(
        minted,
        "GET",
        "/api/v1/namespaces?limit=1",
        "application/json",
        None,
    )
    .await;
    let ns = if ns.code == 200 {
        json!({"http": 200, "kind": ns.body["kind"]})
    } else {
        json!({"status": status_of(&ns), "message": ns.body["message"]})
    };
    json!({
        "list namespaces": ns,
        "ssr": {"http": who.code, "username": who.body["status"]["userInfo"]["username"],
                "groups": who.body["status"]["userInfo"]["groups"]},
        "ssar * * *": allowed,
        "list bindings": list,
        "GET /version": version.code,
    })
}

/// Polls the CSR until it has a certificate or a Denied/Failed condition, or `within`.
pub(super) async fn poll_csr(admin: &kube::Client, name: &str, within: Duration) -> Answer {
    let deadline = std::time::Instant::now() + within;
    loop {
        let a = call(admin, "GET", &format!("{CSRS}/{name}"), "", None).await;
        let done = a.body["status"]["certificate"].is_string()
            || a.body["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Denied" || c["type"] == "Failed");
        if done || std::time::Instant::now() > deadline {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The mint contract's calls, in the client's order, with the failure cases: `admin` is
/// in system:masters; `no_approve` lacks the right to approve; `url` and `pki` make the
/// minted user's kubeconfig.
async fn mint_transcript(
    admin: &kube::Client,
    no_approve: &kube::Client,
    url: &str,
    pki: &Pki,
) -> Vec<(String, Value)> {
    let mut t = Vec::new();
    let (csr, key) = mint_request(MINTED_CSR, TTL);
    let a = call(admin, "POST", CSRS, "application/json", Some(&csr)).await;
    t.push((
        "create the CSR".into(),
        json!({"http": a.code, "kind": a.body["kind"], "name": a.body["metadata"]["name"],
               "labels": a.body["metadata"]["labels"],
               "resourceVersion": a.body["metadata"]["resourceVersion"].is_string(),
               "signerName": a.body["spec"]["signerName"],
               "expirationSeconds": a.body["spec"]["expirationSeconds"],
               "usages": a.body["spec"]["usages"], "username": a.body["spec"]["username"],
               "status": a.body["status"]}),
    ));
    let created = a.body;
    let a = call(admin, "POST", CSRS, "application/json", Some(&csr)).await;
    t.push(("create it again".into(), status_of(&a)));
    let (short, _) = mint_request("spokekeeper-conform-g7-short", 599);
    let a = call(admin, "POST", CSRS, "application/json", Some(&short)).await;
    t.push(("create one for 599 s".into(), status_of(&a)));

    approval_steps(admin, no_approve, created, &mut t).await;
    let signed = poll_csr(admin, MINTED_CSR, Duration::from_secs(30)).await;
    t.push((
        "signed after approval".into(),
        json!({"http": signed.code, "conditions": condition_types(&signed.body),
               "certificate": issued(&signed.body, &pki.client_ca_der)}),
    ));
    let minted = client_from_yaml_async(&minted_kubeconfig(url, pki, &signed.body, &key)).await;

    t.push((
        "the minted user, no binding".into(),
        minted_view(&minted, false).await,
    ));
    binding_steps(admin, &mut t).await;
    t.push((
        "the minted user, bound".into(),
        minted_view(&minted, true).await,
    ));
    let a = call(admin, "DELETE", &format!("{CRBS}/{BINDING}"), "", None).await;
    t.push((
        "delete the binding".into(),
        json!({"http": a.code, "kind": a.body["kind"], "status": a.body["status"],
               "details": {"name": a.body["details"]["name"], "kind": a.body["details"]["kind"]}}),
    ));
    t.push((
        "the minted user, binding deleted".into(),
        minted_view(&minted, false).await,
    ));
    let a = call(admin, "DELETE", &format!("{CSRS}/{MINTED_CSR}"), "", None).await;
    t.push((
        "delete the CSR".into(),
        json!({"http": a.code, "kind": a.body["kind"], "status": a.body["status"],
               "details": {"name": a.body["details"]["name"], "kind": a.body["details"]["kind"]}}),
    ));
    let a = call(admin, "GET", &format!("{CSRS}/{MINTED_CSR}"), "", None).await;
    t.push(("get the deleted CSR".into(), status_of(&a)));
    let a = call(admin, "DELETE", &format!("{CSRS}/{MINTED_CSR}"), "", None).await;
    t.push(("delete it again".into(), status_of(&a)));
    t
}

/// Nothing signs an unapproved CSR; approval without the right, or of a stale version,
/// is refused; then it is approved.
async fn approval_steps(
    admin: &kube::Client,
    no_approve: &kube::Client,
    created: Value,
    t: &mut Vec<(String, Value)>,
) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let a = call(admin, "GET", &format!("{CSRS}/{MINTED_CSR}"), "", None).await;
    t.push((
        "unapproved, 2 s later".into(),
        json!({"http": a.code, "certificate": a.body["status"]["certificate"],
               "conditions": condition_types(&a.body)}),
    ));
    let approve_path = format!("{CSRS}/{MINTED_CSR}/approval");
    let a = call(
        no_approve,
        "PUT",
        &approve_path,
        "application/json",
        Some(&approval(created.clone())),
    )
    .await;
    t.push(("approve without the right".into(), status_of(&a)));
    let mut stale = approval(created.clone());
    stale["metadata"]["resourceVersion"] = json!("1");
    let a = call(
        admin,
        "PUT",
        &approve_path,
        "application/json",
        Some(&stale),
    )
    .await;
    t.push(("approve a stale version".into(), status_of(&a)));
    let a = call(
        admin,
        "PUT",
        &approve_path,
        "application/json",
        Some(&approval(created)),
    )
    .await;
    t.push((
        "approve".into(),
        json!({"http": a.code, "conditions": condition_types(&a.body),
               "certificate": a.body["status"]["certificate"]}),
    ));
}

/// The binding: missing, created, created again, listed by label and in each scope;
/// cluster-admin's rules.
async fn binding_steps(admin: &kube::Client, t: &mut Vec<(String, Value)>) {
    let a = call(admin, "GET", &format!("{CRBS}/{BINDING}"), "", None).await;
    t.push(("get the missing binding".into(), status_of(&a)));
    let a = call(
        admin,
        "POST",
        CRBS,
        "application/json",
        Some(&binding_body()),
    )
    .await;
    t.push((
        "create the binding".into(),
        json!({"http": a.code, "kind": a.body["kind"], "name": a.body["metadata"]["name"],
               "labels": a.body["metadata"]["labels"], "roleRef": a.body["roleRef"],
               "subjects": a.body["subjects"]}),
    ));
    let a = call(
        admin,
        "POST",
        CRBS,
        "application/json",
        Some(&binding_body()),
    )
    .await;
    t.push(("create it again".into(), status_of(&a)));
    let a = call(
        admin,
        "GET",
        &format!("{CRBS}?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dspokekeeper"),
        "",
        None,
    )
    .await;
    let names: Vec<Value> = a.body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| i["metadata"]["name"].clone())
        .collect();
    t.push((
        "list bindings by label".into(),
        json!({"http": a.code, "kind": a.body["kind"], "names": names,
               "item kind": a.body["items"][0]["kind"]}),
    ));
    // As spokekeeper scopes its lists: every label must match (comma-joined, encoded).
    for (hub, spoke) in [("hub", "conform"), ("other", "conform"), ("hub", "other")] {
        let query: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair(
                "labelSelector",
                &format!(
                    "app.kubernetes.io/managed-by=spokekeeper,spokekeeper.io/hub={hub},spokekeeper.io/spoke={spoke}"
                ),
            )
            .finish();
        let a = call(admin, "GET", &format!("{CRBS}?{query}"), "", None).await;
        let names: Vec<Value> = a.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|i| i["metadata"]["name"].clone())
            .collect();
        t.push((
            format!("list bindings of hub {hub}, spoke {spoke}"),
            json!({"http": a.code, "names": names}),
        ));
    }
    let a = call(
        admin,
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin",
        "",
        None,
    )
    .await;
    t.push((
        "get cluster-admin".into(),
        json!({"http": a.code, "rules": a.body["rules"]}),
    ));
}

async fn client_from_yaml_async(yaml: &str) -> kube::Client {
    support::install_crypto_provider();
    let kc = kube::config::Kubeconfig::from_yaml(yaml).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig loads");
    kube::Client::try_from(config).expect("client")
}

#[test]
fn the_mock_mints_as_a_real_spoke_and_its_controller_manager() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let lab = Lab::new();
    let dir = support::scratch_dir();
    let etcd = Etcd::start(dir.path());
    let spoke = RealSpoke::start(&lab, &etcd, dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pki = spoke.node.pki();
    let no_approve = spoke.limited_admin(Lacking::Approve);
    let no_bind = spoke.limited_admin(Lacking::CreateBinding);
    let identity = ApiIdentity::new(pki, "v1.37.2");
    for lacking in [Lacking::Approve, Lacking::CreateBinding] {
        lacking.grant_on(&mut identity.objects().lock().unwrap());
    }
    let mock = ApiServer::start(
        rt.handle(),
        SocketAddr::new(spoke.node.address, 0),
        identity,
    )
    .unwrap();
    let mock_url = format!("https://{}:{}", spoke.node.address, mock.port);
    let client = |url: &str, parts: &spokekeeper_lab::KubeconfigParts| {
        client_from_yaml(&rt, &support::kubeconfig_yaml(url, parts, None, ""))
    };

    let real = rt.block_on(mint_transcript(
        &client(&spoke.api.url, &pki.parts),
        &client(&spoke.api.url, &no_approve),
        &spoke.api.url,
        pki,
    ));
    let emulated = rt.block_on(mint_transcript(
        &client(&mock_url, &pki.parts),
        &client(&mock_url, &no_approve),
        &mock_url,
        pki,
    ));
    assert_same(&emulated, &real);
    the_real_side_mints_as_issue_16_says(&real);

    // The other limited admin may approve but not bind, on both sides.
    let no_bind_on = |url: &str| {
        let c = client(url, &no_bind);
        rt.block_on(async move {
            let name = "spokekeeper-conform-g7-nobind";
            let (created, approved) = create_and_approve(&c, name).await;
            let bound = call(&c, "POST", CRBS, "application/json", Some(&binding_body())).await;
            let listed = call(&c, "GET", CRBS, "", None).await;
            vec![
                ("create".to_string(), json!(created.code)),
                ("approve".to_string(), json!(approved.code)),
                ("bind".to_string(), status_of(&bound)),
                ("list".to_string(), json!(listed.code)),
            ]
        })
    };
    let real_no_bind = no_bind_on(&spoke.api.url);
    assert_same(&no_bind_on(&mock_url), &real_no_bind);
    assert_eq!(real_no_bind[1].1, 200, "{real_no_bind:?}");
    assert_eq!(real_no_bind[2].1["http"], 403, "{real_no_bind:?}");
    drop(mock);
}

/// The facts the mock is held to, on the real side: signed only after approval, the
/// minted user's access before, with and after its binding.
fn the_real_side_mints_as_issue_16_says(real: &[(String, Value)]) {
    let step = |name: &str| &real.iter().find(|(n, _)| n == name).unwrap().1;
    assert_eq!(step("create the CSR")["http"], 201, "{real:#?}");
    assert_eq!(step("unapproved, 2 s later")["certificate"], Value::Null);
    assert_eq!(step("approve without the right")["http"], 403);
    assert_eq!(
        step("signed after approval")["certificate"]["cn"],
        MINTED_USER
    );
    assert_eq!(
        step("signed after approval")["certificate"]["notAfter within the TTL"],
        true
    );
    assert_eq!(
        step("the minted user, no binding")["ssar * * *"]["allowed"],
        false
    );
    assert_eq!(step("the minted user, no binding")["ssr"]["http"], 201);
    assert_eq!(
        step("the minted user, no binding")["list bindings"]["http"],
        403
    );
    assert_eq!(
        step("the minted user, bound")["ssar * * *"]["allowed"],
        true
    );
    assert_eq!(
        step("the minted user, binding deleted")["list bindings"]["http"],
        403
    );
    assert_eq!(
        step("the minted user, bound")["list namespaces"]["kind"],
        "NamespaceList"
    );
    let refused = &step("the minted user, binding deleted")["list namespaces"];
    assert_eq!(refused["status"]["http"], 403, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot list resource \"namespaces\" in API group \"\" at the cluster scope"),
        "{refused}"
    );
}
