//! spokekeeper's Events on the real hub, and the real notification-controller forwarding
//! them through Flux Alerts.

use crate::support;

use std::time::Duration;

use super::{SCOPES, Stack};
use serde_json::Value;
use support::realstack::hub::HubOptions;

/// spokekeeper's Events in `ns` as the real API server stores them (events.k8s.io/v1).
pub(super) fn our_events(stack: &Stack, ns: &str) -> Vec<Value> {
    let list = stack
        .hub
        .api
        .get_json(&["events.v1.events.k8s.io", "-n", ns]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reportingController"] == "spokekeeper")
        .cloned()
        .collect()
}

/// The one Event with `reason` about Kustomization `name` whose note contains `note`;
/// panics with all of them if there is none or more than one.
pub(super) fn one_event<'a>(
    events: &'a [Value],
    reason: &str,
    name: &str,
    note: &str,
) -> &'a Value {
    let found: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["reason"] == reason
                && e["regarding"]["name"] == name
                && e["note"].as_str().is_some_and(|n| n.contains(note))
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {reason} Event about {name}, {note:?}: {events:#?}"
    );
    found[0]
}

/// Waits until the daemon's log shows `n` finished ticks.
pub(super) fn wait_ticks(daemon: &support::daemon::Daemon, n: usize, within: Duration) {
    support::realstack::wait_until(&format!("{n} ticks"), within, || {
        let log = daemon.log();
        match log.matches("tick finished").count() {
            k if k >= n => Ok(()),
            k => Err(format!("{k} ticks:\n{log}")),
        }
    });
}

/// Issue 32: with `hub:`, `spokekeeper run` records a rotation and an expiry warning as
/// Events on the spoke's Kustomization; the real API server stores them, the real
/// `kubectl events --for` lists them, and the warning repeated every tick is one Event
/// whose series counts the ticks (client-go's aggregation), not one Event per tick.
#[test]
fn events_on_the_real_hub_are_listed_for_the_kustomization_and_aggregate() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    // Every certificate is inside warn_before: each tick warns again.
    stack.configure("alerts:\n  warn_before: 36500d\n");
    let daemon = support::daemon::Daemon::start(&stack.fleet.config, &["--interval", "2s"]);
    wait_ticks(&daemon, 4, Duration::from_secs(180));
    let log = daemon.log();
    assert!(!log.contains("event not recorded"), "{log}");
    drop(daemon);

    let events = our_events(&stack, "flux-system");
    let rotated = one_event(&events, "CredentialRotated", "spoke0", "");
    assert_eq!(rotated["type"], "Normal", "{rotated:#}");
    assert_eq!(rotated["action"], "Rotate", "{rotated:#}");
    assert_eq!(
        rotated["regarding"]["apiVersion"], "kustomize.toolkit.fluxcd.io/v1",
        "{rotated:#}"
    );
    assert_eq!(rotated["regarding"]["kind"], "Kustomization", "{rotated:#}");
    assert!(
        rotated["reportingInstance"]
            .as_str()
            .is_some_and(|i| !i.is_empty())
    );
    let note = rotated["note"].as_str().unwrap();
    assert!(
        note.starts_with("spoke spoke0: a validated credential was committed"),
        "{note}"
    );

    let expiring = one_event(
        &events,
        "CredentialExpiring",
        "spoke0",
        "client certificate",
    );
    assert_eq!(expiring["type"], "Warning", "{expiring:#}");
    // The first tick created it, every later one counted: at least three in all.
    let count = expiring["series"]["count"].as_u64().unwrap_or(0);
    assert!(
        count >= 3,
        "the repeats aggregate into one Event's series: {expiring:#}"
    );
    assert!(
        expiring["series"]["lastObservedTime"].as_str().unwrap()
            > expiring["eventTime"].as_str().unwrap(),
        "{expiring:#}"
    );
    // No key material in any Event.
    let text = serde_json::to_string(&events).unwrap();
    assert!(!text.contains("BEGIN"), "{text}");
    stack.assert_no_plaintext();

    // The real kubectl lists them for the Kustomization, beside Flux's own.
    let listed = stack.hub.api.kubectl(&[
        "events",
        "--for",
        "kustomization/spoke0",
        "-n",
        "flux-system",
    ]);
    for reason in ["CredentialRotated", "CredentialExpiring"] {
        assert!(listed.contains(reason), "{reason} in:\n{listed}");
    }
    assert!(
        listed.contains(&format!("(x{count} over")),
        "kubectl shows the series' count:\n{listed}"
    );
    // Not for another object.
    let other = stack.hub.api.kubectl(&[
        "events",
        "--for",
        "kustomization/flux-system",
        "-n",
        "flux-system",
    ]);
    assert!(!other.contains("Credential"), "{other}");
}

