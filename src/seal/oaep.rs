//! RSAES-OAEP encryption (RFC 8017 §7.1.1) with SHA-256 and MGF1-SHA-256, as Go's
//! `rsa.EncryptOAEP(sha256.New(), ...)` that upstream's HybridEncrypt calls.
//!
//! Why not `rsa::oaep::EncryptingKey`: rsa 0.10 raises to the public exponent with
//! crypto-bigint's fixed-window `pow_bounded_exp`, built for secret exponents: a 16-entry
//! table and a constant-time scan of it per window, about 2.3x the multiplications that
//! e = 65537 needs (16 squarings and one multiply). The exponent is public, so here it
//! is walked bit by bit (variable time in `e` only); the base, the padded session key, is
//! secret and only ever goes through crypto-bigint's constant-time Montgomery multiply.
//! The Montgomery parameters are the ones the `rsa::PublicKey` computed once at parse.

use crypto_bigint::modular::BoxedMontyForm;
use rsa::BoxedUint;
use rsa::traits::PublicKeyParts;
use sha2::{Digest, Sha256};
use zeroize::{Zeroize, Zeroizing};

const H_LEN: usize = 32;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OaepError {
    #[error("the message is {len} bytes; at most {max} fit this key")]
    MessageTooLong { len: usize, max: usize },
    #[error("the system random number generator failed: {0}")]
    Random(String),
}

/// Encrypts `msg` to `key` under `label` with a fresh random seed.
pub(super) fn encrypt(
    key: &rsa::PublicKey,
    label: &[u8],
    msg: &[u8],
) -> Result<Vec<u8>, OaepError> {
    let mut seed = Zeroizing::new([0u8; H_LEN]);
    getrandom::fill(seed.as_mut()).map_err(|e| OaepError::Random(e.to_string()))?;
    encrypt_with_seed(key, label, msg, &seed)
}

/// EME-OAEP encoding with the given seed, then RSAEP. Split out so tests can pin the seed.
fn encrypt_with_seed(
    key: &rsa::PublicKey,
    label: &[u8],
    msg: &[u8],
    seed: &[u8; H_LEN],
) -> Result<Vec<u8>, OaepError> {
    let k = key.size();
    let max = k.saturating_sub(2 * H_LEN + 2);
    if msg.len() > max {
        return Err(OaepError::MessageTooLong {
            len: msg.len(),
            max,
        });
    }
    // EM = 0x00 || maskedSeed || maskedDB, DB = lHash || PS (zeros) || 0x01 || M.
    let mut em = Zeroizing::new(vec![0u8; k]);
    let (seed_part, db) = em[1..].split_at_mut(H_LEN);
    seed_part.copy_from_slice(seed);
    db[..H_LEN].copy_from_slice(&Sha256::digest(label));
    let db_len = db.len();
    db[db_len - msg.len() - 1] = 1;
    db[db_len - msg.len()..].copy_from_slice(msg);
    mgf1_xor(db, seed_part);
    mgf1_xor(seed_part, db);

    let params = key.n_params();
    let m = BoxedUint::from_be_slice(&em, params.bits_precision())
        .expect("k bytes fit the modulus precision");
    // m < 2^(8(k-1)) <= n: the leading zero byte keeps it below the modulus.
    let c = pow_public(BoxedMontyForm::new(m, params), key.e()).retrieve();
    let bytes = c.to_be_bytes();
    Ok(bytes[bytes.len() - k..].to_vec())
}

/// `base^e`, square-and-multiply from the top bit of the public exponent `e`. Every
/// intermediate power of the secret base is zeroized once replaced.
fn pow_public(mut base: BoxedMontyForm, e: &BoxedUint) -> BoxedMontyForm {
    let bits = e.bit_width_vartime();
    let mut acc = base.clone();
    for i in (0..bits.saturating_sub(1)).rev() {
        let mut next = acc.square();
        acc.zeroize();
        if e.bit_vartime(i) {
            acc = next.mul(&base);
            next.zeroize();
        } else {
            acc = next;
        }
    }
    base.zeroize();
    acc
}

