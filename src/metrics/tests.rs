use super::*;
use crate::rotate::{RepoFailure, RepoStage, SpokeReport, Stage};

fn spoke(name: &str, outcome: Outcome, reason: Option<Reason>) -> SpokeReport {
    SpokeReport {
        reason,
        ca_not_after: Some(time::macros::datetime!(2036-01-02 03:04:05 UTC)),
        client_not_after: Some(time::macros::datetime!(2030-01-02 03:04:05 UTC)),
        ..SpokeReport::new(name, outcome)
    }
}

#[test]
fn the_last_rotation_is_the_committed_one_until_this_process_rotates() {
    let m = Metrics::new();
    let committed = time::macros::datetime!(2026-12-01 08:00 UTC);
    let mut healthy = spoke("dev", Outcome::Healthy, None);
    healthy.rotated_at = Some(committed);
    let tick = |s: &SpokeReport, at: SystemTime| {
        m.observe_tick(&TickReport::of(vec![s.clone()]), Duration::from_secs(1), at);
        m.encode().unwrap()
    };
    let recorded = format!(
        "spokekeeper_last_rotation_timestamp_seconds{{spoke=\"dev\",reason=\"recorded\"}} {}.0",
        committed.unix_timestamp()
    );
    let text = tick(&healthy, SystemTime::now());
    assert!(text.lines().any(|l| l == recorded), "{text}");
    // Rotated here: its reason and time replace the recorded one, and the next tick's
    // annotation (a moment older than the tick's end) does not come back.
    let end = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut rotated = spoke(
        "dev",
        Outcome::Rotated { commit: "a".into() },
        Some(Reason::Initial),
    );
    rotated.rotated_at = Some(committed);
    tick(&rotated, end);
    healthy.rotated_at =
        Some(time::macros::datetime!(2027-01-15 08:00 UTC) - time::Duration::seconds(2));
    let text = tick(&healthy, end);
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("spokekeeper_last_rotation_timestamp_seconds{"))
        .collect();
    assert_eq!(
        series,
        [
            "spokekeeper_last_rotation_timestamp_seconds{spoke=\"dev\",reason=\"initial\"} 1800000000.0"
        ]
    );
    // Another process committed later: that one is shown.
    healthy.rotated_at = Some(time::macros::datetime!(2027-02-01 00:00 UTC));
    let text = tick(&healthy, end);
    assert!(
        text.contains("{spoke=\"dev\",reason=\"recorded\"} 1801440000.0"),
        "{text}"
    );
    assert!(!text.contains("reason=\"initial\"} 1800000000"), "{text}");
}

#[test]
fn a_replica_that_stops_leading_stops_exporting_its_spokes() {
    let m = Metrics::new();
    let mut dev = spoke("dev", Outcome::Healthy, None);
    dev.rotated_at = Some(time::macros::datetime!(2026-12-01 08:00 UTC));
    m.set_leader(true);
    m.observe_tick(
        &TickReport::of(vec![dev]),
        Duration::from_secs(1),
        SystemTime::now(),
    );
    let spoke_series = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with('#') && l.contains("spoke=\"dev\""))
            .map(String::from)
            .collect()
    };
    let before = spoke_series(&m.encode().unwrap());
    for family in ["certificate_not_after", "spoke_up", "last_rotation"] {
        assert!(
            before.iter().any(|l| l.contains(family)),
            "{family}: {before:#?}"
        );
    }
    m.set_leader(false);
    let text = m.encode().unwrap();
    assert_eq!(spoke_series(&text), Vec::<String>::new(), "{text}");
    assert!(text.contains("spokekeeper_leader 0"), "{text}");
}

