//! The SealedSecret: sealed from a [`SecretInput`] (read in `input.rs`) after its names
//! and data keys are checked, read back from YAML or JSON, and unsealed for recovery.
//! Errors are [`ManifestError`] (`error.rs`); this module re-exports both, and
//! [`MAX_MANIFEST_BYTES`], under their old paths.
//!
//! Output matches kubeseal >= v0.32: YAML starts with `---`, keys sorted as go-yaml sorts
//! them, no creationTimestamp; JSON in kubeseal's field order. The top-level metadata
//! carries only name, namespace and annotations (the scope, and any recorded state);
//! the template keeps the Secret's labels, annotations, type and immutable. The tree is
//! built here and written by `output.rs`.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;

use super::crypto::{hybrid_decrypt, hybrid_encrypt};
use super::input::parse_doc;
use super::key::{RecoveryKey, SealingKey};
use super::output::{Node, write_json, write_yaml_map};
use super::{API_VERSION, KIND, Scope};

pub use super::error::{MAX_MANIFEST_BYTES, ManifestError};
pub use super::input::SecretInput;

#[derive(Default, Deserialize)]
struct RawMeta {
    name: Option<String>,
    namespace: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

/// The Secret template inside a SealedSecret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Template {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub type_: Option<String>,
    pub(crate) immutable: Option<bool>,
    /// Go templates over the decrypted values; kept when read, never written by us.
    pub data: BTreeMap<String, Option<String>>,
}

/// A SealedSecret manifest. Holds only ciphertext: safe to print, log and commit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SealedSecret {
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub template: Template,
    pub encrypted_data: BTreeMap<String, String>,
}

