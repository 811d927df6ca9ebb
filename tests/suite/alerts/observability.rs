//! The chart's alert rules and the daemon's /metrics against Debian's real Prometheus
//! tools: `promtool check rules` and `promtool test rules` (deploy/prometheus/) on the
//! PrometheusRule a real helm renders, `promtool check metrics` on a real scrape, and a
//! real Prometheus that scrapes a running daemon and evaluates the rules on it.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::NodeOptions;
use support::daemon::Daemon;
use support::fleet::Fleet;
use support::helm::{CHART, run_helm};
use support::peers::{self, Peer, run_promtool};
use support::repo_root as root;

const RULES_TEST: &str = "deploy/prometheus/spokekeeper-rules.test.yaml";

/// The chart's rule groups (the PrometheusRule's `spec`) as a Prometheus rule file, for
/// the release "spokekeeper" in namespace "spokekeeper" with default values.
fn rendered_rules() -> String {
    let out = run_helm(&[
        "template",
        "spokekeeper",
        CHART,
        "--namespace",
        "spokekeeper",
        "--show-only",
        "templates/prometheusrule.yaml",
    ]);
    let doc: Value = serde_saphyr::from_str(&out).unwrap();
    assert_eq!(doc["kind"], "PrometheusRule");
    // JSON is YAML: promtool reads it as it is.
    serde_json::to_string_pretty(&doc["spec"]).unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The rendered rules and the unit tests, side by side in a fresh directory.
fn rules_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spokekeeper-rules.yaml"), rendered_rules()).unwrap();
    std::fs::copy(
        root().join(RULES_TEST),
        dir.path().join("spokekeeper-rules.test.yaml"),
    )
    .unwrap();
    dir
}

fn alert_names(rules_json: &str) -> BTreeSet<String> {
    let spec: Value = serde_json::from_str(rules_json).unwrap();
    spec["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| r["alert"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn promtool_accepts_the_charts_rules_and_their_unit_tests_pass() {
    crate::support::requires!(HELM, PROMTOOL);
    let dir = rules_dir();
    let check = run_promtool(
        dir.path(),
        &["check", "rules", "spokekeeper-rules.yaml"],
        b"",
    );
    assert!(check.status.success(), "{}", text(&check));
    assert!(
        text(&check).contains("SUCCESS: 10 rules found"),
        "{}",
        text(&check)
    );
    let test = run_promtool(
        dir.path(),
        &["test", "rules", "spokekeeper-rules.test.yaml"],
        b"",
    );
    assert!(test.status.success(), "{}", text(&test));
    // Every alert of the chart has a case that expects it to fire.
    let cases: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(root().join(RULES_TEST)).unwrap()).unwrap();
    let fired: BTreeSet<String> = cases["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
        .filter(|a| a["exp_alerts"].as_array().is_some_and(|e| !e.is_empty()))
        .map(|a| a["alertname"].as_str().unwrap().to_string())
        .collect();
    let rules = std::fs::read_to_string(dir.path().join("spokekeeper-rules.yaml")).unwrap();
    assert_eq!(fired, alert_names(&rules));
}

/// Per metric family name in an exposition: the label names its samples carry (the
/// family's name without `_total`/`_bucket`/... suffixes is also listed, with no labels).
fn exposed(body: &str) -> BTreeMap<String, BTreeSet<BTreeSet<String>>> {
    let mut out: BTreeMap<String, BTreeSet<BTreeSet<String>>> = BTreeMap::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            out.entry(rest.split_whitespace().next().unwrap().to_string())
                .or_default();
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (name, labels) = match line.split_once('{') {
            Some((name, rest)) => (name, rest.split_once('}').unwrap().0),
            None => (line.split_whitespace().next().unwrap(), ""),
        };
        let keys: BTreeSet<String> = labels
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, _)| k.trim().to_string())
            .collect();
        out.entry(name.to_string()).or_default().insert(keys);
    }
    out
}

