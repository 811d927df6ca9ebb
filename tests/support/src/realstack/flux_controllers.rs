//! Flux's real controllers against the real hub: source-controller, kustomize-controller
//! and helm-controller (built by scripts/build-realstack from their pinned modules), run
//! as processes out of cluster. Each authenticates with a token of its own
//! ServiceAccount, bound as Flux's install binds it (flux2's manifests/rbac: the
//! crd-controller ClusterRole for all three, cluster-admin for the two that apply);
//! leader election is off, no event recorder, every listener on a free loopback port.
//! source-controller fetches the fleet repo over HTTP (`git_http`) and serves artifacts
//! to the other two on its storage port.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use zeroize::Zeroizing;

use super::hub::RealHub;
use super::kube::START;
use super::proc::Proc;
use super::{bin, free_port, tools, wait_until};

pub const NS: &str = "flux-system";

/// source-controller's CRDs, as scripts/build-realstack copies them.
const SOURCE_CRDS: [(&str, &str); 6] = [
    (
        "gitrepositories",
        "gitrepositories.source.toolkit.fluxcd.io",
    ),
    (
        "ocirepositories",
        "ocirepositories.source.toolkit.fluxcd.io",
    ),
    ("buckets", "buckets.source.toolkit.fluxcd.io"),
    (
        "helmrepositories",
        "helmrepositories.source.toolkit.fluxcd.io",
    ),
    ("helmcharts", "helmcharts.source.toolkit.fluxcd.io"),
    (
        "externalartifacts",
        "externalartifacts.source.toolkit.fluxcd.io",
    ),
];

/// flux2 v2.7 manifests/rbac/rbac.yaml, for this namespace: the ClusterRole every
/// controller is bound to, and cluster-admin for the controllers that apply.
const RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: crd-controller-flux-system
rules:
- apiGroups: [source.toolkit.fluxcd.io]
  resources: ["*"]
  verbs: ["*"]
- apiGroups: [kustomize.toolkit.fluxcd.io]
  resources: ["*"]
  verbs: ["*"]
- apiGroups: [helm.toolkit.fluxcd.io]
  resources: ["*"]
  verbs: ["*"]
- apiGroups: [notification.toolkit.fluxcd.io]
  resources: ["*"]
  verbs: ["*"]
- apiGroups: [image.toolkit.fluxcd.io]
  resources: ["*"]
  verbs: ["*"]
