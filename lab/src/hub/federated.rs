//! The hub's side of federated spokes: its ServiceAccounts' tokens (TokenRequest, signed
//! by the hub's [`Issuer`]), and each federated spoke's ConfigMap as "Flux" applies it
//! from the fleet repo, consumed through `spec.kubeConfig.configMapRef`.

use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Response, StatusCode};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::routes::not_found;
use super::sealed::fetch_failing;
use super::{HubSim, Kind, ROOT, SimSpoke, State, json_response, status};
use crate::federation::{Issuer, MIN_TOKEN_SECONDS};

impl HubSim {
    /// The hub's `--service-account-issuer`: TokenRequests are answered with its tokens.
    pub fn set_issuer(&self, issuer: Arc<Issuer>) {
        self.lock().issuer = Some(issuer);
    }

    /// A ServiceAccount `namespace/name` tokens may be requested for.
    pub fn add_service_account(&self, namespace: &str, name: &str) {
        let uid = crate::objects::new_uid();
        self.lock()
            .service_accounts
            .insert((namespace.into(), name.into()), uid);
    }

    /// A federated spoke: its ConfigMap (`secret_namespace/secret_name`) applied from
    /// `file` of the fleet repo, its Kustomization (Ready, as after an earlier deploy)
    /// reaching the spoke through it.
    pub fn add_federated_spoke(&self, spoke: SimSpoke) {
        self.add_config_map_consumer(
            Kind::Kustomization,
            &spoke.kustomization_namespace,
            &spoke.kustomization_name,
            &spoke.secret_name,
        );
        self.lock().federated.push(spoke);
    }

    /// A Kustomization or HelmRelease (Ready) that deploys through the kubeconfig
    /// ConfigMap `config_map` of its own namespace (`provider: generic`).
    pub fn add_config_map_consumer(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        config_map: &str,
    ) {
        self.add_consumer(kind, namespace, name, None);
        let key = (kind, namespace.to_string(), name.to_string());
        if let Some(o) = self.lock().consumers.get_mut(&key) {
            o.obj["spec"]["kubeConfig"] = json!({"configMapRef": {"name": config_map}});
        }
    }

    /// A ConfigMap as stored, if Flux applied it.
    pub fn config_map(&self, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .config_maps
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
}

/// POST serviceaccounts/NAME/token: a token of that ServiceAccount for the audiences
/// asked, as kube-apiserver answers (201 and the TokenRequest with its status; 404 for
/// no such account; 422 for a lifetime under ten minutes).
pub(super) fn token_request(
    st: &State,
    method: &Method,
    (ns, name): (&str, &str),
    body: &str,
) -> Response<Full<Bytes>> {
    if *method != Method::POST {
        return super::routes::not_allowed();
    }
    let Ok(request) = serde_json::from_str::<Value>(body) else {
        return super::routes::bad_body();
    };
    let (Some(issuer), Some(uid)) = (
        st.issuer.as_ref(),
        st.service_accounts.get(&(ns.to_string(), name.to_string())),
    ) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("serviceaccounts \"{name}\" not found"),
            Some(json!({"name": name, "kind": "serviceaccounts"})),
        );
    };
    let seconds = request["spec"]["expirationSeconds"]
        .as_i64()
        .unwrap_or(3600);
    if seconds < MIN_TOKEN_SECONDS {
        let why =
            format!("Invalid value: {seconds}: may not specify a duration less than 10 minutes");
        return status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            &format!(
                "TokenRequest.authentication.k8s.io \"{name}\" is invalid: spec.expirationSeconds: {why}"
            ),
            Some(
                json!({"name": name, "group": "authentication.k8s.io", "kind": "TokenRequest",
                "causes": [{"reason": "FieldValueInvalid", "message": why, "field": "spec.expirationSeconds"}]}),
            ),
        );
    }
    let audiences: Vec<String> = request["spec"]["audiences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let token = issuer.token((ns, name, uid), &audiences, seconds);
    let expires = (OffsetDateTime::now_utc() + time::Duration::seconds(seconds))
        .replace_nanosecond(0)
        .expect("0 ns")
        .format(&Rfc3339)
        .expect("RFC 3339");
    json_response(
        StatusCode::CREATED,
        &json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
            "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": null},
            "status": {"token": token, "expirationTimestamp": expires},
        }),
    )
}

/// GET a ConfigMap, once "Flux" applied what the fleet repo holds for it.
pub(super) fn config_map(
    st: &mut State,
    method: &Method,
    ns: &str,
    name: &str,
) -> Response<Full<Bytes>> {
    if *method != Method::GET {
        return super::routes::not_allowed();
    }
    let key = (ns.to_string(), name.to_string());
    apply(st, &key);
    match st.config_maps.get(&key) {
        Some(obj) => json_response(StatusCode::OK, obj),
        None => not_found("", "configmaps", name),
    }
}

/// Flux applies the fleet repo's ConfigMap for a federated spoke, labelled by the root
/// Kustomization that applies it.
fn apply(st: &mut State, key: &(String, String)) {
    let Some(spoke) = st
        .federated
        .iter()
        .find(|s| s.secret_namespace == key.0 && s.secret_name == key.1)
        .cloned()
    else {
        return;
    };
    if fetch_failing(st) {
        return;
    }
    let Some(manifest) = (st.source)(&spoke.file).and_then(|b| parse(&b)) else {
        return;
    };
    if st
        .config_maps
        .get(key)
        .is_some_and(|o| o["data"] == manifest["data"])
    {
        return;
    }
    st.revision += 1;
    let mut labels = manifest["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    labels["kustomize.toolkit.fluxcd.io/name"] = json!(ROOT.1);
    labels["kustomize.toolkit.fluxcd.io/namespace"] = json!(ROOT.0);
    let obj = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": key.1, "namespace": key.0,
            "resourceVersion": st.revision.to_string(),
            "uid": format!("00000000-0000-4000-8000-{:012}", st.revision),
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": labels,
            "annotations": manifest["metadata"]["annotations"].clone(),
        },
        "data": manifest["data"].clone(),
    });
    st.config_maps.insert(key.clone(), obj);
}

/// A ConfigMap manifest (YAML) with string data; None for anything else.
fn parse(bytes: &[u8]) -> Option<Value> {
    let v: Value = serde_saphyr::from_str(std::str::from_utf8(bytes).ok()?).ok()?;
    let strings = v["data"]
        .as_object()
        .is_some_and(|d| d.values().all(Value::is_string));
    (v["kind"] == "ConfigMap" && strings).then_some(v)
}
