//! The traps in what the hub applies for a spoke (the layout `spokekeeper add`
//! writes avoids each):
//!
//! - a Kustomization that applies a spoke's HelmReleases on the hub (no spec.kubeConfig,
//!   a HelmRelease patch naming the spoke's Secret, or a federated spoke's ConfigMap:
//!   `secretRef` and `configMapRef` alike) applies as kustomize-controller
//!   (cluster-admin in a `flux bootstrap` install) unless it has spec.serviceAccountName;
//!   in a namespace holding another spoke's Secret a HelmRelease can read that Secret
//!   through valuesFrom; and any kind but [`BELONGS`] under its path is named;
//! - a federated spoke's kubeConfig ConfigMap applied from another file than the one
//!   spokekeeper commits: that one says where the controllers send their tokens and for
//!   which audience (any federated spoke's);
//! - a HelmRelease sent to a spoke without spec.targetNamespace or spec.storageNamespace
//!   installs into, or stores in, its hub namespace's name on the spoke;
//! - two spokes' objects that resolve to one hub object: one spoke's release is then
//!   installed with the other's kubeConfig, and pruning one removes the other's.

use std::collections::BTreeMap;

use serde_json::Value;

use super::reference::{Ref, is_federated, kind_of, patched};
use super::traps::{self, Kustomization, Trap, Tree, Walks};
use crate::config::SpokeConfig;

/// What a spoke's hub-side directory holds: its releases, their chart sources and values.
const BELONGS: [&str; 4] = [
    "HelmRelease",
    "HelmRepository",
    "OCIRepository",
    "ConfigMap",
];

/// What a spoke's hub-side directory may hold: a federated spoke's no ConfigMap, since
/// one there could replace its kubeConfig ConfigMap (add's Role grants none).
fn belongs(spoke: &SpokeConfig) -> &'static [&'static str] {
    if is_federated(spoke) {
        &BELONGS[..3]
    } else {
        &BELONGS
    }
}

/// A ConfigMap applied on the hub as a federated spoke's kubeConfig ConfigMap from a file
/// other than the one spokekeeper commits: its writer chooses the address the controllers
/// send their tokens to and the audience they are minted for, so they can take a token
/// valid on any federated spoke.
fn replaced(
    kind: &str,
    ns: &str,
    name: &str,
    object: &str,
    file: &str,
    k: &Kustomization,
    spokes: &[SpokeConfig],
) -> Option<Trap> {
    let spoke = spokes.iter().find(|s| {
        kind == "ConfigMap"
            && is_federated(s)
            && s.secret.namespace == ns
            && s.secret.name == name
            && super::slash_path(&s.output) != file
    })?;
    Some(Trap {
        spoke: spoke.name.clone(),
        detail: format!(
            "{object} ({file}), applied on the hub by Kustomization {}/{} ({}), is spoke {}'s kubeConfig ConfigMap, which spokekeeper commits in {}: Flux's controllers send their tokens to the address it names, minted for the audience it names (any federated spoke's), so whoever writes {file} can take a token valid on any of them; remove it",
            k.namespace,
            k.name,
            k.file,
            spoke.name,
            super::slash_path(&spoke.output)
        ),
    })
}

/// One object applied on the hub for a spoke, from a file.
struct Applied<'a> {
    spoke: &'a SpokeConfig,
    file: String,
}

