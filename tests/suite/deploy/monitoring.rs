//! The chart's Prometheus rules and Grafana dashboard, against the metrics the daemon serves.

use super::*;

/// The Grafana dashboard: off by default; on, one ConfigMap labelled for Grafana's
/// dashboard sidecar holding exactly the JSON under deploy/ (alerts::dashboard checks
/// its queries against a real scrape).
#[test]
fn chart_ships_the_grafana_dashboard_for_the_sidecar_when_asked() {
    crate::support::requires!(HELM);
    let labelled = |docs: &[Value]| -> Vec<Value> {
        docs.iter()
            .filter(|d| d["metadata"]["labels"]["grafana_dashboard"].is_string())
            .cloned()
            .collect()
    };
    assert!(labelled(&render(&[])).is_empty(), "off by default");
    let docs =
        render_with("grafanaDashboard:\n  enabled: true\n  annotations: {grafana_folder: Flux}\n");
    let found = labelled(&docs);
    assert_eq!(found.len(), 1, "{found:#?}");
    let cm = &found[0];
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(cm["metadata"]["namespace"], RELEASE_NS);
    assert_eq!(cm["metadata"]["annotations"]["grafana_folder"], "Flux");
    let shipped: Value =
        serde_json::from_str(cm["data"]["spokekeeper.json"].as_str().unwrap()).unwrap();
    let file = std::fs::read_to_string(
        support::repo_root().join("deploy/helm/spokekeeper/dashboards/spokekeeper.json"),
    )
    .unwrap();
    assert_eq!(shipped, serde_json::from_str::<Value>(&file).unwrap());
    assert_eq!(shipped["uid"], "spokekeeper");
    // Strictly typed, like every other object the chart renders.
    read_all(&docs, "chart (dashboard)");
}

/// Metric names `/metrics` serves, read from what the daemon's registry encodes after a
/// tick with one rotated and one failed spoke (a family without series is not written).
fn served_metric_names() -> BTreeSet<String> {
    use spokekeeper::rotate::{Outcome, Reason, SpokeReport, TickReport};
    let spoke = |name: &str, outcome, reason| SpokeReport {
        reason,
        ca_not_after: Some(time::OffsetDateTime::now_utc()),
        client_not_after: Some(time::OffsetDateTime::now_utc()),
        ..SpokeReport::new(name, outcome)
    };
    let report = TickReport {
        pushed: true,
        ..TickReport::of(vec![
            spoke(
                "dev",
                Outcome::Rotated {
                    commit: "abc".into(),
                },
                Some(Reason::Initial),
            ),
            spoke(
                "test",
                Outcome::Failed(spokekeeper::rotate::SpokeError::Unreachable(
                    spokekeeper::spoke::ProbeError::Refused {
                        server: "https://10.0.0.2:6443".into(),
                    },
                )),
                None,
            ),
            spoke(
                "prod",
                Outcome::Pending {
                    branch: "spokekeeper/prod".into(),
                    commit: None,
                    pull_request: Some(spokekeeper::forge::PullRequest {
                        number: 7,
                        url: "https://github.com/org/fleet/pull/7".into(),
                        created_at: time::OffsetDateTime::now_utc(),
                    }),
                    change: None,
                    pending_seconds: Some(60),
                },
                Some(Reason::Initial),
            ),
        ])
    };
    // The pushed credential as the hub took it.
    let mut report = report;
    report.spokes[0].hub = Some(Box::new(support::reports::dev_hub_report(
        spokekeeper::hub::Kind::Kustomization,
        "dev",
        true,
    )));
    let metrics = spokekeeper::metrics::Metrics::new();
    metrics.observe_tick(
        &report,
        std::time::Duration::from_secs(1),
        std::time::SystemTime::now(),
    );
    metrics.set_cert_not_after("dev", "serving", time::OffsetDateTime::now_utc());
    metrics.set_sealing_not_after(Some(time::OffsetDateTime::now_utc()));
    let text = metrics.encode().unwrap();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for s in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{s}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

#[test]
fn prometheus_rules_use_served_metrics_and_grade_like_the_daemon() {
    crate::support::requires!(HELM);
    let served = served_metric_names();
    for m in [
        "spokekeeper_spoke_up",
        "spokekeeper_errors_total",
        "spokekeeper_rotations_total",
    ] {
        assert!(served.contains(m), "{m} not in {served:?}");
    }
    let objects = read_all(&render(&[]), "chart (defaults)");
    let rule = one(&objects, |o| match o {
        Object::PrometheusRule(r) => Some(r),
        _ => None,
    });
    let rules: Vec<&AlertRule> = rule.spec.groups.iter().flat_map(|g| &g.rules).collect();
    let mut used = BTreeSet::new();
    for r in &rules {
        let mut rest = r.expr.as_str();
        while let Some(i) = rest.find("spokekeeper_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                served.contains(&name),
                "{}: {name} is not a metric spokekeeper serves",
                r.alert
            );
            used.insert(name.clone());
            rest = &rest[i + name.len()..];
        }
        let severity = r.labels["severity"].as_str();
        assert!(
            matches!(severity, "warning" | "critical"),
            "{}: {severity}",
            r.alert
        );
        assert!(r.annotations.contains_key("summary") && r.annotations.contains_key("description"));
    }
    for m in [
        "spokekeeper_certificate_not_after_timestamp_seconds",
        "spokekeeper_spoke_up",
        "spokekeeper_errors_total",
        "spokekeeper_last_tick_timestamp_seconds",
        "spokekeeper_hub_synced",
        "spokekeeper_hub_ready",
        "spokekeeper_pending_review_age_seconds",
        "spokekeeper_sealing_cert_trusted",
    ] {
        assert!(used.contains(m), "no alert on {m}");
    }
    // Expiry: a warning and a critical level, at the daemon's default thresholds.
    let expiring: BTreeMap<&str, &str> = rules
        .iter()
        .filter(|r| r.alert == "SpokekeeperCertificateExpiring")
        .map(|r| (r.labels["severity"].as_str(), r.expr.as_str()))
        .collect();
    assert!(expiring["warning"].contains("< 2592000") && expiring["warning"].contains(">= 604800"));
    assert!(expiring["critical"].contains("< 604800") && expiring["critical"].contains("> 0"));
    let names: BTreeSet<&str> = rules.iter().map(|r| r.alert.as_str()).collect();
    for a in [
        "SpokekeeperCertificateExpired",
        "SpokekeeperSpokeUnreachable",
        "SpokekeeperRotationFailing",
        "SpokekeeperTickStale",
        "SpokekeeperDown",
    ] {
        assert!(names.contains(a), "no {a}");
    }
    // The scrape job the rules select is the Service the ServiceMonitor scrapes.
    let sm = one(&objects, |o| match o {
        Object::ServiceMonitor(s) => Some(s),
        _ => None,
    });
    assert_eq!(sm.spec.endpoints[0].port, "metrics");
    assert_eq!(sm.spec.endpoints[0].path, "/metrics");
    let down = rules.iter().find(|r| r.alert == "SpokekeeperDown").unwrap();
    assert!(
        down.expr.contains(r#"job="sk-spokekeeper""#),
        "{}",
        down.expr
    );
}
