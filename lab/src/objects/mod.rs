//! What the mock spoke API stores, in memory: CertificateSigningRequests (created,
//! approved, signed with the node's client CA, deleted), ClusterRoleBindings, and the
//! built-in `cluster-admin` and `view` ClusterRoles; and the authorization those bindings grant.
//! The shapes, codes and Status reasons are kube-apiserver's (tests/suite/realstack/conformance/
//! compares them with a real one and its kube-controller-manager).
//!
//! Authorization is RBAC's for these calls: `system:masters` may do anything; any other
//! user only what a ClusterRoleBinding naming it (as a User, or one of its Groups) to
//! the built-in `cluster-admin` or `view` grants (their rules, as RBAC matches them), or what a test granted it directly ([`Objects::grant`], a lab
//! user's own ClusterRole), besides what every authenticated user may (reviews, /version,
//! discovery; the API server's routing answers those before this store is asked).
//! Approving also needs `approve` on `signers` (the CertificateApproval admission plugin).

use std::collections::BTreeMap;

use rcgen::{Issuer, KeyPair};
use rustls::pki_types::CertificateDer;
use serde_json::{Value, json};
use time::OffsetDateTime;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::pki::Pki;
use authz::{Route, attributes, builtin_role, role_allows, route};
pub use authz::{attributes_of, forbidden};
use csr::{invalid_csr, sign};
pub(crate) use replies::uid as new_uid;
use replies::{
    already_exists, conflict, details, failure, get, invalid, label_selector, method_not_allowed,
    not_found, not_found_path, now_text, qualified, stamp_metadata,
};

mod authz;
mod csr;
mod replies;
#[cfg(test)]
mod tests;

pub const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
pub const BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
pub const ROLES: &str = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";

const CSR_GROUP: &str = "certificates.k8s.io";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// KCM's signer backdates notBefore by 5 minutes, and notAfter too unless the
/// certificate is short-lived (under 8 hours).
const BACKDATE: i64 = 5 * 60;
const SHORT: i64 = 8 * 3600;
/// KCM's `--cluster-signing-duration` default (8760h): the most it signs for.
const SIGNING_DURATION: i64 = 365 * 24 * 3600;

/// Who is asking: the x509 authenticator's user.
pub struct Caller<'a> {
    pub name: &'a str,
    pub groups: &'a [String],
}

/// An answer: HTTP code and JSON body.
#[derive(Debug)]
pub struct Reply {
    pub code: u16,
    pub body: Value,
}

/// What a request asks, as the authorizer sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// Empty: cluster scope.
    pub namespace: String,
}

impl Attributes {
    /// An access review's `spec.resourceAttributes` (absent fields empty).
    pub fn of_review(ra: &Value) -> Attributes {
        let field = |k: &str| ra[k].as_str().unwrap_or_default().to_owned();
        Attributes {
            verb: field("verb"),
            group: field("group"),
            resource: field("resource"),
            subresource: field("subresource"),
            name: field("name"),
            namespace: field("namespace"),
        }
    }
}

/// The CSR signer the node's controller manager runs, or not.
pub enum Signer {
    /// Signs approved `kubernetes.io/kube-apiserver-client` CSRs with this CA.
    Signs(Box<Issuer<'static, KeyPair>>, OffsetDateTime),
    /// No controller signs: an approved CSR stays without certificate or condition.
    Missing,
}

impl Signer {
    /// The signer of `pki`'s node: its client CA, as k3s's controller manager signs.
    pub fn client_ca(pki: &Pki) -> Signer {
        let key = KeyPair::from_pem(&pki.client_ca_key_pem()).expect("client CA key");
        let der = CertificateDer::from(pki.client_ca_der.clone());
        let issuer = Issuer::from_ca_cert_der(&der, key).expect("client CA");
        let not_after = X509Certificate::from_der(&pki.client_ca_der)
            .map(|(_, c)| c.validity().not_after.to_datetime())
            .expect("client CA parses");
        Signer::Signs(Box::new(issuer), not_after)
    }
}

pub struct Objects {
    csrs: BTreeMap<String, Value>,
    bindings: BTreeMap<String, Value>,
    revision: u64,
    signer: Signer,
    /// The longest certificate the signer issues (`--cluster-signing-duration`), seconds.
    signing_duration: i64,
    /// Every approval is stored as a denial (as the lab's admission policy does).
    deny_approvals: bool,
    /// (user, verb, resource[/subresource]) a test granted, as a ClusterRole bound to
    /// that user would.
    grants: Vec<(String, String, String)>,
}

impl Objects {
    pub fn new(signer: Signer) -> Objects {
        Objects {
            csrs: BTreeMap::new(),
            bindings: BTreeMap::new(),
            revision: 1,
            signer,
            signing_duration: SIGNING_DURATION,
            deny_approvals: false,
            grants: Vec::new(),
        }
    }

