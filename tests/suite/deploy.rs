//! deploy/: the Helm chart rendered by a real `helm` (scripts/install-helm), the Flux
//! example, the systemd units and the Dockerfile. Every Kubernetes object is read strictly
//! into its k8s-openapi type (or a small struct for a CRD) and written back: a field the
//! type does not know, or a value it reads differently, fails here rather than in a cluster.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, PodSpec, SecretVolumeSource, Service, ServiceAccount,
    VolumeMount,
};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use spokekeeper::config::Config;
use support::helm::{CHART, helm_command, run_helm};
use support::repo_root as root;

const RELEASE_NS: &str = "spokekeeper";

/// `helm template` of the chart, as the release "sk" in RELEASE_NS, with extra values files.
fn render(values: &[&Path]) -> Vec<Value> {
    let mut args = vec!["template", "sk", CHART, "--namespace", RELEASE_NS];
    let files: Vec<String> = values.iter().map(|p| p.display().to_string()).collect();
    for f in &files {
        args.extend(["--values", f.as_str()]);
    }
    documents(&run_helm(&args), "helm template")
}

fn render_with(values_yaml: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values_yaml).unwrap();
    render(&[&file])
}

fn documents(text: &str, what: &str) -> Vec<Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{what}: not YAML: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The first place where two JSON values differ, as a path.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for key in x.keys().chain(y.keys()) {
                let p = format!("{path}.{key}");
                match (x.get(key), y.get(key)) {
                    (Some(u), Some(v)) => {
                        if let Some(d) = first_difference(u, v, &p) {
                            return Some(d);
                        }
                    }
                    (Some(u), None) => {
                        return Some(format!("{p}: {u} is not kept (unknown field?)"));
                    }
                    (None, Some(v)) => return Some(format!("{p}: {v} appears on the way back")),
                    (None, None) => {}
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (u, v))| first_difference(u, v, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{path}: {a} became {b}")),
    }
}

/// Reads `doc` into `T` and writes it back: anything `T` drops or changes is an error.
fn strict<T: DeserializeOwned + Serialize>(doc: &Value, what: &str) -> T {
    let typed: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{what}: does not read as its type: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    if let Some(d) = first_difference(doc, &back, "") {
        panic!("{what}: {d}");
    }
    typed
}

