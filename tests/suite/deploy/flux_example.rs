//! deploy/flux: the Flux example, strictly typed, installing the chart with trust anchors from outside the fleet repo.

use super::*;

/// Every YAML file under deploy/ outside the chart, by path.
fn plain_yaml_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                // The chart and the promtool rule tests are not Kubernetes objects.
                if !p.ends_with("helm") && !p.ends_with("prometheus") {
                    walk(&p, out);
                }
            } else if matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join("deploy"), &mut out);
    out.sort();
    out
}

#[test]
fn flux_example_is_strictly_typed_and_installs_the_chart() {
    crate::support::requires!(HELM);
    let files = plain_yaml_files();
    assert!(files.len() >= 5, "{files:?}");
    let mut objects = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let origin = f.strip_prefix(root()).unwrap().display().to_string();
        for o in read_all(&documents(&text, &origin), &origin) {
            objects.push((f.clone(), o));
        }
    }
    // kustomization.yaml lists exactly the other files of its directory.
    for (file, o) in &objects {
        let Object::KustomizeFile(k) = o else {
            continue;
        };
        let dir = file.parent().unwrap();
        let listed: BTreeSet<PathBuf> = k.resources.iter().map(|r| dir.join(r)).collect();
        let present: BTreeSet<PathBuf> = files
            .iter()
            .filter(|f| f.parent() == Some(dir) && *f != file)
            .filter(|f| !f.ends_with("flux-kustomization.yaml"))
            .cloned()
            .collect();
        assert_eq!(listed, present, "{}", file.display());
    }
    let release = objects
        .iter()
        .find_map(|(_, o)| match o {
            Object::HelmRelease(h) => Some(h),
            _ => None,
        })
        .expect("a HelmRelease");
    let source = &release.spec.chart.spec.source_ref;
    assert_eq!(source.kind, "GitRepository");
    let repo = objects
        .iter()
        .find_map(|(_, o)| match o {
            Object::GitRepository(g) if g.metadata.name.as_deref() == Some(&source.name) => Some(g),
            _ => None,
        })
        .expect("the HelmRelease's GitRepository is in the example");
    assert_eq!(repo.metadata.namespace, source.namespace);
    assert_eq!(
        release.spec.chart.spec.chart.trim_start_matches("./"),
        CHART,
        "the HelmRelease builds this repository's chart"
    );
    // The release's namespace is created by the example, under the restricted Pod Security level.
    let ns = objects
        .iter()
        .find_map(|(_, o)| match o {
            Object::Namespace(n) if n.metadata.name == release.metadata.namespace => Some(n),
            _ => None,
        })
        .expect("the HelmRelease's namespace is in the example");
    let labels = ns.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "restricted");
    let ignore = repo.spec.ignore.as_deref().unwrap();
    assert!(
        ignore.contains(&format!("!/{CHART}/")),
        "the chart is not ignored"
    );
    let flux = objects
        .iter()
        .find_map(|(_, o)| match o {
            Object::FluxKustomization(k) => Some(k),
            _ => None,
        })
        .expect("a Flux Kustomization that applies the example");
    assert!(flux.spec.prune && flux.spec.source_ref.kind == "GitRepository");

    // Its values render through the real chart into objects as strict as the defaults.
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.json");
    std::fs::write(
        &values,
        serde_json::to_vec(release.spec.values.as_ref().unwrap()).unwrap(),
    )
    .unwrap();
    let rendered = read_all(&render(&[&values]), "chart (the HelmRelease's values)");
    let spokes: Vec<String> = grants(&rendered)
        .into_iter()
        .filter(|g| g.2 == "sealedsecrets")
        .flat_map(|g| g.4)
        .collect();
    assert_eq!(spokes, ["dev-kubeconfig", "test-kubeconfig"]);
}

/// The Flux example keeps spokekeeper's own deployment, and with it the trust anchors
/// (`sealing.sha256`, `hub`), out of the fleet repo: the anchors come from a ConfigMap
/// through `valuesFrom`, and the Kustomization applies a repository other than the fleet's.
#[test]
fn flux_example_takes_the_trust_anchors_from_outside_the_fleet_repo() {
    crate::support::requires!(HELM);
    let mut objects = Vec::new();
    for f in plain_yaml_files() {
        let text = std::fs::read_to_string(&f).unwrap();
        let origin = f.strip_prefix(root()).unwrap().display().to_string();
        objects.extend(read_all(&documents(&text, &origin), &origin));
    }
    let release = one(&objects, |o| match o {
        Object::HelmRelease(h) => Some(h),
        _ => None,
    });
    let values = release.spec.values.as_ref().unwrap();
    assert!(
        values["config"]["sealing"].get("sha256").is_none() && values.get("hub").is_none(),
        "the HelmRelease's inline values must not carry sealing.sha256 or hub: {values}"
    );
    let from = release.spec.values_from.as_deref().unwrap_or_default();
    let sha = from
        .iter()
        .find(|r| r.target_path.as_deref() == Some("config.sealing.sha256"))
        .expect("valuesFrom sets config.sealing.sha256");
    assert!(
        matches!(sha.kind.as_str(), "ConfigMap" | "Secret"),
        "{sha:?}"
    );
    assert_ne!(
        sha.optional,
        Some(true),
        "a missing anchor must stop the release"
    );
    // The hub section comes whole from the same out-of-band object.
    let hub_ref = from
        .iter()
        .find(|r| r.values_key.as_deref() == Some("hub.yaml"))
        .expect("valuesFrom merges the hub section (valuesKey hub.yaml)");
    assert!(
        matches!(hub_ref.kind.as_str(), "ConfigMap" | "Secret")
            && hub_ref.target_path.is_none()
            && hub_ref.optional != Some(true),
        "{hub_ref:?}"
    );
    // The Kustomization that applies the example reads another repository than the fleet's.
    let flux = one(&objects, |o| match o {
        Object::FluxKustomization(k) => Some(k),
        _ => None,
    });
    let source = &flux.spec.source_ref.name;
    assert_ne!(source, "flux-system", "the fleet repo's usual source");
    let platform = objects
        .iter()
        .find_map(|o| match o {
            Object::GitRepository(g) if g.metadata.name.as_deref() == Some(source) => Some(g),
            _ => None,
        })
        .expect("the Kustomization's GitRepository is in the example");
    assert_ne!(platform.spec.url, values["fleet"]["url"].as_str().unwrap());

    // Rendered as Flux merges it (valuesFrom, then values), the fingerprint and the hub
    // section from the ConfigMap reach spokekeeper.yaml.
    let fp = format!("sha256:{}", "ab".repeat(32));
    let dir = tempfile::tempdir().unwrap();
    let anchor = dir.path().join("anchor.yaml");
    std::fs::write(
        &anchor,
        format!("config:\n  sealing:\n    sha256: \"{fp}\"\n"),
    )
    .unwrap();
    let hub = dir.path().join("hub.yaml");
    std::fs::write(
        &hub,
        "hub:\n  enabled: true\n  controller: {namespace: sealing, name: ctl, port: http}\n",
    )
    .unwrap();
    let inline = dir.path().join("values.json");
    std::fs::write(&inline, serde_json::to_vec(values).unwrap()).unwrap();
    let rendered = read_all(
        &render(&[&anchor, &hub, &inline]),
        "chart (valuesFrom + values)",
    );
    let config = config_text(&rendered);
    assert!(config.contains(&fp), "{config}");
    assert!(config.contains("namespace: sealing"), "{config}");
}
