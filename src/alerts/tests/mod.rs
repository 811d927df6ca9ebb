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
        trust_sha256: None,
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
fn a_fine_finding_has_a_summary_and_no_description_to_hold() {
    let fs = eval(Spoke::default());
    for f in &fs {
        assert_eq!(f.status, Status::Ok, "{f:?}");
        assert!(f.description.is_empty(), "{f:?}");
        assert!(f.summary.starts_with("spoke "), "{f:?}");
    }
    // Its resolution, told to a webhook, still says something.
    let mut st = crate::alerts::webhook::WebhookState::default();
    let mut bad = find(&fs, Subject::Client).clone();
    bad.status = Status::Warning;
    st.remember(std::slice::from_ref(&bad));
    let changes = st.changes(&fs);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].description, changes[0].summary);
    assert!(!changes[0].description.is_empty());
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
        issuers: Default::default(),
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

mod dropped;
/// What the tick reported: the hub, reviews, the sealing key, minted credentials.
mod tick;
