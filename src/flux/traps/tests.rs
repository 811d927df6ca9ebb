use super::*;

fn spokes() -> Vec<SpokeConfig> {
    let text = "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - {name: edge, address: 10.0.0.1}\n  - {name: dev, address: 10.0.0.2}\n";
    crate::config::Config::parse(text, "spokekeeper.yaml", Path::new("/x"))
        .unwrap()
        .spokes
}

pub(in super::super) fn tree(files: &[(&str, &str)]) -> Tree {
    Tree {
        files: files
            .iter()
            .map(|(f, t)| (f.to_string(), summarize(f, t)))
            .collect(),
        unread: 0,
    }
}

fn kustomization(name: &str, path: &str, tail: &str) -> String {
    format!(
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: {name}\n  namespace: flux-system\nspec:\n  path: {path}\n  sourceRef: {{kind: GitRepository, name: flux-system}}\n{tail}"
    )
}

const TO_EDGE: &str = "  kubeConfig:\n    secretRef:\n      name: edge-kubeconfig\n";
const HR: &str = "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: web\n  namespace: flux-system\nspec:\n  chart: {spec: {chart: web}}\n  targetNamespace: web\n  storageNamespace: web\n";
const HR_TO_EDGE: &str = "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: web\nspec:\n  kubeConfig: {secretRef: {name: edge-kubeconfig}}\n  targetNamespace: web\n  storageNamespace: web\n";
const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n";

fn details(files: &[(&str, &str)]) -> Vec<(String, String)> {
    traps(&tree(files), &spokes())
        .into_iter()
        .map(|t| (t.spoke, t.detail))
        .collect()
}

