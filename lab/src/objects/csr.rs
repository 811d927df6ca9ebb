//! A CSR as the API server validates it and as KCM's csrsigning controller signs it.

use rcgen::{
    CertificateParams, CertificateSigningRequestParams, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair,
};
use rustls::pki_types::CertificateSigningRequestDer;
use rustls::pki_types::pem::PemObject;
use serde_json::Value;
use time::OffsetDateTime;

use super::{BACKDATE, SHORT};

/// The first field of a CSR the API server's validation refuses, or None.
pub(super) fn invalid_csr(csr: &Value) -> Option<String> {
    let spec = &csr["spec"];
    if csr["metadata"]["name"].as_str().is_none_or(str::is_empty) {
        return Some("metadata.name".into());
    }
    let request = spec["request"].as_str().and_then(|r| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.decode(r).ok()
    });
    let parses = request.as_deref().is_some_and(|pem| {
        CertificateSigningRequestDer::from_pem_slice(pem)
            .ok()
            .is_some_and(|der| CertificateSigningRequestParams::from_der(&der).is_ok())
    });
    if !parses {
        return Some("spec.request".into());
    }
    if spec["signerName"].as_str().is_none_or(str::is_empty) {
        return Some("spec.signerName".into());
    }
    if spec["usages"].as_array().is_none_or(Vec::is_empty) {
        return Some("spec.usages".into());
    }
    if let Some(s) = spec.get("expirationSeconds").filter(|s| !s.is_null())
        && s.as_i64().is_none_or(|s| s < 600)
    {
        return Some("spec.expirationSeconds".into());
    }
    None
}

/// What KCM's csrsigning controller issues: the CSR's subject and key, clientAuth,
/// not a CA, valid from 5 minutes ago for expirationSeconds, capped by the signing
/// duration `most` (seconds) and by the CA's notAfter.
pub(super) fn sign(
    csr: &Value,
    issuer: &Issuer<'static, KeyPair>,
    ca_not_after: OffsetDateTime,
    most: i64,
) -> Result<String, String> {
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(csr["spec"]["request"].as_str().unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let der = CertificateSigningRequestDer::from_pem_slice(&pem).map_err(|e| e.to_string())?;
    let request = CertificateSigningRequestParams::from_der(&der).map_err(|e| e.to_string())?;
    let ttl = csr["spec"]["expirationSeconds"]
        .as_i64()
        .unwrap_or(most)
        .min(most);
    let now = OffsetDateTime::now_utc();
    let mut params = CertificateParams::default();
    params.distinguished_name = request.params.distinguished_name.clone();
    params.subject_alt_names = request.params.subject_alt_names.clone();
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - time::Duration::seconds(BACKDATE);
    let end = if ttl < SHORT { ttl } else { ttl - BACKDATE };
    params.not_after = (now + time::Duration::seconds(end)).min(ca_not_after);
    let cert = params
        .signed_by(&request.public_key, issuer)
        .map_err(|e| e.to_string())?;
    Ok(cert.pem())
}
