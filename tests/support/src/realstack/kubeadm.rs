//! A kubeadm control plane as a lab spoke, made by the real kubeadm (built from the pinned
//! k8s.io/kubernetes by scripts/build-realstack), without a kubelet.
//!
//! The node has a root of its own (`NODE_DIR/root`), and kubeadm runs chrooted into it, so
//! it writes exactly where it writes on a real node: `init phase certs all` the PKI under
//! /etc/kubernetes/pki, `init phase kubeconfig all` admin.conf and super-admin.conf (and
//! the components' kubeconfigs), `init phase control-plane apiserver` and
//! `controller-manager` the static pod manifests under /etc/kubernetes/manifests,
//! `kubelet-start` the kubelet's configuration under /var/lib/kubelet, `init phase
//! upload-config all` (kubeadm's own client) the kubeadm-config and kubelet-config
//! ConfigMaps and the ClusterRoleBinding `kubeadm:cluster-admins`, with super-admin.conf,
//! as `kubeadm init` does since v1.29, and `mark-control-plane` labels the node.
//! `kubeadm certs renew admin.conf` (no `--config`: it reads the cluster's configuration,
//! certificateValidityPeriod included) and `kubeadm reset` run there as well.
//!
//! Standing in for the kubelet, the lab registers the node and mirrors the static pods
//! (kubelet.rs), and starts kube-apiserver and kube-controller-manager with the commands
//! those manifests hold: paths under /etc/kubernetes mapped into the node's root, the etcd
//! flags mapped to the lab's etcd (plain HTTP on loopback, so its TLS flags go), nothing
//! else changed.
//!
//! kubeadm refuses a loopback advertise address (it takes one as "find a global address on
//! lo"), so the API server's address is the host end of a lab network namespace, which is
//! not loopback; the node's sshd stays on its loopback address. Two flags are kubeadm's
//! own `extraArgs`, written into the manifests by kubeadm: `bind-address` (kubeadm's
//! manifests listen on every address, which lab nodes on one machine cannot share) and the
//! API server's `etcd-prefix` (each spoke its own storage in the lab's etcd; with kubeadm's
//! local etcd each install its own, as reset's emptying of /var/lib/etcd leaves it).
//!
//! The node's sshd runs every command of the hub's key in the node's root (a private mount
//! namespace with the host's /usr, chrooted), so `cat /etc/kubernetes/admin.conf` reads the
//! node's admin.conf, and records it in `NODE_DIR/ssh-commands` first: the reads the node
//! saw.

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::Node;

use super::controller_manager::probe_csr;
use super::kube::{Etcd, KubeApi, START};
use super::kubelet;
use super::netns::Netns;
use super::proc::Proc;
use super::{bin, run, wait_until};

/// kubeadm's default API server port.
pub const API_PORT: u16 = 6443;
/// Where kubeadm writes, on the node.
pub const ADMIN_CONF: &str = "/etc/kubernetes/admin.conf";
pub const SUPER_ADMIN_CONF: &str = "/etc/kubernetes/super-admin.conf";
pub const CA_CRT: &str = "/etc/kubernetes/pki/ca.crt";
const CONFIG: &str = "/etc/kubeadm/kubeadm.yaml";
const RESET_CONFIG: &str = "/etc/kubeadm/reset.yaml";
/// `kubeadm reset --force`, its API calls' timeout shortened: reset, reading the cluster's
/// configuration, looks for the etcd pods' endpoints to remove the node's etcd member
/// until that timeout (a minute by default), and the lab's etcd has no pod.
const RESET_YAML: &str = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ResetConfiguration\n\
                          force: true\ntimeouts:\n  kubernetesAPICall: 10s\n";
/// The node's name (its kubelet.conf's user is system:node:NODE_NAME).
const NODE_NAME: &str = "lab-kubeadm-node";
const MANIFESTS: &str = "/etc/kubernetes/manifests";
/// The manifest flags for kubeadm's local etcd's TLS, which the lab's etcd does not use.
const ETCD_TLS_FLAGS: [&str; 3] = ["--etcd-cafile", "--etcd-certfile", "--etcd-keyfile"];

/// How the control plane is installed.
#[derive(Clone, Debug, Default)]
pub struct KubeadmOptions {
    /// ClusterConfiguration.certificateValidityPeriod (e.g. `120h`); None: kubeadm's
    /// default, a year.
    pub certificate_validity: Option<String>,
    /// The lab's etcd as kubeadm's `etcd.external` (kubeadm writes `--etcd-servers`, no
    /// etcd PKI), whose data `kubeadm reset` leaves: a reinstall finds the old objects.
    /// false: kubeadm's local etcd, mapped to the lab's (see the module's comment), fresh
    /// for each install as reset's deleting of /var/lib/etcd makes it.
    pub external_etcd: bool,
}

