use rcgen::CertificateParams;
use rustls::pki_types::pem::PemObject;

use super::*;
use crate::PkiOptions;

fn pki() -> Pki {
    Pki::generate(&PkiOptions {
        address: "127.0.0.1".parse().unwrap(),
        address_in_sans: true,
        client_cert_days: 30,
    })
}

const MASTERS: &[&str] = &["system:masters", "system:authenticated"];

fn call(
    o: &mut Objects,
    user: &str,
    groups: &[&str],
    method: &str,
    path: &str,
    body: Value,
) -> Reply {
    let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    o.handle(
        &Caller {
            name: user,
            groups: &groups,
        },
        method,
        path,
        query,
        &bytes,
    )
}

fn admin(o: &mut Objects, method: &str, path: &str, body: Value) -> Reply {
    call(o, "system:admin", MASTERS, method, path, body)
}

fn csr(name: &str, cn: &str, seconds: i64) -> Value {
    use base64::Engine as _;
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::default();
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    let pem = p.serialize_request(&key).unwrap().pem().unwrap();
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "spokekeeper"}},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": CLIENT_SIGNER, "expirationSeconds": seconds,
            "usages": ["client auth"]}})
}

fn approved(mut created: Value) -> Value {
    created["status"]["conditions"] = json!([{"type": "Approved", "status": "True",
        "reason": "SpokekeeperMint", "message": "test"}]);
    created
}

fn binding(name: &str, user: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "spokekeeper"}},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "User", "apiGroup": RBAC_GROUP, "name": user}]})
}

fn certificate(o: &mut Objects, name: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let got = admin(o, "GET", &format!("{CSRS}/{name}"), Value::Null);
    let pem = base64::engine::general_purpose::STANDARD
        .decode(got.body["status"]["certificate"].as_str()?)
        .unwrap();
    Some(CertificateDer::from_pem_slice(&pem).unwrap().to_vec())
}

#[test]
fn an_approved_client_csr_is_signed_after_the_approval_with_its_cn_and_ttl() {
    let pki = pki();
    let mut o = Objects::new(Signer::client_ca(&pki));
    let created = admin(&mut o, "POST", CSRS, csr("a", "spokekeeper:hub:3", 3600));
    assert_eq!(created.code, 201, "{:?}", created.body);
    assert_eq!(created.body["spec"]["username"], "system:admin");
    assert_eq!(created.body["status"], json!({}));
    assert_eq!(certificate(&mut o, "a"), None, "not signed before approval");

    let approval = admin(
        &mut o,
        "PUT",
        &format!("{CSRS}/a/approval"),
        approved(created.body),
    );
    assert_eq!(approval.code, 200, "{:?}", approval.body);
    assert_eq!(approval.body["status"]["conditions"][0]["type"], "Approved");
    assert!(
        approval.body["status"]["certificate"].is_null(),
        "the signer acts later"
    );

    let der = certificate(&mut o, "a").expect("signed once approved");
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .unwrap()
        .as_str()
        .unwrap();
    assert_eq!(cn, "spokekeeper:hub:3");
    assert_eq!(
        cert.issuer().to_string(),
        X509Certificate::from_der(&pki.client_ca_der)
            .unwrap()
            .1
            .subject()
            .to_string()
    );
    let not_after = cert.validity().not_after.timestamp();
    let now = OffsetDateTime::now_utc().unix_timestamp();
    assert!(
        not_after <= now + 3600 && not_after > now + 3500,
        "{not_after} vs {now}"
    );
}

