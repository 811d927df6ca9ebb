//! What a kubeadm node's kubelet puts in the API, done by the lab in its stead with the
//! kubelet's own credential (kubelet.conf, which `kubeadm init phase kubeconfig` writes):
//! it registers the Node and mirrors the static pods of /etc/kubernetes/manifests, as the
//! kubelet's mirror client does (name suffixed with the node's, the config annotations,
//! the Node as controlling owner, NoExecute tolerated). kubeadm reads both back when it
//! fetches its configuration from the cluster (`certs renew`, `reset`): the Node by the
//! name kubelet.conf authenticates as, the API server's advertise address from its
//! mirror pod's annotation.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{bin, kubeadm, run, wait_until};

pub const KUBELET_CONF: &str = "/etc/kubernetes/kubelet.conf";
const MIRROR: &str = "kubernetes.io/config.mirror";

/// Registers `node` and mirrors the static pods `pods` (manifest names without .yaml),
/// with the kubelet.conf under `root`; `scratch` holds the objects sent.
pub fn register(root: &Path, scratch: &Path, node: &str, pods: &[&str]) {
    let kubeconfig = root.join(KUBELET_CONF.trim_start_matches('/'));
    let registered = create_or_get(
        &kubeconfig,
        scratch,
        &["node", node],
        &json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node,
                "labels": {"kubernetes.io/hostname": node, "kubernetes.io/os": "linux"},
            },
        }),
    )
    .unwrap_or_else(|e| panic!("the kubelet registers node {node}: {e}"));
    let uid = registered["metadata"]["uid"]
        .as_str()
        .expect("the Node's uid");
    for name in pods {
        let pod = mirror_pod(root, name, node, uid);
        let id = ["pod", "-n", "kube-system", &format!("{name}-{node}")];
        // NodeRestriction checks the owner's uid in its informer, which may lag the create.
        wait_until(
            &format!("the kubelet mirrors {name}"),
            Duration::from_secs(30),
            || {
                let found = create_or_get(&kubeconfig, scratch, &id, &pod)?;
                let hash = &found["metadata"]["annotations"][MIRROR];
                if *hash == pod["metadata"]["annotations"][MIRROR] {
                    return Ok(());
                }
                // A mirror of an older manifest (kept storage): the kubelet replaces it.
                kubectl(&kubeconfig, &[&["delete", "--wait"][..], &id].concat())?;
                Err(format!("replaced a mirror pod of hash {hash}"))
            },
        );
    }
}

/// The mirror pod of the static pod manifest `name`, on `node` (whose uid is `uid`).
fn mirror_pod(root: &Path, name: &str, node: &str, uid: &str) -> Value {
    let (text, mut pod) = kubeadm::manifest(root, name);
    let hash: String = Sha256::digest(text.as_bytes())[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let meta = &mut pod["metadata"];
    meta["name"] = json!(format!("{name}-{node}"));
    if meta["annotations"].is_null() {
        meta["annotations"] = json!({});
    }
    let annotations = meta["annotations"]
        .as_object_mut()
        .unwrap_or_else(|| panic!("annotations not a map in {name}.yaml: {text}"));
    for (key, value) in [
        ("kubernetes.io/config.hash", hash.as_str()),
        (MIRROR, hash.as_str()),
        ("kubernetes.io/config.source", "file"),
    ] {
        annotations.insert(key.into(), json!(value));
    }
    meta["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": true,
    }]);
    pod["spec"]["nodeName"] = json!(node);
    let tolerations = pod["spec"]["tolerations"].as_array().cloned();
    let mut tolerations = tolerations.unwrap_or_default();
    tolerations.push(json!({"operator": "Exists", "effect": "NoExecute"}));
    pod["spec"]["tolerations"] = json!(tolerations);
    if let Some(pod) = pod.as_object_mut() {
        pod.remove("status");
    }
    pod
}

/// `kubectl create` of `object` (`id`: its kind, name and namespace as `kubectl get` takes
/// them) with `kubeconfig`: the created object, the one already there (the kubelet
/// registers again over kept storage), or the error.
fn create_or_get(
    kubeconfig: &Path,
    scratch: &Path,
    id: &[&str],
    object: &Value,
) -> Result<Value, String> {
    let file = scratch.join(format!("kubelet-{}.json", id.join("-")));
    std::fs::write(&file, object.to_string()).expect("write the kubelet's object");
    let path = file.to_str().expect("a UTF-8 path");
    let out = match kubectl(kubeconfig, &["create", "-o", "json", "-f", path]) {
        Err(e) if e.contains("AlreadyExists") => {
            kubectl(kubeconfig, &[&["get", "-o", "json"][..], id].concat())?
        }
        other => other?,
    };
    serde_json::from_str(&out).map_err(|e| format!("kubectl printed no object: {e}: {out}"))
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Result<String, String> {
    run(Command::new(bin("kubectl"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args))
}
