//! Arbitrary bytes as certificates and as a private key: errors, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spokekeeper::certs::{self, PrivateKey};

fuzz_target!(|data: &[u8]| {
    if let Ok(list) = certs::parse_certificates(data) {
        for pair in list.windows(2) {
            let _ = certs::verify_signed_by(&pair[0].der, &pair[1].der);
        }
        let ders: Vec<Vec<u8>> = list.iter().map(|c| c.der.clone()).collect();
        let again =
            certs::certificates_der(certs::to_pem(&ders).as_bytes()).expect("own PEM reads back");
        assert_eq!(again, ders);
    }
    if let Ok(key) = PrivateKey::from_pem(data) {
        let spki = key.spki_der().expect("checked when parsed");
        let again = PrivateKey::from_pem(key.to_pem().expose()).expect("own PEM reads back");
        assert_eq!(again.spki_der().unwrap(), spki);
    }
});
