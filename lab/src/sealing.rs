//! A sealing key pair made for one run of the demo: the simulated controller holds its
//! private half, spokekeeper fetches its certificate. Nothing outlives the run, so the demo
//! seals to no key whose private half is published (spokekeeper refuses the one in
//! keys/demo/ everywhere).

use rsa::pkcs8::{EncodePrivateKey, LineEnding};
use time::{Duration, OffsetDateTime};
use zeroize::Zeroizing;

/// RSA-2048: the smallest size spokekeeper accepts, so a debug build's demo starts fast.
const BITS: usize = 2048;

/// A controller's sealing key pair, as the Sealed Secrets controller makes one.
pub struct SealingPair {
    /// The self-signed certificate it serves (`kubeseal --fetch-cert`).
    pub cert_pem: String,
    /// Its private key, PKCS#8 PEM, for the simulated controller.
    pub key_pem: Zeroizing<String>,
}

impl SealingPair {
    /// A fresh key pair and a certificate valid for 30 days, as the controller's own
    /// (CN and O `sealed-secret`).
    pub fn generate() -> Result<SealingPair, String> {
        let key = rsa::PrivateKey::new(&mut getrandom::SysRng, BITS)
            .map_err(|e| format!("RSA key generation: {e}"))?;
        let key_pem = key
            .to_pkcs8_pem(LineEnding::LF)
            .map_err(|e| format!("PKCS#8 encoding: {e}"))?;
        let signer = rcgen::KeyPair::from_pem_and_sign_algo(&key_pem, &rcgen::PKCS_RSA_SHA256)
            .map_err(|e| format!("the certificate's signer: {e}"))?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())
            .map_err(|e| format!("certificate parameters: {e}"))?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "sealed-secret");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "sealed-secret");
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::minutes(5);
        params.not_after = now + Duration::days(30);
        let cert = params
            .self_signed(&signer)
            .map_err(|e| format!("the self-signed certificate: {e}"))?;
        Ok(SealingPair {
            cert_pem: cert.pem(),
            key_pem: Zeroizing::new(key_pem.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData;

    #[test]
    fn two_runs_get_two_keys_each_a_certificate_of_its_own_key() {
        let (a, b) = (
            SealingPair::generate().unwrap(),
            SealingPair::generate().unwrap(),
        );
        assert_ne!(a.cert_pem, b.cert_pem);
        assert_ne!(*a.key_pem, *b.key_pem);
        assert!(a.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(a.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        // The certificate carries the public half of the key it came with.
        let spki = rcgen::KeyPair::from_pem_and_sign_algo(&a.key_pem, &rcgen::PKCS_RSA_SHA256)
            .unwrap()
            .subject_public_key_info();
        let (_, pem) = x509_parser::pem::parse_x509_pem(a.cert_pem.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        assert_eq!(cert.public_key().raw, spki.as_slice());
        assert_ne!(a.cert_pem, crate::DEMO_CERT_PEM);
    }
}
