use super::*;

fn federated_spoke() -> SpokeConfig {
    let text = "repo: {path: f}\nsealing: {cert: c}\nhub: {}\nspokes:\n  - {name: dev, address: 10.0.0.1, credential: {mode: federated, federated: {issuer: \"https://hub.example\"}}}\n";
    Config::parse(text, "t.yaml", std::path::Path::new("/"))
        .unwrap()
        .spokes
        .remove(0)
}

fn config_map() -> Output {
    Output::ConfigMap(crate::flux::remote::Remote {
        name: "dev-kubeconfig".into(),
        namespace: "flux-system".into(),
        ..Default::default()
    })
}

/// What a federated tick recorded: no client certificate, nothing sealed, its trust.
fn trusted(spoke: &SpokeConfig) -> Recorded {
    Recorded {
        client_sha256: None,
        client_not_after: None,
        sealed_to: SealedTo::Nothing,
        credential: crate::mint::RecordedCredential {
            mode: CredentialMode::Federated,
            user: None,
            generation: 0,
        },
        trust_sha256: trust(spoke),
        ..recorded()
    }
}

/// What the spoke's file says of the hub, its issuer CA files unread.
fn trust(spoke: &SpokeConfig) -> Option<Fingerprint<crate::fingerprint::Content>> {
    let cas = crate::federate::IssuerCas::default();
    spoke
        .credential
        .federated
        .as_ref()
        .map(|p| crate::federate::trust_fingerprint(p, &cas))
}

fn federated_policy() -> Policy {
    Policy {
        sealed_to: SealedTo::Nothing,
        trust_sha256: trust(&federated_spoke()),
        ..policy()
    }
}

#[test]
fn a_trusted_federated_spoke_is_healthy_whatever_its_sealing_format() {
    let sp = federated_spoke();
    let p = federated_policy();
    assert_eq!(
        run(&sp, &config_map(), &trusted(&sp), &p),
        Decision::Healthy
    );
    // No client certificate is recorded: nothing expires, even far past renew_before.
    let late = Policy {
        now: now() + time::Duration::days(400),
        ..federated_policy()
    };
    assert_eq!(
        run(&sp, &config_map(), &trusted(&sp), &late),
        Decision::Healthy
    );
    let due = Policy {
        verify_due: true,
        ..federated_policy()
    };
    assert_eq!(
        run(&sp, &config_map(), &trusted(&sp), &due),
        Decision::Rotate(Reason::Periodic)
    );
}

#[test]
fn a_changed_trust_or_mode_rewrites_the_spokes_file() {
    let sp = federated_spoke();
    let p = federated_policy();
    let mut other = trusted(&sp);
    other.trust_sha256 = Some(Fingerprint::from_digest([9; 32]));
    assert_eq!(
        run(&sp, &config_map(), &other, &p),
        Decision::Rotate(Reason::ConfigChanged {
            detail: "credential.federated".into()
        })
    );
    // The tick's trust moved (a next issuer, an edited issuer CA file): rewritten.
    let moved = Policy {
        trust_sha256: Some(Fingerprint::from_digest([5; 32])),
        ..federated_policy()
    };
    assert_eq!(
        run(&sp, &config_map(), &trusted(&sp), &moved),
        Decision::Rotate(Reason::ConfigChanged {
            detail: "credential.federated".into()
        })
    );
    let mut none = trusted(&sp);
    none.trust_sha256 = None;
    assert!(matches!(
        run(&sp, &config_map(), &none, &p),
        Decision::Rotate(Reason::ConfigChanged { .. })
    ));
    // A sealed spoke moving to federated, and back.
    assert_eq!(
        run(&sp, &sealed(Scope::Strict), &recorded(), &p),
        Decision::Rotate(Reason::ConfigChanged {
            detail: "credential.mode extracted -> federated".into()
        })
    );
    assert_eq!(
        run(&spoke(""), &config_map(), &trusted(&sp), &policy()),
        Decision::Rotate(Reason::ConfigChanged {
            detail: "credential.mode federated -> extracted".into()
        })
    );
}

#[test]
fn a_periodic_check_of_a_federated_spoke_commits_only_a_changed_configmap() {
    let sp = federated_spoke();
    let had = trusted(&sp);
    let mode = CredentialMode::Federated;
    assert_eq!(
        after_extraction(Reason::Periodic, Some(&had), &had, mode),
        Extracted::Unchanged
    );
    let mut moved = had.clone();
    moved.content_sha256 = Fingerprint::from_digest([8; 32]);
    assert_eq!(
        after_extraction(Reason::Periodic, Some(&had), &moved, mode),
        Extracted::Commit(Reason::ContentChanged)
    );
    // A new CA is committed as such, whatever the content comparison.
    let old = had.ca_sha256;
    assert_eq!(
        after_extraction(Reason::CaChanged { old }, Some(&had), &moved, mode),
        Extracted::Commit(Reason::CaChanged { old })
    );
}

#[test]
fn a_revoke_commits_as_revoked_with_the_content_unchanged() {
    let sp = federated_spoke();
    let had = trusted(&sp);
    let revoked = Reason::Revoked {
        generation: 0,
        found: vec![0],
        users: vec!["hub:system:serviceaccount:flux-system:kustomize-controller".into()],
    };
    let mode = CredentialMode::Federated;
    assert_eq!(
        after_extraction(revoked.clone(), Some(&had), &had, mode),
        Extracted::Commit(revoked)
    );
}

#[test]
fn a_refused_hub_token_rotates_a_healthy_federated_spoke_and_is_committed_as_such() {
    let sp = federated_spoke();
    let refused = Policy {
        trust_refused: Some("401".into()),
        ..federated_policy()
    };
    let why = Reason::TrustRefused {
        detail: "401".into(),
    };
    assert_eq!(
        run(&sp, &config_map(), &trusted(&sp), &refused),
        Decision::Rotate(why.clone())
    );
    // Before a periodic check: its reason is the refusal.
    let due = Policy {
        verify_due: true,
        ..refused
    };
    assert_eq!(
        run(&sp, &config_map(), &trusted(&sp), &due),
        Decision::Rotate(why.clone())
    );
    assert_eq!(why.kind(), "trust-refused");
    // The repair is committed even with the same ConfigMap: the hub is asked to
    // reconcile, and the commit says why.
    let had = trusted(&sp);
    let mode = CredentialMode::Federated;
    assert_eq!(
        after_extraction(why.clone(), Some(&had), &had, mode),
        Extracted::Commit(why)
    );
}
