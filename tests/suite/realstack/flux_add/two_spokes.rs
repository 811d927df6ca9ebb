//! Two spokes added side by side: same-named releases kept apart, and one spoke's
//! hub-side directory reaches nothing else.

use crate::support;

use std::path::Path;

use super::{add, forget, has_release, push, release_for, release_parts, write};
use support::git::git;
use support::realstack::flux_controllers as flux;
use support::realstack::real_flux::{RealFlux, WAIT};

/// The hub's root before either spoke is added: one object of its own.
const EMPTY_ROOT: &str = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
    resources:\n  - fleet.yaml\n";

/// The seed without the spokes' Flux objects, each spoke's manifests under spokes/: a
/// ConfigMap, and a HelmRelease named `web` for both.
fn both_to_add(seed: &Path) {
    for i in 0..2 {
        std::fs::remove_file(seed.join(format!("fluxcd/spoke{i}.yaml"))).unwrap();
        std::fs::remove_dir_all(seed.join(format!("apps/spoke{i}"))).unwrap();
        write(
            seed,
            &format!("spokes/spoke{i}/apps/configmap.yaml"),
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: spoke-app\n  \
                 namespace: default\ndata:\n  spoke: spoke{i}\n"
            ),
        );
        write(
            seed,
            &format!("spokes/spoke{i}/helmreleases/web.yaml"),
            &release_for("web", "spoke-config", i),
        );
    }
    write(seed, "fluxcd/kustomization.yaml", EMPTY_ROOT);
    write(
        seed,
        "fluxcd/fleet.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fleet\n  namespace: {}\n\
             data:\n  layout: hub-and-spoke\n",
            flux::NS
        ),
    );
}

/// What spoke 1's directory on the hub side must not do: deploy to spoke 0 through a
/// Flux Kustomization naming spoke 0's Secret, and bind cluster-admin on the hub.
const ESCAPE: &str = "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
    metadata:\n  name: steal\n  namespace: spoke0\nspec:\n  interval: 10m\n  path: ./spokes/spoke1/stolen\n  \
    prune: true\n  sourceRef:\n    kind: GitRepository\n    name: fleet\n    namespace: flux-system\n  \
    kubeConfig:\n    secretRef:\n      name: spoke0-kubeconfig\n      key: value\n---\n\
    apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  \
    name: spoke1-owns-the-hub\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  \
    kind: ClusterRole\n  name: cluster-admin\nsubjects:\n  - kind: ServiceAccount\n    \
    name: default\n    namespace: spoke1\n";

#[test]
fn two_added_spokes_keep_same_named_releases_apart_and_one_spokes_directory_reaches_nothing_else() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_with(2, false, "", both_to_add);
    both_added_each_in_its_own_namespace(&stack);

    let seed = stack.fleet.dir.path().join("seed");
    git(&seed, &["pull", "--quiet", "--rebase", "origin", "main"]);
    spoke1s_writer_reaches_neither_spoke0_nor_the_hub(&stack, &seed);

    a_leak_and_a_bare_release_go_nowhere_else(&stack, &seed);

    removing_spoke1s_releases_uninstalls_only_its_own(&stack, &seed);
}

/// Spoke 1 by a bare name (its GitRepository in flux-system), spoke 0 by
/// NAMESPACE/NAME: each in its own hub namespace, which is not the source's.
fn both_added_each_in_its_own_namespace(stack: &RealFlux) {
    forget(stack, 1);
    add(stack, 1, "fleet");
    forget(stack, 0);
    let err = add(stack, 0, "flux-system/fleet");
    // ROOT from the labels the real kustomize-controller put on spoke 1's SealedSecret.
    assert!(
        err.contains("ROOT is ./fluxcd, the path of Kustomization flux-system/"),
        "{err}"
    );
    for i in 0..2 {
        let ns = format!("spoke{i}");
        stack.wait_ready_in(&ns, "kustomization", &ns);
        // The Secret is in the spoke's namespace (its name only is read).
        let secret = format!("spoke{i}-kubeconfig");
        assert!(
            stack
                .hub
                .api
                .try_kubectl(&["get", "secret", &secret, "-n", &ns, "-o", "name"])
                .is_ok()
        );
        stack.wait_ready_in(&ns, "kustomization", &format!("{ns}-helmreleases"));
        stack.wait_ready_in(&ns, "helmrelease", "web");
        let hr = stack.hub.api.get_json(&["helmrelease", "web", "-n", &ns]);
        assert_eq!(
            hr["spec"]["kubeConfig"]["secretRef"]["name"],
            format!("spoke{i}-kubeconfig"),
            "{hr:#}"
        );
    }
    // Each release on its own spoke, with its own values, and none on the hub.
    stack.assert_deployed(0);
    stack.assert_deployed(1);
    assert!(!has_release(&stack.hub.api, "spoke-config"));
}

