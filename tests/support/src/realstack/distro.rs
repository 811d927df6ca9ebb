//! A spoke node as k3s or RKE2 lays it out, on the real kube-apiserver and
//! kube-controller-manager (k3s and RKE2 themselves cannot be built here). Every fact is
//! read from their source; docs/distributions.md names the file and release of each.
//!
//! - Files under the node's root directory at the distribution's paths:
//!   `var/lib/rancher/{k3s,rke2}/server/tls` (dirs 0700; keys 0600, certificates 0644)
//!   and `etc/rancher/{k3s,rke2}/{k3s,rke2}.yaml`, root-owned, mode 0600 unless
//!   `--write-kubeconfig-mode` says otherwise.
//! - `client-ca.crt` and `server-ca.crt` are bundles whose first certificate signs (a
//!   single self-signed CA on a default install), `*-ca.key` holds that CA's key first;
//!   `client-ca.nochain.crt`/`server-ca.nochain.crt` hold the first certificate alone, and
//!   the controller-manager signs client CSRs with `client-ca.nochain.crt` and
//!   `client-ca.key`. Leaf files are the leaf followed by the whole CA bundle.
//! - k3s: kube-apiserver on 6444 (`HTTPSPort + 1`), the supervisor on 6443 in front of it
//!   (here a TLS passthrough [`Supervisor`], so the API server's own certificate is what
//!   a client sees, where k3s's supervisor serves its own from the same server CA);
//!   RKE2: kube-apiserver itself on 6443 (its supervisor is on 9345 and serves nothing
//!   spokekeeper reads, so it is not played). The kubeconfig says
//!   `https://127.0.0.1:6443` for both.
//! - The lab binds the node's leased loopback address rather than 127.0.0.1, so that
//!   nodes do not collide; spokekeeper rewrites the host as it does for any node.

use std::fs;
use std::io;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use spokekeeper_lab::pki::{pem, pkcs8_p256_to_sec1};
use spokekeeper_lab::{KubeconfigParts, kubeconfig_yaml};
use time::OffsetDateTime;

use super::bin;
use super::controller_manager::{ControllerManager, SignerFiles};
use super::kube::{Etcd, KubeApi};
use super::proc::Proc;
use crate::Node;

/// The port a k3s or RKE2 kubeconfig names.
pub const KUBECONFIG_PORT: u16 = 6443;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distro {
    K3s,
    Rke2,
}

impl Distro {
    /// `version.Program`: the name in paths and CA common names.
    pub fn program(self) -> &'static str {
        match self {
            Distro::K3s => "k3s",
            Distro::Rke2 => "rke2",
        }
    }

    /// The kubeconfig it writes, relative to `/`.
    pub fn kubeconfig(self) -> String {
        let p = self.program();
        format!("etc/rancher/{p}/{p}.yaml")
    }

    /// Its server data directory's tls/, relative to `/`.
    pub fn tls_dir(self) -> String {
        format!("var/lib/rancher/{}/server/tls", self.program())
    }

    /// Where kube-apiserver listens: k3s 6444 behind its supervisor, RKE2 6443.
    pub fn api_port(self) -> u16 {
        match self {
            Distro::K3s => KUBECONFIG_PORT + 1,
            Distro::Rke2 => KUBECONFIG_PORT,
        }
    }
}

/// How a distro node is made.
#[derive(Clone, Debug)]
pub struct DistroOptions {
    pub distro: Distro,
    /// Days the admin client certificate is valid (k3s issues a year).
    pub admin_days: i64,
    /// `--write-kubeconfig-mode` (None: k3s's and RKE2's 0600).
    pub kubeconfig_mode: Option<u32>,
}

impl DistroOptions {
    pub fn new(distro: Distro) -> DistroOptions {
        DistroOptions {
            distro,
            admin_days: 365,
            kubeconfig_mode: None,
        }
    }
}

/// One CA as a distribution keeps it: `TYPE-ca.crt` (signer first) and `TYPE-ca.key`.
struct Ca {
    signer: CertifiedIssuer<'static, KeyPair>,
    /// The self-signed root behind `signer` once a rotation made `signer` an
    /// intermediate; None while `signer` is itself the root.
    root: Option<CertifiedIssuer<'static, KeyPair>>,
    bundle: String,
    keys: zeroize::Zeroizing<String>,
}

