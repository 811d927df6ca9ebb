use super::*;

fn minted(generation: u64) -> Recorded {
    Recorded {
        credential: crate::rotate::state::RecordedCredential {
            mode: CredentialMode::Minted,
            user: Some(format!("spokekeeper:hub:dev:{generation}:0a1b2c3d")),
            generation,
        },
        ..recorded()
    }
}

const MINTED: &str = ", credential: {mode: minted, ttl: 30d, renew_before: 10d}";

const AGE_A: &str = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";
const AGE_B: &str = "age1lggyhqrw2nlhcxprm67z43rta597azn8gknawjehu9d9dl0jq3yqqvfafg";
const SOPS: &str = ", sealing: {format: sops}";

/// A sops output for `recipients`, as the file's metadata names them.
fn sops_file(recipients: &[&str]) -> Output {
    Output::Sops(SopsSecret {
        name: "dev-kubeconfig".into(),
        namespace: "flux-system".into(),
        labels: Default::default(),
        annotations: Default::default(),
        keys: vec!["value".into()],
        recipients: recipients.iter().map(|r| r.to_string()).collect(),
    })
}

fn sops_policy(recipients: &[&str]) -> Policy {
    Policy {
        sealed_to: SealedTo::Age(crate::seal::sops::recipients_fingerprint(recipients)),
        ..policy()
    }
}

fn sops_spoke() -> SpokeConfig {
    let text = format!(
        "repo: {{path: f}}\nsealing: {{cert: c, age_recipients: [{AGE_A}]}}\nspokes:\n  - {{name: dev, address: 10.0.0.1{SOPS}}}\n"
    );
    Config::parse(&text, "t.yaml", std::path::Path::new("/"))
        .unwrap()
        .spokes
        .remove(0)
}

#[test]
fn a_sops_file_for_other_recipients_is_re_encrypted() {
    let sp = sops_spoke();
    let mut r = recorded();
    r.sealed_to = SealedTo::Age(crate::seal::sops::recipients_fingerprint([AGE_A]));
    let file = sops_file(&[AGE_A]);
    assert_eq!(
        run(&sp, &file, &r, &sops_policy(&[AGE_A])),
        Decision::Healthy
    );
    // The same set in another order, or repeated, is no change.
    let both = sops_file(&[AGE_B, AGE_A, AGE_B]);
    assert_eq!(
        run(&sp, &both, &r, &sops_policy(&[AGE_A, AGE_B])),
        Decision::Healthy
    );
    // The file's own recipients decide, whatever its annotation records.
    assert_eq!(
        run(&sp, &file, &r, &sops_policy(&[AGE_A, AGE_B])),
        Decision::Rotate(Reason::RecipientsChanged {
            old: crate::seal::sops::recipients_fingerprint([AGE_A]),
            new: crate::seal::sops::recipients_fingerprint([AGE_A, AGE_B]),
        })
    );
    let d = run(&sp, &sops_file(&[AGE_B]), &r, &sops_policy(&[AGE_A]));
    let Decision::Rotate(reason) = d else {
        panic!("{d:?}")
    };
    assert_eq!(reason.kind(), "recipients-changed");
    assert!(
        reason
            .to_string()
            .starts_with("age recipients changed sha256:"),
        "{reason}"
    );
    // The client certificate still comes first.
    r.client_not_after = Some(now() + time::Duration::days(2));
    assert!(matches!(
        run(&sp, &sops_file(&[AGE_B]), &r, &sops_policy(&[AGE_A])),
        Decision::Rotate(Reason::ClientExpiring { .. })
    ));
}

#[test]
fn switching_format_is_a_configuration_change() {
    let mut r = recorded();
    assert_eq!(
        run(
            &sops_spoke(),
            &sealed(Scope::Strict),
            &r,
            &sops_policy(&[AGE_A])
        ),
        Decision::Rotate(Reason::ConfigChanged {
            detail: "format sealed-secrets -> sops".into()
        })
    );
    r.sealed_to = SealedTo::Age(crate::seal::sops::recipients_fingerprint([AGE_A]));
    assert_eq!(
        run(&spoke(""), &sops_file(&[AGE_A]), &r, &policy()),
        Decision::Rotate(Reason::ConfigChanged {
            detail: "format sops -> sealed-secrets".into()
        })
    );
    // A sops Secret has no Sealed Secrets scope to drift.
    let scoped = format!("{SOPS}, scope: cluster-wide");
    let mut sp = spoke(&scoped.replace(SOPS, ""));
    sp.format = crate::config::SealingFormat::Sops;
    assert_eq!(
        run(&sp, &sops_file(&[AGE_A]), &r, &sops_policy(&[AGE_A])),
        Decision::Healthy
    );
}