// Custom resources: only the fields the deploy files use, and nothing else.

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Crd<S> {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: S,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ServiceMonitorSpec {
    selector: LabelSelector,
    endpoints: Vec<MonitorEndpoint>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MonitorEndpoint {
    port: String,
    path: String,
    interval: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PrometheusRuleSpec {
    groups: Vec<RuleGroup>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleGroup {
    name: String,
    rules: Vec<AlertRule>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AlertRule {
    alert: String,
    expr: String,
    #[serde(rename = "for", skip_serializing_if = "Option::is_none")]
    for_: Option<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SourceRef {
    kind: String,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct HelmReleaseSpec {
    interval: String,
    chart: HelmChartTemplate,
    #[serde(skip_serializing_if = "Option::is_none")]
    install: Option<Remediated>,
    #[serde(skip_serializing_if = "Option::is_none")]
    upgrade: Option<Remediated>,
    #[serde(skip_serializing_if = "Option::is_none")]
    values_from: Option<Vec<ValuesReference>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    values: Option<Value>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ValuesReference {
    kind: String,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    values_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    optional: Option<bool>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HelmChartTemplate {
    spec: HelmChartSpec,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct HelmChartSpec {
    chart: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    reconcile_strategy: Option<String>,
    source_ref: SourceRef,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Remediated {
    remediation: Remediation,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Remediation {
    retries: i64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GitRepositorySpec {
    interval: String,
    url: String,
    #[serde(rename = "ref", skip_serializing_if = "Option::is_none")]
    reference: Option<GitRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ignore: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GitRef {
    #[serde(skip_serializing_if = "Option::is_none")]
    tag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    branch: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FluxKustomizationSpec {
    interval: String,
    path: String,
    prune: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<String>,
    source_ref: SourceRef,
}

/// kustomize's own kustomization.yaml (not a Kubernetes object).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KustomizeFile {
    api_version: String,
    kind: String,
    resources: Vec<String>,
}

/// One object of each kind the deploy files may contain, read strictly.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
enum Object {
    Deployment(Deployment),
    Service(Service),
    ServiceAccount(ServiceAccount),
    ConfigMap(ConfigMap),
    Namespace(Namespace),
    Role(Role),
    RoleBinding(RoleBinding),
    NetworkPolicy(NetworkPolicy),
    ServiceMonitor(Crd<ServiceMonitorSpec>),
    PrometheusRule(Crd<PrometheusRuleSpec>),
    HelmRelease(Crd<HelmReleaseSpec>),
    GitRepository(Crd<GitRepositorySpec>),
    FluxKustomization(Crd<FluxKustomizationSpec>),
    KustomizeFile(KustomizeFile),
}

fn read_object(doc: &Value, origin: &str) -> Object {
    let api = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    let what = format!("{origin}: {api} {kind} {}", doc["metadata"]["name"]);
    match (api, kind) {
        ("apps/v1", "Deployment") => Object::Deployment(strict(doc, &what)),
        ("v1", "Service") => Object::Service(strict(doc, &what)),
        ("v1", "ServiceAccount") => Object::ServiceAccount(strict(doc, &what)),
        ("v1", "ConfigMap") => Object::ConfigMap(strict(doc, &what)),
        ("v1", "Namespace") => Object::Namespace(strict(doc, &what)),
        ("rbac.authorization.k8s.io/v1", "Role") => Object::Role(strict(doc, &what)),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => Object::RoleBinding(strict(doc, &what)),
        ("networking.k8s.io/v1", "NetworkPolicy") => Object::NetworkPolicy(strict(doc, &what)),
        ("monitoring.coreos.com/v1", "ServiceMonitor") => {
            Object::ServiceMonitor(strict(doc, &what))
        }
        ("monitoring.coreos.com/v1", "PrometheusRule") => {
            Object::PrometheusRule(strict(doc, &what))
        }
        ("helm.toolkit.fluxcd.io/v2", "HelmRelease") => Object::HelmRelease(strict(doc, &what)),
        ("source.toolkit.fluxcd.io/v1", "GitRepository") => {
            Object::GitRepository(strict(doc, &what))
        }
        ("kustomize.toolkit.fluxcd.io/v1", "Kustomization") => {
            Object::FluxKustomization(strict(doc, &what))
        }
        ("kustomize.config.k8s.io/v1beta1", "Kustomization") => {
            Object::KustomizeFile(strict(doc, &what))
        }
        _ => panic!("{what}: not a kind the deploy files are checked for: add it to this test"),
    }
}

fn read_all(docs: &[Value], origin: &str) -> Vec<Object> {
    docs.iter().map(|d| read_object(d, origin)).collect()
}

fn one<'a, T>(objects: &'a [Object], pick: impl Fn(&'a Object) -> Option<&'a T>) -> &'a T {
    let found: Vec<&T> = objects.iter().filter_map(pick).collect();
    assert_eq!(found.len(), 1, "expected exactly one of the kind");
    found[0]
}

fn deployment(objects: &[Object]) -> &Deployment {
    one(objects, |o| match o {
        Object::Deployment(d) => Some(d),
        _ => None,
    })
}

/// The Deployment's pod spec.
fn pod_spec(objects: &[Object]) -> &PodSpec {
    deployment(objects)
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
}

/// The Secret behind the pod's volume `name`.
fn secret_volume<'a>(pod: &'a PodSpec, name: &str) -> &'a SecretVolumeSource {
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("a {name} volume"));
    volume.secret.as_ref().unwrap()
}

/// Where `container` mounts the volume `name`.
fn volume_mount<'a>(container: &'a Container, name: &str) -> &'a VolumeMount {
    container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("the {name} volume is mounted"))
}

fn config_text(objects: &[Object]) -> &str {
    let cm = one(objects, |o| match o {
        Object::ConfigMap(c) => Some(c),
        _ => None,
    });
    cm.data.as_ref().unwrap()["spokekeeper.yaml"].as_str()
}

/// (namespace, apiGroup, resource, verb, resourceNames) for every rule of every Role.
type Grant = (String, String, String, String, Vec<String>);

fn grants(objects: &[Object]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for o in objects {
        let Object::Role(role) = o else { continue };
        let ns = role
            .metadata
            .namespace
            .clone()
            .expect("a Role names its namespace");
        for rule in role.rules.iter().flatten() {
            let names = rule.resource_names.clone().unwrap_or_default();
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    for verb in &rule.verbs {
                        out.insert((
                            ns.clone(),
                            group.clone(),
                            resource.clone(),
                            verb.clone(),
                            names.clone(),
                        ));
                    }
                }
            }
        }
    }
    out
}

fn grant(ns: &str, group: &str, resource: &str, verb: &str, names: &[&str]) -> Grant {
    (
        ns.into(),
        group.into(),
        resource.into(),
        verb.into(),
        names.iter().map(|s| s.to_string()).collect(),
    )
}

/// Listing the Flux consumers of the Secrets in `ns`, and requesting their reconcile: not
/// limited by name (the names are what the listing finds).
fn consumer_grants(ns: &str) -> Vec<Grant> {
    [
        ("kustomize.toolkit.fluxcd.io", "kustomizations"),
        ("helm.toolkit.fluxcd.io", "helmreleases"),
    ]
    .into_iter()
    .flat_map(|(group, resource)| {
        ["list", "get", "patch"]
            .into_iter()
            .map(move |verb| grant(ns, group, resource, verb, &[]))
    })
    .chain(
        [
            "gitrepositories",
            "ocirepositories",
            "buckets",
            "helmcharts",
            "externalartifacts",
        ]
        .into_iter()
        .map(|resource| grant(ns, "source.toolkit.fluxcd.io", resource, "get", &[])),
    )
    .chain([grant(
        ns,
        "source.toolkit.fluxcd.io",
        "gitrepositories",
        "patch",
        &[],
    )])
    .collect()
}

/// Recording Events about the spokes whose objects are in `ns` (hub::events): create,
/// and patch a repeat's series; names are generated, so not limited by name.
fn event_grants(ns: &str) -> Vec<Grant> {
    ["create", "patch"]
        .into_iter()
        .map(|verb| grant(ns, "events.k8s.io", "events", verb, &[]))
        .collect()
}

/// What the code calls on the hub API, and nothing more: the hub client and the Lease
/// lock export their calls, and the suite's verify::hub and daemon::lease check every
/// request the emulated API server saw against these same lists.
fn access() -> BTreeSet<(String, String, String)> {
    spokekeeper::hub::ACCESS
        .iter()
        .chain(spokekeeper::daemon::lease::ACCESS)
        .flat_map(|a| {
            a.verbs
                .iter()
                .map(move |v| (a.group.to_string(), a.resource.to_string(), v.to_string()))
        })
        .collect()
}

/// Every Role is bound to the chart's ServiceAccount only, by a RoleBinding in its own
/// namespace; nothing is cluster-wide.
fn assert_bindings(objects: &[Object], sa: &str) {
    let roles: BTreeSet<(String, String)> = objects
        .iter()
        .filter_map(|o| match o {
            Object::Role(r) => Some((
                r.metadata.namespace.clone().unwrap(),
                r.metadata.name.clone().unwrap(),
            )),
            _ => None,
        })
        .collect();
    let mut bound = BTreeSet::new();
    for o in objects {
        let Object::RoleBinding(b) = o else { continue };
        let ns = b.metadata.namespace.clone().unwrap();
        assert_eq!(
            b.role_ref.kind, "Role",
            "bindings refer to namespaced Roles only"
        );
        let subjects = b.subjects.as_ref().unwrap();
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].kind, "ServiceAccount");
        assert_eq!(subjects[0].name, sa);
        assert_eq!(subjects[0].namespace.as_deref(), Some(RELEASE_NS));
        bound.insert((ns, b.role_ref.name.clone()));
    }
    assert_eq!(bound, roles, "each Role has exactly its RoleBinding");
}

#[test]
fn chart_lints_strictly() {
    crate::support::requires!(HELM);
    let out = run_helm(&["lint", "--strict", CHART]);
    assert!(out.contains("0 chart(s) failed"), "{out}");
}

#[test]
fn chart_renders_only_strictly_typed_objects_with_defaults() {
    crate::support::requires!(HELM);
    let objects = read_all(&render(&[]), "chart (defaults)");
    let mut kinds: Vec<&str> = objects
        .iter()
        .map(|o| match o {
            Object::Deployment(_) => "Deployment",
            Object::Service(_) => "Service",
            Object::ServiceAccount(_) => "ServiceAccount",
            Object::ConfigMap(_) => "ConfigMap",
            Object::Role(_) => "Role",
            Object::RoleBinding(_) => "RoleBinding",
            Object::NetworkPolicy(_) => "NetworkPolicy",
            Object::ServiceMonitor(_) => "ServiceMonitor",
            Object::PrometheusRule(_) => "PrometheusRule",
            other => panic!("the chart renders {other:?}"),
        })
        .collect();
    let sa = one(&objects, |o| match o {
        Object::ServiceAccount(sa) => Some(sa),
        _ => None,
    });
    let pod = pod_spec(&objects);
    assert_eq!(sa.metadata.name, pod.service_account_name);
    kinds.sort();
    kinds.dedup();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "Deployment",
            "NetworkPolicy",
            "PrometheusRule",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
            "ServiceMonitor"
        ]
    );
}

#[test]
fn chart_rbac_grants_exactly_what_the_code_calls() {
    crate::support::requires!(HELM);
    let objects = read_all(&render(&[]), "chart (defaults)");
    let g = grants(&objects);
    let expected: BTreeSet<Grant> = [
        grant(RELEASE_NS, "coordination.k8s.io", "leases", "create", &[]),
        grant(
            RELEASE_NS,
            "coordination.k8s.io",
            "leases",
            "get",
            &["spokekeeper"],
        ),
        grant(
            RELEASE_NS,
            "coordination.k8s.io",
            "leases",
            "update",
            &["spokekeeper"],
        ),
        grant(
            "kube-system",
            "",
            "services",
            "get",
            &["sealed-secrets-controller"],
        ),
        grant(
            "kube-system",
            "",
            "services/proxy",
            "get",
            &["http:sealed-secrets-controller:http"],
        ),
        grant(
            "flux-system",
            "bitnami.com",
            "sealedsecrets",
            "get",
            &["dev-kubeconfig"],
        ),
    ]
    .into_iter()
    .chain(consumer_grants("flux-system"))
    .chain(event_grants("flux-system"))
    .collect();
    assert_eq!(g, expected);
    let used: BTreeSet<(String, String, String)> = g
        .into_iter()
        .map(|(_, group, res, verb, _)| (group, res, verb))
        .collect();
    // The chart always writes hub.controller.port; the Service is still read, by name,
    // for the controller's version label.
    let calls = access();
    assert_eq!(
        used, calls,
        "the chart grants what the code calls, no more, no less"
    );
    assert_bindings(&objects, "sk-spokekeeper");
}

#[test]
fn chart_rbac_follows_the_spokes_namespaces_and_names() {
    crate::support::requires!(HELM);
    let objects = read_all(
        &render_with(
            r#"
hub:
  controller: {namespace: sealed-secrets, name: sealer, port: web}
leaderElection: {leaseName: keeper}
config:
  spokes:
    - {name: dev, address: 10.0.0.1}
    - {name: edge, address: 10.0.0.2, secret: {name: edge-kc, namespace: edge-secrets}}
    - name: lab
      address: 10.0.0.3
      kustomization: {name: lab-apps, namespace: lab-flux}
    - {name: solo, address: 10.0.0.4, secret: {namespace: solo-secrets}, kustomization: {}}
"#,
        ),
        "chart (four spokes)",
    );
    let g = grants(&objects);
    let expected: BTreeSet<Grant> = [
        grant(RELEASE_NS, "coordination.k8s.io", "leases", "create", &[]),
        grant(
            RELEASE_NS,
            "coordination.k8s.io",
            "leases",
            "get",
            &["keeper"],
        ),
        grant(
            RELEASE_NS,
            "coordination.k8s.io",
            "leases",
            "update",
            &["keeper"],
        ),
        grant("sealed-secrets", "", "services", "get", &["sealer"]),
        grant(
            "sealed-secrets",
            "",
            "services/proxy",
            "get",
            &["http:sealer:web"],
        ),
        grant(
            "flux-system",
            "bitnami.com",
            "sealedsecrets",
            "get",
            &["dev-kubeconfig", "lab-kubeconfig"],
        ),
        grant(
            "edge-secrets",
            "bitnami.com",
            "sealedsecrets",
            "get",
            &["edge-kc"],
        ),
        // solo's `kustomization: {}` is the override with its defaults (solo in
        // flux-system, covered there): nothing is listed in its Secret's namespace.
        grant(
            "solo-secrets",
            "bitnami.com",
            "sealedsecrets",
            "get",
            &["solo-kubeconfig"],
        ),
        grant(
            "lab-flux",
            "kustomize.toolkit.fluxcd.io",
            "kustomizations",
            "get",
            &["lab-apps"],
        ),
        grant(
            "lab-flux",
            "kustomize.toolkit.fluxcd.io",
            "kustomizations",
            "patch",
            &["lab-apps"],
        ),
    ]
    .into_iter()
    // dev and edge: every consumer of their Secret, in the Secret's namespace; lab (and
    // solo): the configured Kustomization alone, by name.
    .chain(consumer_grants("flux-system"))
    .chain(consumer_grants("edge-secrets"))
    // Events where each spoke's objects are: its consumers' namespace, its configured
    // Kustomization's, and its SealedSecret's when nothing deploys with it.
    .chain(
        ["flux-system", "edge-secrets", "solo-secrets", "lab-flux"]
            .into_iter()
            .flat_map(event_grants),
    )
    .collect();
    assert_eq!(g, expected);
    assert_bindings(&objects, "sk-spokekeeper");
    let config: Value = serde_saphyr::from_str(config_text(&objects)).unwrap();
    assert_eq!(
        config["hub"]["controller"],
        serde_json::json!({"namespace": "sealed-secrets", "name": "sealer", "port": "web"})
    );
}

/// The Grafana dashboard: off by default; on, one ConfigMap labelled for Grafana's
/// dashboard sidecar holding exactly the JSON under deploy/ (alerts::dashboard checks
/// its queries against a real scrape).
#[test]
fn chart_ships_the_grafana_dashboard_for_the_sidecar_when_asked() {
    crate::support::requires!(HELM);
    let labelled = |docs: &[Value]| -> Vec<Value> {
        docs.iter()
            .filter(|d| d["metadata"]["labels"]["grafana_dashboard"].is_string())
            .cloned()
            .collect()
    };
    assert!(labelled(&render(&[])).is_empty(), "off by default");
    let docs =
        render_with("grafanaDashboard:\n  enabled: true\n  annotations: {grafana_folder: Flux}\n");
    let found = labelled(&docs);
    assert_eq!(found.len(), 1, "{found:#?}");
    let cm = &found[0];
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(cm["metadata"]["namespace"], RELEASE_NS);
    assert_eq!(cm["metadata"]["annotations"]["grafana_folder"], "Flux");
    let shipped: Value =
        serde_json::from_str(cm["data"]["spokekeeper.json"].as_str().unwrap()).unwrap();
    let file = std::fs::read_to_string(
        support::repo_root().join("deploy/helm/spokekeeper/dashboards/spokekeeper.json"),
    )
    .unwrap();
    assert_eq!(shipped, serde_json::from_str::<Value>(&file).unwrap());
    assert_eq!(shipped["uid"], "spokekeeper");
    // Strictly typed, like every other object the chart renders.
    read_all(&docs, "chart (dashboard)");
}

#[test]
fn chart_without_hub_or_lease_grants_nothing_and_runs_one_replica() {
    crate::support::requires!(HELM);
    let objects = read_all(
        &render_with("hub: {enabled: false}\nleaderElection: {enabled: false}\n"),
        "chart (no hub, no lease)",
    );
    assert!(grants(&objects).is_empty());
    assert!(
        !objects
            .iter()
            .any(|o| matches!(o, Object::Role(_) | Object::RoleBinding(_)))
    );
    let d = deployment(&objects);
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(
        spec.strategy.as_ref().unwrap().type_.as_deref(),
        Some("Recreate")
    );
    let args = main_container_args(d);
    assert!(!args.iter().any(|a| a == "--leader-elect"), "{args:?}");
    assert_eq!(
        args, CHART_ARGS_SINGLE,
        "the binary's unit tests parse these"
    );
    assert_eq!(subcommand(&args), "run");
}

/// The chart's NetworkPolicy in `namespace`, if it renders one.
fn network_policy_in<'a>(objects: &'a [Object], namespace: &str) -> Option<&'a NetworkPolicy> {
    let found: Vec<&NetworkPolicy> = objects
        .iter()
        .filter_map(|o| match o {
            Object::NetworkPolicy(n) if n.metadata.namespace.as_deref() == Some(namespace) => {
                Some(n)
            }
            _ => None,
        })
        .collect();
    assert!(
        found.len() <= 1,
        "more than one NetworkPolicy in {namespace}"
    );
    found.first().copied()
}