/// The input series of the rule unit tests: (metric name, label names), without the
/// labels the scrape adds (job, namespace, instance, pod).
fn series_in_rule_tests() -> BTreeSet<(String, BTreeSet<String>)> {
    let cases: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(root().join(RULES_TEST)).unwrap()).unwrap();
    let mut out = BTreeSet::new();
    for t in cases["tests"].as_array().unwrap() {
        for s in t["input_series"].as_array().unwrap() {
            let series = s["series"].as_str().unwrap();
            let (name, labels) = series.split_once('{').unwrap();
            let keys = labels
                .trim_end_matches('}')
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, _)| k.trim().to_string())
                .filter(|k| !["job", "namespace", "instance", "pod"].contains(&k.as_str()))
                .collect();
            out.insert((name.to_string(), keys));
        }
    }
    out
}

/// A daemon over one lab spoke whose client certificate expires in 5 days, after its
/// first tick.
fn ticked_daemon() -> (Fleet, Daemon) {
    let fleet = Fleet::new(&[NodeOptions {
        client_cert_days: 5,
        ..NodeOptions::default()
    }]);
    let (code, out, err) = fleet.rotate(&["--all"]);
    assert_eq!(code, 0, "{out}{err}");
    let daemon = Daemon::start(&fleet.config, &["--interval", "1h"]);
    daemon.wait_for("tick finished", Duration::from_secs(60));
    (fleet, daemon)
}

fn body(http: &str) -> &str {
    http.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// The exposition after a tick in which every family gets samples (a rotation with a
/// hub that did not take it, a failure, a pending review): a healthy scrape has no
/// counters or hub series yet.
fn every_family() -> String {
    use spokekeeper::rotate::{Outcome, Reason, SpokeReport, TickReport};
    let at = time::OffsetDateTime::now_utc() + time::Duration::days(90);
    let mut dev = SpokeReport {
        reason: Some(Reason::Initial),
        client_not_after: Some(at),
        ca_not_after: Some(at),
        ..SpokeReport::new("dev", Outcome::Rotated { commit: "a".into() })
    };
    dev.hub = Some(Box::new(support::reports::dev_hub_report(
        spokekeeper::hub::Kind::HelmRelease,
        "apps",
        false,
    )));
    let failed = Outcome::Failed(spokekeeper::rotate::SpokeError::Unreachable(
        spokekeeper::spoke::ProbeError::Refused {
            server: "https://10.0.0.2:6443".into(),
        },
    ));
    let pending = Outcome::Pending {
        branch: "spokekeeper/stage".into(),
        commit: None,
        pull_request: None,
        change: None,
        pending_seconds: Some(600),
    };
    let mut report = TickReport::of(vec![
        dev,
        SpokeReport::new("test", failed),
        SpokeReport::new("stage", pending),
    ]);
    report.repo_error = Some(spokekeeper::rotate::RepoFailure::NotPushed {
        why: "rejected".into(),
    });
    report.sealing = Some(spokekeeper::hub::cert::CertReport {
        reachable: Some(true),
        trusted: true,
        ..spokekeeper::hub::cert::CertReport::new(spokekeeper::fingerprint::Fingerprint::of(
            b"cert",
        ))
    });
    let m = spokekeeper::metrics::Metrics::new();
    m.observe_tick(
        &report,
        Duration::from_secs(2),
        std::time::SystemTime::now(),
    );
    m.set_cert_not_after("dev", "serving", at);
    m.set_sealing_not_after(Some(at));
    m.encode().unwrap()
}

/// `promtool check metrics` on an exposition; panics on any problem it reports except
/// one: promtool reads the classic text format, where a counter's HELP is under its
/// `_total` name, while spokekeeper serves OpenMetrics (what Prometheus asks for), where
/// it is under the family name. So "X_total no help text" is accepted when X is a
/// counter family with help text.
fn lint(exposition: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = run_promtool(dir.path(), &["check", "metrics"], exposition.as_bytes());
    let said = text(&out);
    let real: Vec<&str> = said
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| {
            let Some(family) = l
                .strip_suffix(" no help text")
                .and_then(|n| n.strip_suffix("_total"))
            else {
                return true;
            };
            !(exposition.contains(&format!("# TYPE {family} counter\n"))
                && exposition.contains(&format!("# HELP {family} ")))
        })
        .collect();
    assert!(
        real.is_empty(),
        "promtool check metrics: {real:?}\n{exposition}"
    );
}

