//! Sealing keys (the controller's public certificate) and recovery keys (its private key).

use std::fmt;

use rsa::pkcs1::{DecodeRsaPrivateKey, DecodeRsaPublicKey};
use rsa::pkcs8::{DecodePrivateKey, DecodePublicKey};
use rsa::traits::PublicKeyParts;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::certs::pem;
use crate::fingerprint::{Fingerprint, PublicKey, RsaModulus, Sealing};
use zeroize::Zeroizing;

/// Smaller keys are refused: the controller has generated 4096-bit keys since v0.12.
pub(crate) const MIN_RSA_BITS: usize = 2048;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(
        "{source_name}: no PEM block found: pass the controller's certificate (kubeseal --fetch-cert, or /v1/cert.pem)"
    )]
    NoPem { source_name: String },
    #[error(
        "{source_name}: this is a private key; pass the controller's certificate instead (kubeseal --fetch-cert)"
    )]
    PrivateKeyGiven { source_name: String },
    #[error("{source_name}: PEM block {label:?} is not a certificate or RSA public key")]
    UnexpectedPem { source_name: String, label: String },
    #[error("{source_name}: the certificate does not parse: {reason}")]
    BadCertificate { source_name: String, reason: String },
    #[error("{source_name}: the key is {algorithm}, not RSA: Sealed Secrets only uses RSA keys")]
    NotRsa {
        source_name: String,
        algorithm: String,
    },
    #[error("{source_name}: the RSA key is {bits} bits; at least {MIN_RSA_BITS} are required")]
    TooSmall { source_name: String, bits: usize },
    #[error("{source_name}: the RSA public key does not parse: {reason}")]
    BadPublicKey { source_name: String, reason: String },
    #[error(
        "{source_name}: the certificate expired on {}: fetch the controller's current certificate",
        rfc3339(.not_after)
    )]
    Expired {
        source_name: String,
        not_after: OffsetDateTime,
    },
    #[error(
        "{source_name}: no RSA private key found: pass a PEM (RSA PRIVATE KEY or PRIVATE KEY) or the controller's key Secret (kubectl -n kube-system get secret -l sealedsecrets.bitnami.com/sealed-secrets-key -o yaml)"
    )]
    NoPrivateKey { source_name: String },
    #[error("{source_name}: the private key does not parse: {reason}")]
    BadPrivateKey { source_name: String, reason: String },
}

/// The public half: what sealing encrypts to. Cheap to clone.
#[derive(Clone)]
pub struct SealingKey {
    public: rsa::PublicKey,
    fingerprint: Fingerprint<Sealing>,
    not_after: Option<OffsetDateTime>,
}

impl SealingKey {
    /// From a PEM certificate (as the controller serves it) or a bare RSA public key PEM.
    /// Refuses non-RSA, small and expired keys; `now` decides what expired means.
    pub fn from_pem(pem: &[u8], source_name: &str, now: OffsetDateTime) -> Result<Self, KeyError> {
        let blocks = pem::blocks(pem).map_err(|e| KeyError::BadCertificate {
            source_name: source_name.into(),
            reason: e.to_string(),
        })?;
        let block = blocks.into_iter().next().ok_or_else(|| KeyError::NoPem {
            source_name: source_name.into(),
        })?;
        let der = block.der.expose();
        match block.label.as_str() {
            "CERTIFICATE" => Self::from_cert_der(der, source_name, now),
            "PUBLIC KEY" => {
                let public = rsa::PublicKey::from_public_key_der(der).map_err(|e| {
                    KeyError::BadPublicKey {
                        source_name: source_name.into(),
                        reason: e.to_string(),
                    }
                })?;
                Self::checked(public, Fingerprint::of(der), None, source_name)
            }
            "RSA PUBLIC KEY" => {
                let public =
                    rsa::PublicKey::from_pkcs1_der(der).map_err(|e| KeyError::BadPublicKey {
                        source_name: source_name.into(),
                        reason: e.to_string(),
                    })?;
                Self::checked(public, Fingerprint::of(der), None, source_name)
            }
            label if label.contains("PRIVATE KEY") => Err(KeyError::PrivateKeyGiven {
                source_name: source_name.into(),
            }),
            label => Err(KeyError::UnexpectedPem {
                source_name: source_name.into(),
                label: label.into(),
            }),
        }
    }