- apiGroups: [""]
  resources: [namespaces, secrets, configmaps, serviceaccounts]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [configmaps/status]
  verbs: [get, update, patch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [serviceaccounts/token]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: crd-controller-flux-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: crd-controller-flux-system
subjects:
- {kind: ServiceAccount, name: source-controller, namespace: flux-system}
- {kind: ServiceAccount, name: kustomize-controller, namespace: flux-system}
- {kind: ServiceAccount, name: helm-controller, namespace: flux-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: cluster-reconciler-flux-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: cluster-admin
subjects:
- {kind: ServiceAccount, name: kustomize-controller, namespace: flux-system}
- {kind: ServiceAccount, name: helm-controller, namespace: flux-system}
"#;

/// The flag that lets kustomize- and helm-controller ask for a token of a kubeConfig
/// ConfigMap's `serviceAccountName` (object-level workload identity, off by default).
pub const OBJECT_LEVEL_IDENTITY: &str = "--feature-gates=ObjectLevelWorkloadIdentity=true";

/// How the controllers run.
#[derive(Clone, Debug)]
pub struct FluxOptions {
    /// `--requeue-dependency` of every controller (Flux's default is 30s).
    pub requeue_dependency: Duration,
    /// Give each controller its ServiceAccount token where a Pod has it,
    /// /var/run/secrets/kubernetes.io/serviceaccount/token (a tmpfs over /run in a mount
    /// namespace of its own): Flux's generic provider reads its own identity there
    /// (fluxcd/pkg/auth v0.54.3 generic/provider.go 60).
    pub pod_identity: bool,
    /// More arguments for kustomize- and helm-controller (e.g. `--feature-gates=...`).
    pub args: Vec<String>,
}

impl Default for FluxOptions {
    fn default() -> Self {
        FluxOptions {
            requeue_dependency: Duration::from_secs(2),
            pod_identity: false,
            args: Vec::new(),
        }
    }
}

/// The command that runs controller `name`, with its own TMPDIR and, with
/// [`FluxOptions::pod_identity`], its `token` mounted as a Pod's; the caller adds the
/// kubeconfig and listeners.
fn controller_command(hub: &RealHub, name: &str, opts: &FluxOptions, token: &str) -> Command {
    // Its own TMPDIR: kustomize-controller builds in a temporary directory, and one
    // under the shared /tmp was seen gone mid-build under load (BuildFailed,
    // "evalsymlink failure"); this one goes with the hub.
    let tmp = hub.dir().join(format!("{name}-tmp"));
    std::fs::create_dir_all(&tmp).expect("controller TMPDIR");
    let mut cmd = if opts.pod_identity {
        // The token goes through the environment into the tmpfs, never to a disk file,
        // and is unset before the controller starts.
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(
                "mount -t tmpfs -o mode=755 lab /run \
                 && mkdir -p /run/secrets/kubernetes.io/serviceaccount \
                 && printf %s \"$LAB_SA_TOKEN\" > /run/secrets/kubernetes.io/serviceaccount/token \
                 && printf %s \"$RUNTIME_NAMESPACE\" > /run/secrets/kubernetes.io/serviceaccount/namespace \
                 && unset LAB_SA_TOKEN && exec \"$@\"",
            )
            .arg("sh")
            .arg(bin(name));
        cmd.env_clear().env("LAB_SA_TOKEN", token);
        cmd
    } else {
        let mut cmd = Command::new(bin(name));
        cmd.env_clear();
        cmd
    };
    cmd.env("TMPDIR", &tmp)
        .env("RUNTIME_NAMESPACE", NS)
        .env("HOME", hub.dir())
        .env("PATH", "/usr/bin:/bin")
        .arg("--enable-leader-election=false")
        .arg("--events-addr=")
        .arg("--watch-all-namespaces=true")
        .arg("--log-level=debug")
        .arg("--log-encoding=json");
    cmd
}

pub struct FluxControllers {
    procs: Vec<Proc>,
}

impl FluxControllers {
    /// Installs source-controller's CRDs and the controllers' RBAC on `hub` and starts
    /// the three, waiting until each reports ready on its health endpoint.
    pub fn start(hub: &RealHub, opts: &FluxOptions) -> FluxControllers {
        let crds = tools().join("crds");
        for (file, _) in SOURCE_CRDS {
            let path = crds.join(format!("{file}.yaml"));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}: run scripts/build-realstack", path.display()));
            hub.api.apply(&text);
        }
        for (_, name) in SOURCE_CRDS {
            hub.api.kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{name}"),
            ]);
        }
        hub.api.apply(RBAC);
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let storage = free_port(lo);
        let storage_dir = hub.dir().join("source-controller-storage");
        std::fs::create_dir_all(&storage_dir).expect("storage dir");
        let requeue = format!(
            "--requeue-dependency={}s",
            opts.requeue_dependency.as_secs()
        );
        let mut procs = Vec::new();
        for name in [
            "source-controller",
            "kustomize-controller",
            "helm-controller",
        ] {
            hub.api.apply(&format!(
                "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\n  namespace: {NS}\n"
            ));
            let token = Zeroizing::new(hub.api.kubectl(&[
                "create",
                "token",
                name,
                "-n",
                NS,
                "--duration=24h",
            ]));
            let kubeconfig = hub.token_kubeconfig(name, token.trim());
            let health = free_port(lo);
            let mut cmd = controller_command(hub, name, opts, token.trim());
            cmd.env("KUBECONFIG", &kubeconfig)
                .arg(format!("--metrics-addr=127.0.0.1:{}", free_port(lo)))
                .arg(format!("--health-addr=127.0.0.1:{health}"))
                .arg(&requeue);
            if name == "source-controller" {
                cmd.arg(format!("--storage-path={}", storage_dir.display()))
                    .arg(format!("--storage-addr=127.0.0.1:{storage}"))
                    .arg(format!("--storage-adv-addr=127.0.0.1:{storage}"));
            } else {
                cmd.args(&opts.args);
            }
            let mut proc = Proc::spawn(name, hub.dir(), cmd);
            wait_until(&format!("{name} is ready"), START, || {
                if !proc.running() {
                    panic!("{name} exited: {}", proc.tail(30));
                }
                http_status(health, "/readyz").and_then(|s| match s {
                    200 => Ok(()),
                    s => Err(format!("/readyz answered {s}")),
                })
            });
            procs.push(proc);
        }
        FluxControllers { procs }
    }

    /// The last lines of each controller's log, for failure messages.
    pub fn tail(&self, lines: usize) -> String {
        self.procs
            .iter()
            .map(|p| format!("--- {}:\n{}", p.name, p.tail(lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Are they all still running?
    pub fn running(&mut self) -> bool {
        self.procs.iter_mut().all(Proc::running)
    }
}

/// The status code of GET `path` on 127.0.0.1:`port`.
pub(super) fn http_status(port: u16, path: &str) -> Result<u16, String> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    status_of(&mut conn)
}

/// The status code of the HTTP answer `conn` reads to its end.
pub(super) fn status_of(conn: &mut TcpStream) -> Result<u16, String> {
    let mut text = String::new();
    let _ = conn.read_to_string(&mut text);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status line: {text:?}"))
}

/// The Ready condition of `kind` `name` in flux-system: (status, reason, message), and
/// the object's generation and status.observedGeneration.
pub fn ready(hub: &RealHub, kind: &str, name: &str) -> Option<Ready> {
    condition(hub, kind, name, "Ready")
}

/// The condition `type_` of `kind` `name` in flux-system, with the object's generation,
/// observedGeneration and lastHandledReconcileAt, as [`ready`] gives Ready.
pub fn condition(hub: &RealHub, kind: &str, name: &str, type_: &str) -> Option<Ready> {
    condition_in(hub, NS, kind, name, type_)
}

/// [`condition`] of `kind` `name` in namespace `ns`.
pub fn condition_in(hub: &RealHub, ns: &str, kind: &str, name: &str, type_: &str) -> Option<Ready> {
    let out = hub
        .api
        .try_kubectl(&["get", kind, name, "-n", ns, "-o", "json"])
        .ok()?;
    let v: Value = serde_json::from_str(&out).ok()?;
    let c = v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    Some(Ready {
        status: c["status"].as_str().unwrap_or("").into(),
        reason: c["reason"].as_str().unwrap_or("").into(),
        message: c["message"].as_str().unwrap_or("").into(),
        generation: v["metadata"]["generation"].as_i64().unwrap_or(0),
        observed_generation: v["status"]["observedGeneration"].as_i64().unwrap_or(-1),
        last_handled: v["status"]["lastHandledReconcileAt"]
            .as_str()
            .unwrap_or("")
            .into(),
    })
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ready {
    pub status: String,
    pub reason: String,
    pub message: String,
    pub generation: i64,
    pub observed_generation: i64,
    pub last_handled: String,
}

/// Asks `kind` `name` in flux-system to reconcile now, as `flux reconcile` does: the
/// requestedAt annotation. Returns the value set.
pub fn request_reconcile(hub: &RealHub, kind: &str, name: &str) -> String {
    let at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .expect("RFC 3339");
    hub.api.kubectl(&[
        "annotate",
        "--overwrite",
        kind,
        name,
        "-n",
        NS,
        &format!("reconcile.fluxcd.io/requestedAt={at}"),
    ]);
    at
}

/// The fleet repo's Flux layout, written into the work tree `dir`: `fluxcd/` (applied by
/// the root Kustomization `flux-system`) holds spoke i's Kustomization and HelmRelease,
/// both deploying to the spoke with `kubeConfig.secretRef` spoke{i}-kubeconfig;
/// `apps/spoke{i}/` holds the ConfigMap the Kustomization applies, `charts/spoke-config`
/// the chart the HelmRelease installs (a ConfigMap, no pods: the spokes have no kubelet).
/// `interval` is the consumers' interval (Flux's usual is 10m).
pub fn write_layout(dir: &Path, spokes: usize, interval: &str) {
    write_layout_via(dir, spokes, interval, "secretRef");
}

/// [`write_layout`], the consumers reaching each spoke through `reference`
/// (`secretRef`, or `configMapRef` for federated spokes), both named
/// `spokeN-kubeconfig`.
pub fn write_layout_via(dir: &Path, spokes: usize, interval: &str, reference: &str) {
    let write = |rel: &str, text: &str| {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write the layout");
    };
    write(
        "charts/spoke-config/Chart.yaml",
        "apiVersion: v2\nname: spoke-config\nversion: 0.1.0\n",
    );
    write(
        "charts/spoke-config/templates/configmap.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n  \
         namespace: {{ .Release.Namespace }}\ndata:\n  spoke: {{ .Values.spoke | quote }}\n",
    );
    for i in 0..spokes {
        write(
            &format!("apps/spoke{i}/configmap.yaml"),
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: spoke-app\n  \
                 namespace: default\ndata:\n  spoke: spoke{i}\n"
            ),
        );
        write(
            &format!("fluxcd/spoke{i}.yaml"),
            &format!(
                "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  \
                 name: spoke{i}\n  namespace: {NS}\nspec:\n  interval: {interval}\n  \
                 retryInterval: 5s\n  path: ./apps/spoke{i}\n  prune: true\n  timeout: 30s\n  \
                 sourceRef:\n    kind: GitRepository\n    name: fleet\n  kubeConfig:\n    \
                 {reference}:\n      name: spoke{i}-kubeconfig\n---\n\
                 apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  \
                 name: spoke{i}\n  namespace: {NS}\nspec:\n  interval: {interval}\n  \
                 timeout: 30s\n  releaseName: spoke-config\n  targetNamespace: default\n  \
                 storageNamespace: default\n  chart:\n    spec:\n      chart: ./charts/spoke-config\n      \
                 interval: {interval}\n      sourceRef:\n        kind: GitRepository\n        \
                 name: fleet\n  values:\n    spoke: spoke{i}\n  kubeConfig:\n    {reference}:\n      \
                 name: spoke{i}-kubeconfig\n"
            ),
        );
    }
}

/// The bootstrap objects: the GitRepository `fleet` at `url` (branch main), fetched every
/// `source`, and the root Kustomization `flux-system` that applies `./fluxcd` to the hub
/// every `root`, decrypting sops files with the age key in the Secret `decryption` when
/// given (as Flux's SOPS guide patches `flux-system`).
pub fn bootstrap(hub: &RealHub, url: &str, source: &str, root: &str, decryption: Option<&str>) {
    let decryption = decryption
        .map(|name| {
            format!("  decryption:\n    provider: sops\n    secretRef:\n      name: {name}\n")
        })
        .unwrap_or_default();
    hub.api.apply(&format!(
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata:\n  \
         name: fleet\n  namespace: {NS}\nspec:\n  interval: {source}\n  timeout: 20s\n  \
         url: {url}\n  ref:\n    branch: main\n---\n\
         apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  \
         name: flux-system\n  namespace: {NS}\nspec:\n  interval: {root}\n  \
         retryInterval: {root}\n  path: ./fluxcd\n  prune: true\n  timeout: 30s\n  \
         sourceRef:\n    kind: GitRepository\n    name: fleet\n{decryption}"
    ));
}

/// The hub's age key as Flux's SOPS guide stores it: the Secret `name` in flux-system
/// with the identity under `age.agekey`, passed to kubectl on stdin (never a file).
pub fn age_secret(hub: &RealHub, name: &str, identity: &age::x25519::Identity) {
    let key = age::secrecy::ExposeSecret::expose_secret(&identity.to_string()).to_string();
    hub.api
        .stdin_kubectl(
            &[
                "create",
                "secret",
                "generic",
                name,
                "-n",
                NS,
                "--from-file=age.agekey=/dev/stdin",
            ],
            &format!("{key}\n"),
        )
        .expect("the age key Secret");
}
