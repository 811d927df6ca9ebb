//! The emulators stay honest: each sends the same requests to an emulator and to the real
//! component (tests/support/src/realstack) and compares the status codes and the fields
//! spokekeeper reads. The real component is right; a difference is a fix to the emulator.
//!
//! - the mock spoke API (`spokekeeper_lab::ApiServer`) against a real kube-apiserver with
//!   k3s-shaped PKI and `--anonymous-auth=false` (the mock's default mode);
//! - the simulated hub (`spokekeeper_lab::hub::HubSim`) against the real hub:
//!   kube-apiserver with RBAC, the Sealed Secrets controller behind the service proxy,
//!   Flux's CRDs;
//! - the Lease emulator (lab/src/lease.rs) against a real kube-apiserver;
//! - the mock spoke API's CSRs, approvals, signing and ClusterRoleBindings (minted
//!   credentials) against a real spoke with its kube-controller-manager: signed only
//!   after approval, the CN and notAfter, no signer, a denial, the minted user's access
//!   before, with and after its binding, approval without the right.

use crate::support;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::{Value, json};
use spokekeeper::config::{ControllerRef, HubConfig};
use spokekeeper::daemon::lease::{LeaseLock, Observed};
use spokekeeper::hub::{Consumer, Hub, HubObject, Kind};
use spokekeeper::secret::SecretBytes;
use spokekeeper_lab::hub::{HubSim, Kind as SimKind, SimSpoke, rbac_attributes};
use spokekeeper_lab::lease::Emulator;
use spokekeeper_lab::{ApiIdentity, ApiServer, Pki, PkiOptions};
use support::Lab;
use support::realstack::access::Lacking;
use support::realstack::hub::{CONTROLLER, CONTROLLER_NS, HubOptions, RealHub};
use support::realstack::kube::{Etcd, KubeApi};
use support::realstack::spoke::RealSpoke;
use support::realstack::{free_port, wait_until};

// ---------------------------------------------------------------------------------------
// One HTTP client for both sides: kube's, as spokekeeper uses it.

fn client_from_yaml(rt: &tokio::runtime::Runtime, yaml: &str) -> kube::Client {
    support::install_crypto_provider();
    let kc = kube::config::Kubeconfig::from_yaml(yaml).expect("kubeconfig parses");
    let config = rt
        .block_on(kube::Config::from_custom_kubeconfig(
            kc,
            &kube::config::KubeConfigOptions::default(),
        ))
        .expect("kubeconfig loads");
    let _guard = rt.enter();
    kube::Client::try_from(config).expect("client")
}

/// One answer: the status code, and the body as JSON (Null when it is not JSON).
#[derive(Debug)]
struct Answer {
    code: u16,
    body: Value,
    text: String,
}

async fn call(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Option<&Value>,
) -> Answer {
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let req = hyper::http::Request::builder()
        .method(method)
        .uri(path)
        .header("Content-Type", content_type)
        .header("Accept", "application/json, */*")
        .body(kube::client::Body::from(bytes))
        .expect("request");
    let res = client
        .send(req)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let code = res.status().as_u16();
    let bytes = res
        .into_body()
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: body: {e}"))
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Answer {
        code,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        text,
    }
}

/// The failure fields of a metav1 Status a client reads: code, reason, and what failed.
fn status_of(a: &Answer) -> Value {
    if a.body.is_null() {
        return json!({"http": a.code, "text": a.text.trim()});
    }
    json!({
        "http": a.code,
        "kind": a.body["kind"],
        "code": a.body["code"],
        "reason": a.body["reason"],
        "details": {
            "name": a.body["details"]["name"],
            "group": a.body["details"]["group"],
            "kind": a.body["details"]["kind"],
        },
    })
}

/// Compares two transcripts step by step, naming the first step that differs.
fn assert_same(emulator: &[(String, Value)], real: &[(String, Value)]) {
    for (e, r) in emulator.iter().zip(real) {
        assert_eq!(e.0, r.0, "the same steps on both sides");
        assert_eq!(
            e.1, r.1,
            "{}: the emulator answers differently from the real component",
            e.0
        );
    }
    assert_eq!(emulator.len(), real.len(), "the same number of steps");
}

// ---------------------------------------------------------------------------------------
// 1. The mock spoke API against a real spoke.

const SSAR: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
const SSR: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

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

// ---------------------------------------------------------------------------------------
// 2. The simulated hub against the real hub.

const FLUX_NS: &str = "flux-system";
const SECRET: &str = "conform-kubeconfig";