#[test]
fn a_real_scrape_passes_promtool_check_metrics_and_is_what_the_rule_tests_feed() {
    crate::support::requires!(ROOT, PROMTOOL);
    let (_fleet, daemon) = ticked_daemon();
    let http = daemon.metrics();
    let scrape = body(&http);
    assert!(
        scrape.contains("spokekeeper_spoke_up{spoke=\"spoke0\"} 1"),
        "{scrape}"
    );
    lint(scrape);
    let full = every_family();
    lint(&full);

    // Every series the rule tests feed is one spokekeeper serves, with the same labels.
    let mut served = exposed(scrape);
    for (name, labels) in exposed(&full) {
        served.entry(name).or_default().extend(labels);
    }
    for (name, labels) in series_in_rule_tests() {
        if name == "up" {
            continue; // Prometheus's own.
        }
        let family = served
            .get(&name)
            .unwrap_or_else(|| panic!("{name} is not served:\n{scrape}\n{full}"));
        assert!(
            family.contains(&labels),
            "{name}{labels:?}: served with {family:?}"
        );
    }
}

/// Polls `f` (up to 60 s) until it returns Some.
fn eventually<T>(what: &str, peer: &Peer, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < end,
            "{what}: not within 60s\n{}",
            peer.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn prometheus_scrapes_the_daemon_and_the_rules_fit_what_it_scraped() {
    crate::support::requires!(ROOT, PROMETHEUS);
    let (_fleet, daemon) = ticked_daemon();
    let rules = rendered_rules();
    // The labels the chart's ServiceMonitor gives the scrape: job is the Service's name.
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [spokekeeper-rules.yaml]\nscrape_configs:\n  - job_name: spokekeeper\n    static_configs:\n      - targets: ['{}']\n        labels: {{namespace: spokekeeper}}\n",
        daemon.addr()
    );
    let prom = peers::prometheus(&config, &[("spokekeeper-rules.yaml", &rules)]);

    // Scraped: the target is up and the daemon's series are there.
    eventually("the daemon scraped", &prom, || {
        let r = prom.get_json("/api/v1/query?query=spokekeeper_spoke_up");
        let v = &r["data"]["result"];
        (v.as_array()?.len() == 1).then_some(())
    });
    let up = prom.get_json("/api/v1/targets");
    let target = &up["data"]["activeTargets"][0];
    assert_eq!(target["health"], "up", "{target:#}");

    // Every rule evaluated without error; the client certificate's critical expiry is
    // pending (it waits 10 minutes before firing); SpokekeeperDown is not.
    let groups = eventually("every rule evaluated", &prom, || {
        let r = prom.get_json("/api/v1/rules");
        let groups = r["data"]["groups"].as_array()?.clone();
        let all_evaluated = groups
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap())
            .all(|r| {
                r["lastEvaluation"]
                    .as_str()
                    .is_some_and(|t| !t.starts_with("0001"))
            });
        all_evaluated.then_some(groups)
    });
    let mut names = BTreeSet::new();
    for r in groups.iter().flat_map(|g| g["rules"].as_array().unwrap()) {
        assert_eq!(r["health"], "ok", "{r:#}");
        names.insert(r["name"].as_str().unwrap().to_string());
    }
    assert_eq!(names, alert_names(&rules));
    let alerts = eventually("the expiry alert pending", &prom, || {
        let r = prom.get_json("/api/v1/alerts");
        let alerts = r["data"]["alerts"].as_array()?.clone();
        alerts
            .iter()
            .any(|a| a["labels"]["alertname"] == "SpokekeeperCertificateExpiring")
            .then_some(alerts)
    });
    let found: Vec<(String, String, String, String, String)> = alerts
        .iter()
        .map(|a| {
            let l = |k: &str| a["labels"][k].as_str().unwrap_or("").to_string();
            (
                l("alertname"),
                l("spoke"),
                l("cert"),
                l("severity"),
                a["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [(
            "SpokekeeperCertificateExpiring".to_string(),
            "spoke0".to_string(),
            "client".to_string(),
            "critical".to_string(),
            "pending".to_string()
        )],
        "{alerts:#?}"
    );
    let a = &alerts[0];
    assert_eq!(a["labels"]["job"], "spokekeeper");
    assert_eq!(a["labels"]["namespace"], "spokekeeper");
    let summary = a["annotations"]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("spoke0: the client certificate expires in 4d "),
        "{summary}"
    );
}
