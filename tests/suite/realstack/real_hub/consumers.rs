//! Every consumer kind on the real CRDs, and real spokes validated and rotated.

use crate::support;

use std::time::Duration;

use super::{SCOPES, Stack, assert_ready};
use support::realstack::hub::HubOptions;
use support::realstack::spoke::real_api;

/// Every consumer of a spoke's Secret on the real CRDs: two Kustomizations and a
/// HelmRelease on it are each asked to reconcile and reported by kind and name; one on
/// another Secret and one in another namespace are not.
#[test]
fn every_consumer_on_the_real_crds_is_verified() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    let hr = |name: &str, ns: &str, secret: &str| {
        format!(
            "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: {name}\n  \
             namespace: {ns}\nspec:\n  interval: 10m\n  chart:\n    spec:\n      chart: podinfo\n      \
             sourceRef:\n        kind: HelmRepository\n        name: podinfo\n  kubeConfig:\n    \
             secretRef:\n      name: {secret}\n"
        )
    };
    let ks = |name: &str, ns: &str, secret: &str| {
        format!(
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: {name}\n  \
             namespace: {ns}\nspec:\n  interval: 10m\n  path: ./infra\n  prune: true\n  sourceRef:\n    \
             kind: GitRepository\n    name: fleet\n  kubeConfig:\n    secretRef:\n      name: {secret}\n"
        )
    };
    stack
        .hub
        .api
        .apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: elsewhere\n");
    stack
        .hub
        .api
        .apply(&ks("spoke0-infra", "flux-system", "spoke0-kubeconfig"));
    stack
        .hub
        .api
        .apply(&hr("spoke0-apps", "flux-system", "spoke0-kubeconfig"));
    stack
        .hub
        .api
        .apply(&ks("other", "flux-system", "other-kubeconfig"));
    stack
        .hub
        .api
        .apply(&ks("spoke0", "elsewhere", "spoke0-kubeconfig"));
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_ready(
        &report["spokes"][0],
        &[
            "HelmRelease/flux-system/spoke0-apps",
            "Kustomization/flux-system/spoke0",
            "Kustomization/flux-system/spoke0-infra",
        ],
    );
    // Each was asked through the annotation, and the others were not.
    let requested = |kind: &str, ns: &str, name: &str| {
        stack.hub.api.get_json(&[kind, name, "-n", ns])["metadata"]["annotations"]
            ["reconcile.fluxcd.io/requestedAt"]
            .is_string()
    };
    assert!(requested("helmrelease", "flux-system", "spoke0-apps"));
    assert!(requested("kustomization", "flux-system", "spoke0-infra"));
    assert!(!requested("kustomization", "flux-system", "other"));
    assert!(!requested("kustomization", "elsewhere", "spoke0"));
}

/// Scenario 8: spokes whose APIs are real kube-apiservers with k3s-shaped PKI, reached
/// through the lab's real sshd: live validation (version and SelfSubjectReview) runs
/// against them; one is rebuilt (new CAs, restart), the probe detects it, it is rotated,
/// the real controller unseals it and Flux's code deploys with it.
#[test]
fn real_spokes_are_validated_and_a_rebuilt_one_is_rotated() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = Stack::with_real_spokes(2);
    for node in &stack.fleet.nodes {
        let k3s = String::from_utf8(node.kubeconfig_bytes()).unwrap();
        assert!(k3s.contains("server: https://127.0.0.1:6443\n"), "{k3s}");
        assert!(k3s.contains("current-context: default\n"), "{k3s}");
    }
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    for i in 0..2 {
        let spoke = &report["spokes"][i];
        assert_eq!(spoke["action"], "rotated", "{spoke:#}");
        assert_eq!(spoke["user"], "system:admin", "{spoke:#}");
        assert_ready(spoke, &[&format!("Kustomization/flux-system/spoke{i}")]);
        stack.wait_unsealed(i, Duration::from_secs(60));
    }
    let first_ca = report["spokes"][1]["ca_sha256"].clone();

    // A reinstall of spoke1: new CAs, the API server restarted over fresh storage.
    stack.spoke_apis[1].stop();
    stack.fleet.nodes[1].rebuild();
    stack.spoke_apis[1] = real_api(&stack.fleet.nodes[1], &stack.hub.etcd, stack.hub.dir(), 1);
    // The committed credential no longer works against it.
    let stale = stack
        .hub
        .flux_calls_spoke("flux-system", "spoke1-kubeconfig");
    assert!(stale.is_err(), "{stale:?}");

    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][1];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_ne!(spoke["ca_sha256"], first_ca, "{spoke:#}");
    assert_ne!(report["spokes"][0]["action"], "rotated", "{report:#}");
    stack.wait_unsealed(1, Duration::from_secs(60));
    let who = stack
        .hub
        .flux_calls_spoke("flux-system", "spoke1-kubeconfig")
        .unwrap();
    assert_eq!(who["username"], "system:admin", "{who}");
    assert_ready(spoke, &["Kustomization/flux-system/spoke1"]);
}
