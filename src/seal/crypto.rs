//! The value format, exactly as upstream `pkg/crypto` HybridEncrypt/HybridDecrypt:
//!
//! `u16 BE len(rsa_ct) || rsa_ct || aes_gcm_ct`, where rsa_ct is RSA-OAEP (SHA-256,
//! MGF1 SHA-256, scope label) of a fresh 32-byte AES-256 key and aes_gcm_ct is
//! AES-256-GCM with a 12-byte zero nonce (safe: every key is used once), no AAD, tag last.

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use rsa::oaep::DecryptingKey;
use rsa::traits::RandomizedDecryptor;
use sha2::Sha256;
use zeroize::Zeroizing;

use super::key::{RecoveryKey, SealingKey};
use super::oaep::OaepError;
use crate::secret::SecretBytes;

const SESSION_KEY_LEN: usize = 32;
const TAG_LEN: usize = 16;
const LEN_PREFIX: usize = 2;

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("the system random number generator failed: {0}")]
    Random(String),
    #[error("RSA-OAEP encryption failed: {0}")]
    Rsa(String),
    #[error("AES-GCM encryption failed")]
    Aes,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnsealError {
    #[error("the value is too short to be a sealed value ({0} bytes)")]
    Truncated(usize),
    #[error(
        "no key decrypted it (tried {tried}): sealed to another key, or for another name/namespace/scope"
    )]
    NoKeyWorked { tried: String },
    #[error("the session key decrypted, but the data did not authenticate: the value was altered")]
    Corrupted,
}

/// Why a value is not in the sealed format for a key. Never carries the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("is not base64")]
    NotBase64,
    #[error(
        "is not a sealed value for this key: {len} bytes, expected a 2-byte length of {rsa_len}, that many bytes of RSA ciphertext and at least a {TAG_LEN}-byte tag"
    )]
    NotSealed { len: usize, rsa_len: usize },
}

/// Checks that `b64` has the shape [`hybrid_encrypt`] gives for a key whose modulus is
/// `modulus_len` bytes: the last guard against committing a value that is not ciphertext.
/// Shape only: nothing is decrypted.
pub(crate) fn check_sealed(b64: &str, modulus_len: usize) -> Result<(), FormatError> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| FormatError::NotBase64)?;
    let prefix = bytes
        .get(..LEN_PREFIX)
        .map(|p| usize::from(u16::from_be_bytes([p[0], p[1]])));
    if prefix == Some(modulus_len) && bytes.len() >= LEN_PREFIX + modulus_len + TAG_LEN {
        Ok(())
    } else {
        Err(FormatError::NotSealed {
            len: bytes.len(),
            rsa_len: modulus_len,
        })
    }
}

/// Encrypts `plaintext` to `key` under `label` (see [`super::Scope::label`]).
pub fn hybrid_encrypt(
    key: &SealingKey,
    label: &[u8],
    plaintext: &[u8],
) -> Result<Vec<u8>, SealError> {
    let mut session_key = Zeroizing::new([0u8; SESSION_KEY_LEN]);
    getrandom::fill(session_key.as_mut()).map_err(|e| SealError::Random(e.to_string()))?;

    let rsa_ct = super::oaep::encrypt(key.public_key(), label, session_key.as_ref()).map_err(
        |e| match e {
            OaepError::Random(why) => SealError::Random(why),
            e @ OaepError::MessageTooLong { .. } => SealError::Rsa(e.to_string()),
        },
    )?;
    let rsa_len = u16::try_from(rsa_ct.len())
        .map_err(|_| SealError::Rsa("RSA ciphertext over 65535 bytes".into()))?;

    // One buffer, encrypted in place: the plaintext is copied only into what becomes ciphertext.
    let mut out = Vec::with_capacity(LEN_PREFIX + rsa_ct.len() + plaintext.len() + TAG_LEN);
    out.extend_from_slice(&rsa_len.to_be_bytes());
    out.extend_from_slice(&rsa_ct);
    let body = out.len();
    out.extend_from_slice(plaintext);
    let cipher = Aes256Gcm::new_from_slice(session_key.as_ref()).map_err(|_| SealError::Aes)?;
    let tag = cipher
        .encrypt_inout_detached(&Nonce::default(), &[], out[body..].as_mut().into())
        .map_err(|_| SealError::Aes)?;
    out.extend_from_slice(&tag);
    Ok(out)
}

