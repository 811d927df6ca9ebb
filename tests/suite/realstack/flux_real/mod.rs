//! spokekeeper against Flux's real controllers (tests/support/src/realstack/flux_controllers,
//! put together with a real hub and real spokes by tests/support/src/realstack/real_flux):
//! source-controller fetches the fleet repo over HTTP, kustomize-controller applies its
//! `fluxcd/` to the real hub and the spokes' ConfigMaps to the real spokes, helm-controller
//! installs the fleet repo's chart on them, the real Sealed Secrets controller unseals.
//! Nothing here writes a status: every Ready is the controllers' own.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::git::git;
use support::leak::Needles;
use support::realstack::flux_controllers::{self as flux, request_reconcile};
use support::realstack::hub::RealHub;
use support::realstack::real_flux::{Format, RealFlux, WAIT};
use support::realstack::wait_until;

/// Scenario 1 of issue 27: the first rotation. The root Kustomization applies the
/// committed SealedSecret, the real Sealed Secrets controller unseals it, kustomize-
/// controller applies the spoke's ConfigMap on the spoke and helm-controller installs the
/// chart's release there; spokekeeper's report says each consumer Ready, as the hub does.
#[test]
fn the_real_controllers_deploy_with_the_first_rotation() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start(1, false, "");
    // Before: the consumers cannot reach the spoke (no Secret yet).
    for kind in ["kustomization", "helmrelease"] {
        stack.wait_for(kind, "spoke0", "Ready=False", |r| r.status == "False");
    }
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(report["spokes"][0]["action"], "rotated", "{report:#}");
    assert_eq!(
        report["spokes"][0]["hub"]["synced"]["ok"], true,
        "{report:#}"
    );
    stack.assert_consumers_ready(&report, 0);
    stack.assert_deployed(0);
}

/// Spoke 0 of `stack` rebuilt (new CAs, empty storage) after a first rotation: the real
/// controllers report the x509 failure when asked, then one tick brings the ConfigMap
/// and the release back, each consumer Ready=True having handled spokekeeper's request at
/// its current generation, the delivery (unsealed or decrypted) ok in both reports.
/// Returns the stack and the tick's report.
fn rebuild_and_tick(mut stack: RealFlux) -> (RealFlux, Value) {
    let delivery = stack.delivery();
    let delivered = |report: &Value| {
        let hub = &report["spokes"][0]["hub"];
        assert_eq!(hub[delivery]["ok"], true, "{report:#}");
    };
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    delivered(&report);
    let first = stack.assert_consumers_ready(&report, 0);
    stack.assert_deployed(0);

    stack.rebuild(0, 1);
    let gone = stack.spoke_apis[0].try_kubectl(&["get", "configmap", "spoke-app", "-n", "default"]);
    assert!(gone.is_err(), "fresh storage: {gone:?}");
    for kind in ["kustomization", "helmrelease"] {
        let at = request_reconcile(&stack.hub, kind, "spoke0");
        let failed = stack.wait_for(kind, "spoke0", "the x509 failure", |r| {
            r.last_handled == at && r.status == "False"
        });
        assert!(failed.message.contains("x509"), "{kind}: {failed:?}");
    }

    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["reason"]["kind"], "ca-changed", "{spoke:#}");
    delivered(&report);
    let after = stack.assert_consumers_ready(&report, 0);
    assert_ne!(after, first);
    stack.assert_deployed(0);
    (stack, report)
}

/// Scenario 2 of issue 27, extracted mode: a rebuilt spoke is served again by the real
/// controllers after one tick.
#[test]
fn a_rebuilt_spoke_is_back_on_the_real_controllers_after_one_tick() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let (_stack, report) = rebuild_and_tick(RealFlux::start(1, false, ""));
    assert_eq!(report["spokes"][0]["user"], "system:admin", "{report:#}");
}

