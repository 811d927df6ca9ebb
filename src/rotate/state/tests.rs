use super::*;

const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn sample() -> Recorded {
    let ca = test_ca("sample");
    Recorded {
        spoke: "dev".into(),
        server: "https://10.0.0.1:6443".into(),
        ca_sha256: Fingerprint::of(&ca),
        ca_bundle: vec![ca],
        ca_not_after: OffsetDateTime::from_unix_timestamp(2_000_000_000).unwrap(),
        client_sha256: Some(Fingerprint::parse(&format!("sha256:{HEX}")).unwrap()),
        client_not_after: Some(OffsetDateTime::from_unix_timestamp(1_900_000_000).unwrap()),
        content_sha256: Fingerprint::parse(HEX).unwrap(),
        sealed_to: SealedTo::Cert(Fingerprint::parse(&format!("sha256:{HEX}")).unwrap()),
        rotated_at: OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap(),
        credential: RecordedCredential::default(),
        trust_sha256: None,
    }
}

fn minted(generation: u64) -> Recorded {
    Recorded {
        credential: RecordedCredential {
            mode: CredentialMode::Minted,
            user: Some(format!("spokekeeper:hub:{generation}")),
            generation,
        },
        ..sample()
    }
}

#[test]
fn a_sops_output_records_its_recipients_in_place_of_a_sealing_certificate() {
    let mut r = sample();
    r.sealed_to = SealedTo::Age(Fingerprint::from_digest([9; 32]));
    let a = r.to_annotations();
    assert!(!a.contains_key(SEALING_CERT_SHA256), "{a:?}");
    assert_eq!(
        a[AGE_RECIPIENTS_SHA256],
        Fingerprint::<crate::fingerprint::AgeRecipients>::from_digest([9; 32]).to_string()
    );
    assert_eq!(Recorded::from_annotations(&a).unwrap(), r);
    // Neither: the sealing certificate's annotation is the one named missing.
    let mut none = a.clone();
    none.remove(AGE_RECIPIENTS_SHA256);
    assert_eq!(
        Recorded::from_annotations(&none).unwrap_err().key(),
        SEALING_CERT_SHA256
    );
}

#[test]
fn the_generation_counts_from_the_annotations() {
    // Extracted, as earlier versions wrote it: no credential annotations, generation 0.
    let a = sample().to_annotations();
    assert!(
        !a.keys()
            .any(|k| k.starts_with("spokekeeper.io/credential-"))
    );
    let r = Recorded::from_annotations(&a).unwrap();
    assert_eq!(r.credential, RecordedCredential::default());
    assert_eq!(r.credential.next_generation(), 1);
    // Minted: mode, user and generation round-trip; the next is one more.
    let a = minted(7).to_annotations();
    assert_eq!(a[CREDENTIAL_MODE], "minted");
    assert_eq!(a[CREDENTIAL_USER], "spokekeeper:hub:7");
    assert_eq!(a[CREDENTIAL_GENERATION], "7");
    let m = minted(7);
    let r = Recorded::from_annotations(&m.to_annotations()).unwrap();
    assert_eq!(r, m);
    assert_eq!(r.credential.next_generation(), 8);
    // Back to extracted: the counter is kept, so no user name is ever reused.
    let back = Recorded {
        credential: RecordedCredential {
            mode: CredentialMode::Extracted,
            user: None,
            generation: 7,
        },
        ..sample()
    };
    let r = Recorded::from_annotations(&back.to_annotations()).unwrap();
    assert_eq!(r.credential.next_generation(), 8);
    assert_eq!(
        RecordedCredential {
            generation: u64::MAX,
            ..Default::default()
        }
        .next_generation(),
        u64::MAX
    );
}

#[test]
fn damaged_credential_annotations_are_named() {
    let with = |key: &str, value: &str| {
        let mut a = minted(3).to_annotations();
        a.insert(key.into(), value.into());
        Recorded::from_annotations(&a).unwrap_err()
    };
    for (key, value) in [
        (CREDENTIAL_MODE, "issued"),
        (CREDENTIAL_MODE, "extracted"),
        (CREDENTIAL_GENERATION, "0"),
        (CREDENTIAL_GENERATION, "-1"),
        (CREDENTIAL_GENERATION, "+4"),
        (CREDENTIAL_GENERATION, "99999999999999999999999"),
        // Frozen: every later mint would saturate to the same generation and user.
        (CREDENTIAL_GENERATION, "18446744073709551614"),
        (CREDENTIAL_GENERATION, "4294967296"),
        (CREDENTIAL_USER, ""),
        (CREDENTIAL_USER, "a b"),
        (CREDENTIAL_USER, "a\nSigned-off-by: x"),
    ] {
        let e = with(key, value);
        assert_eq!(e.key(), key, "{key}={value:?}: {e}");
    }
    for key in [CREDENTIAL_USER, CREDENTIAL_GENERATION] {
        let mut a = minted(3).to_annotations();
        a.remove(key);
        assert_eq!(
            Recorded::from_annotations(&a).unwrap_err(),
            AnnotationError::Missing { key }
        );
    }
}

