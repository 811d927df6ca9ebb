//! The plaintext guard's reading of one staged file: parsed as YAML (every document) or
//! JSON, whatever the layout (quoted keys, flow style, compact JSON, `List` items), and
//! refused when any object in it is a Secret with data (unless it is a sops file whose
//! every value under data is `ENC[AES256_GCM,...]`), an object of any kind with a sops
//! block and a value under data or stringData that is not, or a kubeconfig user with a
//! key or token. Text that does not parse is refused when it mentions such things.

use serde_json::Value;

/// Keys of a kubeconfig user that hold a credential.
const USER_SECRETS: [&str; 5] = [
    "client-key",
    "client-key-data",
    "token",
    "tokenFile",
    "password",
];

/// Words that make text which does not parse suspect (compared in lower case).
const SUSPECT: [&str; 6] = [
    "client-key",
    "token",
    "password",
    "secret",
    "stringdata",
    "data:",
];

/// What the guard refuses in the content of one blob: binary content (it cannot be
/// checked), or plaintext key material. None: it may be committed.
pub(crate) fn refused_in(body: &[u8]) -> Option<&'static str> {
    match body.contains(&0) {
        true => Some("binary content, which cannot be checked for plaintext"),
        false => plaintext_in(&String::from_utf8_lossy(body)),
    }
}

/// The same for bytes about to be committed at `file` (into the stream, or staged),
/// which the guard would otherwise read back from git: a name it could not have read, and a size over
/// [`super::MAX_CHECKED_BLOB`], are refused as they would have been there.
pub(crate) fn refused_to_commit(file: &str, body: &[u8]) -> Option<&'static str> {
    if file.contains(['\n', '\r']) {
        return Some("a line break in the file name, which cannot be checked");
    }
    if u64::try_from(body.len()).map_or(true, |n| n > super::MAX_CHECKED_BLOB) {
        return Some("a file too large to check for plaintext");
    }
    refused_in(body)
}

/// What in `text` would be plaintext key material, or None.
pub(crate) fn plaintext_in(text: &str) -> Option<&'static str> {
    // A PEM private key is refused in any file, parsed or not.
    if text
        .lines()
        .any(|l| l.contains("-----BEGIN") && l.contains("PRIVATE KEY-----"))
    {
        return Some("a PEM private key");
    }
    match documents(text) {
        Some(docs) => docs.iter().find_map(found_in),
        None => {
            let lower = text.to_ascii_lowercase();
            SUSPECT.iter().any(|w| lower.contains(w)).then_some(
                "text that does not parse as YAML or JSON and mentions a Secret, a key or a token, which cannot be checked",
            )
        }
    }
}

/// Every document in `text`, as JSON or else multi-document YAML; None when neither
/// parses within the limits.
fn documents(text: &str) -> Option<Vec<Value>> {
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return Some(vec![v]);
    }
    let max = usize::try_from(super::MAX_CHECKED_BLOB).unwrap_or(usize::MAX);
    serde_saphyr::from_multiple_with_options::<Value>(text, crate::text::hostile_yaml(max)).ok()
}

/// The first plaintext found in `v` or anything nested in it.
fn found_in(v: &Value) -> Option<&'static str> {
    match v {
        Value::Object(map) => {
            let kind = map.get("kind").and_then(Value::as_str).unwrap_or_default();
            let has_data = ["data", "stringData"]
                .iter()
                .any(|k| map.get(*k).is_some_and(non_empty));
            // A sops block says its data is encrypted, whatever the kind (or none): held
            // to it, so a file passed off as sops with data in the clear is refused.
            if is_sops(map)
                && !["data", "stringData"]
                    .iter()
                    .all(|k| map.get(*k).is_none_or(sops_encrypted))
            {
                return Some("a sops file with a value under data that is not ENC[AES256_GCM,...]");
            }
            if kind.eq_ignore_ascii_case("Secret") && has_data && !is_sops(map) {
                return Some("a plaintext Secret with data");
            }
            if (kind.eq_ignore_ascii_case("Config") || map.contains_key("users"))
                && kubeconfig_user_secret(map.get("users"))
            {
                return Some("a plaintext kubeconfig user key or token");
            }
            if map.get("client-key-data").is_some_and(non_empty) {
                return Some("client-key-data (a plaintext kubeconfig key)");
            }
            map.values().find_map(found_in)
        }
        Value::Array(items) => items.iter().find_map(found_in),
        _ => None,
    }
}