#[test]
fn minted_renews_on_its_own_schedule() {
    let (sp, s) = (spoke(MINTED), sealed(Scope::Strict));
    let mut r = minted(4);
    // 29 days left: the global 30d would rotate; credential.renew_before is 10d.
    r.client_not_after = Some(now() + time::Duration::days(29));
    assert_eq!(run(&sp, &s, &r, &policy()), Decision::Healthy);
    r.client_not_after = Some(now() + time::Duration::days(9));
    assert!(matches!(
        run(&sp, &s, &r, &policy()),
        Decision::Rotate(Reason::ClientExpiring { .. })
    ));
    // A sealing key change still rotates a minted credential.
    r.client_not_after = Some(now() + time::Duration::days(20));
    let other_key = Policy {
        sealed_to: SealedTo::Cert(NEW_SEAL),
        ..policy()
    };
    assert!(matches!(
        run(&sp, &s, &r, &other_key),
        Decision::Rotate(Reason::SealingKeyChanged { .. })
    ));
}

#[test]
fn switching_mode_or_user_is_a_configuration_change() {
    let s = sealed(Scope::Strict);
    assert_eq!(
        run(&spoke(MINTED), &s, &recorded(), &policy()),
        Decision::Rotate(Reason::ConfigChanged {
            detail: "credential.mode extracted -> minted".into()
        })
    );
    assert_eq!(
        run(&spoke(""), &s, &minted(2), &policy()),
        Decision::Rotate(Reason::ConfigChanged {
            detail: "credential.mode minted -> extracted".into()
        })
    );
    assert_eq!(
        run(&spoke(MINTED), &s, &minted(2), &policy()),
        Decision::Healthy
    );
    // An earlier version's user (unscoped, no per-mint suffix) is minted again at once.
    let mut legacy = minted(2);
    legacy.credential.user = Some("spokekeeper:hub:2".into());
    assert_eq!(
        run(&spoke(MINTED), &s, &legacy, &policy()),
        Decision::Rotate(Reason::ConfigChanged {
            detail: "credential.user spokekeeper:hub:2 -> spokekeeper:{hub}:{spoke}:{generation}"
                .into()
        })
    );
    let renamed = spoke(", credential: {mode: minted, user: \"hub-{generation}\"}");
    assert_eq!(
        run(&renamed, &s, &minted(2), &policy()),
        Decision::Rotate(Reason::ConfigChanged {
            detail: "credential.user spokekeeper:hub:dev:2:0a1b2c3d -> hub-{generation}".into()
        })
    );
}

fn probe_report() -> Result<ProbeReport, ProbeError> {
    Ok(ProbeReport {
        server: "10.0.0.1:6443".into(),
        host: "10.0.0.1".into(),
        chain: vec![],
        serving_sha256: Fingerprint::from_digest([6; 32]),
        not_before: now(),
        not_after: now() + time::Duration::days(300),
        dns_names: vec![],
        ip_addresses: vec![],
        address_in_sans: true,
    })
}

fn judged(check: CaCheck) -> Judged {
    let roots_outside = match check {
        CaCheck::RootChanged => vec![Fingerprint::from_digest([7; 32])],
        _ => vec![],
    };
    Judged {
        check,
        roots_outside,
    }
}