#[test]
fn hub_verification_becomes_series() {
    use crate::hub::verify::{Check, ConsumerCheck, Delivery, FoundBy, HubReport};
    use crate::hub::{Consumer, Kind};
    let check = |ok: bool, status: &str| Check {
        ok,
        status: status.into(),
        reason: None,
        message: String::new(),
    };
    let m = Metrics::new();
    let mut good = spoke("dev", Outcome::Rotated { commit: "a".into() }, None);
    good.hub = Some(Box::new(HubReport {
        delivery: Delivery::Synced(check(true, "True")),
        secret: "flux-system/dev-kubeconfig".into(),
        found_by: FoundBy::Listed,
        list_error: None,
        consumers: vec![ConsumerCheck {
            consumer: Consumer {
                kind: Kind::HelmRelease,
                namespace: "flux-system".into(),
                name: "apps".into(),
            },
            ready: check(true, "True"),
            requested_at: None,
        }],
        requested_at: None,
    }));
    let mut stuck = spoke("test", Outcome::Rotated { commit: "b".into() }, None);
    stuck.hub = Some(Box::new(HubReport {
        delivery: Delivery::Synced(check(false, "False")),
        secret: "flux-system/test-kubeconfig".into(),
        found_by: FoundBy::Listed,
        list_error: None,
        consumers: Vec::new(),
        requested_at: None,
    }));
    let report = TickReport {
        spokes: vec![good, stuck],
        pushed: true,
        repo_error: None,
        sealing: Some(crate::hub::cert::CertReport {
            reachable: Some(true),
            trusted: true,
            ..crate::hub::cert::CertReport::new(crate::fingerprint::Fingerprint::of(b"cert"))
        }),
        sealing_key: None,
        observed: Vec::new(),
        issuers: Default::default(),
    };
    m.observe_tick(&report, Duration::from_secs(1), SystemTime::now());
    let text = m.encode().unwrap();
    for line in [
        "spokekeeper_hub_reachable 1",
        "spokekeeper_sealing_cert_trusted 1",
        "spokekeeper_hub_synced{spoke=\"dev\"} 1",
        "spokekeeper_hub_ready{spoke=\"dev\"} 1",
        "spokekeeper_hub_synced{spoke=\"test\"} 0",
        "spokekeeper_hub_ready{spoke=\"test\"} 0",
        "spokekeeper_errors_total{spoke=\"test\",stage=\"hub\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "want {line:?} in:\n{text}");
    }
    assert!(!text.contains("{spoke=\"dev\",stage=\"hub\"}"), "{text}");
}

#[test]
fn the_credential_of_each_spoke_is_one_series_that_follows_the_generation() {
    use crate::config::CredentialMode;
    use crate::rotate::CredentialReport;
    let m = Metrics::new();
    let with = |mode, user: Option<&str>, generation| {
        let mut s = spoke("dev", Outcome::Healthy, None);
        s.credential = Some(CredentialReport {
            mode,
            user: user.map(String::from),
            generation,
            audience: None,
            not_after: None,
            shortened: None,
        });
        TickReport::of(vec![s])
    };
    let series = |m: &Metrics| -> Vec<String> {
        let text = m.encode().unwrap();
        text.lines()
            .filter(|l| l.starts_with("spokekeeper_credential_info{"))
            .map(String::from)
            .collect()
    };
    m.observe_tick(
        &with(CredentialMode::Extracted, Some("system:admin"), None),
        Duration::from_secs(1),
        SystemTime::now(),
    );
    assert_eq!(
        series(&m),
        [
            "spokekeeper_credential_info{spoke=\"dev\",mode=\"extracted\",user=\"\",generation=\"\"} 1"
        ],
        "an extracted credential's user is the node's, not one spokekeeper answers for"
    );
    for g in [3, 4] {
        let user = format!("spokekeeper:hub:{g}");
        m.observe_tick(
            &with(CredentialMode::Minted, Some(&user), Some(g)),
            Duration::from_secs(1),
            SystemTime::now(),
        );
        assert_eq!(
            series(&m),
            [format!(
                "spokekeeper_credential_info{{spoke=\"dev\",mode=\"minted\",user=\"{user}\",generation=\"{g}\"}} 1"
            )],
            "the previous generation's series is gone"
        );
    }
}

/// Without a sealing certificate (every spoke sops) the sealing series are absent,
/// descriptor and all; a certificate loaded again brings them back.
#[test]
fn a_fleet_without_a_sealing_key_exports_no_sealing_series() {
    let sealing = [
        "spokekeeper_sealing_certificate_not_after_timestamp_seconds",
        "spokekeeper_hub_reachable",
        "spokekeeper_sealing_cert_trusted",
    ];
    let m = Metrics::new();
    m.set_sealing_key(None);
    let report = TickReport::of(vec![spoke("dev", Outcome::Healthy, None)]);
    m.observe_tick(&report, Duration::from_secs(1), SystemTime::now());
    let text = m.encode().unwrap();
    assert!(
        text.contains("spokekeeper_spoke_up{spoke=\"dev\"} 1"),
        "{text}"
    );
    for name in sealing {
        assert!(!text.contains(name), "{name} in:\n{text}");
    }
    m.set_sealing_not_after(Some(time::macros::datetime!(2031-01-01 00:00:00 UTC)));
    let text = m.encode().unwrap();
    for line in [
        "spokekeeper_sealing_certificate_not_after_timestamp_seconds 1924992000.0",
        "spokekeeper_hub_reachable 0",
        "spokekeeper_sealing_cert_trusted 1",
    ] {
        assert!(text.lines().any(|l| l == line), "want {line:?} in:\n{text}");
    }
}

