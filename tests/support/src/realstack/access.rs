//! What the minted-credential failure cases need of a real spoke: admin credentials
//! that lack one right (an RBAC'd lab user of the client CA, not `system:masters`), and
//! a spoke on which every CSR approval comes back as a denial.

use spokekeeper_lab::KubeconfigParts;
use spokekeeper_lab::objects::Objects;
use spokekeeper_lab::pki::kubeconfig_yaml;

use super::kube::{KubeApi, START};
use super::spoke::RealSpoke;
use super::wait_until;
use crate::Node;

/// The right a limited admin credential lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lacking {
    /// May create, read and delete CSRs and manage ClusterRoleBindings (with `bind` on
    /// every ClusterRole), but not approve: no `update` on
    /// `certificatesigningrequests/approval`, no `approve` on `signers`.
    Approve,
    /// May create, approve, read and delete CSRs, and read, list and delete
    /// ClusterRoleBindings, but not create them.
    CreateBinding,
}

impl Lacking {
    /// The lab user (the certificate's CN) and its ClusterRole's name.
    pub fn user(self) -> &'static str {
        match self {
            Lacking::Approve => "lab:admin-without-approve",
            Lacking::CreateBinding => "lab:admin-without-create-binding",
        }
    }

    /// The same rights on the mock spoke API (`Node::api_objects()`), for the same user:
    /// issue its certificate with `pki.issue_client(lacking.user(), None, days)`.
    pub fn grant_on(self, objects: &mut Objects) {
        let user = self.user();
        objects.grant(
            user,
            &["create", "get", "list", "watch", "delete"],
            "certificatesigningrequests",
        );
        match self {
            Lacking::Approve => {
                objects.grant(
                    user,
                    &["get", "list", "watch", "create", "delete"],
                    "clusterrolebindings",
                );
                objects.grant(user, &["get", "bind"], "clusterroles");
            }
            Lacking::CreateBinding => {
                objects.grant(user, &["update"], "certificatesigningrequests/approval");
                objects.grant(user, &["approve"], "signers");
                objects.grant(
                    user,
                    &["get", "list", "watch", "delete"],
                    "clusterrolebindings",
                );
                objects.grant(user, &["get"], "clusterroles");
            }
        }
    }

    fn rules(self) -> String {
        const CSRS: &str = "- apiGroups: [certificates.k8s.io]\n  resources: [certificatesigningrequests]\n  \
                            verbs: [create, get, list, watch, delete]\n";
        const APPROVE: &str = "- apiGroups: [certificates.k8s.io]\n  resources: [certificatesigningrequests/approval]\n  \
                               verbs: [update]\n- apiGroups: [certificates.k8s.io]\n  resources: [signers]\n  \
                               resourceNames: [kubernetes.io/kube-apiserver-client]\n  verbs: [approve]\n";
        const BINDINGS: &str = "- apiGroups: [rbac.authorization.k8s.io]\n  resources: [clusterrolebindings]\n  \
                                verbs: [get, list, watch, create, delete]\n- apiGroups: [rbac.authorization.k8s.io]\n  \
                                resources: [clusterroles]\n  verbs: [get, bind]\n";
        const READ_BINDINGS: &str = "- apiGroups: [rbac.authorization.k8s.io]\n  resources: [clusterrolebindings]\n  \
                                     verbs: [get, list, watch, delete]\n- apiGroups: [rbac.authorization.k8s.io]\n  \
                                     resources: [clusterroles]\n  verbs: [get]\n";
        match self {
            Lacking::Approve => format!("{CSRS}{BINDINGS}"),
            Lacking::CreateBinding => format!("{CSRS}{APPROVE}{READ_BINDINGS}"),
        }
    }
}

impl RealSpoke {
    /// See [`limited_admin`].
    pub fn limited_admin(&self, lacking: Lacking) -> KubeconfigParts {
        limited_admin(&self.api, &self.node, lacking)
    }

    /// See [`write_k3s_yaml`].
    pub fn write_k3s_yaml(&self, parts: &KubeconfigParts) {
        write_k3s_yaml(&self.node, parts)
    }

