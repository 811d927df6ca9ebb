use super::*;

#[test]
fn a_stuck_sealed_secret_raises_hub_not_ready() {
    use crate::hub::verify::{Check, Delivery, FoundBy, HubReport};
    let issuer = ca();
    let obs = Observation::new(
        "dev".into(),
        committed(recorded(issuer.der(), Some(far()), far())),
        Some(Ok(probe_by(&issuer, far()))),
    );
    let stuck = HubReport {
        delivery: Delivery::Synced(Check {
            ok: false,
            status: "False".into(),
            reason: Some("ErrUnsealFailed".into()),
            message: "no key could decrypt secret (value)".into(),
        }),
        secret: "flux-system/dev-kubeconfig".into(),
        found_by: FoundBy::Listed,
        list_error: None,
        consumers: Vec::new(),
        requested_at: None,
    };
    let tick = TickReport {
        spokes: vec![SpokeReport {
            spoke: "dev".into(),
            outcome: Outcome::Rotated {
                commit: "abc".into(),
            },
            reason: None,
            ca_sha256: None,
            ca_not_after: None,
            client_not_after: None,
            rotated_at: None,
            user: None,
            hub: Some(Box::new(stuck)),
            credential: None,
            revoked: Vec::new(),
            revoke_error: None,
            migration: None,
        }],
        pushed: true,
        repo_error: None,
        sealing: None,
        sealing_key: None,
        observed: Vec::new(),
        issuers: Default::default(),
    };
    let findings = with_tick(&[obs], &tick);
    let hub: Vec<_> = findings
        .iter()
        .filter(|f| f.subject == Subject::Hub)
        .collect();
    assert_eq!(hub.len(), 1, "{findings:?}");
    assert_eq!(hub[0].status, Status::Warning);
    assert_eq!(hub[0].alert, Some(AlertName::HubNotReady));
    assert!(
        hub[0]
            .description
            .contains("no key could decrypt secret (value)")
    );
    assert!(hub[0].description.contains("commit is kept"));
    assert_eq!(hub[0].severity(), Some("warning"));
}

#[test]
fn a_sops_file_the_hub_cannot_decrypt_raises_hub_not_ready_naming_the_decryption() {
    use crate::hub::verify::{Check, Delivery, FoundBy, HubReport};
    let failed = HubReport {
        delivery: Delivery::Decrypted(Check {
            ok: false,
            status: "DecryptionFailed".into(),
            reason: Some("BuildFailed".into()),
            message:
                "decryption failed for 'Secret.v1.[noGrp]/dev-kubeconfig': cannot get sops data key"
                    .into(),
        }),
        secret: "flux-system/dev-kubeconfig".into(),
        found_by: FoundBy::Listed,
        list_error: None,
        consumers: Vec::new(),
        requested_at: None,
    };
    let f = hub_finding(failed);
    assert_eq!(f.alert, Some(AlertName::HubNotReady));
    assert!(
        f.detail.starts_with("not decrypted: decryption failed"),
        "{f:?}"
    );
    assert!(f.description.contains("spec.decryption"), "{f:?}");
    assert!(
        !f.description.contains("Sealed Secrets controller"),
        "{f:?}"
    );
}

/// The hub finding of a tick where dev's credential was pushed and `hub` is what the
/// hub made of it.
fn hub_finding(hub: crate::hub::verify::HubReport) -> Finding {
    let issuer = ca();
    let obs = Observation::new(
        "dev".into(),
        committed(recorded(issuer.der(), Some(far()), far())),
        Some(Ok(probe_by(&issuer, far()))),
    );
    let mut report = SpokeReport::new(
        "dev",
        Outcome::Rotated {
            commit: "abc".into(),
        },
    );
    report.hub = Some(Box::new(hub));
    let tick = TickReport::of(vec![report]);
    let findings = with_tick(&[obs], &tick);
    let mut hub: Vec<Finding> = findings
        .into_iter()
        .filter(|f| f.subject == Subject::Hub)
        .collect();
    assert_eq!(hub.len(), 1, "{hub:?}");
    hub.remove(0)
}