/// The chart's NetworkPolicy for its own pod, if it renders one.
fn network_policy(objects: &[Object]) -> Option<&NetworkPolicy> {
    network_policy_in(objects, RELEASE_NS)
}

/// The labels of the Deployment's pod template.
fn template_labels(objects: &[Object]) -> BTreeMap<String, String> {
    deployment(objects)
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap()
}

/// Whether `selector` (matchLabels only, as the chart writes it) selects `labels`.
fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    assert!(
        selector.match_expressions.is_none(),
        "the chart's pod selector uses matchLabels only"
    );
    let wanted = selector.match_labels.clone().unwrap_or_default();
    !wanted.is_empty() && wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The ports of the daemon's container: (containerPort, name) and the probes' ports.
fn metrics_port(objects: &[Object]) -> i32 {
    let pod = pod_spec(objects);
    let c = &pod.containers[0];
    let port = c
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .expect("a container port named metrics");
    for probe in [&c.liveness_probe, &c.readiness_probe] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(
            get.port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("metrics".into()),
            "the probes use the metrics port"
        );
    }
    port.container_port
}

fn tcp_port(n: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n)),
        protocol: Some("TCP".into()),
        end_port: None,
    }
}

fn peer_value(p: &NetworkPolicyPeer) -> Value {
    serde_json::to_value(p).unwrap()
}