impl SealedSecret {
    /// Seals every value of `input` to `key` in `scope`, as kubeseal does.
    pub fn seal(
        input: &SecretInput,
        key: &SealingKey,
        scope: Scope,
    ) -> Result<Self, ManifestError> {
        check_names(&input.name, &input.namespace, scope)?;
        let mut annotations = input.annotations.clone();
        set_scope_annotation(&mut annotations, scope);
        let mut sealed = SealedSecret {
            name: input.name.clone(),
            namespace: input.namespace.clone(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            template: Template {
                name: Some(input.name.clone()).filter(|n| !n.is_empty()),
                namespace: Some(input.namespace.clone()).filter(|n| !n.is_empty()),
                labels: input.labels.clone(),
                annotations,
                type_: input.type_.clone(),
                immutable: input.immutable,
                data: BTreeMap::new(),
            },
            encrypted_data: BTreeMap::new(),
        };
        set_scope_annotation(&mut sealed.annotations, scope);
        sealed.add_values(input, key)?;
        Ok(sealed)
    }

    /// Seals `input`'s values into this SealedSecret (adding or replacing keys), with this
    /// SealedSecret's own name, namespace and scope: kubeseal's `--merge-into`.
    pub fn add_values(
        &mut self,
        input: &SecretInput,
        key: &SealingKey,
    ) -> Result<(), ManifestError> {
        let label = self.label();
        for (k, v) in &input.data {
            check_data_key(k)?;
            let ct = hybrid_encrypt(key, &label, v.expose())?;
            self.encrypted_data.insert(k.clone(), B64.encode(ct));
        }
        Ok(())
    }

    /// Whether every encryptedData value has the sealed format for `key` (shape only,
    /// nothing decrypted); the error names the first key at fault, never its value.
    pub(crate) fn check_sealed(&self, key: &SealingKey) -> Result<(), ManifestError> {
        let modulus_len = key.bits() / 8;
        for (k, v) in &self.encrypted_data {
            super::crypto::check_sealed(v, modulus_len).map_err(|reason| {
                ManifestError::NotSealed {
                    key: k.clone(),
                    reason,
                }
            })?;
        }
        Ok(())
    }

    /// The scope the controller will use: from the top-level annotations.
    pub fn scope(&self) -> Scope {
        Scope::from_annotations(|k| self.annotations.get(k).map(String::as_str))
    }

    /// The OAEP label the controller will use to unseal.
    pub fn label(&self) -> Vec<u8> {
        self.scope().label(&self.namespace, &self.name)
    }

    /// Decrypts every value with the first key that works. Recovery and tests only.
    pub fn unseal(&self, keys: &[RecoveryKey]) -> Result<SecretInput, ManifestError> {
        let label = self.label();
        let mut data = BTreeMap::new();
        let mut failures = Vec::new();
        for (k, v) in &self.encrypted_data {
            let ct = B64
                .decode(v.trim())
                .map_err(|e| ManifestError::BadCiphertext {
                    key: k.clone(),
                    reason: e.to_string(),
                })?;
            match hybrid_decrypt(keys, &label, &ct) {
                Ok(plain) => {
                    data.insert(k.clone(), plain);
                }
                Err(e) => failures.push((k.clone(), e)),
            }
        }
        if !failures.is_empty() {
            return Err(ManifestError::Unseal(failures));
        }
        Ok(SecretInput {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            labels: self.template.labels.clone(),
            annotations: self.template.annotations.clone(),
            type_: self.template.type_.clone(),
            immutable: self.template.immutable,
            data,
        })
    }

    /// Reads a SealedSecret from YAML or JSON (with or without `creationTimestamp: null`).
    pub fn parse(bytes: &[u8]) -> Result<Self, ManifestError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw {
            #[serde(default)]
            kind: String,
            #[serde(default)]
            api_version: String,
            #[serde(default)]
            metadata: RawMeta,
            #[serde(default)]
            spec: RawSpec,
        }
        #[derive(Default, Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct RawSpec {
            #[serde(default)]
            template: RawTemplate,
            encrypted_data: Option<BTreeMap<String, String>>,
        }
        #[derive(Default, Deserialize)]
        struct RawTemplate {
            #[serde(default)]
            metadata: RawMeta,
            #[serde(default, rename = "type")]
            type_: Option<String>,
            immutable: Option<bool>,
            data: Option<BTreeMap<String, Option<String>>>,
        }
        let raw: Raw = parse_doc(bytes)?;
        if raw.kind != KIND || raw.api_version != API_VERSION {
            return Err(ManifestError::WrongKind {
                expected: "SealedSecret (bitnami.com/v1alpha1)",
                found: format!(
                    "{} ({})",
                    super::error::shown_kind(&raw.kind),
                    super::error::shown_kind(&raw.api_version)
                ),
                hint: "pass a SealedSecret manifest, as kubeseal or spokekeeper seal writes it",
            });
        }
        let t = raw.spec.template;
        Ok(SealedSecret {
            name: raw.metadata.name.ok_or(ManifestError::Missing {
                field: "metadata.name",
                fix: "a SealedSecret needs the name it was sealed for",
            })?,
            namespace: raw.metadata.namespace.unwrap_or_default(),
            labels: raw.metadata.labels.unwrap_or_default(),
            annotations: raw.metadata.annotations.unwrap_or_default(),
            template: Template {
                name: t.metadata.name,
                namespace: t.metadata.namespace,
                labels: t.metadata.labels.unwrap_or_default(),
                annotations: t.metadata.annotations.unwrap_or_default(),
                type_: t.type_,
                immutable: t.immutable,
                data: t.data.unwrap_or_default(),
            },
            encrypted_data: raw.spec.encrypted_data.ok_or(ManifestError::Missing {
                field: "spec.encryptedData",
                fix: "nothing sealed in it; reseal the Secret",
            })?,
        })
    }

    /// kubeseal's YAML: `---`, keys sorted as go-yaml sorts them, 2-space indent.
    pub fn to_yaml(&self) -> String {
        let mut out = String::from("---\n");
        write_yaml_map(&mut out, 0, self.tree());
        out
    }

    /// kubeseal's JSON: Go struct field order, maps sorted, 2-space indent.
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        write_json(&mut out, 0, &Node::Map(self.tree()));
        out.push('\n');
        out
    }

    /// The manifest as a tree in kubeseal's JSON field order; YAML re-sorts it.
    fn tree(&self) -> Vec<(String, Node)> {
        let meta = |name: Option<&str>,
                    ns: Option<&str>,
                    labels: &BTreeMap<String, String>,
                    annotations: &BTreeMap<String, String>| {
            let mut m = Vec::new();
            if let Some(n) = name.filter(|n| !n.is_empty()) {
                m.push(("name".into(), Node::str(n)));
            }
            if let Some(n) = ns.filter(|n| !n.is_empty()) {
                m.push(("namespace".into(), Node::str(n)));
            }
            if !labels.is_empty() {
                m.push(("labels".into(), Node::strings(labels)));
            }
            if !annotations.is_empty() {
                m.push(("annotations".into(), Node::strings(annotations)));
            }
            Node::Map(m)
        };
        let t = &self.template;
        let mut template = vec![(
            "metadata".into(),
            meta(
                t.name.as_deref(),
                t.namespace.as_deref(),
                &t.labels,
                &t.annotations,
            ),
        )];
        if let Some(ty) = &t.type_ {
            template.push(("type".into(), Node::str(ty)));
        }
        if let Some(b) = t.immutable {
            template.push(("immutable".into(), Node::Bool(b)));
        }
        if !t.data.is_empty() {
            let data = t
                .data
                .iter()
                .map(|(k, v)| (k.clone(), v.as_deref().map_or(Node::Null, Node::str)))
                .collect();
            template.push(("data".into(), Node::Map(data)));
        }
        vec![
            ("kind".into(), Node::str(KIND)),
            ("apiVersion".into(), Node::str(API_VERSION)),
            (
                "metadata".into(),
                meta(
                    Some(&self.name),
                    Some(&self.namespace),
                    &self.labels,
                    &self.annotations,
                ),
            ),
            (
                "spec".into(),
                Node::Map(vec![
                    ("template".into(), Node::Map(template)),
                    ("encryptedData".into(), Node::strings(&self.encrypted_data)),
                ]),
            ),
        ]
    }
}