    /// See [`deny_csr_approvals`].
    pub fn deny_csr_approvals(&self) {
        deny_csr_approvals(&self.api)
    }
}

/// The same for a real API server and node that are not a [`RealSpoke`] (the real-stack
/// tests' spokes).
mod free {
    use super::*;

    /// An admin credential for this spoke that lacks `lacking`: a client certificate of
    /// the node's client CA for [`Lacking::user`] (no group), and a ClusterRole and
    /// ClusterRoleBinding of that name granting the rest. Use it as the hub's
    /// kubeconfig, or write it as the node's k3s.yaml with [`RealSpoke::write_k3s_yaml`].
    pub fn limited_admin(api: &KubeApi, node: &Node, lacking: Lacking) -> KubeconfigParts {
        let user = lacking.user();
        api.apply(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {user}\nrules:\n{}\
             ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {user}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {user}}}\n\
             subjects:\n- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}\n",
            lacking.rules()
        ));
        node.pki().issue_client(user, None, 365)
    }

    /// Writes `parts` as the node's k3s.yaml (mode 600, `server: https://127.0.0.1:PORT`
    /// as k3s writes it): what an extraction over SSH reads next. A node rebuild writes
    /// the admin's again.
    pub fn write_k3s_yaml(node: &Node, parts: &KubeconfigParts) {
        let server = format!("https://127.0.0.1:{}", node.api_port);
        node.write_file(
            "k3s.yaml",
            kubeconfig_yaml(&server, parts, None, "").as_bytes(),
        );
    }

    /// From now on every approval of a `kubernetes.io/kube-apiserver-client` CSR is
    /// stored as a denial: a MutatingAdmissionPolicy (admissionregistration.k8s.io/v1)
    /// rewrites an approval-subresource update whose conditions say Approved into one
    /// condition `Denied` (reason `LabDenied`), as an approver that refuses would write
    /// it. The approver's PUT answers 200 with that object, the signer never signs it,
    /// and a GET shows Denied: deterministic, no race with a second approver. Returns
    /// when a probe CSR approved by the admin comes back Denied.
    pub fn deny_csr_approvals(api: &KubeApi) {
        api.apply(DENY_POLICY);
        let name = "lab-deny-probe";
        let probe = crate::realstack::controller_manager::probe_csr(name, "lab:deny-probe");
        // A policy takes effect once the API server's informers have it: until then an
        // approval is an approval, so each try is a fresh CSR.
        wait_until(
            "the deny policy turns an approval into Denied",
            START,
            || {
                let _ = api.try_kubectl(&["delete", "csr", name, "--ignore-not-found"]);
                api.stdin_kubectl(&["create", "-f", "-"], &probe)?;
                api.try_kubectl(&["certificate", "approve", name])?;
                let types = api.kubectl(&[
                    "get",
                    "csr",
                    name,
                    "-o",
                    "jsonpath={.status.conditions[*].type}",
                ]);
                if types.trim() == "Denied" {
                    Ok(())
                } else {
                    Err(format!("conditions: {types}"))
                }
            },
        );
        api.kubectl(&["delete", "csr", name]);
    }
}

pub use free::{deny_csr_approvals, limited_admin, write_k3s_yaml};

const DENY_POLICY: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: lab-deny-csr-approvals
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [certificates.k8s.io]
      apiVersions: [v1]
      operations: [UPDATE]
      resources: [certificatesigningrequests/approval]
  matchConditions:
  - name: approves-a-client-certificate
    expression: >-
      object.spec.signerName == "kubernetes.io/kube-apiserver-client" &&
      has(object.status.conditions) &&
      object.status.conditions.exists(c, c.type == "Approved")
  failurePolicy: Fail
  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >-
        [JSONPatch{op: "replace", path: "/status/conditions", value: [
          Object.status.conditions{type: "Denied", status: "True", reason: "LabDenied",
            message: "the lab denies every client certificate request"}]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: lab-deny-csr-approvals
spec:
  policyName: lab-deny-csr-approvals
"#;
