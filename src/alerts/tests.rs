//! Every grading rule at its boundaries.

use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use time::OffsetDateTime;

use super::*;
use crate::fingerprint::Fingerprint;
use crate::rotate::observe::{Invalid, Record};
use crate::rotate::state::{AnnotationError, Recorded};
use crate::rotate::{Outcome, SpokeError, SpokeReport};
use crate::seal::SealedSecret;
use crate::spoke::{ProbeError, ProbeReport};

const DAY: i64 = 86_400;

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

fn at(secs: i64) -> OffsetDateTime {
    now() + time::Duration::seconds(secs)
}

/// The findings for `seen` after `tick`, the sealing certificate far from expiry.
fn with_tick(seen: &[Observation], tick: &TickReport) -> Vec<Finding> {
    evaluate(&cfg(), seen, Some(&sealing(Some(far()))), now(), Some(tick))
}

fn cfg() -> AlertsConfig {
    AlertsConfig {
        warn_before: Duration::from_secs(30 * DAY as u64),
        critical_before: Duration::from_secs(7 * DAY as u64),
        alertmanager: None,
        webhook: None,
        pending_review_after: Duration::from_secs(4 * 3600),
        flux: None,
    }
}

fn ca() -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

/// A probe that saw a serving certificate signed by `issuer`, valid until `not_after`.
fn probe_by(issuer: &CertifiedIssuer<'static, KeyPair>, not_after: OffsetDateTime) -> ProbeReport {
    let p = CertificateParams::new(vec!["kubernetes".to_string()]).unwrap();
    let leaf = p.signed_by(&KeyPair::generate().unwrap(), issuer).unwrap();
    ProbeReport {
        server: "127.0.0.9:6443".into(),
        host: "127.0.0.9".into(),
        chain: vec![leaf.der().to_vec()],
        serving_sha256: Fingerprint::of(leaf.der()),
        not_before: at(-DAY),
        not_after,
        dns_names: vec!["kubernetes".into()],
        ip_addresses: vec![],
        address_in_sans: false,
    }
}

fn recorded(
    ca_der: &[u8],
    client: Option<OffsetDateTime>,
    ca_not_after: OffsetDateTime,
) -> Recorded {
    Recorded {
        spoke: "dev".into(),
        server: "https://127.0.0.9:6443".into(),
        ca_sha256: Fingerprint::of(ca_der),
        ca_bundle: vec![ca_der.to_vec()],
        ca_not_after,
        client_sha256: client.map(|_| Fingerprint::of(b"client")),
        client_not_after: client,
        content_sha256: Fingerprint::of(b"content"),
        sealed_to: crate::rotate::state::SealedTo::Cert(Fingerprint::of(b"sealing")),
        rotated_at: at(-DAY),
        credential: Default::default(),
    }
}

fn sealing(not_after: Option<OffsetDateTime>) -> SealingCert {
    SealingCert {
        source: "keys/sealed-secrets.pem".into(),
        not_after,
    }
}

fn far() -> OffsetDateTime {
    at(3650 * DAY)
}

/// One spoke, all dates far away unless given.
struct Spoke {
    client: Option<OffsetDateTime>,
    ca_not_after: OffsetDateTime,
    serving: OffsetDateTime,
    sealing: Option<OffsetDateTime>,
}

impl Default for Spoke {
    fn default() -> Self {
        Spoke {
            client: Some(far()),
            ca_not_after: far(),
            serving: far(),
            sealing: Some(far()),
        }
    }
}

fn eval(s: Spoke) -> Vec<Finding> {
    let issuer = ca();
    let seen = Observation::new(
        "dev".into(),
        committed(recorded(issuer.der(), s.client, s.ca_not_after)),
        Some(Ok(probe_by(&issuer, s.serving))),
    );
    evaluate(&cfg(), &[seen], Some(&sealing(s.sealing)), now(), None)
}

fn find(fs: &[Finding], subject: Subject) -> &Finding {
    fs.iter()
        .find(|f| f.subject == subject)
        .unwrap_or_else(|| panic!("no {subject:?} finding in {fs:#?}"))
}