pub struct KubeadmSpoke {
    // Drop order: the controller manager, then its API server, then the address.
    pub controller_manager: Option<Proc>,
    pub api: KubeApi,
    /// The API server's address is this namespace's host end.
    pub netns: Netns,
    /// The node's root (kubeadm's `/`).
    pub root: PathBuf,
    node_dir: PathBuf,
    etcd_url: String,
    opts: KubeadmOptions,
    generation: u32,
}

impl KubeadmSpoke {
    /// `kubeadm init`'s phases on `node` (which gets its root and its recorded SSH), its
    /// API server over `etcd`, its controller manager; the ClusterRoleBinding for
    /// admin.conf's group in place. The node's k3s.yaml is removed: this is no k3s node.
    pub fn init(node: &Node, etcd: &Etcd, opts: &KubeadmOptions) -> KubeadmSpoke {
        let root = node.dir.join("root");
        make_root(&root);
        let _ = std::fs::remove_file(&node.kubeconfig_path);
        record_ssh(node, &root);
        let netns = Netns::create();
        let addr = IpAddr::V4(netns.host);
        let generation = 0;
        install(&root, addr, opts, generation, etcd);
        let api = start_api(&root, &node.dir, addr, etcd, generation);
        after_start(&root, &api, true);
        let controller_manager = start_controller_manager(&root, &api, etcd);
        KubeadmSpoke {
            controller_manager: Some(controller_manager),
            api,
            netns,
            root,
            node_dir: node.dir.clone(),
            etcd_url: etcd.url.clone(),
            opts: opts.clone(),
            generation,
        }
    }

    /// The API server's address (the advertise address).
    pub fn address(&self) -> IpAddr {
        IpAddr::V4(self.netns.host)
    }

    /// `https://ADDRESS:6443`, the server admin.conf names.
    pub fn api_url(&self) -> String {
        format!("https://{}:{API_PORT}", self.netns.host)
    }