#[test]
fn chart_network_policy_admits_only_the_scrape_to_the_metrics_port_and_values_widen_it() {
    crate::support::requires!(HELM);
    let objects = read_all(&render(&[]), "chart (defaults)");
    let np = network_policy(&objects).expect("the chart renders a NetworkPolicy by default");
    let spec = np.spec.as_ref().unwrap();
    let template_labels = template_labels(&objects);
    assert!(
        spec.pod_selector
            .as_ref()
            .is_some_and(|sel| selects(sel, &template_labels)),
        "the NetworkPolicy's podSelector {:?} does not select the pod {template_labels:?}",
        spec.pod_selector
    );
    // Egress stays open: SSH to nodes, the hub API, git, the forge, the sinks.
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Ingress".to_string()][..])
    );
    assert!(spec.egress.is_none());
    let port = metrics_port(&objects);
    let ingress = spec.ingress.as_ref().unwrap();
    assert_eq!(ingress.len(), 1, "one ingress rule: {ingress:?}");
    assert_eq!(ingress[0].ports.as_deref(), Some(&[tcp_port(port)][..]));
    let from: Vec<Value> = ingress[0].from.iter().flatten().map(peer_value).collect();
    assert_eq!(
        from,
        [serde_json::json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        })],
        "by default only Prometheus in namespace monitoring is admitted"
    );

    // Widened: another scraper, the nodes for the probes, an extra rule, restricted egress,
    // and the port follows metrics.port.
    let objects = read_all(
        &render_with(
            "metrics: {port: 9100}\n\
             networkPolicy:\n\
             \x20 scrapeFrom: [{namespaceSelector: {matchLabels: {team: obs}}, podSelector: {}}]\n\
             \x20 probeCIDRs: [10.0.0.0/24]\n\
             \x20 extraIngress: [{from: [{ipBlock: {cidr: 192.168.0.0/16}}], ports: [{port: 9100}]}]\n\
             \x20 egress: [{ports: [{port: 53, protocol: UDP}]}]\n",
        ),
        "chart (network policy widened)",
    );
    let spec = network_policy(&objects).unwrap().spec.clone().unwrap();
    assert_eq!(metrics_port(&objects), 9100);
    let ingress = spec.ingress.unwrap();
    assert_eq!(ingress.len(), 2, "{ingress:?}");
    assert_eq!(ingress[0].ports.as_deref(), Some(&[tcp_port(9100)][..]));
    let from: Vec<Value> = ingress[0].from.iter().flatten().map(peer_value).collect();
    assert_eq!(
        from,
        [
            serde_json::json!({"namespaceSelector": {"matchLabels": {"team": "obs"}}, "podSelector": {}}),
            serde_json::json!({"ipBlock": {"cidr": "10.0.0.0/24"}}),
        ]
    );
    assert_eq!(
        serde_json::to_value(&ingress[1]).unwrap(),
        serde_json::json!({"from": [{"ipBlock": {"cidr": "192.168.0.0/16"}}], "ports": [{"port": 9100}]})
    );
    assert_eq!(
        spec.policy_types.unwrap(),
        ["Ingress".to_string(), "Egress".to_string()]
    );
    assert_eq!(spec.egress.unwrap().len(), 1);

    // Nobody to admit would mean everybody: refused, with the fix.
    let out = helm_command(&[
        "template",
        "sk",
        CHART,
        "--set",
        "networkPolicy.scrapeFrom=null",
    ])
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("networkPolicy.enabled: false"),
        "{err}"
    );

    let objects = read_all(
        &render_with("networkPolicy: {enabled: false}\n"),
        "chart (no network policy)",
    );
    assert!(network_policy(&objects).is_none());
}