#[test]
fn grade_boundaries() {
    let c = cfg();
    let g = |secs| grade(at(secs), now(), &c);
    assert_eq!(
        g(30 * DAY),
        Status::Ok,
        "exactly warn_before left: not yet within"
    );
    assert_eq!(g(30 * DAY - 1), Status::Warning);
    assert_eq!(g(7 * DAY), Status::Warning, "exactly critical_before left");
    assert_eq!(g(7 * DAY - 1), Status::Critical);
    assert_eq!(g(0), Status::Critical, "notAfter itself is still valid");
    assert_eq!(g(-1), Status::Expired);
}

#[test]
fn each_certificate_is_graded_at_its_boundaries() {
    type Set = fn(&mut Spoke, OffsetDateTime);
    let cases: [(Subject, Set); 4] = [
        (Subject::Client, |s, t| s.client = Some(t)),
        (Subject::Ca, |s, t| s.ca_not_after = t),
        (Subject::Serving, |s, t| s.serving = t),
        (Subject::Sealing, |s, t| s.sealing = Some(t)),
    ];
    let expect = [
        (30 * DAY, Status::Ok, None),
        (
            30 * DAY - 1,
            Status::Warning,
            Some(AlertName::CertificateExpiring),
        ),
        (
            7 * DAY,
            Status::Warning,
            Some(AlertName::CertificateExpiring),
        ),
        (
            7 * DAY - 1,
            Status::Critical,
            Some(AlertName::CertificateExpiring),
        ),
        (0, Status::Critical, Some(AlertName::CertificateExpiring)),
        (-1, Status::Expired, Some(AlertName::CertificateExpired)),
    ];
    for (subject, set) in cases {
        for (secs, status, alert) in expect {
            let mut s = Spoke::default();
            set(&mut s, at(secs));
            let fs = eval(s);
            let f = find(&fs, subject);
            assert_eq!(
                (f.status, f.alert),
                (status, alert),
                "{subject:?} at {secs}s"
            );
            assert_eq!(f.not_after, Some(at(secs)));
            // The others stay ok: one rule, one subject.
            for other in fs.iter().filter(|o| o.subject != subject) {
                assert_eq!(other.status, Status::Ok, "{other:?}");
            }
        }
    }
}

#[test]
fn days_left_round_down_and_descriptions_carry_the_exact_date() {
    let fs = eval(Spoke {
        client: Some(at(5 * DAY - 60)),
        ..Spoke::default()
    });
    let f = find(&fs, Subject::Client);
    assert_eq!(f.days_left, Some(4));
    assert_eq!(f.severity(), Some("critical"));
    assert!(
        f.description.contains("2027-01-20T07:59:00Z"),
        "{}",
        f.description
    );
    assert!(f.summary.contains("expires in 4 days"), "{}", f.summary);
    assert!(f.detail.contains("critical below 7d"), "{}", f.detail);
    let fs = eval(Spoke {
        serving: at(-DAY - 1),
        ..Spoke::default()
    });
    let f = find(&fs, Subject::Serving);
    assert_eq!(f.days_left, Some(-2));
    assert_eq!(f.severity(), Some("critical"));
    assert!(
        f.summary.contains("expired on 2027-01-14T07:59:59Z"),
        "{}",
        f.summary
    );
    assert_eq!(find(&fs, Subject::Api).status, Status::Ok);
}

#[test]
fn a_serving_certificate_from_another_ca_is_a_ca_mismatch() {
    let recorded_ca = ca();
    let other = ca();
    let seen = Observation::new(
        "dev".into(),
        committed(recorded(recorded_ca.der(), Some(far()), far())),
        Some(Ok(probe_by(&other, far()))),
    );
    let fs = evaluate(&cfg(), &[seen], Some(&sealing(Some(far()))), now(), None);
    let f = find(&fs, Subject::Ca);
    assert_eq!(
        (f.status, f.alert),
        (Status::Critical, Some(AlertName::CaMismatch))
    );
    assert!(
        f.description
            .contains(&crate::certs::fingerprint(recorded_ca.der()).to_string())
    );
    assert_eq!(find(&fs, Subject::Serving).status, Status::Ok);
}