fn set_scope_annotation(annotations: &mut BTreeMap<String, String>, scope: Scope) {
    annotations.remove(super::ANNOTATION_CLUSTER_WIDE);
    annotations.remove(super::ANNOTATION_NAMESPACE_WIDE);
    if let Some(a) = scope.annotation() {
        annotations.insert(a.into(), "true".into());
    }
}

fn check_names(name: &str, namespace: &str, scope: Scope) -> Result<(), ManifestError> {
    if name.is_empty() {
        return Err(ManifestError::Missing {
            field: "metadata.name",
            fix: "set it in the Secret or pass --name",
        });
    }
    if namespace.is_empty() && scope != Scope::ClusterWide {
        return Err(ManifestError::Missing {
            field: "metadata.namespace",
            fix: "set it in the Secret or pass --namespace (only cluster-wide sealing can do without)",
        });
    }
    let subdomain = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    };
    if !subdomain(name) {
        return Err(ManifestError::BadName {
            field: "metadata.name",
            value: name.into(),
            rule: "lowercase letters, digits, '-' and '.', at most 253 characters",
        });
    }
    if !namespace.is_empty()
        && (namespace.len() > 63 || namespace.contains('.') || !subdomain(namespace))
    {
        return Err(ManifestError::BadName {
            field: "metadata.namespace",
            value: namespace.into(),
            rule: "lowercase letters, digits and '-', at most 63 characters",
        });
    }
    Ok(())
}

fn check_data_key(key: &str) -> Result<(), ManifestError> {
    let ok = !key.is_empty()
        && key.len() <= 253
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if ok {
        return Ok(());
    }
    Err(ManifestError::BadName {
        field: "data key",
        value: key.into(),
        rule: "letters, digits, '-', '_' and '.'",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::SecretBytes;

    #[test]
    fn check_sealed_names_the_key_holding_plaintext_never_the_value() {
        let pem = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/sealed-secrets/key/cert.pem"
        ))
        .unwrap();
        let key = SealingKey::from_pem(&pem, "cert", time::OffsetDateTime::now_utc()).unwrap();
        let mut input = SecretInput {
            name: "dev-kubeconfig".into(),
            namespace: "flux-system".into(),
            ..Default::default()
        };
        input
            .data
            .insert("value".into(), SecretBytes::from(b"kubeconfig".to_vec()));
        input
            .data
            .insert("other".into(), SecretBytes::from(b"x".to_vec()));
        let mut sealed = SealedSecret::seal(&input, &key, Scope::Strict).unwrap();
        assert!(sealed.check_sealed(&key).is_ok());
        let plain = B64.encode(b"users:\n- user:\n    token: hunter2hunter2\n".repeat(30));
        sealed.encrypted_data.insert("value".into(), plain);
        let text = sealed.check_sealed(&key).unwrap_err().to_string();
        assert!(text.starts_with("encryptedData.value "), "{text}");
        assert!(
            !text.contains("hunter2") && !text.contains("dXNlcn"),
            "{text}"
        );
    }

    #[test]
    fn names_are_checked() {
        assert!(check_names("ok-name.x", "ns", Scope::Strict).is_ok());
        assert!(
            check_names("", "ns", Scope::Strict)
                .unwrap_err()
                .to_string()
                .contains("--name")
        );
        assert!(
            check_names("n", "", Scope::Strict)
                .unwrap_err()
                .to_string()
                .contains("--namespace")
        );
        assert!(check_names("n", "", Scope::ClusterWide).is_ok());
        // A '/' would make the strict label ambiguous.
        assert!(check_names("a/b", "ns", Scope::Strict).is_err());
        assert!(check_names("n", "a.b", Scope::Strict).is_err());
        assert!(check_data_key("tls.crt").is_ok());
        assert!(check_data_key("a/b").is_err());
    }

    #[test]
    fn a_committed_file_that_does_not_parse_is_not_quoted() {
        let token = "ghp_0123456789abcdefghijklmnopqrstuvwxyz";
        for text in [
            token.to_string(),
            format!("{{\"kind\": \"{token}\"}}"),
            format!("kind: SealedSecret\n{token}: 1\nspec: {token}\n"),
            format!("[\"{token}\"]"),
            format!("kind: {token}\napiVersion: {token}\n"),
            format!("kind: Secret\napiVersion: v1\n---\nkind: {token}\n"),
        ] {
            let e = SealedSecret::parse(text.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(!e.contains("ghp_0123"), "{text}: {e}");
        }
    }
}