/// Decrypts with the first key that works. Recovery and tests only.
pub fn hybrid_decrypt(
    keys: &[RecoveryKey],
    label: &[u8],
    ciphertext: &[u8],
) -> Result<SecretBytes, UnsealError> {
    if ciphertext.len() < LEN_PREFIX {
        return Err(UnsealError::Truncated(ciphertext.len()));
    }
    let rsa_len = usize::from(u16::from_be_bytes([ciphertext[0], ciphertext[1]]));
    if ciphertext.len() < LEN_PREFIX + rsa_len + TAG_LEN {
        return Err(UnsealError::Truncated(ciphertext.len()));
    }
    let (rsa_ct, aes_ct) = ciphertext[LEN_PREFIX..].split_at(rsa_len);
    for key in keys {
        let oaep =
            DecryptingKey::<Sha256>::new_with_label(key.private_key().clone(), label.to_vec());
        let Ok(session_key) = oaep.decrypt_with_rng(&mut getrandom::SysRng, rsa_ct) else {
            continue;
        };
        let session_key = Zeroizing::new(session_key);
        // The label and key matched: from here on a failure means the data was altered.
        let cipher = Aes256Gcm::new_from_slice(&session_key).map_err(|_| UnsealError::Corrupted)?;
        let (body, tag) = aes_ct.split_at(aes_ct.len() - TAG_LEN);
        let mut plain = SecretBytes::with_capacity(body.len());
        plain.try_extend(body);
        let tag = tag.try_into().map_err(|_| UnsealError::Corrupted)?;
        cipher
            .decrypt_inout_detached(&Nonce::default(), &[], plain.expose_mut().into(), tag)
            .map_err(|_| UnsealError::Corrupted)?;
        return Ok(plain);
    }
    Err(UnsealError::NoKeyWorked {
        tried: keys.iter().map(|k| k.name()).collect::<Vec<_>>().join(", "),
    })
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as B64;

    use super::*;

    fn key() -> SealingKey {
        let pem = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/sealed-secrets/key/cert.pem"
        ))
        .unwrap();
        SealingKey::from_pem(&pem, "cert.pem", time::OffsetDateTime::now_utc()).unwrap()
    }

    #[test]
    fn only_the_sealed_shape_for_the_key_passes() {
        let key = key();
        let n = key.bits() / 8;
        for len in [0, 1, 1000] {
            let ct = hybrid_encrypt(&key, b"label", &vec![7; len]).unwrap();
            assert_eq!(check_sealed(&B64.encode(&ct), n), Ok(()), "{len}");
            // The same value is not sealed for a key of another size.
            assert!(check_sealed(&B64.encode(&ct), n / 2).is_err());
            // One byte short of the tag.
            let short = B64.encode(&ct[..LEN_PREFIX + n + TAG_LEN - 1]);
            assert!(matches!(
                check_sealed(&short, n),
                Err(FormatError::NotSealed { .. })
            ));
        }
        assert_eq!(check_sealed("not base64!", n), Err(FormatError::NotBase64));
        assert!(check_sealed("", n).is_err());
    }

    #[test]
    fn a_plaintext_value_is_refused_and_never_shown() {
        let n = key().bits() / 8;
        let plain =
            b"apiVersion: v1\nusers:\n- user:\n    client-key-data: c2VjcmV0a2V5\n".repeat(40);
        let e = check_sealed(&B64.encode(&plain), n).unwrap_err();
        let text = e.to_string();
        assert!(
            !text.contains("client-key") && !text.contains("c2Vj"),
            "{text}"
        );
    }
}