/// Issue 32: `alerts.flux` posts spokekeeper's Events to Flux's real
/// notification-controller as the Flux controllers post theirs, so an existing Alert on a
/// spoke's Kustomization forwards them through its Provider (type generic, to a lab
/// receiver): after a rotation and after an expiry warning the receiver gets the
/// controller's own POST naming spokekeeper's reason; an Alert on another Kustomization
/// receives nothing.
#[test]
fn flux_alerts_forward_rotations_and_expiry_warnings_through_the_real_notification_controller() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    let nc = support::realstack::notification::NotificationController::start(&stack.hub);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (spoke, other) = rt.block_on(async {
        (
            spokekeeper_lab::webhook::Receiver::start("/spoke0").await,
            spokekeeper_lab::webhook::Receiver::start("/apps").await,
        )
    });
    // Another Kustomization, deploying with no spoke's Secret.
    stack.hub.api.apply(
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: apps\n  \
         namespace: flux-system\nspec:\n  interval: 10m\n  path: ./apps\n  prune: true\n  \
         sourceRef:\n    kind: GitRepository\n    name: fleet\n",
    );
    flux_alert(&stack, "spoke0", &spoke.url(), "spoke0", "");
    flux_alert(&stack, "apps", &other.url(), "apps", "");
    // Every certificate is inside warn_before: the first tick rotates and warns.
    stack.configure(&format!(
        "alerts:\n  warn_before: 36500d\n  flux:\n    address: {}\n",
        nc.events_url
    ));
    let daemon = support::daemon::Daemon::start(&stack.fleet.config, &["--interval", "2s"]);
    support::realstack::wait_until(
        "notification-controller forwards the rotation and the expiry warning",
        Duration::from_secs(120),
        || {
            let got = reasons(&spoke);
            match ["CredentialRotated", "CredentialExpiring"]
                .iter()
                .all(|r| got.iter().any(|g| g == r))
            {
                true => Ok(()),
                false => Err(format!(
                    "received {got:?}\n--- spokekeeper:\n{}\n--- notification-controller:\n{}",
                    daemon.log(),
                    nc.tail(40)
                )),
            }
        },
    );
    // More ticks: the repeats are not posted again, and nothing reaches the other Alert.
    wait_ticks(&daemon, 4, Duration::from_secs(60));
    let log = daemon.log();
    drop(daemon);
    assert!(!log.contains("event not recorded"), "{log}");
    spoke.assert_clean();
    other.assert_clean();
    assert_eq!(other.requests(), 0, "{:?}", other.posts());
    for p in spoke.posts() {
        let e = &p.body;
        assert_eq!(e["involvedObject"]["kind"], "Kustomization", "{e:#}");
        assert_eq!(e["involvedObject"]["name"], "spoke0", "{e:#}");
        assert_eq!(e["involvedObject"]["namespace"], "flux-system", "{e:#}");
        assert_eq!(e["reportingController"], "spokekeeper", "{e:#}");
        let severity = match e["reason"].as_str().unwrap() {
            "CredentialRotated" => "info",
            _ => "error",
        };
        assert_eq!(e["severity"], severity, "{e:#}");
        assert!(
            e["message"].as_str().unwrap().starts_with("spoke spoke0: "),
            "{e:#}"
        );
    }
    let got = reasons(&spoke);
    let expiring = got.iter().filter(|r| *r == "CredentialExpiring").count();
    // The client certificate's and the CA's: one each, however many ticks warned (the
    // repeats are not posted; notification-controller would also drop them as
    // duplicates within its --rate-limit-interval).
    assert_eq!(expiring, 2, "{got:?}");
}

