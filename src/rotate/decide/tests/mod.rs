use super::*;
use crate::config::Config;
use crate::seal::sops::SopsSecret;
use crate::seal::{Scope, SealedSecret};

fn spoke(extra: &str) -> SpokeConfig {
    let text = format!(
        "repo: {{path: f}}\nsealing: {{cert: c}}\nspokes:\n  - {{name: dev, address: 10.0.0.1{extra}}}\n"
    );
    Config::parse(&text, "t.yaml", std::path::Path::new("/"))
        .unwrap()
        .spokes
        .remove(0)
}

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

const SEAL: Fingerprint<Sealing> = Fingerprint::from_digest([4; 32]);
const NEW_SEAL: Fingerprint<Sealing> = Fingerprint::from_digest([5; 32]);

fn recorded() -> Recorded {
    Recorded {
        spoke: "dev".into(),
        server: "https://10.0.0.1:6443".into(),
        ca_sha256: Fingerprint::from_digest([1; 32]),
        ca_bundle: vec![],
        ca_not_after: now() + time::Duration::days(3000),
        client_sha256: Some(Fingerprint::from_digest([2; 32])),
        client_not_after: Some(now() + time::Duration::days(200)),
        content_sha256: Fingerprint::from_digest([3; 32]),
        sealed_to: SealedTo::Cert(SEAL),
        rotated_at: now() - time::Duration::days(1),
        credential: Default::default(),
        trust_sha256: None,
    }
}

fn sealed(scope: Scope) -> Output {
    let mut s = SealedSecret {
        name: "dev-kubeconfig".into(),
        namespace: "flux-system".into(),
        ..Default::default()
    };
    if let Some(a) = scope.annotation() {
        s.annotations.insert(a.into(), "true".into());
    }
    s.encrypted_data.insert("value".into(), "AgA".into());
    Output::SealedSecret(s)
}

fn policy() -> Policy {
    Policy {
        now: now(),
        renew_before: Duration::from_secs(30 * 86_400),
        sealed_to: SealedTo::Cert(SEAL),
        force: false,
        verify_due: false,
        roots_seen: false,
        trust_refused: None,
        trust_sha256: None,
    }
}

fn run(spoke: &SpokeConfig, s: &Output, r: &Recorded, p: &Policy) -> Decision {
    decide(
        spoke,
        &Observed {
            committed: Some(Ok((s, r))),
            probe: None,
            ca: None,
        },
        p,
    )
}

#[test]
fn nothing_committed_or_unreadable() {
    let sp = spoke("");
    assert_eq!(
        decide(
            &sp,
            &Observed {
                committed: None,
                probe: None,
                ca: None,
            },
            &policy()
        ),
        Decision::Rotate(Reason::Initial)
    );
    let d = decide(
        &sp,
        &Observed {
            committed: Some(Err(&std::fmt::Error)),
            probe: None,
            ca: None,
        },
        &policy(),
    );
    assert_eq!(
        d,
        Decision::Rotate(Reason::Unreadable {
            detail: std::fmt::Error.to_string()
        })
    );
}

#[test]
fn each_rule_in_order() {
    let sp = spoke("");
    let (s, r) = (sealed(Scope::Strict), recorded());
    assert_eq!(run(&sp, &s, &r, &policy()), Decision::Healthy);
    let mut expiring = recorded();
    expiring.client_not_after = Some(now() + time::Duration::days(29));
    assert!(matches!(
        run(&sp, &s, &expiring, &policy()),
        Decision::Rotate(Reason::ClientExpiring { .. })
    ));
    let mut token_only = recorded();
    token_only.client_not_after = None;
    assert_eq!(run(&sp, &s, &token_only, &policy()), Decision::Healthy);
    let other_key = Policy {
        sealed_to: SealedTo::Cert(NEW_SEAL),
        ..policy()
    };
    assert!(matches!(
        run(&sp, &s, &r, &other_key),
        Decision::Rotate(Reason::SealingKeyChanged { .. })
    ));
    // Expiry outranks a sealing key change: it is the more urgent reason.
    assert!(matches!(
        run(&sp, &s, &expiring, &other_key),
        Decision::Rotate(Reason::ClientExpiring { .. })
    ));
    assert!(matches!(
        run(&spoke(", scope: cluster-wide"), &s, &r, &policy()),
        Decision::Rotate(Reason::ConfigChanged { .. })
    ));
    assert!(matches!(
        run(&spoke(", secret: {key: kubeconfig}"), &s, &r, &policy()),
        Decision::Rotate(Reason::ConfigChanged { .. })
    ));
    let moved = SpokeConfig {
        address: "10.0.0.2".into(),
        ..spoke("")
    };
    assert_eq!(
        run(&moved, &s, &r, &policy()),
        Decision::Rotate(Reason::ConfigChanged {
            detail: "address https://10.0.0.1:6443 -> https://10.0.0.2:6443".into()
        })
    );
    // A recorded server other than `api_server` exactly: port and path count.
    assert_eq!(
        run(
            &spoke(", api_server: \"https://lb.example.org\""),
            &s,
            &r,
            &policy()
        ),
        Decision::Rotate(Reason::ConfigChanged {
            detail: "server https://10.0.0.1:6443 -> https://lb.example.org".into()
        })
    );
    assert_eq!(
        run(
            &sp,
            &s,
            &r,
            &Policy {
                force: true,
                ..policy()
            }
        ),
        Decision::Rotate(Reason::Forced)
    );
    assert_eq!(
        run(
            &sp,
            &s,
            &r,
            &Policy {
                verify_due: true,
                ..policy()
            }
        ),
        Decision::Rotate(Reason::Periodic)
    );
}

