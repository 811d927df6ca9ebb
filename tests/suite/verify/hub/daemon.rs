//! The daemon and the one-shot commands on the hub: its gauges and alerts, retries and pending requests, Events, status.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn status_without_a_hub_reports_the_commit_and_the_probe() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    let (code, out, err) = fleet.run(&["status", "-o", "json"]);
    assert_eq!(code, 1, "nothing committed yet is a warning: {out}\n{err}");
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["spokes"][0]["committed"]["state"], "missing");
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let (code, out, err) = fleet.run(&["status", "-o", "json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["hub"], Value::Null);
    assert_eq!(status["spokes"][0]["sealed_secret"], Value::Null);
    assert_eq!(status["spokes"][0]["probe"]["state"], "ok");
    assert!(status["spokes"][0]["committed"]["ca_sha256"].is_string());
    assert_eq!(
        status["spokes"][0]["committed"]["credential"],
        serde_json::json!({"mode": "extracted"})
    );
    // A configuration that does not load: exit 2, with the field named.
    std::fs::write(
        &fleet.config,
        "repo: {path: x}\nsealing: {cert: c}\nhub: {kubecfg: x}\nspokes: []\n",
    )
    .unwrap();
    let (code, _, err) = fleet.run(&["status"]);
    assert_eq!(code, 2);
    assert!(err.contains("kubecfg"), "{err}");
}

/// `spokekeeper run` with a hub: the tick's hub results reach /metrics and the alert log.
#[test]
fn the_daemon_exports_hub_metrics_and_alerts_on_a_stuck_sealed_secret() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 3s\n");
    l.hub.set_keys(vec![key("other-key")]);
    let daemon = support::daemon::Daemon::start(&l.fleet.config, &[]);
    let text = daemon.wait_for("tick finished", std::time::Duration::from_secs(60));
    assert!(text.contains("SpokekeeperHubNotReady"), "{text}");
    assert!(
        text.contains("no key could decrypt secret (value)"),
        "{text}"
    );
    let metrics = daemon.metrics();
    for line in [
        "spokekeeper_hub_reachable 1",
        "spokekeeper_hub_synced{spoke=\"spoke0\"} 0",
        "spokekeeper_hub_ready{spoke=\"spoke0\"} 0",
        "spokekeeper_errors_total{spoke=\"spoke0\",stage=\"hub\"} 1",
        "spokekeeper_rotations_total{spoke=\"spoke0\",reason=\"initial\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "want {line:?} in:\n{metrics}"
        );
    }
    l.assert_within_access();
}

/// The daemon looks again, every tick, at a spoke whose pushed credential the hub had not
/// taken: once Flux recovers, the gauges (and so the alerts) clear without a new rotation.
#[test]
fn the_daemon_clears_hub_gauges_once_the_hub_takes_the_credential() {
    crate::support::requires!(ROOT);
    use std::time::{Duration, Instant};
    let l = lab(1, "  verify_timeout: 3s\n");
    l.hub
        .set_flux(Flux::Failing("kustomize build failed".into()));
    let daemon = support::daemon::Daemon::start(&l.fleet.config, &["--interval", "2s"]);
    daemon.wait_for("tick finished", Duration::from_secs(60));
    let scrape = || daemon.metrics();
    let has = |text: &str, line: &str| text.lines().any(|l| l == line);
    let metrics = scrape();
    assert!(
        has(&metrics, "spokekeeper_hub_ready{spoke=\"spoke0\"} 0"),
        "{metrics}"
    );
    let commits = l.fleet.remote_log().len();
    l.hub.set_flux(Flux::Ready);
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = scrape();
        if has(&metrics, "spokekeeper_hub_ready{spoke=\"spoke0\"} 1") {
            assert!(has(&metrics, "spokekeeper_hub_synced{spoke=\"spoke0\"} 1"));
            break;
        }
        assert!(
            Instant::now() < end,
            "the gauge never cleared:\n{metrics}\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        l.fleet.remote_log().len(),
        commits,
        "no new rotation was needed"
    );
    l.assert_within_access();
}

