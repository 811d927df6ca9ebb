//! X.509: fingerprints, validity, chain and key checks.
//!
//! Minimal on the `spoke` branch: only what the TLS probe needs. The full module is
//! written on another branch and replaces this file at merge; keep these signatures.

use sha2::{Digest, Sha256};
use x509_parser::prelude::{FromDer, X509Certificate};

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("the {0} certificate does not parse as X.509 DER")]
    Parse(&'static str),
    #[error("the certificate's signature does not verify with the issuer's public key")]
    BadSignature,
}

/// Ok when `cert_der` carries a valid signature made with the key of `issuer_der`.
pub fn verify_signed_by(cert_der: &[u8], issuer_der: &[u8]) -> Result<(), CertError> {
    let (_, cert) = X509Certificate::from_der(cert_der).map_err(|_| CertError::Parse("subject"))?;
    let (_, issuer) =
        X509Certificate::from_der(issuer_der).map_err(|_| CertError::Parse("issuer"))?;
    cert.verify_signature(Some(issuer.public_key()))
        .map_err(|_| CertError::BadSignature)
}

/// `sha256:<64 lowercase hex>` of the DER bytes.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = Sha256::digest(der);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in digest.iter() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}