impl Ca {
    /// What k3s's createSigningCertKey makes: one self-signed CA, `PREFIX-ca@UNIX`.
    fn new(prefix: &str, now: OffsetDateTime) -> Ca {
        let signer = CertifiedIssuer::self_signed(
            ca_params(&format!("{prefix}-ca@{}", now.unix_timestamp()), now),
            KeyPair::generate().expect("keygen"),
        )
        .expect("self-sign CA");
        let bundle = signer.pem();
        let keys = zeroize::Zeroizing::new(signer.key().serialize_pem());
        Ca {
            signer,
            root: None,
            bundle,
            keys,
        }
    }

    /// What contrib/util/rotate-default-ca-certs.sh makes of it: a new self-signed root
    /// `PROGRAM-TYPE-root@UNIX`, the same root cross-signed by the old root, a new
    /// `PROGRAM-TYPE-ca@UNIX` signed by the new root; the bundle is [new CA, new root,
    /// cross-signed root, old root], the key file [new CA key, new root key].
    fn rotated(&self, name: &str, now: OffsetDateTime) -> Ca {
        let stamp = now.unix_timestamp();
        let old_root = self.root.as_ref().unwrap_or(&self.signer);
        let root_params = ca_params(&format!("{name}-root@{stamp}"), now);
        let root_key = KeyPair::generate().expect("keygen");
        let xsigned = root_params
            .clone()
            .signed_by(&root_key, old_root)
            .expect("cross-sign the new root");
        let root = CertifiedIssuer::self_signed(root_params, root_key).expect("self-sign root");
        let signer = CertifiedIssuer::signed_by(
            ca_params(&format!("{name}-ca@{stamp}"), now),
            KeyPair::generate().expect("keygen"),
            &root,
        )
        .expect("sign the new CA");
        let bundle = [signer.pem(), root.pem(), xsigned.pem(), old_root.pem()].concat();
        let keys = zeroize::Zeroizing::new(format!(
            "{}{}",
            signer.key().serialize_pem(),
            root.key().serialize_pem()
        ));
        Ca {
            signer,
            root: Some(root),
            bundle,
            keys,
        }
    }

    /// The first certificate alone: `TYPE-ca.nochain.crt`.
    fn nochain(&self) -> String {
        self.signer.pem()
    }
}

fn ca_params(cn: &str, now: OffsetDateTime) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyCertSign,
    ];
    p.use_authority_key_identifier_extension = true;
    p.not_before = now - time::Duration::hours(1);
    p.not_after = now + time::Duration::days(3650);
    p
}

fn leaf_params(cn: &str, org: Option<&str>, days: i64) -> CertificateParams {
    let now = OffsetDateTime::now_utc();
    let mut p = CertificateParams::default();
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    if let Some(o) = org {
        p.distinguished_name.push(DnType::OrganizationName, o);
    }
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.use_authority_key_identifier_extension = true;
    p.not_before = now - time::Duration::hours(1);
    p.not_after = now + time::Duration::days(days);
    p
}

/// A certificate file as k3s's createClientCertKey writes it: the leaf, then the CA
/// bundle; and its key, SEC1 as Go's MarshalECPrivateKey writes it.
fn issue(ca: &Ca, params: CertificateParams) -> (String, zeroize::Zeroizing<String>) {
    let key = KeyPair::generate().expect("keygen");
    let cert = params.signed_by(&key, &ca.signer).expect("sign leaf");
    let key_pem = pem("EC PRIVATE KEY", &pkcs8_p256_to_sec1(key.serialized_der()));
    (
        format!("{}{}", cert.pem(), ca.bundle),
        zeroize::Zeroizing::new(key_pem),
    )
}

/// The TLS passthrough in front of k3s's API server on 6443: every connection is
/// relayed byte for byte to the API server's port, whatever runs there now.
pub struct Supervisor {
    stop: Arc<AtomicBool>,
    addr: SocketAddr,
    open: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<JoinHandle<()>>,
}

