//! One scenario against the real Alertmanager and the webhook: certificates fire as one group, a re-send is quiet, a rotation and a spoke back up resolve.

use super::*;

/// An alert as Alertmanager lists it: (alertname, spoke, cert, severity).
type Key = (String, String, String, String);

#[tokio::test(flavor = "multi_thread")]
async fn alerts_fire_and_resolve_in_alertmanager_and_the_webhook_hears_only_changes() {
    crate::support::requires!(ROOT, ALERTMANAGER);
    support::install_crypto_provider();
    let recorder = Receiver::start(RECORDER_PATH).await;
    let am = real_alertmanager(&recorder);
    let hook = Receiver::start(HOOK_PATH).await;
    let lab = Lab::new();
    let mut nodes: Vec<Node> = [5, 20, 300]
        .iter()
        .map(|&d| {
            lab.add_node(NodeOptions {
                client_cert_days: d,
                ..NodeOptions::default()
            })
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), &nodes, &am, &hook).await;
    let period = Duration::from_secs(60);
    let mut notifier = Notifier::new(
        &ctx.config.alerts,
        NotifyOptions {
            evaluation_period: period,
            ..NotifyOptions::default()
        },
    )
    .unwrap();

    // 1. Two client certificates inside the thresholds: Alertmanager takes and lists
    // both alerts with the labels docs/alerts.md lists, and notifies them as one group.
    let before = OffsetDateTime::now_utc();
    tick_and_notify(&ctx, &mut notifier).await;
    let sent = OffsetDateTime::now_utc();
    let first = listed(&am);
    let crit = key(
        "SpokekeeperCertificateExpiring",
        "spoke0",
        "client",
        "critical",
    );
    let warn = key(
        "SpokekeeperCertificateExpiring",
        "spoke1",
        "client",
        "warning",
    );
    assert_eq!(
        first.keys().cloned().collect::<Vec<_>>(),
        [crit.clone(), warn.clone()]
    );
    for (k, node) in [(&crit, &nodes[0]), (&warn, &nodes[1])] {
        assert_listed_as_documented(&first[k], k, node, (before, sent), period);
    }
    let grouped = notification(&recorder, 0, "SpokekeeperCertificateExpiring", "firing");
    assert_eq!(
        notified(&grouped),
        [pair("spoke0", "firing"), pair("spoke1", "firing")],
        "one notification for the group: {grouped:#}"
    );
    let hooks = hook.posts();
    assert_eq!(hooks.len(), 1);
    let mut c = changes(&hooks[0]);
    c.sort();
    assert_eq!(
        c,
        [
            change("spoke0", "client", "ok", "critical"),
            change("spoke1", "client", "ok", "warning")
        ]
    );

    nothing_changed_is_resent_quietly(&ctx, &mut notifier, (&am, &hook), (&first, &crit)).await;

    spoke0_renewed_and_rotated(
        &ctx,
        &mut notifier,
        &mut nodes[0],
        (&recorder, &am, &hook),
        &warn,
    )
    .await;

    // 4. The next evaluation leaves it resolved.
    tick_and_notify(&ctx, &mut notifier).await;
    assert_eq!(listed(&am).keys().collect::<Vec<_>>(), [&warn]);
    assert_eq!(hook.posts().len(), 2);

    spoke2_down_then_up(
        &ctx,
        &mut notifier,
        &mut nodes[2],
        (&recorder, &am, &hook),
        &warn,
    )
    .await;
    let active: Vec<String> = notifier
        .active_alerts()
        .map(|a| a.labels["spoke"].clone())
        .collect();
    assert_eq!(active, ["spoke1"]);
    recorder.assert_clean();
    hook.assert_clean();
}

/// The tick's context for `nodes`, alerting to `am` and `hook`, sealing to the vectors' key.
async fn context(dir: &Path, nodes: &[Node], am: &Peer, hook: &Receiver) -> Context {
    let am_url = format!("http://{}", am.addr);
    let config = fleet(dir, nodes, &am_url, &hook.url());
    let config = Config::load(&config).unwrap();
    let cert = vectors().join("key/cert.pem");
    let sealing = SealingKey::from_pem(
        &std::fs::read(&cert).unwrap(),
        "cert.pem",
        OffsetDateTime::now_utc(),
    )
    .unwrap();
    let repo = Repo::open(&config.repo).await.unwrap();
    Context::new(config, sealing, repo).unwrap()
}

/// Listed with the labels and the exact expiry date docs/alerts.md shows, started between
/// `before` and `sent`, ending three to four periods ahead.
fn assert_listed_as_documented(
    a: &Value,
    k: &Key,
    node: &Node,
    (before, sent): (OffsetDateTime, OffsetDateTime),
    period: Duration,
) {
    let date = rfc3339(client_not_after(node));
    let description = a["annotations"]["description"].as_str().unwrap();
    assert!(
        description.contains(&date),
        "exact date {date} in: {description}"
    );
    assert!(a["annotations"]["summary"].as_str().unwrap().contains(&k.1));
    let starts = time(&a["startsAt"]);
    assert!(before - time::Duration::SECOND <= starts && starts <= sent);
    let ahead = time(&a["endsAt"]) - sent;
    assert!(
        ahead > period * 3 - time::Duration::SECOND && ahead <= period * 4,
        "endsAt {ahead} ahead"
    );
}