/// Issue 40 (8): Flux's allow-egress policy admits only flux-system's pods to
/// notification-controller; asked to, the chart installs beside it the one ingress rule
/// spokekeeper's events need: its own pods, from the release's namespace, to port 9090 of
/// notification-controller's pods. Off by default.
#[test]
fn chart_admits_its_pods_to_notification_controllers_event_port_when_asked() {
    crate::support::requires!(HELM);
    let objects = read_all(&render(&[]), "chart (defaults)");
    assert!(
        network_policy_in(&objects, "flux-system").is_none(),
        "off by default"
    );
    let objects = read_all(
        &render_with("fluxNotificationPolicy: {enabled: true}\n"),
        "chart (notification policy)",
    );
    assert!(
        network_policy(&objects).is_some(),
        "the pod's own policy stays"
    );
    let np = network_policy_in(&objects, "flux-system").expect("a policy in flux-system");
    let spec = np.spec.clone().unwrap();
    let notification = BTreeMap::from([("app".to_string(), "notification-controller".to_string())]);
    assert!(
        spec.pod_selector
            .as_ref()
            .is_some_and(|s| selects(s, &notification)),
        "{:?}",
        spec.pod_selector
    );
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Ingress".to_string()][..])
    );
    assert!(spec.egress.is_none());
    let ingress = spec.ingress.unwrap();
    assert_eq!(ingress.len(), 1, "{ingress:?}");
    assert_eq!(ingress[0].ports.as_deref(), Some(&[tcp_port(9090)][..]));
    let from = ingress[0].from.clone().unwrap();
    assert_eq!(from.len(), 1, "{from:?}");
    let ns = from[0].namespace_selector.as_ref().unwrap();
    let release = BTreeMap::from([(
        "kubernetes.io/metadata.name".to_string(),
        RELEASE_NS.to_string(),
    )]);
    assert_eq!(ns.match_labels.as_ref(), Some(&release));
    let template_labels = template_labels(&objects);
    let pods = from[0].pod_selector.as_ref().unwrap();
    assert!(
        selects(pods, &template_labels),
        "{pods:?} selects {template_labels:?}"
    );
    // Another Flux namespace and controller labels.
    let objects = read_all(
        &render_with(
            "fluxNotificationPolicy:\n  enabled: true\n  namespace: flux\n  \
             podSelector: {matchLabels: {app: null, app.kubernetes.io/component: notification-controller}}\n",
        ),
        "chart (notification policy elsewhere)",
    );
    let np = network_policy_in(&objects, "flux").expect("a policy in flux");
    let selector = np.spec.as_ref().unwrap().pod_selector.clone().unwrap();
    assert_eq!(
        serde_json::to_value(selector).unwrap(),
        serde_json::json!({"matchLabels": {"app.kubernetes.io/component": "notification-controller"}})
    );
}

fn main_container_args(d: &Deployment) -> Vec<String> {
    let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let c = pod
        .containers
        .iter()
        .find(|c| c.name == "spokekeeper")
        .unwrap();
    assert!(
        c.command.is_none(),
        "the image's ENTRYPOINT runs the binary"
    );
    c.args.clone().unwrap()
}

/// What the chart's container runs, with and without leader election: the binary's unit
/// tests (src/cli/tests.rs) parse these same arguments into what they mean.
const CHART_ARGS_LEADER: [&str; 6] = [
    "--config",
    "/etc/spokekeeper/spokekeeper.yaml",
    "run",
    "--leader-elect",
    "--lease-name",
    "spokekeeper",
];
const CHART_ARGS_SINGLE: [&str; 3] = ["--config", "/etc/spokekeeper/spokekeeper.yaml", "run"];

/// The subcommand the built binary runs for `args`: its own parser reads them all (an
/// unknown flag or a bad value fails) and `--help`, last, names the command instead of
/// running it.
fn subcommand(args: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "spokekeeper does not accept {args:?}: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let usage = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Usage: spokekeeper "))
        .unwrap_or_else(|| panic!("no usage line for {args:?}: {stdout}"));
    usage.split_whitespace().next().unwrap_or("").to_string()
}

#[test]
fn chart_pod_is_locked_down_and_wired_to_its_files() {
    crate::support::requires!(HELM);
    let objects = read_all(&render(&[]), "chart (defaults)");
    let d = deployment(&objects);
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.as_ref().unwrap();
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(
        psc.run_as_user,
        Some(65532),
        "the Dockerfile's spokekeeper uid"
    );
    assert_eq!(
        psc.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    let all: Vec<_> = pod
        .init_containers
        .iter()
        .flatten()
        .chain(&pod.containers)
        .collect();
    assert_eq!(all.len(), 2);
    for c in &all {
        let sc = c
            .security_context
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no securityContext", c.name));
        assert_eq!(sc.run_as_non_root, Some(true), "{}", c.name);
        assert_eq!(sc.read_only_root_filesystem, Some(true), "{}", c.name);
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(sc.privileged, None, "{}", c.name);
        let caps = sc.capabilities.as_ref().unwrap();
        assert_eq!(
            caps.drop.as_deref(),
            Some(&["ALL".to_string()][..]),
            "{}",
            c.name
        );
        assert_eq!(caps.add, None, "{}", c.name);
        // Whatever is written goes to emptyDir volumes: the state dir (HOME, the clone) and /tmp.
        let mounts: BTreeMap<&str, &str> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.mount_path.as_str(), m.name.as_str()))
            .collect();
        assert_eq!(
            mounts.get("/var/lib/spokekeeper"),
            Some(&"state"),
            "{}",
            c.name
        );
        assert_eq!(mounts.get("/tmp"), Some(&"tmp"), "{}", c.name);
        let env: BTreeMap<&str, &str> = c
            .env
            .iter()
            .flatten()
            .filter_map(|e| Some((e.name.as_str(), e.value.as_deref()?)))
            .collect();
        assert_eq!(env.get("HOME"), Some(&"/var/lib/spokekeeper"), "{}", c.name);
        let git_ssh = env["GIT_SSH_COMMAND"];
        assert!(git_ssh.contains("StrictHostKeyChecking=yes") && git_ssh.contains("BatchMode=yes"));
    }
    let volumes: BTreeMap<&str, &k8s_openapi::api::core::v1::Volume> = pod
        .volumes
        .iter()
        .flatten()
        .map(|v| (v.name.as_str(), v))
        .collect();
    assert!(volumes["state"].empty_dir.is_some() && volumes["tmp"].empty_dir.is_some());
    // A push cannot fill the node's disk: the clone's volume is bounded.
    let limit = |objects: &[Object]| {
        let pod = pod_spec(objects);
        let state = pod.volumes.iter().flatten().find(|v| v.name == "state");
        state
            .and_then(|v| v.empty_dir.as_ref())
            .and_then(|e| e.size_limit.as_ref())
            .map(|q| q.0.clone())
    };
    assert_eq!(limit(&objects).as_deref(), Some("1Gi"));
    let raised = read_all(
        &render_with("fleet:\n  diskLimit: 8Gi\n"),
        "chart (diskLimit)",
    );
    assert_eq!(limit(&raised).as_deref(), Some("8Gi"));
    for (name, keys) in [
        ("ssh", ["id_ed25519", "known_hosts"]),
        ("git", ["identity", "known_hosts"]),
    ] {
        let secret = volumes[name].secret.as_ref().unwrap();
        assert_eq!(
            secret.default_mode,
            Some(0o440),
            "{name}: not readable by others"
        );
        let items: Vec<&str> = secret
            .items
            .iter()
            .flatten()
            .map(|i| i.key.as_str())
            .collect();
        assert_eq!(items, keys, "{name}");
    }

    // The container runs `spokekeeper run` with leader election, on the config the chart writes.
    let args = main_container_args(d);
    assert_eq!(
        args, CHART_ARGS_LEADER,
        "the binary's unit tests parse these"
    );
    assert_eq!(subcommand(&args), "run");
    let main = pod
        .containers
        .iter()
        .find(|c| c.name == "spokekeeper")
        .unwrap();
    let env_from_field: BTreeMap<&str, &str> = main
        .env
        .iter()
        .flatten()
        .filter_map(|e| {
            let f = e.value_from.as_ref()?.field_ref.as_ref()?;
            Some((e.name.as_str(), f.field_path.as_str()))
        })
        .collect();
    assert_eq!(env_from_field.get("POD_NAME"), Some(&"metadata.name"));
    assert_eq!(
        env_from_field.get("POD_NAMESPACE"),
        Some(&"metadata.namespace")
    );
    let mounts: BTreeMap<&str, (&str, Option<&str>)> = main
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| {
            (
                m.mount_path.as_str(),
                (m.name.as_str(), m.sub_path.as_deref()),
            )
        })
        .collect();
    assert_eq!(
        mounts["/etc/spokekeeper/spokekeeper.yaml"],
        ("config", Some("spokekeeper.yaml"))
    );
    assert_eq!(mounts["/etc/spokekeeper/ssh"], ("ssh", None));

    // The config points at those mounts and listens where the probes and the Service look.
    let config: Value = serde_saphyr::from_str(config_text(&objects)).unwrap();
    assert_eq!(config["ssh"]["identity"], "/etc/spokekeeper/ssh/id_ed25519");
    assert_eq!(
        config["ssh"]["known_hosts"],
        "/etc/spokekeeper/ssh/known_hosts"
    );
    assert_eq!(config["repo"]["path"], "/var/lib/spokekeeper/fleet");
    assert_eq!(
        config["sealing"]["cert"], "/var/lib/spokekeeper/fleet/keys/sealed-secrets-infra.pem",
        "the pinned certificate lives in the fleet repo"
    );
    assert_eq!(config["metrics"]["listen"], "0.0.0.0:9464");
    assert_eq!(
        config["hub"]["controller"],
        serde_json::json!({"namespace": "kube-system", "name": "sealed-secrets-controller", "port": "http"})
    );
    let port = &main.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.container_port),
        (Some("metrics"), 9464)
    );
    for (probe, path) in [
        (&main.liveness_probe, "/healthz"),
        (&main.readiness_probe, "/readyz"),
    ] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.path.as_deref(), Some(path));
    }
    let svc = one(&objects, |o| match o {
        Object::Service(s) => Some(s),
        _ => None,
    });
    let sp = &svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    assert_eq!((sp.name.as_deref(), sp.port), (Some("metrics"), 9464));
}

