//! The recorded state is read back from the fleet repo: untrusted input. Any value of any
//! `spokekeeper.io/*` annotation goes through observe, decide, the tick report (JSON; its
//! table in src/cli/tests.rs) and `check`'s grading without a panic, and a malformed one rotates the spoke
//! with a reason that names it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::LazyLock;
use std::time::Duration;

use proptest::prelude::*;
use spokekeeper::alerts::{self, SealingCert};
use spokekeeper::config::{Config, SpokeConfig};
use spokekeeper::fingerprint::Fingerprint;
use spokekeeper::rotate::decide::{self, Decision, Observed, Policy};
use spokekeeper::rotate::observe::{Committed, Invalid, Observation, Output, Record};
use spokekeeper::rotate::state::{self, Recorded, SealedTo};
use spokekeeper::rotate::{Outcome, Reason, SpokeReport, TickReport};
use spokekeeper::seal::SealedSecret;
use spokekeeper_lab::{Pki, PkiOptions};
use time::OffsetDateTime;

const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

const KEYS: [&str; 12] = [
    state::SPOKE,
    state::SERVER,
    state::CA_SHA256,
    state::CA_NOT_AFTER,
    state::CA_DATA,
    state::CA_BUNDLE_SHA256,
    state::CLIENT_CERT_SHA256,
    state::CLIENT_CERT_NOT_AFTER,
    state::CONTENT_SHA256,
    state::SEALING_CERT_SHA256,
    state::ROTATED_AT,
    "spokekeeper.io/unknown",
];

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

/// A well-formed recorded state, as a rotation writes it.
static GOOD: LazyLock<Recorded> = LazyLock::new(|| {
    let pki = Pki::generate(&PkiOptions {
        address: "10.0.0.1".parse().unwrap(),
        address_in_sans: true,
        client_cert_days: 365,
    });
    Recorded {
        spoke: "dev".into(),
        server: "https://10.0.0.1:6443".into(),
        ca_sha256: Fingerprint::of(&pki.server_ca_der),
        ca_bundle: vec![pki.server_ca_der.clone()],
        ca_not_after: now() + time::Duration::days(3000),
        client_sha256: Some(Fingerprint::parse(&format!("sha256:{HEX}")).unwrap()),
        client_not_after: Some(now() + time::Duration::days(200)),
        content_sha256: Fingerprint::parse(HEX).unwrap(),
        sealed_to: SealedTo::Cert(Fingerprint::parse(&format!("sha256:{HEX}")).unwrap()),
        rotated_at: now() - time::Duration::days(1),
        credential: spokekeeper::rotate::state::RecordedCredential::default(),
        trust_sha256: None,
    }
});

static SPOKE: LazyLock<SpokeConfig> = LazyLock::new(|| {
    let text = "repo: {path: f}\nsealing: {cert: c}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";
    Config::parse(text, "t.yaml", Path::new("/"))
        .unwrap()
        .spokes
        .remove(0)
});

fn sealed() -> SealedSecret {
    let mut s = SealedSecret {
        name: "dev-kubeconfig".into(),
        namespace: "flux-system".into(),
        ..Default::default()
    };
    s.encrypted_data.insert("value".into(), "AgA".into());
    s
}

fn policy() -> Policy {
    Policy {
        now: now(),
        renew_before: Duration::from_secs(30 * 86_400),
        sealed_to: GOOD.sealed_to,
        force: false,
        verify_due: false,
        roots_seen: false,
        trust_refused: None,
        trust_sha256: None,
    }
}

