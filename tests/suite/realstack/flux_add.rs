//! `spokekeeper add` and `check`'s HelmRelease traps, judged by Flux's real controllers
//! (the real-Flux lab of flux_real.rs): after one `add`, kustomize-controller applies the
//! new spoke's ConfigMap on the spoke and helm-controller installs its release there, not
//! on the hub; then the two layouts `check` warns about put their releases where `check`
//! says they go. Two spokes added side by side, each in its own hub namespace, keep
//! same-named releases apart, and a writer of one spoke's hub-side directory can reach
//! neither the hub nor the other spoke (issue 40, items 0, 1 and 3).

use crate::support;

use std::path::Path;

use support::git::{commit, git};
use support::realstack::flux_controllers as flux;

use support::realstack::real_flux::{RealFlux, WAIT};

/// The hub's root lists what it applies (kustomization.yaml), so `add` must list the new
/// spoke's files there; spoke 1 has manifests waiting in the layout `add` writes
/// Kustomizations for, and no Flux objects yet.
const ROOT: &str = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
    # The hub's root: each spoke's Flux objects and sealed credential.\nresources:\n  - spoke0.yaml\n";

/// A HelmRelease of the fleet's chart (its GitRepository in flux-system), named `name`,
/// with no spec.kubeConfig, for spoke 1.
fn release(name: &str, release_name: &str) -> String {
    release_for(name, release_name, 1)
}

/// [`release`] for spoke `i`: its chart's ConfigMap says `spoke{i}`.
fn release_for(name: &str, release_name: &str, i: usize) -> String {
    format!(
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: {name}\n\
         spec:\n  interval: 10m\n  timeout: 30s\n  releaseName: {release_name}\n  \
         targetNamespace: default\n  storageNamespace: default\n  chart:\n    spec:\n      \
         chart: ./charts/spoke-config\n      sourceRef:\n        kind: GitRepository\n        \
         name: fleet\n        namespace: {}\n  values:\n    spoke: spoke{i}\n",
        flux::NS
    )
}

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

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

/// spokekeeper.yaml without spoke `i`'s entry, and with global `ssh:` settings (the last
/// key, in place of any written before) that reach node `i`.
fn forget(stack: &RealFlux, i: usize) {
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    let text = match text.find("\nssh:\n") {
        Some(at) => text[..=at].to_string(),
        None => text,
    };
    let start = text
        .find(&format!("  - name: spoke{i}\n"))
        .expect("the spoke's entry");
    let rest = &text[start..];
    let end = start
        + 1
        + ["\n  - name: ", "\nhub:\n"]
            .iter()
            .filter_map(|m| rest.find(m))
            .min()
            .expect("hub: after the spokes");
    let n = &stack.fleet.nodes[i];
    let text = format!(
        "{}{}ssh:\n  port: {}\n  identity: \"{}\"\n  known_hosts: \"{}\"\n  connect_timeout: 5s\n",
        &text[..start],
        &text[end..],
        n.ssh_port,
        n.identity_path.display(),
        n.known_hosts_path.display()
    );
    std::fs::write(&stack.fleet.config, text).unwrap();
}

/// `add spoke{i}` for node `i`, reading the GitRepository `source`; must succeed. Its
/// stderr.
fn add(stack: &RealFlux, i: usize, source: &str) -> String {
    let n = &stack.fleet.nodes[i];
    let address = n.address_string();
    let name = format!("spoke{i}");
    let (code, out, err) = stack.fleet.run(&[
        "add",
        &name,
        "--address",
        &address,
        "--distro",
        "k3s",
        "--kubeconfig-path",
        n.kubeconfig_path_str(),
        "--source",
        source,
    ]);
    assert_eq!(code, 0, "{out}\n{err}\n{}", stack.controllers.tail(30));
    err
}

/// Pushes the seed's work tree as it is, and brings the fleet's clone up to it.
fn push(stack: &RealFlux, seed: &Path, message: &str) {
    git(seed, &["add", "-A"]);
    commit(seed, message);
    git(seed, &["push", "--quiet", "origin", "HEAD:main"]);
    git(
        &stack.fleet.clone,
        &["pull", "--quiet", "--ff-only", "origin", "main"],
    );
}

