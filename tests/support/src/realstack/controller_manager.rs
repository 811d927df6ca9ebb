//! A spoke's kube-controller-manager, reduced to the certificate controllers: the CSR
//! signer for `kubernetes.io/kube-apiserver-client` signs with the spoke's client CA, as
//! k3s's does, so a CSR the API server approved comes back with a certificate the same
//! API server accepts.
//!
//! `--controllers=csrsigning,csrapproving,csrcleaner`: the certificate controllers a
//! cluster runs, so a test sees what a real spoke would do with a CSR (csrapproving
//! approves only kubelet CSRs, csrcleaner removes CSRs an hour after they are done),
//! and nothing else (no Pods, no nodes, no service-account tokens here).
//!
//! Its own identity is `system:kube-controller-manager` (a client certificate of the
//! spoke's client CA, as kubeadm and k3s issue it), with
//! `--use-service-account-credentials`, as they run it: each controller acts with its
//! ServiceAccount's token (`certificate-controller`, bound by the API server's bootstrap
//! RBAC), not with the manager's certificate.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use spokekeeper_lab::Pki;
use spokekeeper_lab::pki::kubeconfig_yaml;

use super::kube::{KubeApi, START};
use super::proc::Proc;
use super::{bin, wait_until};

pub struct ControllerManager {
    pub proc: Proc,
    pub dir: PathBuf,
}

/// What the signer reads: its own kubeconfig, and the certificate and key it signs with.
pub struct SignerFiles {
    pub kubeconfig: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ControllerManager {
    /// Starts it beside `api` (a spoke's API server on `pki`), its files in `dir/NAME-kcm`,
    /// and waits until a CSR the admin approves is signed: the signer works when this
    /// returns. The probe CSR is deleted.
    pub fn start(api: &KubeApi, pki: &Pki, dir: &Path) -> ControllerManager {
        Self::start_with(api, pki, dir, None)
    }

    /// As [`ControllerManager::start`], signing for at most `signing_duration` (its
    /// `--cluster-signing-duration`, e.g. `24h`; None: the default, a year), which caps
    /// every CSR's `expirationSeconds`.
    pub fn start_with(
        api: &KubeApi,
        pki: &Pki,
        dir: &Path,
        signing_duration: Option<&str>,
    ) -> ControllerManager {
        let dir = dir.join(format!("{}-kcm", api.name));
        std::fs::create_dir_all(&dir).expect("controller-manager dir");
        let write = |file: &str, text: &str| {
            let path = dir.join(file);
            std::fs::write(&path, text).expect("write controller-manager file");
            path
        };
        // The files the real binary must read, in the lab's temp dir, as the API
        // server's own keys are.
        let ca_cert = write("client-ca.crt", &pki.client_ca_pem());
        let ca_key = write("client-ca.key", &pki.client_ca_key_pem());
        let identity = pki.issue_client("system:kube-controller-manager", None, 365);
        let kubeconfig = write(
            "kubeconfig",
            &kubeconfig_yaml(&api.url, &identity, None, ""),
        );
        let files = SignerFiles {
            kubeconfig,
            cert: ca_cert,
            key: ca_key,
        };
        Self::start_files(api, &files, dir, signing_duration)
    }

    /// As [`ControllerManager::start_with`], from files already on the node (a
    /// distribution's own, e.g. k3s's `client-ca.nochain.crt`), its log in `dir`.
    pub fn start_files(
        api: &KubeApi,
        files: &SignerFiles,
        dir: PathBuf,
        signing_duration: Option<&str>,
    ) -> ControllerManager {
        let mut cmd = Command::new(bin("kube-controller-manager"));
        cmd.arg(format!("--kubeconfig={}", files.kubeconfig.display()))
            .arg("--controllers=csrsigning,csrapproving,csrcleaner")
            .arg(format!(
                "--cluster-signing-kube-apiserver-client-cert-file={}",
                files.cert.display()
            ))
            .arg(format!(
                "--cluster-signing-kube-apiserver-client-key-file={}",
                files.key.display()
            ))
            .arg("--use-service-account-credentials=true")
            .arg("--leader-elect=false")
            // No serving: nothing here scrapes or probes it (readiness is a signed CSR).
            .arg("--secure-port=0")
            .arg("--profiling=false");
        if let Some(d) = signing_duration {
            cmd.arg(format!("--cluster-signing-duration={d}"));
        }
        let proc = Proc::spawn("kube-controller-manager", &dir, cmd);
        let mut kcm = ControllerManager { proc, dir };
        kcm.wait_signing(api);
        kcm
    }

    fn wait_signing(&mut self, api: &KubeApi) {
        let name = "lab-signer-probe";
        let yaml = probe_csr(name, "lab:signer-probe");
        api.stdin_kubectl(&["create", "-f", "-"], &yaml)
            .unwrap_or_else(|e| panic!("create the signer probe CSR: {e}"));
        api.kubectl(&["certificate", "approve", name]);
        let proc = &mut self.proc;
        wait_until(
            "kube-controller-manager signs an approved CSR",
            START,
            || {
                if !proc.running() {
                    panic!("kube-controller-manager exited: {}", proc.tail(30));
                }
                let cert =
                    api.kubectl(&["get", "csr", name, "-o", "jsonpath={.status.certificate}"]);
                if cert.is_empty() {
                    Err(format!("not signed yet; log: {}", proc.tail(5)))
                } else {
                    Ok(())
                }
            },
        );
        api.kubectl(&["delete", "csr", name]);
    }

    pub fn stop(&mut self) {
        self.proc.stop(Duration::from_secs(5));
    }
}

/// A CertificateSigningRequest for the client signer, as YAML for kubectl: a fresh key,
/// CN `cn`, an hour's lifetime. The lab's probes (is the signer up, is the deny policy in
/// force) create one and watch what becomes of it.
pub fn probe_csr(name: &str, cn: &str) -> String {
    let key = rcgen::KeyPair::generate().expect("keygen");
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let csr = params
        .serialize_request(&key)
        .expect("CSR")
        .pem()
        .expect("PEM");
    use base64::Engine as _;
    let request = base64::engine::general_purpose::STANDARD.encode(csr);
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: {name}\n\
         spec:\n  request: {request}\n  signerName: kubernetes.io/kube-apiserver-client\n  \
         expirationSeconds: 3600\n  usages: [client auth]\n"
    )
}
