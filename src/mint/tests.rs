use super::*;

#[test]
fn a_denied_or_failed_condition_is_refused_with_its_reason_escaped() {
    let csr = |kind: &str, status: &str| {
        json!({"status": {"conditions": [
            {"type": "Approved", "status": "True"},
            {"type": kind, "status": status, "reason": "PolicyDenied\nforged", "message": "by kyverno"},
        ]}})
    };
    let e = refused(&csr("Denied", "True"), "c", "u").expect("denied");
    let text = e.to_string();
    assert!(
        text.contains("CSR c is Denied (PolicyDenied forged: by kyverno)"),
        "{text}"
    );
    assert!(!text.contains('\n'));
    assert!(refused(&csr("Failed", "True"), "c", "u").is_some());
    assert!(refused(&csr("Denied", "False"), "c", "u").is_none());
    assert!(refused(&json!({"status": {}}), "c", "u").is_none());
}

#[test]
fn binding_names_never_collide_across_hubs_and_spokes() {
    let name = |hub, spoke, g| binding_name(&Scope { hub, spoke }, g);
    assert_eq!(name("hub", "edge", 3), "spokekeeper.hub.edge.g3");
    // The pairs a dash-joined name would confuse.
    assert_ne!(name("a-b", "c", 1), name("a", "b-c", 1));
    // Nor with an earlier version's spokekeeper-hub-gN.
    assert!(!name("hub", "g1", 2).starts_with("spokekeeper-"));
    // The longest hub_id (20) and spoke name (63) and generation fit a name (253).
    let long = name(&"h".repeat(20), &"s".repeat(63), 4_294_967_295);
    assert!(long.len() <= 253, "{}", long.len());
}

#[test]
fn each_mint_of_one_generation_is_its_own_user() {
    let policy = CredentialPolicy::default();
    let req = Request {
        spoke: "edge",
        policy: &policy,
        generation: 1,
        call_timeout: Duration::from_secs(1),
        sign_timeout: Duration::from_secs(1),
    };
    let users: std::collections::BTreeSet<String> =
        (0..64).map(|_| fresh_user(&req).unwrap()).collect();
    assert_eq!(users.len(), 64);
    for u in &users {
        assert!(policy.is_minted_user("edge", 1, u), "{u}");
        assert!(u.len() <= 64, "{u}");
    }
}

#[test]
fn the_certificate_must_be_bounded_base64_pem() {
    assert!(
        chain(&"A".repeat(MAX_CERTIFICATE + 4), "c")
            .unwrap_err()
            .to_string()
            .contains("bytes")
    );
    assert!(
        chain("%%%", "c")
            .unwrap_err()
            .to_string()
            .contains("not base64")
    );
    assert!(chain(&B64.encode("no pem here"), "c").is_err());
}

use rcgen::{CertifiedIssuer, ExtendedKeyUsagePurpose as Eku, KeyPair};

fn ca(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
    ca_params(cn, None)
}

/// A CA named `cn`, self-signed, or signed by `parent` (an intermediate).
fn ca_params(
    cn: &str,
    parent: Option<&CertifiedIssuer<'static, KeyPair>>,
) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    match parent {
        None => CertifiedIssuer::self_signed(p, key).unwrap(),
        Some(parent) => CertifiedIssuer::signed_by(p, key, parent).unwrap(),
    }
}

/// A certificate from `issuer` for `subject_key`, with these CNs, organization and
/// extended key usages.
fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    cns: &[&str],
    org: Option<&str>,
    eku: &[Eku],
    subject_key: &impl rcgen::PublicKeyData,
) -> CertInfo {
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    for (i, cn) in cns.iter().enumerate() {
        // rcgen keeps one value per type: a second CN goes under its bare OID.
        let kind = match i {
            0 => rcgen::DnType::CommonName,
            _ => rcgen::DnType::CustomDnType(vec![2, 5, 4, 3]),
        };
        p.distinguished_name.push(kind, *cn);
    }
    if let Some(o) = org {
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, o);
    }
    p.extended_key_usages = eku.to_vec();
    p.use_authority_key_identifier_extension = true;
    let der = p.signed_by(subject_key, issuer).unwrap().der().to_vec();
    CertInfo::from_der(&der).unwrap()
}

fn info(ca: &CertifiedIssuer<'static, KeyPair>) -> CertInfo {
    CertInfo::from_der(ca.der()).unwrap()
}

/// The admin credential's client chain, as k3s writes it: its leaf, then its CA.
fn admin_chain(ca: &CertifiedIssuer<'static, KeyPair>) -> Vec<CertInfo> {
    let key = KeyPair::generate().unwrap();
    let admin = leaf(
        ca,
        &["system:admin"],
        Some("system:masters"),
        &[Eku::ClientAuth],
        &key,
    );
    vec![admin, info(ca)]
}

const USER: &str = "spokekeeper:hub:1";