/// A root outside the recorded bundle re-extracts once; once seen (an extraction
/// found the node's bundle unchanged) it is no reason, and any other rule outranks it.
#[test]
fn a_root_outside_the_bundle_is_a_reason_until_seen() {
    let (sp, s, r) = (spoke(""), sealed(Scope::Strict), recorded());
    let probe = probe_report();
    let at = |check: CaCheck, r: &Recorded, p: &Policy| {
        let ca = judged(check);
        let seen = Observed {
            committed: Some(Ok((&s, r))),
            probe: Some(&probe),
            ca: Some(&ca),
        };
        decide(&sp, &seen, p)
    };
    let root = Decision::Rotate(Reason::RootChanged { old: r.ca_sha256 });
    assert_eq!(at(CaCheck::RootChanged, &r, &policy()), root);
    assert_eq!(at(CaCheck::Verified, &r, &policy()), Decision::Healthy);
    let settled = Policy {
        roots_seen: true,
        ..policy()
    };
    assert_eq!(at(CaCheck::RootChanged, &r, &settled), Decision::Healthy);
    let due = Policy {
        verify_due: true,
        roots_seen: true,
        ..policy()
    };
    assert_eq!(
        at(CaCheck::RootChanged, &r, &due),
        Decision::Rotate(Reason::Periodic)
    );
    // Outranks a periodic check; is outranked by an expiring client certificate.
    let unseen_due = Policy {
        verify_due: true,
        ..policy()
    };
    assert_eq!(at(CaCheck::RootChanged, &r, &unseen_due), root);
    let mut expiring = recorded();
    expiring.client_not_after = Some(now() + time::Duration::days(2));
    assert!(matches!(
        at(CaCheck::RootChanged, &expiring, &policy()),
        Decision::Rotate(Reason::ClientExpiring { .. })
    ));
    // A chain not signed by the recorded CA is a changed CA, seen roots or not.
    assert_eq!(
        at(CaCheck::NotSignedByCa, &r, &settled),
        Decision::Rotate(Reason::CaChanged { old: r.ca_sha256 })
    );
    assert_eq!(
        Reason::RootChanged { old: r.ca_sha256 }.kind(),
        "root-changed"
    );
}

/// After extracting for a root outside the bundle: the node's bundle unchanged is
/// nothing to commit, in either mode; a new bundle is committed as a changed CA.
#[test]
fn a_root_outside_the_bundle_commits_only_a_new_bundle() {
    let old = Fingerprint::from_digest([1; 32]);
    let mut prev = recorded();
    prev.ca_bundle = vec![b"old".to_vec()];
    let mut rotated = recorded();
    rotated.ca_bundle = vec![b"old".to_vec(), b"new root".to_vec()];
    rotated.content_sha256 = Fingerprint::from_digest([8; 32]);
    for mode in [CredentialMode::Extracted, CredentialMode::Minted] {
        let reason = Reason::RootChanged { old };
        assert_eq!(
            after_extraction(reason.clone(), Some(&prev), &prev, mode),
            Extracted::RootUnheld
        );
        assert_eq!(
            after_extraction(reason, Some(&prev), &rotated, mode),
            Extracted::Commit(Reason::CaChanged { old })
        );
    }
    // An expiring client certificate the node did not renew, but a new bundle: committed.
    let mut same_client = rotated.clone();
    same_client.client_sha256 = prev.client_sha256;
    let expiring = Reason::ClientExpiring { not_after: now() };
    assert_eq!(
        after_extraction(
            expiring.clone(),
            Some(&prev),
            &same_client,
            CredentialMode::Extracted
        ),
        Extracted::Commit(expiring)
    );
}

#[test]
fn after_extraction_compares_what_the_node_serves_with_the_commit() {
    let prev = recorded();
    let same = recorded();
    let mut renewed = recorded();
    renewed.client_sha256 = Some(Fingerprint::from_digest([9; 32]));
    renewed.content_sha256 = Fingerprint::from_digest([8; 32]);
    let expiring = Reason::ClientExpiring { not_after: now() };
    let ex = CredentialMode::Extracted;
    let after = |r: Reason, p: Option<&Recorded>, f: &Recorded, m| after_extraction(r, p, f, m);
    assert_eq!(
        after(Reason::Periodic, Some(&prev), &same, ex),
        Extracted::Unchanged
    );
    assert_eq!(
        after(Reason::Periodic, Some(&prev), &renewed, ex),
        Extracted::Commit(Reason::ContentChanged)
    );
    assert_eq!(
        after(expiring.clone(), Some(&prev), &same, ex),
        Extracted::NotRenewed
    );
    assert_eq!(
        after(expiring.clone(), Some(&prev), &renewed, ex),
        Extracted::Commit(expiring.clone())
    );
    // Minted: the fresh credential is a new mint, never compared with the commit.
    let mi = CredentialMode::Minted;
    assert_eq!(
        after(Reason::Periodic, Some(&prev), &same, mi),
        Extracted::Commit(Reason::ContentChanged)
    );
    assert_eq!(
        after(expiring.clone(), Some(&prev), &same, mi),
        Extracted::Commit(expiring)
    );
    // Nothing committed: the reason stands.
    assert_eq!(
        after(Reason::Periodic, None, &same, ex),
        Extracted::Commit(Reason::Periodic)
    );
    assert_eq!(
        after(Reason::Forced, Some(&prev), &same, ex),
        Extracted::Commit(Reason::Forced)
    );
}