/// A tick of three spokes (rotated, failed at probe, pending review) and a push that
/// failed, 1.5 s long at 1,700,000,000 s, with the sealing certificate known.
fn three_spokes_ticked(m: &Metrics) {
    let report = TickReport {
        spokes: vec![
            spoke(
                "dev",
                Outcome::Rotated {
                    commit: "abc".into(),
                },
                Some(Reason::Initial),
            ),
            spoke(
                "test",
                Outcome::Failed(crate::rotate::SpokeError::Unreachable(
                    crate::spoke::ProbeError::Refused {
                        server: "https://10.0.0.1:6443".into(),
                    },
                )),
                None,
            ),
            spoke(
                "stage",
                Outcome::Pending {
                    branch: "spokekeeper/stage".into(),
                    commit: None,
                    pull_request: None,
                    change: None,
                    pending_seconds: Some(5400),
                },
                Some(Reason::Initial),
            ),
        ],
        pushed: true,
        repo_error: Some(crate::rotate::RepoFailure::NotPushed {
            why: "rejected".into(),
        }),
        sealing: Some(crate::hub::cert::CertReport {
            reachable: Some(false),
            trusted: false,
            ..crate::hub::cert::CertReport::new(crate::fingerprint::Fingerprint::of(b"cert"))
        }),
        sealing_key: None,
        observed: Vec::new(),
        issuers: Default::default(),
    };
    m.observe_tick(
        &report,
        Duration::from_millis(1500),
        UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    );
    m.set_sealing_not_after(Some(time::macros::datetime!(2031-01-01 00:00:00 UTC)));
}

#[test]
fn a_tick_report_becomes_series() {
    let m = Metrics::new();
    three_spokes_ticked(&m);
    let text = m.encode().unwrap();
    for line in [
        "spokekeeper_certificate_not_after_timestamp_seconds{spoke=\"dev\",cert=\"client\"} 1893553445.0",
        "spokekeeper_certificate_not_after_timestamp_seconds{spoke=\"dev\",cert=\"ca\"} 2082855845.0",
        "spokekeeper_spoke_up{spoke=\"dev\"} 1",
        "spokekeeper_spoke_up{spoke=\"test\"} 0",
        "spokekeeper_rotations_total{spoke=\"dev\",reason=\"initial\"} 1",
        "spokekeeper_last_rotation_timestamp_seconds{spoke=\"dev\",reason=\"initial\"} 1700000000.0",
        "spokekeeper_errors_total{spoke=\"test\",stage=\"probe\"} 1",
        "spokekeeper_errors_total{spoke=\"\",stage=\"push\"} 1",
        "spokekeeper_pending_review{spoke=\"stage\"} 1",
        "spokekeeper_pending_review{spoke=\"dev\"} 0",
        "spokekeeper_pending_review_age_seconds{spoke=\"stage\"} 5400",
        "spokekeeper_tick_duration_seconds_count 1",
        "spokekeeper_tick_duration_seconds_bucket{le=\"2.0\"} 1",
        "spokekeeper_tick_duration_seconds_bucket{le=\"1.0\"} 0",
        "spokekeeper_last_tick_timestamp_seconds 1700000000.0",
        "spokekeeper_sealing_certificate_not_after_timestamp_seconds 1924992000.0",
        "spokekeeper_hub_reachable 0",
        "spokekeeper_sealing_cert_trusted 0",
    ] {
        assert!(text.lines().any(|l| l == line), "want {line:?} in:\n{text}");
    }
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn a_spoke_left_out_of_a_later_tick_loses_its_gauges_and_keeps_its_counters() {
    let m = Metrics::new();
    three_spokes_ticked(&m);
    let later = TickReport::of(vec![spoke("dev", Outcome::Healthy, None)]);
    m.observe_tick(&later, Duration::from_secs(1), SystemTime::now());
    let text = m.encode().unwrap();
    assert!(
        !text.contains("spokekeeper_spoke_up{spoke=\"test\"}"),
        "{text}"
    );
    assert!(text.contains("spokekeeper_errors_total{spoke=\"test\",stage=\"probe\"} 1"));
    assert!(text.contains("spokekeeper_rotations_total{spoke=\"dev\",reason=\"initial\"} 1"));
    assert!(
        text.contains("spokekeeper_last_rotation_timestamp_seconds{spoke=\"dev\",reason=\"initial\"} 1700000000.0"),
        "a tick without a rotation keeps the last one: {text}"
    );
}

#[test]
fn a_rotation_for_another_reason_replaces_the_last_rotation_series() {
    let m = Metrics::new();
    three_spokes_ticked(&m);
    let forced = TickReport::of(vec![spoke(
        "dev",
        Outcome::Rotated {
            commit: "def".into(),
        },
        Some(Reason::Forced),
    )]);
    m.observe_tick(
        &forced,
        Duration::from_secs(1),
        UNIX_EPOCH + Duration::from_secs(1_700_000_900),
    );
    let text = m.encode().unwrap();
    let last: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("spokekeeper_last_rotation_timestamp_seconds{"))
        .collect();
    assert_eq!(
        last,
        [
            "spokekeeper_last_rotation_timestamp_seconds{spoke=\"dev\",reason=\"forced\"} 1700000900.0"
        ]
    );
}

