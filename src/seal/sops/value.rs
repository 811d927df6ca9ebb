//! One sops value: `ENC[AES256_GCM,data:...,iv:...,tag:...,type:...]`, AES-256-GCM with
//! a 32-byte random IV and the value's key path (`data:kubeconfig:`) as additional data,
//! as sops' aes/cipher.go writes it. An empty string stays empty, unencrypted, as in sops.

use aes_gcm::aead::consts::U32;
use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::aes::Aes256;
use aes_gcm::{AesGcm, Nonce, Tag};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use zeroize::Zeroizing;

use super::error::{SopsError, ValueFault};
use super::tree::{Node, python_bool};

/// AES-256-GCM with sops' 32-byte nonce.
type Cipher = AesGcm<Aes256, U32>;

const PREFIX: &str = "ENC[AES256_GCM,data:";
const IV_LEN: usize = 32;
const TAG_LEN: usize = 16;

/// Whether `s` has the shape of an encrypted sops value (nothing is decrypted).
pub(crate) fn is_encrypted(s: &str) -> bool {
    parse(s).is_ok()
}

/// Encrypts a leaf; `ad` is the key path joined as sops joins it.
pub(super) fn encrypt(leaf: &Node, key: &[u8; 32], ad: &str) -> Result<String, SopsError> {
    let (kind, plain): (&str, Zeroizing<Vec<u8>>) = match leaf {
        Node::Str(s) if s.is_empty() => return Ok(String::new()),
        Node::Str(s) => ("str", Zeroizing::new(s.as_bytes().to_vec())),
        Node::Int(i) => ("int", Zeroizing::new(i.to_string().into_bytes())),
        Node::Float(f) => ("float", Zeroizing::new(f.to_string().into_bytes())),
        Node::Bool(b) => ("bool", Zeroizing::new(python_bool(*b).as_bytes().to_vec())),
        Node::Null | Node::Seq(_) | Node::Map(_) => {
            unreachable!("the walk hands only scalar leaves to encrypt")
        }
    };
    let mut iv = [0u8; IV_LEN];
    getrandom::fill(&mut iv).map_err(|e| SopsError::Random(e.to_string()))?;
    let cipher = Cipher::new_from_slice(key).map_err(|_| SopsError::Aes)?;
    let mut buf = plain.clone();
    let tag = cipher
        .encrypt_inout_detached(
            &Nonce::<U32>::from(iv),
            ad.as_bytes(),
            buf.as_mut_slice().into(),
        )
        .map_err(|_| SopsError::Aes)?;
    Ok(format!(
        "{PREFIX}{},iv:{},tag:{},type:{kind}]",
        B64.encode(&buf),
        B64.encode(iv),
        B64.encode(tag)
    ))
}

/// Decrypts a value sops wrote at `path` (for errors) with additional data `ad`.
pub(super) fn decrypt(s: &str, key: &[u8; 32], path: &str, ad: &str) -> Result<Node, SopsError> {
    if s.is_empty() {
        return Ok(Node::Str(Zeroizing::new(String::new())));
    }
    let bad = |fault| SopsError::BadValue {
        path: path.to_string(),
        fault,
    };
    let parts = parse(s).map_err(bad)?;
    let cipher = Cipher::new_from_slice(key).map_err(|_| SopsError::Aes)?;
    let mut plain = Zeroizing::new(parts.data);
    let tag = Tag::<aes_gcm::aead::consts::U16>::try_from(parts.tag.as_slice())
        .map_err(|_| bad(ValueFault::Tag))?;
    cipher
        .decrypt_inout_detached(
            &Nonce::<U32>::try_from(parts.iv.as_slice()).map_err(|_| bad(ValueFault::Iv))?,
            ad.as_bytes(),
            plain.as_mut_slice().into(),
            &tag,
        )
        .map_err(|_| SopsError::Altered {
            path: path.to_string(),
        })?;
    let text = || {
        std::str::from_utf8(&plain)
            .map(|t| Zeroizing::new(t.to_string()))
            .map_err(|_| bad(ValueFault::NotText))
    };
    match parts.kind {
        "str" | "bytes" => Ok(Node::Str(text()?)),
        "int" => text()?
            .parse()
            .map(Node::Int)
            .map_err(|_| bad(ValueFault::NotTyped("int"))),
        "float" => text()?
            .parse()
            .map(Node::Float)
            .map_err(|_| bad(ValueFault::NotTyped("float"))),
        "bool" => match text()?.as_str() {
            // Go's strconv.ParseBool, which sops reads booleans with.
            "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(Node::Bool(true)),
            "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(Node::Bool(false)),
            _ => Err(bad(ValueFault::NotTyped("bool"))),
        },
        _ => Err(bad(ValueFault::Type)),
    }
}

struct Parts<'a> {
    data: Vec<u8>,
    iv: Vec<u8>,
    tag: Vec<u8>,
    kind: &'a str,
}

/// The four fields, base64-decoded and checked for length; the data is not decrypted.
fn parse(s: &str) -> Result<Parts<'_>, ValueFault> {
    let rest = s.strip_prefix(PREFIX).ok_or(ValueFault::Shape)?;
    let rest = rest.strip_suffix(']').ok_or(ValueFault::Shape)?;
    let (data, rest) = rest.split_once(",iv:").ok_or(ValueFault::Shape)?;
    let (iv, rest) = rest.split_once(",tag:").ok_or(ValueFault::Shape)?;
    let (tag, kind) = rest.split_once(",type:").ok_or(ValueFault::Shape)?;
    let decode = |part: &str, fault| B64.decode(part).map_err(|_| fault);
    let parts = Parts {
        data: decode(data, ValueFault::Data)?,
        iv: decode(iv, ValueFault::Iv)?,
        tag: decode(tag, ValueFault::Tag)?,
        kind,
    };
    if parts.iv.len() != IV_LEN {
        return Err(ValueFault::Iv);
    }
    if parts.tag.len() != TAG_LEN {
        return Err(ValueFault::Tag);
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_binds_the_path() {
        let key = [7u8; 32];
        let leaf = Node::Str(Zeroizing::new("aGVsbG8=".into()));
        let enc = encrypt(&leaf, &key, "data:kubeconfig:").unwrap();
        assert!(is_encrypted(&enc), "{enc}");
        let Node::Str(back) = decrypt(&enc, &key, "data.kubeconfig", "data:kubeconfig:").unwrap()
        else {
            panic!("not a string")
        };
        assert_eq!(back.as_str(), "aGVsbG8=");
        // Moved to another key: the additional data differs, so it does not authenticate.
        let moved = decrypt(&enc, &key, "data.other", "data:other:").unwrap_err();
        assert!(matches!(moved, SopsError::Altered { .. }), "{moved}");
    }

    #[test]
    fn empty_stays_empty_and_shapes_are_checked() {
        let key = [1u8; 32];
        let empty = Node::Str(Zeroizing::new(String::new()));
        assert_eq!(encrypt(&empty, &key, "data:x:").unwrap(), "");
        for s in [
            "aGVsbG8=",
            "ENC[AES256_GCM,data:aGk=,iv:AAAA,tag:AAAAAAAAAAAAAAAAAAAAAA==,type:str]",
            "ENC[AES256_GCM,data:aGk=,type:str]",
        ] {
            assert!(!is_encrypted(s), "{s}");
        }
    }
}
