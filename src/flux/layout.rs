//! The Flux objects `spokekeeper add` commits beside a new spoke's credential, and the
//! root kustomization.yaml that lists them. Every name is derived from the spoke's name
//! (a DNS label) and the configuration's Secret, so nothing here comes from the repo but
//! the root kustomization.yaml, which is edited as text and parsed again.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::config::{CredentialMode, SpokeConfig};

/// Where the new spoke's Flux objects go and what they deploy from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The root Kustomization's directory (its spec.path), relative to the repo root.
    pub root: PathBuf,
    /// The spoke's own directory: `apps/` is applied on the spoke, `helmreleases/` on
    /// the hub with spec.kubeConfig patched in.
    pub dir: PathBuf,
    /// The GitRepository both Kustomizations read.
    pub source: Source,
    /// The ServiceAccount Flux impersonates on the spoke (`--service-account`), in the
    /// spoke's hub namespace's name there.
    pub spoke_account: Option<String>,
}

/// A GitRepository: `--source [NAMESPACE/]NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub namespace: String,
    pub name: String,
}

impl Source {
    /// `[NAMESPACE/]NAME`, the namespace flux-system unless given; None when either part
    /// is not a Kubernetes name.
    pub fn parse(text: &str) -> Option<Source> {
        let (namespace, name) = text.split_once('/').unwrap_or(("flux-system", text));
        let ok = crate::config::is_dns_subdomain(name) && crate::config::is_dns_label(namespace);
        ok.then(|| Source {
            namespace: namespace.into(),
            name: name.into(),
        })
    }
}

/// What the hub-side Kustomization may apply in the spoke's namespace, as its
/// ServiceAccount's Role grants it: (API group, resources).
pub const HUB_KINDS: [(&str, &str); 3] = [
    ("helm.toolkit.fluxcd.io", "helmreleases"),
    (
        "source.toolkit.fluxcd.io",
        "helmrepositories, ocirepositories",
    ),
    ("\"\"", "configmaps"),
];

impl Layout {
    /// `ROOT/NAME.yaml`: the spoke's namespace, account and Kustomizations.
    pub fn objects_file(&self, spoke: &SpokeConfig) -> PathBuf {
        self.root.join(format!("{}.yaml", spoke.name))
    }

    pub fn apps(&self) -> PathBuf {
        self.dir.join("apps")
    }

    pub fn helm_releases(&self) -> PathBuf {
        self.dir.join("helmreleases")
    }

    /// The name of the hub-side Kustomization that applies the spoke's HelmReleases,
    /// and of the ServiceAccount it applies them as.
    pub fn helm_kustomization(spoke: &SpokeConfig) -> String {
        format!("{}-helmreleases", spoke.name)
    }

    /// Everything in the spoke's own hub namespace (the Secret's, or a federated spoke's
    /// ConfigMap's: Flux reads either from the consumer's namespace), as Flux's hub-and-spoke example
    /// lays a spoke out: the Namespace; a Kustomization that applies `apps/` on the spoke
    /// with its kubeconfig; and one that applies `helmreleases/` on the hub, where
    /// helm-controller runs, as a ServiceAccount that may write only [`HUB_KINDS`] in that
    /// namespace, every object moved into it and every HelmRelease given spec.kubeConfig,
    /// so that each release is installed on the spoke and no name meets another spoke's.
    pub fn objects(&self, spoke: &SpokeConfig) -> String {
        let (name, ns) = (&spoke.name, &spoke.secret.namespace);
        let helm_name = Self::helm_kustomization(spoke);
        format!(
            "# Written by `spokekeeper add {name}`: what Flux deploys to spoke {name}, from its\n\
             # own hub namespace {ns}, which holds its Secret and no other spoke's.\n\
             apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n\
             ---\n{}{}---\n{}",
            own_account(spoke),
            self.account(
                ns,
                &helm_name,
                spoke.credential.mode == CredentialMode::Federated
            ),
            self.kustomizations(spoke, &helm_name),
        )
    }

