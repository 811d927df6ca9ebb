//! deploy/: the Helm chart rendered by a real `helm` (scripts/install-helm), the Flux
//! example, the systemd units and the Dockerfile. Every Kubernetes object is read strictly
//! into its k8s-openapi type (or a small struct for a CRD) and written back: a field the
//! type does not know, or a value it reads differently, fails here rather than in a cluster.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
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

/// `helm template` with `values_yaml`, which must fail: its stderr, the chart's message.
fn refused_with(values_yaml: &str, why: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values_yaml).unwrap();
    let args = [
        "template",
        "sk",
        CHART,
        "--namespace",
        RELEASE_NS,
        "--values",
    ];
    let out = helm_command(&args).arg(&file).output().unwrap();
    assert!(!out.status.success(), "rendered {why}");
    String::from_utf8_lossy(&out.stderr).into_owned()
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
    AdmissionPolicy(ValidatingAdmissionPolicy),
    AdmissionPolicyBinding(ValidatingAdmissionPolicyBinding),
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
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
            Object::AdmissionPolicy(strict(doc, &what))
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
            Object::AdmissionPolicyBinding(strict(doc, &what))
        }
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

mod flux_example;
mod host;
mod monitoring;
mod network;
mod pod;
mod rbac;
