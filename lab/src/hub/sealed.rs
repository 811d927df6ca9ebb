//! "Flux" applying a spoke's SealedSecret from the fleet repo, and the Sealed Secrets
//! controller unsealing it.

use serde_json::{Value, json};

use super::{Controller, ROOT, State};

/// Flux applies what the fleet repo holds for this SealedSecret.
pub(super) fn apply(st: &mut State, key: &(String, String)) {
    let Some(spoke) = st
        .spokes
        .iter()
        .find(|s| s.secret_namespace == key.0 && s.secret_name == key.1)
        .cloned()
    else {
        return;
    };
    if fetch_failing(st) {
        return;
    }
    let Some(bytes) = (st.source)(&spoke.file) else {
        return;
    };
    let Some((name, namespace, encrypted_data, template)) = manifest(&bytes) else {
        return;
    };
    // The template as the file has it (the Secret's labels, annotations and type); the
    // API server stores it as applied, only defaulting its name and namespace.
    let mut template = template;
    template["metadata"]["name"] = json!(name);
    template["metadata"]["namespace"] = json!(namespace);
    let spec = json!({
        "encryptedData": encrypted_data,
        "template": template,
    });
    st.revision += 1;
    let revision = st.revision.to_string();
    match st.sealed.get_mut(key) {
        Some(obj) if obj["spec"] == spec => {
            st.revision -= 1;
        }
        Some(obj) => {
            let generation = obj["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
            obj["metadata"]["generation"] = json!(generation);
            obj["metadata"]["resourceVersion"] = json!(revision);
            obj["spec"] = spec;
        }
        None => {
            let obj = json!({
                "apiVersion": "bitnami.com/v1alpha1",
                "kind": "SealedSecret",
                "metadata": {
                    "name": key.1, "namespace": key.0, "generation": 1,
                    "resourceVersion": revision,
                    "uid": format!("00000000-0000-4000-8000-{:012}", st.revision),
                    "creationTimestamp": "2025-01-01T00:00:00Z",
                    "labels": {"kustomize.toolkit.fluxcd.io/name": ROOT.1, "kustomize.toolkit.fluxcd.io/namespace": ROOT.0},
                },
                "spec": spec,
            });
            st.sealed.insert(key.clone(), obj);
        }
    }
}

/// The fleet's GitRepository fails to fetch after an earlier fetch (it keeps its
/// artifact, Ready False): Flux applies the old artifact, not what main holds.
pub(super) fn fetch_failing(st: &State) -> bool {
    st.sources
        .get(&(
            "gitrepositories".into(),
            "flux-system".into(),
            "flux-system".into(),
        ))
        .is_some_and(|g| {
            !g["status"]["artifact"].is_null()
                && g["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "False")
                })
        })
}

/// A SealedSecret manifest (YAML or JSON) as the API server would take it: its name,
/// namespace, encryptedData and template (an object; `{}` when absent). None for anything
/// else (nothing is applied).
pub(super) type Manifest = (String, String, serde_json::Map<String, Value>, Value);

pub(super) fn manifest(bytes: &[u8]) -> Option<Manifest> {
    let text = std::str::from_utf8(bytes).ok()?;
    let v: Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).ok()?
    } else {
        serde_saphyr::from_str(text).ok()?
    };
    if v["kind"] != "SealedSecret" || v["apiVersion"] != "bitnami.com/v1alpha1" {
        return None;
    }
    let name = v["metadata"]["name"].as_str()?.to_string();
    let namespace = v["metadata"]["namespace"].as_str().unwrap_or_default();
    let data = v["spec"]["encryptedData"].as_object()?;
    let template = match &v["spec"]["template"] {
        Value::Null => json!({"metadata": {}}),
        t @ Value::Object(_) if t["metadata"].is_object() || t["metadata"].is_null() => {
            let mut t = t.clone();
            if t["metadata"].is_null() {
                t["metadata"] = json!({});
            }
            t
        }
        _ => return None,
    };
    data.values()
        .all(Value::is_string)
        .then(|| (name, namespace.to_string(), data.clone(), template))
}

/// The controller unseals the current generation once, with the keys it has.
pub(super) fn unseal(st: &mut State, key: &(String, String)) {
    if st.controller != Controller::Up {
        return;
    }
    let Some(obj) = st.sealed.get(key) else {
        return;
    };
    let generation = obj["metadata"]["generation"].as_i64().unwrap_or(1);
    if obj["status"]["observedGeneration"].as_i64() == Some(generation) && !st.retry {
        return;
    }
    st.retry = false;
    // As the controller: each value with the first key that opens it.
    let data = obj["spec"]["encryptedData"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let opened = data.iter().all(|(k, v)| {
        let mut one = obj.clone();
        one["spec"]["encryptedData"] = json!({k: v});
        let bytes = serde_json::to_vec(&one).unwrap_or_default();
        st.keys.iter().any(|key| key.opens(&bytes))
    });
    let result = match opened {
        true => Ok(()),
        false => {
            let names: Vec<&str> = data.keys().map(String::as_str).collect();
            Err(format!(
                "no key could decrypt secret ({})",
                names.join(", ")
            ))
        }
    };
    let result = match std::mem::take(&mut st.fail_next_unseal) {
        true => {
            st.retry = true;
            Err(format!(
                "Operation cannot be fulfilled on secrets \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                key.1
            ))
        }
        false => result,
    };
    let now = "2025-06-01T12:00:00Z";
    let mut c = json!({"type": "Synced", "lastUpdateTime": now, "lastTransitionTime": now});
    match result {
        Ok(()) => c["status"] = json!("True"),
        Err(message) => {
            c["status"] = json!("False");
            c["reason"] = json!("ErrUnsealFailed");
            c["message"] = json!(message);
        }
    }
    st.revision += 1;
    let revision = st.revision.to_string();
    let obj = st.sealed.get_mut(key).expect("present");
    obj["status"] = json!({"conditions": [c], "observedGeneration": generation});
    obj["metadata"]["resourceVersion"] = json!(revision);
}
