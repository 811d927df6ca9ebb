//! The HelmRelease traps, read from the fleet repo clone (hostile input, bounded):
//!
//! - a HelmRelease applied by a Kustomization whose `spec.kubeConfig` targets a spoke is
//!   applied on the spoke, where no helm-controller runs: it is never installed;
//! - a HelmRelease without `spec.kubeConfig` under a spoke's directory (a path component
//!   named after the spoke), applied by a hub-side Kustomization that does not patch
//!   `spec.kubeConfig` into HelmReleases, is installed on the hub, not on the spoke.
//!
//! What a Kustomization applies follows kustomize-controller: its path's
//! kustomization.yaml `resources` (files and directories, in a chain), or without one
//! every YAML file below the path (a subdirectory with its own kustomization.yaml by
//! that one).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::reference::Ref;
use crate::config::SpokeConfig;

/// Files read from the clone, at most: a fleet repo is YAML of a few KiB per file.
const MAX_FILES: usize = 5_000;
pub(super) const MAX_FILE_BYTES: u64 = 1 << 20;
/// Bytes read in all: however many files a push adds (one blob at many paths costs the
/// pusher nothing), `check` reads this much and parses one file at a time.
pub const MAX_TOTAL_BYTES: u64 = 32 << 20;
const MAX_DEPTH: usize = 16;
pub(super) const KUSTOMIZATION_FILES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// One trap: the spoke it concerns and what to do, as one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trap {
    pub spoke: String,
    pub detail: String,
}

/// The clone's YAML files as the traps need them, by path relative to it (`/`-separated).
#[derive(Default)]
pub struct Tree {
    pub(super) files: BTreeMap<String, Summary>,
    /// Files left unread: [`MAX_TOTAL_BYTES`] were read before them.
    pub unread: usize,
}

/// What the traps need of one file; its text and parsed documents are dropped once this
/// is taken, so one file's tree is held at a time.
pub(super) struct Summary {
    pub kustomizations: Vec<Kustomization>,
    releases: Vec<Release>,
    /// Each document as the layout checks read it ([`skeleton`]).
    pub objects: Vec<Value>,
    /// The first document's `resources` (a kustomization.yaml's).
    resources: Vec<String>,
    /// A kustomization.yaml's fields that change what it applies ([`TRANSFORMS`]).
    pub transforms: Vec<&'static str>,
}

/// The fields of a kustomization.yaml that can change an object it applies (its data, its
/// name) or put another in its place.
const TRANSFORMS: [&str; 10] = [
    "patches",
    "patchesStrategicMerge",
    "patchesJson6902",
    "configMapGenerator",
    "replacements",
    "transformers",
    "generators",
    "components",
    "namePrefix",
    "nameSuffix",
];

/// A HelmRelease found in the repo.
struct Release {
    namespace: Option<String>,
    name: String,
    has_kubeconfig: bool,
}

/// The YAML files of the clone at `root`: regular files only (read through
/// [`crate::fsutil::read_under`], no symbolic link followed), `.git` skipped,
/// bounded in number, size and total bytes, in name order.
pub fn read_tree(root: &Path) -> Tree {
    read_tree_within(root, MAX_TOTAL_BYTES)
}

/// [`read_tree`] reading at most `budget` bytes in all.
fn read_tree_within(root: &Path, mut budget: u64) -> Tree {
    let mut tree = Tree::default();
    let mut dirs = vec![(PathBuf::new(), 0usize)];
    while let Some((rel, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&rel)) else {
            continue;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        let mut subdirs = Vec::new();
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            let child = rel.join(&name);
            if meta.is_dir() && name != ".git" && depth < MAX_DEPTH {
                subdirs.push((child, depth + 1));
                continue;
            }
            if !(meta.is_file()
                && meta.len() <= MAX_FILE_BYTES
                && is_yaml(&name)
                && tree.files.len() < MAX_FILES)
            {
                continue;
            }
            if meta.len() > budget {
                tree.unread += 1;
                continue;
            }
            let Ok(bytes) = crate::fsutil::read_under(&e.path(), root) else {
                continue;
            };
            budget = budget.saturating_sub(bytes.len() as u64);
            if let Ok(text) = std::str::from_utf8(&bytes) {
                let file = super::slash_path(&child);
                let summary = summarize(&file, text);
                tree.files.insert(file, summary);
            }
        }
        // Popped from the end: the first in name order is walked next.
        dirs.extend(subdirs.into_iter().rev());
    }
    tree
}

