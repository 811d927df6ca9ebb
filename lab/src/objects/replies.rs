//! The store's answers in kube-apiserver's words (its Status failures), and the
//! metadata it stamps on what it stores.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{Attributes, Reply};

/// `labelSelector=k=v,k2=v2` (equality only, what spokekeeper sends).
pub(super) fn label_selector(query: &str) -> Result<Vec<(String, String)>, String> {
    let Some(raw) = url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "labelSelector")
        .map(|(_, v)| v.into_owned())
    else {
        return Ok(Vec::new());
    };
    raw.split(',')
        .filter(|t| !t.is_empty())
        .map(|term| {
            let (k, v) = term
                .split_once("==")
                .or_else(|| term.split_once('='))
                .ok_or_else(|| format!("unable to parse requirement: {term:?}"))?;
            Ok((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

pub(super) fn stamp_metadata(object: &mut Value, revision: &str) {
    let meta = &mut object["metadata"];
    meta["uid"] = json!(uid());
    meta["resourceVersion"] = json!(revision);
    meta["creationTimestamp"] = json!(now_text());
}

pub(super) fn now_text() -> String {
    OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .expect("0 ns is valid")
        .format(&Rfc3339)
        .expect("RFC 3339 formats")
}

pub(crate) fn uid() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("OS randomness");
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

pub(super) fn get(store: &BTreeMap<String, Value>, attrs: &Attributes) -> Reply {
    match store.get(&attrs.name) {
        Some(o) => Reply {
            code: 200,
            body: o.clone(),
        },
        None => not_found(attrs),
    }
}

pub(super) fn qualified(attrs: &Attributes) -> String {
    match attrs.group.as_str() {
        "" => attrs.resource.clone(),
        g => format!("{}.{g}", attrs.resource),
    }
}

pub(super) fn details(attrs: &Attributes) -> Value {
    json!({"name": attrs.name, "group": attrs.group, "kind": attrs.resource})
}

pub(super) fn failure(code: u16, reason: &str, message: &str, details: Value) -> Reply {
    let details = Some(details).filter(|d| !d.is_null());
    Reply {
        code,
        body: crate::status::failure(code, reason, message, details),
    }
}

pub(super) fn not_found(attrs: &Attributes) -> Reply {
    let msg = format!("{} \"{}\" not found", qualified(attrs), attrs.name);
    failure(404, "NotFound", &msg, details(attrs))
}

pub(super) fn not_found_path() -> Reply {
    failure(
        404,
        "NotFound",
        "the server could not find the requested resource",
        Value::Null,
    )
}

pub(super) fn already_exists(attrs: &Attributes) -> Reply {
    let msg = format!("{} \"{}\" already exists", qualified(attrs), attrs.name);
    failure(409, "AlreadyExists", &msg, details(attrs))
}

pub(super) fn conflict(attrs: &Attributes) -> Reply {
    let msg = format!(
        "Operation cannot be fulfilled on {} \"{}\": the object has been modified; \
         please apply your changes to the latest version and try again",
        qualified(attrs),
        attrs.name
    );
    failure(409, "Conflict", &msg, details(attrs))
}

pub(super) fn invalid(attrs: &Attributes, kind: &str, field: &str) -> Reply {
    let msg = format!(
        "{kind}.{} \"{}\" is invalid: {field}",
        attrs.group, attrs.name
    );
    failure(
        422,
        "Invalid",
        &msg,
        json!({"name": attrs.name, "group": attrs.group, "kind": kind,
            "causes": [{"field": field}]}),
    )
}

pub(super) fn method_not_allowed() -> Reply {
    failure(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        Value::Null,
    )
}