/// Whether any entry of a kubeconfig's `users` has a key or token.
fn kubeconfig_user_secret(users: Option<&Value>) -> bool {
    let Some(Value::Array(users)) = users else {
        return false;
    };
    users.iter().any(|u| {
        // `- name: x\n  user: {...}`; a bare user mapping is read the same way.
        let user = u.get("user").unwrap_or(u);
        USER_SECRETS
            .iter()
            .any(|k| user.get(*k).is_some_and(non_empty))
    })
}

/// Whether a Secret carries sops metadata with an encrypted MAC (what `sops -e` and
/// `spokekeeper seal --format sops` write); its values are then checked one by one.
fn is_sops(secret: &serde_json::Map<String, Value>) -> bool {
    secret
        .get("sops")
        .and_then(|m| m.get("mac"))
        .and_then(Value::as_str)
        .is_some_and(enc_shape)
}

/// Every value is a sops `ENC[...]` string, or empty (sops leaves "" and null as they are).
fn sops_encrypted(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty() || enc_shape(s),
        Value::Object(m) => m.values().all(sops_encrypted),
        Value::Array(a) => a.iter().all(sops_encrypted),
        Value::Bool(_) | Value::Number(_) => false,
    }
}

/// The shape of one sops value (seal::sops writes and reads it; repo may not import seal).
fn enc_shape(s: &str) -> bool {
    let Some(rest) = s
        .strip_prefix("ENC[AES256_GCM,data:")
        .and_then(|r| r.strip_suffix(']'))
    else {
        return false;
    };
    let b64 = |p: &str| {
        p.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'='))
    };
    let mut parts = rest.splitn(2, ",iv:");
    let (Some(data), Some(rest)) = (parts.next(), parts.next()) else {
        return false;
    };
    let Some((iv, rest)) = rest.split_once(",tag:") else {
        return false;
    };
    let Some((tag, kind)) = rest.split_once(",type:") else {
        return false;
    };
    b64(data)
        && iv.len() == 44
        && b64(iv)
        && tag.len() == 24
        && b64(tag)
        && ["str", "int", "float", "bool", "bytes"].contains(&kind)
}

