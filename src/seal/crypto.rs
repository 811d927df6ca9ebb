//! The value format, exactly as upstream `pkg/crypto` HybridEncrypt/HybridDecrypt:
//!
//! `u16 BE len(rsa_ct) || rsa_ct || aes_gcm_ct`, where rsa_ct is RSA-OAEP (SHA-256,
//! MGF1 SHA-256, scope label) of a fresh 32-byte AES-256 key and aes_gcm_ct is
//! AES-256-GCM with a 12-byte zero nonce (safe: every key is used once), no AAD, tag last.

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use rsa::oaep::{DecryptingKey, EncryptingKey};
use rsa::traits::{RandomizedDecryptor, RandomizedEncryptor};
use sha2::Sha256;
use zeroize::Zeroizing;

use super::key::{RecoveryKey, SealingKey};
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

/// Encrypts `plaintext` to `key` under `label` (see [`super::Scope::label`]).
pub fn hybrid_encrypt(
    key: &SealingKey,
    label: &[u8],
    plaintext: &[u8],
) -> Result<Vec<u8>, SealError> {
    let mut session_key = Zeroizing::new([0u8; SESSION_KEY_LEN]);
    getrandom::fill(session_key.as_mut()).map_err(|e| SealError::Random(e.to_string()))?;

    let oaep = EncryptingKey::<Sha256>::new_with_label(key.public_key().clone(), label.to_vec());
    let rsa_ct = oaep
        .encrypt_with_rng(&mut getrandom::SysRng, session_key.as_ref())
        .map_err(|e| SealError::Rsa(e.to_string()))?;
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