fn error_with(key: &str, value: &str) -> AnnotationError {
    let mut a = sample().to_annotations();
    a.insert(key.into(), value.into());
    Recorded::from_annotations(&a).unwrap_err()
}

#[test]
fn annotations_round_trip() {
    let r = sample();
    let a = r.to_annotations();
    assert_eq!(a[CLIENT_CERT_NOT_AFTER], "2030-03-17T17:46:40Z");
    // One CA: the bundle's fingerprint is the CA's, ca-data the earlier format.
    assert_eq!(a[CA_BUNDLE_SHA256], a[CA_SHA256]);
    assert!(!a[CA_DATA].contains(','));
    assert_eq!(Recorded::from_annotations(&a).unwrap(), r);
}

#[test]
fn a_ca_bundle_round_trips_and_earlier_annotations_still_read() {
    let one = sample();
    let mut r = one.clone();
    r.ca_bundle.push(test_ca("new"));
    let a = r.to_annotations();
    assert_eq!(a[CA_DATA].split(',').count(), 2);
    assert_eq!(Recorded::from_annotations(&a).unwrap(), r);
    // Written before bundles: no ca-bundle-sha256, one CA in ca-data.
    let mut old = one.to_annotations();
    old.remove(CA_BUNDLE_SHA256);
    assert_eq!(Recorded::from_annotations(&old).unwrap(), one);
    // Two CAs without the bundle fingerprint is not the earlier format.
    let mut a = r.to_annotations();
    a.remove(CA_BUNDLE_SHA256);
    assert_eq!(Recorded::from_annotations(&a).unwrap_err().key(), CA_DATA);
    // A bundle whose fingerprint does not match is refused.
    let mut a = r.to_annotations();
    a.insert(CA_BUNDLE_SHA256.into(), format!("sha256:{HEX}"));
    assert!(matches!(
        Recorded::from_annotations(&a).unwrap_err(),
        AnnotationError::Disagree {
            other: CA_BUNDLE_SHA256,
            ..
        }
    ));
}

#[test]
fn damaged_annotations_are_named() {
    let mut a = sample().to_annotations();
    a.remove(SERVER);
    assert_eq!(
        Recorded::from_annotations(&a).unwrap_err(),
        AnnotationError::Missing { key: SERVER }
    );
    let e = error_with(ROTATED_AT, "yesterday");
    assert_eq!(e.key(), ROTATED_AT);
    assert!(e.to_string().contains("RFC 3339"), "{e}");
    let e = error_with(CA_SHA256, &format!("sha256:{}", HEX.replace('0', "1")));
    assert!(e.to_string().contains("disagree"), "{e}");
}

#[test]
fn every_annotation_is_validated() {
    let cases = [
        (SEALING_CERT_SHA256, "sha256:aéééééé"),
        (SEALING_CERT_SHA256, "sha256:ss"),
        (
            CLIENT_CERT_SHA256,
            &format!("sha256:{}", HEX.to_uppercase()),
        ),
        (CA_SHA256, HEX),
        (CONTENT_SHA256, "ab"),
        (CONTENT_SHA256, &format!("{HEX}0")),
        (SPOKE, "Dev"),
        (SPOKE, ""),
        (SPOKE, &"a".repeat(64)),
        (SERVER, "http://10.0.0.1:6443"),
        (SERVER, "https://user:pw@10.0.0.1:6443"),
        (SERVER, &format!("https://{}.org", "a".repeat(3000))),
        (SERVER, "https://10.0.0.1:6443/\u{1b}[2J\u{7}"),
        (SERVER, "https://10.0.0.1:6443/a\tb"),
        (SERVER, "https://10.0.0.1:6443\n"),
        (SERVER, "https://10.0.0.1:6443/\u{202e}x"),
        (CA_NOT_AFTER, "2030-13-01T00:00:00Z"),
        (CLIENT_CERT_NOT_AFTER, &"9".repeat(100)),
        (CA_DATA, "not base64!"),
        (CA_DATA, "AAAA"),
        (CA_DATA, &"A".repeat(MAX_CA_DATA + 4)),
    ];
    for (key, value) in cases {
        let e = error_with(key, value);
        assert_eq!(e.key(), key, "{value:?}: {e}");
    }
}