fn hub_config(kubeconfig: &Path) -> HubConfig {
    HubConfig {
        kubeconfig: Some(kubeconfig.to_owned()),
        controller: ControllerRef {
            namespace: CONTROLLER_NS.into(),
            name: CONTROLLER.into(),
            port: None,
        },
        verify_timeout: Duration::from_secs(30),
        flux_default_service_account: None,
    }
}

/// What spokekeeper compares of a hub object: conditions without their timestamps.
fn read(o: &Option<HubObject>) -> Value {
    let Some(o) = o else { return Value::Null };
    let mut conditions: Vec<Value> = o
        .conditions
        .iter()
        .map(|c| {
            json!({"type": c.type_, "status": c.status, "reason": c.reason,
                   "message": c.message.clone().filter(|m| !m.is_empty()).is_some()})
        })
        .collect();
    conditions.sort_by_key(|c| c["type"].to_string());
    json!({
        "generation": o.generation, "observedGeneration": o.observed_generation,
        "conditions": conditions, "lastHandledReconcileAt": o.last_handled_reconcile_at,
        "requestedAt": o.requested_at,
    })
}

fn consumer(kind: Kind, name: &str) -> Consumer {
    Consumer {
        kind,
        namespace: FLUX_NS.into(),
        name: name.into(),
    }
}

fn collection(kind: Kind) -> String {
    let ar = kind.resource();
    format!(
        "/apis/{}/{}/namespaces/{FLUX_NS}/{}",
        ar.group, ar.version, ar.plural
    )
}

/// Every page of a list with `limit=1`: (code, names, whether each page but the last
/// carried a continue token).
async fn paged(client: &kube::Client, kind: Kind) -> Value {
    let mut names = Vec::new();
    let mut codes = Vec::new();
    let mut next: Option<String> = None;
    for _ in 0..10 {
        let mut path = format!("{}?limit=1", collection(kind));
        if let Some(c) = &next {
            let c: String = url::form_urlencoded::byte_serialize(c.as_bytes()).collect();
            path.push_str(&format!("&continue={c}"));
        }
        let a = call(client, "GET", &path, "application/json", None).await;
        codes.push(a.code);
        for i in a.body["items"].as_array().into_iter().flatten() {
            names.push(i["metadata"]["name"].clone());
        }
        match a.body["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => next = Some(c.to_string()),
            _ => break,
        }
    }
    json!({"codes": codes, "names": names})
}