    fn from_cert_der(der: &[u8], source_name: &str, now: OffsetDateTime) -> Result<Self, KeyError> {
        let bad = |reason: String| KeyError::BadCertificate {
            source_name: source_name.into(),
            reason,
        };
        let (_, cert) = X509Certificate::from_der(der).map_err(|e| bad(e.to_string()))?;
        let spki = cert.public_key();
        let oid = spki.algorithm.algorithm.to_id_string();
        if oid != RSA_ENCRYPTION_OID {
            return Err(KeyError::NotRsa {
                source_name: source_name.into(),
                algorithm: algorithm_name(&oid),
            });
        }
        let not_after = OffsetDateTime::from_unix_timestamp(cert.validity().not_after.timestamp())
            .map_err(|e| bad(e.to_string()))?;
        if not_after < now {
            return Err(KeyError::Expired {
                source_name: source_name.into(),
                not_after,
            });
        }
        let public =
            rsa::PublicKey::from_public_key_der(spki.raw).map_err(|e| KeyError::BadPublicKey {
                source_name: source_name.into(),
                reason: e.to_string(),
            })?;
        Self::checked(public, Fingerprint::of(der), Some(not_after), source_name)
    }

    fn checked(
        public: rsa::PublicKey,
        fingerprint: Fingerprint<Sealing>,
        not_after: Option<OffsetDateTime>,
        source_name: &str,
    ) -> Result<Self, KeyError> {
        let bits = public.size() * 8;
        if bits < MIN_RSA_BITS {
            return Err(KeyError::TooSmall {
                source_name: source_name.into(),
                bits,
            });
        }
        Ok(Self {
            public,
            fingerprint,
            not_after,
        })
    }

    pub fn public_key(&self) -> &rsa::PublicKey {
        &self.public
    }

    /// Of the certificate DER (or of the public key DER when no certificate).
    pub fn fingerprint(&self) -> Fingerprint<Sealing> {
        self.fingerprint
    }

    pub fn not_after(&self) -> Option<OffsetDateTime> {
        self.not_after
    }

    pub fn bits(&self) -> usize {
        self.public.size() * 8
    }

    /// True for the demo key (the lab's, `spokekeeper_lab::DEMO_CERT_PEM`), whose private half is
    /// public: nothing real may be sealed to it. Compares the RSA modulus, so the demo key
    /// given as a bare public key, re-wrapped in another certificate or with another
    /// exponent counts; the production build holds only this fingerprint, not the key.
    pub fn is_demo(&self) -> bool {
        let n = self.public.n().to_be_bytes();
        let first = n.iter().position(|b| *b != 0).unwrap_or(n.len());
        Fingerprint::<RsaModulus>::of(&n[first..]).hex() == DEMO_MODULUS_SHA256
    }
}

/// SHA-256 of the demo key's RSA modulus (big-endian, no leading zeros):
/// `openssl x509 -in keys/demo/tls.crt -noout -modulus | cut -d= -f2 | xxd -r -p | sha256sum`.
pub(crate) const DEMO_MODULUS_SHA256: &str =
    "f5249cc37059b63e32ff572159593c581fd2c348aa713fd5404639b18dde31a3";

/// A date as the errors show it.
fn rfc3339(t: &OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

impl fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealingKey")
            .field("fingerprint", &self.fingerprint)
            .field("bits", &self.bits())
            .field("not_after", &self.not_after)
            .finish()
    }
}

/// A private key, for recovery and tests only. Never used on the daemon path.
pub struct RecoveryKey {
    private: rsa::PrivateKey,
    name: String,
}

impl RecoveryKey {
    /// Every RSA private key in `bytes`: PEM (PKCS#1 or PKCS#8, several blocks allowed)
    /// or the controller's key Secret (YAML or JSON; a `List` of them too).
    pub fn load_all(bytes: &[u8], source_name: &str) -> Result<Vec<RecoveryKey>, KeyError> {
        if pem::looks_like_pem(bytes) {
            return Self::from_pem(bytes, source_name);
        }
        let text = Zeroizing::new(String::from_utf8_lossy(bytes).into_owned());
        Self::from_key_secrets(&text, source_name)
    }