#[test]
fn malformed_values_are_measured_not_quoted() {
    let token = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB";
    for (key, value) in [
        (
            SEALING_CERT_SHA256,
            format!("sha256:\n{}", "é".repeat(10_000)),
        ),
        (SERVER, format!("https://{token}.example.org\n")),
        (ROTATED_AT, format!("AGE-SECRET-KEY-1{}", "Q".repeat(58))),
    ] {
        let text = error_with(key, &value).to_string();
        assert!(!text.contains('\n'), "{text}");
        assert!(text.len() < 200, "{text}");
        assert!(text.contains(&format!("{} bytes", value.len())), "{text}");
        for secret in [token, "AGE-SECRET-KEY", "éé"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }
}

/// A probe report whose serving certificate is issued by `issuer`.
fn served_by(issuer: &rcgen::Issuer<'_, rcgen::KeyPair>, issuer_der: &[u8]) -> ProbeReport {
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["kubernetes".to_string()])
        .unwrap()
        .signed_by(&key, issuer)
        .unwrap();
    ProbeReport {
        server: "10.0.0.1:6443".into(),
        host: "10.0.0.1".into(),
        chain: vec![leaf.der().to_vec(), issuer_der.to_vec()],
        serving_sha256: Fingerprint::of(leaf.der()),
        not_before: OffsetDateTime::now_utc(),
        not_after: OffsetDateTime::now_utc(),
        dns_names: vec!["kubernetes".into()],
        ip_addresses: vec![],
        address_in_sans: false,
    }
}

#[test]
fn a_serving_certificate_from_any_recorded_ca_verifies() {
    let issuer = |cn: &str| {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap()
    };
    let (old, new, other) = (issuer("old"), issuer("new"), issuer("other"));
    let mut r = sample();
    r.ca_bundle = vec![old.der().to_vec(), new.der().to_vec()];
    assert_eq!(r.check_ca(&served_by(&old, old.der())), CaCheck::Verified);
    assert_eq!(r.check_ca(&served_by(&new, new.der())), CaCheck::Verified);
    assert_eq!(
        r.check_ca(&served_by(&other, other.der())),
        CaCheck::NotSignedByCa
    );
    r.ca_bundle = vec![b"junk".to_vec()];
    assert_eq!(r.check_ca(&served_by(&old, old.der())), CaCheck::UnusableCa);
}

/// k3s's rotate-default-ca-certs.sh: a new root, the same root cross-signed by the
/// old, a new CA under the new root; the server presents all of them and the old
/// root. Its chain still reaches the old root, but the CA changed (issue 30).
#[test]
fn a_new_root_cross_signed_by_the_recorded_one_is_a_changed_ca() {
    let ca = |cn: &str| {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p
    };
    let old = rcgen::CertifiedIssuer::self_signed(
        ca("k3s-server-ca@1"),
        rcgen::KeyPair::generate().unwrap(),
    )
    .unwrap();
    let root_key = rcgen::KeyPair::generate().unwrap();
    let xsigned = ca("k3s-server-root@2").signed_by(&root_key, &old).unwrap();
    let root = rcgen::CertifiedIssuer::self_signed(ca("k3s-server-root@2"), root_key).unwrap();
    let new = rcgen::CertifiedIssuer::signed_by(
        ca("k3s-server-ca@2"),
        rcgen::KeyPair::generate().unwrap(),
        &root,
    )
    .unwrap();
    let bundle = [new.der(), root.der(), xsigned.der(), old.der()].map(|c| c.to_vec());
    let mut probe = served_by(&new, new.der());
    probe.chain.extend(bundle[1..].iter().cloned());
    let mut r = sample();
    r.ca_bundle = vec![old.der().to_vec()];
    // Signature by signature the chain does reach the recorded CA.
    let old_only = crate::spoke::chain::judge(&probe.chain, &[old.der().to_vec()]);
    assert_eq!(old_only.roots_outside, [Fingerprint::of(root.der())]);
    assert_eq!(r.check_ca(&probe), CaCheck::RootChanged);
    // Committed after the rotation: the new bundle holds every root presented.
    r.ca_bundle = bundle.to_vec();
    assert_eq!(r.check_ca(&probe), CaCheck::Verified);
    // A server presenting its own recorded root alone is the recorded CA.
    r.ca_bundle = vec![old.der().to_vec()];
    assert_eq!(r.check_ca(&served_by(&old, old.der())), CaCheck::Verified);
}
