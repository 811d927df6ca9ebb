//! The mock spoke API against a real spoke.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use super::{assert_same, call, client_from_yaml, status_of};
use serde_json::{Value, json};
use spokekeeper::secret::SecretBytes;
use spokekeeper_lab::{ApiIdentity, ApiServer, Pki};
use support::Lab;
use support::realstack::kube::Etcd;
use support::realstack::spoke::RealSpoke;

pub(super) const SSAR: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

pub(super) const SSR: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// A kubeconfig trusting the spoke's CA that presents no credential at all.
fn anonymous_kubeconfig(url: &str, pki: &Pki) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(&pki.parts.ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: default\n  cluster:\n    server: {url}\n    \
         certificate-authority-data: {ca}\ncontexts:\n- name: default\n  context: {{cluster: default, user: default}}\n\
         current-context: default\nusers:\n- name: default\n  user: {{}}\n"
    )
}

/// The discovery group's versions and preferred version, or Null when not served.
fn group(groups: &Value, name: &str) -> Value {
    groups["groups"]
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["name"] == name))
        .map(|g| json!({"versions": g["versions"], "preferredVersion": g["preferredVersion"]}))
        .unwrap_or(Value::Null)
}

/// A resource of an APIResourceList, as a client's discovery reads it.
fn resource(list: &Value, name: &str) -> Value {
    list["resources"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["name"] == name))
        .map(|r| {
            json!({"kind": r["kind"], "namespaced": r["namespaced"], "verbs": r["verbs"],
                   "singularName": r["singularName"]})
        })
        .unwrap_or(Value::Null)
}

/// Everything spokekeeper and Flux's client ask a spoke, with and without the admin's
/// client certificate.
async fn spoke_transcript(admin: &kube::Client, anonymous: &kube::Client) -> Vec<(String, Value)> {
    let mut t = Vec::new();
    let a = call(admin, "GET", "/version", "application/json", None).await;
    t.push((
        "admin GET /version".into(),
        json!({"http": a.code, "major": a.body["major"], "minor": a.body["minor"],
               "gitVersion": a.body["gitVersion"].is_string(), "platform": a.body["platform"]}),
    ));
    let a = call(admin, "GET", "/api", "application/json", None).await;
    t.push((
        "admin GET /api".into(),
        json!({"http": a.code, "kind": a.body["kind"], "versions": a.body["versions"]}),
    ));
    let a = call(admin, "GET", "/apis", "application/json", None).await;
    t.push((
        "admin GET /apis".into(),
        json!({"http": a.code, "kind": a.body["kind"],
               "authentication": group(&a.body, "authentication.k8s.io"),
               "authorization": group(&a.body, "authorization.k8s.io")}),
    ));
    for (gv, name) in [
        ("authentication.k8s.io/v1", "selfsubjectreviews"),
        ("authentication.k8s.io/v1beta1", "selfsubjectreviews"),
        ("authorization.k8s.io/v1", "selfsubjectaccessreviews"),
    ] {
        let a = call(
            admin,
            "GET",
            &format!("/apis/{gv}"),
            "application/json",
            None,
        )
        .await;
        let seen = if a.code == 200 {
            json!({"http": a.code, "kind": a.body["kind"], "groupVersion": a.body["groupVersion"],
                   "resource": resource(&a.body, name)})
        } else {
            status_of(&a)
        };
        t.push((format!("admin GET /apis/{gv}"), seen));
    }
    let ssr = json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1"});
    let a = call(admin, "POST", SSR, "application/json", Some(&ssr)).await;
    t.push((
        "admin POST SelfSubjectReview v1".into(),
        json!({"http": a.code, "kind": a.body["kind"], "apiVersion": a.body["apiVersion"],
               "username": a.body["status"]["userInfo"]["username"],
               "groups": a.body["status"]["userInfo"]["groups"]}),
    ));
    let ssar = json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                      "spec": {"resourceAttributes": {"verb": "get", "resource": "namespaces"}}});
    let a = call(admin, "POST", SSAR, "application/json", Some(&ssar)).await;
    t.push((
        "admin POST SelfSubjectAccessReview".into(),
        json!({"http": a.code, "kind": a.body["kind"], "allowed": a.body["status"]["allowed"]}),
    ));
    for path in [
        "/apis/nothing.example.org/v1",
        "/api/v1/nothing",
        "/nothing",
    ] {
        let a = call(admin, "GET", path, "application/json", None).await;
        t.push((format!("admin GET an unknown path {path}"), status_of(&a)));
    }
    let a = call(admin, "DELETE", "/version", "application/json", None).await;
    t.push(("admin DELETE /version".into(), json!({"http": a.code})));
    let a = call(admin, "GET", SSR, "application/json", None).await;
    t.push((
        "admin GET SelfSubjectReviews (create only)".into(),
        status_of(&a),
    ));
    for (method, path, body) in [
        ("GET", "/version", None),
        ("GET", "/apis", None),
        ("POST", SSR, Some(&ssr)),
        ("POST", SSAR, Some(&ssar)),
    ] {
        let a = call(anonymous, method, path, "application/json", body).await;
        t.push((format!("no certificate: {method} {path}"), status_of(&a)));
    }
    t
}

