use super::decrypted::{decrypter, decryption};
use super::ready::{ready, retries_exceeded, reusable};
use super::spoke::elsewhere;
use super::synced::synced;
use super::*;
use crate::hub::{Condition, Consumer, HubObject, Kind};

fn cond(t: &str, s: &str, reason: &str, msg: &str) -> Condition {
    Condition {
        type_: t.into(),
        status: s.into(),
        reason: Some(reason.into()),
        message: Some(msg.into()),
        last_transition_time: None,
    }
}

fn sealed(ct: &str, generation: i64, observed: i64, c: Option<Condition>) -> HubObject {
    HubObject {
        generation: Some(generation),
        observed_generation: Some(observed),
        conditions: c.into_iter().collect(),
        encrypted_data: [("value".to_string(), ct.to_string())].into(),
        ..HubObject::default()
    }
}

#[test]
fn synced_only_for_the_committed_ciphertext_at_the_current_generation() {
    let ok = cond("Synced", "True", "", "");
    assert!(matches!(
        synced(&sealed("old", 2, 2, Some(ok.clone())), "value", "new", None),
        Seen::Waiting(w) if w.contains("older encryptedData")
    ));
    assert!(matches!(
        synced(&sealed("new", 3, 2, Some(ok.clone())), "value", "new", None),
        Seen::Waiting(w) if w.contains("generation 3")
    ));
    assert!(matches!(
        synced(&sealed("new", 3, 3, Some(ok)), "value", "new", None),
        Seen::Done(Check { ok: true, .. })
    ));
    let bad = cond(
        "Synced",
        "False",
        "ErrUnsealFailed",
        "no key could decrypt secret (value)",
    );
    match synced(&sealed("new", 3, 3, Some(bad)), "value", "new", None) {
        Seen::Done(c) => {
            assert!(!c.ok);
            assert_eq!(c.status, "False");
            assert_eq!(c.message, "no key could decrypt secret (value)");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        synced(&sealed("new", 3, 3, None), "value", "new", None),
        Seen::Waiting(_)
    ));
}

#[test]
fn hub_text_in_a_condition_becomes_one_bounded_line() {
    let hostile = cond(
        "Ready",
        "False",
        "Failed\nreason",
        &format!("line one\nrotate: forged\u{202E}{}", "x".repeat(10_000)),
    );
    let obj = HubObject {
        generation: Some(1),
        observed_generation: Some(1),
        conditions: vec![hostile],
        last_handled_reconcile_at: Some("now".into()),
        ..HubObject::default()
    };
    match ready(&obj, "now") {
        Seen::Done(c) => {
            assert!(c.message.starts_with("line one rotate: forged"), "{c:?}");
            assert!(!c.message.contains('\u{202E}'));
            assert!(c.message.chars().count() <= 300);
            assert_eq!(c.reason.as_deref(), Some("Failed reason"));
        }
        other => panic!("{other:?}"),
    }
}

fn consumers(n: usize, not_ready: &[usize]) -> Vec<ConsumerCheck> {
    (0..n)
        .map(|i| ConsumerCheck {
            consumer: Consumer {
                kind: if i % 2 == 0 {
                    Kind::Kustomization
                } else {
                    Kind::HelmRelease
                },
                namespace: "flux-system".into(),
                name: format!("c{i}"),
            },
            ready: Check {
                ok: !not_ready.contains(&i),
                status: "True".into(),
                reason: None,
                message: format!("m{i}"),
            },
            requested_at: None,
        })
        .collect()
}

fn report(consumers: Vec<ConsumerCheck>) -> HubReport {
    HubReport {
        delivery: Delivery::Synced(Check {
            ok: true,
            status: "True".into(),
            reason: None,
            message: "unsealed".into(),
        }),
        secret: "flux-system/dev-kubeconfig".into(),
        found_by: FoundBy::Listed,
        list_error: None,
        consumers,
        requested_at: None,
    }
}

#[test]
fn the_summary_names_each_consumer_by_kind_and_counts_past_five() {
    let r = report(consumers(2, &[1]));
    assert!(!r.ok() && !r.unused());
    assert_eq!(
        r.summary(),
        "synced, not ready: HelmRelease flux-system/c1 (m1); ready: Kustomization flux-system/c0"
    );
    let r = report(consumers(8, &[]));
    assert!(r.ok() && !r.unused());
    assert_eq!(
        r.summary(),
        "synced, ready: Kustomization flux-system/c0, HelmRelease flux-system/c1, Kustomization flux-system/c2, HelmRelease flux-system/c3, Kustomization flux-system/c4, 3 more"
    );
    let r = report(Vec::new());
    assert!(r.ok() && r.unused(), "none found: a warning, not a failure");
    let mut r = report(Vec::new());
    r.list_error = Some("list helmreleases in flux-system: 403 Forbidden: no".into());
    assert!(!r.ok() && !r.unused());
    assert!(
        r.summary()
            .contains("consumers not listed: list helmreleases")
    );
}

