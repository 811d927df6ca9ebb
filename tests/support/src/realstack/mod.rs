//! The real stack: a hub made of the real Kubernetes API server (RBAC, client
//! certificates, a service-account issuer) over a real etcd, the real Sealed Secrets
//! controller behind the API server's service proxy, Flux's CRDs and Flux's own
//! kubeconfig loading, Flux's source-, kustomize- and helm-controller (flux_controllers,
//! fed the fleet repo by git_http; real_flux puts them together with real spokes); and
//! spokes that are real API servers with k3s-shaped PKI behind the lab's real sshd, each
//! with kube-controller-manager's CSR signer.
//!
//! Everything is built from pinned Go modules by `scripts/build-realstack` into
//! `.tools/realstack` (or `$SPOKEKEEPER_REALSTACK`); a missing build fails the test with
//! the command that makes it. Every process a lab starts is killed when the lab is
//! dropped, and by the kernel if the test process dies first.

pub mod access;
pub mod api;
pub mod bearer;
pub mod controller_manager;
pub mod distro;
pub mod federated;
pub mod flux;
pub mod flux_controllers;
pub mod git_http;
pub mod hub;
pub mod kube;
pub mod kubeadm;
pub mod kubelet;
pub mod netns;
pub mod notification;
pub mod proc;
pub mod real_flux;
pub mod spoke;

use std::net::{IpAddr, TcpListener};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Where `scripts/build-realstack` put the components.
pub fn tools() -> PathBuf {
    crate::requires::REAL_STACK_DIR.path()
}

/// A component binary, e.g. `kube-apiserver`.
pub fn bin(name: &str) -> PathBuf {
    let path = tools().join("bin").join(name);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/build-realstack",
        path.display()
    );
    path
}

/// A port nobody listens on at `addr` right now, and never handed out before in this
/// process: the kernel may give a port just released to the next `bind(0)`, and two ports
/// asked for one after the other (a controller's storage and metrics ports) then collided
/// ("address already in use").
pub fn free_port(addr: IpAddr) -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = TcpListener::bind((addr, 0))
            .and_then(|l| l.local_addr())
            .unwrap_or_else(|e| panic!("no free port on {addr}: {e}"))
            .port();
        if GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return port;
        }
    }
}

/// Polls `f` until it returns Some, or panics after `within` with `what` and the last error.
pub fn wait_until<T>(what: &str, within: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => {
                panic!("{what}: not within {within:?}: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// `kubectl get namespaces` with `kubeconfig`: Ok, or kubectl's error.
pub fn list_namespaces(kubeconfig: &std::path::Path) -> Result<String, String> {
    run(Command::new(bin("kubectl"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(["get", "namespaces", "-o", "name", "--request-timeout=10s"]))
}

/// Runs a command to completion: Ok(stdout) or Err(stderr and status).
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{:?} {:?} exited {}: {}{}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        ))
    }
}