/// What `check_live` reports, but for the server's URL.
async fn live(kubeconfig: String) -> Value {
    match spokekeeper::spoke::check_live(&SecretBytes::from(kubeconfig), Duration::from_secs(30))
        .await
    {
        Ok(r) => json!({"gitVersion": r.git_version.starts_with('v'), "platform": r.platform,
                        "username": r.username, "groups": r.groups}),
        Err(e) => json!({"error": e.to_string()}),
    }
}

#[test]
fn the_mock_spoke_api_answers_as_a_real_spoke() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let lab = Lab::new();
    let dir = support::scratch_dir();
    let etcd = Etcd::start(dir.path());
    let spoke = RealSpoke::start(&lab, &etcd, dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pki = spoke.node.pki();
    let real_admin = client_from_yaml(
        &rt,
        &std::fs::read_to_string(&spoke.api.admin_kubeconfig).unwrap(),
    );
    let real_version = rt.block_on(call(&real_admin, "GET", "/version", "", None));
    // The lab's build reports gitVersion v0.0.0-master (no version stamped in); the mock
    // plays a release of the same minor, and the test compares minor, not gitVersion.
    let minor = real_version.body["minor"]
        .as_str()
        .unwrap_or_else(|| panic!("the real spoke's /version: {}", real_version.text));
    let git_version = &format!("v1.{minor}.2");

    // The mock plays the same version on the same PKI, in its default mode: no
    // anonymous callers (a 401), as the real one with --anonymous-auth=false.
    let mock = ApiServer::start(
        rt.handle(),
        SocketAddr::new(spoke.node.address, 0),
        ApiIdentity::new(pki, git_version),
    )
    .unwrap();
    let mock_url = format!("https://{}:{}", spoke.node.address, mock.port);
    let mock_admin_yaml = support::kubeconfig_yaml(&mock_url, &pki.parts, None, "");
    let real_admin_yaml = support::kubeconfig_yaml(&spoke.api.url, &pki.parts, None, "");
    let mock_admin = client_from_yaml(&rt, &mock_admin_yaml);
    let mock_anon = client_from_yaml(&rt, &anonymous_kubeconfig(&mock_url, pki));
    let real_anon = client_from_yaml(&rt, &anonymous_kubeconfig(&spoke.api.url, pki));

    let real = rt.block_on(spoke_transcript(&real_admin, &real_anon));
    let emulated = rt.block_on(spoke_transcript(&mock_admin, &mock_anon));
    assert_same(&emulated, &real);
    assert_eq!(real[0].1["http"], 200, "{real:#?}");

    // spokekeeper's own live check reads the same from both.
    let real_live = rt.block_on(live(real_admin_yaml));
    let mock_live = rt.block_on(live(mock_admin_yaml));
    assert_eq!(mock_live, real_live);
    assert_eq!(real_live["username"], "system:admin", "{real_live}");
    drop(mock);
}