    /// Lets `user` do `verbs` on `resource` (`certificatesigningrequests`,
    /// `certificatesigningrequests/approval`, `signers`, `clusterrolebindings`, ...): an
    /// RBAC'd admin that lacks some right, as the lab's `RealSpoke::limited_admin` makes.
    pub fn grant(&mut self, user: &str, verbs: &[&str], resource: &str) {
        for verb in verbs {
            self.grants
                .push((user.into(), (*verb).into(), resource.into()));
        }
    }

    /// From now on approved CSRs are signed by `signer` (e.g. another node's CA, which
    /// this node's API server does not trust).
    pub fn sign_with(&mut self, signer: Signer) {
        self.signer = signer;
    }

    /// The signer issues for at most `seconds`, as KCM's `--cluster-signing-duration`
    /// caps a CSR's `expirationSeconds`.
    pub fn sign_at_most(&mut self, seconds: i64) {
        self.signing_duration = seconds;
    }

    /// From now on an approval is stored as a `Denied` condition.
    pub fn deny_approvals(&mut self) {
        self.deny_approvals = true;
    }

    /// Names of the CSRs stored now.
    pub fn csr_names(&self) -> Vec<String> {
        self.csrs.keys().cloned().collect()
    }

    /// Names of the ClusterRoleBindings stored now.
    pub fn binding_names(&self) -> Vec<String> {
        self.bindings.keys().cloned().collect()
    }

    /// The ClusterRoleBinding `name` as stored.
    pub fn binding(&self, name: &str) -> Option<Value> {
        self.bindings.get(name).cloned()
    }

    /// Whether this store's routes cover `path`.
    pub fn serves(path: &str) -> bool {
        [CSRS, BINDINGS, ROLES]
            .iter()
            .any(|p| path == *p || path.strip_prefix(p).is_some_and(|r| r.starts_with('/')))
    }