/// Issue 33: scenario 2 of issue 27 with the fleet in sops format. The root
/// Kustomization decrypts each committed Secret with the hub's age key (spokekeeper's
/// report says `decrypted`, no SealedSecret anywhere), and a rebuilt spoke is served
/// again after one tick. What is committed is a sops Secret for the hub's recipient, its
/// values `ENC[...]`; the kubeconfig's client key is in no file, object or output of the
/// fleet's.
#[test]
fn a_rebuilt_sops_spoke_is_back_on_the_real_controllers_after_one_tick() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_format(1, false, "", Format::Sops);
    let (stack, report) = rebuild_and_tick(stack);
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["user"], "system:admin", "{spoke:#}");
    assert!(spoke["hub"]["synced"].is_null(), "{spoke:#}");

    // On the hub: the Secret kustomize-controller applied from the decrypted file.
    let secret = stack
        .hub
        .api
        .get_json(&["secret", "spoke0-kubeconfig", "-n", flux::NS]);
    let labels = &secret["metadata"]["labels"];
    let applier = &labels["kustomize.toolkit.fluxcd.io/name"];
    assert_eq!(applier, "flux-system", "{labels:#}");
    let sealed =
        stack
            .hub
            .api
            .try_kubectl(&["get", "sealedsecret", "spoke0-kubeconfig", "-n", flux::NS]);
    assert!(sealed.is_err(), "{sealed:?}");
    let kubeconfig = stack
        .hub
        .secret_value(flux::NS, "spoke0-kubeconfig", "value")
        .expect("the decrypted kubeconfig");

    // In the fleet repo: a sops Secret for the hub's recipient alone.
    let text = stack.fleet.remote_file(0);
    let file: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(file["kind"], "Secret", "{text}");
    let data = file["data"].as_object().unwrap_or_else(|| panic!("{text}"));
    assert_eq!(data.keys().collect::<Vec<_>>(), ["value"], "{text}");
    assert!(
        data["value"]
            .as_str()
            .is_some_and(|v| v.starts_with("ENC[AES256_GCM,data:")),
        "{text}"
    );
    let age = &file["sops"]["age"];
    assert_eq!(age.as_array().map(Vec::len), Some(1), "{text}");
    assert_eq!(
        age[0]["recipient"].as_str(),
        stack.age_recipient.as_deref(),
        "{text}"
    );
    let mut needles = Needles::new();
    assert_eq!(needles.add_kubeconfig(&kubeconfig), 1);
    needles.add_key(&stack.fleet.nodes[0].parts().client_key_pem);
    stack.fleet.assert_no_plaintext_of(&needles);
}

/// Issue 33, a fleet in both formats: sops by default, spoke 1 keeping a SealedSecret
/// (`spokes[].sealing.format`). One tick delivers both through the real controllers
/// from the same root Kustomization: spoke 0's report says `decrypted`, spoke 1's
/// `synced`, each spoke's consumers Ready and its ConfigMap and release deployed.
#[test]
fn one_tick_delivers_a_sops_spoke_and_a_sealed_one_on_the_real_controllers() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_format(2, false, "", Format::Sops);
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    let mixed = text.replacen(
        "  - name: spoke1\n",
        "  - name: spoke1\n    sealing: {format: sealed-secrets}\n",
        1,
    );
    assert_ne!(mixed, text);
    std::fs::write(&stack.fleet.config, mixed).unwrap();

    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    for (i, delivery, other, kind) in [
        (0, "decrypted", "synced", "Secret"),
        (1, "synced", "decrypted", "SealedSecret"),
    ] {
        let hub = &report["spokes"][i]["hub"];
        assert_eq!(hub[delivery]["ok"], true, "spoke{i}: {report:#}");
        assert!(hub[other].is_null(), "spoke{i}: {report:#}");
        stack.assert_consumers_ready(&report, i);
        stack.assert_deployed(i);
        let file = stack.fleet.remote_file(i);
        assert!(file.contains(&format!("\nkind: {kind}\n")), "{file}");
    }
}

/// Scenario 2 of issue 27, minted mode: the rebuilt spoke gets generation 2 on its new
/// cluster (generation 1's binding went with the old storage, so nothing is revoked);
/// a renewal then mints generation 3, and generation 2 is revoked only once the real
/// controllers reported Ready with it.
#[test]
fn a_rebuilt_minted_spoke_is_back_on_the_real_controllers_after_one_tick() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let (stack, report) = rebuild_and_tick(RealFlux::start(
        1,
        true,
        "credential:\n  mode: minted\n  ttl: 1h\n  renew_before: 3590s\n",
    ));
    let spoke = &report["spokes"][0];
    assert!(
        spoke["user"]
            .as_str()
            .unwrap()
            .starts_with("spokekeeper:hub:spoke0:2:"),
        "{spoke:#}"
    );
    assert!(
        spoke["revoked"].as_array().is_none_or(Vec::is_empty),
        "{spoke:#}"
    );
    let bindings = stack.spoke_apis[0].kubectl(&["get", "clusterrolebindings", "-o", "name"]);
    assert!(bindings.contains("spokekeeper.hub.spoke0.g2"), "{bindings}");
    assert!(
        !bindings.contains("spokekeeper.hub.spoke0.g1"),
        "{bindings}"
    );

    // renew_before (3590s of a 1h certificate) is reached 10s after the mint.
    std::thread::sleep(Duration::from_secs(11));
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["reason"]["kind"], "client-expiring", "{spoke:#}");
    stack.assert_consumers_ready(&report, 0);
    assert_eq!(
        spoke["revoked"],
        serde_json::json!(["spokekeeper.hub.spoke0.g2"]),
        "{spoke:#}"
    );
    let bindings = stack.spoke_apis[0].kubectl(&["get", "clusterrolebindings", "-o", "name"]);
    assert!(
        !bindings.contains("spokekeeper.hub.spoke0.g2"),
        "{bindings}"
    );
}

