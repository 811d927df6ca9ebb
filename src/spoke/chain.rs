//! The chain a spoke's API server presents, judged against a recorded CA bundle: by
//! signature only, parsed once per probe, within caps. The server chooses what it
//! presents, so the work is bounded: a capped chain, names compared before a signature
//! is checked, and the climb from the leaf found once for every CA of the bundle.

use x509_parser::prelude::{FromDer, X509Certificate};

use crate::certs;
use crate::fingerprint::{Ca, Fingerprint};

/// The most certificates a presented chain may hold (a leaf, its intermediates, perhaps
/// a root or a cross-signed one: a handful); a longer one is refused, not judged.
pub const MAX_CHAIN_CERTS: usize = 16;

/// The most bytes of DER a presented chain may hold in all.
pub const MAX_CHAIN_BYTES: usize = 64 * 1024;

/// Whether the serving certificate chains (by signature) to a given CA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaCheck {
    /// Signed by the CA, directly or through certificates the server presented.
    Verified,
    /// Not signed by that CA: the spoke was rebuilt, or this is another cluster.
    NotSignedByCa,
    /// Signed by a recorded CA, while the server also presents a root the recorded
    /// bundle does not hold: a CA rotation whose new root the old one cross-signed (k3s's
    /// rotate-default-ca-certs.sh), or a root the server appends. Committed once the
    /// node's kubeconfig holds it (rotate/decide.rs).
    RootChanged,
    /// The CA given does not parse as an X.509 certificate.
    UnusableCa,
}

/// A chain held against a CA bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    pub check: CaCheck,
    /// The self-signed certificates the server presents that the bundle does not hold.
    pub roots_outside: Vec<Fingerprint<Ca>>,
}

/// Whether `chain` is over the caps: (certificates, bytes) when it is.
pub fn over_caps(chain: &[Vec<u8>]) -> Option<(usize, usize)> {
    let bytes: usize = chain.iter().map(Vec::len).sum();
    (chain.len() > MAX_CHAIN_CERTS || bytes > MAX_CHAIN_BYTES).then_some((chain.len(), bytes))
}

/// Judges the presented `chain` (serving certificate first) against `bundle` (DER):
/// Verified when the serving certificate is signed by a CA of the bundle, directly or
/// through presented certificates; RootChanged when it is but the server also presents
/// a root the bundle does not hold. Only the first [`MAX_CHAIN_CERTS`] are looked at.
pub fn judge(chain: &[Vec<u8>], bundle: &[Vec<u8>]) -> Judged {
    let chain = &chain[..chain.len().min(MAX_CHAIN_CERTS)];
    let parsed: Vec<Option<X509Certificate<'_>>> = chain.iter().map(|d| parse(d)).collect();
    let mut roots_outside: Vec<Fingerprint<Ca>> = chain
        .iter()
        .zip(&parsed)
        .filter(|(der, c)| !bundle.contains(der) && c.as_ref().is_some_and(self_signed))
        .map(|(der, _)| Fingerprint::of(der))
        .collect();
    roots_outside.sort();
    roots_outside.dedup();
    let path = climb(&parsed);
    let mut check = CaCheck::UnusableCa;
    for ca in bundle.iter().map(|d| parse(d)) {
        let Some(ca) = ca else { continue };
        if path.iter().any(|c| signed_by(c, &ca)) {
            check = if roots_outside.is_empty() {
                CaCheck::Verified
            } else {
                CaCheck::RootChanged
            };
            break;
        }
        check = CaCheck::NotSignedByCa;
    }
    Judged {
        check,
        roots_outside,
    }
}

fn parse(der: &[u8]) -> Option<X509Certificate<'_>> {
    X509Certificate::from_der(der).ok().map(|(_, c)| c)
}

/// Names first (cheap), then the signature: a certificate's issuer must be named by the
/// certificate that signed it (RFC 5280's name chaining), so most pairs cost no
/// signature check.
fn signed_by(cert: &X509Certificate<'_>, issuer: &X509Certificate<'_>) -> bool {
    cert.issuer().as_raw() == issuer.subject().as_raw()
        && certs::verify_parsed(cert, issuer).is_ok()
}

fn self_signed(cert: &X509Certificate<'_>) -> bool {
    signed_by(cert, cert)
}