/// A generic Provider posting to `url` and an Alert on the Kustomization `kustomization`,
/// both named `name`; `spec` is added to the Alert's spec.
fn flux_alert(stack: &Stack, name: &str, url: &str, kustomization: &str, spec: &str) {
    stack.hub.api.apply(&format!(
        "apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Provider\nmetadata:\n  name: {name}\n  \
         namespace: flux-system\nspec:\n  type: generic\n  address: {url}\n---\n\
         apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Alert\nmetadata:\n  name: {name}\n  \
         namespace: flux-system\nspec:\n  providerRef:\n    name: {name}\n  eventSeverity: info\n  \
         eventSources:\n    - kind: Kustomization\n      name: {kustomization}\n{spec}"
    ));
}

/// The reasons of what `r` received from notification-controller, in order.
fn reasons(r: &spokekeeper_lab::webhook::Receiver) -> Vec<String> {
    r.posts()
        .iter()
        .filter_map(|p| p.body["reason"].as_str().map(String::from))
        .collect()
}

/// Waits until `r` received an event of `reason`.
fn received(
    r: &spokekeeper_lab::webhook::Receiver,
    reason: &str,
    daemon: &support::daemon::Daemon,
) {
    support::realstack::wait_until(
        &format!("notification-controller forwards {reason}"),
        Duration::from_secs(120),
        || match reasons(r).iter().any(|g| g == reason) {
            true => Ok(()),
            false => Err(format!(
                "received {:?}\n--- spokekeeper:\n{}",
                reasons(r),
                daemon.log()
            )),
        },
    );
}