    /// A file on the node, by its path there (`/etc/kubernetes/admin.conf`).
    pub fn node_path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    pub fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.node_path(path))
            .unwrap_or_else(|e| panic!("read {path} on the kubeadm node: {e}"))
    }

    /// `kubeadm ARGS` on the node (chrooted into its root): what it printed (stdout, then
    /// stderr), or a panic with it.
    pub fn kubeadm(&self, args: &[&str]) -> String {
        kubeadm(&self.root, args)
    }

    /// `kubeadm certs renew admin.conf`, as an operator runs it (no `--config`): a new
    /// client certificate from the same CA, valid for the certificateValidityPeriod
    /// kubeadm reads from the cluster's kubeadm-config ConfigMap. Panics when kubeadm
    /// could not read the cluster's configuration (it would renew for its default year).
    pub fn renew_admin_conf(&self) -> String {
        let out = self.kubeadm(&["certs", "renew", "admin.conf"]);
        assert!(
            out.contains("Reading configuration from the \"kubeadm-config\" ConfigMap")
                && !out.contains("Falling back to default configuration"),
            "kubeadm certs renew did not read the cluster's configuration: {out}"
        );
        out
    }

    /// The operator changes the validity the cluster stores (None: kubeadm's default,
    /// a year) the way kubeadm's renew message says: the node's kubeadm.yaml edited and
    /// `kubeadm init phase upload-config kubeadm --config` run again.
    pub fn store_certificate_validity(&mut self, validity: Option<&str>) {
        self.opts.certificate_validity = validity.map(str::to_string);
        let config = config_yaml(self.address(), &self.opts, self.generation, &self.etcd_url);
        write_node_file(&self.root, CONFIG, &config);
        self.kubeadm(&[
            "init",
            "phase",
            "upload-config",
            "kubeadm",
            "--config",
            CONFIG,
        ]);
    }

    /// The ClusterConfiguration the cluster stores (kubeadm-config's ClusterConfiguration).
    pub fn stored_cluster_configuration(&self) -> String {
        self.api.kubectl(&[
            "get",
            "configmap",
            "-n",
            "kube-system",
            "kubeadm-config",
            "-o",
            "jsonpath={.data.ClusterConfiguration}",
        ])
    }

    /// A rebuild: `kubeadm reset --force`, the lab stops the control plane's processes (the
    /// containers reset removes), and the phases of a new `kubeadm init` over fresh
    /// storage: new CAs, new admin.conf and super-admin.conf.
    pub fn reset_and_init(&mut self, etcd: &Etcd) {
        write_node_file(&self.root, RESET_CONFIG, RESET_YAML);
        self.kubeadm(&["reset", "--config", RESET_CONFIG]);
        for file in [ADMIN_CONF, SUPER_ADMIN_CONF, CA_CRT] {
            assert!(
                !self.node_path(file).exists(),
                "kubeadm reset left {file} behind"
            );
        }
        if let Some(mut kcm) = self.controller_manager.take() {
            kcm.stop(Duration::from_secs(5));
        }
        self.api.stop();
        self.generation += 1;
        install(
            &self.root,
            self.address(),
            &self.opts,
            self.generation,
            etcd,
        );
        self.api = start_api(
            &self.root,
            &self.node_dir,
            self.address(),
            etcd,
            self.generation,
        );
        // Over kept storage the binding is there: admin.conf needs no super-admin.conf.
        after_start(&self.root, &self.api, !self.opts.external_etcd);
        self.controller_manager = Some(start_controller_manager(&self.root, &self.api, etcd));
    }

    /// The commands the hub's key ran on the node, in order.
    pub fn ssh_commands(&self) -> Vec<String> {
        std::fs::read_to_string(self.node_dir.join("ssh-commands"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// The node's root: /etc/kubernetes, a mount point for the kubeadm binary, and the links
/// of a merged-/usr system, for the host's /usr mounted there.
fn make_root(root: &Path) {
    std::fs::create_dir_all(root.join("etc/kubernetes")).expect("node root");
    std::fs::create_dir_all(root.join("usr/bin")).expect("node root /usr");
    std::fs::create_dir_all(root.join("proc")).expect("node root /proc");
    std::fs::write(root.join("usr/bin/kubeadm"), b"").expect("kubeadm mount point");
    for dir in ["bin", "lib", "lib64", "sbin"] {
        let link = root.join(dir);
        if !link.exists() {
            std::os::unix::fs::symlink(format!("usr/{dir}"), &link).expect("node root link");
        }
    }
}

/// Makes the hub's key run every command in the node's root, recorded first (the
/// authorized_keys `command=`, which sshd runs with the asked command in
/// SSH_ORIGINAL_COMMAND).
fn record_ssh(node: &Node, root: &Path) {
    let script = node.dir.join("ssh-node");
    let log = node.dir.join("ssh-commands");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             printf '%s\\n' \"$SSH_ORIGINAL_COMMAND\" >> '{log}'\n\
             exec unshare --mount --propagation private -- sh -c \
             'mount --bind /usr \"$1/usr\" && exec chroot \"$1\" /bin/sh -c \"$2\"' \
             sh '{root}' \"$SSH_ORIGINAL_COMMAND\"\n",
            log = log.display(),
            root = root.display()
        ),
    )
    .expect("write the node's ssh command");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .expect("chmod the node's ssh command");
    node.set_authorized_key_options("root", &format!("command=\"{}\"", script.display()));
}

/// What follows the API server's start in `kubeadm init`: the kubelet registers the node
/// and mirrors the static pods (the lab in its stead, see kubelet.rs), then
/// `upload-config` and `mark-control-plane`.
fn after_start(root: &Path, api: &KubeApi, by_super_admin: bool) {
    kubelet::register(
        root,
        &api.dir,
        NODE_NAME,
        &["kube-apiserver", "kube-controller-manager"],
    );
    upload_config(root, api, by_super_admin);
    kubeadm(
        root,
        &["init", "phase", "mark-control-plane", "--config", CONFIG],
    );
}

/// `kubeadm init phase upload-config all`: the ClusterConfiguration (kubeadm-config) and
/// the kubelet's (kubelet-config). kubeadm's client for it first tries admin.conf, is
/// refused (its group is bound to nothing yet), and creates the ClusterRoleBinding
/// `kubeadm:cluster-admins` with super-admin.conf (`by_super_admin`; false: the binding is
/// already there, and admin.conf may).
fn upload_config(root: &Path, api: &KubeApi, by_super_admin: bool) {
    let out = kubeadm(
        root,
        &[
            "init",
            "phase",
            "upload-config",
            "all",
            "--config",
            CONFIG,
            "--v=1",
        ],
    );
    assert_eq!(
        out.contains(
            "creating the ClusterRoleBinding for the kubeadm:cluster-admins Group by using \
             super-admin.conf"
        ),
        by_super_admin,
        "{out}"
    );
    let binding = api.get_json(&["clusterrolebinding", "kubeadm:cluster-admins"]);
    assert_eq!(
        binding["roleRef"]["name"], "cluster-admin",
        "{binding}\n{out}"
    );
    assert_eq!(
        binding["subjects"][0]["name"], "kubeadm:cluster-admins",
        "{binding}"
    );
}

/// kubeadm's configuration for the node: its advertise address, the version, kubeadm's
/// own extraArgs for the two flags the lab needs (see the module's comment).
fn config_yaml(addr: IpAddr, opts: &KubeadmOptions, generation: u32, etcd_url: &str) -> String {
    let validity = opts
        .certificate_validity
        .as_deref()
        .map(|v| format!("certificateValidityPeriod: {v}\n"))
        .unwrap_or_default();
    // kubeadm's own version, the control plane's too (all built from one module); given,
    // so that kubeadm does not look up the latest release online.
    let version = run(Command::new(bin("kubeadm")).args(["version", "-o", "short"]))
        .unwrap_or_else(|e| panic!("kubeadm version: {e}"));
    let version = version.trim();
    let (etcd, prefix) = if opts.external_etcd {
        (
            format!("etcd:\n  external:\n    endpoints:\n    - {etcd_url}\n"),
            format!("/kubeadm-{addr}"),
        )
    } else {
        (String::new(), format!("/kubeadm-{addr}-{generation}"))
    };
    format!(
        "apiVersion: kubeadm.k8s.io/v1beta4\n\
         kind: InitConfiguration\n\
         localAPIEndpoint:\n  advertiseAddress: {addr}\n  bindPort: {API_PORT}\n\
         nodeRegistration:\n  name: {NODE_NAME}\n  \
         criSocket: unix:///var/run/containerd/containerd.sock\n\
         ---\n\
         apiVersion: kubeadm.k8s.io/v1beta4\n\
         kind: ClusterConfiguration\n\
         kubernetesVersion: {version}\n\
         {validity}\
         {etcd}\
         apiServer:\n  extraArgs:\n  - name: bind-address\n    value: {addr}\n  \
         - name: etcd-prefix\n    value: {prefix}\n\
         controllerManager:\n  extraArgs:\n  - name: bind-address\n    value: {addr}\n"
    )
}

fn write_node_file(root: &Path, path: &str, text: &str) {
    let file = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(file.parent().expect("parent")).expect("node dir");
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("write {path} on the node: {e}"));
}

