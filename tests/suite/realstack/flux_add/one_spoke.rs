//! One spoke added: deployed on the spoke, and the two traps `check` warns about land where
//! it says.

use crate::support;

use std::path::Path;

use super::{ROOT, forget, has_release, push, release, write};
use support::git::git;
use support::realstack::flux_controllers as flux;
use support::realstack::real_flux::RealFlux;

/// The seed's layout without spoke 1's Flux objects, with its manifests under spokes/.
fn spoke1_to_add(seed: &Path) {
    std::fs::remove_file(seed.join("fluxcd/spoke1.yaml")).unwrap();
    std::fs::remove_dir_all(seed.join("apps/spoke1")).unwrap();
    write(seed, "fluxcd/kustomization.yaml", ROOT);
    write(
        seed,
        "spokes/spoke1/apps/configmap.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: spoke-app\n  namespace: default\n\
         data:\n  spoke: spoke1\n",
    );
    write(
        seed,
        "spokes/spoke1/helmreleases/release.yaml",
        &release("spoke1", "spoke-config"),
    );
}

/// spokekeeper.yaml without spoke 1, and with global `ssh:` settings that reach node 1
/// (an operator's defaults for a new node).
fn forget_spoke1(stack: &RealFlux) {
    forget(stack, 1);
}

#[test]
fn after_add_the_real_controllers_deploy_to_the_new_spoke_and_the_traps_land_where_check_says() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_with(2, false, "", spoke1_to_add);
    forget_spoke1(&stack);
    add_spoke1(&stack);

    deployed_on_spoke1_not_on_the_hub(&stack);

    push_the_traps(&stack);

    check_names_both_traps(&stack);

    // The real controllers agree: the first release is installed on the hub and not on
    // the spoke; the second is sent to the spoke, which has no HelmRelease kind, and is
    // installed nowhere.
    stack.wait_ready_in("spoke1", "helmrelease", "spoke1-on-hub");
    assert!(has_release(&stack.hub.api, "spoke-on-hub"));
    assert!(!has_release(&stack.spoke_apis[1], "spoke-on-hub"));
    let failed = stack.wait_for_in(
        "spoke1",
        "kustomization",
        "spoke1-on-spoke",
        "Ready=False",
        |r| r.status == "False" && r.message.contains("HelmRelease"),
    );
    assert!(failed.message.contains("no matches for kind"), "{failed:?}");
    assert!(
        flux::condition_in(
            &stack.hub,
            "spoke1",
            "helmrelease",
            "spoke1-on-spoke",
            "Ready"
        )
        .is_none()
    );
    assert!(!has_release(&stack.spoke_apis[1], "spoke-on-spoke"));
    assert!(!has_release(&stack.hub.api, "spoke-on-spoke"));
    stack.assert_deployed(1);
}

/// `spokekeeper add spoke1`: it says where the credential goes and lists spoke 1's files
/// in the root kustomization.yaml.
fn add_spoke1(stack: &RealFlux) {
    let (code, out, err) = stack.fleet.add(1, &["--source", "fleet"]);
    assert_eq!(code, 0, "{out}\n{err}\n{}", stack.controllers.tail(30));
    // No spoke's SealedSecret is on the hub yet: ROOT is the credential's directory.
    assert!(
        err.contains("no Kustomization on the hub applies a configured spoke's credential: ROOT is the credential's directory ./fluxcd"),
        "{err}"
    );
    let listed = git(
        &stack.fleet.remote,
        &["show", "main:fluxcd/kustomization.yaml"],
    );
    assert_eq!(
        listed,
        format!("{ROOT}  - spoke1-kubeconfig-sealed.yaml\n  - spoke1.yaml\n")
    );
}

