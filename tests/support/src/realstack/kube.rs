//! etcd and kube-apiserver processes, and kubectl against them.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use spokekeeper_lab::pki::pem;
use spokekeeper_lab::{Pki, PkiOptions, kubeconfig_yaml};

use super::proc::Proc;
use super::{bin, free_port, run, wait_until};

/// Debian's etcd-server.
pub const ETCD: &str = "/usr/bin/etcd";

/// The issuer every lab API server shares unless started with its own, as in-cluster
/// clusters name theirs.
pub const SHARED_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// How long a component may take to come up on a busy two-core machine.
pub const START: Duration = Duration::from_secs(120);

pub struct Etcd {
    pub url: String,
    pub proc: Proc,
}

impl Etcd {
    /// A single-member etcd on loopback, its data in `dir/etcd`: Debian's etcd-server
    /// (3.4), which this kube-apiserver accepts.
    pub fn start(dir: &Path) -> Etcd {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (client, peer) = (free_port(lo), free_port(lo));
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut cmd = Command::new(ETCD);
        cmd.arg("--name=lab")
            .arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg(format!("--listen-client-urls={url}"))
            .arg(format!("--advertise-client-urls={url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=lab={peer_url}"))
            .arg("--log-level=warn")
            .arg("--quota-backend-bytes=1073741824");
        let mut proc = Proc::spawn("etcd", dir, cmd);
        let health = format!("127.0.0.1:{client}");
        wait_until("etcd answers", START, || {
            if !proc.running() {
                panic!("etcd exited: {}", proc.tail(20));
            }
            std::net::TcpStream::connect(&health)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        Etcd { url, proc }
    }
}

/// A real kube-apiserver with RBAC, client-certificate authentication (the PKI's client
/// CA) and a service-account issuer, serving the PKI's serving certificate.
pub struct KubeApi {
    pub name: String,
    pub url: String,
    pub addr: IpAddr,
    pub port: u16,
    /// A kubeconfig for the PKI's admin (`system:masters`), test credentials only.
    pub admin_kubeconfig: PathBuf,
    pub dir: PathBuf,
    pub proc: Proc,
}

/// A fresh k3s-shaped PKI for `host`, an etcd and an API server named `hub` on `host`, its
/// files in `dir`.
pub fn control_plane(dir: &Path, host: IpAddr) -> (Pki, Etcd, KubeApi) {
    let pki = Pki::generate(&PkiOptions {
        address: host,
        address_in_sans: true,
        client_cert_days: 365,
    });
    let etcd = Etcd::start(dir);
    let api = KubeApi::start("hub", dir, &etcd, host, free_port(host), &pki, &[]);
    (pki, etcd, api)
}

impl KubeApi {
    /// Starts an API server named `name` on `addr:port` over `etcd` (keys under
    /// `/name`), its files in `dir/name`, and waits until /readyz answers. Its issuer is
    /// [`SHARED_ISSUER`] unless `extra` names one (federated::issuer_flags): the first
    /// `--service-account-issuer` signs, so the shared one is then left out.
    pub fn start(
        name: &str,
        dir: &Path,
        etcd: &Etcd,
        addr: IpAddr,
        port: u16,
        pki: &Pki,
        extra: &[String],
    ) -> KubeApi {
        let dir = dir.join(name);
        std::fs::create_dir_all(dir.join("certs")).expect("api server dir");
        let write = |file: &str, text: &str| {
            let path = dir.join(file);
            std::fs::write(&path, text).expect("write api server file");
            path
        };
        let chain: String = pki
            .serving_chain
            .iter()
            .map(|c| pem("CERTIFICATE", c))
            .collect();
        let tls_cert = write("serving.crt", &chain);
        let tls_key = write("serving.key", &pem("PRIVATE KEY", &pki.serving_key_pkcs8));
        let client_ca = write("client-ca.crt", &pem("CERTIFICATE", &pki.client_ca_der));
        let (sa_key, sa_pub) = (dir.join("sa.key"), dir.join("sa.pub"));
        if !sa_key.exists() {
            // Kept across restarts, as a cluster keeps its service-account key.
            let key = rcgen::KeyPair::generate().expect("service-account key");
            std::fs::write(&sa_key, key.serialize_pem()).expect("write sa.key");
            std::fs::write(&sa_pub, key.public_key_pem()).expect("write sa.pub");
        }
        let url = match addr {
            IpAddr::V4(a) => format!("https://{a}:{port}"),
            IpAddr::V6(a) => format!("https://[{a}]:{port}"),
        };
        let admin_kubeconfig = write(
            "admin.kubeconfig",
            &kubeconfig_yaml(&url, &pki.parts, None, ""),
        );
        let mut cmd = Command::new(bin("kube-apiserver"));
        cmd.arg(format!("--etcd-servers={}", etcd.url))
            .arg(format!("--etcd-prefix=/{name}"))
            .arg(format!("--bind-address={addr}"))
            .arg(format!("--secure-port={port}"))
            // Only written into the kubernetes Service's endpoints, which are not kept.
            .arg("--advertise-address=10.43.0.1")
            .arg("--endpoint-reconciler-type=none")
            .arg(format!("--tls-cert-file={}", tls_cert.display()))
            .arg(format!("--tls-private-key-file={}", tls_key.display()))
            .arg(format!("--client-ca-file={}", client_ca.display()))
            .arg("--authorization-mode=RBAC")
            .args(
                (!extra
                    .iter()
                    .any(|a| a.starts_with("--service-account-issuer=")))
                .then(|| format!("--service-account-issuer={SHARED_ISSUER}")),
            )
            .arg(format!("--service-account-key-file={}", sa_pub.display()))
            .arg(format!(
                "--service-account-signing-key-file={}",
                sa_key.display()
            ))
            .arg("--service-cluster-ip-range=10.43.0.0/16")
            .arg(format!("--cert-dir={}", dir.join("certs").display()))
            .arg("--profiling=false")
            .arg("--enable-priority-and-fairness=false")
            .arg("--watch-cache=false")
            .args(extra);
        let proc = Proc::spawn("kube-apiserver", &dir, cmd);
        let mut api = KubeApi {
            name: name.into(),
            url,
            addr,
            port,
            admin_kubeconfig,
            dir,
            proc,
        };
        api.wait_ready();
        api
    }

    pub fn wait_ready(&mut self) {
        let kubeconfig = self.admin_kubeconfig.clone();
        let proc = &mut self.proc;
        wait_until("kube-apiserver /readyz", START, || {
            if !proc.running() {
                panic!("kube-apiserver exited: {}", proc.tail(30));
            }
            run(Command::new(bin("kubectl"))
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
                .args(["get", "--raw", "/readyz"]))
        });
    }

    /// kubectl as the admin; panics with kubectl's message on failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.try_kubectl(args)
            .unwrap_or_else(|e| panic!("{e}\n{}", self.proc.tail(10)))
    }

    pub fn try_kubectl(&self, args: &[&str]) -> Result<String, String> {
        run(self.kubectl_command().args(args))
    }

    pub fn kubectl_command(&self) -> Command {
        let mut cmd = Command::new(bin("kubectl"));
        cmd.arg(format!("--kubeconfig={}", self.admin_kubeconfig.display()));
        cmd
    }

    /// `kubectl apply -f -` of `yaml`, server-side (as Flux's kustomize-controller applies).
    pub fn apply(&self, yaml: &str) -> String {
        self.try_apply(yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn try_apply(&self, yaml: &str) -> Result<String, String> {
        self.stdin_kubectl(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=lab",
                "-f",
                "-",
            ],
            yaml,
        )
    }

    /// kubectl with `input` on stdin.
    pub fn stdin_kubectl(&self, args: &[&str], input: &str) -> Result<String, String> {
        let mut child = self
            .kubectl_command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .map_err(|e| e.to_string())?;
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {args:?}: {}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ))
        }
    }

    /// An object as JSON (`kubectl get -o json`).
    pub fn get_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["get", "-o", "json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.kubectl(&all)).expect("kubectl printed JSON")
    }

    /// Kills the server (its data stays in etcd).
    pub fn stop(&mut self) {
        self.proc.stop(Duration::from_secs(5));
    }
}
