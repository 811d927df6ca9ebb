use std::time::Duration;

use super::*;
use crate::config::Config;
use crate::federate::issuer::IssuerCas;
use crate::fingerprint::Fingerprint;
use crate::rotate::observe::{Committed, Record};
use crate::rotate::state::{Recorded, SealedTo};

const DAY: i64 = 86_400;

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
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

/// Two federated spokes trusting https://old.example, moving to https://new.example,
/// and an extracted one.
fn spokes() -> Vec<SpokeConfig> {
    let text = "repo: {path: f}\nsealing: {cert: c}\nhub: {}\n\
        credential:\n  federated:\n    issuer: \"https://old.example\"\n    next: {issuer: \"https://new.example\"}\n\
        spokes:\n- {name: a, address: 10.0.0.1, credential: {mode: federated}}\n\
        - {name: b, address: 10.0.0.2, credential: {mode: federated}}\n\
        - {name: c, address: 10.0.0.3}\n";
    Config::parse(text, "t.yaml", std::path::Path::new("/"))
        .unwrap()
        .spokes
}

/// Spoke `name` as observed, its record's trust `trust`.
fn observed(name: &str, trust: Option<Fingerprint<crate::fingerprint::Content>>) -> Observation {
    let recorded = Recorded {
        spoke: name.into(),
        server: "https://10.0.0.1:6443".into(),
        ca_sha256: Fingerprint::of(b"ca"),
        ca_bundle: vec![b"ca".to_vec()],
        ca_not_after: now() + time::Duration::days(3000),
        client_sha256: None,
        client_not_after: None,
        content_sha256: Fingerprint::of(b"content"),
        sealed_to: SealedTo::Nothing,
        rotated_at: now(),
        credential: Default::default(),
        trust_sha256: trust,
    };
    let sealed = crate::rotate::observe::Output::ConfigMap(crate::flux::remote::Remote::default());
    let committed = Committed::Recorded(Box::new(Record { sealed, recorded }));
    Observation::new(name.into(), committed, None)
}

fn seen(issuer: &str, role: Role, days: i64, problem: Option<&str>) -> Seen {
    Seen {
        issuer: issuer.into(),
        role,
        discovery: format!("{issuer}/.well-known/openid-configuration"),
        not_after: Some(now() + time::Duration::days(days)),
        problem: problem.map(str::to_string),
    }
}

/// Spoke a's file trusts the next issuer (its record is the policy's fingerprint), b's
/// does not (an older record).
fn fleet(seen: Vec<Seen>) -> (Vec<SpokeConfig>, Vec<Observation>, Looked) {
    let spokes = spokes();
    let looked = Looked {
        cas: IssuerCas::default(),
        seen,
    };
    let policy = spokes[0].credential.federated.as_ref().unwrap();
    let trusting = crate::federate::trust_fingerprint(policy, &looked.cas);
    let observed = vec![
        observed("a", Some(trusting)),
        observed("b", Some(Fingerprint::from_digest([3; 32]))),
        observed("c", None),
    ];
    (spokes, observed, looked)
}

fn of<'a>(found: &'a [Finding], spoke: &str, subject: Subject) -> &'a Finding {
    found
        .iter()
        .find(|f| f.spoke == spoke && f.subject == subject)
        .unwrap_or_else(|| panic!("no {subject:?} finding for {spoke}: {found:#?}"))
}

#[test]
fn the_discovery_certificate_is_graded_and_a_spoke_not_trusting_the_next_issuer_is_named() {
    let (spokes, observed, looked) = fleet(vec![
        seen("https://old.example", Role::Current, 20, None),
        seen("https://new.example", Role::Next, 400, None),
    ]);
    let found = issuers(&cfg(), &spokes, &observed, &looked, now());
    // Two per federated spoke, none for the extracted one.
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found.iter().all(|f| f.spoke != "c"));
    for spoke in ["a", "b"] {
        let current = of(&found, spoke, Subject::Issuer);
        assert_eq!(current.status, Status::Warning, "{current:#?}");
        assert_eq!(current.alert, Some(AlertName::CertificateExpiring));
        assert_eq!(current.days_left, Some(20));
        assert!(
            current.description.contains("discovery URL"),
            "{current:#?}"
        );
    }
    let trusted = of(&found, "a", Subject::NextIssuer);
    assert_eq!((trusted.status, trusted.alert), (Status::Ok, None));
    assert!(trusted.detail.starts_with("https://new.example at https://new.example/.well-known/openid-configuration: valid for 400 more days"), "{trusted:#?}");
    let not_yet = of(&found, "b", Subject::NextIssuer);
    assert_eq!(not_yet.status, Status::Warning);
    assert_eq!(not_yet.alert, Some(AlertName::NextIssuerNotTrusted));
    assert!(
        not_yet
            .description
            .contains("Do not make the hub sign as https://new.example"),
        "{not_yet:#?}"
    );

    let counts = next_trust(&spokes, &observed, &looked);
    assert_eq!(
        counts,
        [NextTrust {
            issuer: "https://new.example".into(),
            trusting: 1,
            of: 2,
            not_yet: vec!["b".into()],
        }]
    );
    assert!(counts[0].line().starts_with("1 of 2 federated spokes run a file trusting the next issuer https://new.example: do not switch the hub yet (not yet: b)"), "{}", counts[0].line());
}

#[test]
fn an_issuer_that_cannot_be_used_warns_and_an_expired_certificate_says_expired() {
    let problem = "the discovery document at https://old.example/.well-known/openid-configuration names issuer \"https://new.example\"";
    let (spokes, observed, looked) = fleet(vec![
        seen("https://old.example", Role::Current, 400, Some(problem)),
        seen(
            "https://new.example",
            Role::Next,
            -1,
            Some("certificate expired"),
        ),
    ]);
    let found = issuers(&cfg(), &spokes, &observed, &looked, now());
    let current = of(&found, "a", Subject::Issuer);
    assert_eq!(current.status, Status::Warning);
    assert_eq!(current.alert, Some(AlertName::IssuerUnreachable));
    assert_eq!(current.detail, problem);
    assert!(
        current.description.contains("nothing is refused yet"),
        "{current:#?}"
    );
    // The certificate's own grade comes first: expired is what to fix.
    let next = of(&found, "a", Subject::NextIssuer);
    assert_eq!(next.status, Status::Expired);
    assert_eq!(next.alert, Some(AlertName::CertificateExpired));
    // An issuer not looked at is unknown, not fine.
    let (spokes, observed, looked) = fleet(Vec::new());
    let found = issuers(&cfg(), &spokes, &observed, &looked, now());
    assert_eq!(of(&found, "a", Subject::Issuer).status, Status::Unknown);
}