fn non_empty(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Bool(_) | Value::Number(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(text: &str) -> Option<&'static str> {
        plaintext_in(text)
    }

    #[test]
    fn bytes_about_to_be_committed_are_refused_as_the_index_read_refuses_them() {
        let sealed = b"apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nspec:\n  encryptedData:\n    value: AgB=\n";
        assert_eq!(refused_to_commit("f.yaml", sealed), None);
        let leak = b"apiVersion: v1\nkind: Secret\ndata:\n  value: aGk=\n";
        assert_eq!(refused_to_commit("f.yaml", leak), refused_in(leak));
        assert!(refused_in(leak).is_some());
        let binary = b"kind: SealedSecret\0";
        assert!(
            refused_to_commit("f.yaml", binary)
                .unwrap()
                .starts_with("binary")
        );
        assert!(
            refused_to_commit("f\nyaml", sealed)
                .unwrap()
                .contains("line break")
        );
        assert!(
            refused_to_commit("f\ryaml", sealed)
                .unwrap()
                .contains("line break")
        );
        let max = usize::try_from(super::super::MAX_CHECKED_BLOB).unwrap();
        let mut big = vec![b'#'; max];
        assert_eq!(refused_to_commit("f.yaml", &big), None, "at the limit");
        big.push(b'#');
        assert!(
            refused_to_commit("f.yaml", &big)
                .unwrap()
                .contains("too large")
        );
    }

    #[test]
    fn a_quoted_kind_is_a_secret() {
        for text in [
            "apiVersion: v1\nkind: \"Secret\"\ndata:\n  value: aGk=\n",
            "apiVersion: v1\n'kind': 'Secret'\ndata:\n  value: aGk=\n",
        ] {
            assert_eq!(secret(text), Some("a plaintext Secret with data"), "{text}");
        }
    }

    #[test]
    fn a_flow_mapping_is_a_secret() {
        let text = "{apiVersion: v1, kind: Secret, data: {value: aGk=}}\n";
        assert_eq!(secret(text), Some("a plaintext Secret with data"));
    }

    #[test]
    fn compact_json_is_a_secret() {
        let text = r#"{"apiVersion":"v1","kind":"Secret","data":{"value":"aGk="}}"#;
        assert_eq!(secret(text), Some("a plaintext Secret with data"));
    }

    #[test]
    fn a_secret_in_a_lists_items_is_a_secret() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- kind: Secret\n  apiVersion: v1\n  data:\n    value: aGk=\n";
        assert_eq!(secret(text), Some("a plaintext Secret with data"));
    }

    #[test]
    fn a_secret_as_the_second_document_is_a_secret() {
        let text = "apiVersion: v1\nkind: ConfigMap\ndata:\n  a: b\n---\n{apiVersion: v1, kind: Secret, data: {value: aGk=}}\n";
        assert_eq!(secret(text), Some("a plaintext Secret with data"));
    }

    #[test]
    fn string_data_under_a_commented_kind_is_a_secret() {
        let text =
            "apiVersion: v1\nkind: Secret  # rotated\nstringData:\n  kubeconfig: |\n    anything\n";
        assert_eq!(secret(text), Some("a plaintext Secret with data"));
    }

    #[test]
    fn a_secret_of_any_api_version_with_data_is_refused_and_an_empty_one_is_not() {
        let text = r#"{"apiVersion":"example.org/v2","kind":"Secret","data":{"a":"b"}}"#;
        assert_eq!(secret(text), Some("a plaintext Secret with data"));
        let empty = r#"{"apiVersion":"v1","kind":"Secret","data":{},"stringData":null}"#;
        assert_eq!(secret(empty), None, "an empty Secret holds nothing");
    }

    #[test]
    fn every_kubeconfig_user_credential_is_refused_in_json_and_flow_yaml() {
        for key in USER_SECRETS {
            let text = format!(
                r#"{{"apiVersion":"v1","kind":"Config","users":[{{"name":"u","user":{{"{key}":"x"}}}}]}}"#
            );
            assert_eq!(
                secret(&text),
                Some("a plaintext kubeconfig user key or token"),
                "{key}"
            );
        }
        let flow = "{users: [{name: u, user: {token: abc}}]}";
        assert_eq!(
            secret(flow),
            Some("a plaintext kubeconfig user key or token")
        );
    }

    #[test]
    fn unparseable_text_that_mentions_a_key_is_refused_and_plain_text_is_not() {
        let broken = "kind: Secret\ndata: [unclosed\n  value: aGk=\n";
        assert!(secret(broken).unwrap().contains("does not parse"));
        let dup = "kind: ConfigMap\nkind: Secret\ndata:\n  value: aGk=\n";
        assert!(
            secret(dup).unwrap().contains("does not parse"),
            "duplicate keys"
        );
        assert_eq!(secret("a: [unclosed\n"), None);
    }

    #[test]
    fn an_alias_bomb_does_not_parse_and_is_judged_as_text() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
        for (i, prev) in ["b", "c", "d", "e", "f", "g", "h", "i"]
            .iter()
            .zip(["a", "b", "c", "d", "e", "f", "g", "h"])
        {
            bomb.push_str(&format!(
                "{i}: &{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        assert!(documents(&bomb).is_none());
        assert_eq!(secret(&bomb), None, "no suspect words");
        bomb.push_str("kind: Secret\n");
        assert!(secret(&bomb).unwrap().contains("does not parse"));
    }

    const ENC: &str = "ENC[AES256_GCM,data:s15VM3smwp4=,iv:so17QYaFermDyRaB3i0Gy0a5z7Fsy3XZe378amSCaFQ=,tag:RyFEtzxLmVxqYN/4J9O/SA==,type:str]";

    fn sops_file(value: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n    name: dev\ndata:\n    value: {value}\n    empty: \"\"\nsops:\n    age:\n        - enc: x\n          recipient: age1x\n    mac: {ENC}\n    version: 3.13.2\n"
        )
    }

    #[test]
    fn a_sops_secret_passes_only_when_every_value_is_encrypted() {
        assert_eq!(secret(&sops_file(ENC)), None);
        for plain in [
            "aGk=",
            "ENC[AES256_GCM,data:aGk=]",
            "ENC[AES256_GCM,data:aGk=,iv:AAAA,tag:AAAA,type:str]",
        ] {
            assert_eq!(
                secret(&sops_file(plain)),
                Some("a sops file with a value under data that is not ENC[AES256_GCM,...]"),
                "{plain}"
            );
        }
        // A `sops:` key without an encrypted MAC does not make a Secret a sops file.
        let fake = format!("kind: Secret\ndata:\n  value: {ENC}\nsops:\n  mac: none\n");
        assert_eq!(secret(&fake), Some("a plaintext Secret with data"));
        let nested = sops_file(ENC).replace(&format!("value: {ENC}"), "value:\n        deep: aGk=");
        assert!(secret(&nested).is_some(), "{nested}");
    }

    /// A sops file that looks encrypted but leaves a value of data or stringData in the
    /// clear, in every shape a file can do it, is refused; the whole file encrypted passes.
    #[test]
    fn a_sops_file_leaving_any_data_value_in_the_clear_is_refused() {
        let refused = Some("a sops file with a value under data that is not ENC[AES256_GCM,...]");
        let sops = format!(
            "sops:\n    age:\n        - enc: x\n          recipient: age1x\n    mac: {ENC}\n    version: 3.13.2\n"
        );
        let with_sops = |head: &str, extra: &str| format!("{head}{sops}{extra}");
        let shapes = [
            // stringData in the clear beside encrypted data.
            with_sops(
                &format!(
                    "apiVersion: v1\nkind: Secret\ndata:\n    value: {ENC}\nstringData:\n    kubeconfig: apiVersion v1\n"
                ),
                "",
            ),
            // unencrypted_suffix: sops leaves `value_unencrypted` as it is.
            with_sops(
                "apiVersion: v1\nkind: Secret\ndata:\n    value_unencrypted: c2VjcmV0\n",
                "    unencrypted_suffix: _unencrypted\n",
            ),
            // An encrypted_regex that matches nothing: data written as it was.
            with_sops(
                "apiVersion: v1\nkind: Secret\ndata:\n    value: c2VjcmV0\n",
                "    encrypted_regex: ^nothing$\n",
            ),
            // A plain value reached through an alias.
            with_sops(
                &format!(
                    "apiVersion: v1\nkind: Secret\nmetadata:\n    name: &p c2VjcmV0\ndata:\n    value: {ENC}\n    copy: *p\n"
                ),
                "",
            ),
            // The whole data mapping an alias of a plain one.
            with_sops(
                &format!(
                    "apiVersion: v1\nkind: Secret\nmetadata:\n    labels: &d {{value: c2VjcmV0}}\ndata: *d\nstringData:\n    other: {ENC}\n"
                ),
                "",
            ),
            // A sops file that is not a Secret by its kind, or has none.
            with_sops(
                "apiVersion: v1\nkind: ConfigMap\ndata:\n    value: c2VjcmV0\n",
                "",
            ),
            with_sops("data:\n    value: c2VjcmV0\n", ""),
            // A number or a boolean is a plaintext value too.
            with_sops("apiVersion: v1\nkind: Secret\ndata:\n    port: 6443\n", ""),
        ];
        for text in &shapes {
            assert_eq!(secret(text), refused, "{text}");
        }
        let whole = with_sops(
            &format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n    name: dev\ndata:\n    value: {ENC}\nstringData:\n    other: {ENC}\n"
            ),
            "",
        );
        assert_eq!(secret(&whole), None, "{whole}");
    }

    #[test]
    fn sealed_secrets_and_certificates_pass() {
        let sealed = "apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata:\n  name: dev-kubeconfig\n  namespace: flux-system\n  annotations:\n    spokekeeper.io/sealing-cert-sha256: ab12\nspec:\n  encryptedData:\n    value: AgBy3i4OJSWK\n  template:\n    metadata:\n      name: dev-kubeconfig\n      namespace: flux-system\n    type: Opaque\n";
        assert_eq!(secret(sealed), None);
        let cert =
            "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUYx\n-----END CERTIFICATE-----\n";
        assert_eq!(secret(cert), None);
        let pem = "-----BEGIN PRIVATE KEY-----\nMC4CAQ\n-----END PRIVATE KEY-----\n";
        assert_eq!(secret(pem), Some("a PEM private key"));
    }
}