/// The calls spokekeeper makes on a hub, through its own `Hub` and raw for status codes.
/// `client` is what spokekeeper runs as; `admin` makes the calls outside its RBAC (a wrong
/// method), so that routing, not authorization, answers them.
async fn hub_transcript(
    hub: &Hub,
    client: &kube::Client,
    admin: &kube::Client,
) -> Vec<(String, Value)> {
    let mut t = Vec::new();
    let svc = format!("/api/v1/namespaces/{CONTROLLER_NS}/services/{CONTROLLER}");
    let a = call(client, "GET", &svc, "application/json", None).await;
    t.push((
        "GET the controller's Service".into(),
        json!({"http": a.code, "port": a.body["spec"]["ports"][0]["name"]}),
    ));
    let a = call(admin, "POST", &svc, "application/json", Some(&json!({}))).await;
    t.push(("POST to a named Service".into(), status_of(&a)));
    t.push((
        "Hub::fetch_cert".into(),
        json!(
            hub.fetch_cert()
                .await
                .map(|c| c.len())
                .map_err(|e| e.to_string())
        ),
    ));
    t.push((
        "Hub::controller_version, after fetch_cert".into(),
        json!(hub.controller_version()),
    ));
    let wrong = format!("{svc}/proxy/v1/nothing");
    let wrong = wrong.replace(
        &format!("services/{CONTROLLER}"),
        &format!("services/http:{CONTROLLER}:http"),
    );
    let a = call(client, "GET", &wrong, "application/json", None).await;
    t.push((
        "GET an unknown path through the proxy".into(),
        json!({"http": a.code}),
    ));

    t.push((
        "Hub::sealed_secret (present)".into(),
        read(&hub.sealed_secret(FLUX_NS, SECRET).await.unwrap()),
    ));
    t.push((
        "Hub::sealed_secret (missing)".into(),
        read(&hub.sealed_secret(FLUX_NS, "missing").await.unwrap()),
    ));
    let a = call(
        client,
        "GET",
        &format!("/apis/bitnami.com/v1alpha1/namespaces/{FLUX_NS}/sealedsecrets/missing"),
        "application/json",
        None,
    )
    .await;
    t.push(("GET a missing SealedSecret".into(), status_of(&a)));

    let secrets: BTreeSet<String> = [SECRET.to_string()].into();
    let found = hub.consumers(FLUX_NS, &secrets).await.unwrap();
    t.push(("Hub::consumers".into(), json!(found)));
    for kind in Kind::ALL {
        t.push((format!("list {kind:?} limit=1"), paged(client, kind).await));
    }
    let k = consumer(Kind::Kustomization, "conform");
    let h = consumer(Kind::HelmRelease, "conform-app");
    t.push((
        "Hub::consumer Kustomization".into(),
        read(&hub.consumer(&k).await.unwrap()),
    ));
    t.push((
        "Hub::consumer HelmRelease".into(),
        read(&hub.consumer(&h).await.unwrap()),
    ));
    let gone = consumer(Kind::Kustomization, "missing");
    t.push((
        "Hub::consumer missing".into(),
        read(&hub.consumer(&gone).await.unwrap()),
    ));
    let a = call(
        client,
        "GET",
        &format!("{}/missing", collection(Kind::Kustomization)),
        "application/json",
        None,
    )
    .await;
    t.push(("GET a missing Kustomization".into(), status_of(&a)));

    // The reconcile request: only metadata changes (no new generation), status stays.
    let at = "2026-01-01T00:00:00.000000001Z";
    for c in [&k, &h] {
        let path = format!("{}/{}", collection(c.kind), c.name);
        let before = call(client, "GET", &path, "application/json", None).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let r = hub.request_reconcile(c, at, deadline).await;
        let after = call(client, "GET", &path, "application/json", None).await;
        t.push((
            format!("Hub::request_reconcile {:?}", c.kind),
            json!({"ok": r.is_ok(),
                   "annotation": after.body["metadata"]["annotations"][spokekeeper::hub::REQUESTED_AT],
                   "generation kept": after.body["metadata"]["generation"] == before.body["metadata"]["generation"],
                   "resourceVersion changed": after.body["metadata"]["resourceVersion"] != before.body["metadata"]["resourceVersion"]}),
        ));
        // status is a subresource: a patch of the main resource cannot write it.
        let p = json!({"status": {"lastHandledReconcileAt": "forged"}});
        let a = call(
            client,
            "PATCH",
            &path,
            "application/merge-patch+json",
            Some(&p),
        )
        .await;
        t.push((
            format!("merge-patch status of a {:?}", c.kind),
            json!({"http": a.code, "lastHandledReconcileAt": a.body["status"]["lastHandledReconcileAt"]}),
        ));
        let a = call(
            client,
            "PATCH",
            &path,
            "application/strategic-merge-patch+json",
            Some(&p),
        )
        .await;
        t.push((
            format!("strategic-merge-patch a {:?}", c.kind),
            status_of(&a),
        ));
    }

    // Events (hub::recorder): the first occurrence created, a repeat patched into its
    // series, a patch of an Event that is gone answered 404 (then created anew).
    use spokekeeper::hub::recorder::{Occurrence, Reason, Recorder, Regarding, Seen};
    let mut recorder = Recorder::new("conform-0", Duration::from_secs(600));
    let o = Occurrence {
        regarding: Regarding::consumer(&k),
        reason: Reason::CredentialExpiring,
        note: "spoke conform: the client certificate expires on 2027-01-01T00:00:00Z (warning)"
            .into(),
    };
    let now = time::OffsetDateTime::now_utc();
    for step in ["first", "repeat"] {
        let r = recorder.record(hub, &o, now).await;
        t.push((
            format!("Recorder::record ({step})"),
            json!(
                r.map(|s| match s {
                    Seen::First => "created".to_string(),
                    Seen::Again { count, .. } => format!("patched to count {count}"),
                })
                .map_err(|e| e.to_string())
            ),
        ));
    }
    let a = call(
        client,
        "PATCH",
        &format!("/apis/events.k8s.io/v1/namespaces/{FLUX_NS}/events/missing"),
        "application/merge-patch+json",
        Some(&json!({"series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}})),
    )
    .await;
    t.push(("merge-patch a missing Event".into(), status_of(&a)));
    t
}

/// A Kustomization or HelmRelease as the simulated hub holds it, for the real hub: its
/// spec and status, applied and then written through the status subresource.
fn copy_to_real(real: &RealHub, sim: &HubSim, kind: SimKind, name: &str) {
    let obj = sim.consumer(kind, FLUX_NS, name).expect("the sim holds it");
    let manifest = json!({
        "apiVersion": obj["apiVersion"], "kind": obj["kind"],
        "metadata": {"name": name, "namespace": FLUX_NS},
        "spec": obj["spec"],
    });
    real.api.apply(&manifest.to_string());
    real.api.kubectl(&[
        "patch",
        &format!("{}.{}", kind.plural(), kind.group()),
        name,
        "-n",
        FLUX_NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        &json!({"status": obj["status"]}).to_string(),
    ]);
}

/// Role rules for exactly `hub::ACCESS`.
fn access_rules() -> Value {
    spokekeeper::hub::ACCESS
        .iter()
        .map(|a| json!({"apiGroups": [a.group], "resources": [a.resource], "verbs": a.verbs}))
        .collect()
}

#[test]
fn the_simulated_hub_answers_as_the_real_hub() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let real = RealHub::start(&HubOptions::default());
    let rt = tokio::runtime::Runtime::new().unwrap();

    // The same SealedSecret on both: sealed by kubeseal to the real controller's key.
    let cert = real.dir().join("cert.pem");
    std::fs::write(&cert, real.cert_pem()).unwrap();
    let secret = real.dir().join("secret.json");
    std::fs::write(
        &secret,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": SECRET, "namespace": FLUX_NS},
               "data": {"value": "Y29uZm9ybQ=="}})
        .to_string(),
    )
    .unwrap();
    let sealed = support::realstack::run(
        real.kubeseal()
            .arg(format!("--cert={}", cert.display()))
            .args(["-o", "yaml"])
            .stdin(std::fs::File::open(&secret).unwrap()),
    )
    .unwrap();
    real.api.apply(&sealed);
    let keys = spokekeeper::seal::RecoveryKey::load_all(
        real.sealing_keys().concat().as_bytes(),
        "controller",
    )
    .unwrap();
    let file = sealed.clone().into_bytes();
    let sim = HubSim::start(
        rt.handle(),
        CONTROLLER_NS,
        CONTROLLER,
        &real.cert_pem(),
        keys,
        Arc::new(move |path: &str| (path == "fluxcd/conform.yaml").then(|| file.clone())),
    )
    .unwrap();
    sim.add_spoke(SimSpoke {
        secret_namespace: FLUX_NS.into(),
        secret_name: SECRET.into(),
        kustomization_namespace: FLUX_NS.into(),
        kustomization_name: "conform".into(),
        file: "fluxcd/conform.yaml".into(),
    });
    // The chart's label on the real controller's Service (its appVersion).
    let label = real
        .api
        .get_json(&["service", "-n", CONTROLLER_NS, CONTROLLER])["metadata"]["labels"]
        [spokekeeper::hub::VERSION_LABEL]
        .as_str()
        .expect("the chart labels the controller's Service with its version")
        .to_string();
    sim.set_version_label(&label);
    sim.add_consumer(SimKind::Kustomization, FLUX_NS, "conform-b", Some(SECRET));
    sim.add_consumer(SimKind::Kustomization, FLUX_NS, "conform-c", None);
    sim.add_consumer(SimKind::HelmRelease, FLUX_NS, "conform-app", Some(SECRET));
    for (kind, name) in [
        (SimKind::Kustomization, "conform"),
        (SimKind::Kustomization, "conform-b"),
        (SimKind::Kustomization, "conform-c"),
        (SimKind::HelmRelease, "conform-app"),
    ] {
        copy_to_real(&real, &sim, kind, name);
    }
    wait_until(
        "the real controller unseals",
        Duration::from_secs(60),
        || {
            real.synced(FLUX_NS, SECRET)
                .ok_or_else(|| "no Synced yet".to_string())
        },
    );

    let sim_kubeconfig = real.dir().join("sim.kubeconfig");
    std::fs::write(&sim_kubeconfig, sim.kubeconfig_yaml()).unwrap();
    let sim_hub = rt
        .block_on(Hub::connect(&hub_config(&sim_kubeconfig)))
        .unwrap();
    let sim_client = client_from_yaml(&rt, &sim.kubeconfig_yaml());
    let emulated = rt.block_on(hub_transcript(&sim_hub, &sim_client, &sim_client));

    // The real hub, called as production calls it: a ServiceAccount granted exactly
    // hub::ACCESS in the controller's and the Secret's namespaces.
    real.api.apply(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: conform\n  namespace: {FLUX_NS}\n"
    ));
    real.api.apply(
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "conform"}, "rules": access_rules()})
        .to_string(),
    );
    for ns in [CONTROLLER_NS, FLUX_NS] {
        real.api.apply(
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "conform", "namespace": ns},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "conform"},
                    "subjects": [{"kind": "ServiceAccount", "name": "conform", "namespace": FLUX_NS}]})
            .to_string(),
        );
    }
    let token_kubeconfig = real.token_kubeconfig("conform", &real.token(FLUX_NS, "conform"));
    let real_hub = rt
        .block_on(Hub::connect(&hub_config(&token_kubeconfig)))
        .unwrap();
    let real_client = client_from_yaml(&rt, &std::fs::read_to_string(&token_kubeconfig).unwrap());
    let real_admin = client_from_yaml(
        &rt,
        &std::fs::read_to_string(real.admin_kubeconfig()).unwrap(),
    );
    let actual = rt.block_on(hub_transcript(&real_hub, &real_client, &real_admin));
    assert_same(&emulated, &actual);
    assert_eq!(
        actual[2].1,
        json!({"Ok": real.cert_pem().len()}),
        "{actual:#?}"
    );
    let step = |name: &str| &actual.iter().find(|(n, _)| n == name).unwrap().1;
    assert_eq!(step("Recorder::record (first)"), &json!({"Ok": "created"}));
    assert_eq!(
        step("Recorder::record (repeat)"),
        &json!({"Ok": "patched to count 2"})
    );
    assert_eq!(step("merge-patch a missing Event")["http"], 404);

    // Outside hub::ACCESS the real authorizer answers 403. The simulated hub does no
    // authorization; it records every request instead, and each is within hub::ACCESS.
    let a = rt.block_on(call(
        &real_client,
        "GET",
        &format!("/api/v1/namespaces/{FLUX_NS}/secrets"),
        "application/json",
        None,
    ));
    assert_eq!(
        (a.code, a.body["reason"].as_str()),
        (403, Some("Forbidden")),
        "{}",
        a.text
    );
    for seen in sim.requests() {
        // The test's own probes outside it (a POST, a strategic merge) are the exceptions.
        if seen.method == "POST"
            || seen.content_type.as_deref() == Some("application/strategic-merge-patch+json")
        {
            continue;
        }
        let Some((group, resource, verb)) = rbac_attributes(&seen.method, &seen.path) else {
            panic!(
                "{} {}: not a namespaced resource request",
                seen.method, seen.path
            );
        };
        let granted = spokekeeper::hub::ACCESS
            .iter()
            .any(|a| a.group == group && a.resource == resource && a.verbs.contains(&verb));
        assert!(
            granted,
            "{} {} needs {group}/{resource} {verb}",
            seen.method, seen.path
        );
    }
}