/// Step 2: nothing changed: re-sent, so Alertmanager keeps startsAt and moves endsAt on;
/// the webhook hears nothing.
async fn nothing_changed_is_resent_quietly(
    ctx: &Context,
    notifier: &mut Notifier,
    (am, hook): (&Peer, &Receiver),
    (first, crit): (&BTreeMap<Key, Value>, &Key),
) {
    tick_and_notify(ctx, notifier).await;
    let again = listed(am);
    assert_eq!(
        again.keys().collect::<Vec<_>>(),
        first.keys().collect::<Vec<_>>()
    );
    assert_eq!(
        time(&again[crit]["startsAt"]),
        time(&first[crit]["startsAt"])
    );
    assert!(time(&again[crit]["endsAt"]) > time(&first[crit]["endsAt"]));
    assert!(time(&again[crit]["updatedAt"]) > time(&first[crit]["updatedAt"]));
    assert_eq!(hook.posts().len(), 1);
}

/// Step 3: spoke0's node renews its certificate (same CA: a probe cannot see it, and it is
/// not inside renew_before); the operator rotates it now: resolved, so Alertmanager no
/// longer lists it and tells the receiver.
async fn spoke0_renewed_and_rotated(
    ctx: &Context,
    notifier: &mut Notifier,
    node: &mut Node,
    (recorder, am, hook): (&Receiver, &Peer, &Receiver),
    warn: &Key,
) {
    let seen = recorder.posts().len();
    node.renew_client_cert(300);
    let force_spoke0 = Options {
        force: true,
        only: vec!["spoke0".into()],
        concurrency: 1,
        ..Options::default()
    };
    let findings = tick_with_and_notify(ctx, notifier, &force_spoke0).await;
    let rotation = findings
        .iter()
        .find(|f| f.spoke == "spoke0" && f.subject == Subject::Rotation)
        .unwrap();
    assert_eq!(rotation.detail, "rotated");
    assert_eq!(listed(am).keys().collect::<Vec<_>>(), [warn]);
    let update = notification(recorder, seen, "SpokekeeperCertificateExpiring", "firing");
    assert_eq!(
        notified(&update),
        [pair("spoke0", "resolved"), pair("spoke1", "firing")],
        "{update:#}"
    );
    let hooks = hook.posts();
    assert_eq!(hooks.len(), 2);
    assert_eq!(
        changes(&hooks[1]),
        [change("spoke0", "client", "critical", "ok")]
    );
}

/// Steps 5 and 6: spoke2's API goes down (unreachable, its tick fails: two alerts fire)
/// and comes back (both resolve), in Alertmanager and at the receiver.
async fn spoke2_down_then_up(
    ctx: &Context,
    notifier: &mut Notifier,
    node: &mut Node,
    (recorder, am, hook): (&Receiver, &Peer, &Receiver),
    warn: &Key,
) {
    // 5. spoke2's API goes down: unreachable, and its tick fails.
    let seen = recorder.posts().len();
    node.stop_api();
    tick_and_notify(ctx, notifier).await;
    let fifth = listed(am);
    let down = key("SpokekeeperSpokeUnreachable", "spoke2", "", "warning");
    let failing = key("SpokekeeperRotationFailing", "spoke2", "", "warning");
    assert_eq!(
        fifth.keys().collect::<Vec<_>>(),
        [warn, &failing, &down],
        "{fifth:#?}"
    );
    let why = fifth[&failing]["annotations"]["description"]
        .as_str()
        .unwrap();
    assert!(
        why.contains("failed at probe") && why.contains("refused"),
        "{why}"
    );
    for name in ["SpokekeeperSpokeUnreachable", "SpokekeeperRotationFailing"] {
        let n = notification(recorder, seen, name, "firing");
        assert_eq!(notified(&n), [pair("spoke2", "firing")]);
    }
    let mut c = changes(&hook.posts()[2]);
    c.sort();
    assert_eq!(
        c,
        [
            change("spoke2", "api", "ok", "unknown"),
            change("spoke2", "rotation", "ok", "warning")
        ]
    );

    // 6. Back up: both resolve, in Alertmanager and at the receiver.
    let seen = recorder.posts().len();
    node.start_api();
    tick_and_notify(ctx, notifier).await;
    assert_eq!(listed(am).keys().collect::<Vec<_>>(), [warn]);
    for name in ["SpokekeeperSpokeUnreachable", "SpokekeeperRotationFailing"] {
        let n = notification(recorder, seen, name, "resolved");
        assert_eq!(notified(&n), [pair("spoke2", "resolved")]);
    }
    let hooks = hook.posts();
    assert_eq!(hooks.len(), 4);
    let mut c = changes(&hooks[3]);
    c.sort();
    assert_eq!(
        c,
        [
            change("spoke2", "api", "unknown", "ok"),
            change("spoke2", "rotation", "warning", "ok")
        ]
    );
}