    /// The ServiceAccount the hub-side Kustomization applies as, its Role and binding.
    /// A federated spoke's grants no ConfigMaps: its kubeConfig ConfigMap is in that
    /// namespace, and one written over it would choose where the controllers send their
    /// tokens and for which audience (any federated spoke's).
    fn account(&self, ns: &str, sa: &str, federated: bool) -> String {
        let rules: String = HUB_KINDS
            .iter()
            .filter(|(_, resources)| !(federated && *resources == "configmaps"))
            .map(|(group, resources)| {
                format!(
                    "  - apiGroups: [{group}]\n    resources: [{resources}]\n    \
                     verbs: [get, list, watch, create, update, patch, delete]\n"
                )
            })
            .collect();
        format!(
            "# The account the HelmReleases are applied as: it may write only these kinds,\n\
             # and only in {ns} (no Secret, no RBAC, no Kustomization, nothing cluster-wide).\n\
             apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {sa}\n  namespace: {ns}\n\
             ---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: {sa}\n  namespace: {ns}\n\
             rules:\n{rules}\
             ---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {sa}\n  namespace: {ns}\n\
             roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: {sa}\n\
             subjects:\n  - kind: ServiceAccount\n    name: {sa}\n    namespace: {ns}\n"
        )
    }

    /// The spoke's two Kustomizations.
    fn kustomizations(&self, spoke: &SpokeConfig, helm_name: &str) -> String {
        let (name, ns) = (&spoke.name, &spoke.secret.namespace);
        let (on_spoke_ref, patch_ref) = (reference(spoke, 4), reference(spoke, 12));
        let source = format!(
            "  sourceRef:\n    kind: GitRepository\n    name: {}\n    namespace: {}\n",
            self.source.name, self.source.namespace
        );
        let apps = slash_path(&self.apps());
        let helm = slash_path(&self.helm_releases());
        let (on_spoke, impersonate) = match &self.spoke_account {
            Some(sa) => (
                format!("  serviceAccountName: {sa}\n"),
                format!(
                    "        - op: add\n          path: /spec/serviceAccountName\n          value: {sa}\n"
                ),
            ),
            None => (String::new(), String::new()),
        };
        format!(
            "# Plain manifests in {apps} are applied on the spoke, with its kubeconfig.\n\
             apiVersion: kustomize.toolkit.fluxcd.io/v1\n\
             kind: Kustomization\n\
             metadata:\n  name: {name}\n  namespace: {ns}\n\
             spec:\n  interval: 10m\n  retryInterval: 1m\n  timeout: 5m\n  path: ./{apps}\n  prune: true\n\
             {source}{on_spoke}\
             \x20 kubeConfig:\n{on_spoke_ref}\
             ---\n\
             # HelmReleases in {helm} are applied on the hub, where helm-controller runs, as\n\
             # {helm_name}; each gets spec.kubeConfig, so its release is installed on the\n\
             # spoke. Give each spec.targetNamespace and spec.storageNamespace: without them\n\
             # it installs into, and stores in, namespace {ns} on the spoke.\n\
             apiVersion: kustomize.toolkit.fluxcd.io/v1\n\
             kind: Kustomization\n\
             metadata:\n  name: {helm_name}\n  namespace: {ns}\n\
             spec:\n  interval: 10m\n  retryInterval: 1m\n  timeout: 5m\n  path: ./{helm}\n  prune: true\n\
             \x20 serviceAccountName: {helm_name}\n\
             \x20 targetNamespace: {ns}\n\
             {source}\
             \x20 patches:\n    - target:\n        kind: HelmRelease\n      patch: |\n\
             \x20       - op: add\n          path: /spec/kubeConfig\n          value:\n\
             {patch_ref}{impersonate}"
        )
    }
}

