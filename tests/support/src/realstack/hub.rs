//! A real hub: etcd, kube-apiserver (RBAC) on the host end of a lab network namespace,
//! the Sealed Secrets CRD and the Flux CRDs, and the real Sealed Secrets controller in
//! the namespace, installed from its own Helm chart (RBAC, Service) and reached exactly
//! as kubeseal reaches it: through the API server's service proxy. Without a kubelet,
//! the lab stands in for one: a Pod object with the controller's address and an
//! EndpointSlice naming it, which is what the service proxy resolves.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use spokekeeper_lab::Pki;

use super::kube::{Etcd, KubeApi, START, control_plane};
use super::netns::Netns;
use super::proc::Proc;
use super::{bin, run, tools, wait_until};

pub const CONTROLLER_NS: &str = "kube-system";
pub const CONTROLLER: &str = "sealed-secrets-controller";
/// Where kubeseal fetches the certificate: the Service's first port by name (the chart
/// names it http; upstream controller.yaml leaves it unnamed, "").
fn cert_path(unnamed_port: bool) -> String {
    let port = if unnamed_port { "" } else { "http" };
    format!(
        "/api/v1/namespaces/{CONTROLLER_NS}/services/http:{CONTROLLER}:{port}/proxy/v1/cert.pem"
    )
}

#[derive(Clone, Debug, Default)]
pub struct HubOptions {
    /// Extra `helm template --set` values for the Sealed Secrets chart.
    pub chart_values: Vec<String>,
    /// The controller Service's port unnamed, as upstream controller.yaml installs it
    /// (the chart names it http).
    pub unnamed_port: bool,
    /// The API server its own issuer, `https://HOST:PORT`, its discovery document and
    /// JWKS readable by anyone (federated::start_issuer), instead of the issuer every lab
    /// API server shares: what federated spokes trust.
    pub own_issuer: bool,
}

pub struct RealHub {
    // Drop order: the controller, then the API server and etcd, then the namespace.
    controller: Option<Proc>,
    pub api: KubeApi,
    pub etcd: Etcd,
    pub netns: Netns,
    pub pki: Pki,
    /// The controller's arguments, as the chart's Deployment gives them.
    controller_args: Vec<String>,
    cert_path: String,
    /// The hub's own issuer, when started with one.
    pub issuer: Option<String>,
    pub dir: tempfile::TempDir,
}

