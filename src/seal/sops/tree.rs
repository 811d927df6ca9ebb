//! The document as sops sees it: an ordered tree of scalars, lists and maps, read from
//! YAML or JSON and written back the way sops writes YAML (go-yaml v3, 4-space indent,
//! list items indented under their key, multi-line strings as literal blocks). Strings
//! are zeroized on drop: the plaintext tree holds the Secret's values.

use std::fmt::{self, Write};

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use zeroize::Zeroizing;

use super::error::SopsError;
use crate::seal::error::MAX_MANIFEST_BYTES;
use crate::seal::yaml::scalar;

pub(super) enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Zeroizing<String>),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

/// The shape only: a string may be a secret value.
impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Str(s) => write!(f, "Str(<{} bytes>)", s.len()),
            Node::Seq(items) => f.debug_list().entries(items).finish(),
            Node::Map(m) => f
                .debug_map()
                .entries(m.iter().map(|(k, v)| (k, v)))
                .finish(),
            Node::Null => f.write_str("Null"),
            Node::Bool(_) => f.write_str("Bool"),
            Node::Int(_) => f.write_str("Int"),
            Node::Float(_) => f.write_str("Float"),
        }
    }
}

impl Node {
    pub(super) fn str(s: &str) -> Node {
        Node::Str(Zeroizing::new(s.to_string()))
    }

    pub(super) fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub(super) fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The bytes sops hashes into the MAC for a leaf (its `ToBytes`).
    pub(super) fn mac_bytes(&self) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(match self {
            Node::Str(s) => s.as_bytes().to_vec(),
            Node::Int(i) => i.to_string().into_bytes(),
            Node::Float(f) => f.to_string().into_bytes(),
            Node::Bool(b) => python_bool(*b).as_bytes().to_vec(),
            Node::Null | Node::Seq(_) | Node::Map(_) => Vec::new(),
        })
    }
}

/// sops writes booleans as Python did: `True`, `False`.
pub(super) fn python_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// One YAML or JSON document whose top is a map, at most [`MAX_MANIFEST_BYTES`]. Errors
/// carry no snippet of the input: the lines around a syntax error may hold values.
pub(super) fn parse(bytes: &[u8]) -> Result<Vec<(String, Node)>, SopsError> {
    // What the parser quotes is cut: the input may be a secret's line.
    let syntax = |e: String| {
        SopsError::Manifest(crate::seal::ManifestError::Syntax(crate::text::unquoted(
            &e,
        )))
    };
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(crate::seal::ManifestError::TooLarge(bytes.len()).into());
    }
    let text = std::str::from_utf8(bytes).map_err(|e| syntax(format!("not UTF-8: {e}")))?;
    let node: Node = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| syntax(e.to_string()))?
    } else {
        let mut options = serde_saphyr::Options::default();
        options.with_snippet = false;
        // YAML 1.2 booleans, as go-yaml v3 (sops) reads them.
        options.strict_booleans = true;
        options.duplicate_keys = serde_saphyr::options::DuplicateKeyPolicy::Error;
        serde_saphyr::from_str_with_options(text, options).map_err(|e| syntax(e.to_string()))?
    };
    match node {
        Node::Map(m) => Ok(m),
        _ => Err(SopsError::Metadata {
            field: "the input",
            problem: "is not a map: a Secret manifest is one".into(),
        }),
    }
}

/// The document as YAML, the way sops writes it.
pub(super) fn emit(top: &[(String, Node)]) -> Zeroizing<String> {
    let mut out = Zeroizing::new(String::new());
    emit_map(&mut out, 0, top);
    out
}

fn emit_map(out: &mut String, indent: usize, entries: &[(String, Node)]) {
    let pad = " ".repeat(indent);
    for (i, (key, node)) in entries.iter().enumerate() {
        // The first key of a list item follows its "- ".
        if !(i == 0 && out.ends_with("- ")) {
            out.push_str(&pad);
        }
        let _ = write!(out, "{}:", scalar(key));
        emit_value(out, indent, node);
    }
}