/// A recheck of a spoke whose consumer Flux had not finished waits for the request made
/// at the push (and its echo) instead of setting a new one that restarts the wait.
#[tokio::test(flavor = "multi_thread")]
async fn a_recheck_waits_for_the_pending_request() {
    crate::support::requires!(ROOT);
    use spokekeeper::hub::Hub;
    use spokekeeper::hub::verify::{Ask, verify};
    use std::time::Duration;
    let l = lab(1, "  verify_timeout: 5s\n");
    l.hub.set_flux(Flux::Stalled);
    let (_, report, err) = l.fleet.rotate_json(&["--all"]);
    let first = &report["spokes"][0]["hub"];
    assert_eq!(
        first["consumers"][0]["ready"]["status"], "TimedOut",
        "{report}\n{err}"
    );
    let at = first["requested_at"].as_str().unwrap().to_string();
    assert_eq!(
        patches_to(&l.hub, "kustomizations", "flux-system", "spoke0"),
        1
    );

    l.hub.set_flux(Flux::Ready);
    let text = std::fs::read_to_string(&l.fleet.config).unwrap();
    let config =
        spokekeeper::config::Config::parse(&text, "spokekeeper.yaml", l.fleet.dir.path()).unwrap();
    let hub_cfg = config.hub.clone().unwrap();
    let hub = Hub::connect(&hub_cfg).await.unwrap();
    let spoke = &config.spokes[0];
    let ciphertext = l.sealed(0).encrypted_data[&spoke.secret.key].clone();
    let consumer = spokekeeper::hub::Consumer {
        kind: spokekeeper::hub::Kind::Kustomization,
        namespace: "flux-system".into(),
        name: "spoke0".into(),
    };
    let again = verify(
        &hub,
        spoke,
        &ciphertext,
        Ok(vec![consumer]),
        None,
        Duration::from_secs(5),
        Ask::Again,
    )
    .await;
    assert!(again.ok(), "{again:?}");
    assert_eq!(again.requested_at.as_deref(), Some(at.as_str()));
    assert_eq!(
        patches_to(&l.hub, "kustomizations", "flux-system", "spoke0"),
        1,
        "no new request"
    );
}

/// A 429 from the hub API (API Priority and Fairness) during verification is waited out
/// for its Retry-After, for the reads and the reconcile request alike, and verification
/// still ends Ready.
#[tokio::test(flavor = "multi_thread")]
async fn verification_honours_retry_after() {
    crate::support::requires!(ROOT);
    use std::time::Duration;
    let l = lab(1, "  verify_timeout: 30s\n");
    let gaps_after_429 = |part: &str| {
        let seen: Vec<_> = l
            .hub
            .requests()
            .into_iter()
            .filter(|r| r.path.contains(part))
            .collect();
        let throttled = seen.iter().filter(|r| r.throttled).count();
        let gaps: Vec<Duration> = seen
            .windows(2)
            .filter(|w| w[0].throttled)
            .map(|w| w[1].at - w[0].at)
            .collect();
        (throttled, gaps)
    };
    l.hub.throttle("/sealedsecrets/", 2, 2);
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        report["spokes"][0]["hub"]["consumers"][0]["ready"]["ok"],
        true
    );
    let (throttled, gaps) = gaps_after_429("/sealedsecrets/");
    assert_eq!((throttled, gaps.len()), (2, 2));
    assert!(
        gaps.iter().all(|g| *g >= Duration::from_secs(2)),
        "{gaps:?}"
    );

    l.hub.throttle("/kustomizations/spoke0", 1, 1);
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        report["spokes"][0]["hub"]["consumers"][0]["ready"]["ok"],
        true
    );
    let (throttled, gaps) = gaps_after_429("/kustomizations/spoke0");
    assert_eq!((throttled, gaps.len()), (1, 1));
    assert!(gaps[0] >= Duration::from_secs(1), "{gaps:?}");
    l.assert_within_access();
}

/// The controller writes Synced False when an unseal fails, then retries it: a False is
/// the result only once the retry had its chance.
#[tokio::test(flavor = "multi_thread")]
async fn a_synced_false_waits_for_the_controllers_retry() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 30s\n");
    l.hub.fail_next_unseal();
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let hub = &report["spokes"][0]["hub"];
    assert_eq!(hub["synced"]["ok"], true, "{hub}");
    assert_eq!(hub["consumers"][0]["ready"]["ok"], true, "{hub}");
}