/// A federated spoke's own hub ServiceAccount (credential.federated.service_account_name,
/// in this namespace), whose tokens the controllers present to it; none otherwise.
fn own_account(spoke: &SpokeConfig) -> String {
    let policy = spoke.credential.federated.as_ref();
    let Some(a) = policy.and_then(|p| p.own_account.as_ref()) else {
        return String::new();
    };
    format!(
        "# {name}'s own hub account: the controllers present its tokens to the spoke\n\
         # (the ConfigMap's serviceAccountName; their ObjectLevelWorkloadIdentity gate).\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {}\n  namespace: {}\n---\n",
        a.name,
        a.namespace,
        name = spoke.name
    )
}

/// spec.kubeConfig's reference to the spoke's credential, at column `indent`: a
/// federated spoke's ConfigMap (`configMapRef`, no key: Flux reads its generic
/// provider's keys), else its Secret's key. Both are read from the consumer's namespace.
fn reference(spoke: &SpokeConfig, indent: usize) -> String {
    let (pad, name) = (" ".repeat(indent), &spoke.secret.name);
    if spoke.credential.mode == CredentialMode::Federated {
        format!("{pad}configMapRef:\n{pad}  name: {name}\n")
    } else {
        let key = &spoke.secret.key;
        format!("{pad}secretRef:\n{pad}  name: {name}\n{pad}  key: {key}\n")
    }
}

/// An empty kustomization for a spoke directory that does not exist yet, so that its
/// Kustomization is Ready (a missing path fails it) until manifests are added.
pub const EMPTY_KUSTOMIZATION: &str = "# Add this spoke's manifests here and list them below.\n\
apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: []\n";

/// `rel` with `/` separators, as Flux and kustomize write paths.
pub fn slash_path(rel: &Path) -> String {
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// A Kustomization's spec.path as a directory relative to the repo root ("./" is ""),
/// None when it climbs out.
pub fn in_repo(path: &str) -> Option<PathBuf> {
    let mut dir = PathBuf::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(n) => dir.push(n),
            Component::CurDir | Component::RootDir => {}
            _ => return None,
        }
    }
    Some(dir)
}

/// Why the root kustomization.yaml cannot list the spoke's files.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error(transparent)]
    List(#[from] crate::text::BlockListError),
    #[error("does not parse: {0}")]
    Parse(String),
    #[error("does not parse once edited: {0}")]
    ParseEdited(String),
    #[error("does not list {0} once edited")]
    Missing(String),
}

/// `text` (a kustomization.yaml) with each of `entries` appended to its `resources:`
/// when not listed yet, comments and layout kept; the result is parsed again and must
/// list them all. None: nothing to add.
pub fn list_resources(text: &str, entries: &[String]) -> Result<Option<String>, ListError> {
    #[derive(Deserialize)]
    struct Kustomization {
        resources: Option<Vec<String>>,
    }
    let parse = |t: &str| {
        let max = usize::try_from(crate::fsutil::MAX_FILE_BYTES).unwrap_or(usize::MAX);
        serde_saphyr::from_str_with_options::<Kustomization>(t, crate::text::hostile_yaml(max))
            .map(|k| k.resources.unwrap_or_default())
            .map_err(|e| crate::text::one_line(&crate::text::yaml_fault(&e), 300))
    };
    let listed = parse(text).map_err(ListError::Parse)?;
    let new: Vec<&String> = entries
        .iter()
        .filter(|e| !listed.iter().any(|l| same_entry(l, e)))
        .collect();
    if new.is_empty() {
        return Ok(None);
    }
    let edited = match crate::text::block_list(text, "resources")? {
        Some(list) => {
            let pad = " ".repeat(list.indent);
            let gap = " ".repeat(list.gap);
            let mut items = String::from(if list.missing_eol { list.eol } else { "" });
            for e in &new {
                items.push_str(&format!("{pad}-{gap}{e}{}", list.eol));
            }
            format!("{}{items}{}", &text[..list.at], &text[list.at..])
        }
        None => {
            let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
            let mut out = text.to_string();
            if !out.is_empty() && !out.ends_with('\n') {
                out.push_str(eol);
            }
            out.push_str(&format!("resources:{eol}"));
            for e in &new {
                out.push_str(&format!("- {e}{eol}"));
            }
            out
        }
    };
    let after = parse(&edited).map_err(ListError::ParseEdited)?;
    if let Some(missing) = entries
        .iter()
        .find(|e| !after.iter().any(|l| same_entry(l, e)))
    {
        return Err(ListError::Missing(missing.clone()));
    }
    Ok(Some(edited))
}

