//! The Secret `seal` reads: [`SecretInput`], from YAML or JSON.
//!
//! The document is parsed as a plain tree and then checked field by field, so a value of
//! the wrong type is reported by its path and its kind, never by its content: serde's
//! typed errors quote the offending value (`invalid type: integer `12345678``), and that
//! value may be the secret. Strings are zeroized on drop; numbers keep only their kind.
//! `data` is base64-decoded straight into [`SecretBytes`], and a decoding error never
//! names the offending character. [`parse_doc`] (size limit, YAML or JSON, no snippets,
//! nothing the parser quotes) also reads the SealedSecret in `manifest.rs`.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use zeroize::Zeroizing;

use super::error::{MAX_MANIFEST_BYTES, ManifestError};
use super::{LAST_APPLIED_ANNOTATIONS, Scope};
use crate::secret::SecretBytes;

/// A plaintext Secret: what is sealed, and what unsealing gives back. Values live in
/// [`SecretBytes`].
#[derive(Debug, Default)]
pub struct SecretInput {
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub type_: Option<String>,
    pub immutable: Option<bool>,
    pub data: BTreeMap<String, SecretBytes>,
}

impl SecretInput {
    /// A Secret manifest, YAML or JSON, with `data` and/or `stringData` (stringData wins,
    /// as in the API server).
    ///
    /// Errors name the field and the type found, never a value (see the module comment).
    pub fn parse(bytes: &[u8]) -> Result<Self, ManifestError> {
        let tree: Value = parse_doc(bytes)?;
        let raw = secret(&tree)?;
        if raw.kind != "Secret" {
            return Err(ManifestError::WrongKind {
                expected: "Secret",
                found: super::error::shown_kind(&raw.kind),
                hint: "pipe a Secret, e.g. kubectl create secret generic NAME --from-file=... --dry-run=client -o yaml",
            });
        }
        let mut data = BTreeMap::new();
        for (key, b64) in raw.data {
            let value = decode_b64(&key, &b64)?;
            data.insert(key, value);
        }
        for (key, value) in raw.string_data {
            data.insert(key, SecretBytes::new(value.as_bytes().to_vec()));
        }
        if data.is_empty() {
            return Err(ManifestError::NoData);
        }
        let mut annotations = raw.annotations;
        for a in LAST_APPLIED_ANNOTATIONS {
            annotations.remove(a);
        }
        Ok(SecretInput {
            name: raw.name.unwrap_or_default(),
            namespace: raw.namespace.unwrap_or_default(),
            labels: raw.labels,
            annotations,
            type_: raw.type_,
            immutable: raw.immutable,
            data,
        })
    }

    /// Fills name and namespace from flags; a flag that contradicts the input is an error.
    pub fn apply_flags(
        &mut self,
        name: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<(), ManifestError> {
        for (field, current, given) in [
            ("metadata.name", &mut self.name, name),
            ("metadata.namespace", &mut self.namespace, namespace),
        ] {
            let Some(given) = given else { continue };
            if current.is_empty() {
                *current = given.to_string();
            } else if current != given {
                return Err(ManifestError::Conflict {
                    field,
                    found: current.clone(),
                    given: given.into(),
                });
            }
        }
        Ok(())
    }

    /// The scope this Secret asks for in its own annotations (kubeseal honours them).
    pub fn annotated_scope(&self) -> Scope {
        Scope::from_annotations(|k| self.annotations.get(k).map(String::as_str))
    }
}

/// One YAML or JSON document, at most [`MAX_MANIFEST_BYTES`]: a Secret as a [`Value`]
/// tree, or a SealedSecret.
pub(super) fn parse_doc<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, ManifestError> {
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge(bytes.len()));
    }
    let text =
        std::str::from_utf8(bytes).map_err(|e| ManifestError::Syntax(format!("not UTF-8: {e}")))?;
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| syntax(&e))
    } else {
        // No snippet: the lines around a syntax error may hold a Secret's values.
        let mut options = serde_saphyr::Options::default();
        options.with_snippet = false;
        // Its rejection message quotes the scalar; as a number it is reported by kind.
        options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
        // YAML 1.2 booleans only: `namespace: y` or a value `on` stays a string.
        options.strict_booleans = true;
        serde_saphyr::from_str_with_options(text, options).map_err(|e| syntax(&e))
    }
}

/// The parser's error without what it quotes: the input may be a committed file's text
/// or a secret's ([`crate::text::unquoted`]).
fn syntax(e: &dyn std::fmt::Display) -> ManifestError {
    ManifestError::Syntax(crate::text::unquoted(&e.to_string()))
}

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
    pub(crate) immutable: Option<bool>,
    pub data: Vec<(String, Zeroizing<String>)>,
    pub(crate) string_data: Vec<(String, Zeroizing<String>)>,
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

fn decode_b64(key: &str, b64: &str) -> Result<SecretBytes, ManifestError> {
    let b64 = b64.trim();
    let mut out = SecretBytes::new(vec![0u8; b64.len() / 4 * 3 + 3]);
    let n = B64
        .decode_slice(b64.as_bytes(), out.expose_mut())
        .map_err(|e| ManifestError::BadBase64 {
            key: key.into(),
            reason: base64_reason(&e),
        })?;
    let mut exact = SecretBytes::with_capacity(n);
    exact.try_extend(&out.expose()[..n]);
    Ok(exact)
}

/// Why base64 did not decode, without the offending symbol: it is part of the secret.
fn base64_reason(e: &base64::DecodeSliceError) -> &'static str {
    use base64::DecodeError as D;
    match e {
        base64::DecodeSliceError::DecodeError(D::InvalidByte(..)) => {
            "a character outside the base64 alphabet"
        }
        base64::DecodeSliceError::DecodeError(D::InvalidLength(_)) => "the length is not valid",
        base64::DecodeSliceError::DecodeError(D::InvalidLastSymbol(..)) => {
            "the last character has trailing bits set"
        }
        base64::DecodeSliceError::DecodeError(D::InvalidPadding) => "the padding is not valid",
        base64::DecodeSliceError::OutputSliceTooSmall => "it does not decode",
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

    #[test]
    fn base64_decodes_exactly() {
        assert_eq!(decode_b64("k", "aGVsbG8=").unwrap().expose(), b"hello");
        assert_eq!(decode_b64("k", "").unwrap().expose(), b"");
        assert!(
            decode_b64("k", "!!!")
                .unwrap_err()
                .to_string()
                .contains("data.k")
        );
    }
}