#[test]
fn the_server_the_configuration_implies() {
    let r = recorded();
    let at = |extra: &str, r: Option<&Recorded>| expected_server(&spoke(extra), r);
    assert_eq!(at("", None), None);
    assert_eq!(at("", Some(&r)).as_deref(), Some("https://10.0.0.1:6443"));
    let proxied = Recorded {
        server: "https://10.0.0.9:7443/k8s/dev".into(),
        ..recorded()
    };
    assert_eq!(
        at("", Some(&proxied)).as_deref(),
        Some("https://10.0.0.1:7443/k8s/dev")
    );
    for (api, want) in [
        ("https://lb.example.org", "https://lb.example.org"),
        ("https://lb.example.org:443/", "https://lb.example.org"),
        (
            "https://10.0.0.1:8443/k8s/spoke",
            "https://10.0.0.1:8443/k8s/spoke",
        ),
    ] {
        let extra = format!(", api_server: \"{api}\"");
        assert_eq!(at(&extra, Some(&r)).as_deref(), Some(want), "{api}");
        assert_eq!(at(&extra, None).as_deref(), Some(want), "{api}");
        // Recorded exactly as configured: no change, no rotation every tick.
        let same = Recorded {
            server: want.into(),
            ..recorded()
        };
        assert_eq!(
            run(&spoke(&extra), &sealed(Scope::Strict), &same, &policy()),
            Decision::Healthy,
            "{api}"
        );
    }
}

#[test]
fn kind_is_the_json_tag() {
    for r in [
        Reason::Initial,
        Reason::Unreadable {
            detail: String::new(),
        },
        Reason::CaChanged {
            old: Fingerprint::from_digest([1; 32]),
        },
        Reason::ClientExpiring { not_after: now() },
        Reason::SealingKeyChanged {
            old: SEAL,
            new: NEW_SEAL,
        },
        Reason::ConfigChanged {
            detail: String::new(),
        },
        Reason::Forced,
        Reason::Periodic,
        Reason::ContentChanged,
        Reason::BindingMissing {
            binding: String::new(),
        },
        Reason::Revoked {
            generation: 1,
            found: vec![1],
            users: vec!["spokekeeper:hub:dev:1:0a1b2c3d".into()],
        },
    ] {
        assert_eq!(serde_json::to_value(&r).unwrap()["kind"], r.kind());
    }
}

#[test]
fn reasons_read_well() {
    let r = Reason::SealingKeyChanged {
        old: Fingerprint::parse(&format!("sha256:{}", "0011223344556677".repeat(4))).unwrap(),
        new: Fingerprint::parse(&format!("sha256:{}", "8899aabbccddeeff".repeat(4))).unwrap(),
    };
    assert_eq!(
        r.to_string(),
        "sealing key changed sha256:00112233.. -> sha256:8899aabb.."
    );
    let r = Reason::ClientExpiring { not_after: now() };
    assert_eq!(
        r.to_string(),
        "client certificate expiring on 2027-01-15T08:00:00Z"
    );
}

/// Minted and sops spokes, and roots outside the bundle.
mod federated;
mod modes;