#[test]
fn without_a_sealing_certificate_no_spoke_has_a_sealing_finding() {
    let issuer = ca();
    let seen = || {
        Observation::new(
            "dev".into(),
            committed(recorded(issuer.der(), Some(far()), far())),
            Some(Ok(probe_by(&issuer, far()))),
        )
    };
    let fs = evaluate(&cfg(), &[seen()], None, now(), None);
    assert!(fs.iter().all(|f| f.subject != Subject::Sealing), "{fs:?}");
    assert_eq!(find(&fs, Subject::Client).status, Status::Ok);
    assert_eq!(overall(&fs), Status::Ok);
    // With one, each spoke has its finding.
    let fs = evaluate(&cfg(), &[seen()], Some(&sealing(Some(far()))), now(), None);
    assert_eq!(find(&fs, Subject::Sealing).status, Status::Ok);
}

#[test]
fn an_unreachable_spoke_is_unknown_and_its_recorded_certs_still_graded() {
    let issuer = ca();
    let seen = Observation::new(
        "dev".into(),
        committed(recorded(issuer.der(), Some(at(3 * DAY)), far())),
        Some(Err(ProbeError::Refused {
            server: "127.0.0.9:6443".into(),
        })),
    );
    let fs = evaluate(&cfg(), &[seen], Some(&sealing(Some(far()))), now(), None);
    let api = find(&fs, Subject::Api);
    assert_eq!(
        (api.status, api.alert, api.severity()),
        (
            Status::Unknown,
            Some(AlertName::SpokeUnreachable),
            Some("warning")
        )
    );
    assert!(api.detail.contains("connection refused"), "{}", api.detail);
    assert!(
        fs.iter().all(|f| f.subject != Subject::Serving),
        "nothing to grade"
    );
    assert_eq!(find(&fs, Subject::Client).status, Status::Critical);
    assert_eq!(find(&fs, Subject::Ca).status, Status::Ok);
    assert_eq!(overall(&fs), Status::Critical, "critical wins over unknown");
}

#[test]
fn missing_or_unreadable_state_is_unknown_and_raises_no_alert() {
    let seen = [
        Observation::new("new".into(), Committed::Missing, None),
        Observation::new(
            "bad".into(),
            Committed::Invalid(Invalid {
                path: "clusters/bad.yaml".into(),
                kind: AnnotationError::Missing {
                    key: "spokekeeper.io/server",
                }
                .into(),
            }),
            None,
        ),
    ];
    let fs = evaluate(&cfg(), &seen, Some(&sealing(Some(far()))), now(), None);
    for (spoke, needle) in [("new", "never rotated"), ("bad", "spokekeeper.io/server")] {
        let f = fs
            .iter()
            .find(|f| f.spoke == spoke && f.subject == Subject::State)
            .unwrap();
        assert_eq!((f.status, f.alert), (Status::Unknown, None));
        assert!(f.detail.contains(needle), "{}", f.detail);
        assert!(
            !fs.iter()
                .any(|f| f.spoke == spoke && f.subject == Subject::Client),
            "nothing recorded to grade"
        );
    }
    assert_eq!(overall(&fs), Status::Unknown);
}

#[test]
fn token_credentials_and_bare_sealing_keys_have_no_date_and_are_ok() {
    let fs = eval(Spoke {
        client: None,
        sealing: None,
        ..Spoke::default()
    });
    for subject in [Subject::Client, Subject::Sealing] {
        let f = find(&fs, subject);
        assert_eq!((f.status, f.not_after, f.alert), (Status::Ok, None, None));
    }
    assert!(
        find(&fs, Subject::Sealing)
            .detail
            .contains("bare public key")
    );
}