/// Points spoke 0's Kustomization and HelmRelease at the GitRepository `apps` instead of
/// `fleet` (in the seed's work tree `dir`).
fn consumers_from_apps(dir: &Path) {
    let path = dir.join("fluxcd/spoke0.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let moved = text.replace("name: fleet\n", "name: apps\n");
    assert_eq!(moved.matches("name: apps\n").count(), 2, "{moved}");
    std::fs::write(&path, moved).unwrap();
}

/// Scenario 4 of issue 27: the consumers' GitRepository has a broken URL (a repository
/// the git server does not have), so source-controller never fetches an artifact and both
/// consumers fail on their source. spokekeeper names the source as the cause
/// (SourceFailed) well within `verify_timeout`, instead of waiting it out. (A URL broken
/// after a first fetch fails nothing: Flux keeps using the last artifact.)
#[test]
fn a_broken_source_is_named_as_the_cause_on_the_real_controllers() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_with(1, false, "", consumers_from_apps);
    stack.hub.api.apply(&format!(
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata:\n  \
         name: apps\n  namespace: {}\nspec:\n  interval: 1m\n  timeout: 20s\n  url: {}\n  \
         ref:\n    branch: main\n",
        flux::NS,
        stack.git.url("missing.git")
    ));
    // Before: source-controller itself says the source failed.
    let source = stack.wait_for("gitrepository", "apps", "Ready=False", |r| {
        r.status == "False"
    });

    let started = Instant::now();
    let (code, report, err) = stack.rotate_json();
    let took = started.elapsed();
    assert_ne!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["hub"]["synced"]["ok"], true, "{spoke:#}");
    let consumers = spoke["hub"]["consumers"]
        .as_array()
        .unwrap_or_else(|| panic!("{spoke:#}"));
    assert_eq!(consumers.len(), 2, "{spoke:#}");
    for c in consumers {
        assert_eq!(c["ready"]["ok"], false, "{spoke:#}");
        assert_eq!(c["ready"]["status"], "SourceFailed", "{spoke:#}");
    }
    let kustomization = consumers
        .iter()
        .find(|c| c["kind"] == "Kustomization")
        .unwrap_or_else(|| panic!("{spoke:#}"));
    let message = kustomization["ready"]["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("source GitRepository flux-system/apps: "),
        "{spoke:#}"
    );
    // What source-controller says of it, as kubectl shows it.
    let live = flux::ready(&stack.hub, "gitrepository", "apps").expect("Ready");
    assert_eq!(live.status, "False", "{live:?}");
    assert_eq!(
        kustomization["ready"]["reason"], live.reason,
        "{spoke:#}\n{live:?}"
    );
    assert_eq!(live.reason, source.reason, "{live:?}\n{source:?}");
    assert!(
        took < Duration::from_secs(60),
        "named within verify_timeout (90s), not waited out: {took:?}\n{spoke:#}"
    );
}

/// spoke 0's HelmRelease gives up after one retry (`install.remediation.retries: 1`).
fn one_install_retry(dir: &Path) {
    let path = dir.join("fluxcd/spoke0.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replace(
        "  releaseName: spoke-config\n",
        "  releaseName: spoke-config\n  install:\n    remediation:\n      retries: 1\n",
    );
    assert_ne!(edited, text);
    std::fs::write(&path, edited).unwrap();
}

/// The ClusterRole spokekeeper binds its minted users to in scenario 3: Helm's storage
/// (Secrets), reading and deleting ConfigMaps (so helm-controller's uninstall remediation
/// completes), but creating none until `ready` adds it.
fn deployer_role(ready: bool) -> String {
    let write = if ready {
        "- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [create, update, patch]\n"
    } else {
        ""
    };
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  \
         name: spoke-deployer\nrules:\n- apiGroups: [\"\"]\n  resources: [secrets]\n  \
         verbs: [get, list, watch, create, update, patch, delete]\n- apiGroups: [\"\"]\n  \
         resources: [namespaces]\n  verbs: [get, list, watch]\n- apiGroups: [\"\"]\n  \
         resources: [configmaps]\n  verbs: [get, list, watch, delete]\n{write}"
    )
}