#[test]
fn a_helm_release_a_spoke_targeting_kustomization_applies_lands_on_the_spoke() {
    let k = kustomization("edge", "./spokes/edge/apps", TO_EDGE);
    let found = details(&[
        ("clusters/hub/edge.yaml", &k),
        ("spokes/edge/apps/cm.yaml", CM),
        ("spokes/edge/apps/web.yaml", HR_TO_EDGE),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "edge");
    assert!(
        found[0].1.starts_with("HelmRelease flux-system/web (spokes/edge/apps/web.yaml) is applied by Kustomization flux-system/edge (clusters/hub/edge.yaml), which targets spoke edge"),
        "{}",
        found[0].1
    );
    assert!(
        found[0].1.contains("no helm-controller runs"),
        "{}",
        found[0].1
    );
}

#[test]
fn a_helm_release_without_kubeconfig_under_a_spokes_path_lands_on_the_hub() {
    let k = kustomization("edge-charts", "./spokes/edge/charts", "");
    let found = details(&[
        ("clusters/hub/edge-charts.yaml", &k),
        ("spokes/edge/charts/web.yaml", HR),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "edge");
    assert!(
        found[0].1.contains("has no spec.kubeConfig and Kustomization flux-system/edge-charts (clusters/hub/edge-charts.yaml) applies it on the hub")
            && found[0].1.contains("spec.kubeConfig.secretRef to edge-kubeconfig"),
        "{}",
        found[0].1
    );
    // With spec.kubeConfig, or through add's patching Kustomization, it is fine.
    assert_eq!(
        details(&[
            ("clusters/hub/edge-charts.yaml", &k),
            ("spokes/edge/charts/web.yaml", HR_TO_EDGE),
        ]),
        []
    );
    // add's layout puts each spoke in its own namespace.
    let mut own = spokes();
    own[0].secret.namespace = "edge".into();
    own[1].secret.namespace = "dev".into();
    let layout = super::super::layout::tests::for_tests(&own[0]);
    let files = tree(&[
        ("clusters/hub/edge.yaml", &layout),
        ("spokes/edge/helmreleases/web.yaml", HR),
        ("spokes/edge/apps/cm.yaml", CM),
    ]);
    assert_eq!(traps(&files, &own), []);
    // Not under a spoke's path: a hub release, none of check's business.
    assert_eq!(
        details(&[
            (
                "clusters/hub/infra.yaml",
                &kustomization("infra", "./infra", "")
            ),
            ("infra/web.yaml", HR),
        ]),
        []
    );
}

#[test]
fn multi_document_files_and_kustomization_chains_are_followed() {
    // The Kustomization and the release in one file; the spoke path's
    // kustomization.yaml lists a directory whose kustomization.yaml lists the file.
    let k = kustomization("edge", "./spokes/edge", TO_EDGE);
    let found = details(&[
        ("clusters/hub/edge.yaml", &format!("{CM}---\n{k}")),
        (
            "spokes/edge/kustomization.yaml",
            "resources:\n  - ./base\n  - cm.yaml\n",
        ),
        ("spokes/edge/cm.yaml", CM),
        (
            "spokes/edge/base/kustomization.yaml",
            "resources: [../../edge/base/releases.yaml]\n",
        ),
        ("spokes/edge/base/releases.yaml", &format!("{CM}---\n{HR}")),
        // Not listed by the chain: not applied.
        ("spokes/edge/unlisted.yaml", HR),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].1.contains(
            "(spokes/edge/base/releases.yaml) is applied by Kustomization flux-system/edge"
        ),
        "{}",
        found[0].1
    );
    // Without kustomization.yaml every file below counts, and a subdirectory with its
    // own kustomization.yaml by its resources; a path leaving the repo counts nothing.
    let found = details(&[
        (
            "clusters/hub/edge.yaml",
            &kustomization("edge", "spokes/edge", TO_EDGE),
        ),
        ("spokes/edge/a/b/deep.yaml", HR),
        ("spokes/edge/c/kustomization.yaml", "resources: []\n"),
        ("spokes/edge/c/skipped.yaml", HR),
        (
            "clusters/hub/out.yaml",
            &kustomization("out", "../../etc", TO_EDGE),
        ),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].1.contains("(spokes/edge/a/b/deep.yaml)"),
        "{found:?}"
    );
}

#[test]
fn hostile_repo_text_gives_one_bounded_line_or_nothing() {
    let k = kustomization("edge", "./spokes/edge", TO_EDGE);
    let hr = HR.replace("name: web", &format!("name: \"w\\neb{}\"", "x".repeat(500)));
    let found = details(&[
        ("clusters/hub/edge.yaml", &k),
        ("spokes/edge/web.yaml", &hr),
        ("spokes/edge/bomb.yaml", "a: &a [*a]\n: [\n"),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(!found[0].1.contains('\n'), "{}", found[0].1);
    assert!(found[0].1.contains("flux-system/w eb"), "{}", found[0].1);
}

#[test]
fn the_tree_is_read_without_following_links_or_entering_git() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("spokes/edge")).unwrap();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::write(root.join("spokes/edge/web.yaml"), HR).unwrap();
    std::fs::write(root.join(".git/x.yaml"), HR).unwrap();
    std::fs::write(root.join("README.md"), "x").unwrap();
    std::os::unix::fs::symlink("/etc", root.join("spokes/link")).unwrap();
    std::os::unix::fs::symlink(root.join("spokes/edge/web.yaml"), root.join("l.yaml")).unwrap();
    let files: Vec<String> = read_tree(root).files.into_keys().collect();
    assert_eq!(files, ["spokes/edge/web.yaml"]);
}

#[test]
fn the_tree_is_read_within_a_total_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // One release under many paths (git stores the blob once: the push is small).
    std::fs::create_dir_all(root.join("spokes/edge")).unwrap();
    for i in 0..40 {
        std::fs::write(root.join(format!("spokes/edge/r{i:02}.yaml")), HR).unwrap();
    }
    let k = kustomization("edge-charts", "./spokes/edge", "");
    std::fs::write(root.join("a.yaml"), &k).unwrap();
    let budget = (k.len() + 10 * HR.len()) as u64;
    let tree = read_tree_within(root, budget);
    assert_eq!((tree.files.len(), tree.unread), (11, 30));
    // In name order: what was read first is what is checked.
    let read: Vec<&String> = tree.files.keys().collect();
    assert_eq!(read[0], "a.yaml");
    assert_eq!(read[10], "spokes/edge/r09.yaml");
    let found = traps(&tree, &spokes());
    assert_eq!(found.len(), 10, "one trap a file read: {found:?}");
    // A file bigger than what is left is not read; a smaller one after it still is.
    std::fs::write(root.join("b.yaml"), CM.repeat(100)).unwrap();
    let tree = read_tree_within(root, (k.len() + HR.len()) as u64);
    assert!(!tree.files.contains_key("b.yaml"));
    assert_eq!(
        tree.files.len(),
        2,
        "{:?}",
        tree.files.keys().collect::<Vec<_>>()
    );
    assert_eq!(tree.unread, 40);
}

#[test]
fn a_path_many_kustomizations_name_is_walked_once() {
    let mut files = vec![("spokes/edge/web.yaml".to_string(), HR.to_string())];
    for i in 0..50 {
        let path = ["./spokes/edge", "spokes/edge", "spokes/./edge/"][i % 3];
        files.push((
            format!("clusters/k{i:02}.yaml"),
            kustomization(&format!("k{i}"), path, ""),
        ));
    }
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_str()))
        .collect();
    let t = tree(&refs);
    let mut walks = Walks::default();
    for k in t.files.values().flat_map(|s| &s.kustomizations) {
        let applied = walks.applied(&t.files, k.path.as_deref().unwrap());
        assert!(applied.contains("spokes/edge/web.yaml"));
    }
    assert_eq!(walks.done.len(), 1);
    // Each Kustomization's trap is still found.
    assert_eq!(traps(&t, &spokes()).len(), 50);
}