    /// RBAC for `caller`: masters, or bound to cluster-admin.
    pub fn allows(&self, caller: &Caller, attrs: &Attributes) -> bool {
        if caller.groups.iter().any(|g| g == "system:masters") {
            return true;
        }
        if attrs.verb == "create"
            && ["authentication.k8s.io", "authorization.k8s.io"].contains(&attrs.group.as_str())
            && attrs.resource.starts_with("self")
        {
            return true;
        }
        let resource = if attrs.subresource.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}/{}", attrs.resource, attrs.subresource)
        };
        let granted = self.grants.iter().any(|(u, v, r)| {
            u == caller.name && (v == &attrs.verb || v == "*") && (r == &resource || r == "*")
        });
        granted
            || self.bindings.values().any(|b| {
                b["roleRef"]["kind"] == "ClusterRole"
                    && builtin_role(b["roleRef"]["name"].as_str().unwrap_or_default())
                        .is_some_and(|role| role_allows(&role, attrs, &resource))
                    && b["subjects"].as_array().into_iter().flatten().any(|s| {
                        let name = s["name"].as_str().unwrap_or_default();
                        match s["kind"].as_str() {
                            Some("User") => name == caller.name,
                            Some("Group") => caller.groups.iter().any(|g| g == name),
                            _ => false,
                        }
                    })
            })
    }

    /// Answers a request under [`Objects::serves`]: authorization first, then the route.
    pub fn handle(
        &mut self,
        caller: &Caller,
        method: &str,
        path: &str,
        query: &str,
        body: &[u8],
    ) -> Reply {
        let Some((attrs, route)) = route(method, path) else {
            return not_found_path();
        };
        if !self.allows(caller, &attrs) {
            return forbidden(caller, &attrs);
        }
        let body = if matches!(attrs.verb.as_str(), "create" | "update") {
            match serde_json::from_slice::<Value>(body) {
                Ok(v) if v.is_object() => v,
                _ => {
                    return failure(
                        400,
                        "BadRequest",
                        "the body of the request was in an unknown format",
                        Value::Null,
                    );
                }
            }
        } else {
            Value::Null
        };
        match route {
            Route::Csr => match attrs.verb.as_str() {
                "create" => self.create_csr(caller, body),
                "get" => get(&self.csrs, &attrs),
                "update" if attrs.subresource == "approval" => {
                    let signer = body["spec"]["signerName"].as_str().unwrap_or_default();
                    let approve = attributes("approve", CSR_GROUP, "signers", "", signer);
                    if !self.allows(caller, &approve) {
                        let msg = format!(
                            "{} \"{}\" is forbidden: user not permitted to approve requests with signerName \"{signer}\"",
                            qualified(&attrs),
                            attrs.name
                        );
                        return failure(403, "Forbidden", &msg, details(&attrs));
                    }
                    self.approve(&attrs, body)
                }
                "delete" => self.delete(&attrs),
                _ => method_not_allowed(),
            },
            Route::Binding => match attrs.verb.as_str() {
                "create" => self.create_binding(body),
                "get" => get(&self.bindings, &attrs),
                "list" => self.list_bindings(query),
                "delete" => self.delete(&attrs),
                _ => method_not_allowed(),
            },
            Route::Role => match (attrs.verb.as_str(), attrs.name.as_str()) {
                ("get", name) => match builtin_role(name) {
                    Some(body) => Reply { code: 200, body },
                    None => not_found(&attrs),
                },
                _ => method_not_allowed(),
            },
        }
    }

    fn next_revision(&mut self) -> String {
        self.revision += 1;
        self.revision.to_string()
    }

    fn create_csr(&mut self, caller: &Caller, mut csr: Value) -> Reply {
        let name = csr["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let attrs = attributes("create", CSR_GROUP, "certificatesigningrequests", "", &name);
        if let Some(field) = invalid_csr(&csr) {
            return invalid(&attrs, "CertificateSigningRequest", &field);
        }
        if self.csrs.contains_key(&name) {
            return already_exists(&attrs);
        }
        let revision = self.next_revision();
        stamp_metadata(&mut csr, &revision);
        csr["kind"] = json!("CertificateSigningRequest");
        csr["apiVersion"] = json!("certificates.k8s.io/v1");
        // The API server records who asked; a client's own values are overwritten.
        csr["spec"]["username"] = json!(caller.name);
        csr["spec"]["groups"] = json!(caller.groups);
        csr["status"] = json!({});
        self.csrs.insert(name, csr.clone());
        Reply {
            code: 201,
            body: csr,
        }
    }

    fn approve(&mut self, attrs: &Attributes, update: Value) -> Reply {
        let Some(stored) = self.csrs.get(&attrs.name).cloned() else {
            return not_found(attrs);
        };
        let sent = &update["metadata"]["resourceVersion"];
        if !sent.is_null() && sent != &stored["metadata"]["resourceVersion"] {
            return conflict(attrs);
        }
        let now = now_text();
        let mut conditions: Vec<Value> = update["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if self.deny_approvals && conditions.iter().any(|c| c["type"] == "Approved") {
            conditions = vec![
                json!({"type": "Denied", "status": "True", "reason": "LabDenied",
                "message": "the lab denies every client certificate request"}),
            ];
        }
        for c in &mut conditions {
            for field in ["lastUpdateTime", "lastTransitionTime"] {
                if c[field].is_null() {
                    c[field] = json!(now);
                }
            }
        }
        let true_of = |t: &str| {
            conditions
                .iter()
                .any(|c| c["type"] == t && c["status"] == "True")
        };
        if true_of("Approved") && true_of("Denied") {
            return invalid(attrs, "CertificateSigningRequest", "status.conditions");
        }
        let approved = true_of("Approved");
        let mut csr = stored;
        csr["status"]["conditions"] = json!(conditions);
        csr["metadata"]["resourceVersion"] = json!(self.next_revision());
        let reply = csr.clone();
        // The signer acts after the approval is stored: the approver's answer has no
        // certificate yet; the next read has it.
        if approved
            && csr["spec"]["signerName"] == CLIENT_SIGNER
            && let Signer::Signs(issuer, ca_not_after) = &self.signer
            && let Ok(pem) = sign(&csr, issuer, *ca_not_after, self.signing_duration)
        {
            use base64::Engine as _;
            csr["status"]["certificate"] =
                json!(base64::engine::general_purpose::STANDARD.encode(pem));
            csr["metadata"]["resourceVersion"] = json!(self.next_revision());
        }
        self.csrs.insert(attrs.name.clone(), csr);
        Reply {
            code: 200,
            body: reply,
        }
    }

    fn create_binding(&mut self, mut crb: Value) -> Reply {
        let name = crb["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let attrs = attributes("create", RBAC_GROUP, "clusterrolebindings", "", &name);
        let missing = if name.is_empty() {
            Some("metadata.name")
        } else if crb["roleRef"]["name"].as_str().is_none_or(str::is_empty) {
            Some("roleRef.name")
        } else if crb["roleRef"]["kind"] != "ClusterRole" && crb["roleRef"]["kind"] != "Role" {
            Some("roleRef.kind")
        } else {
            None
        };
        if let Some(field) = missing {
            return invalid(&attrs, "ClusterRoleBinding", field);
        }
        if self.bindings.contains_key(&name) {
            return already_exists(&attrs);
        }
        let revision = self.next_revision();
        stamp_metadata(&mut crb, &revision);
        crb["kind"] = json!("ClusterRoleBinding");
        crb["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
        self.bindings.insert(name, crb.clone());
        Reply {
            code: 201,
            body: crb,
        }
    }

    fn list_bindings(&self, query: &str) -> Reply {
        let selector = match label_selector(query) {
            Ok(s) => s,
            Err(msg) => return failure(400, "BadRequest", &msg, Value::Null),
        };
        let items: Vec<Value> = self
            .bindings
            .values()
            .filter(|b| {
                selector
                    .iter()
                    .all(|(k, v)| b["metadata"]["labels"][k].as_str() == Some(v.as_str()))
            })
            .map(|b| {
                // A list's items carry no kind or apiVersion on the wire.
                let mut item = b.clone();
                if let Some(o) = item.as_object_mut() {
                    o.remove("kind");
                    o.remove("apiVersion");
                }
                item
            })
            .collect();
        Reply {
            code: 200,
            body: json!({"kind": "ClusterRoleBindingList",
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "metadata": {"resourceVersion": self.revision.to_string()},
                "items": items}),
        }
    }

    fn delete(&mut self, attrs: &Attributes) -> Reply {
        let store = if attrs.group == CSR_GROUP {
            &mut self.csrs
        } else {
            &mut self.bindings
        };
        match store.remove(&attrs.name) {
            None => not_found(attrs),
            Some(object) => Reply {
                code: 200,
                body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Success",
                    "details": {"name": attrs.name, "group": attrs.group,
                        "kind": attrs.resource, "uid": object["metadata"]["uid"]}}),
            },
        }
    }
}