#[test]
fn the_signing_duration_caps_what_a_csr_asks_as_kcm_does() {
    let pki = pki();
    let mut o = Objects::new(Signer::client_ca(&pki));
    o.sign_at_most(24 * 3600);
    let created = admin(&mut o, "POST", CSRS, csr("a", "u", 30 * 86_400));
    admin(
        &mut o,
        "PUT",
        &format!("{CSRS}/a/approval"),
        approved(created.body),
    );
    let der = certificate(&mut o, "a").expect("signed");
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    let not_after = cert.validity().not_after.timestamp();
    let now = OffsetDateTime::now_utc().unix_timestamp();
    // 24h, backdated 5 minutes (24h is not short), not the 30 days asked.
    let expected = now + 24 * 3600 - BACKDATE;
    assert!(
        (expected - 5..=expected).contains(&not_after),
        "{not_after} vs {expected}"
    );
}

#[test]
fn without_a_signer_an_approved_csr_stays_unsigned_without_condition() {
    let mut o = Objects::new(Signer::Missing);
    let created = admin(&mut o, "POST", CSRS, csr("a", "u", 3600));
    admin(
        &mut o,
        "PUT",
        &format!("{CSRS}/a/approval"),
        approved(created.body),
    );
    let got = admin(&mut o, "GET", &format!("{CSRS}/a"), Value::Null);
    assert!(got.body["status"]["certificate"].is_null());
    let types: Vec<&Value> = got.body["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["type"])
        .collect();
    assert_eq!(types, vec!["Approved"]);
}

#[test]
fn denying_approvals_stores_a_denial_and_signs_nothing() {
    let pki = pki();
    let mut o = Objects::new(Signer::client_ca(&pki));
    o.deny_approvals();
    let created = admin(&mut o, "POST", CSRS, csr("a", "u", 3600));
    let approval = admin(
        &mut o,
        "PUT",
        &format!("{CSRS}/a/approval"),
        approved(created.body),
    );
    assert_eq!(approval.code, 200);
    assert_eq!(approval.body["status"]["conditions"][0]["type"], "Denied");
    assert_eq!(certificate(&mut o, "a"), None);
}

#[test]
fn errors_are_the_api_servers_statuses() {
    let mut o = Objects::new(Signer::Missing);
    let first = admin(&mut o, "POST", CSRS, csr("a", "u", 3600));
    let again = admin(&mut o, "POST", CSRS, csr("a", "u", 3600));
    assert_eq!(
        (again.code, again.body["reason"].as_str()),
        (409, Some("AlreadyExists"))
    );
    assert_eq!(again.body["details"]["name"], "a");
    let short = admin(&mut o, "POST", CSRS, csr("b", "u", 599));
    assert_eq!(
        (short.code, short.body["reason"].as_str()),
        (422, Some("Invalid"))
    );
    assert_eq!(
        short.body["details"]["causes"][0]["field"],
        "spec.expirationSeconds"
    );
    let missing = admin(&mut o, "GET", &format!("{CSRS}/nothing"), Value::Null);
    assert_eq!(
        (missing.code, missing.body["reason"].as_str()),
        (404, Some("NotFound"))
    );
    assert_eq!(
        missing.body["details"]["kind"],
        "certificatesigningrequests"
    );
    // An approval on a stale resourceVersion: someone changed it since.
    let mut stale = approved(first.body.clone());
    stale["metadata"]["resourceVersion"] = json!("1");
    let r = admin(&mut o, "PUT", &format!("{CSRS}/a/approval"), stale);
    assert_eq!((r.code, r.body["reason"].as_str()), (409, Some("Conflict")));
    let deleted = admin(&mut o, "DELETE", &format!("{CSRS}/a"), Value::Null);
    assert_eq!(
        (deleted.code, deleted.body["status"].as_str()),
        (200, Some("Success"))
    );
    let gone = admin(&mut o, "DELETE", &format!("{CSRS}/a"), Value::Null);
    assert_eq!(gone.code, 404);
    assert!(o.csr_names().is_empty());
}

#[test]
fn a_user_is_authorized_only_while_bound_to_cluster_admin() {
    let mut o = Objects::new(Signer::Missing);
    let user = "spokekeeper:hub:1";
    let as_user = |o: &mut Objects| {
        call(
            o,
            user,
            &["system:authenticated"],
            "GET",
            &format!("{BINDINGS}?labelSelector=a%3Db"),
            Value::Null,
        )
    };
    let denied = as_user(&mut o);
    assert_eq!(
        (denied.code, denied.body["reason"].as_str()),
        (403, Some("Forbidden"))
    );
    assert!(
        denied.body["details"].get("name").is_none(),
        "{:?}",
        denied.body
    );
    let approve = call(
        &mut o,
        user,
        &["system:authenticated"],
        "PUT",
        &format!("{CSRS}/x/approval"),
        json!({}),
    );
    assert_eq!(approve.code, 403);
    assert!(
        approve.body["message"]
            .as_str()
            .unwrap()
            .contains("certificatesigningrequests/approval")
    );

    let created = admin(
        &mut o,
        "POST",
        BINDINGS,
        binding("spokekeeper-hub-g1", user),
    );
    assert_eq!(created.code, 201, "{:?}", created.body);
    assert_eq!(as_user(&mut o).code, 200);
    // A binding to a role that does not exist grants nothing.
    admin(&mut o, "POST", BINDINGS, {
        let mut b = binding("other", "someone");
        b["roleRef"]["name"] = json!("missing");
        b
    });
    assert_eq!(
        call(&mut o, "someone", &[], "GET", BINDINGS, Value::Null).code,
        403
    );

    admin(
        &mut o,
        "DELETE",
        &format!("{BINDINGS}/spokekeeper-hub-g1"),
        Value::Null,
    );
    assert_eq!(as_user(&mut o).code, 403);
}

#[test]
fn approving_needs_the_approval_subresource_and_approve_on_the_signer() {
    let mut o = Objects::new(Signer::Missing);
    let user = "lab:approver";
    o.grant(user, &["create", "get"], "certificatesigningrequests");
    let as_user = |o: &mut Objects, method: &str, path: &str, body: Value| {
        call(o, user, &["system:authenticated"], method, path, body)
    };
    let created = as_user(&mut o, "POST", CSRS, csr("a", "u", 3600));
    assert_eq!(created.code, 201);
    let path = format!("{CSRS}/a/approval");
    let body = approved(created.body);
    let no_update = as_user(&mut o, "PUT", &path, body.clone());
    assert_eq!(no_update.code, 403);
    o.grant(user, &["update"], "certificatesigningrequests/approval");
    let no_signer = as_user(&mut o, "PUT", &path, body.clone());
    assert_eq!(no_signer.code, 403);
    assert!(
        no_signer.body["message"]
            .as_str()
            .unwrap()
            .contains("not permitted to approve requests with signerName"),
        "{:?}",
        no_signer.body
    );
    o.grant(user, &["approve"], "signers");
    assert_eq!(as_user(&mut o, "PUT", &path, body).code, 200);
    // Granted rights are that user's only.
    let other = call(
        &mut o,
        "lab:other",
        &[],
        "GET",
        &format!("{CSRS}/a"),
        Value::Null,
    );
    assert_eq!(other.code, 403);
}

#[test]
fn bindings_are_listed_by_label() {
    let mut o = Objects::new(Signer::Missing);
    admin(&mut o, "POST", BINDINGS, binding("ours", "u"));
    let mut theirs = binding("theirs", "u");
    theirs["metadata"]["labels"] = json!({"app": "other"});
    admin(&mut o, "POST", BINDINGS, theirs);
    let list = admin(
        &mut o,
        "GET",
        &format!("{BINDINGS}?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dspokekeeper"),
        Value::Null,
    );
    assert_eq!(list.code, 200);
    assert_eq!(list.body["kind"], "ClusterRoleBindingList");
    let names: Vec<&Value> = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["metadata"]["name"])
        .collect();
    assert_eq!(names, vec!["ours"]);
    assert!(
        list.body["items"][0].get("kind").is_none(),
        "list items carry no kind"
    );
    assert_eq!(o.binding_names(), vec!["ours", "theirs"]);
}
