//! check's layout traps where a spoke is federated: a `configMapRef` consumer is judged
//! as a `secretRef` one is (confine.rs, traps.rs, onboard.rs), in each shape a consumer
//! takes: a Kustomization's own spec.kubeConfig, a HelmRelease patch (strategic merge or
//! JSON 6902), a HelmRelease's own spec.kubeConfig.

use std::path::Path;

use super::confine::tests::details;
use crate::config::SpokeConfig;

/// Spokes edge and dev, with these hub namespaces and credential modes.
fn spokes(edge: (&str, &str), dev: (&str, &str)) -> Vec<SpokeConfig> {
    let text = format!(
        "repo: {{path: f}}\nsealing: {{cert: c.pem}}\nhub: {{}}\ncredential: {{federated: {{issuer: \"https://hub.example:6443\"}}}}\nspokes:\n  - {{name: edge, address: 10.0.0.1, secret: {{namespace: {}}}, credential: {{mode: {}}}}}\n  - {{name: dev, address: 10.0.0.2, secret: {{namespace: {}}}, credential: {{mode: {}}}}}\n",
        edge.0, edge.1, dev.0, dev.1
    );
    crate::config::Config::parse(&text, "spokekeeper.yaml", Path::new("/x"))
        .unwrap()
        .spokes
}

/// A hub-side Kustomization in `ns` applying `spokes/edge/helmreleases` as its own
/// account, with `patch` (a block scalar's lines, indented 8) on HelmReleases.
fn hub_side(ns: &str, patch: &str) -> String {
    format!(
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: edge-helmreleases\n  namespace: {ns}\nspec:\n  path: ./spokes/edge/helmreleases\n  serviceAccountName: edge-helmreleases\n  sourceRef: {{kind: GitRepository, name: flux-system, namespace: flux-system}}\n  patches:\n    - target: {{kind: HelmRelease}}\n      patch: |\n{patch}"
    )
}

/// JSON 6902 and strategic merge patches setting spec.kubeConfig to `reference`
/// (e.g. `configMapRef: {name: dev-kubeconfig}`).
fn patches(reference: &str) -> [String; 2] {
    [
        format!(
            "        - op: add\n          path: /spec/kubeConfig\n          value: {{{reference}}}\n"
        ),
        format!(
            "        apiVersion: helm.toolkit.fluxcd.io/v2\n        kind: HelmRelease\n        metadata: {{name: any}}\n        spec:\n          kubeConfig: {{{reference}}}\n"
        ),
    ]
}

const RELEASE: &str = "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: web\nspec:\n  chart: {spec: {chart: web}}\n  targetNamespace: web\n  storageNamespace: web\n";
const CONFIGMAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: edge-kubeconfig\n  namespace: edge\ndata: {provider: generic}\n";

fn texts(found: &[(String, String)]) -> Vec<&str> {
    found.iter().map(|(_, d)| d.as_str()).collect()
}

#[test]
fn adds_federated_layout_has_no_trap_beside_a_sealed_spoke() {
    let s = spokes(("edge", "federated"), ("dev", "minted"));
    let edge = super::layout::tests::for_tests(&s[0]);
    let dev = super::layout::tests::for_tests(&s[1]);
    let found = details(
        &[
            ("clusters/hub/edge.yaml", &edge),
            ("clusters/hub/dev.yaml", &dev),
            ("fluxcd/edge-kubeconfig.yaml", CONFIGMAP),
            ("fluxcd/dev-kubeconfig-sealed.yaml", "kind: SealedSecret\n"),
            ("spokes/edge/helmreleases/web.yaml", RELEASE),
            ("spokes/dev/helmreleases/web.yaml", RELEASE),
        ],
        &s,
    );
    assert_eq!(found, []);
}

#[test]
fn adds_layout_of_a_spoke_with_its_own_hub_account_holds_the_account_and_has_no_trap() {
    let text = "repo: {path: f}\nsealing: {cert: c.pem}\nhub: {}\ncredential: {federated: {issuer: \"https://hub.example:6443\", service_account_name: \"{spoke}-flux\"}}\nspokes:\n  - {name: edge, address: 10.0.0.1, secret: {namespace: edge}, credential: {mode: federated}}\n";
    let s = crate::config::Config::parse(text, "spokekeeper.yaml", Path::new("/x"))
        .unwrap()
        .spokes;
    let edge = super::layout::tests::for_tests(&s[0]);
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&edge).unwrap();
    // After the Namespace, the spoke's own account in it.
    assert_eq!(docs[1]["kind"], "ServiceAccount", "{edge}");
    assert_eq!(
        docs[1]["metadata"],
        serde_json::json!({"name": "edge-flux", "namespace": "edge"})
    );
    let found = details(
        &[
            ("clusters/hub/edge.yaml", &edge),
            ("fluxcd/edge-kubeconfig.yaml", CONFIGMAP),
            ("spokes/edge/helmreleases/web.yaml", RELEASE),
        ],
        &s,
    );
    assert_eq!(found, []);
}