/// Through decide, the tick report's JSON, and check's grading (`rotate`'s table of the
/// same values: the binary's unit test `rotate_table_prints_any_recorded_value`).
fn observe_decide_report(a: &BTreeMap<String, String>, raw: &str) -> Decision {
    let read = Recorded::from_annotations(a);
    let sealed = Output::SealedSecret(sealed());
    let committed = match &read {
        Ok(r) => Ok((&sealed, r)),
        Err(e) => Err(e as &dyn std::error::Error),
    };
    let decision = decide::decide(
        &SPOKE,
        &Observed {
            committed: Some(committed),
            probe: None,
            ca: None,
        },
        &policy(),
    );
    // Whatever was read, and the raw value as a fingerprint, through the printers.
    let mut report = SpokeReport::new("dev", Outcome::WouldRotate);
    if let Decision::Rotate(reason) = &decision {
        report.reason = Some(reason.clone());
    }
    // Only a valid fingerprint can be one (the type refuses the rest).
    let raw_ca = Fingerprint::parse(raw).ok();
    report.ca_sha256 = raw_ca;
    let mut failed = SpokeReport::new(
        "dev",
        Outcome::Failed(spokekeeper::rotate::SpokeError::Unreachable(
            spokekeeper::spoke::ProbeError::Unreachable {
                server: raw.to_string(),
                reason: raw.to_string(),
            },
        )),
    );
    failed.reason = Some(Reason::CaChanged {
        old: raw_ca.unwrap_or(GOOD.ca_sha256),
    });
    let tick = TickReport::of(vec![report, failed]);
    let json: serde_json::Value = serde_json::from_str(&serde_json::to_string(&tick).unwrap())
        .expect("the JSON report parses");
    assert_eq!(json["spokes"][0]["spoke"], "dev");
    let seen = Observation::new(
        "dev".into(),
        match read {
            Ok(recorded) => Committed::Recorded(Box::new(Record {
                sealed: sealed.clone(),
                recorded,
            })),
            Err(e) => Committed::Invalid(Invalid {
                path: "clusters/dev.yaml".into(),
                kind: e.into(),
            }),
        },
        None,
    );
    let cfg = Config::parse(
        "repo: {path: f}\nsealing: {cert: c}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n",
        "t.yaml",
        Path::new("/"),
    )
    .unwrap()
    .alerts;
    let sealing = SealingCert {
        source: "c".into(),
        not_after: None,
    };
    let findings = alerts::evaluate(&cfg, &[seen], Some(&sealing), now(), None);
    assert!(!findings.is_empty());
    serde_json::to_string(&findings).unwrap();
    decision
}

fn values() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        Just(String::new()),
        Just("sha256:aéééééé".to_string()),
        "sha256:[0-9a-fé]{0,70}",
        "[ -~]{0,80}",
        (any::<char>(), 0..300_000usize).prop_map(|(c, n)| c.to_string().repeat(n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_annotation_value_is_read_safely_and_a_malformed_one_rotates(
        key in 0..KEYS.len(),
        value in values(),
    ) {
        let key = KEYS[key];
        let mut a = GOOD.to_annotations();
        a.insert(key.to_string(), value.clone());
        let decision = observe_decide_report(&a, &value);
        match Recorded::from_annotations(&a) {
            Err(e) => {
                prop_assert_eq!(e.key(), key);
                let Decision::Rotate(Reason::Unreadable { detail }) = &decision else {
                    panic!("malformed {key} did not rotate: {decision:?}");
                };
                prop_assert!(detail.contains(key), "{}", detail);
                // Shown escaped and short: a huge value does not flood the commit.
                prop_assert!(detail.chars().count() < 400, "{}", detail);
                prop_assert!(!detail.contains('\n'));
            }
            // Still well-formed (the same value, an unknown key, or another valid one):
            // what is accepted is written back as it was read.
            Ok(r) => {
                let unreadable = matches!(decision, Decision::Rotate(Reason::Unreadable { .. }));
                prop_assert!(!unreadable, "{:?}", decision);
                prop_assert_eq!(Recorded::from_annotations(&r.to_annotations()), Ok(r));
            }
        }
    }

    #[test]
    fn a_missing_annotation_rotates_unless_optional(key in 0..KEYS.len()) {
        let key = KEYS[key];
        let mut a = GOOD.to_annotations();
        // An annotation spokekeeper does not know is there too, so removing it is real.
        a.insert("spokekeeper.io/unknown".into(), "x".into());
        a.remove(key);
        let decision = observe_decide_report(&a, "");
        let optional = [
            state::CA_BUNDLE_SHA256,
            state::CLIENT_CERT_SHA256,
            state::CLIENT_CERT_NOT_AFTER,
            "spokekeeper.io/unknown",
        ];
        if optional.contains(&key) {
            prop_assert_eq!(decision, Decision::Healthy);
        } else {
            prop_assert!(
                matches!(&decision, Decision::Rotate(Reason::Unreadable { detail }) if detail.contains(key)),
                "{:?}", decision
            );
        }
    }
}

#[test]
fn the_committed_value_from_issue_13_rotates_with_a_reason_naming_it() {
    let mut a = GOOD.to_annotations();
    a.insert(state::SEALING_CERT_SHA256.into(), "sha256:aéééééé".into());
    let decision = observe_decide_report(&a, "sha256:aéééééé");
    let Decision::Rotate(reason) = decision else {
        panic!("{decision:?}")
    };
    assert_eq!(
        reason.to_string(),
        "committed manifest unreadable (annotation spokekeeper.io/sealing-cert-sha256 is not \
         \"sha256:\" and 64 lowercase hex digits: 20 bytes)"
    );
}