impl Supervisor {
    pub fn start(listen: SocketAddr, upstream: SocketAddr) -> Supervisor {
        let listener = bind_retrying(listen);
        let stop = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (s, o) = (stop.clone(), open.clone());
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = conn else { continue };
                let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(5))
                else {
                    continue;
                };
                let mut open = o.lock().unwrap();
                for stream in [&client, &server] {
                    if let Ok(c) = stream.try_clone() {
                        open.push(c);
                    }
                }
                relay(&client, &server);
                relay(&server, &client);
            }
        });
        Supervisor {
            stop,
            addr: listen,
            open,
            accept: Some(accept),
        }
    }
}

fn bind_retrying(addr: SocketAddr) -> TcpListener {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match TcpListener::bind(addr) {
            Ok(l) => return l,
            // A process forked by a concurrent test may hold the lab API's old listener.
            Err(e)
                if e.kind() == io::ErrorKind::AddrInUse && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("the supervisor cannot listen on {addr}: {e}"),
        }
    }
}

/// Copies `from` to `to` until EOF, then half-closes `to`.
fn relay(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = io::copy(&mut from, &mut to);
        let _ = to.shutdown(Shutdown::Write);
    });
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// A k3s- or RKE2-shaped spoke on a lab node: its files, its API server, its signer,
/// and for k3s the supervisor's port.
pub struct DistroSpoke {
    // Drop order: the signer before the API server, the proxy before both.
    pub supervisor: Option<Supervisor>,
    pub signer: Option<ControllerManager>,
    api: Option<KubeApi>,
    address: IpAddr,
    /// The node's directory: its root is `dir/root`.
    dir: PathBuf,
    kubeconfig_path: PathBuf,
    pub opts: DistroOptions,
    client: Ca,
    server: Ca,
    generation: u32,
    /// Where this generation's API server and signer keep their logs and storage key.
    logs: PathBuf,
}

impl DistroSpoke {
    /// Lays `node` (sshd, no emulated API, `api_port` 6443) out as `opts.distro` writes
    /// it and starts its API server over `etcd` and its signer, their logs under `logs`.
    /// `node.kubeconfig_path` becomes the distribution's: a configuration made from the
    /// node before must be written again.
    pub fn on(node: &mut Node, etcd: &Etcd, logs: &Path, opts: DistroOptions) -> DistroSpoke {
        let now = OffsetDateTime::now_utc();
        let p = opts.distro.program();
        node.kubeconfig_path = node.dir.join("root").join(opts.distro.kubeconfig());
        let mut spoke = DistroSpoke {
            supervisor: None,
            signer: None,
            api: None,
            address: node.address,
            dir: node.dir.clone(),
            kubeconfig_path: node.kubeconfig_path.clone(),
            client: Ca::new(&format!("{p}-client"), now),
            server: Ca::new(&format!("{p}-server"), now),
            generation: 0,
            logs: logs.to_owned(),
            opts,
        };
        spoke.write_all();
        spoke.start_control_plane(etcd);
        if spoke.opts.distro == Distro::K3s {
            spoke.supervisor = Some(Supervisor::start(
                SocketAddr::new(spoke.address, KUBECONFIG_PORT),
                SocketAddr::new(spoke.address, spoke.opts.distro.api_port()),
            ));
        }
        spoke
    }

    /// The node's root: what is `/` on a real node.
    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    /// A file under the server's tls/ directory.
    pub fn tls(&self, file: &str) -> PathBuf {
        self.root().join(self.opts.distro.tls_dir()).join(file)
    }

    fn cred(&self, file: &str) -> PathBuf {
        self.root()
            .join(self.opts.distro.tls_dir())
            .join("../cred")
            .join(file)
    }

