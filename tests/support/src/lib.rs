//! The lab: real spoke nodes for tests and benchmarks. What needs spokekeeper's own types
//! lives here (a [`Node`]'s `SshSettings`, the fleet and daemon helpers that run the
//! binary, the real stack); the rest (mock API servers, PKI, the emulated hub, forges and
//! Lease API, `ConfigBuilder`) is the lab crate, `spokekeeper_lab` (lab/).
//!
//! A [`Node`] is a real `sshd` on its own loopback address (127.0.X.Y, leased so that
//! parallel tests and test binaries never collide), with its own host key, a client
//! identity, a generated known_hosts, and a k3s-shaped kubeconfig (mode 600) in its
//! directory; plus a mock Kubernetes API server with real TLS and client-certificate
//! authentication. Everything a node starts is stopped when it is dropped, also when a
//! test panics. Tests run as root (sshd, useradd, sudoers).
//!
//! ```ignore
//! let lab = Lab::new();
//! let node = lab.add_node(NodeOptions::default());
//! let bytes = spokekeeper::spoke::read_over_ssh(&node.address.to_string(), &node.ssh_settings("root"), node.kubeconfig_path_str()).await?;
//! ```
//!
//! The k3s.yaml says `server: https://127.0.0.1:<api_port>` like a real k3s file (k3s
//! writes 127.0.0.1; spokekeeper rewrites the host). Nothing listens there: the API is on
//! the node's address. [`Node::hub_kubeconfig`] is the same file with the host rewritten.

mod addr;
pub mod daemon;
pub mod federation;
pub mod fleet;
pub mod git;
pub mod helm;
pub mod leak;
pub mod lease;
pub mod logs;
pub mod peers;
pub mod realstack;
pub mod recipe;
pub mod requires;
mod sshd;
pub mod trust;

// Shared by the modules of the one test binary (tests/suite).
pub mod net;
pub mod procs;
pub mod reports;
pub mod timing;

use std::fs;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::Signal;
use spokekeeper::secret::SecretBytes;
use spokekeeper::spoke::SshSettings;
use spokekeeper_lab::config::{Spoke, Ssh};

pub use spokekeeper_lab::{Hostile, KubeconfigParts, kubeconfig_yaml};

use addr::AddressLease;
use spokekeeper_lab::federation::authn::SpokeTrust;
use spokekeeper_lab::objects::{Objects, Signer};
use spokekeeper_lab::{ApiIdentity, ApiServer, Pki, PkiOptions};
use sshd::Sshd;

/// Where a federated node's API server reads its AuthenticationConfiguration, under the
/// node's directory (the recipe's k3s directory, moved there by [`recipe::localize`]).
pub(crate) const FEDERATED_FILE: &str = "spokekeeper/authentication-config.yaml";

/// The unprivileged node user, allowed `sudo cat` of its node's k3s.yaml only.
pub const LAB_USER: &str = "spokelab";

/// How a node is made.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// Start an sshd (false: API-only node, for probe benchmarks).
    pub sshd: bool,
    /// Start the API server.
    pub api: bool,
    /// Days until the client certificate expires; 0 or less: already expired.
    pub client_cert_days: i64,
    /// Whether the serving certificate names the node's address.
    pub address_in_sans: bool,
    /// Make the kubeconfig on the node hostile.
    pub hostile: Option<Hostile>,
    /// What GET /version reports (its minor version sets which reviews are served).
    pub git_version: String,
    /// The API's port (0: any free one; 443 as a load balancer would).
    pub api_port: u16,
    /// Serve the API under this path only, as behind a reverse proxy (`/k8s/spoke`).
    pub api_prefix: String,
    /// The port the node's k3s.yaml names (None: the API's own), e.g. 6443 behind a
    /// load balancer on 443.
    pub kubeconfig_port: Option<u16>,
    /// Anonymous requests are `system:anonymous` rather than a 401.
    pub anonymous: bool,
    /// The emulated API signs approved client CSRs with the node's client CA (false:
    /// no signer, an approved CSR is never signed).
    pub csr_signer: bool,
    /// Started with `--authentication-config` on the node's file
    /// ([`realstack::spoke::authentication_config_path`], trusting no issuer until one is
    /// written), able to reach these hub issuers (a federated spoke).
    pub trust: Option<spokekeeper_lab::federation::Reachable>,
    /// The sshd's port (0: any free one), e.g. another server node's, as a spoke's
    /// `ssh:` settings reach every one of its `servers` on one port.
    pub ssh_port: u16,
}