#[test]
fn a_failed_tick_is_rotation_failing_and_a_good_one_is_ok() {
    let issuer = ca();
    let obs = |name: &str| {
        Observation::new(
            name.into(),
            committed(recorded(issuer.der(), Some(far()), far())),
            Some(Ok(probe_by(&issuer, far()))),
        )
    };
    let report = SpokeReport::new;
    let tick = TickReport {
        spokes: vec![
            report(
                "dev",
                Outcome::Failed(SpokeError::Extract(std::sync::Arc::new(
                    crate::spoke::ExtractError::Ssh {
                        target: "dev".into(),
                        detail: "ssh: host key CHANGED".into(),
                    },
                ))),
            ),
            report("test", Outcome::Healthy),
        ],
        pushed: false,
        repo_error: None,
        sealing: None,
        sealing_key: None,
        observed: Vec::new(),
    };
    let fs = evaluate(
        &cfg(),
        &[obs("dev"), obs("test")],
        Some(&sealing(Some(far()))),
        now(),
        Some(&tick),
    );
    let rot = |spoke: &str| {
        fs.iter()
            .find(|f| f.spoke == spoke && f.subject == Subject::Rotation)
            .unwrap()
    };
    let dev = rot("dev");
    assert_eq!(
        (dev.status, dev.alert, dev.severity()),
        (
            Status::Warning,
            Some(AlertName::RotationFailing),
            Some("warning")
        )
    );
    assert!(
        dev.description
            .contains("failed at extract: ssh to dev failed: ssh: host key CHANGED")
    );
    assert_eq!(
        (rot("test").status, rot("test").detail.as_str()),
        (Status::Ok, "healthy")
    );
    // Without a tick report there is nothing to say about rotation.
    let fs = evaluate(
        &cfg(),
        &[obs("dev")],
        Some(&sealing(Some(far()))),
        now(),
        None,
    );
    assert!(fs.iter().all(|f| f.subject != Subject::Rotation));
}

#[test]
fn overall_ranks_critical_over_unknown_over_warning() {
    let with = |statuses: &[Status]| {
        let fs: Vec<Finding> = statuses
            .iter()
            .map(|s| Finding {
                spoke: "x".into(),
                subject: Subject::Client,
                status: *s,
                not_after: None,
                days_left: None,
                detail: String::new(),
                credential: None,
                alert: None,
                summary: String::new(),
                description: String::new(),
            })
            .collect();
        overall(&fs)
    };
    assert_eq!(with(&[]), Status::Ok);
    assert_eq!(with(&[Status::Ok, Status::Warning]), Status::Warning);
    assert_eq!(with(&[Status::Warning, Status::Unknown]), Status::Unknown);
    assert_eq!(with(&[Status::Unknown, Status::Critical]), Status::Critical);
    assert_eq!(with(&[Status::Critical, Status::Expired]), Status::Expired);
    assert_eq!(
        [
            Status::Ok,
            Status::Warning,
            Status::Critical,
            Status::Expired,
            Status::Unknown
        ]
        .map(Status::exit_code),
        [0, 1, 2, 2, 3]
    );
}

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
        }],
        pushed: true,
        repo_error: None,
        sealing: None,
        sealing_key: None,
        observed: Vec::new(),
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
        }],
        pushed: false,
        repo_error: None,
        sealing: None,
        sealing_key: None,
        observed: Vec::new(),
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

/// What is committed when `r` is recorded (alerts read only the annotations).
fn committed(r: Recorded) -> Committed {
    let sealed = SealedSecret {
        name: "kubeconfig".into(),
        namespace: "flux-system".into(),
        labels: Default::default(),
        annotations: r.to_annotations(),
        template: Default::default(),
        encrypted_data: Default::default(),
    };
    Committed::Recorded(Box::new(Record {
        sealed: crate::rotate::observe::Output::SealedSecret(sealed),
        recorded: r,
    }))
}

/// What the daemon grades after a tick: each spoke's committed SealedSecret without its
/// ciphertext and raw annotations (as the tick keeps it), each spoke's report found by
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
        .map(Observation::without_ciphertext)
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