/// Scenario 3 of issue 27: a HelmRelease the real helm-controller stalled after its
/// retries (the minted user's role could not create the chart's ConfigMap:
/// `Stalled=True, RetriesExceeded`), which a plain reconcile request no longer moves.
/// Once the role is fixed, spokekeeper's next tick (a renewal) asks it with
/// `reconcile.fluxcd.io/resetAt` and it is Ready=True again, the release deployed.
#[test]
fn a_stalled_helm_release_is_reset_by_the_next_tick_on_the_real_controllers() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_with(
        1,
        true,
        "credential:\n  mode: minted\n  ttl: 1h\n  renew_before: 3590s\n  cluster_role: spoke-deployer\n",
        one_install_retry,
    );
    stack.spoke_apis[0].apply(&deployer_role(false));
    let (_, report, err) = stack.rotate_json();
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{report:#}\n{err}");
    let user = spoke["user"].as_str().unwrap_or_default();
    assert!(user.starts_with("spokekeeper:hub:spoke0:1:"), "{spoke:#}");

    // Before: the real helm-controller used up its retries and stalled.
    let stalled = wait_until(
        "Stalled=True, RetriesExceeded",
        WAIT,
        || match flux::condition(&stack.hub, "helmrelease", "spoke0", "Stalled") {
            Some(s) if s.status == "True" => Ok(s),
            other => Err(format!("{other:?}\n{}", stack.controllers.tail(15))),
        },
    );
    assert_eq!(stalled.reason, "RetriesExceeded", "{stalled:?}");
    let failed = flux::ready(&stack.hub, "helmrelease", "spoke0").expect("Ready");
    assert_eq!(failed.status, "False", "{failed:?}");

    // The role fixed, a plain request no longer runs it: handled, still stalled.
    stack.spoke_apis[0].apply(&deployer_role(true));
    let at = request_reconcile(&stack.hub, "helmrelease", "spoke0");
    let still = stack.wait_for("helmrelease", "spoke0", "the request handled", |r| {
        r.last_handled == at
    });
    assert_eq!(still.status, "False", "{still:?}");
    let stuck = flux::condition(&stack.hub, "helmrelease", "spoke0", "Stalled");
    assert_eq!(stuck.map(|s| s.status), Some("True".into()));
    let absent =
        stack.spoke_apis[0].try_kubectl(&["get", "configmap", "spoke-config", "-n", "default"]);
    assert!(absent.is_err(), "{absent:?}");

    // renew_before (3590s of a 1h certificate) is reached 10s after the mint.
    std::thread::sleep(Duration::from_secs(11));
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["reason"]["kind"], "client-expiring", "{spoke:#}");
    stack.assert_consumers_ready(&report, 0);
    let reset = stack
        .hub
        .api
        .get_json(&["helmrelease", "spoke0", "-n", flux::NS]);
    // Reset at the tick's request, or (when it stalled again while that request ran, as
    // helm-controller may on the Secret's own change) at the request that asked again.
    let release = spoke["hub"]["consumers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["kind"] == "HelmRelease"))
        .unwrap_or_else(|| panic!("{spoke:#}"));
    let asked = match &release["requested_at"] {
        Value::Null => &spoke["hub"]["requested_at"],
        again => again,
    };
    assert_eq!(
        reset["metadata"]["annotations"]["reconcile.fluxcd.io/resetAt"], *asked,
        "{reset:#}"
    );
    stack.assert_deployed(0);
}

/// A kubeconfig for spokekeeper on the hub: a ServiceAccount token bound to everything
/// `hub::ACCESS` lists except `patch` on Kustomizations, so its reconcile requests to
/// them are refused by the real authorizer.
fn hub_identity_without_kustomization_patch(hub: &RealHub) -> std::path::PathBuf {
    let mut rules = String::new();
    for a in spokekeeper::hub::ACCESS {
        let verbs: Vec<&str> = a
            .verbs
            .iter()
            .copied()
            .filter(|v| !(a.resource == "kustomizations" && *v == "patch"))
            .collect();
        rules.push_str(&format!(
            "- apiGroups: [\"{}\"]\n  resources: [{}]\n  verbs: [{}]\n",
            a.group,
            a.resource,
            verbs.join(", ")
        ));
    }
    hub.api.apply(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: spokekeeper\n  namespace: {ns}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  \
         name: spokekeeper-no-kustomization-patch\nrules:\n{rules}---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  \
         name: spokekeeper-no-kustomization-patch\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  \
         kind: ClusterRole\n  name: spokekeeper-no-kustomization-patch\nsubjects:\n\
         - {{kind: ServiceAccount, name: spokekeeper, namespace: {ns}}}\n",
        ns = flux::NS
    ));
    let token = hub.token(flux::NS, "spokekeeper");
    hub.token_kubeconfig("spokekeeper-no-kustomization-patch", &token)
}