/// The serving certificate, then each presented certificate that signed the one before,
/// none twice. The next presented certificate is tried first (servers send the chain in
/// order), so an ordered chain costs one signature check a step.
fn climb<'a, 'b>(parsed: &'a [Option<X509Certificate<'b>>]) -> Vec<&'a X509Certificate<'b>> {
    let mut path = Vec::new();
    let Some(Some(leaf)) = parsed.first() else {
        return path;
    };
    let mut used = vec![false; parsed.len()];
    used[0] = true;
    let (mut current, mut at) = (leaf, 0);
    path.push(leaf);
    loop {
        let order = (at + 1..parsed.len()).chain(1..=at);
        let next = order.into_iter().find_map(|i| match &parsed[i] {
            Some(c) if !used[i] && signed_by(current, c) => Some((i, c)),
            _ => None,
        });
        let Some((i, c)) = next else {
            return path;
        };
        used[i] = true;
        path.push(c);
        (current, at) = (c, i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, Issuer, KeyPair,
    };

    fn ca_params(cn: &str) -> CertificateParams {
        let mut p = CertificateParams::default();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p
    }

    fn root(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
        CertifiedIssuer::self_signed(ca_params(cn), KeyPair::generate().unwrap()).unwrap()
    }

    fn leaf(issuer: &Issuer<'_, KeyPair>) -> Vec<u8> {
        let mut p = CertificateParams::new(vec!["spoke".into()]).unwrap();
        p.distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        let key = KeyPair::generate().unwrap();
        p.signed_by(&key, issuer).unwrap().der().to_vec()
    }

    #[test]
    fn a_chain_is_judged_through_its_intermediates_and_roots_outside_the_bundle() {
        let old = root("old");
        let inter = CertifiedIssuer::signed_by(
            ca_params("intermediate"),
            KeyPair::generate().unwrap(),
            &old,
        )
        .unwrap();
        let serving = leaf(&inter);
        let bundle = vec![old.der().to_vec()];
        let direct = judge(&[serving.clone(), inter.der().to_vec()], &bundle);
        assert_eq!(direct.check, CaCheck::Verified);
        assert!(direct.roots_outside.is_empty());
        // Out of order: still climbed.
        let other = root("other");
        let shuffled = [serving.clone(), other.der().to_vec(), inter.der().to_vec()];
        let judged = judge(&shuffled, &bundle);
        assert_eq!(judged.check, CaCheck::RootChanged);
        assert_eq!(judged.roots_outside, [Fingerprint::of(other.der())]);
        // The recorded root presented too: not outside.
        let with_root = [serving.clone(), inter.der().to_vec(), old.der().to_vec()];
        assert_eq!(judge(&with_root, &bundle).check, CaCheck::Verified);
        assert_eq!(
            judge(std::slice::from_ref(&serving), &bundle).check,
            CaCheck::NotSignedByCa
        );
        assert_eq!(
            judge(&[serving], &[b"not a certificate".to_vec()]).check,
            CaCheck::UnusableCa
        );
    }

    #[test]
    fn the_caps_count_certificates_and_bytes() {
        let ca = root("ca");
        let der = ca.der().to_vec();
        assert_eq!(over_caps(&vec![der.clone(); MAX_CHAIN_CERTS]), None);
        let long = vec![der.clone(); MAX_CHAIN_CERTS + 1];
        assert_eq!(
            over_caps(&long),
            Some((MAX_CHAIN_CERTS + 1, der.len() * (MAX_CHAIN_CERTS + 1)))
        );
        let big = vec![
            vec![0u8; MAX_CHAIN_BYTES / 2 + 1],
            vec![0u8; MAX_CHAIN_BYTES / 2],
        ];
        assert_eq!(over_caps(&big), Some((2, MAX_CHAIN_BYTES + 1)));
    }

    #[test]
    fn past_the_cap_nothing_is_looked_at() {
        let ca = root("ca");
        let serving = leaf(&ca);
        let mut chain = vec![serving];
        chain.extend(std::iter::repeat_n(ca.der().to_vec(), MAX_CHAIN_CERTS - 1));
        // A root the bundle lacks, past the cap: not seen.
        chain.push(root("past the cap").der().to_vec());
        let judged = judge(&chain, &[ca.der().to_vec()]);
        assert_eq!(judged.check, CaCheck::Verified);
        assert!(judged.roots_outside.is_empty());
        // Within the cap it is.
        chain.remove(1);
        let judged = judge(&chain, &[ca.der().to_vec()]);
        assert_eq!(judged.check, CaCheck::RootChanged);
        assert_eq!(judged.roots_outside.len(), 1);
    }
}