#[test]
fn a_patch_naming_another_spokes_configmap_in_a_shared_namespace_is_caught_in_either_shape() {
    // dev is federated; edge's Secret and dev's ConfigMap share flux-system.
    let s = spokes(("flux-system", "minted"), ("flux-system", "federated"));
    for patch in patches("configMapRef: {name: dev-kubeconfig}") {
        let k = hub_side("flux-system", &patch);
        let found = details(
            &[
                ("clusters/hub/edge.yaml", &k),
                ("spokes/edge/helmreleases/web.yaml", RELEASE),
            ],
            &s,
        );
        let d = texts(&found);
        assert_eq!(d.len(), 1, "{patch}: {d:#?}");
        assert_eq!(found[0].0, "dev");
        assert!(
            d[0].starts_with("Kustomization flux-system/edge-helmreleases (clusters/hub/edge.yaml) applies spoke dev's HelmReleases on the hub in namespace flux-system, which holds spoke edge's Secret edge-kubeconfig: a HelmRelease there can read it through valuesFrom"),
            "{}",
            d[0]
        );
    }
    // The other way round: a Secret patch beside a federated spoke's ConfigMap.
    for patch in patches("secretRef: {name: edge-kubeconfig, key: value}") {
        let k = hub_side("flux-system", &patch);
        let found = details(&[("clusters/hub/edge.yaml", &k)], &s);
        let d = texts(&found);
        assert_eq!(d.len(), 1, "{patch}: {d:#?}");
        assert!(
            d[0].contains("which holds spoke dev's ConfigMap dev-kubeconfig: a ConfigMap written there replaces it"),
            "{}",
            d[0]
        );
    }
}

#[test]
fn a_configmap_under_a_federated_spokes_hub_side_path_is_named_and_one_over_its_credential_too() {
    let s = spokes(("edge", "federated"), ("dev", "minted"));
    let values = CONFIGMAP.replace("edge-kubeconfig", "web-values");
    for patch in patches("configMapRef: {name: edge-kubeconfig}") {
        let k = hub_side("edge", &patch);
        let found = details(
            &[
                ("clusters/hub/edge.yaml", &k),
                ("spokes/edge/helmreleases/values.yaml", &values),
                ("spokes/edge/helmreleases/over.yaml", CONFIGMAP),
            ],
            &s,
        );
        let d = texts(&found);
        assert_eq!(d.len(), 3, "{d:#?}");
        assert!(found.iter().all(|(spoke, _)| spoke == "edge"), "{found:?}");
        assert!(
            d[0].starts_with("ConfigMap edge/edge-kubeconfig (spokes/edge/helmreleases/over.yaml), applied on the hub by Kustomization edge/edge-helmreleases (clusters/hub/edge.yaml), is spoke edge's kubeConfig ConfigMap, which spokekeeper commits in fluxcd/edge-kubeconfig.yaml")
                && d[0].contains("remove it"),
            "{}",
            d[0]
        );
        for (at, file) in [(1, "over.yaml"), (2, "values.yaml")] {
            assert!(
                d[at].contains(&format!(
                    "(spokes/edge/helmreleases/{file}) is applied on the hub"
                )) && d[at].contains("holds only HelmRelease, HelmRepository, OCIRepository;"),
                "{}",
                d[at]
            );
        }
    }
}

#[test]
fn a_release_or_kustomization_naming_a_configmap_is_judged_as_one_naming_a_secret() {
    let s = spokes(("edge", "federated"), ("dev", "minted"));
    // A HelmRelease of its own, without targetNamespace: sent to edge, placed on the hub's name.
    let own = "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: web, namespace: edge}\nspec:\n  kubeConfig: {configMapRef: {name: edge-kubeconfig}}\n";
    let infra = "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: infra\n  namespace: flux-system\nspec:\n  path: ./infra\n";
    let found = details(
        &[("clusters/hub/infra.yaml", infra), ("infra/web.yaml", own)],
        &s,
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "edge");
    assert!(
        found[0]
            .1
            .starts_with("HelmRelease edge/web (infra/web.yaml) has no spec.targetNamespace"),
        "{}",
        found[0].1
    );
    // A HelmRelease under a Kustomization that targets the spoke lands on the spoke.
    let apps = "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: edge\n  namespace: edge\nspec:\n  path: ./spokes/edge/apps\n  kubeConfig:\n    configMapRef:\n      name: edge-kubeconfig\n";
    let found = details(
        &[
            ("clusters/hub/edge.yaml", apps),
            ("spokes/edge/apps/web.yaml", RELEASE),
        ],
        &s,
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].1.starts_with("HelmRelease edge/web (spokes/edge/apps/web.yaml) is applied by Kustomization edge/edge (clusters/hub/edge.yaml), which targets spoke edge"),
        "{}",
        found[0].1
    );
}