/// Scenario 6 of issue 27: the watch label. spoke 0's consumers take their files from
/// the GitRepository `apps` (branch `apps`, which no push of spokekeeper's moves, so a
/// push does not wake them through their source). After a first rotation spoke 0 is
/// rebuilt while its Kustomization stays Ready on the old credential (10m interval,
/// nothing pending), and spokekeeper runs with a hub identity that may not patch
/// Kustomizations: its reconcile request is refused, yet the real kustomize-controller
/// reconciles on the unsealed Secret's change (`reconcile.fluxcd.io/watch: Enabled`) and
/// puts the ConfigMap back on the rebuilt spoke without handling any request.
#[test]
fn the_watch_label_reconciles_a_kustomization_whose_request_is_refused() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = RealFlux::start_with(1, false, "", consumers_from_apps);
    let seed = stack.fleet.dir.path().join("seed");
    git(&seed, &["push", "--quiet", "origin", "HEAD:apps"]);
    stack.hub.api.apply(&format!(
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata:\n  \
         name: apps\n  namespace: {}\nspec:\n  interval: 10m\n  timeout: 20s\n  url: {}\n  \
         ref:\n    branch: apps\n",
        flux::NS,
        stack.git.url("fleet.git")
    ));
    stack.wait_ready("gitrepository", "apps", None);
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let first = stack.assert_consumers_ready(&report, 0);
    stack.assert_deployed(0);
    let before = stack
        .hub
        .api
        .get_json(&["gitrepository", "apps", "-n", flux::NS]);

    stack.rebuild(0, 1);
    let kubeconfig = hub_identity_without_kustomization_patch(&stack.hub);
    stack.hub.use_kubeconfig(&stack.fleet.config, &kubeconfig);

    let (_, report, err) = stack.rotate_json();
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{report:#}\n{err}");
    assert_eq!(spoke["reason"]["kind"], "ca-changed", "{spoke:#}");
    assert_eq!(spoke["hub"]["synced"]["ok"], true, "{spoke:#}");
    let refused = spoke["hub"]["consumers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["kind"] == "Kustomization")
        .unwrap_or_else(|| panic!("{spoke:#}"));
    assert_eq!(refused["ready"]["status"], "Error", "{spoke:#}");
    assert!(
        refused["ready"]["message"]
            .as_str()
            .is_some_and(|m| m.to_lowercase().contains("forbidden")),
        "{spoke:#}"
    );
    let annotations = stack
        .hub
        .api
        .get_json(&["kustomization", "spoke0", "-n", flux::NS]);
    assert_eq!(
        annotations["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"], first,
        "no request reached it: {annotations:#}"
    );
    let secret = stack
        .hub
        .api
        .get_json(&["secret", "spoke0-kubeconfig", "-n", flux::NS]);
    assert_eq!(
        secret["metadata"]["labels"]["reconcile.fluxcd.io/watch"], "Enabled",
        "{}",
        secret["metadata"]
    );

    // The ConfigMap is back on the rebuilt spoke although the Kustomization handled no
    // request since the first rotation, and its source did not move.
    wait_until("spoke-app on the rebuilt spoke", WAIT, || {
        stack.spoke_apis[0]
            .try_kubectl(&["get", "configmap", "spoke-app", "-n", "default"])
            .map_err(|e| format!("{e}\n{}", stack.controllers.tail(10)))
    });
    let live = stack.wait_ready("kustomization", "spoke0", None);
    assert_eq!(live.last_handled, first, "{live:?}");
    let after = stack
        .hub
        .api
        .get_json(&["gitrepository", "apps", "-n", flux::NS]);
    assert_eq!(
        after["status"]["artifact"]["revision"], before["status"]["artifact"]["revision"],
        "{after:#}"
    );
    stack.assert_deployed(0);
}

/// Scenario 5's minted users: bound to `spoke-deployer` (what the HelmRelease needs).
const MINTED_DEPLOYER: &str =
    "credential:\n  mode: minted\n  ttl: 1h\n  cluster_role: spoke-deployer\n";

mod federated;
mod federated_ca;
mod federated_drop;
mod federated_issuer;
mod federated_migrate;
mod federated_migrate_review;
mod federated_own;
mod federated_revoke;
mod federated_servers;
mod minted;
mod ready;