#[test]
fn ready_waits_for_our_request_and_a_settled_condition() {
    let k = |handled: &str, c: Condition| HubObject {
        generation: Some(1),
        observed_generation: Some(1),
        conditions: vec![c],
        last_handled_reconcile_at: Some(handled.into()),
        ..HubObject::default()
    };
    let progressing = cond(
        "Ready",
        "Unknown",
        "Progressing",
        "Reconciliation in progress",
    );
    let done = cond(
        "Ready",
        "True",
        "ReconciliationSucceeded",
        "Applied revision: main@sha1:abc",
    );
    let failed = cond(
        "Ready",
        "False",
        "ReconciliationFailed",
        "x509: certificate signed by unknown authority",
    );
    assert!(matches!(
        ready(&k("earlier", done.clone()), "now"),
        Seen::Waiting(_)
    ));
    assert!(
        matches!(ready(&k("now", progressing), "now"), Seen::Waiting(w) if w.contains("Unknown"))
    );
    assert!(matches!(
        ready(&k("now", done), "now"),
        Seen::Done(Check { ok: true, .. })
    ));
    match ready(&k("now", failed), "now") {
        Seen::Done(c) => assert!(!c.ok && c.message.contains("x509"), "{c:?}"),
        other => panic!("{other:?}"),
    }
}

fn echoed(generation: i64, observed: Option<i64>, c: Condition) -> HubObject {
    HubObject {
        generation: Some(generation),
        observed_generation: observed,
        conditions: vec![c],
        last_handled_reconcile_at: Some("now".into()),
        requested_at: Some("now".into()),
        ..HubObject::default()
    }
}

#[test]
fn a_false_after_the_echo_is_final_though_observed_generation_is_behind() {
    // Flux advances observedGeneration only on success: after a failed run it stays.
    let failed = cond(
        "Ready",
        "False",
        "ReconciliationFailed",
        "kustomize build failed",
    );
    match ready(&echoed(2, Some(1), failed.clone()), "now") {
        Seen::Done(c) => assert!(!c.ok && c.message == "kustomize build failed", "{c:?}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        ready(&echoed(2, None, failed), "now"),
        Seen::Done(Check { ok: false, .. })
    ));
    // A True still needs the current generation.
    let done = cond("Ready", "True", "ReconciliationSucceeded", "Applied");
    assert!(matches!(
        ready(&echoed(2, Some(1), done.clone()), "now"),
        Seen::Waiting(w) if w.contains("older generation")
    ));
    assert!(matches!(
        ready(&echoed(2, Some(2), done), "now"),
        Seen::Done(Check { ok: true, .. })
    ));
}

#[test]
fn a_failure_that_blames_the_source_has_the_source_read() {
    for (reason, msg) in [
        (
            "ArtifactFailed",
            "GitRepository.source.toolkit.fluxcd.io \"fleet\" not found",
        ),
        (
            "ArtifactFailed",
            "Source artifact not found, retrying in 30s",
        ),
        (
            "SourceNotReady",
            "HelmChart 'flux-system/flux-system-apps' is not ready: chart pull error",
        ),
    ] {
        let c = cond("Ready", "False", reason, msg);
        assert!(
            matches!(ready(&echoed(1, None, c), "now"), Seen::Source(c) if c.message == msg && c.reason.as_deref() == Some(reason)),
            "{reason}"
        );
    }
}

#[test]
fn flux_retries_are_waited_through() {
    let reason = "DependencyNotReady";
    let c = cond(
        "Ready",
        "False",
        reason,
        "dependency 'flux-system/infra' is not ready",
    );
    assert!(
        matches!(ready(&echoed(1, None, c), "now"), Seen::Waiting(w) if w.starts_with("Flux retries") && w.contains(reason)),
        "{reason}"
    );
}

fn release(stalled_reason: &str) -> (Consumer, HubObject) {
    let mut obj = echoed(
        2,
        Some(1),
        cond(
            "Ready",
            "False",
            "UpgradeFailed",
            "Helm upgrade failed: x509",
        ),
    );
    obj.conditions.push(cond(
        "Stalled",
        "True",
        stalled_reason,
        "Failed to upgrade after 1 attempt(s)",
    ));
    let c = Consumer {
        kind: Kind::HelmRelease,
        namespace: "flux-system".into(),
        name: "apps".into(),
    };
    (c, obj)
}