/// `out ^= MGF1-SHA-256(seed, out.len())`.
fn mgf1_xor(out: &mut [u8], seed: &[u8]) {
    for (counter, chunk) in (0u32..).zip(out.chunks_mut(H_LEN)) {
        let mut block = Sha256::new()
            .chain_update(seed)
            .chain_update(counter.to_be_bytes())
            .finalize();
        for (o, m) in chunk.iter_mut().zip(block.iter()) {
            *o ^= m;
        }
        block.as_mut_slice().zeroize();
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use rsa::oaep::{DecryptingKey, EncryptingKey};
    use rsa::rand_core::{TryCryptoRng, TryRng};
    use rsa::traits::{RandomizedDecryptor, RandomizedEncryptor};

    use super::*;
    use crate::seal::RecoveryKey;

    /// Hands out the given bytes: the rsa crate then draws the same OAEP seed as we pin.
    struct Fixed(Vec<u8>);

    impl TryRng for Fixed {
        type Error = Infallible;
        fn try_next_u32(&mut self) -> Result<u32, Infallible> {
            unreachable!("OAEP draws bytes")
        }
        fn try_next_u64(&mut self) -> Result<u64, Infallible> {
            unreachable!("OAEP draws bytes")
        }
        fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
            let rest = self.0.split_off(dst.len());
            dst.copy_from_slice(&self.0);
            self.0 = rest;
            Ok(())
        }
    }
    impl TryCryptoRng for Fixed {}

    /// The upstream vectors' controller key (RSA-4096, e = 65537).
    fn vector_key() -> RecoveryKey {
        let pem = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/sealed-secrets/key/tls.key"
        ))
        .unwrap();
        RecoveryKey::load_all(&pem, "tls.key").unwrap().remove(0)
    }

    fn rsa_crate_encrypt(
        key: &rsa::PublicKey,
        label: &[u8],
        msg: &[u8],
        seed: [u8; 32],
    ) -> Vec<u8> {
        EncryptingKey::<Sha256>::new_with_label(key.clone(), label.to_vec())
            .encrypt_with_rng(&mut Fixed(seed.to_vec()), msg)
            .unwrap()
    }

    #[test]
    fn same_ciphertext_as_the_rsa_crate_for_the_same_seed() {
        let public = vector_key().private_key().to_public_key();
        for (i, (label, msg)) in [
            (&b"flux-system/dev-kubeconfig"[..], &[7u8; 32][..]),
            (b"", b""),
            (b"ns", &[0xff; 100]),
        ]
        .into_iter()
        .enumerate()
        {
            let seed = [i as u8 * 31 + 1; 32];
            assert_eq!(
                encrypt_with_seed(&public, label, msg, &seed).unwrap(),
                rsa_crate_encrypt(&public, label, msg, seed),
                "case {i}"
            );
        }
    }

    /// The bit walk, for exponents other than 65537 (rsa allows 2 < e < 2^33): the modulus
    /// of the vector key with each exponent, the rsa crate's result as the reference.
    #[test]
    fn any_public_exponent_gives_the_rsa_crates_result() {
        let n = vector_key()
            .private_key()
            .to_public_key()
            .n()
            .as_ref()
            .clone();
        for e in [3u64, 5, 17, 0b1010_1010_1011, 65537, (1 << 33) - 1] {
            let key = rsa::PublicKey::new(n.clone(), BoxedUint::from(e)).unwrap();
            let seed = [e as u8; 32];
            assert_eq!(
                encrypt_with_seed(&key, b"label", b"session key", &seed).unwrap(),
                rsa_crate_encrypt(&key, b"label", b"session key", seed),
                "e = {e}"
            );
        }
    }

    #[test]
    fn the_private_key_opens_it_and_only_under_the_label() {
        let key = vector_key();
        let public = key.private_key().to_public_key();
        let ct = encrypt(&public, b"flux-system/x", &[42; 32]).unwrap();
        assert_eq!(ct.len(), public.size());
        let open = |label: &[u8]| {
            DecryptingKey::<Sha256>::new_with_label(key.private_key().clone(), label.to_vec())
                .decrypt_with_rng(&mut getrandom::SysRng, &ct)
        };
        assert_eq!(open(b"flux-system/x").unwrap(), vec![42; 32]);
        assert!(open(b"flux-system/y").is_err());
    }

    #[test]
    fn a_message_over_the_limit_is_refused() {
        let public = vector_key().private_key().to_public_key();
        let max = public.size() - 66;
        assert!(encrypt(&public, b"", &vec![1; max]).is_ok());
        assert_eq!(
            encrypt(&public, b"", &vec![1; max + 1]),
            Err(OaepError::MessageTooLong { len: max + 1, max })
        );
    }
}
