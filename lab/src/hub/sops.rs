//! kustomize-controller's sops decryption: a Kustomization with `spec.decryption:
//! {provider: sops, secretRef}` decrypts each sops-encrypted Secret under its spec.path
//! with the age identity in that Secret before it applies them. The lab does no sops
//! crypto: the identity is a [`SopsKey`] its user injects.

use std::sync::Arc;

use serde_json::Value;

use super::{FluxObject, State};

/// The age identity held in the Secret a Kustomization's `spec.decryption.secretRef`
/// names, injected (the demo and the tests use spokekeeper's sops decryption): Ok when it
/// decrypts the sops file given, else why not, as sops says it. The real controller does
/// not check the sops MAC; a key may be stricter.
pub type SopsKey = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// A sops Secret in the fleet repo, as kustomize-controller reads one: a top-level `sops`
/// mapping beside kind Secret. None for anything else (applied as it is).
fn sops_secret(bytes: &[u8]) -> Option<(String, String)> {
    let v: Value = serde_saphyr::from_str(std::str::from_utf8(bytes).ok()?).ok()?;
    if !v["sops"].is_object() || v["kind"] != "Secret" || v["apiVersion"] != "v1" {
        return None;
    }
    let name = v["metadata"]["name"].as_str()?.to_string();
    let namespace = v["metadata"]["namespace"].as_str().unwrap_or_default();
    Some((namespace.to_string(), name))
}

/// Whether `file` (relative to the repo's root) lies under a Kustomization's spec.path
/// (`./x`, `x/`, `.` and `/` read as Flux reads them).
fn under(path: &str, file: &str) -> bool {
    let dir: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    let parts: Vec<&str> = file.split('/').collect();
    parts.len() > dir.len() && parts[..dir.len()] == dir[..]
}

/// What kustomize-controller (v1.9) writes in Ready's message (reason `BuildFailed`)
/// when a sops Secret under the Kustomization `k`'s spec.path does not decrypt with its
/// key; None when every one does, or `k` does not decrypt with sops.
pub(super) fn failure(st: &State, k: &FluxObject) -> Option<String> {
    let key = k.sops.as_ref()?;
    let path = k.obj["spec"]["path"].as_str().unwrap_or_default();
    st.spokes
        .iter()
        .filter(|s| under(path, &s.file))
        .filter_map(|s| (st.source)(&s.file))
        .find_map(|bytes| {
            let (namespace, name) = sops_secret(&bytes)?;
            let why = key(&bytes).err()?;
            Some(format!(
                "decryption failed for 'Secret.v1.[noGrp]/{name}': failed to decrypt and format '{namespace}/{name}' Secret data: {why}"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_under_a_path_as_flux_reads_it() {
        for path in ["./fluxcd/sops", "fluxcd/sops/", "/fluxcd/sops"] {
            assert!(under(path, "fluxcd/sops/dev.yaml"), "{path}");
            assert!(!under(path, "fluxcd/dev.yaml"), "{path}");
            assert!(!under(path, "fluxcd/sopsx/dev.yaml"), "{path}");
        }
        assert!(under(".", "fluxcd/dev.yaml"));
        assert!(under("./", "dev.yaml"));
    }

    #[test]
    fn only_a_secret_with_sops_metadata_is_decrypted() {
        let sops = b"apiVersion: v1\nkind: Secret\nmetadata:\n    name: dev-kubeconfig\n    namespace: flux-system\ndata:\n    value: ENC[AES256_GCM,data:x,iv:y,tag:z,type:str]\nsops:\n    version: 3.13.2\n";
        assert_eq!(
            sops_secret(sops),
            Some(("flux-system".into(), "dev-kubeconfig".into()))
        );
        let plain = b"apiVersion: v1\nkind: Secret\nmetadata:\n    name: dev-kubeconfig\ndata:\n    value: eA==\n";
        assert_eq!(sops_secret(plain), None);
        let sealed = b"apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata:\n    name: dev-kubeconfig\nspec:\n    encryptedData: {}\nsops:\n    version: 3.13.2\n";
        assert_eq!(sops_secret(sealed), None);
    }
}
