//! The alert sinks. The lab test drives the daemon's loop in-process (tick, observe,
//! evaluate, notify) against Debian's real Alertmanager, whose webhook receiver records
//! what it notifies; the daemon test runs `spokekeeper run` against it. An emulated
//! receiver on 127.0.0.1 stands in for spokekeeper's generic webhook, and for
//! Alertmanager only where a test needs a fault the real one cannot produce (5xx, 400,
//! a hang).

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use spokekeeper::alerts::{
    self, AlertName, Finding, Notifier, NotifyOptions, SealingCert, Sink, Status, Subject,
};
use spokekeeper::certs::CertInfo;
use spokekeeper::config::{AlertsConfig, Config};
use spokekeeper::repo::Repo;
use spokekeeper::rotate::state::rfc3339;
use spokekeeper::rotate::{self, Context, Options};
use spokekeeper::seal::SealingKey;
use spokekeeper_lab::webhook::{Mode, Post, Receiver};
use support::fleet::{config_yaml, spokekeeper as run_binary, vectors};
use support::git::fleet_remote;
use support::peers::{self, Peer};
use support::{Lab, Node, NodeOptions};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

const AM_PATH: &str = "/api/v2/alerts";
/// Where the real Alertmanager sends its notifications.
const RECORDER_PATH: &str = "/alertmanager-receiver";
/// Webhook paths often are the secret (Slack-style): they must never be printed.
const HOOK_PATH: &str = "/hooks/T000/secret-token";

fn time(v: &Value) -> OffsetDateTime {
    OffsetDateTime::parse(v.as_str().unwrap(), &Rfc3339).unwrap()
}

/// Alerts of one POST by (alertname, spoke, cert, severity).
fn alerts_in(post: &Post) -> BTreeMap<(String, String, String, String), Value> {
    let mut out = BTreeMap::new();
    for a in post.body.as_array().expect("a JSON array of alerts") {
        let l = &a["labels"];
        let s = |k: &str| l[k].as_str().unwrap_or("").to_string();
        let mut keys: Vec<&String> = l.as_object().unwrap().keys().collect();
        keys.sort();
        let want: &[&str] = if l.get("cert").is_some() {
            &["alertname", "cert", "severity", "spoke"]
        } else {
            &["alertname", "severity", "spoke"]
        };
        assert_eq!(keys, want, "{a:#}");
        assert!(a["annotations"]["summary"].is_string());
        assert!(a["annotations"]["description"].is_string());
        let prev = out.insert(
            (s("alertname"), s("spoke"), s("cert"), s("severity")),
            a.clone(),
        );
        assert!(prev.is_none(), "one alert per label set");
    }
    out
}

fn key(alert: &str, spoke: &str, cert: &str, sev: &str) -> (String, String, String, String) {
    (alert.into(), spoke.into(), cert.into(), sev.into())
}

fn changes(post: &Post) -> Vec<(String, String, String, String)> {
    assert_eq!(post.body["source"], "spokekeeper");
    post.body["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap().to_string();
            (s("spoke"), s("cert"), s("previous"), s("severity"))
        })
        .collect()
}

fn change(spoke: &str, cert: &str, from: &str, to: &str) -> (String, String, String, String) {
    (spoke.into(), cert.into(), from.into(), to.into())
}

// ---- the daemon's loop against the lab ------------------------------------------------

/// Spokes with the given client certificate lifetimes, rotated once by the binary.
fn fleet(dir: &Path, nodes: &[Node], am: &str, hook: &str) -> PathBuf {
    let clone = fleet_remote(dir, 1).1.remove(0);
    let extra = format!(
        "renew_before: 1d\nalerts:\n  warn_before: 30d\n  critical_before: 7d\n  alertmanager: {am}\n  webhook: {hook}\n"
    );
    let config = dir.join("spokekeeper.yaml");
    std::fs::write(&config, config_yaml(&clone, nodes, &extra)).unwrap();
    let (code, out, err) = run_binary(&config, &["rotate", "--all"]);
    assert_eq!(code, 0, "{out}{err}");
    config
}

/// What the daemon does each tick.
async fn tick_and_notify(ctx: &Context, notifier: &mut Notifier) -> Vec<Finding> {
    tick_with_and_notify(ctx, notifier, &Options::default()).await
}

