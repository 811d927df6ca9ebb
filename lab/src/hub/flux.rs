//! Flux's controllers on the wire: a requested reconcile of a Kustomization or
//! HelmRelease, its sources, merge patches and paged lists.

use std::collections::BTreeMap;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use super::{ConsumerKey, Flux, Kind, REQUESTED_AT, RESET_AT, State, json_response, sops, status};

/// A requested reconcile: one read in progress, then done as `flux` says.
pub(super) fn reconcile(st: &mut State, key: &ConsumerKey) {
    st.revision += 1;
    let revision = st.revision.to_string();
    let hub_flux = st.flux.clone();
    // Decrypting is part of the build: only a reconcile that finishes now does it.
    let undecrypted = match st.consumers.get(key) {
        Some(k) if k.pending.as_ref().is_some_and(|(_, reads)| *reads > 0) => sops::failure(st, k),
        _ => None,
    };
    let k = st.consumers.get_mut(key).expect("checked");
    let flux = k.flux.clone().unwrap_or(hub_flux);
    let Some((at, reads)) = k.pending.clone() else {
        st.revision -= 1;
        return;
    };
    if k.stalled {
        let reset = k.obj["metadata"]["annotations"][RESET_AT].as_str() == Some(&at);
        if !reset {
            // helm-controller: retries exhausted, nothing runs; the request is handled.
            k.obj["status"]["lastHandledReconcileAt"] = json!(at);
            k.pending = None;
            k.obj["metadata"]["resourceVersion"] = json!(revision);
            return;
        }
        k.stalled = false;
        let status = &mut k.obj["status"];
        status["lastHandledResetAt"] = json!(at);
        status["failures"] = json!(0);
        status["upgradeFailures"] = json!(0);
    }
    // kustomize-controller reads the source before anything else: missing, or without
    // an artifact, it writes Ready False ArtifactFailed and handles the request.
    if key.0 == Kind::Kustomization
        && let Some(failed) = source_failure(&st.sources, &k.obj)
    {
        k.obj["status"]["conditions"] =
            json!([condition("Ready", "False", "ArtifactFailed", &failed)]);
        k.obj["status"]["lastHandledReconcileAt"] = json!(at);
        k.pending = None;
        k.obj["metadata"]["resourceVersion"] = json!(revision);
        return;
    }
    let status = &mut k.obj["status"];
    if let Some(failed) = undecrypted.filter(|_| flux != Flux::Stalled) {
        status["conditions"] = json!([condition("Ready", "False", "BuildFailed", &failed)]);
        status["lastHandledReconcileAt"] = json!(at);
        k.pending = None;
    } else if reads == 0 || flux == Flux::Stalled {
        status["conditions"] = json!([
            condition(
                "Reconciling",
                "True",
                "Progressing",
                "Reconciliation in progress"
            ),
            condition(
                "Ready",
                "Unknown",
                "Progressing",
                "Reconciliation in progress"
            ),
        ]);
        k.pending = Some((at, reads + 1));
    } else {
        status["conditions"] = json!([match (flux, key.0) {
            (Flux::Failing(msg), Kind::Kustomization) => {
                condition("Ready", "False", "ReconciliationFailed", &msg)
            }
            (Flux::Failing(msg), Kind::HelmRelease) => {
                condition("Ready", "False", "UpgradeFailed", &msg)
            }
            (_, Kind::Kustomization) => condition(
                "Ready",
                "True",
                "ReconciliationSucceeded",
                "Applied revision: main@sha1:1111111111111111111111111111111111111111"
            ),
            (_, Kind::HelmRelease) => condition(
                "Ready",
                "True",
                "UpgradeSucceeded",
                &format!(
                    "Helm upgrade succeeded for release {}/{}.v2 with chart {}@1.0.0",
                    key.1, key.2, key.2
                )
            ),
        }]);
        status["lastHandledReconcileAt"] = json!(at);
        k.pending = None;
    }
    k.obj["metadata"]["resourceVersion"] = json!(revision);
}

/// What kustomize-controller (v1.9) writes when a Kustomization's GitRepository is missing
/// or has no artifact; None when it has one.
pub(super) fn source_failure(
    sources: &BTreeMap<(String, String, String), Value>,
    k: &Value,
) -> Option<String> {
    let r = &k["spec"]["sourceRef"];
    if r["kind"] != "GitRepository" {
        return None;
    }
    let name = r["name"].as_str().unwrap_or_default();
    let ns = r["namespace"]
        .as_str()
        .or(k["metadata"]["namespace"].as_str())
        .unwrap_or_default();
    match sources.get(&("gitrepositories".into(), ns.into(), name.into())) {
        None => Some(format!(
            "GitRepository.source.toolkit.fluxcd.io \"{name}\" not found"
        )),
        Some(src) if src["status"]["artifact"].is_null() => {
            Some("Source artifact not found, retrying in 30s".into())
        }
        Some(_) => None,
    }
}