/// The real controllers: the ConfigMap applied on spoke 1 by kustomize-controller, the
/// release installed there by helm-controller through the patched spec.kubeConfig.
/// In spoke 1's own namespace, reading the GitRepository in flux-system.
fn deployed_on_spoke1_not_on_the_hub(stack: &RealFlux) {
    stack.wait_ready_in("spoke1", "kustomization", "spoke1");
    stack.wait_ready_in("spoke1", "kustomization", "spoke1-helmreleases");
    stack.wait_ready_in("spoke1", "helmrelease", "spoke1");
    let hr = stack
        .hub
        .api
        .get_json(&["helmrelease", "spoke1", "-n", "spoke1"]);
    assert_eq!(
        hr["spec"]["kubeConfig"]["secretRef"]["name"], "spoke1-kubeconfig",
        "{hr:#}"
    );
    stack.assert_deployed(1);
    // Not on the hub.
    assert!(!has_release(&stack.hub.api, "spoke-config"));
    assert!(
        stack
            .hub
            .api
            .try_kubectl(&["get", "configmap", "spoke-app", "-n", "default"])
            .is_err()
    );
}

/// The traps, pushed by hand: a hub-side Kustomization copied without the patch
/// (its HelmRelease has no spec.kubeConfig), and a HelmRelease put beside the
/// spoke's plain manifests under a Kustomization that targets the spoke.
fn push_the_traps(stack: &RealFlux) {
    let seed = stack.fleet.dir.path().join("seed");
    git(&seed, &["pull", "--quiet", "--rebase", "origin", "main"]);
    let kustomization = |name: &str, path: &str, tail: &str| {
        format!(
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  \
             name: {name}\n  namespace: spoke1\nspec:\n  interval: 10m\n  retryInterval: 5s\n  \
             timeout: 30s\n  path: ./{path}\n  prune: true\n  targetNamespace: spoke1\n  \
             sourceRef:\n    kind: GitRepository\n    name: fleet\n    namespace: {}\n{tail}",
            flux::NS
        )
    };
    write(
        &seed,
        "fluxcd/spoke1-traps.yaml",
        &format!(
            "{}---\n{}",
            kustomization("spoke1-on-hub", "spokes/spoke1/charts", ""),
            kustomization(
                "spoke1-on-spoke",
                "spokes/spoke1/more-apps",
                "  kubeConfig:\n    secretRef:\n      name: spoke1-kubeconfig\n      key: value\n"
            )
        ),
    );
    write(
        &seed,
        "spokes/spoke1/charts/release.yaml",
        &release("spoke1-on-hub", "spoke-on-hub"),
    );
    write(
        &seed,
        "spokes/spoke1/more-apps/release.yaml",
        &release("spoke1-on-spoke", "spoke-on-spoke"),
    );
    let root = std::fs::read_to_string(seed.join("fluxcd/kustomization.yaml")).unwrap();
    write(
        &seed,
        "fluxcd/kustomization.yaml",
        &format!("{root}  - spoke1-traps.yaml\n"),
    );
    push(stack, &seed, "spoke1: two HelmReleases, laid out by hand");
}

/// check names both, for spoke 1.
fn check_names_both_traps(stack: &RealFlux) {
    let (code, out, err) = stack.fleet.run(&["check", "spoke1", "-o", "json"]);
    let report: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    assert_eq!(code, 1, "warning: {report:#}\n{err}");
    let warned: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["cert"] == "flux")
        .map(|f| {
            assert_eq!(
                (&f["spoke"], &f["severity"]),
                (&"spoke1".into(), &"warning".into())
            );
            f["detail"].as_str().unwrap()
        })
        .collect();
    assert_eq!(warned.len(), 2, "{report:#}");
    let on_hub = warned
        .iter()
        .find(|d| d.contains("HelmRelease spoke1/spoke1-on-hub"))
        .unwrap_or_else(|| panic!("{warned:?}"));
    assert!(
        on_hub.contains("helm-controller installs it on the hub, not on spoke spoke1"),
        "{on_hub}"
    );
    let on_spoke = warned
        .iter()
        .find(|d| d.contains("HelmRelease spoke1/spoke1-on-spoke"))
        .unwrap_or_else(|| panic!("{warned:?}"));
    assert!(
        on_spoke.contains("applied on the spoke, where no helm-controller runs"),
        "{on_spoke}"
    );
}