#[test]
fn chart_config_is_accepted_by_spokekeeper() {
    crate::support::requires!(HELM);
    let objects = read_all(&render(&[]), "chart (defaults)");
    let text = config_text(&objects);
    let config = Config::parse(text, "spokekeeper.yaml", Path::new("/etc/spokekeeper"))
        .unwrap_or_else(|e| panic!("the chart's spokekeeper.yaml is refused: {e}\n{text}"));
    assert_eq!(config.spokes[0].name, "dev");
    assert_eq!(config.repo.path, Path::new("/var/lib/spokekeeper/fleet"));
    assert!(config.spokes[0].ssh.sudo);
}

/// Upstream controller.yaml's Service port is unnamed: `port: ""` is granted and
/// configured as kubeseal asks for it (`http:NAME:`), not refused as a missing value.
#[test]
fn chart_accepts_the_controllers_unnamed_port() {
    crate::support::requires!(HELM);
    let objects = read_all(
        &render_with("hub:\n  controller: {port: \"\"}\n"),
        "chart (unnamed controller port)",
    );
    let proxy: Vec<Grant> = grants(&objects)
        .into_iter()
        .filter(|g| g.2 == "services/proxy")
        .collect();
    assert_eq!(
        proxy,
        [grant(
            "kube-system",
            "",
            "services/proxy",
            "get",
            &["http:sealed-secrets-controller:"]
        )]
    );
    let text = config_text(&objects);
    let config = Config::parse(text, "spokekeeper.yaml", Path::new("/etc/spokekeeper"))
        .unwrap_or_else(|e| panic!("the chart's spokekeeper.yaml is refused: {e}\n{text}"));
    assert_eq!(config.hub.unwrap().controller.port.as_deref(), Some(""));
}

/// Metric names `/metrics` serves, read from what the daemon's registry encodes after a
/// tick with one rotated and one failed spoke (a family without series is not written).
fn served_metric_names() -> BTreeSet<String> {
    use spokekeeper::rotate::{Outcome, Reason, SpokeReport, TickReport};
    let spoke = |name: &str, outcome, reason| SpokeReport {
        reason,
        ca_not_after: Some(time::OffsetDateTime::now_utc()),
        client_not_after: Some(time::OffsetDateTime::now_utc()),
        ..SpokeReport::new(name, outcome)
    };
    let report = TickReport {
        pushed: true,
        ..TickReport::of(vec![
            spoke(
                "dev",
                Outcome::Rotated {
                    commit: "abc".into(),
                },
                Some(Reason::Initial),
            ),
            spoke(
                "test",
                Outcome::Failed(spokekeeper::rotate::SpokeError::Unreachable(
                    spokekeeper::spoke::ProbeError::Refused {
                        server: "https://10.0.0.2:6443".into(),
                    },
                )),
                None,
            ),
            spoke(
                "prod",
                Outcome::Pending {
                    branch: "spokekeeper/prod".into(),
                    commit: None,
                    pull_request: Some(spokekeeper::forge::PullRequest {
                        number: 7,
                        url: "https://github.com/org/fleet/pull/7".into(),
                        created_at: time::OffsetDateTime::now_utc(),
                    }),
                    change: None,
                    pending_seconds: Some(60),
                },
                Some(Reason::Initial),
            ),
        ])
    };
    // The pushed credential as the hub took it.
    let mut report = report;
    report.spokes[0].hub = Some(Box::new(support::reports::dev_hub_report(
        spokekeeper::hub::Kind::Kustomization,
        "dev",
        true,
    )));
    let metrics = spokekeeper::metrics::Metrics::new();
    metrics.observe_tick(
        &report,
        std::time::Duration::from_secs(1),
        std::time::SystemTime::now(),
    );
    metrics.set_cert_not_after("dev", "serving", time::OffsetDateTime::now_utc());
    metrics.set_sealing_not_after(Some(time::OffsetDateTime::now_utc()));
    let text = metrics.encode().unwrap();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for s in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{s}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

#[test]
fn prometheus_rules_use_served_metrics_and_grade_like_the_daemon() {
    crate::support::requires!(HELM);
    let served = served_metric_names();
    for m in [
        "spokekeeper_spoke_up",
        "spokekeeper_errors_total",
        "spokekeeper_rotations_total",
    ] {
        assert!(served.contains(m), "{m} not in {served:?}");
    }
    let objects = read_all(&render(&[]), "chart (defaults)");
    let rule = one(&objects, |o| match o {
        Object::PrometheusRule(r) => Some(r),
        _ => None,
    });
    let rules: Vec<&AlertRule> = rule.spec.groups.iter().flat_map(|g| &g.rules).collect();
    let mut used = BTreeSet::new();
    for r in &rules {
        let mut rest = r.expr.as_str();
        while let Some(i) = rest.find("spokekeeper_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                served.contains(&name),
                "{}: {name} is not a metric spokekeeper serves",
                r.alert
            );
            used.insert(name.clone());
            rest = &rest[i + name.len()..];
        }
        let severity = r.labels["severity"].as_str();
        assert!(
            matches!(severity, "warning" | "critical"),
            "{}: {severity}",
            r.alert
        );
        assert!(r.annotations.contains_key("summary") && r.annotations.contains_key("description"));
    }
    for m in [
        "spokekeeper_certificate_not_after_timestamp_seconds",
        "spokekeeper_spoke_up",
        "spokekeeper_errors_total",
        "spokekeeper_last_tick_timestamp_seconds",
        "spokekeeper_hub_synced",
        "spokekeeper_hub_ready",
        "spokekeeper_pending_review_age_seconds",
        "spokekeeper_sealing_cert_trusted",
    ] {
        assert!(used.contains(m), "no alert on {m}");
    }
    // Expiry: a warning and a critical level, at the daemon's default thresholds.
    let expiring: BTreeMap<&str, &str> = rules
        .iter()
        .filter(|r| r.alert == "SpokekeeperCertificateExpiring")
        .map(|r| (r.labels["severity"].as_str(), r.expr.as_str()))
        .collect();
    assert!(expiring["warning"].contains("< 2592000") && expiring["warning"].contains(">= 604800"));
    assert!(expiring["critical"].contains("< 604800") && expiring["critical"].contains("> 0"));
    let names: BTreeSet<&str> = rules.iter().map(|r| r.alert.as_str()).collect();
    for a in [
        "SpokekeeperCertificateExpired",
        "SpokekeeperSpokeUnreachable",
        "SpokekeeperRotationFailing",
        "SpokekeeperTickStale",
        "SpokekeeperDown",
    ] {
        assert!(names.contains(a), "no {a}");
    }
    // The scrape job the rules select is the Service the ServiceMonitor scrapes.
    let sm = one(&objects, |o| match o {
        Object::ServiceMonitor(s) => Some(s),
        _ => None,
    });
    assert_eq!(sm.spec.endpoints[0].port, "metrics");
    assert_eq!(sm.spec.endpoints[0].path, "/metrics");
    let down = rules.iter().find(|r| r.alert == "SpokekeeperDown").unwrap();
    assert!(
        down.expr.contains(r#"job="sk-spokekeeper""#),
        "{}",
        down.expr
    );
}

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

/// `Key=Value` lines by section; repeated keys keep every value.
fn ini(text: &str, what: &str) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut section = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.to_string());
            out.entry(name.to_string()).or_default();
            continue;
        }
        let s = section
            .as_ref()
            .unwrap_or_else(|| panic!("{what}:{}: outside a section", n + 1));
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{what}:{}: not Key=Value: {line}", n + 1));
        assert!(
            !k.trim().is_empty() && k.trim().chars().all(|c| c.is_ascii_alphanumeric()),
            "{what}:{}: bad key {k:?}",
            n + 1
        );
        out.get_mut(s)
            .unwrap()
            .entry(k.trim().into())
            .or_default()
            .push(v.trim().into());
    }
    out
}