/// A value after `key:` (or `-`), its key at column `indent`.
fn emit_value(out: &mut String, indent: usize, node: &Node) {
    match node {
        Node::Map(m) if m.is_empty() => out.push_str(" {}\n"),
        Node::Seq(s) if s.is_empty() => out.push_str(" []\n"),
        Node::Map(m) => {
            out.push('\n');
            emit_map(out, indent + 4, m);
        }
        Node::Seq(items) => {
            out.push('\n');
            let pad = " ".repeat(indent + 4);
            for item in items {
                out.push_str(&pad);
                out.push('-');
                match item {
                    Node::Map(m) if !m.is_empty() => {
                        out.push(' ');
                        emit_map(out, indent + 6, m);
                    }
                    other => emit_value(out, indent + 2, other),
                }
            }
        }
        Node::Str(s) if literal_ok(s) => {
            out.push_str(" |\n");
            let pad = " ".repeat(indent + 2);
            for line in s.lines() {
                if !line.is_empty() {
                    out.push_str(&pad);
                    out.push_str(line);
                }
                out.push('\n');
            }
        }
        leaf => {
            out.push(' ');
            match leaf {
                Node::Null => out.push_str("null"),
                Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                Node::Int(i) => out.push_str(&i.to_string()),
                Node::Float(f) => out.push_str(&f.to_string()),
                Node::Str(s) => out.push_str(&scalar(s)),
                Node::Seq(_) | Node::Map(_) => unreachable!("handled above"),
            }
            out.push('\n');
        }
    }
}

/// A multi-line string that a plain `|` block carries exactly: one final newline, no
/// leading space, no characters that need escapes.
fn literal_ok(s: &str) -> bool {
    s.contains('\n')
        && s.ends_with('\n')
        && !s.ends_with("\n\n")
        && !s.starts_with([' ', '\n'])
        && !s.lines().any(|l| l.ends_with(' '))
        && !s.chars().any(|c| c.is_control() && c != '\n')
}

/// What [`walk`] calls for each leaf, with the leaf's key path.
pub(super) type Leaf<'a> = dyn FnMut(&mut Node, &[String]) -> Result<(), SopsError> + 'a;

/// Calls `leaf` for every scalar leaf, in document order, with its key path (list items
/// share their list's path, as in sops). Nulls are skipped, as sops skips them.
pub(super) fn walk(top: &mut [(String, Node)], leaf: &mut Leaf<'_>) -> Result<(), SopsError> {
    let mut path = Vec::new();
    walk_map(top, &mut path, leaf)
}

fn walk_map(
    entries: &mut [(String, Node)],
    path: &mut Vec<String>,
    leaf: &mut Leaf<'_>,
) -> Result<(), SopsError> {
    for (key, node) in entries {
        path.push(key.clone());
        walk_node(node, path, leaf)?;
        path.pop();
    }
    Ok(())
}

fn walk_node(
    node: &mut Node,
    path: &mut Vec<String>,
    leaf: &mut Leaf<'_>,
) -> Result<(), SopsError> {
    match node {
        Node::Null => Ok(()),
        Node::Map(m) => walk_map(m, path, leaf),
        Node::Seq(items) => items.iter_mut().try_for_each(|i| walk_node(i, path, leaf)),
        _ => leaf(node, path),
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Node, E> {
        i64::try_from(v)
            .map(Node::Int)
            .map_err(|_| E::custom("an integer over 2^63"))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::str(v))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(Zeroizing::new(v)))
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries: Vec<(String, Node)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value::<Node>()?;
            if entries.iter().any(|(k, _)| *k == key) {
                // Not named: the text may be anything a link points at.
                return Err(serde::de::Error::custom("a key appears twice"));
            }
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emits_as_sops_does() {
        let top = parse(
            b"a: x\nm:\n  k: \"1\"\n  l: [p, q]\nsops:\n  age:\n  - enc: \"line1\\nline2\\n\"\n    recipient: r\n  version: 3.13.2\n",
        )
        .unwrap();
        assert_eq!(
            emit(&top).as_str(),
            "a: x\nm:\n    k: \"1\"\n    l:\n        - p\n        - q\nsops:\n    age:\n        - enc: |\n            line1\n            line2\n          recipient: r\n    version: 3.13.2\n"
        );
    }

    #[test]
    fn walk_visits_leaves_in_order_with_list_paths() {
        let mut top = parse(b"a: 1\nb:\n  c: [x, y]\n  d: null\n  e: true\n").unwrap();
        let mut seen = Vec::new();
        walk(&mut top, &mut |n, p| {
            seen.push((p.join(":"), n.mac_bytes().to_vec()));
            Ok(())
        })
        .unwrap();
        let expect: Vec<(String, Vec<u8>)> =
            [("a", "1"), ("b:c", "x"), ("b:c", "y"), ("b:e", "True")]
                .iter()
                .map(|(p, v)| (p.to_string(), v.as_bytes().to_vec()))
                .collect();
        assert_eq!(seen, expect);
    }
}
