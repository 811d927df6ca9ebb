//! A spoke onboarded with its credential alone: its sealed credential
//! is in the clone, but no Flux object there reads its Secret (a Kustomization or
//! HelmRelease with spec.kubeConfig naming it, or a HelmRelease patch adding it), so
//! nothing deploys to the spoke. `rotate`, or a chart entry rolled out before `add`
//! could write the Flux objects, leaves that. Judged only in a fleet repo where Flux
//! objects read another spoke's Secret: one with none keeps them elsewhere.

use std::collections::BTreeMap;

use serde_json::Value;

use super::confine::patched_secret;
use super::slash_path;
use super::traps::{self, Summary, Trap, Tree};
use crate::config::SpokeConfig;

/// One trap per spoke of `spokes` whose credential is in `files` (see traps::read_tree)
/// and whose Secret nothing there reads, when something there reads another's.
pub(super) fn traps(tree: &Tree, spokes: &[SpokeConfig]) -> Vec<Trap> {
    let files = &tree.files;
    let (read, unread): (Vec<&SpokeConfig>, Vec<&SpokeConfig>) =
        spokes.iter().partition(|s| read(s, files));
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
                    "onboarded with its credential alone: {} is committed, but no Flux object in the fleet repo reads Secret {ns}/{name} (spec.kubeConfig.secretRef), so nothing deploys to {}; commit its Kustomizations beside it as `spokekeeper add` lays them out (docs/operations.md, \"Adding a spoke\")",
                    slash_path(&s.output),
                    s.name
                ),
            }
        })
        .collect()
}

/// Whether a Kustomization, a HelmRelease or a HelmRelease patch reads the spoke's Secret.
fn read(s: &SpokeConfig, files: &BTreeMap<String, Summary>) -> bool {
    let (ns, name) = (&s.secret.namespace, &s.secret.name);
    let mut ks = files.values().flat_map(|f| &f.kustomizations);
    let by_kustomization = ks.by_ref().filter(|k| &k.namespace == ns).any(|k| {
        k.secret.as_ref() == Some(name)
            || k.helm_patches
                .iter()
                .any(|p| patched_secret(p).as_ref() == Some(name))
    });
    by_kustomization
        || files.values().flat_map(|f| &f.objects).any(|d| {
            traps::is_helm_release(d)
                && d.pointer("/spec/kubeConfig/secretRef/name")
                    .and_then(Value::as_str)
                    == Some(name.as_str())
                && d["metadata"]["namespace"]
                    .as_str()
                    .is_none_or(|n| n == ns.as_str())
        })
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
