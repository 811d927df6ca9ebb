//! Who reads a spoke's credential in the fleet repo (a Kustomization or HelmRelease with
//! spec.kubeConfig naming it, or a HelmRelease patch adding it): the spoke's Secret,
//! or a federated spoke's ConfigMap (`configMapRef`).
//!
//! - A spoke onboarded with its credential alone: it is in the clone, but nothing there
//!   reads it, so nothing deploys to the spoke. `rotate`, or a chart entry rolled out
//!   before `add` could write the Flux objects, leaves that. Judged only in a fleet repo
//!   where Flux objects read another spoke's credential: one with none keeps them
//!   elsewhere.
//! - A consumer still on the other kind: a federated spoke's Kustomization or
//!   HelmRelease on `secretRef` to its old Secret (the migration step), or a sealed
//!   spoke's on `configMapRef`; each named with the fix.

use std::collections::BTreeMap;

use super::reference::{Ref, field_of, kind_of, patched};
use super::slash_path;
use super::traps::{self, Summary, Trap, Tree};
use crate::config::SpokeConfig;

/// One trap per spoke of `spokes` whose credential is in `files` (see traps::read_tree)
/// and which nothing there reads, when something there reads another's.
pub(super) fn traps(tree: &Tree, spokes: &[SpokeConfig]) -> Vec<Trap> {
    let files = &tree.files;
    let (read, unread): (Vec<&SpokeConfig>, Vec<&SpokeConfig>) = spokes
        .iter()
        .partition(|s| !consumers(s, files, Ref::reads).is_empty());
    if read.is_empty() {
        return Vec::new();
    }
    unread
        .into_iter()
        .filter(|s| files.contains_key(&slash_path(&s.output)))
        .map(|s| {
            let (ns, name) = (&s.secret.namespace, &s.secret.name);
            Trap {
                spoke: s.name.clone(),
                detail: format!(
                    "onboarded with its credential alone: {} is committed, but no Flux object in the fleet repo reads {} {ns}/{name} (spec.kubeConfig.{}), so nothing deploys to {}; commit its Kustomizations beside it as `spokekeeper add` lays them out (docs/operations.md, \"Adding a spoke\")",
                    slash_path(&s.output),
                    kind_of(s),
                    field_of(s),
                    s.name
                ),
            }
        })
        .collect()
}

/// One trap per consumer of a spoke's credential that names it under the other kind.
pub(super) fn other_kind(tree: &Tree, spokes: &[SpokeConfig]) -> Vec<Trap> {
    let mut out = Vec::new();
    for s in spokes {
        let (name, field) = (&s.secret.name, field_of(s));
        let (was, fix) = if field == "configMapRef" {
            (
                "secretRef",
                format!(
                    "configMapRef: {{name: {name}}} (no key; spokekeeper commits the ConfigMap, no Secret)"
                ),
            )
        } else {
            (
                "configMapRef",
                format!("secretRef: {{name: {name}, key: {}}}", s.secret.key),
            )
        };
        for consumer in consumers(s, &tree.files, |r, s| r.names(s) && !r.reads(s)) {
            out.push(Trap {
                spoke: s.name.clone(),
                detail: format!(
                    "{consumer} reads spoke {}'s credential with spec.kubeConfig.{was}, but its credential.mode is {}: set spec.kubeConfig to {fix}",
                    s.name, s.credential.mode
                ),
            });
        }
    }
    out
}

/// Each Flux object in the fleet repo that reads `spoke`'s credential with
/// `spec.kubeConfig.secretRef` (a federated spoke's old Secret), as `KIND NS/NAME (FILE)`.
pub fn on_secret_ref(tree: &Tree, spoke: &SpokeConfig) -> Vec<String> {
    consumers(spoke, &tree.files, |r, s| r.names(s) && !r.config_map)
}

/// Each Kustomization (its own spec.kubeConfig or a HelmRelease patch) and HelmRelease in
/// the spoke's namespace whose reference `matches` the spoke, as `KIND NS/NAME (FILE)`.
fn consumers(
    s: &SpokeConfig,
    files: &BTreeMap<String, Summary>,
    matches: fn(&Ref, &SpokeConfig) -> bool,
) -> Vec<String> {
    let ns = &s.secret.namespace;
    let hit = |r: Option<Ref>| r.is_some_and(|r| matches(&r, s));
    let mut out = Vec::new();
    for (file, summary) in files {
        for k in summary.kustomizations.iter().filter(|k| &k.namespace == ns) {
            if hit(k.kube_config.clone()) || k.helm_patches.iter().any(|p| hit(patched(p))) {
                out.push(format!("Kustomization {ns}/{} ({file})", k.name));
            }
        }
        for d in summary.objects.iter().filter(|d| traps::is_helm_release(d)) {
            let in_ns = d["metadata"]["namespace"].as_str().is_none_or(|n| n == ns);
            if in_ns && hit(d.pointer("/spec/kubeConfig").and_then(Ref::of)) {
                let name = d["metadata"]["name"].as_str().unwrap_or("?");
                let hr = crate::text::one_line(&format!("HelmRelease {ns}/{name}"), 160);
                out.push(format!("{hr} ({file})"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::confine::tests::{details, spokes};

    /// Every layout trap check finds in `files` (none but this module's here).
    fn found(files: &[(&str, &str)]) -> Vec<(String, String)> {
        details(files, &spokes(""))
    }

    #[test]
    fn a_spoke_whose_committed_secret_no_flux_object_reads_is_named_with_the_fix() {
        let spokes = spokes("");
        let edge = super::super::layout::tests::for_tests(&spokes[0]);
        let sealed = "kind: SealedSecret\n";
        let mut files = vec![
            ("fluxcd/edge.yaml", edge.as_str()),
            ("fluxcd/edge-kubeconfig-sealed.yaml", sealed),
        ];
        // dev not rotated yet: nothing to say.
        assert_eq!(found(&files), []);
        files.push(("fluxcd/dev-kubeconfig-sealed.yaml", sealed));
        let got = found(&files);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "dev");
        assert!(
            got[0].1.starts_with("onboarded with its credential alone: fluxcd/dev-kubeconfig-sealed.yaml is committed, but no Flux object in the fleet repo reads Secret dev/dev-kubeconfig")
                && got[0].1.contains("as `spokekeeper add` lays them out"),
            "{got:?}"
        );
        // A HelmRelease of its own with spec.kubeConfig deploys to it.
        let release = "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: ingress, namespace: dev}\nspec:\n  kubeConfig: {secretRef: {name: dev-kubeconfig}}\n";
        files.push(("spokes/dev/release.yaml", release));
        assert_eq!(found(&files), []);
        // In another namespace it reads another Secret.
        let elsewhere = release.replace("namespace: dev", "namespace: edge");
        files.pop();
        files.push(("spokes/dev/release.yaml", &elsewhere));
        assert_eq!(found(&files).len(), 1);
    }

    #[test]
    fn a_fleet_repo_where_nothing_reads_a_spokes_secret_is_not_judged() {
        let sealed = "kind: SealedSecret\n";
        let files = [
            ("fluxcd/edge-kubeconfig-sealed.yaml", sealed),
            ("fluxcd/dev-kubeconfig-sealed.yaml", sealed),
        ];
        assert_eq!(found(&files), []);
    }
}
