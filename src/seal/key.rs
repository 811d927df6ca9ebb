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
    #[error(
        "{source_name}: {what} is spokekeeper's published demo key (keys/demo/), whose private key is public: anyone could unseal what is sealed to it. Seal to the hub controller's certificate instead (kubeseal --fetch-cert > keys/sealed-secrets-infra.pem)"
    )]
    DemoKey { source_name: String, what: String },
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
    /// From a PEM certificate (as the controller serves it; the first of a chain) or a bare
    /// RSA public key PEM. Refuses the published demo key in any block of the file, and
    /// non-RSA, small and expired keys; `now` decides what expired means. Every sealing key
    /// (seal, rotate, the hub's certificate, the pinned one) is loaded here.
    pub fn from_pem(pem: &[u8], source_name: &str, now: OffsetDateTime) -> Result<Self, KeyError> {
        let blocks = pem::blocks(pem).map_err(|e| KeyError::BadCertificate {
            source_name: source_name.into(),
            reason: e.to_string(),
        })?;
        if let Some(what) = demo_block(&blocks) {
            return Err(KeyError::DemoKey {
                source_name: source_name.into(),
                what,
            });
        }
        let block = blocks.into_iter().next().ok_or_else(|| KeyError::NoPem {
            source_name: source_name.into(),
        })?;
        let der = block.der.expose();
        let bad = |e: &dyn fmt::Display| bad_public(source_name, e);
        match block.label.as_str() {
            "CERTIFICATE" => Self::from_cert_der(der, source_name, now),
            "PUBLIC KEY" => {
                let public = rsa::PublicKey::from_public_key_der(der).map_err(|e| bad(&e))?;
                Self::checked(public, Fingerprint::of(der), None, source_name)
            }
            "RSA PUBLIC KEY" => {
                let public = rsa::PublicKey::from_pkcs1_der(der).map_err(|e| bad(&e))?;
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
        let public = rsa::PublicKey::from_public_key_der(spki.raw)
            .map_err(|e| bad_public(source_name, &e))?;
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
    /// public: nothing real may be sealed to it. [`SealingKey::from_pem`] already refuses it.
    pub fn is_demo(&self) -> bool {
        is_demo_modulus(&self.public)
    }
}

fn bad_public(source_name: &str, e: &dyn fmt::Display) -> KeyError {
    KeyError::BadPublicKey {
        source_name: source_name.into(),
        reason: e.to_string(),
    }
}

/// Compares the RSA modulus, so the demo key given as a bare public key, re-wrapped in
/// another certificate or with another exponent counts; the production build holds only
/// this fingerprint, not the key.
fn is_demo_modulus(public: &rsa::PublicKey) -> bool {
    let n = public.n().to_be_bytes();
    let first = n.iter().position(|b| *b != 0).unwrap_or(n.len());
    Fingerprint::<RsaModulus>::of(&n[first..]).hex() == DEMO_MODULUS_SHA256
}

/// Which block of a PEM file holds the demo key, said for the error: every certificate of
/// a chain and every public key, in each encoding `from_pem` reads. Blocks that do not
/// parse are not the demo key (the first one's own error is reported as usual).
fn demo_block(blocks: &[pem::Block]) -> Option<String> {
    let certs = blocks.iter().filter(|b| b.label == "CERTIFICATE").count();
    let mut cert_no = 0;
    for block in blocks {
        let der = block.der.expose();
        let (public, what) = match block.label.as_str() {
            "CERTIFICATE" => {
                cert_no += 1;
                let Ok((_, cert)) = X509Certificate::from_der(der) else {
                    continue;
                };
                let what = if certs == 1 {
                    "the certificate".to_string()
                } else {
                    format!("certificate {cert_no} of the {certs} in the file")
                };
                (
                    rsa::PublicKey::from_public_key_der(cert.public_key().raw).ok(),
                    what,
                )
            }
            "PUBLIC KEY" => (
                rsa::PublicKey::from_public_key_der(der).ok(),
                "the public key".to_string(),
            ),
            "RSA PUBLIC KEY" => (
                rsa::PublicKey::from_pkcs1_der(der).ok(),
                "the RSA public key".to_string(),
            ),
            _ => continue,
        };
        if public.is_some_and(|p| is_demo_modulus(&p)) {
            return Some(what);
        }
    }
    None
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

    fn now() -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    fn vectors_cert() -> String {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/sealed-secrets/key/cert.pem"
        ))
        .unwrap()
    }

    fn demo_private() -> rsa::PrivateKey {
        RecoveryKey::load_all(DEMO_KEY_PEM.as_bytes(), "demo key").unwrap()[0]
            .private_key()
            .clone()
    }

    /// A new self-signed certificate for the demo key pair: another fingerprint, same key.
    fn reissued_demo_cert() -> String {
        use rsa::pkcs8::EncodePrivateKey;
        let der = demo_private().to_pkcs8_der().unwrap();
        let kp = rcgen::KeyPair::try_from(der.as_bytes()).unwrap();
        let params = rcgen::CertificateParams::new(vec!["not-the-demo".into()]).unwrap();
        params.self_signed(&kp).unwrap().pem()
    }

    /// Refused as the demo key, naming the file, what in it, and the fix.
    fn assert_demo_refused(pem: &str, what: &str) {
        let e = SealingKey::from_pem(pem.as_bytes(), "some/cert.pem", now()).unwrap_err();
        assert!(matches!(e, KeyError::DemoKey { .. }), "{e:?}");
        let msg = e.to_string();
        for needle in [
            "some/cert.pem",
            what,
            "published demo key",
            "kubeseal --fetch-cert",
        ] {
            assert!(msg.contains(needle), "{needle:?} not in: {msg}");
        }
    }

    /// The fingerprint `seal` refuses is the demo certificate's, and the lab's private key
    /// is its other half (what is sealed to the one opens with the other).
    #[test]
    fn the_refused_demo_fingerprint_is_the_demo_key_pairs() {
        let public = demo_private().to_public_key();
        assert!(is_demo_modulus(&public));
        let demo = SealingKey::checked(public, Fingerprint::of(b"demo"), None, "demo").unwrap();
        assert!(demo.is_demo());
        let keys = RecoveryKey::load_all(DEMO_KEY_PEM.as_bytes(), "demo key").unwrap();
        let sealed = hybrid_encrypt(&demo, b"label", b"plaintext").unwrap();
        let opened = hybrid_decrypt(&keys, b"label", &sealed).unwrap();
        assert_eq!(opened.expose(), b"plaintext");
    }

    #[test]
    fn the_demo_key_is_refused_as_certificate_reissued_in_a_chain_or_bare() {
        use rsa::pkcs1::EncodeRsaPublicKey;
        use rsa::pkcs8::EncodePublicKey;
        assert_demo_refused(DEMO_CERT_PEM, "the certificate");
        assert_demo_refused(&reissued_demo_cert(), "the certificate");
        // Second in a chain whose first certificate is a usable key.
        let chain = format!("{}{}", vectors_cert(), reissued_demo_cert());
        assert_demo_refused(&chain, "certificate 2 of the 2");
        let public = demo_private().to_public_key();
        let spki = public
            .to_public_key_pem(rsa::pkcs8::LineEnding::LF)
            .unwrap();
        assert_demo_refused(&spki, "the public key");
        let pkcs1 = public.to_pkcs1_pem(rsa::pkcs8::LineEnding::LF).unwrap();
        assert_demo_refused(&pkcs1, "the RSA public key");
        // After a usable certificate, as a bare key: still in the file, still refused.
        assert_demo_refused(&format!("{}{spki}", vectors_cert()), "the public key");
    }

    /// Only the demo key: the vectors' certificate, alone or with another after it, loads.
    #[test]
    fn another_key_alone_or_in_a_chain_is_not_taken_for_the_demo_key() {
        let alone = SealingKey::from_pem(vectors_cert().as_bytes(), "cert.pem", now()).unwrap();
        assert!(!alone.is_demo());
        let chain = format!("{}{}", vectors_cert(), vectors_cert());
        let first = SealingKey::from_pem(chain.as_bytes(), "chain.pem", now()).unwrap();
        assert_eq!(first.fingerprint(), alone.fingerprint());
    }
}
