use std::collections::BTreeMap;

use time::macros::datetime;

use super::*;
use crate::secret::SecretBytes;

fn identity() -> (AgeIdentities, String) {
    let id = age::x25519::Identity::generate();
    let public = id.to_public().to_string();
    let secret = age::secrecy::ExposeSecret::expose_secret(&id.to_string()).to_string();
    let ids = AgeIdentities::parse(&SecretBytes::from(format!("# test\n{secret}\n"))).unwrap();
    (ids, public)
}

fn secret() -> SecretInput {
    SecretInput {
        name: "spoke-a-kubeconfig".into(),
        namespace: "flux-system".into(),
        annotations: BTreeMap::from([(
            "spokekeeper.io/ca-sha256".to_string(),
            "sha256:00".to_string(),
        )]),
        type_: Some("Opaque".into()),
        data: BTreeMap::from([
            (
                "value".to_string(),
                SecretBytes::from(b"apiVersion: v1\n".to_vec()),
            ),
            ("empty".to_string(), SecretBytes::default()),
        ]),
        ..SecretInput::default()
    }
}

#[test]
fn writes_what_sops_writes_and_reads_it_back() {
    let (ids, public) = identity();
    let recipients = AgeRecipients::parse(&[public.as_str()]).unwrap();
    let out = encrypt_at(&secret(), &recipients, datetime!(2026-12-04 08:09:40 UTC)).unwrap();
    let expected_head = "apiVersion: v1\ndata:\n    empty: \"\"\n    value: ENC[AES256_GCM,data:";
    assert!(out.starts_with(expected_head), "{out}");
    assert!(
        !out.contains("YXBpVmVyc2lvbjogdjEK"),
        "plaintext base64 in {out}"
    );
    for line in [
        "kind: Secret\nmetadata:\n    annotations:\n        spokekeeper.io/ca-sha256: sha256:00\n    name: spoke-a-kubeconfig\n    namespace: flux-system\ntype: Opaque\nsops:\n    age:\n        - enc: |\n            -----BEGIN AGE ENCRYPTED FILE-----\n",
        &format!(
            "            -----END AGE ENCRYPTED FILE-----\n          recipient: {public}\n    encrypted_regex: ^(data|stringData)$\n    lastmodified: \"2026-12-04T08:09:40Z\"\n    mac: ENC[AES256_GCM,data:"
        ),
        ",type:str]\n    version: 3.13.2\n",
    ] {
        assert!(out.contains(line), "missing {line:?} in\n{out}");
    }
    let back = decrypt(out.as_bytes(), &ids).unwrap();
    assert_eq!(back.data["value"].expose(), b"apiVersion: v1\n");
    assert!(back.data["empty"].is_empty());
    assert_eq!(back.annotations, secret().annotations);
    let meta = metadata(out.as_bytes()).unwrap();
    assert_eq!(meta.recipients, [public]);
}

#[test]
fn every_recipient_can_decrypt() {
    let (a, pa) = identity();
    let (b, pb) = identity();
    let (c, _) = identity();
    let out = encrypt(&secret(), &AgeRecipients::parse(&[pa, pb]).unwrap()).unwrap();
    for ids in [&a, &b] {
        assert_eq!(decrypt(out.as_bytes(), ids).unwrap().data.len(), 2);
    }
    let err = decrypt(out.as_bytes(), &c).unwrap_err();
    assert!(matches!(err, SopsError::NoIdentityWorked { .. }), "{err}");
}

#[test]
fn tampering_is_refused() {
    let (ids, public) = identity();
    let out = encrypt(&secret(), &AgeRecipients::parse(&[public]).unwrap()).unwrap();
    // A readable field changed: only the MAC catches it.
    let renamed = out.replace("name: spoke-a-kubeconfig", "name: spoke-b-kubeconfig");
    let err = decrypt(renamed.as_bytes(), &ids).unwrap_err();
    assert!(matches!(err, SopsError::MacMismatch), "{err}");
    // An encrypted value moved to another key: its additional data no longer matches.
    let moved = out.replace("    value: ENC", "    other: ENC");
    let err = decrypt(moved.as_bytes(), &ids).unwrap_err();
    assert!(
        matches!(&err, SopsError::Altered { path } if path == "data.other"),
        "{err}"
    );
    // lastmodified changed: the MAC no longer authenticates.
    let meta = metadata(out.as_bytes()).unwrap();
    let later = out.replace(&meta.lastmodified, "2020-01-01T00:00:00Z");
    let err = decrypt(later.as_bytes(), &ids).unwrap_err();
    assert!(matches!(err, SopsError::MacAltered), "{err}");
    // A flipped bit in an encrypted value.
    let i = out.find("value: ENC[AES256_GCM,data:").unwrap() + 28;
    let mut flipped = out.clone().into_bytes();
    flipped[i] = if flipped[i] == b'A' { b'B' } else { b'A' };
    let err = decrypt(&flipped, &ids).unwrap_err();
    assert!(
        matches!(err, SopsError::Altered { .. } | SopsError::BadValue { .. }),
        "{err}"
    );
}