/// The traps above in `files` (see traps::read_tree), for `spokes`, in Kustomization
/// order; collisions last.
pub(super) fn traps(tree: &Tree, spokes: &[SpokeConfig]) -> Vec<Trap> {
    let files = &tree.files;
    let mut walks = Walks::default();
    let mut out = Vec::new();
    let mut owners: BTreeMap<String, Vec<Applied<'_>>> = BTreeMap::new();
    for k in files
        .values()
        .flat_map(|s| &s.kustomizations)
        .filter(|k| k.kube_config.is_none())
    {
        let Some(path) = &k.path else { continue };
        let patched = patched_for(k, spokes);
        if let Some(spoke) = patched {
            out.extend(unconfined(k, spoke, spokes));
        }
        for file in walks.applied(files, path) {
            for d in files
                .get(file.as_str())
                .into_iter()
                .flat_map(|s| &s.objects)
            {
                let ns = k
                    .target_namespace
                    .as_deref()
                    .or(d["metadata"]["namespace"].as_str())
                    .unwrap_or(k.namespace.as_str());
                let kind = crate::text::one_line(d["kind"].as_str().unwrap_or("?"), 63);
                let name = d["metadata"]["name"].as_str().unwrap_or("?");
                let object = crate::text::one_line(&format!("{kind} {ns}/{name}"), 160);
                out.extend(replaced(&kind, ns, name, &object, file, k, spokes));
                let Some(spoke) = patched.or_else(|| released_to(d, ns, spokes)) else {
                    continue;
                };
                let belongs = belongs(spoke);
                if patched.is_some() && !belongs.contains(&kind.as_str()) {
                    out.push(Trap {
                        spoke: spoke.name.clone(),
                        detail: format!(
                            "{object} ({file}) is applied on the hub by Kustomization {}/{} ({}), which applies spoke {}'s HelmReleases: a spoke's directory there holds only {}; move it to the spoke's own manifests (applied on the spoke) or out of the spoke's directory",
                            k.namespace,
                            k.name,
                            k.file,
                            spoke.name,
                            belongs.join(", ")
                        ),
                    });
                }
                if traps::is_helm_release(d) {
                    out.extend(unplaced(d, &object, file, ns, spoke));
                }
                let applied = owners.entry(object).or_default();
                if !applied.iter().any(|a| a.spoke.name == spoke.name) {
                    applied.push(Applied {
                        spoke,
                        file: file.clone(),
                    });
                }
            }
        }
    }
    out.extend(collisions(&owners));
    out
}

/// The spoke whose credential (Secret, or federated ConfigMap) a hub-side
/// Kustomization's HelmRelease patch names, in the Kustomization's namespace (where
/// helm-controller reads it).
fn patched_for<'a>(k: &Kustomization, spokes: &'a [SpokeConfig]) -> Option<&'a SpokeConfig> {
    let refs: Vec<Ref> = k.helm_patches.iter().filter_map(|p| patched(p)).collect();
    spokes
        .iter()
        .find(|s| s.secret.namespace == k.namespace && refs.iter().any(|r| r.names(s)))
}

/// The spoke a HelmRelease in namespace `ns` names with its own spec.kubeConfig.
fn released_to<'a>(d: &Value, ns: &str, spokes: &'a [SpokeConfig]) -> Option<&'a SpokeConfig> {
    if !traps::is_helm_release(d) {
        return None;
    }
    let r = Ref::of(d.pointer("/spec/kubeConfig")?)?;
    spokes
        .iter()
        .find(|s| r.names(s) && s.secret.namespace == ns)
}

/// A hub-side Kustomization for `spoke` that applies as kustomize-controller, or in a
/// namespace that holds another spoke's Secret.
fn unconfined(k: &Kustomization, spoke: &SpokeConfig, spokes: &[SpokeConfig]) -> Vec<Trap> {
    let at = format!(
        "Kustomization {}/{} ({}) applies spoke {}'s HelmReleases on the hub",
        k.namespace, k.name, k.file, spoke.name
    );
    let mut out = Vec::new();
    if k.service_account.is_none() {
        out.push(Trap {
            spoke: spoke.name.clone(),
            detail: format!(
                "{at} as kustomize-controller (cluster-admin in a flux bootstrap install): whoever can commit under its path can change anything on the hub; set spec.serviceAccountName to an account whose Role allows only HelmReleases in its namespace (spokekeeper add's layout)"
            ),
        });
    }
    for other in spokes
        .iter()
        .filter(|o| o.name != spoke.name && o.secret.namespace == k.namespace)
    {
        let risk = if is_federated(other) {
            "a ConfigMap written there replaces it, and a HelmRelease there can name it: either lets its writer choose where the controllers send their tokens and for which spoke's audience"
        } else {
            "a HelmRelease there can read it through valuesFrom"
        };
        out.push(Trap {
            spoke: spoke.name.clone(),
            detail: format!(
                "{at} in namespace {}, which holds spoke {}'s {} {}: {risk}; give each spoke a hub namespace of its own (spokekeeper add --namespace)",
                k.namespace,
                other.name,
                kind_of(other),
                other.secret.name
            ),
        });
    }
    out
}

