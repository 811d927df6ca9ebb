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
//!   before, with and after its binding, approval without the right;
//! - the lab's federated trust (the emulated hub's TokenRequest and issuer, the mock
//!   spoke API with an AuthenticationConfiguration: bearer tokens, /metrics,
//!   SubjectAccessReviews) against a real hub issuer and a real spoke started with
//!   `--authentication-config`.
//!
//! Here: one HTTP client for both sides (kube's, as spokekeeper uses it) and the comparison.

use crate::support;

use http_body_util::BodyExt;
use serde_json::{Value, json};

mod federated;
mod flux;
mod hub;
mod hub_calls;
mod lease;
mod mint;
mod mint_refused;
mod spoke_api;

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
