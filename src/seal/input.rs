//! The Secret `seal` reads, parsed as a plain tree and then checked field by field, so a
//! value of the wrong type is reported by its path and its kind, never by its content:
//! serde's typed errors quote the offending value (`invalid type: integer `12345678``),
//! and that value may be the secret. Strings are zeroized on drop; numbers keep only
//! their kind.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use zeroize::Zeroizing;

use super::error::ManifestError;

/// One node of the input. Only what the Secret's fields need is kept.
pub(super) enum Value {
    Null,
    Bool(bool),
    Integer,
    Float,
    Str(Zeroizing<String>),
    Bytes,
    Seq,
    Map(Vec<(String, Value)>),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Integer => "an integer",
            Value::Float => "a number",
            Value::Str(_) => "a string",
            Value::Bytes => "binary data",
            Value::Seq => "a list",
            Value::Map(_) => "a map",
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Value, E> {
        Ok(Value::Integer)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Value, E> {
        Ok(Value::Integer)
    }
    fn visit_i128<E>(self, _: i128) -> Result<Value, E> {
        Ok(Value::Integer)
    }
    fn visit_u128<E>(self, _: u128) -> Result<Value, E> {
        Ok(Value::Integer)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(Value::Float)
    }
    fn visit_char<E>(self, v: char) -> Result<Value, E> {
        Ok(Value::Str(Zeroizing::new(v.to_string())))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(Zeroizing::new(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(Zeroizing::new(v)))
    }
    fn visit_bytes<E>(self, _: &[u8]) -> Result<Value, E> {
        Ok(Value::Bytes)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Value::Seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Key>()? {
            let value = map.next_value::<Value>()?;
            entries.push((key.0, value));
        }
        Ok(Value::Map(entries))
    }
}

/// A map key: a scalar, as text (YAML allows `123:`; Kubernetes reads it as "123").
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        String::deserialize(d).map(Key)
    }
}

/// What the Secret's fields hold, checked.
pub(super) struct RawSecret {
    pub kind: String,
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub type_: Option<String>,
    pub immutable: Option<bool>,
    pub data: Vec<(String, Zeroizing<String>)>,
    pub string_data: Vec<(String, Zeroizing<String>)>,
}

/// Reads the Secret's fields from the tree; anything else in it is ignored.
pub(super) fn secret(root: &Value) -> Result<RawSecret, ManifestError> {
    let top = map(root, "the input", "a Secret manifest (a map)")?;
    let (mut name, mut namespace) = (None, None);
    let (mut labels, mut annotations) = (BTreeMap::new(), BTreeMap::new());
    if let Some(meta) = get(top, "metadata").filter(|v| !matches!(v, Value::Null)) {
        let meta = map(meta, "metadata", "a map")?;
        name = text(get(meta, "name"), "metadata.name")?;
        namespace = text(get(meta, "namespace"), "metadata.namespace")?;
        labels = strings(get(meta, "labels"), "metadata.labels")?;
        annotations = strings(get(meta, "annotations"), "metadata.annotations")?;
    }
    let immutable = match get(top, "immutable") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => return Err(wrong("immutable", "true or false", other)),
    };
    Ok(RawSecret {
        kind: text(get(top, "kind"), "kind")?.unwrap_or_default(),
        name,
        namespace,
        labels,
        annotations,
        type_: text(get(top, "type"), "type")?,
        immutable,
        data: secret_values(get(top, "data"), "data", "a base64 string")?,
        string_data: secret_values(get(top, "stringData"), "stringData", "a string")?,
    })
}

/// The last entry named `key` (as a map built from the input keeps the last).
fn get<'a>(entries: &'a [(String, Value)], key: &str) -> Option<&'a Value> {
    entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn map<'a>(
    v: &'a Value,
    path: &str,
    expected: &'static str,
) -> Result<&'a [(String, Value)], ManifestError> {
    match v {
        Value::Map(entries) => Ok(entries),
        other => Err(wrong(path, expected, other)),
    }
}

/// A plain string field; null or absent is None.
fn text(v: Option<&Value>, path: &str) -> Result<Option<String>, ManifestError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s.to_string())),
        Some(other) => Err(wrong(path, "a string", other)),
    }
}

/// A map of plain strings (labels, annotations); null or absent is empty.
fn strings(v: Option<&Value>, path: &str) -> Result<BTreeMap<String, String>, ManifestError> {
    let mut out = BTreeMap::new();
    let Some(v) = v.filter(|v| !matches!(v, Value::Null)) else {
        return Ok(out);
    };
    for (k, v) in map(v, path, "a map of strings")? {
        match v {
            Value::Str(s) => out.insert(k.clone(), s.to_string()),
            other => return Err(wrong(&format!("{path}.{k}"), "a string", other)),
        };
    }
    Ok(out)
}

/// `data` or `stringData`: every value a string, kept zeroized.
fn secret_values(
    v: Option<&Value>,
    path: &str,
    expected: &'static str,
) -> Result<Vec<(String, Zeroizing<String>)>, ManifestError> {
    let mut out = Vec::new();
    let Some(v) = v.filter(|v| !matches!(v, Value::Null)) else {
        return Ok(out);
    };
    for (k, v) in map(v, path, "a map of key: value entries")? {
        match v {
            Value::Str(s) => out.push((k.clone(), s.clone())),
            other => return Err(wrong(&format!("{path}.{k}"), expected, other)),
        }
    }
    Ok(out)
}

fn wrong(path: &str, expected: &'static str, found: &Value) -> ManifestError {
    ManifestError::WrongType {
        path: path.to_string(),
        expected,
        found: found.kind(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_json(text: &str) -> Result<RawSecret, ManifestError> {
        let v: Value = serde_json::from_str(text).unwrap();
        secret(&v)
    }

    #[test]
    fn field_paths_and_kinds_without_values() {
        let cases = [
            (
                r#"{"stringData":{"pw":12345678}}"#,
                "stringData.pw is an integer",
            ),
            (r#"{"data":{"pw":3.14159}}"#, "data.pw is a number"),
            (r#"{"data":{"pw":true}}"#, "data.pw is a boolean"),
            (r#"{"stringData":{"pw":null}}"#, "stringData.pw is null"),
            (
                r#"{"stringData":{"pw":["S3cr3tV4lu3"]}}"#,
                "stringData.pw is a list",
            ),
            (
                r#"{"stringData":{"pw":{"x":"S3cr3tV4lu3"}}}"#,
                "stringData.pw is a map",
            ),
            (r#"{"stringData":"S3cr3tV4lu3"}"#, "stringData is a string"),
            (
                r#"{"metadata":{"annotations":{"a":12345678}}}"#,
                "metadata.annotations.a is an integer",
            ),
            (r#"{"immutable":"S3cr3tV4lu3"}"#, "immutable is a string"),
            (r#"["S3cr3tV4lu3"]"#, "the input is a list"),
        ];
        for (input, want) in cases {
            let e = parse_json(input).err().expect(input).to_string();
            assert!(e.contains(want), "{input}: {e}");
            assert!(
                !e.contains("S3cr3tV4lu3") && !e.contains("12345678") && !e.contains("3.14"),
                "{e}"
            );
        }
    }

    #[test]
    fn nulls_count_as_absent_except_for_values() {
        let s = parse_json(
            r#"{"kind":"Secret","metadata":null,"type":null,"data":null,"stringData":{"a":"b"}}"#,
        )
        .unwrap();
        assert_eq!(s.kind, "Secret");
        assert!(s.data.is_empty());
        assert_eq!(s.string_data.len(), 1);
    }
}