// ---------------------------------------------------------------------------------------
// 3. The Lease emulator against a real Lease.

const LEASE_NS: &str = "conform";

fn lease_path(name: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases{name}")
}

/// `2006-01-02T15:04:05.000000Z`, the API server's MicroTime.
fn micro_time_shape(v: &Value) -> Value {
    let Some(s) = v.as_str() else {
        return v.clone();
    };
    let ok = s.len() == 27
        && s.ends_with('Z')
        && s.as_bytes()[19] == b'.'
        && s[20..26].bytes().all(|b| b.is_ascii_digit());
    json!(if ok { "MicroTime" } else { s })
}

fn lease_spec(a: &Answer) -> Value {
    let s = &a.body["spec"];
    json!({
        "http": a.code,
        "holderIdentity": s["holderIdentity"],
        "leaseDurationSeconds": s["leaseDurationSeconds"],
        "leaseTransitions": s["leaseTransitions"],
        "acquireTime": micro_time_shape(&s["acquireTime"]),
        "renewTime": micro_time_shape(&s["renewTime"]),
    })
}

fn observed(o: Result<Observed, spokekeeper::daemon::lease::LeaseError>) -> Value {
    match o {
        Ok(Observed::Held { holder, .. }) => json!({"Held": holder}),
        Ok(o) => json!(format!("{o:?}")),
        Err(e) => json!({"error": e.to_string()}),
    }
}

