//! Client private keys: parse from PEM, derive the public key, re-encode.

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};

use super::{CertError, pem};
use crate::secret::SecretBytes;

/// The encoding a key came in; kept so the sanitized kubeconfig says the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// `RSA PRIVATE KEY`
    Pkcs1,
    /// `EC PRIVATE KEY`
    Sec1,
    /// `PRIVATE KEY`
    Pkcs8,
}

impl KeyKind {
    pub fn pem_label(self) -> &'static str {
        match self {
            KeyKind::Pkcs1 => "RSA PRIVATE KEY",
            KeyKind::Sec1 => "EC PRIVATE KEY",
            KeyKind::Pkcs8 => "PRIVATE KEY",
        }
    }
}

/// A private key; the DER is zeroized on drop and never printed.
#[derive(Clone)]
pub struct PrivateKey {
    kind: KeyKind,
    der: SecretBytes,
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrivateKey({:?}, <redacted>)", self.kind)
    }
}

impl PrivateKey {
    /// The one private key in `pem_data`. Other blocks (`EC PARAMETERS`, certificates)
    /// are skipped, as Go does; two keys, or an encrypted key, are errors.
    pub fn from_pem(pem_data: &[u8]) -> Result<Self, CertError> {
        let mut found: Option<PrivateKey> = None;
        for block in pem::blocks(pem_data)? {
            let kind = match block.label.as_str() {
                "RSA PRIVATE KEY" => KeyKind::Pkcs1,
                "EC PRIVATE KEY" => KeyKind::Sec1,
                "PRIVATE KEY" => KeyKind::Pkcs8,
                "ENCRYPTED PRIVATE KEY" => {
                    return Err(CertError::Key(
                        "it is encrypted; a kubeconfig needs an unencrypted key".into(),
                    ));
                }
                _ => continue,
            };
            if found.is_some() {
                return Err(CertError::Key(
                    "more than one private key; expected exactly one".into(),
                ));
            }
            found = Some(PrivateKey {
                kind,
                der: block.der,
            });
        }
        let key = found.ok_or_else(|| {
            CertError::Key("no PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY block found".into())
        })?;
        // Parse now, so a key that cannot be used is refused here and not later.
        key.spki_der()?;
        Ok(key)
    }

    /// A PKCS#8 key held in memory (a minted credential's), checked as [`Self::from_pem`] does.
    pub(crate) fn from_pkcs8_der(der: SecretBytes) -> Result<Self, CertError> {
        let key = PrivateKey {
            kind: KeyKind::Pkcs8,
            der,
        };
        key.spki_der()?;
        Ok(key)
    }

    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// The public key, as a SubjectPublicKeyInfo DER (comparable with a certificate's).
    pub fn spki_der(&self) -> Result<Vec<u8>, CertError> {
        let bytes = self.der.expose();
        let der = match self.kind {
            KeyKind::Pkcs1 => PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(bytes)),
            KeyKind::Sec1 => PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(bytes)),
            KeyKind::Pkcs8 => PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(bytes)),
        };
        let signing = rustls::crypto::ring::sign::any_supported_type(&der).map_err(|_| {
            CertError::Key(
                "not a usable RSA (2048 to 8192 bits), ECDSA P-256/P-384 or Ed25519 key".into(),
            )
        })?;
        let spki = signing
            .public_key()
            .ok_or_else(|| CertError::Key("its public key cannot be derived".into()))?;
        Ok(spki.as_ref().to_vec())
    }

    /// The key as one PEM block with its original label.
    pub fn to_pem(&self) -> SecretBytes {
        pem::encode_block(self.kind.pem_label(), self.der.expose())
    }
}