    /// Everything the server writes at start: the CA files, the leaf certificates
    /// (issued again from the current CAs, as k3s does when a leaf's issuer no longer
    /// is the first CA, or when it expires soon) and the kubeconfigs.
    fn write_all(&mut self) {
        let tls = self.tls("");
        for dir in [tls.clone(), self.cred(""), tls.join("temporary-certs")] {
            fs::create_dir_all(&dir).expect("tls dir");
            set_mode(&dir, 0o700);
        }
        write(&self.tls("client-ca.crt"), &self.client.bundle, 0o644);
        write(&self.tls("client-ca.key"), &self.client.keys, 0o600);
        write(
            &self.tls("client-ca.nochain.crt"),
            &self.client.nochain(),
            0o644,
        );
        write(&self.tls("server-ca.crt"), &self.server.bundle, 0o644);
        write(&self.tls("server-ca.key"), &self.server.keys, 0o600);
        write(
            &self.tls("server-ca.nochain.crt"),
            &self.server.nochain(),
            0o644,
        );

        let mut serving = leaf_params("kube-apiserver", None, 365);
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving.subject_alt_names = [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "localhost",
        ]
        .iter()
        .map(|n| SanType::DnsName((*n).try_into().expect("ia5")))
        .chain(
            ["127.0.0.1", "::1"]
                .iter()
                .map(|ip| SanType::IpAddress(ip.parse().expect("ip"))),
        )
        .chain([SanType::IpAddress(self.address)])
        .collect();
        let (cert, key) = issue(&self.server, serving);
        write(&self.tls("serving-kube-apiserver.crt"), &cert, 0o644);
        write(&self.tls("serving-kube-apiserver.key"), &key, 0o600);

        self.renew_admin(self.opts.admin_days);

        let mut controller = leaf_params("system:kube-controller-manager", None, 365);
        controller.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let (cert, key) = issue(&self.client, controller);
        let parts = KubeconfigParts {
            ca_pem: self.server.bundle.clone(),
            client_chain_pem: cert,
            client_key_pem: key.to_string(),
        };
        let loopback = format!("https://{}:{}", self.address, self.opts.distro.api_port());
        write(
            &self.cred("controller.kubeconfig"),
            &kubeconfig_yaml(&loopback, &parts, None, ""),
            0o600,
        );
    }

    /// A new admin certificate from the client CA, valid `days`, with a new key (k3s
    /// regenerates the key with the certificate), and the kubeconfig written again.
    fn renew_admin(&mut self, days: i64) {
        let mut admin = leaf_params("system:admin", Some("system:masters"), days);
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let (cert, key) = issue(&self.client, admin);
        write(&self.tls("client-admin.crt"), &cert, 0o644);
        write(&self.tls("client-admin.key"), &key, 0o600);
        let parts = KubeconfigParts {
            ca_pem: self.server.bundle.clone(),
            client_chain_pem: cert,
            client_key_pem: key.to_string(),
        };
        let text = kubeconfig_yaml(
            &format!("https://127.0.0.1:{KUBECONFIG_PORT}"),
            &parts,
            None,
            "",
        );
        let path = self.kubeconfig_path.clone();
        fs::create_dir_all(path.parent().expect("kubeconfig dir")).expect("kubeconfig dir");
        write(&path, &text, self.opts.kubeconfig_mode.unwrap_or(0o600));
        // The admin kubeconfig the lab's kubectl uses, straight to the API server.
        let direct = text.replace(
            &format!("https://127.0.0.1:{KUBECONFIG_PORT}"),
            &format!("https://{}:{}", self.address, self.opts.distro.api_port()),
        );
        write(&self.cred("admin.kubeconfig"), &direct, 0o600);
    }

