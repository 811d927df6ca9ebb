//! The emulators stay honest: each sends the same requests to an emulator and to the real
//! component (tests/support/realstack) and compares the status codes and the fields
//! spokekeeper reads. The real component is right; a difference is a fix to the emulator.
//!
//! - the mock spoke API (`sim::ApiServer`) against a real kube-apiserver with k3s-shaped
//!   PKI and `--anonymous-auth=false` (the mock's default mode);
//! - the simulated hub (`sim::HubSim`) against the real hub: kube-apiserver with RBAC, the
//!   Sealed Secrets controller behind the service proxy, Flux's CRDs;
//! - the Lease emulator (tests/support/lease_emulator.rs) against a real kube-apiserver.

mod support;

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
use spokekeeper::sim::hub::{HubSim, SimSpoke, rbac_attributes};
use spokekeeper::sim::{ApiIdentity, ApiServer, Pki, PkiOptions};
use support::Lab;
use support::lease_emulator::Emulator;
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
        json!(hub.fetch_cert().await.map(|c| c.len())),
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
    t
}

/// A Kustomization or HelmRelease as the simulated hub holds it, for the real hub: its
/// spec and status, applied and then written through the status subresource.
fn copy_to_real(real: &RealHub, sim: &HubSim, kind: Kind, name: &str) {
    let obj = sim.consumer(kind, FLUX_NS, name).expect("the sim holds it");
    let manifest = json!({
        "apiVersion": obj["apiVersion"], "kind": obj["kind"],
        "metadata": {"name": name, "namespace": FLUX_NS},
        "spec": obj["spec"],
    });
    real.api.apply(&manifest.to_string());
    let plural = kind.resource().plural;
    real.api.kubectl(&[
        "patch",
        &format!("{plural}.{}", kind.resource().group),
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
    sim.add_consumer(Kind::Kustomization, FLUX_NS, "conform-b", Some(SECRET));
    sim.add_consumer(Kind::Kustomization, FLUX_NS, "conform-c", None);
    sim.add_consumer(Kind::HelmRelease, FLUX_NS, "conform-app", Some(SECRET));
    for (kind, name) in [
        (Kind::Kustomization, "conform"),
        (Kind::Kustomization, "conform-b"),
        (Kind::Kustomization, "conform-c"),
        (Kind::HelmRelease, "conform-app"),
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
    let emu_client = emu.client(&ep);
    let emulated = rt.block_on(lease_transcript(&emu_client));
    assert_same(&emulated, &real);
    assert_eq!(real[1].1, json!("Leader"), "{real:#?}");
}
