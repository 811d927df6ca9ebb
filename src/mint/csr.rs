//! A fresh ECDSA P-256 key pair and its certificate request, in memory only.
//!
//! The key is ring's; its PKCS#8 form is kept only in [`SecretBytes`] (zeroized on
//! drop). ring itself does not zeroize the pair it holds, nor the PKCS#8 document it
//! returns (copied out at once and dropped).

use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};

use super::error::KeyError;
use crate::certs::PrivateKey;
use crate::secret::SecretBytes;

/// A key pair made for one minted credential.
pub struct MintKey {
    pair: EcdsaKeyPair,
    pkcs8: SecretBytes,
    rng: SystemRandom,
}

impl std::fmt::Debug for MintKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MintKey(ECDSA P-256, <redacted>)")
    }
}

impl MintKey {
    pub fn generate() -> Result<MintKey, KeyError> {
        let rng = SystemRandom::new();
        let alg = &ECDSA_P256_SHA256_ASN1_SIGNING;
        // The document lives only in this block: copied out, then gone.
        let pkcs8 = {
            let doc = EcdsaKeyPair::generate_pkcs8(alg, &rng).map_err(|_| KeyError::Random)?;
            let mut pkcs8 = SecretBytes::with_capacity(doc.as_ref().len());
            pkcs8.try_extend(doc.as_ref());
            pkcs8
        };
        let pair =
            EcdsaKeyPair::from_pkcs8(alg, pkcs8.expose(), &rng).map_err(|_| KeyError::Load)?;
        Ok(MintKey { pair, pkcs8, rng })
    }

    /// The key as the kubeconfig carries it.
    pub fn private_key(&self) -> Result<PrivateKey, KeyError> {
        Ok(PrivateKey::from_pkcs8_der(self.pkcs8.clone())?)
    }
}

impl rcgen::PublicKeyData for MintKey {
    fn der_bytes(&self) -> &[u8] {
        self.pair.public_key().as_ref()
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

impl rcgen::SigningKey for MintKey {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        self.pair
            .sign(&self.rng, msg)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| rcgen::Error::RingUnspecified)
    }
}

/// A PEM `CERTIFICATE REQUEST` for `user` (the subject's CN; no O, so no group), signed
/// by `key`. Public: it goes to the spoke as the CSR's `spec.request`.
pub fn request(key: &MintKey, user: &str) -> Result<String, KeyError> {
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, user);
    params
        .serialize_request(key)
        .and_then(|csr| csr.pem())
        .map_err(KeyError::Request)
}

/// `spokekeeper-<spoke>-g<generation>-<8 random hex>`: unique per attempt, so a request
/// left behind never blocks the next one.
pub fn csr_name(spoke: &str, generation: u64) -> Result<String, KeyError> {
    let mut random = [0u8; 4];
    SystemRandom::new()
        .fill(&mut random)
        .map_err(|_| KeyError::Random)?;
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let mut name = format!("spokekeeper-{spoke}-g{generation}-{hex}");
    name.truncate(253);
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::certification_request::X509CertificationRequest;
    use x509_parser::prelude::FromDer;

    #[test]
    fn the_request_names_the_user_alone_with_a_p256_key_and_a_valid_signature() {
        let key = MintKey::generate().unwrap();
        let pem = request(&key, "spokekeeper:hub:3").unwrap();
        assert!(
            pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----\n"),
            "{pem}"
        );
        let blocks = crate::certs::pem::blocks(pem.as_bytes()).unwrap();
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].label, "CERTIFICATE REQUEST");
        let (rest, csr) = X509CertificationRequest::from_der(blocks[0].der.expose()).unwrap();
        assert!(rest.is_empty());
        csr.verify_signature().expect("self-signed by the key");
        let info = &csr.certification_request_info;
        let cns: Vec<&str> = info
            .subject
            .iter_common_name()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(cns, ["spokekeeper:hub:3"]);
        // No organization: a group (system:masters) cannot ride along.
        assert_eq!(info.subject.iter_organization().count(), 0);
        assert_eq!(info.subject.iter().count(), 1);
        let spki = &info.subject_pki;
        assert_eq!(
            spki.algorithm.algorithm,
            x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY
        );
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .unwrap()
            .as_oid()
            .unwrap();
        assert_eq!(curve, x509_parser::oid_registry::OID_EC_P256);
        assert_eq!(
            csr.signature_algorithm.algorithm,
            x509_parser::oid_registry::OID_SIG_ECDSA_WITH_SHA256
        );
        // The kubeconfig's key is the request's key.
        let private = key.private_key().unwrap();
        assert_eq!(private.spki_der().unwrap(), spki.raw);
    }

    #[test]
    fn each_key_is_fresh_and_never_printed() {
        let a = MintKey::generate().unwrap();
        let b = MintKey::generate().unwrap();
        assert_ne!(a.pkcs8.expose(), b.pkcs8.expose());
        assert_eq!(format!("{a:?}"), "MintKey(ECDSA P-256, <redacted>)");
    }

    #[test]
    fn csr_names_are_dns_names_unique_per_attempt() {
        let a = csr_name("edge-1", 12).unwrap();
        let b = csr_name("edge-1", 12).unwrap();
        assert!(
            a.starts_with("spokekeeper-edge-1-g12-")
                && a.len() == "spokekeeper-edge-1-g12-".len() + 8,
            "{a}"
        );
        assert_ne!(a, b);
        assert!(crate::config::is_dns_subdomain(&a));
        assert!(csr_name(&"a".repeat(300), 1).unwrap().len() <= 253);
    }
}