    /// kube-apiserver with the flags k3s passes (pkg/daemons/control/server.go) that
    /// bear on what spokekeeper sees, and the signer with the nochain certificate.
    fn start_control_plane(&mut self, etcd: &Etcd) {
        let name = format!(
            "{}-{}-{}",
            self.opts.distro.program(),
            self.address,
            self.generation
        );
        let dir = self.logs.join(&name);
        fs::create_dir_all(&dir).expect("api log dir");
        let sa_key = dir.join("service.key");
        let sa_pub = dir.join("service.pub");
        if !sa_key.exists() {
            let key = KeyPair::generate().expect("service-account key");
            fs::write(&sa_key, key.serialize_pem()).expect("write service.key");
            fs::write(&sa_pub, key.public_key_pem()).expect("write service.pub");
        }
        let addr = self.address;
        let port = self.opts.distro.api_port();
        let path = |f: &str| self.tls(f).display().to_string();
        let mut cmd = Command::new(bin("kube-apiserver"));
        cmd.arg(format!("--etcd-servers={}", etcd.url))
            .arg(format!("--etcd-prefix=/{name}"))
            .arg(format!("--bind-address={addr}"))
            .arg(format!("--secure-port={port}"))
            .arg("--advertise-address=10.43.0.1")
            .arg("--endpoint-reconciler-type=none")
            .arg("--anonymous-auth=false")
            .arg("--authorization-mode=Node,RBAC")
            .arg(format!("--client-ca-file={}", path("client-ca.crt")))
            .arg(format!(
                "--tls-cert-file={}",
                path("serving-kube-apiserver.crt")
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                path("serving-kube-apiserver.key")
            ))
            .arg(format!("--cert-dir={}", path("temporary-certs")))
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!("--service-account-key-file={}", sa_pub.display()))
            .arg(format!(
                "--service-account-signing-key-file={}",
                sa_key.display()
            ))
            .arg("--service-cluster-ip-range=10.43.0.0/16")
            .arg("--profiling=false")
            .arg("--enable-priority-and-fairness=false")
            .arg("--watch-cache=false");
        let proc = Proc::spawn("kube-apiserver", &dir, cmd);
        let mut api = KubeApi {
            name: name.clone(),
            url: format!("https://{addr}:{port}"),
            addr,
            port,
            admin_kubeconfig: self.cred("admin.kubeconfig"),
            dir: dir.clone(),
            proc,
        };
        api.wait_ready();
        let files = SignerFiles {
            kubeconfig: self.cred("controller.kubeconfig"),
            cert: self.tls("client-ca.nochain.crt"),
            key: self.tls("client-ca.key"),
        };
        self.signer = Some(ControllerManager::start_files(&api, &files, dir, None));
        self.api = Some(api);
    }

    /// The API server (kubectl as the admin, straight to its port).
    pub fn api(&self) -> &KubeApi {
        self.api.as_ref().expect("the API server runs")
    }

    fn stop_control_plane(&mut self) {
        if let Some(mut s) = self.signer.take() {
            s.stop();
        }
        if let Some(mut api) = self.api.take() {
            api.stop();
        }
    }

    /// A restart of the server: leaf certificates renewed from the same CAs (the admin
    /// certificate valid `admin_days` from now, with a new key), the kubeconfig
    /// written again, the control plane restarted on the same storage.
    pub fn restart_renewing(&mut self, etcd: &Etcd, admin_days: i64) {
        self.stop_control_plane();
        self.opts.admin_days = admin_days;
        self.write_all();
        self.start_control_plane(etcd);
    }

    /// `rotate-default-ca-certs.sh`, then `k3s certificate rotate-ca` and a restart:
    /// new client and server CAs cross-signed by the old roots, the old roots kept in
    /// the bundles, every leaf issued again, the same storage.
    pub fn rotate_ca(&mut self, etcd: &Etcd) {
        self.stop_control_plane();
        let now = OffsetDateTime::now_utc();
        let p = self.opts.distro.program();
        self.client = self.client.rotated(&format!("{p}-client"), now);
        self.server = self.server.rotated(&format!("{p}-server"), now);
        self.write_all();
        self.start_control_plane(etcd);
    }

    /// A reinstall (`k3s-uninstall.sh`, install again): new CAs, every file new, fresh
    /// storage.
    pub fn rebuild(&mut self, etcd: &Etcd) {
        self.stop_control_plane();
        let now = OffsetDateTime::now_utc();
        let p = self.opts.distro.program();
        self.client = Ca::new(&format!("{p}-client"), now);
        self.server = Ca::new(&format!("{p}-server"), now);
        self.generation += 1;
        self.write_all();
        self.start_control_plane(etcd);
    }

    /// The certificates of a PEM file under tls/, DER, in order.
    pub fn certs(&self, file: &str) -> Vec<Vec<u8>> {
        let text = fs::read(self.tls(file)).expect("read tls file");
        pem_certs(&text)
    }
}

/// The DER of each CERTIFICATE block.
pub fn pem_certs(pem_text: &[u8]) -> Vec<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem_text)
        .map(|c| c.expect("PEM certificate").to_vec())
        .collect()
}

fn write(path: &Path, text: &str, mode: u32) {
    fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    set_mode(path, mode);
}

fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}
