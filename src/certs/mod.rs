//! X.509: fingerprints, validity, chain and key checks.
//!
//! Certificates come from kubeconfigs read off possibly compromised nodes, so every
//! string taken from one (subject, issuer, SANs) is made one bounded line
//! (`text::one_line`) before anyone prints it.

use std::net::IpAddr;

use time::OffsetDateTime;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate, X509Error};

use crate::fingerprint::{Cert, Fingerprint};

mod key;
/// PEM blocks and base64, decoded into zeroized buffers.
pub mod pem;

pub use key::{KeyKind, PrivateKey};
pub use pem::Base64Error;

/// Most CAs a kubeconfig's bundle, and so a recorded one, may hold (a CA rotation has
/// two to four): each is judged against every chain a spoke presents.
pub const MAX_CA_BUNDLE: usize = 16;

/// Why a certificate, a key or their relation was refused. Never carries key bytes.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("PEM: {0}")]
    Pem(String),
    #[error("not base64: {0}")]
    Base64(Base64Error),
    #[error("no CERTIFICATE block found; expected PEM certificates")]
    NoCertificate,
    #[error("found a {0} block where only CERTIFICATE blocks belong")]
    UnexpectedBlock(String),
    #[error("certificate {index} does not parse as X.509 DER: {reason}")]
    Parse { index: usize, reason: String },
    #[error("private key: {0}")]
    Key(String),
    #[error(
        "the private key does not belong to the certificate {cert}; \
         the key and the certificate must come from the same kubeconfig"
    )]
    KeyMismatch { cert: Fingerprint<Cert> },
    #[error("the signature of \"{subject}\" does not verify with the key of \"{issuer}\"")]
    BadSignature { subject: String, issuer: String },
    #[error("\"{subject}\" is signed with SHA-1, which Kubernetes clients reject; reissue it")]
    WeakSignature { subject: String },
    #[error("\"{subject}\" uses a signature algorithm spokekeeper cannot verify")]
    UnsupportedSignature { subject: String },
}

impl From<Base64Error> for CertError {
    fn from(e: Base64Error) -> CertError {
        CertError::Base64(e)
    }
}

/// What spokekeeper records and shows about one certificate. Strings are one bounded
/// line (`text::one_line`).
#[derive(Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub der: Vec<u8>,
    /// Of the DER; `as_kind` gives it in the role the certificate is used in.
    pub fingerprint: Fingerprint<Cert>,
    pub subject: String,
    pub issuer: String,
    /// Hex, colon-separated, as OpenSSL prints it.
    pub serial: String,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub is_ca: bool,
    subject_raw: Vec<u8>,
    issuer_raw: Vec<u8>,
}

impl std::fmt::Debug for CertInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertInfo")
            .field("fingerprint", &self.fingerprint)
            .field("subject", &self.subject)
            .field("issuer", &self.issuer)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// Where a certificate stands at a given moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    NotYetValid,
    Valid,
    Expired,
}

impl CertInfo {
    /// Parses one DER certificate; trailing bytes are an error.
    pub fn from_der(der: &[u8]) -> Result<Self, CertError> {
        Self::from_der_at(der, 0)
    }