async fn get_lease(client: &kube::Client, name: &str) -> Answer {
    call(client, "GET", &lease_path(name), "application/json", None).await
}

async fn lease_transcript(client: &kube::Client) -> Vec<(String, Value)> {
    let mut t = Vec::new();
    let a = LeaseLock::new(
        client.clone(),
        LEASE_NS,
        "conform",
        "a",
        Duration::from_secs(15),
    );
    let b = LeaseLock::new(
        client.clone(),
        LEASE_NS,
        "conform",
        "b",
        Duration::from_secs(15),
    );

    t.push((
        "GET a missing Lease".into(),
        status_of(&get_lease(client, "/missing").await),
    ));
    t.push((
        "a acquires (create)".into(),
        observed(a.try_acquire_or_renew().await),
    ));
    let created = get_lease(client, "/conform").await;
    t.push(("GET after create".into(), lease_spec(&created)));
    t.push((
        "b sees it held".into(),
        observed(b.try_acquire_or_renew().await),
    ));
    t.push((
        "a renews (update)".into(),
        observed(a.try_acquire_or_renew().await),
    ));
    let renewed = get_lease(client, "/conform").await;
    t.push((
        "GET after renew".into(),
        json!({"spec": lease_spec(&renewed),
               "acquireTime kept": renewed.body["spec"]["acquireTime"] == created.body["spec"]["acquireTime"],
               "resourceVersion changed": renewed.body["metadata"]["resourceVersion"] != created.body["metadata"]["resourceVersion"]}),
    ));

    // Raw writes: the current resourceVersion wins, a stale one is a 409 Conflict, none
    // at all is invalid; a second create is AlreadyExists.
    let mut stale = created.body.clone();
    stale["spec"]["holderIdentity"] = json!("intruder");
    let a1 = call(
        client,
        "PUT",
        &lease_path("/conform"),
        "application/json",
        Some(&stale),
    )
    .await;
    t.push(("PUT with a stale resourceVersion".into(), status_of(&a1)));
    let mut unversioned = renewed.body.clone();
    unversioned["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let a1 = call(
        client,
        "PUT",
        &lease_path("/conform"),
        "application/json",
        Some(&unversioned),
    )
    .await;
    t.push(("PUT without a resourceVersion".into(), status_of(&a1)));
    let mut current = renewed.body.clone();
    current["spec"]["leaseDurationSeconds"] = json!(20);
    let a1 = call(
        client,
        "PUT",
        &lease_path("/conform"),
        "application/json",
        Some(&current),
    )
    .await;
    t.push((
        "PUT with the current resourceVersion".into(),
        lease_spec(&a1),
    ));
    let fresh = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "conform"}, "spec": {"holderIdentity": "c"}});
    let a1 = call(
        client,
        "POST",
        &lease_path(""),
        "application/json",
        Some(&fresh),
    )
    .await;
    t.push(("POST an existing Lease".into(), status_of(&a1)));

    // a (leaseDurationSeconds rewritten by someone: its own 15 goes back) releases, b
    // takes over at once: a transition.
    t.push(("a renews".into(), observed(a.try_acquire_or_renew().await)));
    t.push((
        "a releases".into(),
        json!(a.release().await.map_err(|e| e.to_string())),
    ));
    t.push((
        "GET after release".into(),
        lease_spec(&get_lease(client, "/conform").await),
    ));
    t.push((
        "b acquires".into(),
        observed(b.try_acquire_or_renew().await),
    ));
    t.push((
        "GET after takeover".into(),
        lease_spec(&get_lease(client, "/conform").await),
    ));
    t
}