/// A GitRepository as source-controller (v1.x) leaves it: fetched (Ready True, with an
/// artifact), or failing before any fetch (`failed`: reason and message; no artifact).
pub(super) fn git_repository(namespace: &str, name: &str, failed: Option<(&str, &str)>) -> Value {
    let mut obj = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": namespace, "generation": 1,
            "resourceVersion": "7", "uid": "00000000-0000-4000-8000-000000000007",
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "finalizers": ["finalizers.fluxcd.io"]},
        "spec": {"interval": "1m", "url": "ssh://git@git.example/fleet.git",
            "ref": {"branch": "main"}, "timeout": "60s"},
    });
    obj["status"] = match failed {
        None => {
            let rev = "main@sha1:0000000000000000000000000000000000000000";
            json!({
                "observedGeneration": 1,
                "artifact": {"path": format!("gitrepository/{namespace}/{name}/0000000000000000000000000000000000000000.tar.gz"),
                    "url": format!("http://source-controller.flux-system.svc.cluster.local./gitrepository/{namespace}/{name}/0000000000000000000000000000000000000000.tar.gz"),
                    "revision": rev, "digest": format!("sha256:{}", "0".repeat(64)),
                    "lastUpdateTime": "2025-06-01T12:00:00Z", "size": 1024},
                "conditions": [
                    condition("Ready", "True", "Succeeded", &format!("stored artifact for revision '{rev}'")),
                    condition("ArtifactInStorage", "True", "Succeeded", &format!("stored artifact for revision '{rev}'")),
                ],
            })
        }
        Some((reason, message)) => json!({
            "observedGeneration": 1,
            "conditions": [
                condition("Reconciling", "True", "ProgressingWithRetry", "building artifact"),
                condition("Ready", "False", reason, message),
                condition("FetchFailed", "True", reason, message),
            ],
        }),
    };
    obj
}

pub(super) fn patch(
    st: &mut State,
    key: &ConsumerKey,
    content_type: Option<&str>,
    body: &str,
) -> Response<Full<Bytes>> {
    // Custom resources take JSON and merge patches only (no strategic merge).
    let ct = content_type
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim();
    if ![
        "application/merge-patch+json",
        "application/json-patch+json",
        "application/apply-patch+yaml",
    ]
    .contains(&ct)
    {
        return status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            None,
        );
    }
    if ct != "application/merge-patch+json" {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "only merge patches are emulated",
            None,
        );
    }
    let Ok(p) = serde_json::from_str::<Value>(body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "error decoding patch: invalid JSON",
            None,
        );
    };
    st.revision += 1;
    let revision = st.revision.to_string();
    let k = st.consumers.get_mut(key).expect("checked");
    let before = k.obj["metadata"]["annotations"][REQUESTED_AT].clone();
    // status is a subresource: a patch to the main resource leaves it alone.
    let kept = k.obj["status"].clone();
    merge(&mut k.obj, &p);
    k.obj["status"] = kept;
    k.obj["metadata"]["resourceVersion"] = json!(revision);
    let after = k.obj["metadata"]["annotations"][REQUESTED_AT].clone();
    if after != before
        && let Some(at) = after.as_str()
    {
        k.pending = Some((at.to_string(), 0));
    }
    json_response(StatusCode::OK, &k.obj)
}

/// A namespace's objects of one kind, ordered by name as etcd returns them, from after
/// `continue` (the last name of the previous page here; opaque to clients) and at most
/// `limit` of them, with `metadata.continue` when more remain.
pub(super) fn list(st: &State, kind: Kind, ns: &str, query: &str) -> Response<Full<Bytes>> {
    let mut limit = usize::MAX;
    let mut after = None;
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "limit" => match v.parse::<usize>() {
                Ok(0) => {}
                Ok(n) => limit = n,
                Err(_) => {
                    return status(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        &format!("limit: invalid value {v:?}"),
                        None,
                    );
                }
            },
            "continue" => after = Some(v.into_owned()),
            _ => {}
        }
    }
    let mut items: Vec<&Value> = st
        .consumers
        .iter()
        .filter(|((k, n, name), _)| {
            *k == kind && n == ns && after.as_deref().is_none_or(|a| name.as_str() > a)
        })
        .map(|(_, o)| &o.obj)
        .collect();
    let more = items.len() > limit;
    items.truncate(limit);
    let mut metadata = json!({"resourceVersion": st.revision.to_string()});
    if more && let Some(last) = items.last() {
        metadata["continue"] = last["metadata"]["name"].clone();
    }
    json_response(
        StatusCode::OK,
        &json!({
            "apiVersion": kind.api_version(),
            "kind": format!("{}List", kind.as_str()),
            "metadata": metadata,
            "items": items,
        }),
    )
}

/// source-controller handles a new requestedAt: it fetches again (as it stands: a
/// failing fetch stays failing) and echoes the request.
pub(super) fn fetch(obj: &mut Value) {
    if let Some(at) = obj["metadata"]["annotations"][REQUESTED_AT].as_str()
        && obj["status"]["lastHandledReconcileAt"].as_str() != Some(at)
    {
        obj["status"]["lastHandledReconcileAt"] = json!(at);
    }
}

/// RFC 7386 JSON merge patch.
pub(super) fn merge(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().expect("object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

pub(super) fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({
        "type": type_, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": "2025-06-01T12:00:00Z", "observedGeneration": 1,
    })
}