/// `./x.yaml` and `x.yaml` are the same resource.
fn same_entry(listed: &str, entry: &str) -> bool {
    listed.trim_start_matches("./").trim_end_matches('/') == entry.trim_start_matches("./")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The Kustomizations add writes for `spoke` with the default layout under clusters/hub.
    pub(crate) fn for_tests(spoke: &SpokeConfig) -> String {
        Layout {
            root: "clusters/hub".into(),
            dir: Path::new("spokes").join(&spoke.name),
            source: Source::parse("flux-system").expect("a name"),
            spoke_account: None,
        }
        .objects(spoke)
    }

    #[test]
    fn a_root_path_from_the_hub_is_a_directory_inside_the_repo_or_refused() {
        assert_eq!(in_repo("./fluxcd"), Some(PathBuf::from("fluxcd")));
        assert_eq!(in_repo("./"), Some(PathBuf::new()));
        assert_eq!(
            in_repo("/clusters/hub/"),
            Some(PathBuf::from("clusters/hub"))
        );
        assert_eq!(in_repo("../etc"), None);
        assert_eq!(in_repo("clusters/../../etc"), None);
    }

    fn spoke() -> SpokeConfig {
        let text = "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - {name: edge-1, address: 10.0.0.1, secret: {namespace: edge-1}}\n";
        crate::config::Config::parse(text, "spokekeeper.yaml", Path::new("/x"))
            .unwrap()
            .spokes
            .remove(0)
    }

    fn documents(text: &str) -> Vec<serde_json::Value> {
        text.split("\n---\n")
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn the_objects_target_the_spoke_and_patch_every_helm_release() {
        let layout = Layout {
            root: "clusters/hub".into(),
            dir: "spokes/edge-1".into(),
            source: Source::parse("fleet").unwrap(),
            spoke_account: None,
        };
        let s = spoke();
        assert_eq!(
            layout.objects_file(&s),
            Path::new("clusters/hub/edge-1.yaml")
        );
        let text = layout.objects(&s);
        let docs = documents(&text);
        let [namespace, _, _, _, apps, helm] = docs.as_slice() else {
            panic!("{text}")
        };
        assert_eq!(namespace["kind"], "Namespace");
        assert_eq!(namespace["metadata"]["name"], "edge-1");
        assert_eq!(apps["metadata"]["name"], "edge-1");
        assert_eq!(apps["metadata"]["namespace"], "edge-1");
        assert_eq!(apps["spec"]["path"], "./spokes/edge-1/apps");
        assert_eq!(
            apps["spec"]["kubeConfig"]["secretRef"],
            serde_json::json!({"name": "edge-1-kubeconfig", "key": "value"})
        );
        // The source lives in flux-system, not in the spoke's namespace.
        let source = serde_json::json!({"kind": "GitRepository", "name": "fleet", "namespace": "flux-system"});
        assert_eq!(apps["spec"]["sourceRef"], source);
        assert_eq!(helm["spec"]["sourceRef"], source);
        assert_eq!(helm["metadata"]["name"], "edge-1-helmreleases");
        assert_eq!(helm["metadata"]["namespace"], "edge-1");
        assert!(
            helm["spec"].get("kubeConfig").is_none(),
            "applied on the hub"
        );
        assert_eq!(helm["spec"]["targetNamespace"], "edge-1");
        assert_eq!(helm["spec"]["serviceAccountName"], "edge-1-helmreleases");
        let patch = &helm["spec"]["patches"][0];
        assert_eq!(patch["target"], serde_json::json!({"kind": "HelmRelease"}));
        let ops: serde_json::Value =
            serde_saphyr::from_str(patch["patch"].as_str().unwrap()).unwrap();
        assert_eq!(
            ops,
            serde_json::json!([{"op": "add", "path": "/spec/kubeConfig",
                "value": {"secretRef": {"name": "edge-1-kubeconfig", "key": "value"}}}])
        );
    }

    #[test]
    fn a_federated_spokes_objects_name_its_configmap_without_a_key() {
        let config = "repo: {path: f}\nsealing: {cert: c.pem}\nhub: {}\ncredential: {federated: {issuer: \"https://hub.example:6443\"}}\nspokes:\n  - {name: edge-1, address: 10.0.0.1, secret: {namespace: edge-1}, credential: {mode: federated}}\n";
        let s = crate::config::Config::parse(config, "spokekeeper.yaml", Path::new("/x"))
            .unwrap()
            .spokes
            .remove(0);
        let text = tests::for_tests(&s);
        assert!(!text.contains("secretRef"), "{text}");
        let docs = documents(&text);
        let [.., apps, helm] = docs.as_slice() else {
            panic!("{text}")
        };
        let configmap = serde_json::json!({"configMapRef": {"name": "edge-1-kubeconfig"}});
        assert_eq!(apps["spec"]["kubeConfig"], configmap);
        assert_eq!(apps["metadata"]["namespace"], "edge-1");
        let ops: serde_json::Value =
            serde_saphyr::from_str(helm["spec"]["patches"][0]["patch"].as_str().unwrap()).unwrap();
        assert_eq!(
            ops,
            serde_json::json!([{"op": "add", "path": "/spec/kubeConfig", "value": configmap}])
        );
        // Nor may the hub-side account write a ConfigMap over it.
        let role = &docs[2];
        assert_eq!(role["kind"], "Role");
        let resources: Vec<&serde_json::Value> = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["resources"].as_array().unwrap())
            .collect();
        assert_eq!(
            resources,
            ["helmreleases", "helmrepositories", "ocirepositories"]
        );
        // The sealed modes keep the Secret's key.
        let sealed = tests::for_tests(&spoke());
        assert_eq!(sealed.matches("configMapRef").count(), 0, "{sealed}");
        assert_eq!(sealed.matches("key: value").count(), 2, "{sealed}");
    }

    #[test]
    fn the_hub_side_account_may_write_only_helm_objects_in_the_spokes_namespace() {
        let layout = Layout {
            root: "fluxcd".into(),
            dir: "spokes/edge-1".into(),
            source: Source::parse("flux-system/flux-system").unwrap(),
            spoke_account: None,
        };
        let docs = documents(&layout.objects(&spoke()));
        let [_, account, role, binding, _, _] = docs.as_slice() else {
            panic!("{docs:?}")
        };
        for d in [account, role, binding] {
            assert_eq!(d["metadata"]["namespace"], "edge-1", "{d}");
            assert_eq!(d["metadata"]["name"], "edge-1-helmreleases", "{d}");
        }
        assert_eq!(
            (&account["kind"], &role["kind"]),
            (&"ServiceAccount".into(), &"Role".into())
        );
        let granted: Vec<(String, String)> = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| {
                let group = r["apiGroups"][0].as_str().unwrap().to_string();
                r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(move |res| (group.clone(), res.as_str().unwrap().to_string()))
            })
            .collect();
        assert_eq!(
            granted,
            [
                ("helm.toolkit.fluxcd.io", "helmreleases"),
                ("source.toolkit.fluxcd.io", "helmrepositories"),
                ("source.toolkit.fluxcd.io", "ocirepositories"),
                ("", "configmaps"),
            ]
            .map(|(g, r)| (g.to_string(), r.to_string()))
        );
        assert_eq!(binding["kind"], "RoleBinding");
        assert_eq!(binding["roleRef"]["kind"], "Role");
        assert_eq!(
            binding["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": "edge-1-helmreleases", "namespace": "edge-1"}])
        );
    }

    #[test]
    fn a_source_is_namespace_slash_name_or_a_name_in_flux_system() {
        let s = Source::parse("tenants/fleet.git").unwrap();
        assert_eq!(
            (s.namespace.as_str(), s.name.as_str()),
            ("tenants", "fleet.git")
        );
        let s = Source::parse("flux-system").unwrap();
        assert_eq!(
            (s.namespace.as_str(), s.name.as_str()),
            ("flux-system", "flux-system")
        );
        for bad in ["", "a/", "/a", "a.b/c", "A", "a/b/c"] {
            assert_eq!(Source::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn resources_gain_what_is_missing_and_keep_their_comments() {
        let text = "# the hub\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - dev.yaml   # dev\n  - ./dev-kubeconfig-sealed.yaml\n# end\npatches: []\n";
        let out = list_resources(
            text,
            &["edge-1.yaml".into(), "dev-kubeconfig-sealed.yaml".into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            out,
            text.replace("sealed.yaml\n# end", "sealed.yaml\n  - edge-1.yaml\n# end")
        );
        // Already listed: nothing to do.
        assert_eq!(list_resources(&out, &["edge-1.yaml".into()]).unwrap(), None);
        // No resources yet: the key is added.
        let out = list_resources("kind: Kustomization", &["a.yaml".into()])
            .unwrap()
            .unwrap();
        assert_eq!(out, "kind: Kustomization\nresources:\n- a.yaml\n");
    }

    #[test]
    fn resources_it_cannot_edit_as_text_are_refused_with_the_line() {
        let e = list_resources(
            "kind: Kustomization\nresources: [a.yaml]\n",
            &["b.yaml".into()],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("line 2: resources is written on one line"),
            "{e}"
        );
        let e = list_resources("resources: {a: 1}\n", &["b.yaml".into()])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("does not parse"), "{e}");
    }

    #[test]
    fn a_kustomization_is_read_within_the_hostile_yaml_limits() {
        // As check reads it: an alias bomb and a merge key are refused, not expanded.
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let p = i - 1;
            let refs = vec![format!("*a{p}"); 9].join(", ");
            bomb.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        bomb.push_str("resources:\n- a.yaml\n");
        let merge = "base: &b {x: 1}\nother:\n  <<: *b\nresources:\n- a.yaml\n";
        for text in [bomb.as_str(), merge] {
            let e = list_resources(text, &["b.yaml".into()]).unwrap_err();
            assert!(matches!(e, ListError::Parse(_)), "{e}");
        }
    }

    #[test]
    fn a_kustomization_that_does_not_parse_is_not_quoted_in_the_error() {
        // Issue 39's rule: fleet-repo text may be a secret's line (a pushed link or a
        // pasted token); the error says where, never what.
        let token = "ghp_0123456789abcdefghijABCDEFGHIJ0123";
        for text in [
            format!("resources: \"{token}\"\n"),
            format!("resources:\n- a.yaml\n{token}: [\n"),
            format!("resources:\n  {token}: x\n"),
            format!("{token}: 1\n{token}: 2\nresources: []\n"),
            format!("resources:\n- [{token}]\n"),
            format!("resources:\n- *{token}\n"),
        ] {
            let e = list_resources(&text, &["b.yaml".into()]).unwrap_err();
            assert!(matches!(e, ListError::Parse(_)), "{e}");
            assert!(!e.to_string().contains("ghp_"), "quoted: {e}");
        }
    }
}