impl Default for NodeOptions {
    fn default() -> Self {
        Self {
            sshd: true,
            api: true,
            client_cert_days: 365,
            address_in_sans: true,
            hostile: None,
            git_version: "v1.33.1+k3s1".into(),
            api_port: 0,
            api_prefix: String::new(),
            kubeconfig_port: None,
            anonymous: false,
            csr_signer: true,
            trust: None,
            ssh_port: 0,
        }
    }
}

/// Owns the runtime the API servers run on, so the lab works from sync and async tests
/// alike and stops deterministically.
struct LabRuntime(Option<tokio::runtime::Runtime>);

impl LabRuntime {
    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("lab runtime").handle()
    }
}

impl Drop for LabRuntime {
    fn drop(&mut self) {
        // Drop may run inside a test's runtime, where a blocking shutdown panics.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

pub struct Lab {
    rt: Arc<LabRuntime>,
}

impl Lab {
    pub fn new() -> Lab {
        assert!(
            rustix::process::geteuid().is_root(),
            "the lab runs sshd, useradd and sudoers as root: run the tests as root (CI does)"
        );
        fs::create_dir_all("/run/sshd").expect("create /run/sshd");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lab-api")
            .enable_all()
            .build()
            .expect("lab runtime");
        Lab {
            rt: Arc::new(LabRuntime(Some(rt))),
        }
    }

    pub fn add_node(&self, opts: NodeOptions) -> Node {
        Node::new(self.rt.clone(), opts)
    }

    pub fn add_nodes(&self, n: usize, opts: &NodeOptions) -> Vec<Node> {
        (0..n).map(|_| self.add_node(opts.clone())).collect()
    }
}

impl Default for Lab {
    fn default() -> Self {
        Self::new()
    }
}

/// One spoke node. Fields are facts that do not change for its lifetime (a rebuild
/// keeps address and ports).
pub struct Node {
    pub address: IpAddr,
    /// 0 when the node has no sshd.
    pub ssh_port: u16,
    pub api_port: u16,
    /// `https://ADDRESS:API_PORT` and the API prefix, if any.
    pub api_url: String,
    pub dir: PathBuf,
    /// The k3s.yaml on the node (root, mode 600).
    pub kubeconfig_path: PathBuf,
    /// known_hosts with this node's host key, as the hub would have it.
    pub known_hosts_path: PathBuf,
    /// The hub's private key, authorized for root and [`LAB_USER`].
    pub identity_path: PathBuf,
    opts: NodeOptions,
    pki: Pki,
    /// The emulated API's CSRs and bindings: kept across API restarts, new on a rebuild.
    objects: Arc<Mutex<Objects>>,
    // Drop order matters: servers stop before the lease and the runtime go.
    api: Option<ApiServer>,
    sshd: Option<Sshd>,
    sudoers: Option<PathBuf>,
    lease: AddressLease,
    _tmp: tempfile::TempDir,
    rt: Arc<LabRuntime>,
}

impl Node {
    fn new(rt: Arc<LabRuntime>, opts: NodeOptions) -> Node {
        let lease = AddressLease::acquire();
        let addr = lease.addr;
        // Short: control sockets and sshd paths stay far below the 108-byte limit.
        let tmp = tempfile::Builder::new()
            .prefix("skl")
            .tempdir_in("/tmp")
            .expect("node dir");
        let dir = tmp.path().to_owned();
        // Readable by the lab user (sshd reads its authorized_keys as that user).
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod node dir");
        let pki = Pki::generate(&PkiOptions {
            address: IpAddr::V4(addr),
            address_in_sans: opts.address_in_sans,
            client_cert_days: opts.client_cert_days,
        });
        let objects = fresh_objects(&pki, &opts);
        if opts.trust.is_some() {
            // The flag's file must exist before the API server starts.
            let path = dir.join(FEDERATED_FILE);
            realstack::federated::write_config(&path, realstack::federated::NO_ISSUERS);
        }
        let mut node = Node {
            address: IpAddr::V4(addr),
            ssh_port: 0,
            api_port: 0,
            api_url: String::new(),
            kubeconfig_path: dir.join("k3s.yaml"),
            known_hosts_path: dir.join("known_hosts"),
            identity_path: dir.join("id_ed25519"),
            dir,
            opts,
            pki,
            objects,
            api: None,
            sshd: None,
            sudoers: None,
            lease,
            _tmp: tmp,
            rt,
        };
        let api = node.start_api_on(node.opts.api_port);
        node.api_port = api.port;
        node.api_url = format!("https://{addr}:{}{}", api.port, node.opts.api_prefix);
        if node.opts.api {
            node.api = Some(api);
        }
        node.write_kubeconfig();
        if node.opts.sshd {
            node.setup_ssh();
        }
        node
    }

    fn setup_ssh(&mut self) {
        sshd::ensure_user(LAB_USER);
        sshd::keygen(&self.dir.join("ssh_host_ed25519_key"));
        sshd::keygen(&self.identity_path);
        for user in ["root", LAB_USER] {
            self.set_authorized_key_options(user, "");
        }
        let rule = format!(
            "{LAB_USER} ALL=(root) NOPASSWD: /usr/bin/cat {}\n",
            self.kubeconfig_path.display()
        );
        self.set_sudoers(&rule)
            .expect("the lab's own sudoers rule is valid");
        let sshd = Sshd::start(&self.dir, self.lease.addr, self.opts.ssh_port);
        self.ssh_port = sshd.port;
        self.lease
            .record_sshd(sshd.pid().as_raw_nonzero().get() as u32, &sshd.config);
        self.sshd = Some(sshd);
        fs::write(
            &self.known_hosts_path,
            format!("{}\n", self.host_key_line()),
        )
        .expect("write known_hosts");
    }

    /// SSH settings that reach this node as `user` (root, or [`LAB_USER`] with sudo).
    pub fn ssh_settings(&self, user: &str) -> SshSettings {
        SshSettings {
            user: user.into(),
            port: self.ssh_port,
            identity: self.identity_path.clone(),
            known_hosts: self.known_hosts_path.clone(),
            sudo: user != "root",
            connect_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_secs(20),
        }
    }

    /// This node as the spoke `name` of a spokekeeper.yaml: its k3s.yaml over its sshd
    /// (as root), connects timing out after `connect_timeout` (`5s`).
    pub fn spoke(&self, name: &str, connect_timeout: &str) -> Spoke {
        Spoke::new(name, self.address)
            .kubeconfig_path(&self.kubeconfig_path)
            .ssh(&Ssh {
                port: self.ssh_port,
                identity: self.identity_path.clone(),
                known_hosts: Some(self.known_hosts_path.clone()),
                connect_timeout: Some(connect_timeout.into()),
            })
    }

    pub fn address_string(&self) -> String {
        self.address.to_string()
    }

    pub fn kubeconfig_path_str(&self) -> &str {
        self.kubeconfig_path.to_str().expect("UTF-8 path")
    }

    /// The known_hosts line for the current host key.
    pub fn host_key_line(&self) -> String {
        let key = sshd::public_key(&self.dir.join("ssh_host_ed25519_key"));
        format!("[{}]:{} {key}", self.address, self.ssh_port)
    }

    /// Exactly what is in the node's k3s.yaml.
    pub fn kubeconfig_bytes(&self) -> Vec<u8> {
        fs::read(&self.kubeconfig_path).expect("read k3s.yaml")
    }

    /// The k3s.yaml with the server host rewritten to the node's address, as the hub uses it.
    pub fn hub_kubeconfig(&self) -> SecretBytes {
        SecretBytes::from(kubeconfig_yaml(
            &self.api_url,
            &self.pki.parts,
            self.opts.hostile,
            &self.exec_marker_str(),
        ))
    }

    /// The emulated API's CSRs and ClusterRoleBindings (inspect them, or make every
    /// approval a denial with `deny_approvals`).
    pub fn api_objects(&self) -> Arc<Mutex<Objects>> {
        self.objects.clone()
    }

    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// Another server at `address` in this node's control plane: its serving certificate
    /// names that address too (for a real API server started there on [`Node::pki`]).
    pub fn serve_at_too(&mut self, address: IpAddr) {
        self.pki.serve_also(address);
    }

    pub fn parts(&self) -> KubeconfigParts {
        self.pki.parts.clone()
    }

    pub fn server_ca_der(&self) -> Vec<u8> {
        self.pki.server_ca_der.clone()
    }

    pub fn client_ca_der(&self) -> Vec<u8> {
        self.pki.client_ca_der.clone()
    }

    pub fn client_cert_der(&self) -> Vec<u8> {
        self.pki.client_cert_der.clone()
    }

    /// Where the hostile exec plugin would leave its mark.
    pub fn exec_marker(&self) -> PathBuf {
        self.dir.join("exec-plugin-ran")
    }

    fn exec_marker_str(&self) -> String {
        self.exec_marker().display().to_string()
    }

    /// A reinstall: new CAs and certificates, a new k3s.yaml, the API restarted on the
    /// same address and port (if it was running).
    pub fn rebuild(&mut self) {
        self.pki = Pki::generate(&PkiOptions {
            address: self.address,
            address_in_sans: self.opts.address_in_sans,
            client_cert_days: self.opts.client_cert_days,
        });
        self.objects = fresh_objects(&self.pki, &self.opts);
        self.write_kubeconfig();
        if self.api.take().is_some() {
            self.start_api();
        }
    }

    /// A cluster CA rotation: the node's kubeconfig trusts [old CA, new CA], and the API
    /// (restarted, if it was running) serves a certificate from the new CA or the old.
    pub fn rotate_server_ca(&mut self, serve_from_new: bool) {
        self.pki.rotate_server_ca(serve_from_new);
        self.write_kubeconfig();
        if self.api.take().is_some() {
            self.start_api();
        }
    }

    /// The CA rotation finished: the node's kubeconfig trusts the new CA alone, and the
    /// API (restarted, if it was running) serves from it.
    pub fn finish_server_ca_rotation(&mut self) {
        self.pki.finish_server_ca_rotation();
        self.write_kubeconfig();
        if self.api.take().is_some() {
            self.start_api();
        }
    }

    /// The API (restarted, if it was running) presents `extra` (DER) after its
    /// certificate and CA, as a server whose --tls-cert-file carries more does (or a
    /// hostile one); the node's kubeconfig is unchanged.
    pub fn serve_also(&mut self, extra: &[Vec<u8>]) {
        let extra = extra.iter().map(|d| d.clone().into());
        self.pki.serving_chain.extend(extra);
        if self.api.take().is_some() {
            self.start_api();
        }
    }

    /// The node's kubeconfig trusts `ca` (DER) too, after its CA.
    pub fn trust_also(&mut self, ca: &[u8]) {
        let pem = spokekeeper_lab::pki::pem("CERTIFICATE", ca);
        self.pki.parts.ca_pem.push_str(&pem);
        self.write_kubeconfig();
    }

    /// The node renews its client certificate (same CA, same key), as k3s does on restart.
    pub fn renew_client_cert(&mut self, days: i64) {
        self.pki.renew_client(days);
        self.write_kubeconfig();
    }

    pub fn stop_api(&mut self) {
        self.api = None;
    }

    /// `peer` as another server node of this node's control plane: an API server on its
    /// address and this node's API port, with this node's CAs and objects (one etcd),
    /// reading `peer`'s own AuthenticationConfiguration. Dropped, it is down.
    pub fn serve_peer(&mut self, peer: &Node) -> ApiServer {
        self.pki.serve_also(peer.address);
        let addr = SocketAddr::new(peer.address, self.api_port);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let mut identity = ApiIdentity::new(&self.pki, &self.opts.git_version)
                .with_objects(self.objects.clone());
            if let Some(reachable) = &self.opts.trust {
                let path = peer.dir.join(FEDERATED_FILE);
                identity = identity.with_trust(SpokeTrust::new(path, reachable.clone()));
            }
            match ApiServer::start(self.rt.handle(), addr, identity) {
                Ok(server) => return server,
                // As start_api_on: a restarted peer's old listener frees in moments.
                Err(e) if std::time::Instant::now() >= deadline => {
                    panic!("the peer's API server on {addr} did not start: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    pub fn start_api(&mut self) {
        if self.api.is_none() {
            self.api = Some(self.start_api_on(self.api_port));
        }
    }

    pub fn api_running(&self) -> bool {
        self.api.is_some()
    }

    /// Kills sshd: connections are then refused.
    pub fn stop_sshd(&mut self) {
        self.sshd = None;
    }

    /// Starts sshd again on the same port.
    pub fn start_sshd(&mut self) {
        if self.sshd.is_none() && self.ssh_port != 0 {
            self.sshd = Some(Sshd::start(&self.dir, self.lease.addr, self.ssh_port));
        }
    }

    /// SIGSTOP the sshd listener: TCP connects still succeed (the kernel's backlog) but
    /// nothing answers, like a wedged node.
    pub fn sigstop(&self) {
        self.sshd
            .as_ref()
            .expect("node has sshd")
            .signal(Signal::STOP);
    }

    pub fn sigcont(&self) {
        self.sshd
            .as_ref()
            .expect("node has sshd")
            .signal(Signal::CONT);
    }

    /// A reinstalled OS: new host key, sshd restarted on the same port. The node's
    /// known_hosts file keeps the old key (so the hub's view is now "changed").
    pub fn rotate_host_key(&mut self) {
        self.sshd = None;
        sshd::keygen(&self.dir.join("ssh_host_ed25519_key"));
        self.sshd = Some(Sshd::start(&self.dir, self.lease.addr, self.ssh_port));
    }

    /// Rewrites `user`'s authorized_keys: the identity's public key after `options`
    /// (e.g. a forced command). sshd reads it on every login.
    pub fn set_authorized_key_options(&self, user: &str, options: &str) {
        let key = sshd::public_key(&self.identity_path);
        let sep = if options.is_empty() { "" } else { " " };
        let path = self.dir.join(format!("authorized_keys.{user}"));
        fs::write(&path, format!("{options}{sep}{key}\n")).expect("write authorized_keys");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))
            .expect("chmod authorized_keys");
    }

    /// Replaces this node's sudoers drop-in; refused (and nothing installed) unless
    /// `visudo -cf` accepts it.
    pub fn set_sudoers(&mut self, rules: &str) -> Result<(), String> {
        let target = self.lease.sudoers_path();
        sshd::install_sudoers(&target, rules)?;
        self.sudoers = Some(target);
        Ok(())
    }

    /// Writes a root-owned file (mode 600) into the node directory.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.join(name);
        fs::write(&path, bytes).expect("write node file");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod node file");
        path
    }

    fn write_kubeconfig(&self) {
        let port = self.opts.kubeconfig_port.unwrap_or(self.api_port);
        let server = format!("https://127.0.0.1:{port}");
        let text = kubeconfig_yaml(
            &server,
            &self.pki.parts,
            self.opts.hostile,
            &self.exec_marker_str(),
        );
        self.write_file("k3s.yaml", text.as_bytes());
    }

    fn start_api_on(&self, port: u16) -> ApiServer {
        let addr = SocketAddr::new(self.address, port);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let mut identity = ApiIdentity::new(&self.pki, &self.opts.git_version)
                .with_prefix(&self.opts.api_prefix)
                .with_objects(self.objects.clone());
            if self.opts.anonymous {
                identity = identity.with_anonymous();
            }
            if let Some(reachable) = &self.opts.trust {
                let path = self.dir.join(FEDERATED_FILE);
                identity = identity.with_trust(SpokeTrust::new(path, reachable.clone()));
            }
            match ApiServer::start(self.rt.handle(), addr, identity) {
                Ok(server) => return server,
                // A process forked by a concurrent test (ssh-keygen, sshd, ssh) holds a
                // copy of the old listener until it execs: the port frees in moments.
                Err(e)
                    if e.kind() == std::io::ErrorKind::AddrInUse
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("lab API server on {addr} did not start: {e}"),
            }
        }
    }
}

fn fresh_objects(pki: &Pki, opts: &NodeOptions) -> Arc<Mutex<Objects>> {
    let signer = if opts.csr_signer {
        Signer::client_ca(pki)
    } else {
        Signer::Missing
    };
    Arc::new(Mutex::new(Objects::new(signer)))
}

impl Drop for Node {
    fn drop(&mut self) {
        self.api = None;
        self.sshd = None;
        if let Some(path) = self.sudoers.take() {
            let _ = fs::remove_file(path);
        }
    }
}

/// The repository's root: the chart, keys/, docs/, the test vectors and .tools/ are read
/// from there.
pub fn repo_root() -> PathBuf {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .nth(2)
        .expect("tests/support sits two levels down")
        .into()
}

/// The spokekeeper binary cargo built for the running test or benchmark (cargo sets
/// CARGO_BIN_EXE_spokekeeper when it runs one).
pub fn bin() -> PathBuf {
    std::env::var_os("CARGO_BIN_EXE_spokekeeper")
        .map(PathBuf::from)
        .expect("CARGO_BIN_EXE_spokekeeper is unset: run this through cargo test or cargo bench")
}

/// Peak resident memory of this process (VmHWM), in KiB.
pub fn peak_rss_kib() -> Option<u64> {
    status_kib(std::process::id(), "VmHWM:")
}

/// Current resident memory of this process (VmRSS), in KiB.
pub fn rss_kib() -> Option<u64> {
    status_kib(std::process::id(), "VmRSS:")
}

/// A KiB field of /proc/PID/status (`VmRSS:`, `VmHWM:`, ...), if the process is there.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Resets VmHWM to the current RSS (Linux >= 4.0), to measure one phase's peak.
pub fn reset_peak_rss() -> bool {
    fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Installs ring as the process default (kube builds its TLS config from it).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A short private scratch directory under /tmp.
pub fn scratch_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sks")
        .tempdir_in("/tmp")
        .expect("scratch dir")
}
