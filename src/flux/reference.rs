//! What a Flux object's `spec.kubeConfig` reads, in the fleet repo: a Secret
//! (`secretRef`: a sealed spoke's kubeconfig) or a ConfigMap (`configMapRef`: a federated
//! spoke's address and CA). Both are local references, read from the consumer's own
//! namespace, so a reference and that namespace together name one spoke's credential.

use serde_json::Value;

use crate::config::{CredentialMode, SpokeConfig};

/// The largest patch text parsed (a patch is a few lines; the file was bounded before).
const MAX_PATCH_BYTES: usize = 1 << 20;

/// One `spec.kubeConfig` reference, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Ref {
    /// `configMapRef` (else `secretRef`).
    pub config_map: bool,
    pub name: String,
}

impl Ref {
    /// The reference in a `spec.kubeConfig` value; the ConfigMap when it names both
    /// (Flux's CRD admits exactly one, so such an object is refused on the hub anyway).
    pub(super) fn of(kube_config: &Value) -> Option<Ref> {
        let named = |field: &str| kube_config[field]["name"].as_str().map(str::to_string);
        named("configMapRef")
            .map(|name| Ref {
                config_map: true,
                name,
            })
            .or_else(|| {
                named("secretRef").map(|name| Ref {
                    config_map: false,
                    name,
                })
            })
    }

    /// Whether it names `spoke`'s credential under either kind: what the confinement
    /// traps judge, so that a consumer left on a federated spoke's old Secret, or naming
    /// a sealed spoke's name as a ConfigMap, is judged as that spoke's.
    pub(super) fn names(&self, spoke: &SpokeConfig) -> bool {
        self.name == spoke.secret.name
    }

    /// Whether it reads what `spoke`'s mode commits: its ConfigMap when federated, else
    /// its Secret.
    pub(super) fn reads(&self, spoke: &SpokeConfig) -> bool {
        self.names(spoke) && self.config_map == is_federated(spoke)
    }
}

pub(super) fn is_federated(spoke: &SpokeConfig) -> bool {
    spoke.credential.mode == CredentialMode::Federated
}

/// The field a consumer of `spoke` sets under spec.kubeConfig, as written there.
pub(super) fn field_of(spoke: &SpokeConfig) -> &'static str {
    if is_federated(spoke) {
        "configMapRef"
    } else {
        "secretRef"
    }
}

/// The kind of `spoke`'s credential object on the hub.
pub(super) fn kind_of(spoke: &SpokeConfig) -> &'static str {
    if is_federated(spoke) {
        "ConfigMap"
    } else {
        "Secret"
    }
}

/// The reference a HelmRelease patch's spec.kubeConfig sets: a JSON 6902 operation on
/// /spec/kubeConfig, or a strategic merge.
pub(super) fn patched(patch: &str) -> Option<Ref> {
    let v: Value =
        serde_saphyr::from_str_with_options(patch, crate::text::hostile_yaml(MAX_PATCH_BYTES))
            .ok()?;
    match &v {
        Value::Array(ops) => ops
            .iter()
            .find(|op| op["path"].as_str() == Some("/spec/kubeConfig"))
            .and_then(|op| Ref::of(&op["value"])),
        _ => v.pointer("/spec/kubeConfig").and_then(Ref::of),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_names_a_secret_or_a_configmap_in_either_shape() {
        let secret = Ref {
            config_map: false,
            name: "edge-kubeconfig".into(),
        };
        let config_map = Ref {
            config_map: true,
            ..secret.clone()
        };
        for (patch, want) in [
            (
                "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: any}\nspec:\n  kubeConfig:\n    secretRef: {name: edge-kubeconfig}\n",
                Some(&secret),
            ),
            (
                "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: any}\nspec:\n  kubeConfig:\n    configMapRef: {name: edge-kubeconfig}\n",
                Some(&config_map),
            ),
            (
                "- op: add\n  path: /spec/kubeConfig\n  value:\n    configMapRef:\n      name: edge-kubeconfig\n",
                Some(&config_map),
            ),
            (
                "- op: add\n  path: /spec/kubeConfig\n  value: {secretRef: {name: edge-kubeconfig, key: value}}\n",
                Some(&secret),
            ),
            ("- op: add\n  path: /spec/suspend\n  value: true\n", None),
            ("[: not yaml", None),
        ] {
            assert_eq!(patched(patch).as_ref(), want, "{patch}");
        }
    }
}
