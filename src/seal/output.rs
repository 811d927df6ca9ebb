//! Manifests written the way kubeseal and kubectl write them: a tree of [`Node`]s, printed
//! as YAML (`---`, keys in go-yaml's order, 2-space indent) or as JSON (the tree's own
//! field order, 2-space indent), with scalars from `yaml.rs`. The SealedSecret builds
//! its tree in `manifest.rs`; the plaintext Secret's (kubectl's `-o yaml|json`, for
//! `unseal`) is here.

use std::collections::BTreeMap;
use std::fmt::Write;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

use super::input::SecretInput;
use super::yaml::{json_string, scalar};
use crate::secret::SecretBytes;

impl SecretInput {
    /// The Secret manifest (data base64), as kubectl would print it.
    pub fn to_yaml(&self) -> SecretBytes {
        let mut out = String::from("---\n");
        write_yaml_map(&mut out, 0, self.tree());
        SecretBytes::from(out)
    }

    /// The same Secret as JSON (`-o json`), in kubectl's field order.
    pub fn to_json(&self) -> SecretBytes {
        let mut out = String::new();
        write_json(&mut out, 0, &Node::Map(self.tree()));
        out.push('\n');
        SecretBytes::from(out)
    }

    fn tree(&self) -> Vec<(String, Node)> {
        let mut meta = vec![("name".to_string(), Node::str(&self.name))];
        if !self.namespace.is_empty() {
            meta.push(("namespace".into(), Node::str(&self.namespace)));
        }
        if !self.labels.is_empty() {
            meta.push(("labels".into(), Node::strings(&self.labels)));
        }
        if !self.annotations.is_empty() {
            meta.push(("annotations".into(), Node::strings(&self.annotations)));
        }
        let data = self
            .data
            .iter()
            .map(|(k, v)| (k.clone(), Node::Str(B64.encode(v.expose()))))
            .collect();
        let mut tree = vec![
            ("apiVersion".to_string(), Node::str("v1")),
            ("kind".into(), Node::str("Secret")),
            ("metadata".into(), Node::Map(meta)),
            ("data".into(), Node::Map(data)),
        ];
        if let Some(t) = &self.type_ {
            tree.push(("type".into(), Node::str(t)));
        }
        if let Some(b) = self.immutable {
            tree.push(("immutable".into(), Node::Bool(b)));
        }
        tree
    }
}

pub(super) enum Node {
    Str(String),
    Bool(bool),
    Null,
    Map(Vec<(String, Node)>),
}

impl Node {
    pub(super) fn str(s: &str) -> Node {
        Node::Str(s.to_string())
    }

    pub(super) fn strings(map: &BTreeMap<String, String>) -> Node {
        Node::Map(map.iter().map(|(k, v)| (k.clone(), Node::str(v))).collect())
    }
}

pub(super) fn write_yaml_map(out: &mut String, indent: usize, mut entries: Vec<(String, Node)>) {
    entries.sort_by(|a, b| go_yaml_key_order(&a.0, &b.0));
    for (key, node) in entries {
        let pad = " ".repeat(indent);
        match node {
            Node::Str(s) => {
                let _ = writeln!(out, "{pad}{}: {}", scalar(&key), scalar(&s));
            }
            Node::Bool(b) => {
                let _ = writeln!(out, "{pad}{}: {b}", scalar(&key));
            }
            Node::Null => {
                let _ = writeln!(out, "{pad}{}: null", scalar(&key));
            }
            Node::Map(m) if m.is_empty() => {
                let _ = writeln!(out, "{pad}{}: {{}}", scalar(&key));
            }
            Node::Map(m) => {
                let _ = writeln!(out, "{pad}{}:", scalar(&key));
                write_yaml_map(out, indent + 2, m);
            }
        }
    }
}

pub(super) fn write_json(out: &mut String, indent: usize, node: &Node) {
    match node {
        Node::Str(s) => out.push_str(&json_string(s)),
        Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Node::Null => out.push_str("null"),
        Node::Map(m) if m.is_empty() => out.push_str("{}"),
        Node::Map(m) => {
            out.push_str("{\n");
            for (i, (k, v)) in m.iter().enumerate() {
                out.push_str(&" ".repeat(indent + 2));
                out.push_str(&json_string(k));
                out.push_str(": ");
                write_json(out, indent + 2, v);
                out.push_str(if i + 1 < m.len() { ",\n" } else { "\n" });
            }
            out.push_str(&" ".repeat(indent));
            out.push('}');
        }
    }
}

/// go-yaml v2's map key order: letters after other characters, digit runs compared as
/// numbers. Plain byte order for everything we write except odd keys like `key10`.
fn go_yaml_key_order(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (ar, br): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    for i in 0..ar.len().min(br.len()) {
        if ar[i] == br[i] {
            continue;
        }
        let (al, bl) = (ar[i].is_alphabetic(), br[i].is_alphabetic());
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            return if bl {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let number = |r: &[char]| {
            let digits: String = r[i..].iter().take_while(|c| c.is_ascii_digit()).collect();
            (digits.parse::<u128>().unwrap_or(0), digits.len())
        };
        let ((an, alen), (bn, blen)) = (number(&ar), number(&br));
        // A leading zero inside a longer number compares as a digit, not as a number.
        let zero_inside = (ar[i] == '0' || br[i] == '0')
            && i > 0
            && ar[..i]
                .iter()
                .rev()
                .take_while(|c| c.is_ascii_digit())
                .any(|&c| c != '0');
        if !zero_inside && an != bn {
            return an.cmp(&bn);
        }
        if alen != blen {
            return alen.cmp(&blen);
        }
        return ar[i].cmp(&br[i]);
    }
    ar.len().cmp(&br.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_key_order() {
        let mut keys = vec![
            "spec",
            "kind",
            "metadata",
            "apiVersion",
            "key10",
            "key2",
            "a.b",
            "ab",
            "a-b",
        ];
        keys.sort_by(|a, b| go_yaml_key_order(a, b));
        assert_eq!(
            keys,
            [
                "a-b",
                "a.b",
                "ab",
                "apiVersion",
                "key2",
                "key10",
                "kind",
                "metadata",
                "spec"
            ]
        );
    }
}
