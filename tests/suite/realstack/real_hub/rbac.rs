//! The chart's RBAC on the real authorizer: enough for every call, nothing more.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::events::{one_event, our_events, wait_ticks};
use super::{SCOPES, Stack, assert_ready};
use serde_json::Value;
use support::realstack::hub::HubOptions;
use support::realstack::run;

/// The hub's ServiceAccount-less admin is not what production runs: scenario 7 runs
/// spokekeeper with a token of the chart's ServiceAccount, under the chart's RBAC only.
#[test]
fn the_charts_rbac_is_enough_and_nothing_more() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    let kubeconfig = chart_kubeconfig(&stack);
    stack.hub.use_kubeconfig(&stack.fleet.config, &kubeconfig);

    let (code, report, err) = stack.rotate_json();
    assert_eq!(
        code, 0,
        "every call within the chart's RBAC: {report:#}\n{err}"
    );
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["hub"]["synced"]["ok"], true, "{spoke:#}");
    assert_ready(spoke, &["Kustomization/flux-system/spoke0"]);
    assert_eq!(report["sealing"]["reachable"], true, "{report:#}");

    // The daemon records its Events under the same Role: create, then a repeat's patch.
    stack.configure("alerts:\n  warn_before: 36500d\n");
    let daemon = support::daemon::Daemon::start(&stack.fleet.config, &["--interval", "2s"]);
    wait_ticks(&daemon, 2, Duration::from_secs(120));
    let log = daemon.log();
    drop(daemon);
    assert!(!log.contains("event not recorded"), "{log}");
    let events = our_events(&stack, "flux-system");
    let expiring = one_event(
        &events,
        "CredentialExpiring",
        "spoke0",
        "client certificate",
    );
    assert!(
        expiring["series"]["count"].as_u64().unwrap_or(0) >= 2,
        "patched under the chart's Role: {expiring:#}"
    );
    events_only_as_the_chart_grants(&kubeconfig);

    // One call outside hub::ACCESS: the real authorizer refuses it.
    let denied = run(
        std::process::Command::new(support::realstack::bin("kubectl"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(["get", "secrets", "-n", "flux-system"]),
    );
    let err = denied.unwrap_err();
    assert!(
        err.contains("Forbidden") || err.contains("forbidden"),
        "{err}"
    );
}

/// Exactly create and patch on events.k8s.io Events, in the spokes' namespace only:
/// the real authorizer's answers for the chart's ServiceAccount.
fn events_only_as_the_chart_grants(kubeconfig: &Path) {
    let can = |args: &[&str]| {
        let out = std::process::Command::new(support::realstack::bin("kubectl"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(["auth", "can-i"])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    for verb in ["create", "patch"] {
        assert!(
            can(&[verb, "events.events.k8s.io", "-n", "flux-system"]),
            "{verb}"
        );
    }
    for verb in [
        "get",
        "list",
        "watch",
        "update",
        "delete",
        "deletecollection",
    ] {
        assert!(
            !can(&[verb, "events.events.k8s.io", "-n", "flux-system"]),
            "{verb}"
        );
    }
    assert!(
        !can(&["create", "events", "-n", "flux-system"]),
        "core/v1 events"
    );
    assert!(
        !can(&["create", "events.events.k8s.io", "-n", "default"]),
        "another namespace"
    );
}

/// The chart's ServiceAccount and RBAC, as `helm template` renders them, applied to the
/// hub; a kubeconfig with the ServiceAccount's token.
fn chart_kubeconfig(stack: &Stack) -> PathBuf {
    let ns = "spokekeeper";
    stack.hub.api.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"
    ));
    // The chart grants by the names in its config: the lab's spoke.
    let values = stack.hub.dir().join("values.yaml");
    std::fs::write(
        &values,
        "config:\n  spokes:\n    - name: spoke0\n      address: 127.0.0.1\n",
    )
    .unwrap();
    let rendered = support::helm::run_helm(&[
        "template",
        "spokekeeper",
        support::helm::CHART,
        "--namespace",
        ns,
        "-f",
        values.to_str().unwrap(),
    ]);
    let mut applied = Vec::new();
    for doc in rendered.split("\n---") {
        let Ok(v) = serde_saphyr::from_str::<Value>(doc) else {
            continue;
        };
        let kind = v["kind"].as_str().unwrap_or("");
        if matches!(
            kind,
            "ServiceAccount" | "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding"
        ) {
            stack.hub.api.apply(&v.to_string());
            applied.push(format!(
                "{kind}/{}",
                v["metadata"]["name"].as_str().unwrap_or("")
            ));
        }
    }
    assert!(
        applied.iter().any(|a| a.starts_with("Role/")),
        "the chart renders a Role: {applied:?}"
    );
    let sa = support::realstack::wait_until(
        "the chart's ServiceAccount",
        Duration::from_secs(10),
        || {
            let list = stack.hub.api.get_json(&["serviceaccounts", "-n", ns]);
            list["items"]
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .find_map(|s| s["metadata"]["name"].as_str().map(String::from))
                })
                .ok_or_else(|| "none".to_string())
        },
    );
    let token = stack.hub.token(ns, &sa);
    stack.hub.token_kubeconfig("spokekeeper", &token)
}
