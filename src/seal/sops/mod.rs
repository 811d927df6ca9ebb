//! SOPS with age, natively: a Kubernetes Secret encrypted exactly as `sops -e` encrypts
//! it (sops v3 format), and read back as `sops -d` reads it. Details follow getsops/sops
//! (aes/cipher.go, sops.go, stores/): a random 32-byte data key; every value under `data`
//! or `stringData` (`encrypted_regex: ^(data|stringData)$`, Flux's recommendation)
//! encrypted with AES-256-GCM and its key path as additional data; the data key wrapped
//! for each age recipient; `mac` = SHA-512 over every plaintext value in document order,
//! encrypted with `lastmodified` as additional data. Everything outside `data` stays
//! readable (metadata, spokekeeper's annotations), and the MAC covers it too.
//!
//! Encryption needs only recipients; decryption (recovery, tests) an age identity.

mod error;
mod keys;
mod readable;
mod rules;
mod tree;
mod value;

use sha2::{Digest, Sha512};
use time::OffsetDateTime;
use zeroize::Zeroizing;

pub use error::{SopsError, ValueFault};
pub use keys::{AgeIdentities, AgeRecipients, recipients_fingerprint};
pub use readable::{SopsSecret, is_sops, readable};
pub use rules::recipients_for;

use super::SecretInput;
use tree::Node;

/// The rule spokekeeper writes: values under `data` and `stringData` are encrypted.
pub const ENCRYPTED_REGEX: &str = "^(data|stringData)$";
/// The sops release whose format this writes (and the conformance tests run).
pub const SOPS_VERSION: &str = "3.13.2";
/// sops' default rule when a file names none.
const DEFAULT_UNENCRYPTED_SUFFIX: &str = "_unencrypted";
/// sops.go's MACOnlyEncryptedInitialization: a MAC over encrypted values only starts
/// with these bytes, so it never equals a MAC over all values.
const MAC_ONLY_ENCRYPTED_INIT: [u8; 32] = [
    0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0x0b,
    0x0b, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69,
];

/// Which values a file encrypts: the one rule its metadata names (sops allows one).
enum Rule {
    DataRegex,
    UnencryptedSuffix(String),
    EncryptedSuffix(String),
}

impl Rule {
    /// sops' shouldBeEncrypted: any component of the path decides.
    fn encrypts(&self, path: &[String]) -> bool {
        match self {
            Rule::DataRegex => path.iter().any(|p| p == "data" || p == "stringData"),
            Rule::UnencryptedSuffix(s) => !path.iter().any(|p| p.ends_with(s.as_str())),
            Rule::EncryptedSuffix(s) => path.iter().any(|p| p.ends_with(s.as_str())),
        }
    }
}

/// The additional data of a value at `path`, joined as sops joins it: `data:key:`.
fn additional_data(path: &[String]) -> String {
    let mut ad = path.join(":");
    ad.push(':');
    ad
}

