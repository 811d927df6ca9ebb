//! A federated spoke's kubeConfig ConfigMap changed on its way to the hub: a
//! kustomization.yaml that patches, generates or renames what it applies, or a Flux
//! Kustomization whose spec.patches can reach a ConfigMap. The committed file stays as
//! spokekeeper wrote it (and is judged every tick) while the hub applies another address
//! or audience, which only the layout shows.

use std::collections::BTreeSet;

use super::reference::is_federated;
use super::traps::{KUSTOMIZATION_FILES, Trap, Tree, Walks};
use crate::config::SpokeConfig;

/// The traps above for the federated among `spokes`, each once.
pub(super) fn traps(tree: &Tree, spokes: &[SpokeConfig]) -> Vec<Trap> {
    let federated: Vec<(&SpokeConfig, String)> = spokes
        .iter()
        .filter(|s| is_federated(s))
        .map(|s| (s, super::slash_path(&s.output)))
        .collect();
    let mut out: Vec<Trap> = Vec::new();
    if federated.is_empty() {
        return out;
    }
    let files = &tree.files;
    let mut walks = Walks::default();
    for k in files
        .values()
        .flat_map(|s| &s.kustomizations)
        .filter(|k| k.kube_config.is_none())
    {
        let Some(path) = &k.path else { continue };
        let walked = walks.walked(files, path).clone();
        for (spoke, output) in federated.iter().filter(|(_, o)| walked.applied.contains(o)) {
            let at = format!(
                "spoke {}'s kubeConfig ConfigMap ({output}), applied on the hub by Kustomization {}/{} ({})",
                spoke.name, k.namespace, k.name, k.file
            );
            let mut found = Vec::new();
            if k.patches_config_maps {
                found.push(format!(
                    "{at}, passes through its spec.patches, one of which can reach a ConfigMap: target them at other kinds"
                ));
            }
            for (file, keys) in kustomize_files(tree, &walked.dirs) {
                if walks
                    .applied(files, file.rsplit_once('/').map_or("", |(d, _)| d))
                    .contains(output)
                {
                    found.push(format!(
                        "{at}, passes through {file}, whose {} can change it: apply the ConfigMap from a kustomization.yaml without them",
                        keys.join(", ")
                    ));
                }
            }
            for detail in found {
                let trap = Trap {
                    spoke: spoke.name.clone(),
                    detail: format!(
                        "{detail} (Flux's controllers would send their tokens to the address the hub's copy names, minted for the audience it names, while the file spokekeeper judges stays as written)"
                    ),
                };
                if !out.contains(&trap) {
                    out.push(trap);
                }
            }
        }
    }
    out
}

/// The kustomization.yaml files in `dirs` that change what they apply, with those fields.
fn kustomize_files<'a>(
    tree: &'a Tree,
    dirs: &BTreeSet<String>,
) -> Vec<(String, &'a [&'static str])> {
    dirs.iter()
        .flat_map(|dir| {
            KUSTOMIZATION_FILES.iter().map(move |n| {
                if dir.is_empty() {
                    n.to_string()
                } else {
                    format!("{dir}/{n}")
                }
            })
        })
        .filter_map(|file| {
            let summary = tree.files.get(&file)?;
            (!summary.transforms.is_empty()).then_some((file, summary.transforms.as_slice()))
        })
        .collect()
}