#[test]
fn a_federated_spokes_configmap_nothing_reads_and_its_consumers_left_on_secret_ref_are_named() {
    let s = spokes(("edge", "federated"), ("dev", "minted"));
    let dev = super::layout::tests::for_tests(&s[1]);
    // edge's objects as add wrote them before it was federated: secretRef, with a key.
    let sealed_edge =
        super::layout::tests::for_tests(&spokes(("edge", "minted"), ("dev", "minted"))[0]);
    let release = "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: ingress, namespace: edge}\nspec:\n  kubeConfig: {secretRef: {name: edge-kubeconfig, key: value}}\n  targetNamespace: web\n  storageNamespace: web\n";
    let found = details(
        &[
            ("clusters/hub/dev.yaml", &dev),
            ("clusters/hub/edge.yaml", &sealed_edge),
            ("fluxcd/dev-kubeconfig-sealed.yaml", "kind: SealedSecret\n"),
            ("fluxcd/edge-kubeconfig.yaml", CONFIGMAP),
            ("spokes/edge/release.yaml", release),
        ],
        &s,
    );
    let d = texts(&found);
    assert!(found.iter().all(|(spoke, _)| spoke == "edge"), "{found:?}");
    assert_eq!(d.len(), 4, "{d:#?}");
    assert!(
        d[0].starts_with("onboarded with its credential alone: fluxcd/edge-kubeconfig.yaml is committed, but no Flux object in the fleet repo reads ConfigMap edge/edge-kubeconfig (spec.kubeConfig.configMapRef)"),
        "{}",
        d[0]
    );
    let fix = "with spec.kubeConfig.secretRef, but its credential.mode is federated: set spec.kubeConfig to configMapRef: {name: edge-kubeconfig} (no key;";
    for (at, consumer) in [
        (1, "Kustomization edge/edge (clusters/hub/edge.yaml)"),
        (
            2,
            "Kustomization edge/edge-helmreleases (clusters/hub/edge.yaml)",
        ),
        (3, "HelmRelease edge/ingress (spokes/edge/release.yaml)"),
    ] {
        assert!(
            d[at].starts_with(&format!("{consumer} reads spoke edge's credential {fix}")),
            "{}",
            d[at]
        );
    }
    // Migrated: nothing to say.
    let edge = super::layout::tests::for_tests(&s[0]);
    let found = details(
        &[
            ("clusters/hub/dev.yaml", &dev),
            ("clusters/hub/edge.yaml", &edge),
            ("fluxcd/dev-kubeconfig-sealed.yaml", "kind: SealedSecret\n"),
            ("fluxcd/edge-kubeconfig.yaml", CONFIGMAP),
        ],
        &s,
    );
    assert_eq!(found, []);
}

/// A Flux Kustomization applying `fluxcd/` on the hub, with `patches` (YAML, indented 2).
fn credentials(patches: &str) -> String {
    format!(
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: credentials\n  namespace: flux-system\nspec:\n  path: ./fluxcd\n  sourceRef: {{kind: GitRepository, name: flux-system}}\n{patches}"
    )
}

#[test]
fn a_kustomization_yaml_that_can_change_a_federated_spokes_configmap_is_named_with_its_fields() {
    let s = spokes(("edge", "federated"), ("dev", "minted"));
    let cases = [
        (
            "fluxcd/kustomization.yaml",
            "resources: [edge-kubeconfig.yaml]\npatches:\n  - target: {kind: ConfigMap, name: edge-kubeconfig}\n    patch: '[{\"op\": \"replace\", \"path\": \"/data/address\", \"value\": \"https://x\"}]'\n",
            "passes through fluxcd/kustomization.yaml, whose patches can change it",
        ),
        (
            "fluxcd/kustomization.yaml",
            "resources: [edge-kubeconfig.yaml]\nconfigMapGenerator:\n  - name: edge-kubeconfig\n    namespace: edge\n    behavior: merge\n    literals: [address=https://x]\nnameSuffix: -x\n",
            "whose configMapGenerator, nameSuffix can change it",
        ),
    ];
    for (file, text, needle) in cases {
        let found = details(
            &[
                ("clusters/hub/credentials.yaml", &credentials("")),
                ("fluxcd/edge-kubeconfig.yaml", CONFIGMAP),
                (file, text),
            ],
            &s,
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "edge");
        assert!(found[0].1.contains(needle), "{needle:?} not in {found:?}");
        assert!(
            found[0].1.contains("spoke edge's kubeConfig ConfigMap (fluxcd/edge-kubeconfig.yaml), applied on the hub by Kustomization flux-system/credentials (clusters/hub/credentials.yaml)"),
            "{found:?}"
        );
    }
}

