//! The lab's federated trust (spokekeeper_lab::federation, the emulated hub's
//! TokenRequest, the mock spoke API with an AuthenticationConfiguration) against a real
//! hub kube-apiserver that is its own issuer and a real spoke kube-apiserver started
//! with `--authentication-config`: every request spokekeeper's federated mode makes
//! (src/hub/token.rs, src/federate/check, src/federate/binding.rs), the same on both.

use crate::support;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use support::Lab;
use support::federation::LabHub;
use support::realstack::federated::{
    Trust, authentication_config, issuer_control_plane, write_config,
};
use support::realstack::spoke::{RealSpoke, SpokeOptions, authentication_config_path};
use support::realstack::wait_until;

use super::{Answer, assert_same, call, client_from_yaml, status_of};

const NS: &str = "flux-system";
const SUB: &str = "system:serviceaccount:flux-system:kustomize-controller";
const USER: &str = "hub:system:serviceaccount:flux-system:kustomize-controller";
const SAR: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// One side: the hub's client, its issuer, the spoke's URL, CA and admin client.
struct Side {
    hub: kube::Client,
    issuer: String,
    spoke_url: String,
    spoke_ca: String,
    admin: kube::Client,
}

fn token_path(sa: &str) -> String {
    format!("/api/v1/namespaces/{NS}/serviceaccounts/{sa}/token")
}

fn token_request(audience: &str, seconds: i64) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [audience], "expirationSeconds": seconds}})
}

/// What a client reads of a token's payload (it is not verified here: the spoke does).
fn claims(token: &str, issuer: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap_or_default();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap_or_default();
    let c: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    json!({"iss is the issuer": c["iss"] == issuer, "sub": c["sub"], "aud": c["aud"],
        "lifetime": c["exp"].as_i64().zip(c["iat"].as_i64()).map(|(e, i)| e - i),
        "serviceaccount": c["kubernetes.io"]["serviceaccount"]["name"]})
}

fn refusal(a: &Answer) -> Value {
    json!({"http": a.code, "kind": a.body["kind"], "reason": a.body["reason"], "code": a.body["code"]})
}

impl Side {
    /// A hub token of `sa` for `audience` (the TokenRequest as spokekeeper sends it).
    async fn token(&self, sa: &str, audience: &str) -> (Answer, String) {
        let body = token_request(audience, 600);
        let a = call(
            &self.hub,
            "POST",
            &token_path(sa),
            "application/json",
            Some(&body),
        )
        .await;
        let token = a.body["status"]["token"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (a, token)
    }

    /// A client of the spoke presenting `token`.
    fn bearer(&self, rt: &tokio::runtime::Runtime, token: &str) -> kube::Client {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.spoke_ca);
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    \
             certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n    token: {token}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
            self.spoke_url
        );
        client_from_yaml(rt, &yaml)
    }
}

async fn hub_transcript(side: &Side) -> Vec<(String, Value)> {
    let mut t = Vec::new();
    let (a, token) = side.token("kustomize-controller", "spoke-a").await;
    t.push((
        "TokenRequest".into(),
        json!({"http": a.code, "kind": a.body["kind"], "apiVersion": a.body["apiVersion"],
            "audiences": a.body["spec"]["audiences"], "seconds": a.body["spec"]["expirationSeconds"],
            "expires": a.body["status"]["expirationTimestamp"].is_string(),
            "claims": claims(&token, &side.issuer)}),
    ));
    let body = token_request("spoke-a", 600);
    let a = call(
        &side.hub,
        "POST",
        &token_path("nobody"),
        "application/json",
        Some(&body),
    )
    .await;
    t.push(("TokenRequest for no such account".into(), status_of(&a)));
    let body = token_request("spoke-a", 60);
    let path = token_path("kustomize-controller");
    let a = call(&side.hub, "POST", &path, "application/json", Some(&body)).await;
    t.push(("TokenRequest for a minute".into(), refusal(&a)));
    t
}

const SSR: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

async fn whoami(client: &kube::Client) -> Value {
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let a = call(client, "POST", SSR, "application/json", Some(&review)).await;
    match a.code {
        201 => json!({"http": a.code, "username": a.body["status"]["userInfo"]["username"],
            "groups": a.body["status"]["userInfo"]["groups"]}),
        _ => status_of(&a),
    }
}

async fn may(admin: &kube::Client, user: &str) -> Value {
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": {"verb": "*", "group": "*", "resource": "*"}}});
    let a = call(admin, "POST", SAR, "application/json", Some(&review)).await;
    json!({"http": a.code, "kind": a.body["kind"], "allowed": a.body["status"]["allowed"]})
}

