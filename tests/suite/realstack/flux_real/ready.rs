//! What Ready means on the real controllers, for each shape of Kustomization spokekeeper verifies.

use super::*;

/// The fleet repo's extra paths for [`flux_ready_semantics_on_the_real_controllers`]:
/// `apps/infra` (a ConfigMap on the hub), `apps/broken` (a kustomization.yaml naming a
/// file that is not there) and `apps/retried` (a ConfigMap for the spoke).
fn semantics_paths(dir: &Path) {
    let write = |rel: &str, text: &str| {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "apps/infra/configmap.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: infra\n  namespace: flux-system\n",
    );
    write(
        "apps/broken/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- missing.yaml\n",
    );
    write(
        "apps/retried/configmap.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: spoke-retried\n  namespace: default\n",
    );
}

/// A Kustomization `name` in flux-system from the GitRepository `fleet` at `path`, with
/// `extra` spec lines; on spoke 0 through its Secret when `spoke`.
fn kustomization(name: &str, path: &str, spoke: bool, extra: &str) -> String {
    let kubeconfig = if spoke {
        "  kubeConfig:\n    secretRef:\n      name: spoke0-kubeconfig\n"
    } else {
        ""
    };
    format!(
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  \
         name: {name}\n  namespace: {}\nspec:\n  interval: 10m\n  retryInterval: 5s\n  \
         path: {path}\n  prune: true\n  timeout: 30s\n{extra}  sourceRef:\n    \
         kind: GitRepository\n    name: fleet\n{kubeconfig}",
        flux::NS
    )
}

/// Issue 19, item 3, on the real kustomize-controller (no status written by the test):
/// besides spoke 0's own consumers, three more Kustomizations deploy with its Secret. A
/// suspended one is reported as suspended; one whose build fails (a missing file) is
/// reported with the controller's Ready False (`BuildFailed`) once it handled the
/// request, its observedGeneration behind, not waited out; one that depends on the hub's
/// `infra`, suspended until the controller reported it `DependencyNotReady`, is waited
/// through to the controller's own retry, Ready True.
#[test]
fn flux_ready_semantics_on_the_real_controllers() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_with(1, false, "", semantics_paths);
    let api = &stack.hub.api;
    api.apply(&kustomization(
        "infra",
        "./apps/infra",
        false,
        "  suspend: true\n",
    ));
    api.apply(&kustomization(
        "spoke0-suspended",
        "./apps/retried",
        true,
        "  suspend: true\n",
    ));
    api.apply(&kustomization("spoke0-failing", "./apps/broken", true, ""));
    api.apply(&kustomization(
        "spoke0-retried",
        "./apps/retried",
        true,
        "  dependsOn:\n  - name: infra\n",
    ));

    let config = stack.fleet.config.clone();
    let ((_, out, err), retrying) = std::thread::scope(|s| {
        let tick =
            s.spawn(|| support::fleet::spokekeeper(&config, &["rotate", "-o", "json", "--all"]));
        // The controller's own DependencyNotReady, for spokekeeper's request.
        let retrying = stack.wait_for(
            "kustomization",
            "spoke0-retried",
            "DependencyNotReady",
            |r| !r.last_handled.is_empty() && r.reason == "DependencyNotReady",
        );
        api.kubectl(&[
            "patch",
            "kustomization",
            "infra",
            "-n",
            flux::NS,
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":false}}"#,
        ]);
        (tick.join().expect("the tick"), retrying)
    });
    assert_eq!(retrying.status, "False", "{retrying:?}");
    let report_json: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let report = format!("{report_json:#}\n{err}\n{}", stack.controllers.tail(20));
    let parsed = &report_json;
    let consumer = |name: &str| {
        parsed["spokes"][0]["hub"]["consumers"]
            .as_array()
            .unwrap_or_else(|| panic!("{report}"))
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {report}"))["ready"]
            .clone()
    };
    let suspended = consumer("spoke0-suspended");
    assert_eq!(suspended["status"], "Suspended", "{report}");
    assert_eq!(suspended["ok"], false, "{report}");

    let failing = consumer("spoke0-failing");
    let live = flux::ready(&stack.hub, "kustomization", "spoke0-failing").expect("Ready");
    assert_eq!(failing["ok"], false, "{report}");
    assert_eq!(failing["status"], "False", "{report}");
    assert_eq!(failing["reason"], "BuildFailed", "{report}");
    assert_eq!(failing["reason"], live.reason, "{live:?}");
    assert!(live.message.contains("missing.yaml"), "{live:?}");
    assert!(live.observed_generation < live.generation, "{live:?}");

    let retried = consumer("spoke0-retried");
    assert_eq!(retried["ok"], true, "{report}");
    let live = flux::ready(&stack.hub, "kustomization", "spoke0-retried").expect("Ready");
    assert_eq!(live.status, "True", "{live:?}");
    assert_eq!(live.last_handled, retrying.last_handled, "{live:?}");
    stack.spoke_apis[0].kubectl(&["get", "configmap", "spoke-retried", "-n", "default"]);
    assert_eq!(consumer("spoke0")["ok"], true, "{report}");
}