#[test]
fn only_a_helm_release_that_used_up_its_retries_is_reset() {
    let (c, obj) = release("RetriesExceeded");
    assert!(retries_exceeded(&c, &obj));
    // Stalled for a reason a reset does not cure, or not stalled: no reset.
    let (_, other) = release("InvalidCELExpression");
    assert!(!retries_exceeded(&c, &other));
    let mut over = obj.clone();
    over.conditions[1].status = "False".into();
    assert!(!retries_exceeded(&c, &over));
    let k = Consumer {
        kind: Kind::Kustomization,
        ..c
    };
    assert!(!retries_exceeded(&k, &obj), "resetAt is helm-controller's");
}

#[test]
fn a_stalled_failure_says_it_is_stalled() {
    let (_, obj) = release("RetriesExceeded");
    match ready(&obj, "now") {
        Seen::Done(c) => {
            assert!(!c.ok);
            assert_eq!(c.reason.as_deref(), Some("UpgradeFailed"));
            assert_eq!(
                c.message,
                "stalled (RetriesExceeded: Failed to upgrade after 1 attempt(s)): Helm upgrade failed: x509"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_suspended_consumer_is_reported_as_suspended() {
    // It echoes the request and keeps the Ready True of its last run before the push.
    let mut obj = echoed(
        1,
        Some(1),
        cond("Ready", "True", "ReconciliationSucceeded", "old"),
    );
    obj.suspended = true;
    match ready(&obj, "now") {
        Seen::Done(c) => {
            assert!(!c.ok);
            assert_eq!(c.status, "Suspended");
            assert!(c.message.contains("flux resume"), "{}", c.message);
        }
        other => panic!("{other:?}"),
    }
    let v = serde_json::json!({"spec": {"suspend": true}});
    assert!(HubObject::from_json(&v).suspended);
    assert!(!HubObject::from_json(&serde_json::json!({"spec": {"suspend": "yes"}})).suspended);
}

#[test]
fn a_consumer_outside_the_secrets_namespace_is_named() {
    let text =
        "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";
    let cfg = crate::config::Config::parse(text, "spokekeeper.yaml", std::path::Path::new("/x"))
        .unwrap_or_else(|e| panic!("{e}"));
    let spoke = &cfg.spokes[0];
    let at = |ns: &str| Consumer {
        kind: Kind::Kustomization,
        namespace: ns.into(),
        name: "dev".into(),
    };
    assert_eq!(elsewhere(spoke, &at(&spoke.secret.namespace)), None);
    let c = elsewhere(spoke, &at("apps")).unwrap();
    assert_eq!(c.status, "WrongNamespace");
    assert!(
        c.message.contains("spokes[dev].kustomization.namespace"),
        "{}",
        c.message
    );
}

#[test]
fn a_sealed_secret_without_any_status_names_the_controller_versions() {
    let mut obj = sealed("new", 1, 0, None);
    obj.observed_generation = None;
    assert!(matches!(
        synced(&obj, "value", "new", None),
        Seen::Waiting(w) if w.contains("does not report status") && w.contains("v0.24.3")
    ));
}

#[test]
fn a_sealed_secret_without_any_status_names_the_version_the_service_gives() {
    let mut obj = sealed("new", 1, 0, None);
    obj.observed_generation = None;
    let said = |v| match synced(&obj, "value", "new", Some(v)) {
        Seen::Waiting(w) => w,
        other => panic!("{other:?}"),
    };
    for old in ["0.24.2", "v0.16.0", "0.24.3-rc.1"] {
        let w = said(old);
        assert!(
            w.contains(&format!("v{}", old.trim_start_matches('v')))
                && w.contains("does not support")
                && w.contains("v0.24.3 or later"),
            "{w}"
        );
    }
    for new in ["0.24.3", "0.36.1", "v1.0.0"] {
        let w = said(new);
        assert!(
            w.contains("--update-status=false") && !w.contains("does not support"),
            "{w}"
        );
    }
    let w = said("main");
    assert!(w.contains("v0.24.3") && w.contains("says vmain"), "{w}");
}

#[test]
fn a_recheck_reuses_a_request_unless_it_failed() {
    let progressing = cond(
        "Ready",
        "Unknown",
        "Progressing",
        "Reconciliation in progress",
    );
    let mut pending = echoed(1, Some(1), progressing);
    pending.last_handled_reconcile_at = Some("before".into());
    assert_eq!(reusable(&pending).as_deref(), Some("now"));
    let done = cond("Ready", "True", "ReconciliationSucceeded", "Applied");
    assert_eq!(reusable(&echoed(1, Some(1), done)).as_deref(), Some("now"));
    let retried = cond("Ready", "False", "DependencyNotReady", "waiting");
    assert_eq!(reusable(&echoed(1, None, retried)).as_deref(), Some("now"));
    let failed = cond("Ready", "False", "ReconciliationFailed", "x509");
    assert_eq!(reusable(&echoed(1, None, failed)), None, "asked again");
    let mut none = echoed(1, Some(1), cond("Ready", "True", "", ""));
    none.requested_at = None;
    assert_eq!(reusable(&none), None);
}

#[test]
fn behind_with_synced_true_names_the_v0_24_2_quirk() {
    let ok = cond("Synced", "True", "", "");
    assert!(matches!(
        synced(&sealed("new", 3, 2, Some(ok)), "value", "new", None),
        Seen::Waiting(w) if w.contains("generation 3") && w.contains("v0.24.2")
    ));
    let bad = cond("Synced", "False", "ErrUnsealFailed", "no key");
    assert!(matches!(
        synced(&sealed("new", 3, 2, Some(bad)), "value", "new", None),
        Seen::Waiting(w) if !w.contains("v0.24.2")
    ));
}

/// What kustomize-controller v1.9.6 writes on a Kustomization whose sops file is
/// encrypted to another age key (tests/suite/realstack/flux_sops.rs reads it from the
/// real controller).
fn undecrypted() -> HubObject {
    let failed = cond(
        "Ready",
        "False",
        "BuildFailed",
        "decryption failed for 'Secret.v1.[noGrp]/spoke0-kubeconfig': failed to decrypt and format 'flux-system/spoke0-kubeconfig' Secret data: cannot get sops data key: Failed to get the data key required to decrypt the SOPS file. Group 0: FAILED age1f4p9mdp7h2049lmr8tgzstrtvve3c45g2gpdyyll6r76v2",
    );
    echoed(2, Some(1), failed)
}

#[test]
fn a_sops_file_kustomize_controller_cannot_decrypt_is_reported_as_such() {
    let Seen::Done(check) = ready(&undecrypted(), "now") else {
        panic!("a False after the echo is final");
    };
    let check = decryption(check);
    assert_eq!(check.status, "DecryptionFailed");
    assert_eq!(check.reason.as_deref(), Some("BuildFailed"));
    assert!(check.message.contains("spoke0-kubeconfig"), "{check:?}");
    let mut r = report(Vec::new());
    r.delivery = Delivery::Decrypted(check);
    assert!(!r.ok());
    assert!(
        r.summary()
            .starts_with("not decrypted: decryption failed for"),
        "{}",
        r.summary()
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["decrypted"]["status"], "DecryptionFailed", "{json}");
    assert!(json.get("synced").is_none(), "{json}");
    // Any other failure of the Kustomization keeps its own status.
    let other = decryption(Check::failed("False", "kustomize build failed: x".into()));
    assert_eq!(other.status, "False");
}

#[test]
fn a_sealed_secret_report_keeps_its_synced_field() {
    let r = report(consumers(1, &[]));
    let json = serde_json::to_string(&r).unwrap();
    assert!(
        json.starts_with(
            r#"{"synced":{"ok":true,"status":"True","reason":null,"message":"unsealed"},"secret":"#
        ),
        "{json}"
    );
    assert_eq!(r.summary(), "synced, ready: Kustomization flux-system/c0");
    let mut d = r.clone();
    d.delivery = Delivery::Decrypted(r.delivery.check().clone());
    assert_eq!(
        d.summary(),
        "decrypted, ready: Kustomization flux-system/c0"
    );
}

#[test]
fn the_decrypter_is_the_sops_kustomization_whose_path_holds_the_file() {
    let k = |name: &str| Consumer {
        kind: Kind::Kustomization,
        namespace: "flux-system".into(),
        name: name.into(),
    };
    let listed = vec![
        (k("root"), "./".to_string()),
        (k("secrets"), "./clusters/hub/secrets".to_string()),
        (k("apps"), "./apps".to_string()),
    ];
    let file = std::path::Path::new("clusters/hub/secrets/dev.yaml");
    assert_eq!(decrypter(&listed, file), Some(k("secrets")));
    let file = std::path::Path::new("clusters/other/dev.yaml");
    assert_eq!(decrypter(&listed, file), Some(k("root")));
    // A file no sops Kustomization's path holds has no decrypter.
    assert_eq!(decrypter(&listed[1..], file), None);
    // `.` and an absolute-looking path are the repo's root, as Flux reads them.
    assert_eq!(decrypter(&[(k("dot"), ".".into())], file), Some(k("dot")));
    assert_eq!(
        decrypter(&[(k("abs"), "/clusters".into())], file),
        Some(k("abs"))
    );
}