#[test]
fn a_consumer_not_ready_is_named_and_no_consumer_only_warns() {
    use crate::hub::verify::{Check, ConsumerCheck, Delivery, FoundBy, HubReport};
    use crate::hub::{Consumer, Kind};
    let check = |ok: bool, message: &str| Check {
        ok,
        status: if ok { "True" } else { "False" }.into(),
        reason: None,
        message: message.into(),
    };
    let consumer = |kind, name: &str, ok, message| ConsumerCheck {
        consumer: Consumer {
            kind,
            namespace: "flux-system".into(),
            name: name.into(),
        },
        ready: check(ok, message),
        requested_at: None,
    };
    let report = |consumers| HubReport {
        delivery: Delivery::Synced(check(true, "unsealed")),
        secret: "flux-system/dev-kubeconfig".into(),
        found_by: FoundBy::Listed,
        list_error: None,
        consumers,
        requested_at: Some("2025-06-01T12:00:00Z".into()),
    };
    let f = hub_finding(report(vec![
        consumer(Kind::Kustomization, "dev", true, "Applied revision"),
        consumer(
            Kind::HelmRelease,
            "apps",
            false,
            "Helm upgrade failed: x509",
        ),
    ]));
    assert_eq!(f.status, Status::Warning);
    assert_eq!(f.alert, Some(AlertName::HubNotReady));
    assert!(
        f.description
            .contains("not ready: HelmRelease flux-system/apps (Helm upgrade failed: x509)"),
        "{}",
        f.description
    );
    assert!(
        f.description
            .contains("Check HelmRelease flux-system/apps ("),
        "{}",
        f.description
    );

    let f = hub_finding(report(Vec::new()));
    assert_eq!(f.status, Status::Warning, "nothing deploys with it");
    assert_eq!(f.alert, None, "a warning, not the HubNotReady alert");
    assert!(
        f.detail
            .contains("no Kustomization or HelmRelease in flux-system has spec.kubeConfig.secretRef.name dev-kubeconfig"),
        "{}",
        f.detail
    );

    let f = hub_finding(report(vec![consumer(
        Kind::Kustomization,
        "dev",
        true,
        "Applied revision",
    )]));
    assert_eq!(f.status, Status::Ok);
    assert_eq!(f.detail, "synced, ready: Kustomization flux-system/dev");
}

#[test]
fn a_pending_review_warns_and_alerts_once_a_broken_credential_waited_too_long() {
    let issuer = ca();
    let healthy = Observation::new(
        "dev".into(),
        committed(recorded(issuer.der(), Some(far()), far())),
        Some(Ok(probe_by(&issuer, far()))),
    );
    let never = Observation::new("dev".into(), Committed::Missing, None);
    let tick = |secs: u64| TickReport {
        spokes: vec![SpokeReport {
            spoke: "dev".into(),
            outcome: Outcome::Pending {
                branch: "spokekeeper/dev".into(),
                commit: None,
                pull_request: Some(crate::forge::PullRequest {
                    number: 7,
                    url: "https://github.com/org/fleet/pull/7".into(),
                    created_at: now() - time::Duration::seconds(secs as i64),
                }),
                change: None,
                pending_seconds: Some(secs),
            },
            reason: None,
            ca_sha256: None,
            ca_not_after: None,
            client_not_after: None,
            rotated_at: None,
            user: None,
            hub: None,
            credential: None,
            revoked: Vec::new(),
            revoke_error: None,
            migration: None,
        }],
        pushed: false,
        repo_error: None,
        sealing: None,
        sealing_key: None,
        observed: Vec::new(),
        issuers: Default::default(),
    };
    let review = |obs: &Observation, secs| {
        evaluate(
            &cfg(),
            std::slice::from_ref(obs),
            Some(&sealing(Some(far()))),
            now(),
            Some(&tick(secs)),
        )
        .into_iter()
        .find(|f| f.subject == Subject::Review)
        .unwrap()
    };
    let four_h = 4 * 3600;
    // The hub's credential works: waiting is only a warning, however long.
    let f = review(&healthy, 10 * four_h);
    assert_eq!((f.status, f.alert), (Status::Warning, None));
    assert!(
        f.detail.contains("pull/7") && f.detail.contains("1d 16h"),
        "{}",
        f.detail
    );
    // Broken (nothing usable committed): a warning until pending_review_after, then an alert.
    let f = review(&never, four_h);
    assert_eq!((f.status, f.alert), (Status::Warning, None));
    let f = review(&never, four_h + 1);
    assert_eq!(
        (f.status, f.alert, f.severity()),
        (
            Status::Critical,
            Some(AlertName::ReviewPending),
            Some("critical")
        )
    );
    assert!(
        f.description.contains("alerts.pending_review_after, 4h"),
        "{}",
        f.description
    );
}

#[test]
fn an_untrusted_sealing_certificate_is_one_critical_fleet_wide_alert() {
    let untrusted = crate::hub::cert::Untrusted {
        sha256: Fingerprint::from_digest([0xbb; 32]),
        expected: vec![Fingerprint::from_digest([0xaa; 32])],
        anchor: "committed",
        commit: Some("c0ffee".into()),
        error: "not trusted: the whole story".into(),
    };
    let mut tick = TickReport::of(vec![SpokeReport::new("dev", Outcome::Healthy)]);
    tick.sealing = Some(crate::hub::cert::CertReport {
        untrusted: Some(untrusted),
        ..crate::hub::cert::CertReport::new(Fingerprint::from_digest([0xbb; 32]))
    });
    let fs = with_tick(&[], &tick);
    let f: Vec<&Finding> = fs
        .iter()
        .filter(|f| f.alert == Some(AlertName::SealingCertUntrusted))
        .collect();
    assert_eq!(f.len(), 1, "{fs:?}");
    let f = f[0];
    assert_eq!((f.spoke.as_str(), f.severity()), ("", Some("critical")));
    for needle in ["sha256:bbbb", "sha256:aaaa", "c0ffee"] {
        assert!(f.summary.contains(needle), "{needle}: {}", f.summary);
    }
    assert_eq!(f.description, "not trusted: the whole story");
    // A trusted certificate raises nothing.
    tick.sealing = Some(crate::hub::cert::CertReport {
        trusted: true,
        ..crate::hub::cert::CertReport::new(Fingerprint::from_digest([0xaa; 32]))
    });
    let fs = with_tick(&[], &tick);
    assert!(
        fs.iter()
            .all(|f| f.alert != Some(AlertName::SealingCertUntrusted))
    );
}