#[test]
fn errors_name_fields_not_values() {
    let (ids, _) = identity();
    let err = decrypt(b"apiVersion: v1\nkind: Secret\ndata:\n  x: aGk=\n", &ids).unwrap_err();
    assert!(matches!(err, SopsError::NotSops), "{err}");
    let err = AgeRecipients::parse(&["age1nope"]).unwrap_err();
    assert!(err.to_string().contains("age recipient #1"), "{err}");
    let err = AgeIdentities::parse(&SecretBytes::from(
        "# c\nAGE-SECRET-KEY-1SECRETSTUFF\n".to_string(),
    ))
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("line 2") && !msg.contains("SECRETSTUFF"),
        "{msg}"
    );
    let empty: [&str; 0] = [];
    assert!(matches!(
        AgeRecipients::parse(&empty),
        Err(SopsError::NoRecipients)
    ));
}

mod hostile {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// A committed file is hostile input: any edit is an error or gives the same
        /// data (values are authenticated with their key path). Never a panic. Keys
        /// outside data are not: sops' MAC covers values only, so a renamed `name:` key
        /// decrypts (as with `sops -d`), and so does the key of an empty value, which
        /// sops leaves unencrypted; docs/sealing.md says so.
        #[test]
        fn an_edited_file_is_refused_or_unchanged(
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let (ids, public) = identity();
            let out = encrypt(&secret(), &AgeRecipients::parse(&[public]).unwrap()).unwrap();
            let mut bytes = out.into_bytes();
            for (at, b) in edits {
                let i = at.index(bytes.len());
                bytes[i] = b;
            }
            if let Ok(back) = decrypt(&bytes, &ids) {
                // An empty value is left unencrypted (as sops does), so its key is not
                // bound either; every other value keeps its key and content.
                prop_assert_eq!(back.data.get("value").map(|v| v.expose()), Some(&b"apiVersion: v1\n"[..]));
                prop_assert!(back.data.iter().all(|(k, v)| k == "value" || v.is_empty()));
            }
        }
    }
}

#[test]
fn the_recipient_fingerprint_is_of_the_set() {
    let (_, a) = identity();
    let (_, b) = identity();
    let fp = |list: &[&str]| AgeRecipients::parse(list).unwrap().fingerprint();
    assert_eq!(fp(&[&a, &b]), fp(&[&b, &a]));
    assert_eq!(fp(&[&a, &b]), fp(&[&b, &a, &b]));
    assert_ne!(fp(&[&a, &b]), fp(&[&a]));
    let mut set = [a.as_str(), b.as_str()];
    set.sort_unstable();
    let text = format!("{}\n{}\n", set[0], set[1]);
    assert_eq!(
        fp(&[&a, &b]),
        crate::fingerprint::Fingerprint::of(text.as_bytes())
    );
}

/// `"\t\n"` in a readable field comes back as null from the real `sops -d` (its YAML
/// writer): refused, naming the field; a tab alone or a line break alone is written, and a
/// tab with a line break in an encrypted value is fine (it is ciphertext in the file).
#[test]
fn a_readable_value_sops_would_write_back_as_null_is_refused() {
    let (_, public) = identity();
    let recipients = AgeRecipients::parse(&[public.as_str()]).unwrap();
    for bad in ["\t\n", "x\t\ny", "\r\t"] {
        let mut input = secret();
        input.annotations.insert("a/b".into(), bad.into());
        let err = encrypt(&input, &recipients).unwrap_err();
        assert!(
            matches!(&err, SopsError::Unwritable { path } if path == "metadata.annotations.a/b"),
            "{bad:?}: {err}"
        );
    }
    for fine in ["\t", "a\nb", " x "] {
        let mut input = secret();
        input.annotations.insert("a/b".into(), fine.into());
        assert!(encrypt(&input, &recipients).is_ok(), "{fine:?}");
    }
    let mut input = secret();
    input
        .data
        .insert("tabbed".into(), SecretBytes::from(b"\t\n".to_vec()));
    assert!(encrypt(&input, &recipients).is_ok());
}