/// The phases of `kubeadm init` that make the PKI, the kubeconfigs and the manifests.
fn install(root: &Path, addr: IpAddr, opts: &KubeadmOptions, generation: u32, etcd: &Etcd) {
    write_node_file(
        root,
        CONFIG,
        &config_yaml(addr, opts, generation, &etcd.url),
    );
    for phase in [
        &["certs", "all"][..],
        &["kubeconfig", "all"],
        &["control-plane", "apiserver"],
        &["control-plane", "controller-manager"],
        &["kubelet-start"],
    ] {
        let mut args = vec!["init", "phase"];
        args.extend_from_slice(phase);
        args.extend_from_slice(&["--config", CONFIG]);
        kubeadm(root, &args);
    }
}

/// kubeadm in a private mount namespace (its binary mounted into the node's root, and a
/// /proc: reset reads /proc/mounts for what to unmount under /var/lib/kubelet), chrooted
/// into `root`.
fn kubeadm(root: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(
            "mount --bind \"$1\" \"$2/usr/bin/kubeadm\" && mount -t proc proc \"$2/proc\" \
             && root=\"$2\" && shift 2 && exec chroot \"$root\" /usr/bin/kubeadm \"$@\"",
        )
        .arg("sh")
        .arg(bin("kubeadm"))
        .arg(root)
        .args(args);
    let out = cmd.output().expect("run unshare");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "kubeadm {args:?} on the node: {}: {text}",
        out.status
    );
    text
}

/// The static pod manifest `name` (kube-apiserver.yaml without .yaml): its text, and the
/// pod it holds.
pub fn manifest(root: &Path, name: &str) -> (String, Value) {
    let path = root
        .join(MANIFESTS.trim_start_matches('/'))
        .join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("kubeadm's manifest {}: {e}", path.display()));
    let pod = serde_saphyr::from_str(&text)
        .unwrap_or_else(|e| panic!("kubeadm's manifest {}: {e}", path.display()));
    (text, pod)
}