/// A HelmRelease sent to `spoke` without spec.targetNamespace or spec.storageNamespace:
/// helm-controller then uses the HelmRelease's own namespace `ns`, on the spoke.
fn unplaced(d: &Value, object: &str, file: &str, ns: &str, spoke: &SpokeConfig) -> Option<Trap> {
    let missing: Vec<&str> = ["targetNamespace", "storageNamespace"]
        .into_iter()
        .filter(|f| d["spec"][f].as_str().is_none_or(str::is_empty))
        .collect();
    if missing.is_empty() {
        return None;
    }
    Some(Trap {
        spoke: spoke.name.clone(),
        detail: format!(
            "{object} ({file}) has no spec.{}: helm-controller then uses its hub namespace {ns} on spoke {}, which the spoke usually lacks; set spec.targetNamespace and spec.storageNamespace to the spoke namespace the release belongs in",
            missing.join(" nor spec."),
            spoke.name
        ),
    })
}

/// One trap per spoke for each hub object more than one spoke's objects resolve to.
fn collisions(owners: &BTreeMap<String, Vec<Applied<'_>>>) -> Vec<Trap> {
    let mut out = Vec::new();
    for (object, applied) in owners.iter().filter(|(_, a)| a.len() > 1) {
        let all = applied
            .iter()
            .map(|a| format!("{} ({})", a.spoke.name, a.file))
            .collect::<Vec<_>>()
            .join(", ");
        for a in applied {
            out.push(Trap {
                spoke: a.spoke.name.clone(),
                detail: format!(
                    "{object} is applied on the hub for spokes {all}: they are one object, so one spoke's release is installed with another's kubeConfig and pruning one removes the other's; give each spoke a hub namespace of its own (spokekeeper add --namespace)"
                ),
            });
        }
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    use std::path::Path;

    use super::*;

    /// Spokes edge and dev, each in its own namespace, then `extra` lines.
    pub(in super::super) fn spokes(extra: &str) -> Vec<SpokeConfig> {
        let text = format!(
            "repo: {{path: f}}\nsealing: {{cert: c.pem}}\nspokes:\n  - {{name: edge, address: 10.0.0.1, secret: {{namespace: edge}}}}\n  - {{name: dev, address: 10.0.0.2, secret: {{namespace: dev}}}}\n{extra}"
        );
        crate::config::Config::parse(&text, "spokekeeper.yaml", Path::new("/x"))
            .unwrap()
            .spokes
    }

    /// check's layout traps in `files`, as (spoke, detail).
    pub(in super::super) fn details(
        files: &[(&str, &str)],
        spokes: &[SpokeConfig],
    ) -> Vec<(String, String)> {
        super::super::layout_traps(&super::super::traps::tests::tree(files), spokes)
            .into_iter()
            .map(|t| (t.spoke, t.detail))
            .collect()
    }

    /// A hub-side Kustomization for `spoke` as add writes it, with `service_account`
    /// and `target` (targetNamespace) when given.
    fn hub_side(spoke: &str, ns: &str, service_account: bool, target: Option<&str>) -> String {
        format!(
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: {spoke}-helmreleases\n  namespace: {ns}\nspec:\n  path: ./spokes/{spoke}/helmreleases\n{}{}  sourceRef: {{kind: GitRepository, name: flux-system, namespace: flux-system}}\n  patches:\n    - target: {{kind: HelmRelease}}\n      patch: |\n        - op: add\n          path: /spec/kubeConfig\n          value:\n            secretRef:\n              name: {spoke}-kubeconfig\n",
            if service_account {
                format!("  serviceAccountName: {spoke}-helmreleases\n")
            } else {
                String::new()
            },
            target
                .map(|t| format!("  targetNamespace: {t}\n"))
                .unwrap_or_default()
        )
    }

    fn release(name: &str, placed: bool) -> String {
        format!(
            "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: {name}\nspec:\n  chart: {{spec: {{chart: web}}}}\n{}",
            if placed {
                "  targetNamespace: web\n  storageNamespace: web\n"
            } else {
                ""
            }
        )
    }

    #[test]
    fn adds_layout_has_no_trap_and_each_spokes_same_named_release_is_its_own() {
        let s = spokes("");
        let edge = super::super::layout::tests::for_tests(&s[0]);
        let dev = super::super::layout::tests::for_tests(&s[1]);
        let found = details(
            &[
                ("clusters/hub/edge.yaml", &edge),
                ("clusters/hub/dev.yaml", &dev),
                ("spokes/edge/helmreleases/web.yaml", &release("web", true)),
                ("spokes/dev/helmreleases/web.yaml", &release("web", true)),
                (
                    "spokes/dev/helmreleases/values.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-values\n",
                ),
            ],
            &s,
        );
        assert_eq!(found, []);
    }

    #[test]
    fn an_unconfined_hub_side_kustomization_is_named_with_the_fix() {
        // The layout add wrote before: no account, in flux-system beside dev's Secret.
        let mut s = spokes("");
        for spoke in &mut s {
            spoke.secret.namespace = "flux-system".into();
        }
        let found = details(
            &[
                (
                    "clusters/hub/edge.yaml",
                    &hub_side("edge", "flux-system", false, Some("flux-system")),
                ),
                ("spokes/edge/helmreleases/web.yaml", &release("web", true)),
            ],
            &s,
        );
        let d: Vec<&str> = found.iter().map(|(_, d)| d.as_str()).collect();
        assert_eq!(d.len(), 2, "{d:#?}");
        assert!(found.iter().all(|(spoke, _)| spoke == "edge"), "{found:?}");
        assert!(
            d[0].starts_with("Kustomization flux-system/edge-helmreleases (clusters/hub/edge.yaml) applies spoke edge's HelmReleases on the hub as kustomize-controller")
                && d[0].contains("set spec.serviceAccountName"),
            "{}",
            d[0]
        );
        assert!(
            d[1].contains("in namespace flux-system, which holds spoke dev's Secret dev-kubeconfig: a HelmRelease there can read it through valuesFrom"),
            "{}",
            d[1]
        );
        // With an account, in its own namespace: nothing.
        let s = spokes("");
        assert_eq!(
            details(
                &[
                    (
                        "clusters/hub/edge.yaml",
                        &hub_side("edge", "edge", true, Some("edge"))
                    ),
                    ("spokes/edge/helmreleases/web.yaml", &release("web", true)),
                ],
                &s
            ),
            []
        );
    }

    #[test]
    fn another_kind_under_the_hub_side_path_is_named() {
        let s = spokes("");
        let attack = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: mine\n---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: dev-too\nspec:\n  path: ./x\n  kubeConfig: {secretRef: {name: dev-kubeconfig}}\n";
        let found = details(
            &[
                (
                    "clusters/hub/edge.yaml",
                    &hub_side("edge", "edge", true, Some("edge")),
                ),
                ("spokes/edge/helmreleases/more.yaml", attack),
            ],
            &s,
        );
        let d: Vec<&str> = found.iter().map(|(_, d)| d.as_str()).collect();
        assert_eq!(d.len(), 2, "{d:#?}");
        assert!(
            d[0].starts_with("ClusterRoleBinding edge/mine (spokes/edge/helmreleases/more.yaml) is applied on the hub by Kustomization edge/edge-helmreleases")
                && d[0].contains("holds only HelmRelease, HelmRepository, OCIRepository, ConfigMap"),
            "{}",
            d[0]
        );
        assert!(d[1].starts_with("Kustomization edge/dev-too "), "{}", d[1]);
    }

    #[test]
    fn a_release_without_target_or_storage_namespace_is_named_with_where_it_goes() {
        let s = spokes("");
        let found = details(
            &[
                (
                    "clusters/hub/edge.yaml",
                    &hub_side("edge", "edge", true, Some("edge")),
                ),
                ("spokes/edge/helmreleases/web.yaml", &release("web", false)),
                (
                    "spokes/edge/helmreleases/half.yaml",
                    &release("half", false).replace("spec:\n", "spec:\n  targetNamespace: web\n"),
                ),
            ],
            &s,
        );
        let d: Vec<&str> = found.iter().map(|(_, d)| d.as_str()).collect();
        assert_eq!(d.len(), 2, "{d:#?}");
        assert!(
            d[0].starts_with("HelmRelease edge/half (spokes/edge/helmreleases/half.yaml) has no spec.storageNamespace: helm-controller then uses its hub namespace edge on spoke edge"),
            "{}",
            d[0]
        );
        assert!(
            d[1].starts_with("HelmRelease edge/web (spokes/edge/helmreleases/web.yaml) has no spec.targetNamespace nor spec.storageNamespace"),
            "{}",
            d[1]
        );
        // A release with its own spec.kubeConfig, applied by any hub Kustomization, too.
        let own = release("web", false)
            .replace("metadata:\n", "metadata:\n  namespace: dev\n")
            .replace(
                "spec:\n",
                "spec:\n  kubeConfig: {secretRef: {name: dev-kubeconfig}}\n",
            );
        let found = details(
            &[
                (
                    "clusters/hub/infra.yaml",
                    "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: infra\n  namespace: flux-system\nspec:\n  path: ./infra\n",
                ),
                ("infra/web.yaml", &own),
            ],
            &s,
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "dev");
        assert!(
            found[0]
                .1
                .starts_with("HelmRelease dev/web (infra/web.yaml) has no"),
            "{}",
            found[0].1
        );
    }

    #[test]
    fn two_spokes_objects_resolving_to_one_name_are_named_for_each() {
        // Both patched in flux-system, as add's layout was: one HelmRelease flux-system/web.
        let mut s = spokes("");
        for spoke in &mut s {
            spoke.secret.namespace = "flux-system".into();
        }
        let found = details(
            &[
                (
                    "clusters/hub/edge.yaml",
                    &hub_side("edge", "flux-system", true, Some("flux-system")),
                ),
                (
                    "clusters/hub/dev.yaml",
                    &hub_side("dev", "flux-system", true, Some("flux-system")),
                ),
                ("spokes/edge/helmreleases/web.yaml", &release("web", true)),
                ("spokes/dev/helmreleases/web.yaml", &release("web", true)),
            ],
            &s,
        );
        let collided: Vec<&(String, String)> = found
            .iter()
            .filter(|(_, d)| {
                d.starts_with("HelmRelease flux-system/web is applied on the hub for spokes")
            })
            .collect();
        assert_eq!(collided.len(), 2, "{found:#?}");
        assert_eq!(
            (collided[0].0.as_str(), collided[1].0.as_str()),
            ("dev", "edge")
        );
        assert!(
            collided[0].1.contains("for spokes dev (spokes/dev/helmreleases/web.yaml), edge (spokes/edge/helmreleases/web.yaml)")
                && collided[0].1.contains("pruning one removes the other's"),
            "{}",
            collided[0].1
        );
        // Without targetNamespace, in each spoke's own namespace: no collision.
        let s = spokes("");
        let found = details(
            &[
                (
                    "clusters/hub/edge.yaml",
                    &hub_side("edge", "edge", true, None),
                ),
                ("clusters/hub/dev.yaml", &hub_side("dev", "dev", true, None)),
                ("spokes/edge/helmreleases/web.yaml", &release("web", true)),
                ("spokes/dev/helmreleases/web.yaml", &release("web", true)),
            ],
            &s,
        );
        assert_eq!(found, []);
    }
}