#[test]
fn a_minted_certificate_is_named_by_user_and_generation_with_spokekeepers_own_advice() {
    let issuer = ca();
    let mut r = recorded(issuer.der(), Some(at(5 * DAY)), far());
    r.credential = crate::rotate::state::RecordedCredential {
        mode: crate::config::CredentialMode::Minted,
        user: Some("spokekeeper:hub:4".into()),
        generation: 4,
    };
    let grade = |r: Recorded| {
        let seen = Observation::new(
            "dev".into(),
            committed(r),
            Some(Ok(probe_by(&issuer, far()))),
        );
        evaluate(&cfg(), &[seen], Some(&sealing(Some(far()))), now(), None)
    };
    let fs = grade(r.clone());
    let f = find(&fs, Subject::Client);
    assert_eq!(f.status, Status::Critical);
    let minted = "minted for spokekeeper:hub:4 (generation 4)";
    for text in [&f.summary, &f.description, &f.detail] {
        assert!(text.contains(minted), "{text:?}");
    }
    assert!(f.description.contains("credential.renew_before"));
    assert!(
        !f.description.contains("kubeadm certs renew"),
        "a minted certificate is not renewed on the node: {}",
        f.description
    );
    let json = serde_json::to_value(f).unwrap();
    assert_eq!(
        json["credential"],
        serde_json::json!({"mode": "minted", "user": "spokekeeper:hub:4", "generation": 4})
    );

    // Extracted: the node's advice, and the mode alone.
    r.credential = Default::default();
    let fs = grade(r);
    let f = find(&fs, Subject::Client);
    assert!(f.description.contains("kubeadm certs renew"));
    assert!(!f.summary.contains("minted"));
    assert_eq!(
        serde_json::to_value(f).unwrap()["credential"],
        serde_json::json!({"mode": "extracted"})
    );
}

/// What the daemon grades after a tick: each spoke's committed SealedSecret without its
/// ciphertext and raw annotations, the probe without the presented chain and the record
/// without the bundle's DER (as the tick keeps it), each spoke's report found by
/// name in a tick listing them in another order. The findings are the same, byte for
/// byte, as from the whole observations.
#[test]
fn observations_without_ciphertext_and_a_reordered_tick_grade_as_the_whole_ones() {
    let issuer = ca();
    let names = ["a", "b", "c"];
    let whole = || -> Vec<Observation> {
        names
            .iter()
            .zip([far(), at(3 * DAY), at(-DAY)])
            .map(|(name, client)| {
                let mut committed = committed(recorded(issuer.der(), Some(client), far()));
                if let Committed::Recorded(r) = &mut committed
                    && let crate::rotate::observe::Output::SealedSecret(s) = &mut r.sealed
                {
                    s.encrypted_data
                        .insert("value".into(), "AgB0c2lwaGVydGV4dA==".into());
                }
                Observation::new(
                    (*name).into(),
                    committed,
                    Some(Ok(probe_by(&issuer, far()))),
                )
            })
            .collect()
    };
    let failed = SpokeReport::new(
        "b",
        Outcome::Failed(SpokeError::Extract(std::sync::Arc::new(
            crate::spoke::ExtractError::Ssh {
                target: "b".into(),
                detail: "ssh: connection refused".into(),
            },
        ))),
    );
    let tick = TickReport::of(vec![
        SpokeReport::new("c", Outcome::Healthy),
        failed,
        SpokeReport::new("a", Outcome::Healthy),
    ]);
    let full = evaluate(
        &cfg(),
        &whole(),
        Some(&sealing(Some(far()))),
        now(),
        Some(&tick),
    );
    let lean: Vec<Observation> = whole()
        .into_iter()
        .map(|o| o.without_ciphertext(false))
        .collect();
    let graded = evaluate(
        &cfg(),
        &lean,
        Some(&sealing(Some(far()))),
        now(),
        Some(&tick),
    );
    let json = |f: &[Finding]| serde_json::to_string(f).unwrap();
    assert_eq!(json(&graded), json(&full));
    // Each spoke's rotation finding is its own report's: b failed, a and c did not.
    let rotation: Vec<(&str, Status)> = graded
        .iter()
        .filter(|f| f.subject == Subject::Rotation)
        .map(|f| (f.spoke.as_str(), f.status))
        .collect();
    assert_eq!(rotation.len(), 3, "{rotation:?}");
    for (spoke, status) in rotation {
        assert_eq!(status == Status::Ok, spoke != "b", "{spoke}: {status:?}");
    }
}