#[test]
fn the_leaf_must_be_for_our_key_and_user_alone() {
    let key = MintKey::generate().unwrap();
    let client_ca = ca("k3s-client-ca");
    let admin = admin_chain(&client_ca);
    let check = |chain: Vec<CertInfo>, user: &str| {
        check_certificate(&chain, &key, user, "c", &admin).map(|(_, ca)| ca)
    };
    let ok = leaf(&client_ca, &[USER], None, &[Eku::ClientAuth], &key);
    let issuing = check(vec![ok.clone()], USER).unwrap();
    assert_eq!(issuing, Some(info(&client_ca)));
    let e = check(vec![ok], "spokekeeper:hub:2").unwrap_err();
    assert!(
        e.to_string().contains("not CN=\"spokekeeper:hub:2\""),
        "{e}"
    );
    let other = MintKey::generate().unwrap();
    let e = check(
        vec![leaf(&client_ca, &[USER], None, &[Eku::ClientAuth], &other)],
        USER,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not for the key"), "{e}");
}

#[test]
fn a_leaf_with_an_organization_or_a_second_cn_is_refused() {
    let key = MintKey::generate().unwrap();
    let client_ca = ca("k3s-client-ca");
    let admin = admin_chain(&client_ca);
    let masters = leaf(
        &client_ca,
        &[USER],
        Some("system:masters"),
        &[Eku::ClientAuth],
        &key,
    );
    let e = check_certificate(&[masters], &key, USER, "c", &admin).unwrap_err();
    assert!(e.to_string().contains("O=[\"system:masters\"]"), "{e}");
    // Any organization is a group.
    let team = leaf(&client_ca, &[USER], Some("team"), &[Eku::ClientAuth], &key);
    assert!(check_certificate(&[team], &key, USER, "c", &admin).is_err());
    let two = leaf(
        &client_ca,
        &[USER, "spokekeeper:hub:9"],
        None,
        &[Eku::ClientAuth],
        &key,
    );
    let e = check_certificate(&[two], &key, USER, "c", &admin).unwrap_err();
    assert!(
        e.to_string().contains(
            "CN=[\"spokekeeper:hub:1\", \"spokekeeper:hub:9\"] O=[], not CN=\"spokekeeper:hub:1\" alone"
        ),
        "{e}"
    );
}

#[test]
fn a_leaf_without_client_auth_is_refused() {
    let key = MintKey::generate().unwrap();
    let client_ca = ca("k3s-client-ca");
    let admin = admin_chain(&client_ca);
    for eku in [&[Eku::ServerAuth][..], &[]] {
        let cert = leaf(&client_ca, &[USER], None, eku, &key);
        let e = check_certificate(&[cert], &key, USER, "c", &admin).unwrap_err();
        assert!(
            e.to_string()
                .contains("its extended key usage does not include clientAuth"),
            "{eku:?}: {e}"
        );
    }
    let both = leaf(
        &client_ca,
        &[USER],
        None,
        &[Eku::ServerAuth, Eku::ClientAuth],
        &key,
    );
    assert!(check_certificate(&[both], &key, USER, "c", &admin).is_ok());
}

#[test]
fn a_leaf_from_another_ca_is_refused_even_under_the_same_name() {
    let key = MintKey::generate().unwrap();
    let client_ca = ca("k3s-client-ca");
    let admin = admin_chain(&client_ca);
    for other in [ca("someone-else"), ca("k3s-client-ca")] {
        let cert = leaf(&other, &[USER], None, &[Eku::ClientAuth], &key);
        let e =
            check_certificate(std::slice::from_ref(&cert), &key, USER, "c", &admin).unwrap_err();
        assert!(
            e.to_string()
                .contains("not signed by the client CA that issued the admin credential"),
            "{e}"
        );
        // Returning the other CA beside it changes nothing: it does not chain to
        // the admin credential's.
        let e = check_certificate(&[cert, info(&other)], &key, USER, "c", &admin).unwrap_err();
        assert!(
            e.to_string().contains("nor by a CA that chains to it"),
            "{e}"
        );
    }
}

#[test]
fn a_leaf_from_an_intermediate_of_the_admin_ca_is_accepted_when_returned() {
    let key = MintKey::generate().unwrap();
    let client_ca = ca("k3s-client-ca");
    let admin = admin_chain(&client_ca);
    let intermediate = ca_params("k3s-client-intermediate", Some(&client_ca));
    let cert = leaf(&intermediate, &[USER], None, &[Eku::ClientAuth], &key);
    let (_, issuing) = check_certificate(
        &[cert.clone(), info(&intermediate)],
        &key,
        USER,
        "c",
        &admin,
    )
    .unwrap();
    assert_eq!(issuing, Some(info(&intermediate)));
    // Not returned, it cannot be verified: refused.
    assert!(check_certificate(&[cert], &key, USER, "c", &admin).is_err());
}

#[test]
fn without_the_ca_at_hand_the_leaf_must_name_the_admin_certificates_issuer_and_key() {
    let key = MintKey::generate().unwrap();
    let client_ca = ca("kubernetes");
    // kubeadm's admin.conf: the leaf alone.
    let admin = admin_chain(&client_ca)[..1].to_vec();
    let ok = leaf(&client_ca, &[USER], None, &[Eku::ClientAuth], &key);
    let (_, issuing) = check_certificate(&[ok], &key, USER, "c", &admin).unwrap();
    assert_eq!(issuing, None, "nothing to verify against");
    for other in [ca("someone-else"), ca("kubernetes")] {
        let cert = leaf(&other, &[USER], None, &[Eku::ClientAuth], &key);
        let e = check_certificate(&[cert], &key, USER, "c", &admin).unwrap_err();
        assert!(
            e.to_string()
                .contains("not by the client CA that issued the admin credential"),
            "{e}"
        );
    }
}