fn unit(name: &str) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let path = root().join("deploy/systemd").join(name);
    ini(&std::fs::read_to_string(&path).unwrap(), name)
}

/// A unit's ExecStart= after the binary: the arguments and the subcommand they run (the
/// binary's unit tests parse the same lines into what they mean).
fn exec_start(u: &BTreeMap<String, BTreeMap<String, Vec<String>>>) -> (Vec<String>, String) {
    let lines = &u["Service"]["ExecStart"];
    assert_eq!(lines.len(), 1);
    let words: Vec<String> = lines[0].split_whitespace().map(String::from).collect();
    assert_eq!(words[0], "/usr/local/bin/spokekeeper");
    let args = words[1..].to_vec();
    assert_eq!(args[..2], ["--config", "/etc/spokekeeper/spokekeeper.yaml"]);
    let sub = subcommand(&args);
    (args, sub)
}

/// systemd's own check of the units (no running systemd needed), with the binary path
/// pointed at the built spokekeeper, since verify insists that ExecStart= exists.
/// Any warning (an unknown key, a value it cannot parse) fails, not just errors.
fn systemd_analyze_verify(names: &[&str]) {
    let analyze = Path::new("/usr/bin/systemd-analyze");
    assert!(
        analyze.exists(),
        "systemd-analyze is needed at {}: apt-get install systemd (scripts/test does)",
        analyze.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for name in names {
        let text = std::fs::read_to_string(root().join("deploy/systemd").join(name)).unwrap();
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            text.replace(
                "/usr/local/bin/spokekeeper",
                env!("CARGO_BIN_EXE_spokekeeper"),
            ),
        )
        .unwrap();
        paths.push(path);
    }
    let out = Command::new(analyze)
        .args(["verify", "--man=no"])
        .args(&paths)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify {names:?}: {}\n{stderr}",
        out.status
    );
}

#[test]
fn systemd_units_verify_and_run_the_daemon_and_a_timed_rotation() {
    crate::support::requires!(SYSTEMD_ANALYZE);
    systemd_analyze_verify(&[
        "spokekeeper.service",
        "spokekeeper-rotate.service",
        "spokekeeper-rotate.timer",
    ]);
    let daemon = unit("spokekeeper.service");
    assert_eq!(
        daemon.keys().map(String::as_str).collect::<Vec<_>>(),
        ["Install", "Service", "Unit"]
    );
    assert_eq!(exec_start(&daemon).1, "run");
    let svc = &daemon["Service"];
    assert_eq!(svc["User"], ["spokekeeper"]);
    assert_eq!(
        svc["ExecReload"],
        ["/bin/kill -HUP $MAINPID"],
        "SIGHUP reloads the config"
    );
    assert_eq!(svc["NoNewPrivileges"], ["yes"]);
    assert_eq!(svc["ProtectSystem"], ["strict"]);
    assert_eq!(svc["StateDirectory"], ["spokekeeper"]);

    let oneshot = unit("spokekeeper-rotate.service");
    assert_eq!(oneshot["Service"]["Type"], ["oneshot"]);
    let (args, sub) = exec_start(&oneshot);
    assert_eq!(sub, "rotate");
    assert_eq!(
        args[2..],
        ["rotate", "--all"],
        "every spoke, not forced, not a dry run"
    );
    assert!(
        !oneshot.contains_key("Install"),
        "started by the timer only"
    );

    let timer = unit("spokekeeper-rotate.timer");
    assert_eq!(
        timer.keys().map(String::as_str).collect::<Vec<_>>(),
        ["Install", "Timer", "Unit"]
    );
    assert_eq!(timer["Timer"]["Unit"], ["spokekeeper-rotate.service"]);
    assert_eq!(timer["Timer"]["OnCalendar"].len(), 1);
    assert_eq!(timer["Install"]["WantedBy"], ["timers.target"]);
}