/// The writer of spoke 1's hub-side directory tries to reach spoke 0 and the hub.
fn spoke1s_writer_reaches_neither_spoke0_nor_the_hub(stack: &RealFlux, seed: &Path) {
    write(seed, "spokes/spoke1/helmreleases/escape.yaml", ESCAPE);
    write(
        seed,
        "spokes/spoke1/stolen/configmap.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stolen\n  namespace: default\n",
    );
    push(stack, seed, "spoke1: reach spoke0 and the hub");
    let refused = stack.wait_for_in(
        "spoke1",
        "kustomization",
        "spoke1-helmreleases",
        "Ready=False, forbidden",
        |r| r.status == "False" && r.message.contains("forbidden"),
    );
    assert!(
        refused
            .message
            .contains("system:serviceaccount:spoke1:spoke1-helmreleases"),
        "{refused:?}"
    );
    let kustomizations = stack
        .hub
        .api
        .get_json(&["kustomizations", "--all-namespaces"]);
    let names: Vec<&str> = kustomizations["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["metadata"]["name"].as_str())
        .collect();
    assert!(!names.contains(&"steal"), "{names:?}");
    assert!(
        stack
            .hub
            .api
            .try_kubectl(&["get", "clusterrolebinding", "spoke1-owns-the-hub"])
            .is_err()
    );
    assert!(
        stack.spoke_apis[0]
            .try_kubectl(&["get", "configmap", "stolen", "-n", "default"])
            .is_err()
    );
    // check names both objects, for spoke 1.
    let (_, out, err) = stack.fleet.run(&["check", "spoke1", "-o", "json"]);
    let report: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let flux: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["cert"] == "flux")
        .filter_map(|f| f["detail"].as_str())
        .collect();
    for object in [
        "Kustomization spoke1/steal",
        "ClusterRoleBinding spoke1/spoke1-owns-the-hub",
    ] {
        assert!(
            flux.iter().any(|d| d.starts_with(object)
                && d.contains("is applied on the hub by Kustomization spoke1/spoke1-helmreleases")),
            "{object}: {flux:#?}"
        );
    }
}

/// A HelmRelease rendering spoke 0's Secret into spoke 1 through valuesFrom: its
/// namespace is spoke 1's, which holds no other spoke's Secret.
fn a_leak_and_a_bare_release_go_nowhere_else(stack: &RealFlux, seed: &Path) {
    std::fs::remove_file(seed.join("spokes/spoke1/helmreleases/escape.yaml")).unwrap();
    write(
        seed,
        "spokes/spoke1/helmreleases/leak.yaml",
        &release_for("leak", "leak", 1).replace(
            "  values:\n",
            "  valuesFrom:\n    - kind: Secret\n      name: spoke0-kubeconfig\n      \
             valuesKey: value\n      targetPath: spoke\n  values:\n",
        ),
    );
    // Beside it, on spoke 0, a release without targetNamespace and storageNamespace.
    write(
        seed,
        "spokes/spoke0/helmreleases/bare.yaml",
        &release_for("bare", "bare", 0).replace(
            "  targetNamespace: default\n  storageNamespace: default\n",
            "",
        ),
    );
    push(
        stack,
        seed,
        "spoke1: render spoke0's Secret; spoke0: a release placed nowhere",
    );
    stack.wait_ready_in("spoke1", "kustomization", "spoke1-helmreleases");
    let leak = stack.wait_for_in("spoke1", "helmrelease", "leak", "Ready=False", |r| {
        r.status == "False" && r.message.contains("spoke0-kubeconfig")
    });
    // Looked for in spoke 1's namespace, where it is not.
    assert!(
        leak.message
            .contains("reference 'spoke1/spoke0-kubeconfig'")
            && leak.message.contains("not found"),
        "{leak:?}"
    );
    assert!(!has_release(&stack.spoke_apis[1], "leak"));
    assert!(!has_release(&stack.spoke_apis[0], "leak"));
    // The release without the two fields goes to namespace spoke0 on spoke 0, which has
    // none; check names it, and where it goes.
    let bare = stack.wait_for_in("spoke0", "helmrelease", "bare", "Ready=False", |r| {
        r.status == "False" && r.message.contains("not found")
    });
    assert!(bare.message.contains("spoke0"), "{bare:?}");
    let (_, out, err) = stack.fleet.run(&["check", "spoke0", "-o", "json"]);
    assert!(
        out.contains("HelmRelease spoke0/bare (spokes/spoke0/helmreleases/bare.yaml) has no spec.targetNamespace nor spec.storageNamespace: helm-controller then uses its hub namespace spoke0 on spoke spoke0"),
        "{out}\n{err}"
    );
}

/// Spoke 1's releases removed from its directory: only its release is uninstalled.
fn removing_spoke1s_releases_uninstalls_only_its_own(stack: &RealFlux, seed: &Path) {
    for f in ["web.yaml", "leak.yaml"] {
        std::fs::remove_file(seed.join("spokes/spoke1/helmreleases").join(f)).unwrap();
    }
    write(
        seed,
        "spokes/spoke1/helmreleases/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: []\n",
    );
    push(stack, seed, "spoke1: no releases");
    support::realstack::wait_until(
        "spoke 1's release uninstalled",
        WAIT,
        || match release_parts(&stack.spoke_apis[1], "spoke-config") {
            (false, false) => Ok(()),
            _ => Err(stack.controllers.tail(15)),
        },
    );
    assert!(!has_release(&stack.spoke_apis[1], "spoke-config"));
    assert!(
        stack
            .hub
            .api
            .try_kubectl(&["get", "helmrelease", "web", "-n", "spoke1"])
            .is_err()
    );
    stack.wait_ready_in("spoke0", "helmrelease", "web");
    stack.assert_deployed(0);
}