/// The spoke's answers to hub tokens, its /metrics and its SubjectAccessReviews before
/// the binding (after it: [`bound`]).
fn spoke_transcript(side: &Side, rt: &tokio::runtime::Runtime, file: &str) -> Vec<(String, Value)> {
    let mut t = Vec::new();
    let token = |sa: &str, audience: &str| rt.block_on(side.token(sa, audience)).1;
    let hub_user = side.bearer(rt, &token("kustomize-controller", "spoke-a"));
    let other = side.bearer(rt, &token("kustomize-controller", "spoke-b"));
    let helm = side.bearer(rt, &token("helm-controller", "spoke-a"));
    t.push((
        "the spoke's audience".into(),
        rt.block_on(whoami(&hub_user)),
    ));
    t.push(("another audience".into(), rt.block_on(whoami(&other))));
    t.push(("another account".into(), rt.block_on(whoami(&helm))));
    let a = rt.block_on(call(&side.admin, "GET", "/metrics", "", None));
    let hash = spokekeeper::federate::check::hash_of(file);
    let loaded = spokekeeper::federate::check::Loaded::parse(&a.text);
    t.push((
        "admin GET /metrics".into(),
        json!({"http": a.code, "runs the file": loaded.runs(file), "hashes": loaded.hashes.len(),
            "failures": loaded.failures, "is the file's": loaded.hashes.first() == Some(&hash)}),
    ));
    let a = rt.block_on(call(&hub_user, "GET", "/metrics", "", None));
    t.push(("hub user GET /metrics".into(), status_of(&a)));
    t.push((
        "SubjectAccessReview, unbound".into(),
        rt.block_on(may(&side.admin, USER)),
    ));
    let empty = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "get", "resource": "namespaces"}}});
    let a = rt.block_on(call(
        &side.admin,
        "POST",
        SAR,
        "application/json",
        Some(&empty),
    ));
    t.push(("SubjectAccessReview of nobody".into(), refusal(&a)));
    t
}

/// The binding spokekeeper makes, then the review of the bound user (RBAC's informer
/// takes a moment on the real side).
fn bound(side: &Side, rt: &tokio::runtime::Runtime) -> Value {
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "spokekeeper.hub.spoke-a.federated"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": USER}]});
    let path = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    let a = rt.block_on(call(
        &side.admin,
        "POST",
        path,
        "application/json",
        Some(&binding),
    ));
    assert_eq!(a.code, 201, "{}", a.text);
    wait_until("the binding counts", Duration::from_secs(30), || {
        let review = rt.block_on(may(&side.admin, USER));
        match review["allowed"] == true {
            true => Ok(review),
            false => Err(review.to_string()),
        }
    })
}

#[test]
fn the_emulated_hub_issuer_and_federated_spoke_answer_as_the_real_ones() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lab = Lab::new();
    let dir = support::scratch_dir();
    let host = IpAddr::V4(Ipv4Addr::LOCALHOST);

    // Real: a hub that is its own issuer, a spoke trusting its kustomize-controller.
    let (hub_pki, etcd, hub_api) = issuer_control_plane(dir.path(), host);
    let opts = SpokeOptions {
        signer: false,
        federated: true,
    };
    let spoke = RealSpoke::start_with(&lab, &etcd, dir.path(), &opts);
    let trust = |issuer: &str| Trust {
        issuer: issuer.to_owned(),
        ca_pem: hub_pki.parts.ca_pem.clone(),
        audiences: vec!["spoke-a".into()],
        subject: SUB.into(),
        prefix: "hub:".into(),
    };
    let real_file = authentication_config(&[trust(&hub_api.url)]);
    spoke.write_authentication_config(&real_file);
    let real = Side {
        hub: client_from_yaml(
            &rt,
            &std::fs::read_to_string(&hub_api.admin_kubeconfig).unwrap(),
        ),
        issuer: hub_api.url.clone(),
        spoke_url: spoke.api.url.clone(),
        spoke_ca: spoke.node.pki().parts.ca_pem.clone(),
        admin: client_from_yaml(
            &rt,
            &std::fs::read_to_string(&spoke.api.admin_kubeconfig).unwrap(),
        ),
    };

    // Emulated: the lab hub and a node whose mock API reads the same kind of file.
    let remote = dir.path().join("no-remote");
    let hub = LabHub::start(dir.path(), &remote);
    let node = lab.add_node(hub.node_options());
    let emulated_file = authentication_config(&[trust(&hub.issuer.url)]);
    write_config(&authentication_config_path(&node), &emulated_file);
    let pki = node.pki();
    let emulated = Side {
        hub: client_from_yaml(&rt, &hub.sim.kubeconfig_yaml()),
        issuer: hub.issuer.url.clone(),
        spoke_url: node.api_url.clone(),
        spoke_ca: pki.parts.ca_pem.clone(),
        admin: client_from_yaml(
            &rt,
            &support::kubeconfig_yaml(&node.api_url, &pki.parts, None, ""),
        ),
    };

    let real_hub = rt.block_on(hub_transcript(&real));
    assert_same(&rt.block_on(hub_transcript(&emulated)), &real_hub);
    assert_eq!(real_hub[0].1["http"], 201, "{real_hub:#?}");
    let real_spoke = spoke_transcript(&real, &rt, &real_file);
    let emulated_spoke = spoke_transcript(&emulated, &rt, &emulated_file);
    assert_same(&emulated_spoke, &real_spoke);
    assert_eq!(real_spoke[0].1["username"], USER, "{real_spoke:#?}");
    assert_eq!(bound(&emulated, &rt), bound(&real, &rt));
}