/// Dockerfile instructions with their arguments, continuation lines joined.
fn dockerfile() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if current.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(part) = t.strip_suffix('\\') {
            current.push_str(part);
            current.push(' ');
            continue;
        }
        current.push_str(t);
        let (op, args) = current.split_once(' ').unwrap();
        out.push((op.to_uppercase(), args.trim().to_string()));
        current.clear();
    }
    out
}

/// The Dockerfile's text only: building the image needs a Docker daemon and the base
/// images from a registry, and the test machine has neither.
#[test]
fn dockerfile_text_has_build_stages_and_a_non_root_runtime_with_ssh_and_git() {
    let steps = dockerfile();
    let stages: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, (op, _))| op == "FROM")
        .map(|(i, _)| i)
        .collect();
    assert!(stages.len() >= 2, "multi-stage");
    let build_name = steps[stages[0]]
        .1
        .split_whitespace()
        .last()
        .unwrap()
        .to_string();
    // The build toolchain is the one Cargo.toml promises to support.
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let rust_version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"');
    let image = steps[stages[0]].1.split_whitespace().next().unwrap();
    assert!(
        image.starts_with(&format!("rust:{rust_version}-")),
        "build image {image}: use rust:{rust_version} (Cargo.toml's rust-version)"
    );
    let runtime = &steps[*stages.last().unwrap()..];
    // The build stage copies build.rs: cargo needs it for --version's commit and date.
    assert!(
        steps[..*stages.last().unwrap()]
            .iter()
            .any(|(op, a)| op == "COPY" && a.split_whitespace().any(|w| w == "build.rs")),
        "the build stage does not COPY build.rs"
    );
    // The build stage copies only what exists here.
    for (op, args) in &steps[..*stages.last().unwrap()] {
        if op == "COPY" {
            let words: Vec<&str> = args.split_whitespace().collect();
            for src in &words[..words.len() - 1] {
                assert!(
                    root().join(src).exists(),
                    "COPY {src}: not in the repository"
                );
            }
        }
    }
    let run: String = runtime
        .iter()
        .filter(|(op, _)| op == "RUN")
        .map(|(_, a)| a.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    for pkg in ["openssh-client", "git", "ca-certificates"] {
        assert!(
            run.split_whitespace().any(|w| w == pkg),
            "the runtime installs {pkg}"
        );
    }
    assert!(
        runtime.iter().any(|(op, a)| op == "COPY"
            && a.starts_with(&format!("--from={build_name} "))
            && a.ends_with("/usr/local/bin/spokekeeper")),
        "the binary comes from the build stage"
    );
    let user = runtime
        .iter()
        .rev()
        .find(|(op, _)| op == "USER")
        .map(|(_, a)| a.as_str())
        .expect("a USER in the runtime stage");
    let uid = user.split(':').next().unwrap();
    assert!(!matches!(uid, "root" | "0"), "USER {user}");
    assert_eq!(uid, "65532", "the uid the chart runs as");
    assert!(
        run.contains("--uid 65532"),
        "a passwd entry for the uid (ssh needs one)"
    );
    let json = |op: &str| -> Vec<String> {
        let (_, a) = runtime.iter().rev().find(|(o, _)| o == op).unwrap();
        serde_json::from_str(a).unwrap_or_else(|e| panic!("{op} is not exec form: {e}"))
    };
    let entry = json("ENTRYPOINT");
    assert_eq!(
        entry.last().map(String::as_str),
        Some("/usr/local/bin/spokekeeper")
    );
    assert_eq!(subcommand(&json("CMD")), "run");
}

#[test]
fn chart_mounts_the_forge_token_for_review_mode() {
    crate::support::requires!(HELM);
    let values = "forgeTokenSecret: fleet-forge\nsigningKeySecret: fleet-signing\nconfig:\n  repo:\n    mode: pull-request\n    forge:\n      kind: gitlab\n      url: https://gitlab.example.org\n      repository: infra/fleet\n      token_env: LEFT_OVER\n  sealing:\n    cert: keys/sealed-secrets-infra.pem\n  spokes:\n    - name: dev\n      address: 10.0.0.1\n";
    let objects = read_all(&render_with(values), "chart (review mode)");
    let text = config_text(&objects);
    let config = Config::parse(text, "spokekeeper.yaml", Path::new("/etc/spokekeeper"))
        .unwrap_or_else(|e| panic!("the chart's spokekeeper.yaml is refused: {e}\n{text}"));
    let forge = config.repo.forge.expect("repo.forge kept");
    assert_eq!(
        forge.token,
        spokekeeper::config::TokenSource::File("/etc/spokekeeper/forge/token".into()),
        "the chart points token_file at the mounted Secret, replacing token_env"
    );
    let pod = pod_spec(&objects);
    let secret = secret_volume(pod, "forge");
    assert_eq!(secret.secret_name.as_deref(), Some("fleet-forge"));
    assert_eq!(secret.default_mode, Some(0o440));
    let main = pod
        .containers
        .iter()
        .find(|c| c.name == "spokekeeper")
        .unwrap();
    let mount = volume_mount(main, "forge");
    assert_eq!(mount.mount_path, "/etc/spokekeeper/forge");
    assert_eq!(mount.read_only, Some(true));
    // The signing key: mounted from its Secret, and repo.signing_key points at it.
    assert_eq!(
        config.repo.signing_key.as_deref(),
        Some(Path::new("/etc/spokekeeper/signing/signing-key"))
    );
    let secret = secret_volume(pod, "signing");
    assert_eq!(secret.secret_name.as_deref(), Some("fleet-signing"));
    assert_eq!(secret.default_mode, Some(0o440));
    let items: Vec<_> = secret
        .items
        .iter()
        .flatten()
        .map(|i| (i.key.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(items, [("signing-key", "signing-key")]);
    let mount = volume_mount(main, "signing");
    assert_eq!(
        (mount.mount_path.as_str(), mount.read_only),
        ("/etc/spokekeeper/signing", Some(true))
    );
    // Without the value, nothing is mounted.
    let defaults = read_all(&render(&[]), "chart (defaults)");
    let pod = pod_spec(&defaults);
    assert!(
        pod.volumes
            .iter()
            .flatten()
            .all(|v| v.name != "forge" && v.name != "signing")
    );
}

/// Review mode without signingKeySecret (and no repo.signing_key of its own) does not
/// render: spokekeeper would refuse the config at start anyway.
#[test]
fn chart_refuses_review_mode_without_a_signing_key() {
    crate::support::requires!(HELM);
    let values = "forgeTokenSecret: fleet-forge\nconfig:\n  repo:\n    mode: pull-request\n    forge:\n      kind: github\n      url: https://api.github.com\n      repository: org/fleet\n  sealing:\n    cert: keys/sealed-secrets-infra.pem\n  spokes:\n    - name: dev\n      address: 10.0.0.1\n";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values).unwrap();
    let out = helm_command(&[
        "template",
        "sk",
        CHART,
        "--namespace",
        RELEASE_NS,
        "--values",
    ])
    .arg(&file)
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "rendered without a signing key");
    assert!(
        err.contains("signingKeySecret") && err.contains("ssh-keygen"),
        "{err}"
    );
}
