//! Where a key is in the configuration text, so an error found after parsing can name
//! its line (docs/configuration.md promises it). A second, untyped read of the same text.

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// The YAML tree with the line of every value.
pub(super) struct Lines(Option<Spanned<Node>>);

enum Node {
    Map(Vec<(String, Spanned<Node>)>),
    Seq(Vec<Spanned<Node>>),
    Leaf,
}

impl Lines {
    pub(super) fn of(text: &str) -> Lines {
        Lines(serde_saphyr::from_str(text).ok())
    }

    /// The line of `key` (`spokes[2].ssh.port`), or of its nearest written ancestor
    /// when it was left out (a default). None when nothing of it is written.
    pub(super) fn line(&self, key: &str) -> Option<u64> {
        let mut at = self.0.as_ref()?;
        let mut line = None;
        for part in key.split('.') {
            let (name, index) = match part.split_once('[') {
                Some((n, i)) => (n, i.strip_suffix(']').and_then(|i| i.parse::<usize>().ok())),
                None => (part, None),
            };
            let Node::Map(entries) = &at.value else { break };
            let Some((_, v)) = entries.iter().find(|(k, _)| k == name) else {
                break;
            };
            at = v;
            line = Some(v.referenced.line());
            if let Some(i) = index {
                let Node::Seq(items) = &at.value else { break };
                let Some(item) = items.get(i) else { break };
                at = item;
                line = Some(item.referenced.line());
            }
        }
        line.filter(|&l| l > 0)
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Key>()? {
            entries.push((key.0, map.next_value()?));
        }
        Ok(Node::Map(entries))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_i128<E: de::Error>(self, _: i128) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
}

/// A mapping key as text, whatever scalar it is written as.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a scalar key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Key, E> {
                Ok(Key(String::new()))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_find_their_lines_and_defaults_their_parent() {
        let text = "repo:\n  path: f\n  branch: main\nsealing: {cert: c.pem}\nspokes:\n  - name: dev\n    address: 10.0.0.1\n  - {name: test, address: x,\n     ssh: {port: 0}}\n";
        let l = Lines::of(text);
        assert_eq!(l.line("repo.branch"), Some(3));
        assert_eq!(l.line("sealing.cert"), Some(4));
        assert_eq!(l.line("spokes[0].address"), Some(7));
        assert_eq!(l.line("spokes[1].ssh.port"), Some(9));
        assert_eq!(
            l.line("spokes[0].secret.name"),
            Some(6),
            "left out: the spoke"
        );
        assert_eq!(l.line("spokes[7].name"), Some(6), "no such spoke: the list");
        assert_eq!(l.line("nothing"), None);
        assert_eq!(Lines::of(": [").line("repo"), None);
    }
}
