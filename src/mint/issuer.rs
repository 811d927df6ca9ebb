//! Whether a minted certificate was issued by the client CA the spoke's API server
//! trusts, and is a client certificate for one user alone.
//!
//! The anchor is the admin credential's own client certificate, which the API server
//! just accepted: the minted leaf must be signed by the CA that signed it (a CA in the
//! admin kubeconfig's client chain, as k3s and RKE2 write it, or in the chain the
//! signer returned), or by a CA the signer returned that is itself signed by one. With
//! neither at hand (kubeadm's admin.conf holds the leaf alone, and Kubernetes' signer
//! returns the leaf alone) the leaf must name the admin certificate's issuer and
//! authority key id; the live call that follows proves the API server accepts it.

use x509_parser::prelude::{FromDer, ParsedExtension, X509Certificate};

use super::api::shown;
use crate::certs::{self, CertInfo};

/// The refusal, as said after "cannot be used: ".
pub(super) type Why = String;

/// Checks `leaf` against `admin` (the admin kubeconfig's client chain) and `returned`
/// (the signer's chain after the leaf); returns the CA that signed it, when at hand.
pub(super) fn check(
    leaf: &CertInfo,
    admin: &[CertInfo],
    returned: &[CertInfo],
) -> Result<Option<CertInfo>, Why> {
    let Some(anchor) = admin.first() else {
        // A token admin credential: nothing to anchor to but the live call.
        return Ok(None);
    };
    let signs = |child: &CertInfo, ca: &CertInfo| {
        ca.is_ca
            && child.names_as_issuer(ca)
            && certs::verify_signed_by(&child.der, &ca.der).is_ok()
    };
    let mut trusted: Vec<&CertInfo> = admin[1..]
        .iter()
        .chain(returned)
        .filter(|ca| signs(anchor, ca))
        .collect();
    // The signer's intermediates that chain to a trusted CA (bounded by their number).
    for _ in 0..returned.len() {
        let more: Vec<&CertInfo> = returned
            .iter()
            .filter(|c| !trusted.contains(c) && trusted.iter().any(|ca| signs(c, ca)))
            .collect();
        if more.is_empty() {
            break;
        }
        trusted.extend(more);
    }
    if let Some(ca) = trusted.iter().find(|ca| signs(leaf, ca)) {
        return Ok(Some((*ca).clone()));
    }
    if !trusted.is_empty() {
        return Err(format!(
            "it is issued by {:?}, not signed by the client CA that issued the admin credential \
             ({:?}) nor by a CA that chains to it",
            leaf.issuer, anchor.issuer
        ));
    }
    let same_key_id = match (key_id(&leaf.der), key_id(&anchor.der)) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    if leaf.same_issuer(anchor) && same_key_id {
        Ok(None)
    } else {
        Err(format!(
            "it is issued by {:?}, not by the client CA that issued the admin credential ({:?})",
            leaf.issuer, anchor.issuer
        ))
    }
}

/// The leaf must be a client certificate (extended key usage clientAuth) for exactly one
/// CN, `user`, and no organization (a group, such as system:masters).
pub(super) fn check_subject(der: &[u8], user: &str) -> Result<(), Why> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|_| "it does not parse".to_string())?;
    let s = cert.subject();
    let text = |a: &x509_parser::x509::AttributeTypeAndValue| {
        a.as_str()
            .map(shown)
            .unwrap_or_else(|_| "(not text)".into())
    };
    let cns: Vec<String> = s.iter_common_name().take(16).map(text).collect();
    let orgs: Vec<String> = s.iter_organization().take(16).map(text).collect();
    if cns != [user] || !orgs.is_empty() {
        return Err(format!(
            "its subject is CN={cns:?} O={orgs:?}, not CN={user:?} alone"
        ));
    }
    let client_auth = matches!(
        cert.extended_key_usage(),
        Ok(Some(eku)) if eku.value.client_auth
    );
    if !client_auth {
        return Err("its extended key usage does not include clientAuth".into());
    }
    Ok(())
}

/// The authority key identifier of a certificate, when it has one.
fn key_id(der: &[u8]) -> Option<Vec<u8>> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    cert.extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(aki) => {
                aki.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => None,
        })
}