/// The file's Kustomizations, HelmReleases and `resources`.
fn summarize(file: &str, text: &str) -> Summary {
    let docs = documents(text);
    let base = file.rsplit('/').next().unwrap_or(file);
    let transforms = match docs.first() {
        Some(d) if KUSTOMIZATION_FILES.contains(&base) => TRANSFORMS
            .into_iter()
            .filter(|key| d.get(*key).is_some_and(|v| !v.is_null()))
            .collect(),
        _ => Vec::new(),
    };
    Summary {
        transforms,
        kustomizations: docs.iter().filter_map(|d| kustomization(file, d)).collect(),
        objects: docs.iter().map(skeleton).collect(),
        releases: docs
            .iter()
            .filter(|d| is_helm_release(d))
            .map(|d| Release {
                namespace: d["metadata"]["namespace"].as_str().map(str::to_string),
                name: d["metadata"]["name"].as_str().unwrap_or("?").to_string(),
                has_kubeconfig: d.pointer("/spec/kubeConfig").is_some_and(|v| !v.is_null()),
            })
            .collect(),
        resources: docs
            .first()
            .and_then(|d| d["resources"].as_array())
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
    }
}

/// What the layout checks read of a document: its kind and names, and a Flux object's
/// spec without inline values (a pushed document of any size is kept this small).
fn skeleton(d: &Value) -> Value {
    let flux = is_helm_release(d) || is_kind(d, "kustomize.toolkit.fluxcd.io", "Kustomization");
    let mut out = serde_json::Map::new();
    for key in ["apiVersion", "kind"] {
        if let Some(v) = d.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    let mut metadata = serde_json::Map::new();
    for key in ["name", "namespace"] {
        if let Some(v) = d["metadata"].get(key) {
            metadata.insert(key.into(), v.clone());
        }
    }
    out.insert("metadata".into(), Value::Object(metadata));
    if let (true, Some(Value::Object(spec))) = (flux, d.get("spec")) {
        let mut spec = spec.clone();
        spec.remove("values");
        out.insert("spec".into(), Value::Object(spec));
    }
    Value::Object(out)
}

fn is_yaml(name: &str) -> bool {
    name.ends_with(".yaml") || name.ends_with(".yml") || name == "Kustomization"
}

/// A Flux Kustomization found in the repo.
pub(super) struct Kustomization {
    pub file: String,
    pub namespace: String,
    pub name: String,
    /// spec.path, normalized ("" is the repo root); None when it leaves the repo.
    pub path: Option<String>,
    /// What spec.kubeConfig reads (a Secret or a federated spoke's ConfigMap).
    pub kube_config: Option<Ref>,
    /// Whether a patch targeting HelmReleases sets spec.kubeConfig.
    pub patches_helm_kubeconfig: bool,
    /// The patches targeting HelmReleases that set spec.kubeConfig, as written.
    pub helm_patches: Vec<String>,
    pub service_account: Option<String>,
    pub target_namespace: Option<String>,
    /// Whether one of spec.patches can reach a ConfigMap: its target names that kind or
    /// none (then a strategic merge patch names its own).
    pub patches_config_maps: bool,
}

/// The traps in `tree` (see the module docs) for `spokes`, each once, in file order.
pub(super) fn traps(tree: &Tree, spokes: &[SpokeConfig]) -> Vec<Trap> {
    let files = &tree.files;
    let mut out: Vec<Trap> = Vec::new();
    let mut push = |t: Trap| {
        if !out.contains(&t) {
            out.push(t);
        }
    };
    let mut walks = Walks::default();
    for k in files.values().flat_map(|s| &s.kustomizations) {
        let Some(path) = &k.path else { continue };
        let applied = walks.applied(files, path);
        let releases = applied.iter().flat_map(|f| {
            files
                .get(f.as_str())
                .into_iter()
                .flat_map(|s| &s.releases)
                .map(move |r| (f, r))
        });
        let target = k.kube_config.as_ref().and_then(|r| {
            spokes
                .iter()
                .find(|s| r.names(s) && s.secret.namespace == k.namespace)
        });
        for (file, release) in releases {
            let hr = release_name(release, &k.namespace);
            if let Some(spoke) = target {
                push(Trap {
                    spoke: spoke.name.clone(),
                    detail: format!(
                        "HelmRelease {hr} ({file}) is applied by Kustomization {}/{} ({}), which targets spoke {} (spec.kubeConfig): it is applied on the spoke, where no helm-controller runs (nor, usually, its CRD), and never installed; apply it from the hub with spec.kubeConfig instead (spokekeeper add's {}-helmreleases Kustomization patches it in)",
                        k.namespace, k.name, k.file, spoke.name, spoke.name
                    ),
                });
                continue;
            }
            if k.kube_config.is_some() || k.patches_helm_kubeconfig || release.has_kubeconfig {
                continue;
            }
            let Some(spoke) = spokes.iter().find(|s| file.split('/').any(|c| c == s.name)) else {
                continue;
            };
            push(Trap {
                spoke: spoke.name.clone(),
                detail: format!(
                    "HelmRelease {hr} ({file}) has no spec.kubeConfig and Kustomization {}/{} ({}) applies it on the hub: helm-controller installs it on the hub, not on spoke {}; set its spec.kubeConfig.{} to {}, or apply it with a Kustomization that patches it in (spokekeeper add's {}-helmreleases)",
                    k.namespace,
                    k.name,
                    k.file,
                    spoke.name,
                    super::reference::field_of(spoke),
                    spoke.secret.name,
                    spoke.name
                ),
            });
        }
    }
    out
}

/// Every document of a YAML file; none when it does not parse within the limits.
pub(super) fn documents(text: &str) -> Vec<Value> {
    let max = usize::try_from(MAX_FILE_BYTES).unwrap_or(usize::MAX);
    serde_saphyr::from_multiple_with_options::<Value>(text, crate::text::hostile_yaml(max))
        .map(|ds| ds.into_iter().filter(Value::is_object).collect())
        .unwrap_or_default()
}

pub(super) fn is_kind(d: &Value, group: &str, kind: &str) -> bool {
    d["kind"].as_str() == Some(kind)
        && d["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with(&format!("{group}/")))
}

pub(super) fn is_helm_release(d: &Value) -> bool {
    is_kind(d, "helm.toolkit.fluxcd.io", "HelmRelease")
}

/// `NAMESPACE/NAME` of a release, one bounded line (repo text).
fn release_name(r: &Release, default_ns: &str) -> String {
    let ns = r.namespace.as_deref().unwrap_or(default_ns);
    crate::text::one_line(&format!("{ns}/{}", r.name), 120)
}

fn kustomization(file: &str, d: &Value) -> Option<Kustomization> {
    if !is_kind(d, "kustomize.toolkit.fluxcd.io", "Kustomization") {
        return None;
    }
    let spec = &d["spec"];
    let helm_patches: Vec<String> = spec["patches"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["target"]["kind"].as_str() == Some("HelmRelease"))
        .filter_map(|p| p["patch"].as_str())
        .filter(|t| t.contains("kubeConfig"))
        .map(str::to_string)
        .collect();
    let patches_config_maps = spec["patches"].as_array().into_iter().flatten().any(|p| {
        match p["target"]["kind"].as_str() {
            Some(kind) => kind == "ConfigMap",
            None => {
                p["target"].is_object()
                    || p["patch"].as_str().is_some_and(|t| t.contains("ConfigMap"))
            }
        }
    });
    let name_of = |v: &Value| v.as_str().map(|s| crate::text::one_line(s, 63));
    Some(Kustomization {
        patches_config_maps,
        patches_helm_kubeconfig: !helm_patches.is_empty(),
        helm_patches,
        service_account: name_of(&spec["serviceAccountName"]),
        target_namespace: name_of(&spec["targetNamespace"]),
        file: file.to_string(),
        namespace: crate::text::one_line(
            d["metadata"]["namespace"].as_str().unwrap_or("flux-system"),
            63,
        ),
        name: crate::text::one_line(d["metadata"]["name"].as_str().unwrap_or("?"), 63),
        path: normalize("", spec["path"].as_str().unwrap_or("")),
        kube_config: Ref::of(&spec["kubeConfig"]),
    })
}

/// `rel` joined to the directory `dir`, `.` and `..` resolved; None when it leaves the
/// repo or is a URL.
fn normalize(dir: &str, rel: &str) -> Option<String> {
    if rel.contains("://") {
        return None;
    }
    let mut parts: Vec<&str> = if rel.starts_with('/') {
        Vec::new()
    } else {
        dir.split('/').filter(|p| !p.is_empty()).collect()
    };
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str()?),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Some(parts.join("/"))
}

/// The files each spec.path applies, walked once however many Kustomizations name it
/// (a push can add thousands naming one path).
#[derive(Default)]
pub(super) struct Walks {
    done: BTreeMap<String, Walked>,
}

/// A walk from a spec.path: the files it applies, and the directories it went through.
#[derive(Clone)]
pub(super) struct Walked {
    pub applied: BTreeSet<String>,
    pub dirs: BTreeSet<String>,
}

impl Walks {
    /// The files a Kustomization with spec.path `dir` applies.
    pub(super) fn applied(
        &mut self,
        files: &BTreeMap<String, Summary>,
        dir: &str,
    ) -> &BTreeSet<String> {
        &self.walked(files, dir).applied
    }

    /// The walk from spec.path `dir`.
    pub(super) fn walked(&mut self, files: &BTreeMap<String, Summary>, dir: &str) -> &Walked {
        self.done.entry(dir.to_string()).or_insert_with(|| {
            let (mut applied, mut dirs) = (BTreeSet::new(), BTreeSet::new());
            walk(files, dir, &mut applied, &mut dirs);
            Walked { applied, dirs }
        })
    }
}

fn walk(
    files: &BTreeMap<String, Summary>,
    dir: &str,
    out: &mut BTreeSet<String>,
    seen: &mut BTreeSet<String>,
) {
    if seen.len() > MAX_FILES || !seen.insert(dir.to_string()) {
        return;
    }
    let join = |name: &str| {
        if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        }
    };
    if let Some(k) = KUSTOMIZATION_FILES.iter().find_map(|n| files.get(&join(n))) {
        for r in &k.resources {
            let Some(target) = normalize(dir, r) else {
                continue;
            };
            if files.contains_key(&target) {
                out.insert(target);
            } else {
                walk(files, &target, out, seen);
            }
        }
        return;
    }
    // No kustomization.yaml: every YAML file below, as kustomize-controller generates one.
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let mut sub_kustomizations = BTreeSet::new();
    for f in files.keys().filter(|f| f.starts_with(&prefix)) {
        let rest = &f[prefix.len()..];
        if let Some((sub, name)) = rest.rsplit_once('/')
            && KUSTOMIZATION_FILES.contains(&name)
        {
            sub_kustomizations.insert(format!("{prefix}{sub}"));
        }
    }
    for f in files.keys().filter(|f| f.starts_with(&prefix)) {
        if sub_kustomizations
            .iter()
            .any(|s| f.starts_with(&format!("{s}/")))
        {
            continue;
        }
        out.insert(f.clone());
    }
    for s in &sub_kustomizations {
        // Only the outermost: a nested one is reached through its parent's resources.
        if !sub_kustomizations
            .iter()
            .any(|o| o != s && s.starts_with(&format!("{o}/")))
        {
            walk(files, s, out, seen);
        }
    }
}

#[cfg(test)]
pub(super) mod tests;