#[test]
fn the_lease_emulator_answers_as_a_real_api_server() {
    crate::support::requires!(REAL_STACK);
    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let dir = support::scratch_dir();
    let etcd = Etcd::start(dir.path());
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let pki = Pki::generate(&PkiOptions {
        address: lo,
        address_in_sans: true,
        client_cert_days: 365,
    });
    let api = KubeApi::start("lease", dir.path(), &etcd, lo, free_port(lo), &pki, &[]);
    api.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {LEASE_NS}\n"
    ));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let real_client = client_from_yaml(
        &rt,
        &std::fs::read_to_string(&api.admin_kubeconfig).unwrap(),
    );
    let real = rt.block_on(lease_transcript(&real_client));

    let emu = Emulator::new();
    let ep = emu.endpoint();
    let emu_client = support::lease::client(&emu, &ep);
    let emulated = rt.block_on(lease_transcript(&emu_client));
    assert_same(&emulated, &real);
    assert_eq!(real[1].1, json!("Leader"), "{real:#?}");
}

// ---------------------------------------------------------------------------------------
// 4. Minted credentials: the mock's CSRs, approval, signing and ClusterRoleBindings
//    against a real spoke and its kube-controller-manager (issue 16's wire contract).

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const CRBS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
const MINTED_USER: &str = "spokekeeper:hub:conform:7:0a1b2c3d";
const MINTED_CSR: &str = "spokekeeper-conform-g7-0a1b2c3d";
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
async fn create_and_approve(client: &kube::Client, name: &str) -> (Answer, Answer) {
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

fn condition_types(csr: &Value) -> Value {
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
async fn poll_csr(admin: &kube::Client, name: &str, within: Duration) -> Answer {
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

    // Nothing signs an unapproved CSR.
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
    let step = |name: &str| &real.iter().find(|(n, _)| n == name).unwrap().1;
    // The facts the mock is held to, on the real side.
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

/// Without a signer, nothing ever happens to an approved CSR: no certificate, no
/// condition but Approved, within a bound a client would wait.
async fn unsigned_transcript(admin: &kube::Client) -> Vec<(String, Value)> {
    let mut t = Vec::new();
    let (created, a) = create_and_approve(admin, MINTED_CSR).await;
    t.push(("create".into(), json!({"http": created.code})));
    t.push(("approve".into(), json!({"http": a.code})));
    let a = poll_csr(admin, MINTED_CSR, Duration::from_secs(8)).await;
    t.push((
        "8 s later".into(),
        json!({"http": a.code, "certificate": a.body["status"]["certificate"],
               "conditions": condition_types(&a.body)}),
    ));
    t
}

#[test]
fn without_a_signer_neither_the_mock_nor_a_real_spoke_signs() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let lab = Lab::new();
    let dir = support::scratch_dir();
    let etcd = Etcd::start(dir.path());
    let spoke = support::realstack::spoke::RealSpoke::start_with(
        &lab,
        &etcd,
        dir.path(),
        &support::realstack::spoke::SpokeOptions { signer: false },
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pki = spoke.node.pki();
    let mock = ApiServer::start(
        rt.handle(),
        SocketAddr::new(spoke.node.address, 0),
        ApiIdentity::new(pki, "v1.37.2").without_signer(),
    )
    .unwrap();
    let mock_url = format!("https://{}:{}", spoke.node.address, mock.port);
    let admin =
        |url: &str| client_from_yaml(&rt, &support::kubeconfig_yaml(url, &pki.parts, None, ""));
    let real = rt.block_on(unsigned_transcript(&admin(&spoke.api.url)));
    let emulated = rt.block_on(unsigned_transcript(&admin(&mock_url)));
    assert_same(&emulated, &real);
    assert_eq!(real[2].1["certificate"], Value::Null, "{real:#?}");
    assert_eq!(
        real[2].1["conditions"],
        json!([["Approved", "True", "SpokekeeperMint"]])
    );
    drop(mock);
}

/// An approval the spoke turns into a denial: the approver's answer and every later read
/// say Denied, and the signer (running) never signs.
async fn denied_transcript(admin: &kube::Client) -> Vec<(String, Value)> {
    let mut t = Vec::new();
    let (created, a) = create_and_approve(admin, MINTED_CSR).await;
    t.push(("create".into(), json!({"http": created.code})));
    t.push((
        "approve".into(),
        json!({"http": a.code, "conditions": condition_types(&a.body)}),
    ));
    let a = poll_csr(admin, MINTED_CSR, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = call(admin, "GET", &format!("{CSRS}/{MINTED_CSR}"), "", None).await;
    t.push((
        "read after the denial, and 2 s later".into(),
        json!({"http": a.code, "conditions": condition_types(&a.body),
               "certificate": a.body["status"]["certificate"],
               "later": later.body["status"]["certificate"]}),
    ));
    t
}

#[test]
fn a_denied_approval_reads_the_same_from_the_mock_and_a_real_spoke() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let lab = Lab::new();
    let dir = support::scratch_dir();
    let etcd = Etcd::start(dir.path());
    let spoke = RealSpoke::start(&lab, &etcd, dir.path());
    spoke.deny_csr_approvals();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pki = spoke.node.pki();
    let identity = ApiIdentity::new(pki, "v1.37.2");
    identity.objects().lock().unwrap().deny_approvals();
    let mock = ApiServer::start(
        rt.handle(),
        SocketAddr::new(spoke.node.address, 0),
        identity,
    )
    .unwrap();
    let mock_url = format!("https://{}:{}", spoke.node.address, mock.port);
    let admin =
        |url: &str| client_from_yaml(&rt, &support::kubeconfig_yaml(url, &pki.parts, None, ""));
    let real = rt.block_on(denied_transcript(&admin(&spoke.api.url)));
    let emulated = rt.block_on(denied_transcript(&admin(&mock_url)));
    assert_same(&emulated, &real);
    assert_eq!(
        real[2].1["conditions"],
        json!([["Denied", "True", "LabDenied"]]),
        "{real:#?}"
    );
    assert_eq!(real[2].1["later"], Value::Null);
    drop(mock);
}

// ---------------------------------------------------------------------------------------
// The played Flux (tests/support/src/realstack/flux.rs, LabFlux) against Flux's real
// controllers: the Ready it writes in each situation, and the fields spokekeeper reads.

/// What spokekeeper reads of one consumer after a run: Ready's status and reason, whether
/// the run echoed the request, whether observedGeneration is the object's generation, and
/// the Stalled condition's status and reason (None when there is none).
fn shape(
    hub: &RealHub,
    kind: &str,
    r: &support::realstack::flux_controllers::Ready,
    requested: &str,
) -> Value {
    let stalled = support::realstack::flux_controllers::condition(hub, kind, "spoke0", "Stalled");
    json!({
        "status": r.status,
        "reason": r.reason,
        "handled": r.last_handled == requested,
        "observed": r.observed_generation == r.generation,
        "stalled": stalled.map(|s| [s.status, s.reason]),
    })
}

/// The same as the played Flux writes it for `plural` (a run answers the request it
/// handles; observedGeneration advances only with Ready True, else stays as it was; no
/// Stalled condition, ever).
fn played_shape(plural: &str, ok: bool, observed_before: bool) -> Value {
    let (status, reason) = support::realstack::flux::played_ready(plural, ok);
    json!({
        "status": status,
        "reason": reason,
        "handled": true,
        "observed": ok || observed_before,
        "stalled": null,
    })
}

/// Each shape LabFlux writes is one the real kustomize- and helm-controller wrote in the
/// same situation: Ready True after a handled request (the first rotation), Ready False
/// calling a rebuilt spoke (the x509 failure), and a suspended object's answer to a
/// request (echoed, status kept); in each, the Ready condition's status and reason,
/// lastHandledReconcileAt, observedGeneration, and no Stalled condition (which
/// spokekeeper reads). These are all the situations it plays: a build failure,
/// DependencyNotReady and its retry are tested on the real controllers only
/// (realstack::flux_real::flux_ready_semantics_on_the_real_controllers). Messages and
/// timestamps are not compared.
#[test]
fn the_played_flux_writes_what_the_real_controllers_write() {
    crate::support::requires!(ROOT, REAL_STACK);
    use support::realstack::flux_controllers::{NS, request_reconcile};
    use support::realstack::real_flux::RealFlux;

    let _heavy = support::timing::heavy();
    let mut stack = RealFlux::start(1, false, "");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let requested = stack.assert_consumers_ready(&report, 0);
    let mut real = Vec::new();
    let mut played = Vec::new();
    for (kind, plural) in [
        ("kustomization", "kustomizations"),
        ("helmrelease", "helmreleases"),
    ] {
        let r = stack.wait_ready(kind, "spoke0", Some(&requested));
        real.push((
            format!("{kind} succeeded"),
            shape(&stack.hub, kind, &r, &requested),
        ));
        played.push((
            format!("{kind} succeeded"),
            played_shape(plural, true, true),
        ));
    }

    stack.rebuild(0, 1);
    for (kind, plural) in [
        ("kustomization", "kustomizations"),
        ("helmrelease", "helmreleases"),
    ] {
        let at = request_reconcile(&stack.hub, kind, "spoke0");
        let r = stack.wait_for(kind, "spoke0", "the x509 failure", |r| {
            r.last_handled == at && r.status == "False"
        });
        assert!(r.message.contains("x509"), "{r:?}");
        real.push((format!("{kind} x509"), shape(&stack.hub, kind, &r, &at)));
        played.push((format!("{kind} x509"), played_shape(plural, false, true)));
    }

    // Suspended: the request is echoed and the x509 failure kept.
    for kind in ["kustomization", "helmrelease"] {
        stack.hub.api.kubectl(&[
            "patch",
            kind,
            "spoke0",
            "-n",
            NS,
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ]);
        let before = stack.wait_for(kind, "spoke0", "still failing", |r| r.status == "False");
        let at = request_reconcile(&stack.hub, kind, "spoke0");
        let r = stack.wait_for(kind, "spoke0", "the request echoed", |r| {
            r.last_handled == at
        });
        // The played Flux echoes and keeps the Ready it had. (observedGeneration is not
        // compared: suspending bumped the generation here, and spokekeeper reports a
        // suspended consumer before reading it.)
        let mut seen = shape(&stack.hub, kind, &r, &at);
        let mut kept = shape(&stack.hub, kind, &before, &at);
        kept["handled"] = json!(true);
        for s in [&mut seen, &mut kept] {
            s.as_object_mut().expect("object").remove("observed");
        }
        real.push((format!("{kind} suspended"), seen));
        played.push((format!("{kind} suspended"), kept));
    }
    assert_same(&played, &real);
}
