//! What a sops-encrypted Secret shows without a key: the part spokekeeper observes
//! (names, labels, its own annotations, which keys `data` has) and who it is for.

use std::collections::BTreeMap;

use super::error::SopsError;
use super::tree::{self, Node};
use super::{split_metadata, value};

/// A sops-encrypted Secret, read without decrypting anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SopsSecret {
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The keys of `data`, each holding an encrypted value.
    pub keys: Vec<String>,
    /// `sops.age[].recipient`, in file order.
    pub recipients: Vec<String>,
}

fn bad(field: &'static str, problem: &str) -> SopsError {
    SopsError::Metadata {
        field,
        problem: problem.into(),
    }
}

/// A string map (labels, annotations); anything else in it is refused.
fn strings(
    node: Option<&Node>,
    field: &'static str,
) -> Result<BTreeMap<String, String>, SopsError> {
    match node {
        None | Some(Node::Null) => Ok(BTreeMap::new()),
        Some(Node::Map(m)) => m
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(s) => Ok((k.clone(), s.to_string())),
                None => Err(bad(field, "has a value that is not a string")),
            })
            .collect(),
        Some(_) => Err(bad(field, "is not a map")),
    }
}

/// Whether `text` is a sops file at all: a document with a top-level `sops` entry.
pub fn is_sops(text: &[u8]) -> bool {
    tree::parse(text).is_ok_and(|top| top.iter().any(|(k, _)| k == "sops"))
}

/// Reads a sops file holding a `v1` Secret. A value under `data` that is not
/// encrypted is refused: such a file must not pass for spokekeeper's output.
pub fn readable(text: &[u8]) -> Result<SopsSecret, SopsError> {
    let mut top = tree::parse(text)?;
    let meta = split_metadata(&mut top)?;
    let field = |k: &str| top.iter().find(|(key, _)| key == k).map(|(_, v)| v);
    if field("kind").and_then(Node::as_str) != Some("Secret")
        || field("apiVersion").and_then(Node::as_str) != Some("v1")
    {
        return Err(bad("kind", "is not Secret (apiVersion v1)"));
    }
    let metadata = field("metadata").ok_or_else(|| bad("metadata", "is missing"))?;
    let text = |k: &str, f: &'static str| {
        metadata
            .get(k)
            .and_then(Node::as_str)
            .map(str::to_string)
            .ok_or_else(|| bad(f, "is missing or not a string"))
    };
    let mut keys = Vec::new();
    match field("data") {
        None | Some(Node::Null) => {}
        Some(Node::Map(m)) => {
            for (k, v) in m {
                if !v.as_str().is_some_and(value::is_encrypted) {
                    return Err(SopsError::NotEncrypted {
                        path: format!("data.{k}"),
                    });
                }
                keys.push(k.clone());
            }
        }
        Some(_) => return Err(bad("data", "is not a map")),
    }
    if field("stringData").is_some() {
        return Err(bad(
            "stringData",
            "is present: spokekeeper writes data only",
        ));
    }
    Ok(SopsSecret {
        name: text("name", "metadata.name")?,
        namespace: text("namespace", "metadata.namespace")?,
        labels: strings(metadata.get("labels"), "metadata.labels")?,
        annotations: strings(metadata.get("annotations"), "metadata.annotations")?,
        keys,
        recipients: meta.recipients,
    })
}
