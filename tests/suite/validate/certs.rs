//! Certificates and keys, checked against what OpenSSL says about the same bytes.

use crate::kc_fixtures;

use std::net::IpAddr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kc_fixtures::{Alg, ca, leaf, openssl, openssl_fingerprint, traditional, validity};
use rcgen::{CertificateParams, DnType, KeyPair, SanType};
use spokekeeper::certs::{self, CertError, CertInfo, KeyKind, PrivateKey, Validity};
use time::{Duration, OffsetDateTime};

#[test]
fn fingerprints_equal_openssl() {
    for alg in [Alg::P256, Alg::Rsa2048, Alg::Ed25519] {
        let root = ca("fingerprint-ca", alg);
        let cert = leaf(&root, "client", "org", alg, validity(-1, 30));
        for pem in [&root.pem, &cert.pem] {
            let der = certs::certificates_der(pem.as_bytes()).unwrap().remove(0);
            let ours = certs::fingerprint(&der).to_string();
            assert_eq!(ours, openssl_fingerprint(pem), "{alg:?}");
            assert_eq!(ours.len(), "sha256:".len() + 64);
            assert_eq!(
                CertInfo::from_der(&der).unwrap().fingerprint.to_string(),
                ours
            );
        }
    }
}

#[test]
fn fields_match_openssl() {
    let root = ca("Test Root CA", Alg::P256);
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "api.dev.example");
    params.subject_alt_names = vec![
        SanType::DnsName("api.dev.example".try_into().unwrap()),
        SanType::IpAddress("192.168.1.20".parse().unwrap()),
        SanType::IpAddress("fd00::20".parse().unwrap()),
    ];
    let not_after = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap() + Duration::days(90);
    params.not_after = not_after;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = params
        .signed_by(&key, &rcgen::Issuer::from_params(&root.params, &root.key))
        .unwrap();

    let info = certs::parse_certificates(cert.pem().as_bytes())
        .unwrap()
        .remove(0);
    assert_eq!(info.subject, "CN=api.dev.example");
    assert_eq!(info.issuer, "CN=Test Root CA");
    assert_eq!(info.not_after, not_after);
    assert_eq!(info.dns_names, ["api.dev.example"]);
    assert_eq!(
        info.ip_addresses,
        [
            "192.168.1.20".parse::<IpAddr>().unwrap(),
            "fd00::20".parse().unwrap()
        ]
    );
    assert!(!info.is_ca);
    assert!(CertInfo::from_der(&root.der).unwrap().is_ca);
    let serial = String::from_utf8(openssl(
        &["x509", "-noout", "-serial"],
        cert.pem().as_bytes(),
    ))
    .unwrap();
    assert_eq!(
        info.serial.replace(':', "").to_uppercase(),
        serial.trim().trim_start_matches("serial=")
    );
    let now = OffsetDateTime::now_utc();
    assert_eq!(info.days_left(now), 89, "rounded down");
    assert_eq!(info.validity_at(now), Validity::Valid);
    assert_eq!(
        info.validity_at(not_after + Duration::seconds(1)),
        Validity::Expired
    );
    assert_eq!(
        info.validity_at(info.not_before - Duration::seconds(1)),
        Validity::NotYetValid
    );
}

#[test]
fn certificates_from_pem_base64_and_der() {
    let root = ca("bundle", Alg::P256);
    let other = ca("bundle-2", Alg::P256);
    let bundle = format!("{}{}", root.pem, other.pem);
    let from_pem = certs::certificates_der(bundle.as_bytes()).unwrap();
    assert_eq!(from_pem, vec![root.der.clone(), other.der.clone()]);
    assert_eq!(
        certs::certificates_der(STANDARD.encode(&bundle).as_bytes()).unwrap(),
        from_pem
    );
    assert_eq!(
        certs::certificates_der(&root.der).unwrap(),
        vec![root.der.clone()]
    );
    // PEM written back is what openssl reads as the same certificate.
    let again = certs::to_pem(&from_pem);
    assert_eq!(
        openssl_fingerprint(&again),
        certs::fingerprint(&root.der).to_string()
    );
}

#[test]
fn a_key_in_certificate_data_is_refused() {
    let root = ca("with-key", Alg::P256);
    let mixed = format!("{}{}", root.pem, root.key.serialize_pem());
    match certs::certificates_der(mixed.as_bytes()) {
        Err(CertError::UnexpectedBlock(label)) => assert_eq!(label, "PRIVATE KEY"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        certs::parse_certificates(b"-----BEGIN X-----\nAAAA\n-----END X-----\n"),
        Err(CertError::UnexpectedBlock(_))
    ));
    assert!(matches!(
        certs::parse_pem_certificates(b"no pem here"),
        Err(CertError::Pem(_))
    ));
}