async fn tick_with_and_notify(
    ctx: &Context,
    notifier: &mut Notifier,
    opts: &Options,
) -> Vec<Finding> {
    let report = rotate::tick(ctx, opts).await.unwrap();
    let seen = rotate::observe::fleet(&ctx.config, &ctx.repo, &[], Duration::from_secs(5))
        .await
        .unwrap();
    let sealing = ctx
        .sealing
        .as_ref()
        .map(|k| SealingCert::from_key(k, "cert.pem"));
    let now = OffsetDateTime::now_utc();
    let findings = alerts::evaluate(
        &ctx.config.alerts,
        &seen,
        sealing.as_ref(),
        now,
        Some(&report),
    );
    let errors = notifier.notify(&findings, now).await;
    assert!(errors.is_empty(), "{errors:?}");
    findings
}

fn client_not_after(node: &Node) -> OffsetDateTime {
    CertInfo::from_der(&node.client_cert_der())
        .unwrap()
        .not_after
}

/// A real Alertmanager (Debian's) routing to `receiver`: one group per alertname,
/// resolved alerts sent on, notifications within about a second.
fn real_alertmanager(receiver: &Receiver) -> Peer {
    peers::alertmanager(&format!(
        "route:\n  receiver: recorder\n  group_by: [alertname]\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: recorder\n    webhook_configs:\n      - url: {}\n        send_resolved: true\n",
        receiver.url()
    ))
}

/// What the real Alertmanager lists (`GET /api/v2/alerts`: the active ones, resolved
/// ones are left out), by (alertname, spoke, cert, severity), checking each alert's shape.
fn listed(am: &Peer) -> BTreeMap<(String, String, String, String), Value> {
    let list = am.get_json("/api/v2/alerts");
    let post = Post {
        at: OffsetDateTime::now_utc(),
        body: list.clone(),
    };
    for a in list.as_array().unwrap() {
        assert_eq!(a["status"]["state"], "active", "{a:#}");
        assert_eq!(a["receivers"][0]["name"], "recorder", "{a:#}");
    }
    alerts_in(&post)
}