/// Issue 40 (6): a rotation failure in a tick whose listing of the Secret's consumers the
/// hub refuses is about the spoke's Kustomization found before (not its SealedSecret, which
/// no Alert can select), so the real notification-controller forwards it through the
/// Alert on that Kustomization.
#[test]
fn a_failure_the_hub_cannot_list_consumers_for_reaches_the_alert_on_the_spokes_kustomization() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    let nc = support::realstack::notification::NotificationController::start(&stack.hub);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let spoke = rt.block_on(spokekeeper_lab::webhook::Receiver::start("/spoke0"));
    flux_alert(&stack, "spoke0", &spoke.url(), "spoke0", "");
    // spokekeeper's own ServiceAccount: all rights first, then none on Flux's objects.
    let api = &stack.hub.api;
    api.kubectl(&[
        "create",
        "serviceaccount",
        "spokekeeper",
        "-n",
        "flux-system",
    ]);
    let sa = "--serviceaccount=flux-system:spokekeeper";
    api.kubectl(&[
        "create",
        "clusterrolebinding",
        "spokekeeper-all",
        "--clusterrole=cluster-admin",
        sa,
    ]);
    let token = stack.hub.token("flux-system", "spokekeeper");
    let kubeconfig = stack.hub.token_kubeconfig("spokekeeper", &token);
    stack.hub.use_kubeconfig(&stack.fleet.config, &kubeconfig);
    stack.configure(&format!(
        "alerts:\n  flux:\n    address: {}\n",
        nc.events_url
    ));
    let daemon = support::daemon::Daemon::start(&stack.fleet.config, &["--interval", "2s"]);
    received(&spoke, "CredentialRotated", &daemon);
    api.apply(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: no-flux\nrules:\n\
         - apiGroups: ['', events.k8s.io, bitnami.com]\n  resources: ['*']\n  verbs: ['*']\n",
    );
    api.kubectl(&[
        "create",
        "clusterrolebinding",
        "spokekeeper-no-flux",
        "--clusterrole=no-flux",
        sa,
    ]);
    api.kubectl(&["delete", "clusterrolebinding", "spokekeeper-all"]);
    support::realstack::wait_until(
        "Flux's objects are refused",
        Duration::from_secs(30),
        || {
            // `auth can-i` answers "no" with exit status 1.
            let can = api.try_kubectl(&[
                "auth",
                "can-i",
                "list",
                "kustomizations.kustomize.toolkit.fluxcd.io",
                "-n",
                "flux-system",
                "--as=system:serviceaccount:flux-system:spokekeeper",
            ]);
            match can {
                Err(no) if no.contains(": no") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    );
    // The spoke is gone: the next tick's rotation fails, and the hub lists nothing.
    stack.fleet.nodes[0].stop_api();
    stack.fleet.nodes[0].stop_sshd();
    received(&spoke, "RotationFailed", &daemon);
    drop(daemon);
    spoke.assert_clean();
    for p in spoke.posts() {
        let e = &p.body;
        assert_eq!(e["involvedObject"]["kind"], "Kustomization", "{e:#}");
        assert_eq!(e["involvedObject"]["name"], "spoke0", "{e:#}");
    }
}

/// Issue 40 (7, 9): the `inclusionList` and `exclusionList` docs/alerts.md shows, on the
/// real notification-controller (which matches them against the message, not the
/// reason): the first passes spokekeeper's notifications and not Flux's own event about
/// the same Kustomization, the second the reverse; an Alert with neither forwards both.
#[test]
fn the_docs_inclusion_and_exclusion_lists_split_spokekeepers_notifications_from_fluxs() {
    crate::support::requires!(ROOT, REAL_STACK);
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/alerts.md"),
    )
    .unwrap();
    let shown = |list: &str| -> String {
        let prefix = format!("{list}: ");
        docs.lines()
            .find_map(|l| {
                l.trim()
                    .trim_start_matches("# ")
                    .strip_prefix(prefix.as_str())
            })
            .map(|v| v.split("    #").next().unwrap().trim().to_string())
            .unwrap_or_else(|| panic!("docs/alerts.md shows no {list}"))
    };
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    let nc = support::realstack::notification::NotificationController::start(&stack.hub);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (included, excluded, all) = rt.block_on(async {
        (
            spokekeeper_lab::webhook::Receiver::start("/included").await,
            spokekeeper_lab::webhook::Receiver::start("/excluded").await,
            spokekeeper_lab::webhook::Receiver::start("/all").await,
        )
    });
    for (name, r, list) in [
        ("included", &included, "inclusionList"),
        ("excluded", &excluded, "exclusionList"),
    ] {
        let spec = format!("  {list}: {}\n", shown(list));
        flux_alert(&stack, name, &r.url(), "spoke0", &spec);
    }
    flux_alert(&stack, "all", &all.url(), "spoke0", "");
    stack.configure(&format!(
        "alerts:\n  flux:\n    address: {}\n",
        nc.events_url
    ));
    let daemon = support::daemon::Daemon::start(&stack.fleet.config, &["--interval", "2s"]);
    received(&included, "CredentialRotated", &daemon);
    // Flux's own event about the Kustomization, as kustomize-controller posts it.
    let own = serde_json::json!({
        "involvedObject": {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "namespace": "flux-system",
            "name": "spoke0"
        },
        "severity": "info",
        "timestamp": spokekeeper::rotate::state::rfc3339(time::OffsetDateTime::now_utc()),
        "message": "Reconciliation finished in 412ms, next run in 10m0s",
        "reason": "ReconciliationSucceeded",
        "reportingController": "kustomize-controller"
    });
    let status = nc.post(&own);
    assert!(
        matches!(status, Ok(200..=299)),
        "{status:?}\n{}",
        nc.tail(30)
    );
    received(&all, "ReconciliationSucceeded", &daemon);
    received(&excluded, "ReconciliationSucceeded", &daemon);
    received(&all, "CredentialRotated", &daemon);
    wait_ticks(&daemon, 3, Duration::from_secs(60));
    drop(daemon);
    for r in [&included, &excluded, &all] {
        r.assert_clean();
    }
    let flux_own =
        |p: &spokekeeper_lab::webhook::Post| p.body["reason"] == "ReconciliationSucceeded";
    assert!(
        included.posts().iter().all(|p| !flux_own(p)),
        "{:?}",
        reasons(&included)
    );
    for p in included.posts() {
        let message = p.body["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("spoke spoke0: "), "{:#}", p.body);
    }
    assert!(
        excluded.posts().iter().all(flux_own),
        "{:?}",
        reasons(&excluded)
    );
}