#[test]
fn keys_match_their_certificates_in_every_encoding() {
    let p384 = String::from_utf8(openssl(
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-384",
        ],
        b"",
    ))
    .unwrap();
    let p384 = KeyPair::from_pem(&p384).unwrap();
    let mut cases: Vec<(String, String, KeyKind)> = Vec::new();
    for alg in [Alg::P256, Alg::Rsa2048, Alg::Ed25519] {
        let root = ca("keys", Alg::P256);
        let cert = leaf(&root, "client", "org", alg, validity(-1, 30));
        cases.push((cert.pem.clone(), cert.key_pem.clone(), KeyKind::Pkcs8));
        match alg {
            Alg::P256 => cases.push((cert.pem.clone(), traditional(&cert.key_pem), KeyKind::Sec1)),
            Alg::Rsa2048 => {
                cases.push((cert.pem.clone(), traditional(&cert.key_pem), KeyKind::Pkcs1))
            }
            Alg::Ed25519 => {}
        }
    }
    // ring writes Ed25519 PKCS#8 v2 (with the public key): read as well.
    let ed_v2 = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let ed_v2_cert = CertificateParams::new(vec!["ed".to_owned()])
        .unwrap()
        .self_signed(&ed_v2)
        .unwrap();
    let key = PrivateKey::from_pem(ed_v2.serialize_pem().as_bytes()).unwrap();
    certs::key_matches_cert(&key, ed_v2_cert.der()).unwrap();
    let mut params = CertificateParams::new(vec!["p384".to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "p384");
    let p384_cert = params.self_signed(&p384).unwrap();
    cases.push((
        p384_cert.pem(),
        traditional(&p384.serialize_pem()),
        KeyKind::Sec1,
    ));
    // openssl ecparam -genkey writes EC PARAMETERS before the key: skipped, as Go does.
    let with_params =
        String::from_utf8(openssl(&["ecparam", "-name", "prime256v1", "-genkey"], b"")).unwrap();
    assert!(with_params.contains("EC PARAMETERS"));
    let key = PrivateKey::from_pem(with_params.as_bytes()).unwrap();
    assert_eq!(key.kind(), KeyKind::Sec1);

    for (i, (cert_pem, key_pem, kind)) in cases.iter().enumerate() {
        let cert_der = certs::certificates_der(cert_pem.as_bytes())
            .unwrap()
            .remove(0);
        let key =
            PrivateKey::from_pem(key_pem.as_bytes()).unwrap_or_else(|e| panic!("case {i}: {e}"));
        assert_eq!(key.kind(), *kind, "case {i}");
        certs::key_matches_cert(&key, &cert_der).unwrap_or_else(|e| panic!("case {i}: {e}"));
        // Re-encoding keeps the key: openssl reads it as the same public key.
        // Re-encoded, it is still the certificate's key, for openssl too.
        let pub_ours = openssl(&["pkey", "-pubout"], key.to_pem().expose());
        let pub_cert = openssl(&["x509", "-noout", "-pubkey"], cert_pem.as_bytes());
        assert_eq!(pub_ours, pub_cert, "case {i}");
        // And every other key is a mismatch.
        let next = &cases[(i + 2) % cases.len()];
        let other = PrivateKey::from_pem(next.1.as_bytes()).unwrap();
        match certs::key_matches_cert(&other, &cert_der) {
            Err(CertError::KeyMismatch { cert }) => assert_eq!(cert, certs::fingerprint(&cert_der)),
            other => panic!("case {i}: {other:?}"),
        }
    }
}

#[test]
fn unusable_keys_are_errors_that_show_nothing() {
    let root = ca("k", Alg::P256);
    let pem = root.key.serialize_pem();
    let body = pem.lines().nth(1).unwrap();
    let encrypted = openssl(&["pkcs8", "-topk8", "-passout", "pass:x"], pem.as_bytes());
    let two = format!("{pem}{pem}");
    let corrupt = pem.replacen(&body[10..20], "AAAAAAAAAA", 1);
    for (name, input) in [
        ("encrypted", encrypted),
        ("two keys", two.into_bytes()),
        ("corrupt", corrupt.into_bytes()),
        ("no key", root.pem.clone().into_bytes()),
        ("empty", Vec::new()),
    ] {
        let e = PrivateKey::from_pem(&input).expect_err(name);
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains(&body[..16]), "{name}: {shown}");
    }
    let key = PrivateKey::from_pem(pem.as_bytes()).unwrap();
    let shown = format!("{key:?} {key:#?}");
    assert!(
        !shown.contains(&body[..16]) && shown.contains("redacted"),
        "{shown}"
    );
}

#[test]
fn verify_signed_by_checks_the_signature_not_the_name() {
    for alg in [Alg::P256, Alg::Rsa2048, Alg::Ed25519] {
        let root = ca("same-name", alg);
        let impostor = ca("same-name", alg);
        let cert = leaf(&root, "client", "org", Alg::P256, validity(-1, 30));
        certs::verify_signed_by(&cert.der, &root.der).unwrap();
        certs::verify_signed_by(&root.der, &root.der).unwrap();
        assert!(
            matches!(
                certs::verify_signed_by(&cert.der, &impostor.der),
                Err(CertError::BadSignature { .. })
            ),
            "{alg:?}"
        );
    }
    let root = ca("r", Alg::P256);
    assert!(matches!(
        certs::verify_signed_by(b"junk", &root.der),
        Err(CertError::Parse { .. })
    ));
    assert!(matches!(
        certs::verify_signed_by(&root.der, b"junk"),
        Err(CertError::Parse { .. })
    ));
    let mut trailing = root.der.clone();
    trailing.push(0);
    assert!(matches!(
        certs::verify_signed_by(&trailing, &root.der),
        Err(CertError::Parse { .. })
    ));
}

#[test]
fn sha1_signatures_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k.pem");
    let cert = openssl(
        &[
            "req",
            "-x509",
            "-sha1",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=old",
            "-days",
            "10",
            "-keyout",
            key.to_str().unwrap(),
        ],
        b"",
    );
    let der = certs::certificates_der(&cert).unwrap().remove(0);
    assert!(matches!(
        certs::verify_signed_by(&der, &der),
        Err(CertError::WeakSignature { .. })
    ));
}

#[test]
fn hostile_names_are_escaped() {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "evil\u{1b}[2J\nrm -rf");
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let info = CertInfo::from_der(cert.der()).unwrap();
    assert!(
        !info.subject.contains('\u{1b}') && !info.subject.contains('\n'),
        "{}",
        info.subject
    );
    assert!(info.subject.contains("evil [2J rm -rf"), "{}", info.subject);
}
