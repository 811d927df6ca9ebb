//! The error of reading, sealing and unsealing a manifest: one type for `seal` and
//! `unseal`, shared by the input reader and the SealedSecret. Messages name the field at
//! fault and, for a Secret value, only its kind: never the value itself.

use std::fmt::Write;

use super::crypto::{FormatError, SealError, UnsealError};

/// Kubernetes caps a Secret at 1 MiB; base64 and sealing add about 40%.
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("input is {0} bytes, over the {MAX_MANIFEST_BYTES}-byte limit")]
    TooLarge(usize),
    #[error("input is neither YAML nor JSON: {0}")]
    Syntax(String),
    #[error("expected kind {expected}, found {found:?}: {hint}")]
    WrongKind {
        expected: &'static str,
        found: String,
        hint: &'static str,
    },
    #[error("the Secret has no data: add `data` (base64) or `stringData` entries")]
    NoData,
    #[error("data.{key} is not valid base64: {reason} (use stringData for plain text)")]
    BadBase64 { key: String, reason: &'static str },
    #[error("{path} is {found}, expected {expected}{}", type_fix(path))]
    WrongType {
        path: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{field} {value:?} is not a valid Kubernetes name: {rule}")]
    BadName {
        field: &'static str,
        value: String,
        rule: &'static str,
    },
    #[error("{field} is missing: {fix}")]
    Missing {
        field: &'static str,
        fix: &'static str,
    },
    #[error("{field} is {found:?} in the input but {given:?} was given: they must agree")]
    Conflict {
        field: &'static str,
        found: String,
        given: String,
    },
    #[error("sealing failed: {0}")]
    Seal(SealError),
    #[error("encryptedData.{key} is not base64: {reason}")]
    BadCiphertext { key: String, reason: String },
    #[error("{}", format_unseal_failures(.0))]
    Unseal(Vec<(String, UnsealError)>),
    #[error("encryptedData.{key} {reason}: refused, it must never be written")]
    NotSealed { key: String, reason: FormatError },
}

impl From<SealError> for ManifestError {
    fn from(e: SealError) -> ManifestError {
        ManifestError::Seal(e)
    }
}

/// The fix for a value of the wrong type: Secret values are strings.
fn type_fix(path: &str) -> &'static str {
    if path.starts_with("data.") || path.starts_with("stringData.") {
        " (quote it in YAML; data takes base64, stringData plain text)"
    } else {
        ""
    }
}

fn format_unseal_failures(failures: &[(String, UnsealError)]) -> String {
    let mut s = String::from("it does not unseal:");
    for (key, err) in failures {
        let _ = write!(s, " encryptedData.{key}: {err};");
    }
    s.pop();
    s
}

/// A `kind` or `apiVersion` read from input, for an error: itself when it has the shape of
/// one (`ConfigMap`, `bitnami.com/v1alpha1`), else its length only, as the input may be a
/// secret's line (a token, an age identity) rather than a manifest.
pub(crate) fn shown_kind(v: &str) -> String {
    let kind = v.len() <= 63
        && v.starts_with(|c: char| c.is_ascii_uppercase())
        && v.chars().all(|c| c.is_ascii_alphanumeric());
    let api_version = v.len() <= 100
        && !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-/".contains(c));
    if kind || api_version {
        v.to_string()
    } else {
        format!("{} bytes that are no kind", v.len())
    }
}