    fn from_pem(pem_data: &[u8], source_name: &str) -> Result<Vec<RecoveryKey>, KeyError> {
        let bad = |e: &dyn fmt::Display| KeyError::BadPrivateKey {
            source_name: source_name.into(),
            reason: e.to_string(),
        };
        let mut keys = Vec::new();
        for block in pem::blocks(pem_data).map_err(|e| bad(&e))? {
            let der = block.der.expose();
            let private = match block.label.as_str() {
                "RSA PRIVATE KEY" => rsa::PrivateKey::from_pkcs1_der(der).map_err(|e| bad(&e))?,
                "PRIVATE KEY" => rsa::PrivateKey::from_pkcs8_der(der).map_err(|e| bad(&e))?,
                _ => continue,
            };
            let name = if keys.is_empty() {
                source_name.to_string()
            } else {
                format!("{source_name}#{}", keys.len() + 1)
            };
            keys.push(RecoveryKey { private, name });
        }
        if keys.is_empty() {
            return Err(KeyError::NoPrivateKey {
                source_name: source_name.into(),
            });
        }
        Ok(keys)
    }

    fn from_key_secrets(text: &str, source_name: &str) -> Result<Vec<RecoveryKey>, KeyError> {
        use base64::Engine;
        #[derive(serde::Deserialize)]
        struct Doc {
            #[serde(default)]
            kind: String,
            #[serde(default)]
            data: std::collections::BTreeMap<String, Zeroizing<String>>,
            #[serde(default)]
            items: Vec<Doc>,
        }
        let none = || KeyError::NoPrivateKey {
            source_name: source_name.into(),
        };
        let doc: Doc = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|_| none())?
        } else {
            serde_saphyr::from_str(text).map_err(|_| none())?
        };
        let docs = if doc.kind == "List" {
            doc.items
        } else {
            vec![doc]
        };
        let mut keys = Vec::new();
        for (i, d) in docs.iter().enumerate() {
            let Some(b64) = d.data.get("tls.key") else {
                continue;
            };
            let pem = base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map(Zeroizing::new)
                .map_err(|e| KeyError::BadPrivateKey {
                    source_name: source_name.into(),
                    reason: format!("data.tls.key is not base64: {e}"),
                })?;
            let name = format!("{source_name}[{i}]");
            keys.extend(Self::from_pem(&pem, &name)?);
        }
        if keys.is_empty() {
            return Err(none());
        }
        Ok(keys)
    }

    pub fn private_key(&self) -> &rsa::PrivateKey {
        &self.private
    }

    /// Where the key came from (file, and index when it held several): for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Of the public key's SPKI DER; None if it cannot be encoded.
    pub fn public_fingerprint(&self) -> Option<Fingerprint<PublicKey>> {
        use rsa::pkcs8::EncodePublicKey;
        let der = self.private.to_public_key().to_public_key_der().ok()?;
        Some(Fingerprint::of(der.as_bytes()))
    }
}

impl fmt::Debug for RecoveryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecoveryKey")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

const RSA_ENCRYPTION_OID: &str = "1.2.840.113549.1.1.1";

fn algorithm_name(oid: &str) -> String {
    match oid {
        "1.2.840.10045.2.1" => "ECDSA".into(),
        "1.3.101.112" => "Ed25519".into(),
        "1.3.101.113" => "Ed448".into(),
        "1.2.840.10040.4.1" => "DSA".into(),
        other => format!("algorithm {other}"),
    }
}

#[cfg(test)]
mod tests {
    use spokekeeper_lab::{DEMO_CERT_PEM, DEMO_KEY_PEM};

    use super::*;
    use crate::seal::{hybrid_decrypt, hybrid_encrypt};

    /// The fingerprint `seal` refuses is the demo certificate's, and the lab's private key
    /// is its other half (what is sealed to the one opens with the other).
    #[test]
    fn the_refused_demo_fingerprint_is_the_demo_key_pairs() {
        let now = OffsetDateTime::now_utc();
        let demo = SealingKey::from_pem(DEMO_CERT_PEM.as_bytes(), "demo", now).unwrap();
        assert!(demo.is_demo());
        let keys = RecoveryKey::load_all(DEMO_KEY_PEM.as_bytes(), "demo key").unwrap();
        let sealed = hybrid_encrypt(&demo, b"label", b"plaintext").unwrap();
        let opened = hybrid_decrypt(&keys, b"label", &sealed).unwrap();
        assert_eq!(opened.expose(), b"plaintext");
    }
}