/// The daemon's Events on the emulated hub: a rotation and an expiry warning on the
/// spoke's Kustomization, the warning's repeats patched into one Event's series, an Event
/// gone from the hub (its TTL) created again rather than lost, and every call within
/// hub::ACCESS (create and patch on events.k8s.io Events).
#[test]
fn the_daemon_records_events_aggregates_repeats_and_recreates_an_expired_one() {
    crate::support::requires!(ROOT);
    let l = lab(1, "");
    l.builder()
        .top("alerts:\n  warn_before: 36500d\n")
        .write(&l.fleet.config)
        .unwrap();
    let daemon = support::daemon::Daemon::start(&l.fleet.config, &["--interval", "1s"]);
    let ticks = |n: usize| {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while daemon.log().matches("tick finished").count() < n {
            assert!(std::time::Instant::now() < end, "{}", daemon.log());
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let client_warning = |events: &[Value]| -> Vec<Value> {
        events
            .iter()
            .filter(|e| {
                e["reason"] == "CredentialExpiring"
                    && e["note"]
                        .as_str()
                        .is_some_and(|n| n.contains("client certificate"))
            })
            .cloned()
            .collect()
    };
    ticks(3);
    let events = l.hub.events();
    let rotated: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "CredentialRotated")
        .collect();
    assert_eq!(rotated.len(), 1, "{events:#?}");
    assert_eq!(rotated[0]["regarding"]["kind"], "Kustomization");
    assert_eq!(rotated[0]["regarding"]["name"], "spoke0");
    assert_eq!(rotated[0]["metadata"]["namespace"], "flux-system");
    let warned = client_warning(&events);
    assert_eq!(warned.len(), 1, "one Event, not one per tick: {events:#?}");
    let first = warned[0]["metadata"]["name"].as_str().unwrap().to_string();
    assert!(
        warned[0]["series"]["count"].as_u64().unwrap_or(0) >= 2,
        "{:#}",
        warned[0]
    );

    // The API server deletes Events after --event-ttl: the next repeat starts anew.
    l.hub.expire_events();
    let seen = daemon.log().matches("tick finished").count();
    ticks(seen + 2);
    let log = daemon.log();
    drop(daemon);
    let warned = client_warning(&l.hub.events());
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert_ne!(warned[0]["metadata"]["name"], first.as_str(), "a new Event");
    assert!(!log.contains("event not recorded"), "{log}");
    let patches_gone = l
        .hub
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.contains(&format!("/events/{first}")))
        .count();
    assert!(
        patches_gone >= 2,
        "the series was patched, also after it was gone"
    );
    l.assert_within_access();
}

/// Issue 40 (11): the one-shot `rotate` and `revoke` record their Events on the hub as the
/// daemon does: the rotation, the revocation and its new generation, and a failure, each
/// on the spoke's Kustomization; a dry run records none.
#[test]
fn one_shot_rotate_and_revoke_record_their_events_on_the_kustomization() {
    crate::support::requires!(ROOT);
    let mut l = lab(1, "");
    l.builder()
        .top("credential:\n  mode: minted\n")
        .write(&l.fleet.config)
        .unwrap();
    let recorded = |l: &HubLab| -> Vec<String> {
        let mut events: Vec<Value> = l.hub.events();
        events.sort_by_key(|e| e["eventTime"].as_str().map(String::from));
        events
            .iter()
            .map(|e| {
                format!(
                    "{} {}/{}",
                    e["reason"].as_str().unwrap_or_default(),
                    e["regarding"]["kind"].as_str().unwrap_or_default(),
                    e["regarding"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect()
    };
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(recorded(&l), ["CredentialRotated Kustomization/spoke0"]);
    let (code, out, err) = l.fleet.run(&["revoke", "spoke0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let mut after_revoke = recorded(&l);
    after_revoke.sort();
    assert_eq!(
        after_revoke,
        [
            "CredentialRevoked Kustomization/spoke0",
            "CredentialRotated Kustomization/spoke0",
            "CredentialRotated Kustomization/spoke0",
        ]
    );
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force", "--dry-run"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(l.hub.events().len(), 3, "a dry run records nothing");
    l.fleet.nodes[0].stop_api();
    l.fleet.nodes[0].stop_sshd();
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    assert_ne!(code, 0, "{report:#}\n{err}");
    assert_eq!(
        recorded(&l).last().map(String::as_str),
        Some("RotationFailed Kustomization/spoke0")
    );
    assert!(!err.contains("not recorded"), "{err}");
    l.assert_within_access();
}
