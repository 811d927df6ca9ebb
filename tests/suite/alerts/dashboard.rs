//! The Grafana dashboard the chart ships (deploy/helm/spokekeeper/dashboards/): every
//! panel's query, evaluated by Debian's real Prometheus scraping a running daemon, returns
//! at least one series, and names only metrics the daemon exports. The daemon ticks once
//! against the emulated hub with two spokes: one rotated and verified on the hub, one whose
//! API is down, so that every family the panels read has samples.

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::daemon::Daemon;
use support::helm::root;
use support::peers::{self, Peer};

const DASHBOARD: &str = "deploy/helm/spokekeeper/dashboards/spokekeeper.json";

fn dashboard() -> Value {
    let text = std::fs::read_to_string(root().join(DASHBOARD)).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

/// (panel title, refId, expression) of every target of every panel.
fn queries(dashboard: &Value) -> Vec<(String, String, String)> {
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap().to_string();
            p["targets"].as_array().unwrap().iter().map(move |t| {
                (
                    title.clone(),
                    t["refId"].as_str().unwrap().to_string(),
                    t["expr"].as_str().unwrap().to_string(),
                )
            })
        })
        .collect()
}

/// Grafana's variables as Grafana fills them in: every spoke, a 1m rate window.
fn filled(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__range", "1h")
        .replace("$spoke", ".*")
}

/// The `spokekeeper_*` names an expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("spokekeeper_") {
        let name: String = rest[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[i + name.len()..];
        out.insert(name);
    }
    out
}

/// Each query's problem: it names a metric the scrape does not have, Prometheus refuses
/// it, or it returns no series. Empty: every panel shows something.
fn problems(prom: &Peer, scrape: &str, dashboard: &Value) -> Vec<String> {
    let exported: BTreeSet<String> = scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(String::from)
        .collect();
    let mut out = Vec::new();
    for (title, ref_id, expr) in queries(dashboard) {
        let what = format!("{title} ({ref_id}): {expr}");
        for name in metric_names(&expr) {
            if !exported.contains(&name) {
                out.push(format!("{what}: the daemon does not export {name}"));
            }
        }
        let q: String = url::form_urlencoded::byte_serialize(filled(&expr).as_bytes()).collect();
        let (code, body) = prom.get(&format!("/api/v1/query?query={q}"));
        if code != 200 {
            out.push(format!("{what}: Prometheus answered {code}: {body}"));
            continue;
        }
        let v: Value = serde_json::from_str(&body).unwrap();
        let n = v["data"]["result"].as_array().map_or(0, Vec::len);
        if n == 0 {
            out.push(format!("{what}: no series"));
        }
    }
    out
}

#[test]
fn every_dashboard_query_returns_series_from_a_real_scrape_and_an_unexported_metric_fails() {
    let mut lab = crate::verify::hub::lab(2, "");
    lab.fleet.nodes[1].stop_api();
    let daemon = Daemon::start(&lab.fleet.config, &["--interval", "1h"]);
    let log = daemon.wait_for("tick finished", Duration::from_secs(90));
    assert!(log.contains("rotated=1 failed=1"), "{log}");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: spokekeeper\n    static_configs:\n      - targets: ['{}']\n        labels: {{namespace: spokekeeper, pod: spokekeeper-0}}\n",
        daemon.addr()
    );
    let prom = peers::prometheus(&config, &[]);
    let http = daemon.metrics();
    let scrape = http.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let dash = dashboard();
    assert!(queries(&dash).len() >= 8, "{dash:#}");

    // Every panel: the rate and increase windows need a few scrapes.
    let end = Instant::now() + Duration::from_secs(60);
    let mut left = problems(&prom, scrape, &dash);
    while !left.is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_secs(1));
        left = problems(&prom, scrape, &dash);
    }
    assert!(left.is_empty(), "{left:#?}\n{scrape}\n{}", prom.log());

    // A panel on a metric the daemon does not export fails, even when its query still
    // returns a series (`or vector(0)`).
    let mut broken = dash.clone();
    broken["panels"][0]["targets"][0]["expr"] =
        Value::from("spokekeeper_no_such_metric or vector(0)");
    let found = problems(&prom, scrape, &broken);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].contains("does not export spokekeeper_no_such_metric"),
        "{found:#?}"
    );
    let mut empty = dash;
    empty["panels"][1]["targets"][0]["expr"] =
        Value::from("spokekeeper_spoke_up{spoke=\"no-such-spoke\"}");
    let found = problems(&prom, scrape, &empty);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].ends_with("no series"), "{found:#?}");
}