/// Every `stage` label value the code can produce.
fn stage_labels() -> Vec<&'static str> {
    Stage::ALL
        .iter()
        .map(|s| s.metric_label())
        .chain(RepoStage::ALL.iter().map(|s| s.metric_label()))
        .chain(OtherStage::ALL.iter().map(|s| s.metric_label()))
        .collect()
}

#[test]
fn stage_labels_are_a_fixed_set_of_plain_names() {
    let labels = stage_labels();
    for l in &labels {
        assert!(
            !l.is_empty() && l.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
            "{l:?}"
        );
    }
    // The spoke stage label is the name the JSON report uses.
    for s in Stage::ALL {
        assert_eq!(serde_json::to_value(s).unwrap(), s.metric_label());
    }
}

/// A failure at `stage` whose texts are all `text`.
fn failing_at(stage: Stage, text: &str) -> crate::rotate::SpokeError {
    use crate::rotate::{ReviewError, SpokeError};
    use std::sync::Arc;
    let repo = || Arc::new(crate::repo::RepoError::Locked(text.into()));
    match stage {
        Stage::Observe => SpokeError::Read(repo()),
        Stage::Probe => SpokeError::Unreachable(crate::spoke::ProbeError::Refused {
            server: text.into(),
        }),
        Stage::Extract => SpokeError::Extract(Arc::new(crate::spoke::ExtractError::Ssh {
            target: text.into(),
            detail: text.into(),
        })),
        Stage::Validate => {
            SpokeError::Kubeconfig(Arc::new(crate::kubeconfig::KubeconfigError::Yaml {
                line: None,
                column: None,
                reason: text.into(),
            }))
        }
        Stage::Mint => SpokeError::RevokeExtracted { spoke: text.into() },
        Stage::Trust => SpokeError::RevokeFederated {
            spoke: text.into(),
            had: None,
        },
        Stage::Seal => SpokeError::Untrusted(text.into()),
        Stage::Commit => SpokeError::Commit(repo()),
        Stage::Push => SpokeError::NotPushed {
            branch: text.into(),
            why: text.into(),
        },
        Stage::Review => SpokeError::Review(ReviewError::Unverified(text.into())),
    }
}

#[test]
fn error_texts_never_become_label_values() {
    let hostile = "the clone has 2 commit(s) that origin/main does not: x\"} 1\nevil{a=\"";
    let m = Metrics::new();
    for stage in RepoStage::ALL {
        let mut spokes: Vec<SpokeReport> = Stage::ALL
            .iter()
            .map(|&stage| {
                let outcome = Outcome::Failed(failing_at(stage, &format!("{hostile}: {stage}")));
                spoke(&format!("s-{stage}"), outcome, None)
            })
            .collect();
        spokes.push(spoke("ok", Outcome::Healthy, None));
        let report = TickReport {
            repo_error: Some(match stage {
                RepoStage::Sync => {
                    RepoFailure::Sync(std::sync::Arc::new(crate::repo::RepoError::Git {
                        args: hostile.into(),
                        stderr: hostile.into(),
                    }))
                }
                RepoStage::Push => RepoFailure::NotPushed {
                    why: hostile.into(),
                },
                RepoStage::Unpushed => RepoFailure::Unpushed {
                    commits: 2,
                    remote: hostile.into(),
                    branch: hostile.into(),
                    clone: hostile.into(),
                },
            }),
            ..TickReport::of(spokes)
        };
        m.observe_tick(&report, Duration::from_secs(1), SystemTime::now());
    }
    let text = m.encode().unwrap();
    // The set docs/metrics.md documents, written out: not derived from the code under test.
    let allowed = [
        "observe", "probe", "extract", "validate", "mint", "trust", "seal", "commit", "push",
        "review", "hub", "sync", "unpushed", "tick", "alert", "reload",
    ];
    let mut seen = 0;
    for part in text.split("stage=\"").skip(1) {
        let value = &part[..part.find('"').unwrap()];
        assert!(allowed.contains(&value), "label {value:?} in:\n{text}");
        seen += 1;
    }
    assert_eq!(seen, Stage::ALL.len() + RepoStage::ALL.len(), "{text}");
    assert!(!text.contains("commit(s)"), "{text}");
}