/// The command of the static pod manifest `name` (kube-apiserver.yaml without .yaml):
/// the binary and its arguments, node paths mapped into `root` and the etcd flags to
/// `etcd_url`.
pub fn manifest_command(root: &Path, name: &str, etcd_url: &str) -> (String, Vec<String>) {
    let (text, pod) = manifest(root, name);
    let command: Vec<String> = pod["spec"]["containers"][0]["command"]
        .as_array()
        .unwrap_or_else(|| panic!("no command in {name}.yaml: {text}"))
        .iter()
        .map(|a| a.as_str().expect("a string argument").to_string())
        .collect();
    let (program, args) = command.split_first().expect("a program");
    let mut mapped = Vec::new();
    let mut etcd_flags = 0;
    for arg in args {
        let (flag, value) = arg.split_once('=').unwrap_or((arg, ""));
        if ETCD_TLS_FLAGS.contains(&flag) {
            etcd_flags += 1;
        } else if flag == "--etcd-servers" {
            etcd_flags += 1;
            mapped.push(format!("{flag}={etcd_url}"));
        } else if value.starts_with("/etc/kubernetes/") {
            mapped.push(format!(
                "{flag}={}",
                root.join(value.trim_start_matches('/')).display()
            ));
        } else {
            mapped.push(arg.clone());
        }
    }
    // Local etcd: its address and three TLS files; external (plain HTTP): the address.
    let expected: &[usize] = if name == "kube-apiserver" {
        &[4, 1]
    } else {
        &[0]
    };
    assert!(
        expected.contains(&etcd_flags),
        "{name}'s etcd flags in kubeadm's manifest changed: {command:?}"
    );
    (program.clone(), mapped)
}

/// kube-apiserver as its manifest says, its log in `dir/kubeadm-GENERATION`; returns once
/// it is ready.
fn start_api(root: &Path, dir: &Path, addr: IpAddr, etcd: &Etcd, generation: u32) -> KubeApi {
    let name = format!("kubeadm-{generation}");
    let dir = dir.join(&name);
    std::fs::create_dir_all(&dir).expect("log dir");
    let (program, args) = manifest_command(root, "kube-apiserver", &etcd.url);
    let mut cmd = Command::new(bin(&program));
    cmd.args(&args);
    let mut proc = Proc::spawn(&program, &dir, cmd);
    let admin = root.join(ADMIN_CONF.trim_start_matches('/'));
    // /readyz is public: admin.conf's group need not be bound yet.
    wait_until("kubeadm's kube-apiserver /readyz", START, || {
        if !proc.running() {
            panic!("kube-apiserver exited: {}", proc.tail(30));
        }
        run(Command::new(bin("kubectl"))
            .arg(format!("--kubeconfig={}", admin.display()))
            .args(["get", "--raw", "/readyz"]))
    });
    KubeApi {
        name,
        url: format!("https://{addr}:{API_PORT}"),
        addr,
        port: API_PORT,
        admin_kubeconfig: admin,
        dir,
        proc,
    }
}

/// kube-controller-manager as its manifest says, beside `api`; returns once it signs.
fn start_controller_manager(root: &Path, api: &KubeApi, etcd: &Etcd) -> Proc {
    let (program, args) = manifest_command(root, "kube-controller-manager", &etcd.url);
    let mut cmd = Command::new(bin(&program));
    cmd.args(&args);
    let mut kcm = Proc::spawn(&program, &api.dir, cmd);
    wait_signing(api, &mut kcm);
    kcm
}

/// Waits until the controller manager signs a client CSR the admin approved (it runs
/// once it holds its leader lease); the probe CSR is deleted.
fn wait_signing(api: &KubeApi, kcm: &mut Proc) {
    let name = "lab-signer-probe";
    api.stdin_kubectl(&["create", "-f", "-"], &probe_csr(name, "lab:signer-probe"))
        .unwrap_or_else(|e| panic!("create the signer probe CSR: {e}"));
    api.kubectl(&["certificate", "approve", name]);
    wait_until("kubeadm's kube-controller-manager signs", START, || {
        if !kcm.running() {
            panic!("kube-controller-manager exited: {}", kcm.tail(30));
        }
        let cert = api.kubectl(&["get", "csr", name, "-o", "jsonpath={.status.certificate}"]);
        if cert.is_empty() {
            Err(format!("not signed yet; log: {}", kcm.tail(5)))
        } else {
            Ok(())
        }
    });
    api.kubectl(&["delete", "csr", name]);
}
