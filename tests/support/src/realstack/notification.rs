//! Flux's real notification-controller against the real hub (built by
//! scripts/build-realstack from tests/realstack/notification), run as a process out of
//! cluster like the other controllers (`flux_controllers`): its own ServiceAccount's
//! token, bound to the rules flux2's crd-controller ClusterRole gives it for Alerts,
//! Providers and the Secrets they name; leader election off, every listener on a free
//! loopback port. Its event endpoint is what the Flux controllers' `--events-addr` names.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

use super::hub::RealHub;
use super::kube::START;
use super::proc::Proc;
use super::{bin, free_port, tools, wait_until};

const NS: &str = "flux-system";

/// notification-controller's CRDs, as scripts/build-realstack copies them: it watches
/// all three at start.
const CRDS: [(&str, &str); 3] = [
    ("alerts", "alerts.notification.toolkit.fluxcd.io"),
    ("providers", "providers.notification.toolkit.fluxcd.io"),
    ("receivers", "receivers.notification.toolkit.fluxcd.io"),
];

/// flux2's crd-controller ClusterRole, the part notification-controller uses.
const RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: notification-controller-flux-system
rules:
- apiGroups: [notification.toolkit.fluxcd.io]
  resources: ["*"]
  verbs: ["*"]
- apiGroups: [source.toolkit.fluxcd.io, kustomize.toolkit.fluxcd.io, helm.toolkit.fluxcd.io]
  resources: ["*"]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [namespaces, secrets, configmaps, serviceaccounts]
  verbs: [get, list, watch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: notification-controller-flux-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: notification-controller-flux-system
subjects:
- {kind: ServiceAccount, name: notification-controller, namespace: flux-system}
"#;

pub struct NotificationController {
    proc: Proc,
    /// The event endpoint, `http://127.0.0.1:PORT/`.
    pub events_url: String,
    events_port: u16,
}

impl NotificationController {
    /// Installs its CRDs and RBAC on `hub` and starts it, waiting until its health
    /// endpoint reports ready.
    pub fn start(hub: &RealHub) -> NotificationController {
        let crds = tools().join("crds");
        for (file, _) in CRDS {
            let path = crds.join(format!("{file}.yaml"));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}: run scripts/build-realstack", path.display()));
            hub.api.apply(&text);
        }
        for (_, name) in CRDS {
            hub.api.kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{name}"),
            ]);
        }
        hub.api.apply(RBAC);
        let name = "notification-controller";
        hub.api.apply(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\n  namespace: {NS}\n"
        ));
        let token = hub
            .api
            .kubectl(&["create", "token", name, "-n", NS, "--duration=24h"]);
        let kubeconfig = hub.token_kubeconfig(name, token.trim());
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (events, health) = (free_port(lo), free_port(lo));
        let mut cmd = Command::new(bin(name));
        cmd.env_clear()
            .env("KUBECONFIG", &kubeconfig)
            .env("RUNTIME_NAMESPACE", NS)
            .env("HOME", hub.dir())
            .env("PATH", "/usr/bin:/bin")
            .arg("--enable-leader-election=false")
            .arg("--watch-all-namespaces=true")
            .arg("--log-level=debug")
            .arg("--log-encoding=json")
            .arg(format!("--events-addr=127.0.0.1:{events}"))
            .arg(format!("--receiverAddr=127.0.0.1:{}", free_port(lo)))
            .arg(format!("--metrics-addr=127.0.0.1:{}", free_port(lo)))
            .arg(format!("--health-addr=127.0.0.1:{health}"));
        let mut proc = Proc::spawn(name, hub.dir(), cmd);
        wait_until(&format!("{name} is ready"), START, || {
            if !proc.running() {
                panic!("{name} exited: {}", proc.tail(30));
            }
            super::flux_controllers::http_status(health, "/readyz").and_then(|s| match s {
                200 => Ok(()),
                s => Err(format!("/readyz answered {s}")),
            })
        });
        NotificationController {
            proc,
            events_url: format!("http://127.0.0.1:{events}/"),
            events_port: events,
        }
    }

    /// POSTs `event` to the event endpoint, as a Flux controller does: the answer's status.
    pub fn post(&self, event: &serde_json::Value) -> Result<u16, String> {
        use std::io::Write;
        let body = event.to_string();
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", self.events_port))
            .map_err(|e| e.to_string())?;
        conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        write!(
            conn,
            "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .map_err(|e| e.to_string())?;
        super::flux_controllers::status_of(&mut conn)
    }

    /// The last lines of its log, for failure messages.
    pub fn tail(&self, lines: usize) -> String {
        self.proc.tail(lines)
    }
}