#[test]
fn flux_patches_that_can_reach_a_federated_spokes_configmap_are_named_and_others_are_not() {
    let s = spokes(("edge", "federated"), ("dev", "minted"));
    let reach = [
        "  patches:\n    - target: {kind: ConfigMap}\n      patch: '[]'\n",
        "  patches:\n    - target: {name: edge-kubeconfig}\n      patch: '[]'\n",
        "  patches:\n    - patch: |\n        apiVersion: v1\n        kind: ConfigMap\n        metadata: {name: edge-kubeconfig, namespace: edge}\n        data: {address: https://x}\n",
    ];
    for patches in reach {
        let found = details(
            &[
                ("clusters/hub/credentials.yaml", &credentials(patches)),
                ("fluxcd/edge-kubeconfig.yaml", CONFIGMAP),
            ],
            &s,
        );
        assert_eq!(found.len(), 1, "{patches}: {found:?}");
        assert!(
            found[0].1.contains("passes through its spec.patches"),
            "{found:?}"
        );
    }
    // Patches for other kinds, a kustomization.yaml that does not apply the ConfigMap
    // (flux bootstrap's own), and a sealed spoke's Secret passing through patches.
    let found = details(
        &[
            (
                "clusters/hub/credentials.yaml",
                &credentials("  patches:\n    - target: {kind: Deployment}\n      patch: '[]'\n"),
            ),
            ("fluxcd/edge-kubeconfig.yaml", CONFIGMAP),
            (
                "fluxcd/kustomization.yaml",
                "resources: [edge-kubeconfig.yaml, dev-kubeconfig-sealed.yaml, other]\n",
            ),
            ("fluxcd/dev-kubeconfig-sealed.yaml", "kind: SealedSecret\n"),
            (
                "fluxcd/other/kustomization.yaml",
                "resources: [dev-kubeconfig-sealed.yaml]\npatches: [{path: p.yaml}]\n",
            ),
            (
                "fluxcd/other/dev-kubeconfig-sealed.yaml",
                "kind: SealedSecret\n",
            ),
        ],
        &s,
    );
    assert_eq!(found, []);
}

#[test]
fn the_consumers_that_keep_a_federated_spokes_old_secret_are_each_named() {
    let s = spokes(("edge", "federated"), ("dev", "minted"));
    let dev = super::layout::tests::for_tests(&s[1]);
    let sealed_edge =
        super::layout::tests::for_tests(&spokes(("edge", "minted"), ("dev", "minted"))[0]);
    let release = "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: ingress, namespace: edge}\nspec:\n  kubeConfig: {secretRef: {name: edge-kubeconfig}}\n";
    let tree = |edge: &str, release: Option<&str>| {
        let mut files = vec![
            ("clusters/hub/dev.yaml", dev.as_str()),
            ("clusters/hub/edge.yaml", edge),
        ];
        files.extend(release.map(|r| ("spokes/edge/release.yaml", r)));
        super::traps::tests::tree(&files)
    };
    assert_eq!(
        super::on_secret_ref(&tree(&sealed_edge, Some(release)), &s[0]),
        [
            "Kustomization edge/edge (clusters/hub/edge.yaml)",
            "Kustomization edge/edge-helmreleases (clusters/hub/edge.yaml)",
            "HelmRelease edge/ingress (spokes/edge/release.yaml)",
        ]
    );
    // Moved to configMapRef, one release left behind, then none.
    let edge = super::layout::tests::for_tests(&s[0]);
    assert_eq!(
        super::on_secret_ref(&tree(&edge, Some(release)), &s[0]),
        ["HelmRelease edge/ingress (spokes/edge/release.yaml)"]
    );
    assert!(super::on_secret_ref(&tree(&edge, None), &s[0]).is_empty());
    // In another namespace the same name is another spoke's Secret.
    let elsewhere = release.replace("namespace: edge", "namespace: dev");
    assert!(super::on_secret_ref(&tree(&edge, Some(&elsewhere)), &s[0]).is_empty());
}