/// Whether `api` holds the Helm release `name` (its storage Secret, deployed) and the
/// chart's ConfigMap of that name.
fn has_release(api: &support::realstack::kube::KubeApi, name: &str) -> bool {
    let selector = format!("owner=helm,name={name},status=deployed");
    let secrets = api.get_json(&["secrets", "-n", "default", "-l", &selector]);
    let stored = secrets["items"].as_array().is_some_and(|i| !i.is_empty());
    let configmap = api
        .try_kubectl(&["get", "configmap", name, "-n", "default"])
        .is_ok();
    assert_eq!(stored, configmap, "{name}: {secrets:#}");
    stored
}

#[test]
fn after_add_the_real_controllers_deploy_to_the_new_spoke_and_the_traps_land_where_check_says() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_with(2, false, "", spoke1_to_add);
    forget_spoke1(&stack);
    let n1 = &stack.fleet.nodes[1];
    let address = n1.address_string();
    let (code, out, err) = stack.fleet.run(&[
        "add",
        "spoke1",
        "--address",
        &address,
        "--distro",
        "k3s",
        "--kubeconfig-path",
        n1.kubeconfig_path_str(),
        "--source",
        "fleet",
    ]);
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

    // The real controllers: the ConfigMap applied on spoke 1 by kustomize-controller, the
    // release installed there by helm-controller through the patched spec.kubeConfig.
    // In spoke 1's own namespace, reading the GitRepository in flux-system.
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

    // The traps, pushed by hand: a hub-side Kustomization copied without the patch
    // (its HelmRelease has no spec.kubeConfig), and a HelmRelease put beside the
    // spoke's plain manifests under a Kustomization that targets the spoke.
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
    push(&stack, &seed, "spoke1: two HelmReleases, laid out by hand");

    // check names both, for spoke 1.
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
    // Spoke 1 by a bare name (its GitRepository in flux-system), spoke 0 by
    // NAMESPACE/NAME: each in its own hub namespace, which is not the source's.
    forget(&stack, 1);
    add(&stack, 1, "fleet");
    forget(&stack, 0);
    let err = add(&stack, 0, "flux-system/fleet");
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

    // The writer of spoke 1's hub-side directory tries to reach spoke 0 and the hub.
    let seed = stack.fleet.dir.path().join("seed");
    git(&seed, &["pull", "--quiet", "--rebase", "origin", "main"]);
    write(&seed, "spokes/spoke1/helmreleases/escape.yaml", ESCAPE);
    write(
        &seed,
        "spokes/spoke1/stolen/configmap.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stolen\n  namespace: default\n",
    );
    push(&stack, &seed, "spoke1: reach spoke0 and the hub");
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

    // A HelmRelease rendering spoke 0's Secret into spoke 1 through valuesFrom: its
    // namespace is spoke 1's, which holds no other spoke's Secret.
    std::fs::remove_file(seed.join("spokes/spoke1/helmreleases/escape.yaml")).unwrap();
    write(
        &seed,
        "spokes/spoke1/helmreleases/leak.yaml",
        &release_for("leak", "leak", 1).replace(
            "  values:\n",
            "  valuesFrom:\n    - kind: Secret\n      name: spoke0-kubeconfig\n      \
             valuesKey: value\n      targetPath: spoke\n  values:\n",
        ),
    );
    // Beside it, on spoke 0, a release without targetNamespace and storageNamespace.
    write(
        &seed,
        "spokes/spoke0/helmreleases/bare.yaml",
        &release_for("bare", "bare", 0).replace(
            "  targetNamespace: default\n  storageNamespace: default\n",
            "",
        ),
    );
    push(
        &stack,
        &seed,
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

    // Spoke 1's releases removed from its directory: only its release is uninstalled.
    for f in ["web.yaml", "leak.yaml"] {
        std::fs::remove_file(seed.join("spokes/spoke1/helmreleases").join(f)).unwrap();
    }
    write(
        &seed,
        "spokes/spoke1/helmreleases/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: []\n",
    );
    push(&stack, &seed, "spoke1: no releases");
    support::realstack::wait_until("spoke 1's release uninstalled", WAIT, || match has_release(
        &stack.spoke_apis[1],
        "spoke-config",
    ) {
        false => Ok(()),
        true => Err(stack.controllers.tail(15)),
    });
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