/// Waits (up to 10 s) for a notification the Alertmanager sent to `receiver` for the
/// group `alertname` with `status`, after the first `seen` ones.
fn notification(receiver: &Receiver, seen: usize, alertname: &str, status: &str) -> Value {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let posts = receiver.posts();
        if let Some(p) = posts
            .iter()
            .skip(seen)
            .find(|p| p.body["groupLabels"]["alertname"] == alertname && p.body["status"] == status)
        {
            return p.body.clone();
        }
        assert!(
            Instant::now() < end,
            "no {status} notification for {alertname} after #{seen}: {:#?}",
            posts.iter().map(|p| &p.body).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// (spoke, status) of each alert in an Alertmanager notification.
fn notified(n: &Value) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = n["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["labels"]["spoke"].as_str().unwrap().to_string(),
                a["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

fn pair(spoke: &str, status: &str) -> (String, String) {
    (spoke.into(), status.into())
}

// ---- failing sinks ----------------------------------------------------------------------

pub(super) fn critical(spoke: &str) -> Finding {
    Finding {
        spoke: spoke.into(),
        subject: Subject::Client,
        status: Status::Critical,
        not_after: Some(OffsetDateTime::now_utc() + time::Duration::days(3)),
        days_left: Some(3),
        detail: "expires in 3 days".into(),
        credential: None,
        alert: Some(AlertName::CertificateExpiring),
        summary: format!("spoke {spoke}: client certificate expires in 3 days"),
        description: "d".into(),
    }
}

fn sinks(am: &str, hook: &str) -> AlertsConfig {
    AlertsConfig {
        warn_before: Duration::from_secs(30 * 86_400),
        critical_before: Duration::from_secs(7 * 86_400),
        alertmanager: Some(am.parse().unwrap()),
        webhook: Some(hook.parse().unwrap()),
        pending_review_after: Duration::from_secs(4 * 3600),
        flux: None,
    }
}

const QUICK: NotifyOptions = NotifyOptions {
    attempts: 3,
    timeout: Duration::from_millis(400),
    backoff: Duration::from_millis(50),
    evaluation_period: Duration::from_secs(60),
};

#[tokio::test(flavor = "multi_thread")]
async fn failing_sinks_are_retried_reported_and_do_not_block() {
    let _quiet = support::timing::exclusive();
    let am = Receiver::start(AM_PATH).await;
    let hook = Receiver::start(HOOK_PATH).await;
    am.set(Mode::Answer500);
    hook.set(Mode::Hang);
    let mut n = Notifier::new(&sinks(&am.base, &hook.url()), QUICK).unwrap();
    let findings = [critical("dev")];

    let started = Instant::now();
    let errors = n.notify(&findings, OffsetDateTime::now_utc()).await;
    let took = started.elapsed();
    // Bounded: 3 tries of 400 ms plus 50 + 100 ms of backoff, both sinks at once.
    assert!(
        took >= Duration::from_millis(1200),
        "the hung sink was waited for: {took:?}"
    );
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert_eq!(errors.len(), 2, "{errors:?}");
    let by = |s: Sink| errors.iter().find(|e| e.sink == s).unwrap();
    let e = by(Sink::Alertmanager);
    assert_eq!(e.attempts, 3);
    assert_eq!(e.last, "HTTP 500 Internal Server Error: boom");
    assert_eq!(e.target, format!("{}{AM_PATH}", am.base));
    let e = by(Sink::Webhook);
    assert_eq!(e.attempts, 3);
    assert!(e.last.contains("no answer within 400ms"), "{}", e.last);
    let shown = e.to_string();
    assert!(
        !shown.contains("secret-token"),
        "the webhook path is hidden: {shown}"
    );
    assert!(
        shown.contains(&format!("alerts.webhook {}/...", hook.base)),
        "{shown}"
    );
    assert_eq!((am.requests(), hook.requests()), (3, 3));
    assert!(am.posts().is_empty() && hook.posts().is_empty());

    // Both answer again: the alert is re-sent and the undelivered change delivered.
    am.set(Mode::Answer200);
    hook.set(Mode::Answer200);
    assert!(
        n.notify(&findings, OffsetDateTime::now_utc())
            .await
            .is_empty()
    );
    assert_eq!(am.posts().len(), 1);
    assert_eq!(
        changes(&hook.posts()[0]),
        [change("dev", "client", "ok", "critical")]
    );
    // Resolved while the Alertmanager fails: the resolution is kept and sent later.
    am.set(Mode::Answer500);
    assert_eq!(n.notify(&[], OffsetDateTime::now_utc()).await.len(), 1);
    am.set(Mode::Answer200);
    let now = OffsetDateTime::now_utc();
    assert!(n.notify(&[], now).await.is_empty());
    let posts = am.posts();
    assert_eq!(posts.len(), 2);
    let resolved = &posts[1].body[0];
    assert_eq!(resolved["labels"]["spoke"], "dev");
    assert!(time(&resolved["endsAt"]) <= posts[1].at);
    assert_eq!(
        changes(&hook.posts()[1]),
        [change("dev", "client", "critical", "ok")]
    );
    am.assert_clean();
    hook.assert_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_webhook_does_not_hold_back_alertmanager_and_a_400_is_not_retried() {
    let am = Receiver::start(AM_PATH).await;
    let hook = Receiver::start(HOOK_PATH).await;
    hook.set(Mode::Hang);
    let one_slow_try = NotifyOptions {
        attempts: 1,
        timeout: Duration::from_secs(2),
        ..QUICK
    };
    let mut n = Notifier::new(&sinks(&am.base, &hook.url()), one_slow_try).unwrap();
    let started = OffsetDateTime::now_utc();
    let errors = n.notify(&[critical("dev")], started).await;
    let ended = OffsetDateTime::now_utc();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].sink, Sink::Webhook);
    assert!(
        ended - started >= time::Duration::seconds(2),
        "waited for the webhook"
    );
    let posts = am.posts();
    assert_eq!(posts.len(), 1);
    assert!(
        posts[0].at - started < time::Duration::seconds(2),
        "delivered while the webhook hung, not after it"
    );

    // A 400 is not retried (with tries to spare).
    hook.set(Mode::Answer200);
    let mut n = Notifier::new(&sinks(&am.base, &hook.url()), QUICK).unwrap();
    am.set(Mode::Answer400);
    let before = am.requests();
    let errors = n
        .notify(&[critical("dev")], OffsetDateTime::now_utc())
        .await;
    let e = errors
        .iter()
        .find(|e| e.sink == Sink::Alertmanager)
        .unwrap();
    assert_eq!(e.attempts, 1, "the same request would be refused again");
    assert_eq!(am.requests() - before, 1);
    assert!(e.last.starts_with("HTTP 400"), "{}", e.last);

    // Nothing listening at all.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut n = Notifier::new(&sinks(&format!("http://{closed}"), &hook.url()), QUICK).unwrap();
    let errors = n
        .notify(&[critical("dev")], OffsetDateTime::now_utc())
        .await;
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].attempts, 3);
    assert!(
        errors[0].last.to_lowercase().contains("connect"),
        "{}",
        errors[0].last
    );
    am.assert_clean();
    hook.assert_clean();
}

// ---- the log sink -----------------------------------------------------------------------

#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuf {
    fn take(&self) -> String {
        String::from_utf8(std::mem::take(&mut *self.0.lock().unwrap())).unwrap()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_log_hears_changes_once_at_a_matching_level() {
    let buf = LogBuf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let cfg = AlertsConfig {
        alertmanager: None,
        webhook: None,
        ..sinks("http://127.0.0.1:1", "http://127.0.0.1:1")
    };
    let mut n = Notifier::new(&cfg, QUICK).unwrap();
    let mut f = critical("dev");
    f.description = "The client certificate of spoke dev expires on 2027-01-01T00:00:00Z".into();
    assert!(
        n.notify(&[f.clone()], OffsetDateTime::now_utc())
            .await
            .is_empty()
    );
    let log = buf.take();
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(
        log.contains("ERROR")
            && log.contains("spoke=\"dev\"")
            && log.contains("alert=\"SpokekeeperCertificateExpiring\"")
            && log.contains("2027-01-01T00:00:00Z"),
        "{log}"
    );
    n.notify(&[f.clone()], OffsetDateTime::now_utc()).await;
    assert_eq!(buf.take(), "", "no change, no line");
    f.status = Status::Warning;
    n.notify(&[f], OffsetDateTime::now_utc()).await;
    let log = buf.take();
    assert!(
        log.contains(" WARN ") && log.contains("severity=warning"),
        "{log}"
    );
    n.notify(&[], OffsetDateTime::now_utc()).await;
    let log = buf.take();
    assert!(log.contains(" INFO ") && log.contains("resolved"), "{log}");
}

/// The daemon itself (`spokekeeper run`) grades after every tick and tells the real
/// Alertmanager, again at every evaluation.
#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_sends_alerts_after_each_tick() {
    crate::support::requires!(ROOT, ALERTMANAGER);
    let recorder = Receiver::start(RECORDER_PATH).await;
    let am = real_alertmanager(&recorder);
    let hook = Receiver::start(HOOK_PATH).await;
    let lab = Lab::new();
    let nodes = vec![lab.add_node(NodeOptions {
        client_cert_days: 5,
        ..NodeOptions::default()
    })];
    let dir = tempfile::tempdir().unwrap();
    let config = fleet(
        dir.path(),
        &nodes,
        &format!("http://{}", am.addr),
        &hook.url(),
    );
    let daemon = support::daemon::Daemon::start(&config, &["--interval", "1s"]);
    let crit = key(
        "SpokekeeperCertificateExpiring",
        "spoke0",
        "client",
        "critical",
    );
    // Listed once the first evaluation is in; updated by the next ones.
    let wait_listed = |after: Option<OffsetDateTime>| {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(a) = listed(&am).get(&crit)
                && after.is_none_or(|t| time(&a["updatedAt"]) > t)
            {
                return a.clone();
            }
            assert!(
                Instant::now() < end,
                "not listed{}:\n{}",
                after.map_or(String::new(), |t| format!(" after {t}")),
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let first = wait_listed(None);
    let next = wait_listed(Some(time(&first["updatedAt"])));
    assert_eq!(time(&next["startsAt"]), time(&first["startsAt"]));
    assert!(
        time(&next["endsAt"]) > OffsetDateTime::now_utc(),
        "still active"
    );
    let n = notification(&recorder, 0, "SpokekeeperCertificateExpiring", "firing");
    assert_eq!(notified(&n), [pair("spoke0", "firing")]);
    assert_eq!(hook.posts().len(), 1, "the webhook hears the change once");
}

mod alertmanager;