/// Go's `time.RFC3339` layout: seconds, no fraction, `Z` for UTC.
fn rfc3339(t: OffsetDateTime) -> String {
    let (h, m, _) = t.offset().as_hms();
    let zone = if t.offset().is_utc() {
        "Z".to_string()
    } else {
        let sign = if t.offset().is_negative() { '-' } else { '+' };
        format!("{sign}{:02}:{:02}", h.unsigned_abs(), m.unsigned_abs())
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{zone}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

fn hex_upper(bytes: &[u8]) -> Zeroizing<String> {
    let mut s = Zeroizing::new(String::with_capacity(bytes.len() * 2));
    for b in bytes {
        s.push(char::from(b"0123456789ABCDEF"[usize::from(b >> 4)]));
        s.push(char::from(b"0123456789ABCDEF"[usize::from(b & 15)]));
    }
    s
}

/// `secret` as kubectl prints it, encrypted for `recipients` as `sops -e` would
/// (`--encrypted-regex '^(data|stringData)$'`), now.
pub fn encrypt(secret: &SecretInput, recipients: &AgeRecipients) -> Result<String, SopsError> {
    encrypt_at(secret, recipients, OffsetDateTime::now_utc())
}

/// A readable string the sops CLI's YAML output does not carry: `"\t\n"` comes back as
/// null from `sops -d` (v3.13.2, its YAML writer), so kustomize-controller would apply
/// something else. Refused conservatively: any tab together with a line break.
fn sops_yaml_loses(s: &str) -> bool {
    s.contains('\t') && (s.contains('\n') || s.contains('\r'))
}

/// [`encrypt`] with `lastmodified` given.
pub fn encrypt_at(
    secret: &SecretInput,
    recipients: &AgeRecipients,
    now: OffsetDateTime,
) -> Result<String, SopsError> {
    let plain = secret.to_yaml();
    let mut top = tree::parse(plain.expose())?;
    let mut key = Zeroizing::new([0u8; 32]);
    getrandom::fill(key.as_mut()).map_err(|e| SopsError::Random(e.to_string()))?;
    let rule = Rule::DataRegex;
    let mut mac = Sha512::new();
    tree::walk(&mut top, &mut |leaf, path| {
        mac.update(leaf.mac_bytes().as_slice());
        if !rule.encrypts(path) && leaf.as_str().is_some_and(sops_yaml_loses) {
            return Err(SopsError::Unwritable {
                path: path.join("."),
            });
        }
        if rule.encrypts(path) {
            let enc = value::encrypt(leaf, &key, &additional_data(path))?;
            *leaf = Node::Str(Zeroizing::new(enc));
        }
        Ok(())
    })?;
    // Nothing under data leaves in the clear, whatever the walk did.
    tree::walk(&mut top, &mut |leaf, path| match leaf.as_str() {
        Some(s) if rule.encrypts(path) && !s.is_empty() && !value::is_encrypted(s) => {
            Err(SopsError::NotEncrypted {
                path: path.join("."),
            })
        }
        _ => Ok(()),
    })?;
    let lastmodified = rfc3339(now.to_offset(time::UtcOffset::UTC));
    let mac = hex_upper(&mac.finalize());
    let mac = value::encrypt(&Node::Str(mac), &key, &lastmodified)?;
    let age = recipients
        .wrap(&key)?
        .into_iter()
        .map(|(enc, recipient)| {
            Node::Map(vec![
                ("enc".into(), Node::str(&enc)),
                ("recipient".into(), Node::str(&recipient)),
            ])
        })
        .collect();
    // sops sorts its metadata's keys.
    top.push((
        "sops".into(),
        Node::Map(vec![
            ("age".into(), Node::Seq(age)),
            ("encrypted_regex".into(), Node::str(ENCRYPTED_REGEX)),
            ("lastmodified".into(), Node::str(&lastmodified)),
            ("mac".into(), Node::str(&mac)),
            ("version".into(), Node::str(SOPS_VERSION)),
        ]),
    ));
    Ok(tree::emit(&top).to_string())
}

/// What a sops file says about itself, read without a key: for observing a committed
/// file and for the plaintext guard.
pub struct SopsMetadata {
    /// `sops.age[].recipient`, in file order.
    pub recipients: Vec<String>,
    /// `sops.lastmodified`, as Go's RFC 3339 layout prints it.
    pub lastmodified: String,
    mac: String,
    age: Vec<(String, String)>,
    rule: Rule,
    mac_only_encrypted: bool,
}

impl SopsMetadata {
    fn read(meta: &Node) -> Result<Self, SopsError> {
        let field = |field: &'static str, problem: &str| SopsError::Metadata {
            field,
            problem: problem.into(),
        };
        let Node::Map(entries) = meta else {
            return Err(field("sops", "is not a map"));
        };
        for (k, v) in entries {
            let unsupported = |f: &'static str| SopsError::Unsupported {
                field: f,
                what: format!("sops.{k}"),
            };
            match (k.as_str(), v) {
                ("key_groups", _) => return Err(unsupported("sops.key_groups")),
                ("shamir_threshold", Node::Int(n)) if *n > 1 => {
                    return Err(unsupported("sops.shamir_threshold"));
                }
                (
                    "unencrypted_regex" | "encrypted_comment_regex" | "unencrypted_comment_regex",
                    _,
                ) => {
                    return Err(unsupported("sops.*_regex"));
                }
                _ => {}
            }
        }
        let text = |name: &'static str| -> Result<Option<&str>, SopsError> {
            match meta.get(name) {
                None | Some(Node::Null) => Ok(None),
                Some(Node::Str(s)) => Ok(Some(s.as_str())),
                Some(_) => Err(field(name, "is not a string")),
            }
        };
        let mut rules = Vec::new();
        if let Some(re) = text("encrypted_regex")? {
            if re != ENCRYPTED_REGEX {
                return Err(SopsError::Unsupported {
                    field: "sops.encrypted_regex",
                    what: format!("{re:?}, not {ENCRYPTED_REGEX}"),
                });
            }
            rules.push(Rule::DataRegex);
        }
        if let Some(s) = text("unencrypted_suffix")? {
            rules.push(Rule::UnencryptedSuffix(s.to_string()));
        }
        if let Some(s) = text("encrypted_suffix")? {
            rules.push(Rule::EncryptedSuffix(s.to_string()));
        }
        let rule = match rules.len() {
            0 => Rule::UnencryptedSuffix(DEFAULT_UNENCRYPTED_SUFFIX.into()),
            1 => rules.remove(0),
            _ => {
                return Err(field(
                    "sops",
                    "names more than one of encrypted_regex, unencrypted_suffix, encrypted_suffix (sops allows one)",
                ));
            }
        };
        let lastmodified =
            text("lastmodified")?.ok_or_else(|| field("sops.lastmodified", "is missing"))?;
        let lastmodified =
            OffsetDateTime::parse(lastmodified, &time::format_description::well_known::Rfc3339)
                .map_err(|_| field("sops.lastmodified", "is not an RFC 3339 time"))?;
        let mut age = Vec::new();
        match meta.get("age") {
            None | Some(Node::Null) => {}
            Some(Node::Seq(items)) => {
                for item in items {
                    let (Some(enc), Some(recipient)) = (
                        item.get("enc").and_then(Node::as_str),
                        item.get("recipient").and_then(Node::as_str),
                    ) else {
                        return Err(field(
                            "sops.age",
                            "has an entry without enc and recipient strings",
                        ));
                    };
                    age.push((enc.to_string(), recipient.to_string()));
                }
            }
            Some(_) => return Err(field("sops.age", "is not a list")),
        }
        let mac_only_encrypted = match meta.get("mac_only_encrypted") {
            None | Some(Node::Null) => false,
            Some(Node::Bool(b)) => *b,
            Some(_) => return Err(field("sops.mac_only_encrypted", "is not a boolean")),
        };
        Ok(Self {
            recipients: age.iter().map(|(_, r)| r.clone()).collect(),
            lastmodified: rfc3339(lastmodified),
            mac: text("mac")?.unwrap_or_default().to_string(),
            age,
            rule,
            mac_only_encrypted,
        })
    }
}