impl RealHub {
    pub fn start(opts: &HubOptions) -> RealHub {
        let dir = crate::scratch_dir();
        let netns = Netns::create();
        let host = IpAddr::V4(netns.host);
        let (pki, etcd, api) = if opts.own_issuer {
            super::federated::issuer_control_plane(dir.path(), host)
        } else {
            control_plane(dir.path(), host)
        };
        let crds = tools().join("crds");
        for crd in [
            "sealedsecrets.yaml",
            "kustomizations.yaml",
            "helmreleases.yaml",
        ] {
            let path = crds.join(crd);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}: run scripts/build-realstack", path.display()));
            api.apply(&text);
        }
        for crd in [
            "sealedsecrets.bitnami.com",
            "kustomizations.kustomize.toolkit.fluxcd.io",
            "helmreleases.helm.toolkit.fluxcd.io",
        ] {
            api.kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{crd}"),
            ]);
        }
        api.apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: flux-system\n");
        let issuer = opts.own_issuer.then(|| api.url.clone());
        let mut hub = RealHub {
            controller: None,
            api,
            etcd,
            netns,
            pki,
            controller_args: Vec::new(),
            cert_path: cert_path(opts.unnamed_port),
            issuer,
            dir,
        };
        hub.install_controller(opts);
        hub.start_controller();
        hub
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The hub's API server restarted (same address, PKI, signing key and storage) with
    /// `--service-account-issuer` each of `issuers` in order: the first signs, all are
    /// accepted (an issuer change without a gap). Its JWKS stays named at its URL.
    pub fn restart_with_issuers(&mut self, issuers: &[&str]) {
        let mut flags: Vec<String> = issuers
            .iter()
            .map(|i| format!("--service-account-issuer={i}"))
            .collect();
        flags.push(format!(
            "--service-account-jwks-uri={}/openid/v1/jwks",
            self.api.url
        ));
        self.api.stop();
        let (addr, port) = (self.api.addr, self.api.port);
        self.api = KubeApi::start("hub", self.dir(), &self.etcd, addr, port, &self.pki, &flags);
    }

    /// The admin's kubeconfig (system:masters).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.api.admin_kubeconfig
    }

    /// Makes spokekeeper's config file `config` reach this hub with `kubeconfig` instead of
    /// the admin's.
    pub fn use_kubeconfig(&self, config: &Path, kubeconfig: &Path) {
        let text = std::fs::read_to_string(config)
            .expect("spokekeeper's config")
            .replace(
                &format!("kubeconfig: {}", self.admin_kubeconfig().display()),
                &format!("kubeconfig: {}", kubeconfig.display()),
            );
        std::fs::write(config, text).expect("write spokekeeper's config");
    }

    /// The upstream chart, rendered by the real helm: everything but the Deployment is
    /// applied; the Deployment's container arguments are how the process is run.
    fn install_controller(&mut self, opts: &HubOptions) {
        let chart = tools().join("sealed-secrets-chart");
        let mut args = vec![
            "template".to_string(),
            "sealed-secrets".into(),
            chart.display().to_string(),
            "--namespace".into(),
            CONTROLLER_NS.into(),
            "--set".into(),
            format!("fullnameOverride={CONTROLLER}"),
        ];
        for v in &opts.chart_values {
            args.push("--set".into());
            args.push(v.clone());
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let rendered = crate::helm::run_helm(&refs);
        let mut deployment = None;
        for doc in rendered.split("\n---") {
            let value: Value = match serde_saphyr::from_str(doc) {
                Ok(Value::Null) | Err(_) => continue,
                Ok(v) => v,
            };
            if value["kind"] == "Deployment" {
                deployment = Some(value);
            } else {
                let mut value = value;
                if opts.unnamed_port
                    && value["kind"] == "Service"
                    && value["metadata"]["name"] == CONTROLLER
                    && let Some(port) = value["spec"]["ports"][0].as_object_mut()
                {
                    port.remove("name");
                }
                self.api
                    .apply(&serde_json::to_string(&value).expect("JSON"));
            }
        }
        let deployment = deployment.expect("the chart renders the controller's Deployment");
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        let mut cargs: Vec<String> = container["args"]
            .as_array()
            .expect("container args")
            .iter()
            .map(|a| a.as_str().expect("string arg").to_string())
            .collect();
        // The pod's ports, on the namespace's address.
        let inner = self.netns.inner;
        for (flag, port) in [("--listen-addr", 8080), ("--listen-metrics-addr", 8081)] {
            if let Some(i) = cargs.iter().position(|a| a == flag) {
                cargs[i + 1] = format!("{inner}:{port}");
            } else {
                cargs.push(flag.into());
                cargs.push(format!("{inner}:{port}"));
            }
        }
        self.controller_args = cargs;

        // As the EndpointSlice controller writes an unnamed Service port: name "".
        let port_name = if opts.unnamed_port { "" } else { "http" };
        // The Pod the EndpointSlice names, with the controller's address as its IP.
        self.api.apply(&format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{CONTROLLER}-lab","namespace":"{CONTROLLER_NS}"}},
               "spec":{{"serviceAccountName":"{CONTROLLER}","automountServiceAccountToken":false,"nodeName":"lab",
                        "containers":[{{"name":"controller","image":"lab.invalid/sealed-secrets-controller"}}]}}}}"#
        ));
        self.api.kubectl(&[
            "patch",
            "pod",
            &format!("{CONTROLLER}-lab"),
            "-n",
            CONTROLLER_NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!(
                r#"{{"status":{{"phase":"Running","podIP":"{inner}","podIPs":[{{"ip":"{inner}"}}]}}}}"#
            ),
        ]);
        self.api.apply(&format!(
            r#"{{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
               "metadata":{{"name":"{CONTROLLER}-lab","namespace":"{CONTROLLER_NS}",
                 "labels":{{"kubernetes.io/service-name":"{CONTROLLER}","endpointslice.kubernetes.io/managed-by":"spokekeeper-lab"}}}},
               "addressType":"IPv4","ports":[{{"name":"{port_name}","port":8080,"protocol":"TCP"}}],
               "endpoints":[{{"addresses":["{inner}"],"conditions":{{"ready":true}},
                 "targetRef":{{"kind":"Pod","namespace":"{CONTROLLER_NS}","name":"{CONTROLLER}-lab"}}}}]}}"#
        ));
    }

    /// Runs the controller in the lab namespace as its pod would run: in-cluster
    /// configuration from a token of its ServiceAccount (TokenRequest), mounted where
    /// client-go looks, in a private mount namespace.
    pub fn start_controller(&mut self) {
        self.start_controller_with(&[]);
    }

    /// Same, with `extra` arguments after the chart's (e.g. `--key-renew-period=20s`).
    pub fn start_controller_with(&mut self, extra: &[&str]) {
        self.stop_controller();
        let sa = self.dir().join("controller-sa");
        std::fs::create_dir_all(&sa).expect("sa dir");
        let token = self.api.kubectl(&[
            "create",
            "token",
            CONTROLLER,
            "-n",
            CONTROLLER_NS,
            "--duration=24h",
        ]);
        std::fs::write(sa.join("token"), token.trim()).expect("write token");
        std::fs::write(sa.join("ca.crt"), &self.pki.parts.ca_pem).expect("write ca.crt");
        std::fs::write(sa.join("namespace"), CONTROLLER_NS).expect("write namespace");

        let mut cmd = self.netns.command("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(
                "mount -t tmpfs -o mode=755 lab /run \
                 && mkdir -p /run/secrets/kubernetes.io/serviceaccount \
                 && cp \"$1\"/token \"$1\"/ca.crt \"$1\"/namespace /run/secrets/kubernetes.io/serviceaccount/ \
                 && shift && exec \"$@\"",
            )
            .arg("sh")
            .arg(&sa)
            .arg(bin("sealed-secrets-controller"))
            .args(&self.controller_args)
            .args(extra)
            .env("KUBERNETES_SERVICE_HOST", self.netns.host.to_string())
            .env("KUBERNETES_SERVICE_PORT", self.api.port.to_string())
            .env("POD_NAMESPACE", CONTROLLER_NS);
        let mut proc = Proc::spawn("sealed-secrets-controller", self.dir(), cmd);
        let (api, path) = (&self.api, &self.cert_path);
        wait_until(
            "the controller's certificate through the service proxy",
            START,
            || {
                if !proc.running() {
                    panic!("the controller exited: {}", proc.tail(30));
                }
                api.try_kubectl(&["get", "--raw", path])
            },
        );
        self.controller = Some(proc);
    }

    pub fn stop_controller(&mut self) {
        if let Some(mut p) = self.controller.take() {
            p.stop(Duration::from_secs(5));
        }
    }

    /// Asks the controller for a new sealing key now (SIGUSR1: its own manual trigger,
    /// what its renewal period does every 30 days).
    pub fn renew_key(&self) {
        let pid = self.controller.as_ref().expect("controller running").pid();
        let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::USR1).expect("SIGUSR1");
    }

    pub fn controller_log(&self) -> String {
        self.controller
            .as_ref()
            .map(|p| p.log_text())
            .unwrap_or_default()
    }

    /// The certificate as the service proxy serves it now.
    pub fn cert_pem(&self) -> String {
        self.api.kubectl(&["get", "--raw", &self.cert_path])
    }

    /// The real kubeseal, pointed at this hub's controller.
    pub fn kubeseal(&self) -> Command {
        let mut cmd = Command::new(bin("kubeseal"));
        cmd.arg(format!(
            "--kubeconfig={}",
            self.admin_kubeconfig().display()
        ))
        .arg(format!("--controller-namespace={CONTROLLER_NS}"))
        .arg(format!("--controller-name={CONTROLLER}"));
        cmd
    }

    /// The controller's sealing keys (Secrets labelled active), PEM private keys.
    pub fn sealing_keys(&self) -> Vec<String> {
        let list = self.api.get_json(&[
            "secrets",
            "-n",
            CONTROLLER_NS,
            "-l",
            "sealedsecrets.bitnami.com/sealed-secrets-key",
        ]);
        list["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|s| {
                let b64 = s["data"]["tls.key"].as_str().expect("tls.key");
                use base64::Engine as _;
                String::from_utf8(
                    base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .expect("base64"),
                )
                .expect("PEM")
            })
            .collect()
    }

    /// Writes each private key to its own file (kubeseal reads one key per file) and
    /// returns them as kubeseal's `--recovery-private-key` takes a list: comma-separated.
    pub fn sealing_keys_files(&self) -> String {
        let mut paths = Vec::new();
        for (i, key) in self.sealing_keys().iter().enumerate() {
            let path = self.dir().join(format!("recovery-key-{i}.pem"));
            std::fs::write(&path, key).expect("write key");
            paths.push(path.display().to_string());
        }
        paths.join(",")
    }

    /// `kubeseal --recovery-unseal` of the SealedSecret file `sealed` with the private
    /// keys in `keys` (key files, comma-separated): the Secret it holds, as JSON.
    pub fn recovery_unseal(&self, sealed: &Path, keys: &str) -> Result<Value, String> {
        let out = run(self
            .kubeseal()
            .arg("--recovery-unseal")
            .arg(format!("--recovery-private-key={keys}"))
            .args(["-o", "json"])
            .stdin(std::fs::File::open(sealed).map_err(|e| e.to_string())?))?;
        serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))
    }

    /// `kubectl create token` for a ServiceAccount.
    pub fn token(&self, namespace: &str, sa: &str) -> String {
        self.api
            .kubectl(&["create", "token", sa, "-n", namespace, "--duration=1h"])
            .trim()
            .to_string()
    }

    /// A kubeconfig that authenticates with `token` (no client certificate).
    pub fn token_kubeconfig(&self, name: &str, token: &str) -> PathBuf {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.pki.parts.ca_pem);
        let path = self.dir().join(format!("{name}.kubeconfig"));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: {}\n    \
                 certificate-authority-data: {ca}\nusers:\n- name: {name}\n  user:\n    token: {token}\n\
                 contexts:\n- name: hub\n  context: {{cluster: hub, user: {name}}}\ncurrent-context: hub\n",
                self.api.url
            ),
        )
        .expect("write kubeconfig");
        path
    }

    /// The SealedSecret's Synced condition, if any.
    pub fn synced(&self, namespace: &str, name: &str) -> Option<(String, String)> {
        let v = self
            .api
            .try_kubectl(&["get", "sealedsecret", name, "-n", namespace, "-o", "json"])
            .ok()?;
        let v: Value = serde_json::from_str(&v).ok()?;
        v["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Synced")
            .map(|c| {
                (
                    c["status"].as_str().unwrap_or("").to_string(),
                    c["message"].as_str().unwrap_or("").to_string(),
                )
            })
    }

    /// The unsealed Secret's `key`, decoded.
    pub fn secret_value(&self, namespace: &str, name: &str, key: &str) -> Option<Vec<u8>> {
        use base64::Engine as _;
        let v = self
            .api
            .try_kubectl(&["get", "secret", name, "-n", namespace, "-o", "json"])
            .ok()?;
        let v: Value = serde_json::from_str(&v).ok()?;
        base64::engine::general_purpose::STANDARD
            .decode(v["data"][key].as_str()?)
            .ok()
    }

    /// Runs Flux's own kubeconfig loading on the Secret and calls the spoke with it.
    pub fn flux_calls_spoke(&self, namespace: &str, secret: &str) -> Result<Value, String> {
        super::flux::flux_calls_spoke(self.admin_kubeconfig(), namespace, secret)
    }
}