    fn from_der_at(der: &[u8], index: usize) -> Result<Self, CertError> {
        let cert = parse_exact(der, index)?;
        let parse_err = |e: X509Error| CertError::Parse {
            index,
            reason: e.to_string(),
        };
        let mut dns_names = Vec::new();
        let mut ip_addresses = Vec::new();
        if let Some(san) = cert.subject_alternative_name().map_err(parse_err)? {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(dns) => dns_names.push(crate::text::one_line(dns, 256)),
                    GeneralName::IPAddress(bytes) => {
                        if let Some(ip) = ip_from_bytes(bytes) {
                            ip_addresses.push(ip);
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(Self {
            der: der.to_vec(),
            fingerprint: fingerprint(der),
            subject: crate::text::one_line(&cert.subject().to_string(), 256),
            issuer: crate::text::one_line(&cert.issuer().to_string(), 256),
            serial: cert.raw_serial_as_string(),
            not_before: cert.validity().not_before.to_datetime(),
            not_after: cert.validity().not_after.to_datetime(),
            dns_names,
            ip_addresses,
            is_ca: cert.is_ca(),
            subject_raw: cert.subject().as_raw().to_vec(),
            issuer_raw: cert.issuer().as_raw().to_vec(),
        })
    }

    pub fn validity_at(&self, now: OffsetDateTime) -> Validity {
        if now < self.not_before {
            Validity::NotYetValid
        } else if now > self.not_after {
            Validity::Expired
        } else {
            Validity::Valid
        }
    }

    /// Whole days until notAfter, rounded down: negative once expired.
    pub fn days_left(&self, now: OffsetDateTime) -> i64 {
        days_until(self.not_after, now)
    }

    /// True when this certificate names `issuer` as its issuer (a name match only: use
    /// [`verify_signed_by`] to decide anything).
    pub(crate) fn names_as_issuer(&self, issuer: &CertInfo) -> bool {
        self.issuer_raw == issuer.subject_raw
    }

    /// True when both certificates name the same issuer (a name match only).
    pub(crate) fn same_issuer(&self, other: &CertInfo) -> bool {
        self.issuer_raw == other.issuer_raw
    }
}

/// Whole days from `now` until `when`, rounded down (toward the past).
pub(crate) fn days_until(when: OffsetDateTime, now: OffsetDateTime) -> i64 {
    (when - now).whole_seconds().div_euclid(86_400)
}

/// The fingerprint of a certificate's DER, in no particular role.
pub fn fingerprint(der: &[u8]) -> Fingerprint<Cert> {
    Fingerprint::of(der)
}

/// The certificates in `data`: PEM, base64 of PEM (a kubeconfig `*-data` field) or DER.
/// Anything but CERTIFICATE blocks is an error, so a key never hides in CA data.
pub fn parse_certificates(data: &[u8]) -> Result<Vec<CertInfo>, CertError> {
    certificates_der(data)?
        .iter()
        .enumerate()
        .map(|(index, der)| CertInfo::from_der_at(der, index))
        .collect()
}

/// The certificates in PEM text (CERTIFICATE blocks only).
pub fn parse_pem_certificates(pem_data: &[u8]) -> Result<Vec<CertInfo>, CertError> {
    if !pem::looks_like_pem(pem_data) {
        return Err(CertError::Pem(
            "expected PEM (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    parse_certificates(pem_data)
}

/// The DER of every certificate in `data` (PEM, base64 of PEM, or DER), in order.
pub fn certificates_der(data: &[u8]) -> Result<Vec<Vec<u8>>, CertError> {
    if !pem::looks_like_pem(data) {
        // DER: a SEQUENCE with a long-form length; base64 text is ASCII, never 0x80+.
        if data.len() > 1 && data[0] == 0x30 && data[1] >= 0x80 {
            return Ok(vec![data.to_vec()]);
        }
        let decoded = pem::decode_base64(data)?;
        if !pem::looks_like_pem(decoded.expose()) {
            return Err(CertError::Pem(
                "the base64 data does not decode to PEM; expected base64 of PEM certificates"
                    .into(),
            ));
        }
        return certificates_der(decoded.expose());
    }
    let blocks = pem::blocks(data)?;
    if blocks.is_empty() {
        return Err(CertError::NoCertificate);
    }
    blocks
        .into_iter()
        .map(|b| match b.label.as_str() {
            "CERTIFICATE" => Ok(b.der.expose().to_vec()),
            _ => Err(CertError::UnexpectedBlock(b.label)),
        })
        .collect()
}

/// PEM text of DER certificates, 64-character lines, in the order given.
pub fn to_pem(ders: &[Vec<u8>]) -> String {
    ders.iter()
        .map(|der| {
            String::from_utf8_lossy(pem::encode_block("CERTIFICATE", der).expose()).into_owned()
        })
        .collect()
}

/// Ok when the signature on `cert_der` verifies with the public key of `issuer_der`.
/// A cryptographic check only: names, validity and CA flags are not looked at.
/// SHA-1 signatures are refused, as Go's crypto/x509 (so Flux and kubectl) refuses them.
pub fn verify_signed_by(cert_der: &[u8], issuer_der: &[u8]) -> Result<(), CertError> {
    let cert = parse_exact(cert_der, 0)?;
    let issuer = parse_exact(issuer_der, 1)?;
    verify_parsed(&cert, &issuer)
}

/// [`verify_signed_by`] of certificates parsed already (a chain judged once per probe).
pub fn verify_parsed(
    cert: &X509Certificate<'_>,
    issuer: &X509Certificate<'_>,
) -> Result<(), CertError> {
    let subject = crate::text::one_line(&cert.subject().to_string(), 256);
    let algorithm = &cert.signature_algorithm.algorithm;
    if *algorithm == x509_parser::oid_registry::OID_PKCS1_SHA1WITHRSA
        || *algorithm == x509_parser::oid_registry::OID_SHA1_WITH_RSA
    {
        return Err(CertError::WeakSignature { subject });
    }
    cert.verify_signature(Some(issuer.public_key()))
        .map_err(|e| match e {
            X509Error::SignatureUnsupportedAlgorithm => CertError::UnsupportedSignature { subject },
            _ => CertError::BadSignature {
                subject,
                issuer: crate::text::one_line(&issuer.subject().to_string(), 256),
            },
        })
}

/// The certificate's SubjectPublicKeyInfo, DER.
pub fn spki_der(cert_der: &[u8]) -> Result<Vec<u8>, CertError> {
    Ok(parse_exact(cert_der, 0)?.public_key().raw.to_vec())
}

/// Ok when `key` is the private key of the certificate `cert_der`.
pub fn key_matches_cert(key: &PrivateKey, cert_der: &[u8]) -> Result<(), CertError> {
    if key.spki_der()? == spki_der(cert_der)? {
        Ok(())
    } else {
        Err(CertError::KeyMismatch {
            cert: fingerprint(cert_der),
        })
    }
}

fn parse_exact(der: &[u8], index: usize) -> Result<X509Certificate<'_>, CertError> {
    match X509Certificate::from_der(der) {
        Ok(([], cert)) => Ok(cert),
        Ok(_) => Err(CertError::Parse {
            index,
            reason: "trailing bytes after the certificate".into(),
        }),
        Err(e) => Err(CertError::Parse {
            index,
            reason: e.to_string(),
        }),
    }
}

fn ip_from_bytes(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_round_down() {
        let now = OffsetDateTime::UNIX_EPOCH;
        assert_eq!(days_until(now + time::Duration::hours(36), now), 1);
        assert_eq!(days_until(now - time::Duration::hours(12), now), -1);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(CertInfo::from_der(b"\x30\x82\xff\xff").is_err());
        assert!(parse_certificates(b"not base64 !").is_err());
        assert!(verify_signed_by(b"", b"").is_err());
    }
}