/// The `sops` entry, taken out of the document.
fn split_metadata(top: &mut Vec<(String, Node)>) -> Result<SopsMetadata, SopsError> {
    let i = top
        .iter()
        .position(|(k, _)| k == "sops")
        .ok_or(SopsError::NotSops)?;
    let (_, meta) = top.remove(i);
    SopsMetadata::read(&meta)
}

/// The metadata of a sops file, without decrypting anything.
pub fn metadata(text: &[u8]) -> Result<SopsMetadata, SopsError> {
    split_metadata(&mut tree::parse(text)?)
}

/// Decrypts a sops file as `sops -d` does (the data key from the first age entry an
/// identity opens, every value authenticated, then the MAC) into the Secret it holds.
pub fn decrypt(text: &[u8], identities: &AgeIdentities) -> Result<SecretInput, SopsError> {
    let plain = decrypt_to_yaml(text, identities)?;
    Ok(SecretInput::parse(plain.as_bytes())?)
}

/// [`decrypt`], giving the plaintext document as sops would print it.
pub fn decrypt_to_yaml(
    text: &[u8],
    identities: &AgeIdentities,
) -> Result<Zeroizing<String>, SopsError> {
    let mut top = tree::parse(text)?;
    let meta = split_metadata(&mut top)?;
    let key = identities.unwrap(meta.age.iter().map(|(e, r)| (e.as_str(), r.as_str())))?;
    let mut mac = Sha512::new();
    if meta.mac_only_encrypted {
        mac.update(MAC_ONLY_ENCRYPTED_INIT);
    }
    tree::walk(&mut top, &mut |leaf, path| {
        let encrypted = meta.rule.encrypts(path);
        if encrypted {
            let dotted = path.join(".");
            let Some(s) = leaf.as_str() else {
                return Err(SopsError::BadValue {
                    path: dotted,
                    fault: ValueFault::NotString,
                });
            };
            *leaf = value::decrypt(s, &key, &dotted, &additional_data(path))?;
        }
        if encrypted || !meta.mac_only_encrypted {
            mac.update(leaf.mac_bytes().as_slice());
        }
        Ok(())
    })?;
    let computed = hex_upper(&mac.finalize());
    let file_mac = match value::decrypt(&meta.mac, &key, "sops.mac", &meta.lastmodified) {
        Ok(Node::Str(s)) => s,
        Ok(_) | Err(SopsError::Altered { .. }) => return Err(SopsError::MacAltered),
        Err(e) => return Err(e),
    };
    if *file_mac != *computed {
        return Err(SopsError::MacMismatch);
    }
    Ok(tree::emit(&top))
}

#[cfg(test)]
mod tests;
