//! What the mock spoke API stores, in memory: CertificateSigningRequests (created,
//! approved, signed with the node's client CA, deleted), ClusterRoleBindings, and the
//! built-in `cluster-admin` and `view` ClusterRoles; and the authorization those bindings grant.
//! The shapes, codes and Status reasons are kube-apiserver's (tests/suite/realstack/conformance.rs
//! compares them with a real one and its kube-controller-manager).
//!
//! Authorization is RBAC's for these calls: `system:masters` may do anything; any other
//! user only what a ClusterRoleBinding naming it (as a User, or one of its Groups) to
//! the built-in `cluster-admin` or `view` grants (their rules, as RBAC matches them), or what a test granted it directly ([`Objects::grant`], a lab
//! user's own ClusterRole), besides what every authenticated user may (reviews, /version,
//! discovery; the API server's routing answers those before this store is asked).
//! Approving also needs `approve` on `signers` (the CertificateApproval admission plugin).

use std::collections::BTreeMap;

use rcgen::{
    CertificateParams, CertificateSigningRequestParams, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateSigningRequestDer};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::pki::Pki;

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

enum Route {
    Csr,
    Binding,
    Role,
}

/// The authorizer's attributes and the route of a request, or None for a path under
/// these collections that names nothing (`.../a/b/c`).
fn route(method: &str, path: &str) -> Option<(Attributes, Route)> {
    let (collection, group, resource, route) = [
        (CSRS, CSR_GROUP, "certificatesigningrequests", Route::Csr),
        (BINDINGS, RBAC_GROUP, "clusterrolebindings", Route::Binding),
        (ROLES, RBAC_GROUP, "clusterroles", Route::Role),
    ]
    .into_iter()
    .find(|(c, ..)| path == *c || path.starts_with(&format!("{c}/")))?;
    let rest: Vec<&str> = path[collection.len()..]
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (name, subresource) = match rest.as_slice() {
        [] => ("", ""),
        [name] => (*name, ""),
        [name, sub] => (*name, *sub),
        _ => return None,
    };
    let verb = verb_of(method, name).unwrap_or("unknown");
    Some((attributes(verb, group, resource, subresource, name), route))
}

/// RBAC's verb for an HTTP method on a collection (`name` empty) or an object.
fn verb_of(method: &str, name: &str) -> Option<&'static str> {
    Some(match (method, name.is_empty()) {
        ("GET", true) => "list",
        ("GET", false) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "deletecollection",
        ("DELETE", false) => "delete",
        _ => return None,
    })
}

/// What RBAC sees in any resource request (`/api/v1/...`, `/apis/GROUP/VERSION/...`,
/// cluster-scoped or under `namespaces/NS/`); None for discovery and other non-resource
/// paths, which every authenticated user may read.
pub fn attributes_of(method: &str, path: &str) -> Option<Attributes> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, r @ ..] if !r.is_empty() => (*ns, r),
        r => ("", r),
    };
    let (resource, name, subresource) = match rest {
        [] => return None,
        [r] => (*r, "", ""),
        [r, n] => (*r, *n, ""),
        [r, n, sub, ..] => (*r, *n, *sub),
    };
    Some(Attributes {
        namespace: namespace.into(),
        ..attributes(verb_of(method, name)?, group, resource, subresource, name)
    })
}

fn attributes(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
    Attributes {
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        subresource: sub.into(),
        name: name.into(),
        namespace: String::new(),
    }
}

/// The first field of a CSR the API server's validation refuses, or None.
fn invalid_csr(csr: &Value) -> Option<String> {
    let spec = &csr["spec"];
    if csr["metadata"]["name"].as_str().is_none_or(str::is_empty) {
        return Some("metadata.name".into());
    }
    let request = spec["request"].as_str().and_then(|r| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.decode(r).ok()
    });
    let parses = request.as_deref().is_some_and(|pem| {
        CertificateSigningRequestDer::from_pem_slice(pem)
            .ok()
            .is_some_and(|der| CertificateSigningRequestParams::from_der(&der).is_ok())
    });
    if !parses {
        return Some("spec.request".into());
    }
    if spec["signerName"].as_str().is_none_or(str::is_empty) {
        return Some("spec.signerName".into());
    }
    if spec["usages"].as_array().is_none_or(Vec::is_empty) {
        return Some("spec.usages".into());
    }
    if let Some(s) = spec.get("expirationSeconds").filter(|s| !s.is_null())
        && s.as_i64().is_none_or(|s| s < 600)
    {
        return Some("spec.expirationSeconds".into());
    }
    None
}

/// What KCM's csrsigning controller issues: the CSR's subject and key, clientAuth,
/// not a CA, valid from 5 minutes ago for expirationSeconds, capped by the signing
/// duration `most` (seconds) and by the CA's notAfter.
fn sign(
    csr: &Value,
    issuer: &Issuer<'static, KeyPair>,
    ca_not_after: OffsetDateTime,
    most: i64,
) -> Result<String, String> {
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(csr["spec"]["request"].as_str().unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let der = CertificateSigningRequestDer::from_pem_slice(&pem).map_err(|e| e.to_string())?;
    let request = CertificateSigningRequestParams::from_der(&der).map_err(|e| e.to_string())?;
    let ttl = csr["spec"]["expirationSeconds"]
        .as_i64()
        .unwrap_or(most)
        .min(most);
    let now = OffsetDateTime::now_utc();
    let mut params = CertificateParams::default();
    params.distinguished_name = request.params.distinguished_name.clone();
    params.subject_alt_names = request.params.subject_alt_names.clone();
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - time::Duration::seconds(BACKDATE);
    let end = if ttl < SHORT { ttl } else { ttl - BACKDATE };
    params.not_after = (now + time::Duration::seconds(end)).min(ca_not_after);
    let cert = params
        .signed_by(&request.public_key, issuer)
        .map_err(|e| e.to_string())?;
    Ok(cert.pem())
}

/// `labelSelector=k=v,k2=v2` (equality only, what spokekeeper sends).
fn label_selector(query: &str) -> Result<Vec<(String, String)>, String> {
    let Some(raw) = url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "labelSelector")
        .map(|(_, v)| v.into_owned())
    else {
        return Ok(Vec::new());
    };
    raw.split(',')
        .filter(|t| !t.is_empty())
        .map(|term| {
            let (k, v) = term
                .split_once("==")
                .or_else(|| term.split_once('='))
                .ok_or_else(|| format!("unable to parse requirement: {term:?}"))?;
            Ok((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

fn stamp_metadata(object: &mut Value, revision: &str) {
    let meta = &mut object["metadata"];
    meta["uid"] = json!(uid());
    meta["resourceVersion"] = json!(revision);
    meta["creationTimestamp"] = json!(now_text());
}

fn now_text() -> String {
    OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .expect("0 ns is valid")
        .format(&Rfc3339)
        .expect("RFC 3339 formats")
}

fn uid() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("OS randomness");
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn cluster_admin() -> Value {
    json!({"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1",
        "metadata": {"name": "cluster-admin", "labels":
            {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                  {"nonResourceURLs": ["*"], "verbs": ["*"]}]})
}

/// The built-in `view` ClusterRole as kube-apiserver bootstraps it (its rules in part:
/// reads only, and no `impersonate`).
fn view() -> Value {
    json!({"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1",
    "metadata": {"name": "view", "labels":
        {"kubernetes.io/bootstrapping": "rbac-defaults",
         "rbac.authorization.k8s.io/aggregate-to-edit": "true"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
    "aggregationRule": {"clusterRoleSelectors": [{"matchLabels":
        {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}]},
    "rules": [
        {"apiGroups": [""], "resources": ["configmaps", "endpoints", "persistentvolumeclaims",
            "persistentvolumeclaims/status", "pods", "replicationcontrollers",
            "replicationcontrollers/scale", "serviceaccounts", "services", "services/status"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["bindings", "events", "limitranges",
            "namespaces/status", "pods/log", "pods/status", "replicationcontrollers/status",
            "resourcequotas", "resourcequotas/status"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
    ]})
}

/// The ClusterRoles this store serves: the built-in `cluster-admin` and `view`.
fn builtin_role(name: &str) -> Option<Value> {
    match name {
        "cluster-admin" => Some(cluster_admin()),
        "view" => Some(view()),
        _ => None,
    }
}

/// Whether one of `role`'s resource rules covers the request, as RBAC matches them.
fn role_allows(role: &Value, attrs: &Attributes, resource: &str) -> bool {
    let has = |rule: &Value, k: &str, v: &str| {
        rule[k]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "*" || x == v))
    };
    role["rules"].as_array().into_iter().flatten().any(|rule| {
        has(rule, "verbs", &attrs.verb)
            && has(rule, "apiGroups", &attrs.group)
            && has(rule, "resources", resource)
            && rule["resourceNames"]
                .as_array()
                .is_none_or(|n| n.is_empty() || n.iter().any(|x| x == attrs.name.as_str()))
    })
}

fn get(store: &BTreeMap<String, Value>, attrs: &Attributes) -> Reply {
    match store.get(&attrs.name) {
        Some(o) => Reply {
            code: 200,
            body: o.clone(),
        },
        None => not_found(attrs),
    }
}

fn qualified(attrs: &Attributes) -> String {
    match attrs.group.as_str() {
        "" => attrs.resource.clone(),
        g => format!("{}.{g}", attrs.resource),
    }
}

fn details(attrs: &Attributes) -> Value {
    json!({"name": attrs.name, "group": attrs.group, "kind": attrs.resource})
}

fn failure(code: u16, reason: &str, message: &str, details: Value) -> Reply {
    let details = Some(details).filter(|d| !d.is_null());
    Reply {
        code,
        body: crate::status::failure(code, reason, message, details),
    }
}

fn not_found(attrs: &Attributes) -> Reply {
    let msg = format!("{} \"{}\" not found", qualified(attrs), attrs.name);
    failure(404, "NotFound", &msg, details(attrs))
}

fn not_found_path() -> Reply {
    failure(
        404,
        "NotFound",
        "the server could not find the requested resource",
        Value::Null,
    )
}

fn already_exists(attrs: &Attributes) -> Reply {
    let msg = format!("{} \"{}\" already exists", qualified(attrs), attrs.name);
    failure(409, "AlreadyExists", &msg, details(attrs))
}

fn conflict(attrs: &Attributes) -> Reply {
    let msg = format!(
        "Operation cannot be fulfilled on {} \"{}\": the object has been modified; \
         please apply your changes to the latest version and try again",
        qualified(attrs),
        attrs.name
    );
    failure(409, "Conflict", &msg, details(attrs))
}

fn invalid(attrs: &Attributes, kind: &str, field: &str) -> Reply {
    let msg = format!(
        "{kind}.{} \"{}\" is invalid: {field}",
        attrs.group, attrs.name
    );
    failure(
        422,
        "Invalid",
        &msg,
        json!({"name": attrs.name, "group": attrs.group, "kind": kind,
            "causes": [{"field": field}]}),
    )
}

/// kube-apiserver's RBAC refusal, in its words.
pub fn forbidden(caller: &Caller, attrs: &Attributes) -> Reply {
    let resource = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let object = if attrs.name.is_empty() {
        qualified(attrs)
    } else {
        format!("{} \"{}\"", qualified(attrs), attrs.name)
    };
    let scope = match attrs.namespace.as_str() {
        "" => "at the cluster scope".to_string(),
        ns => format!("in the namespace \"{ns}\""),
    };
    let msg = format!(
        "{object} is forbidden: User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
        caller.name, attrs.verb, attrs.group
    );
    let mut d = details(attrs);
    let d_map = d.as_object_mut().expect("object");
    if attrs.name.is_empty() {
        d_map.remove("name");
    }
    if attrs.group.is_empty() {
        d_map.remove("group");
    }
    failure(403, "Forbidden", &msg, d)
}

fn method_not_allowed() -> Reply {
    failure(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        Value::Null,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PkiOptions;

    fn pki() -> Pki {
        Pki::generate(&PkiOptions {
            address: "127.0.0.1".parse().unwrap(),
            address_in_sans: true,
            client_cert_days: 30,
        })
    }

    const MASTERS: &[&str] = &["system:masters", "system:authenticated"];

    fn call(
        o: &mut Objects,
        user: &str,
        groups: &[&str],
        method: &str,
        path: &str,
        body: Value,
    ) -> Reply {
        let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let bytes = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        o.handle(
            &Caller {
                name: user,
                groups: &groups,
            },
            method,
            path,
            query,
            &bytes,
        )
    }

    fn admin(o: &mut Objects, method: &str, path: &str, body: Value) -> Reply {
        call(o, "system:admin", MASTERS, method, path, body)
    }

    fn csr(name: &str, cn: &str, seconds: i64) -> Value {
        use base64::Engine as _;
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let pem = p.serialize_request(&key).unwrap().pem().unwrap();
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "spokekeeper"}},
            "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
                "signerName": CLIENT_SIGNER, "expirationSeconds": seconds,
                "usages": ["client auth"]}})
    }

    fn approved(mut created: Value) -> Value {
        created["status"]["conditions"] = json!([{"type": "Approved", "status": "True",
            "reason": "SpokekeeperMint", "message": "test"}]);
        created
    }

    fn binding(name: &str, user: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "spokekeeper"}},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "apiGroup": RBAC_GROUP, "name": user}]})
    }

    fn certificate(o: &mut Objects, name: &str) -> Option<Vec<u8>> {
        use base64::Engine as _;
        let got = admin(o, "GET", &format!("{CSRS}/{name}"), Value::Null);
        let pem = base64::engine::general_purpose::STANDARD
            .decode(got.body["status"]["certificate"].as_str()?)
            .unwrap();
        Some(CertificateDer::from_pem_slice(&pem).unwrap().to_vec())
    }

    #[test]
    fn an_approved_client_csr_is_signed_after_the_approval_with_its_cn_and_ttl() {
        let pki = pki();
        let mut o = Objects::new(Signer::client_ca(&pki));
        let created = admin(&mut o, "POST", CSRS, csr("a", "spokekeeper:hub:3", 3600));
        assert_eq!(created.code, 201, "{:?}", created.body);
        assert_eq!(created.body["spec"]["username"], "system:admin");
        assert_eq!(created.body["status"], json!({}));
        assert_eq!(certificate(&mut o, "a"), None, "not signed before approval");

        let approval = admin(
            &mut o,
            "PUT",
            &format!("{CSRS}/a/approval"),
            approved(created.body),
        );
        assert_eq!(approval.code, 200, "{:?}", approval.body);
        assert_eq!(approval.body["status"]["conditions"][0]["type"], "Approved");
        assert!(
            approval.body["status"]["certificate"].is_null(),
            "the signer acts later"
        );

        let der = certificate(&mut o, "a").expect("signed once approved");
        let (_, cert) = X509Certificate::from_der(&der).unwrap();
        let cn = cert
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap();
        assert_eq!(cn, "spokekeeper:hub:3");
        assert_eq!(
            cert.issuer().to_string(),
            X509Certificate::from_der(&pki.client_ca_der)
                .unwrap()
                .1
                .subject()
                .to_string()
        );
        let not_after = cert.validity().not_after.timestamp();
        let now = OffsetDateTime::now_utc().unix_timestamp();
        assert!(
            not_after <= now + 3600 && not_after > now + 3500,
            "{not_after} vs {now}"
        );
    }

    #[test]
    fn the_signing_duration_caps_what_a_csr_asks_as_kcm_does() {
        let pki = pki();
        let mut o = Objects::new(Signer::client_ca(&pki));
        o.sign_at_most(24 * 3600);
        let created = admin(&mut o, "POST", CSRS, csr("a", "u", 30 * 86_400));
        admin(
            &mut o,
            "PUT",
            &format!("{CSRS}/a/approval"),
            approved(created.body),
        );
        let der = certificate(&mut o, "a").expect("signed");
        let (_, cert) = X509Certificate::from_der(&der).unwrap();
        let not_after = cert.validity().not_after.timestamp();
        let now = OffsetDateTime::now_utc().unix_timestamp();
        // 24h, backdated 5 minutes (24h is not short), not the 30 days asked.
        let expected = now + 24 * 3600 - BACKDATE;
        assert!(
            (expected - 5..=expected).contains(&not_after),
            "{not_after} vs {expected}"
        );
    }

    #[test]
    fn without_a_signer_an_approved_csr_stays_unsigned_without_condition() {
        let mut o = Objects::new(Signer::Missing);
        let created = admin(&mut o, "POST", CSRS, csr("a", "u", 3600));
        admin(
            &mut o,
            "PUT",
            &format!("{CSRS}/a/approval"),
            approved(created.body),
        );
        let got = admin(&mut o, "GET", &format!("{CSRS}/a"), Value::Null);
        assert!(got.body["status"]["certificate"].is_null());
        let types: Vec<&Value> = got.body["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["type"])
            .collect();
        assert_eq!(types, vec!["Approved"]);
    }

    #[test]
    fn denying_approvals_stores_a_denial_and_signs_nothing() {
        let pki = pki();
        let mut o = Objects::new(Signer::client_ca(&pki));
        o.deny_approvals();
        let created = admin(&mut o, "POST", CSRS, csr("a", "u", 3600));
        let approval = admin(
            &mut o,
            "PUT",
            &format!("{CSRS}/a/approval"),
            approved(created.body),
        );
        assert_eq!(approval.code, 200);
        assert_eq!(approval.body["status"]["conditions"][0]["type"], "Denied");
        assert_eq!(certificate(&mut o, "a"), None);
    }

    #[test]
    fn errors_are_the_api_servers_statuses() {
        let mut o = Objects::new(Signer::Missing);
        let first = admin(&mut o, "POST", CSRS, csr("a", "u", 3600));
        let again = admin(&mut o, "POST", CSRS, csr("a", "u", 3600));
        assert_eq!(
            (again.code, again.body["reason"].as_str()),
            (409, Some("AlreadyExists"))
        );
        assert_eq!(again.body["details"]["name"], "a");
        let short = admin(&mut o, "POST", CSRS, csr("b", "u", 599));
        assert_eq!(
            (short.code, short.body["reason"].as_str()),
            (422, Some("Invalid"))
        );
        assert_eq!(
            short.body["details"]["causes"][0]["field"],
            "spec.expirationSeconds"
        );
        let missing = admin(&mut o, "GET", &format!("{CSRS}/nothing"), Value::Null);
        assert_eq!(
            (missing.code, missing.body["reason"].as_str()),
            (404, Some("NotFound"))
        );
        assert_eq!(
            missing.body["details"]["kind"],
            "certificatesigningrequests"
        );
        // An approval on a stale resourceVersion: someone changed it since.
        let mut stale = approved(first.body.clone());
        stale["metadata"]["resourceVersion"] = json!("1");
        let r = admin(&mut o, "PUT", &format!("{CSRS}/a/approval"), stale);
        assert_eq!((r.code, r.body["reason"].as_str()), (409, Some("Conflict")));
        let deleted = admin(&mut o, "DELETE", &format!("{CSRS}/a"), Value::Null);
        assert_eq!(
            (deleted.code, deleted.body["status"].as_str()),
            (200, Some("Success"))
        );
        let gone = admin(&mut o, "DELETE", &format!("{CSRS}/a"), Value::Null);
        assert_eq!(gone.code, 404);
        assert!(o.csr_names().is_empty());
    }

    #[test]
    fn a_user_is_authorized_only_while_bound_to_cluster_admin() {
        let mut o = Objects::new(Signer::Missing);
        let user = "spokekeeper:hub:1";
        let as_user = |o: &mut Objects| {
            call(
                o,
                user,
                &["system:authenticated"],
                "GET",
                &format!("{BINDINGS}?labelSelector=a%3Db"),
                Value::Null,
            )
        };
        let denied = as_user(&mut o);
        assert_eq!(
            (denied.code, denied.body["reason"].as_str()),
            (403, Some("Forbidden"))
        );
        assert!(
            denied.body["details"].get("name").is_none(),
            "{:?}",
            denied.body
        );
        let approve = call(
            &mut o,
            user,
            &["system:authenticated"],
            "PUT",
            &format!("{CSRS}/x/approval"),
            json!({}),
        );
        assert_eq!(approve.code, 403);
        assert!(
            approve.body["message"]
                .as_str()
                .unwrap()
                .contains("certificatesigningrequests/approval")
        );

        let created = admin(
            &mut o,
            "POST",
            BINDINGS,
            binding("spokekeeper-hub-g1", user),
        );
        assert_eq!(created.code, 201, "{:?}", created.body);
        assert_eq!(as_user(&mut o).code, 200);
        // A binding to a role that does not exist grants nothing.
        admin(&mut o, "POST", BINDINGS, {
            let mut b = binding("other", "someone");
            b["roleRef"]["name"] = json!("missing");
            b
        });
        assert_eq!(
            call(&mut o, "someone", &[], "GET", BINDINGS, Value::Null).code,
            403
        );

        admin(
            &mut o,
            "DELETE",
            &format!("{BINDINGS}/spokekeeper-hub-g1"),
            Value::Null,
        );
        assert_eq!(as_user(&mut o).code, 403);
    }

    #[test]
    fn approving_needs_the_approval_subresource_and_approve_on_the_signer() {
        let mut o = Objects::new(Signer::Missing);
        let user = "lab:approver";
        o.grant(user, &["create", "get"], "certificatesigningrequests");
        let as_user = |o: &mut Objects, method: &str, path: &str, body: Value| {
            call(o, user, &["system:authenticated"], method, path, body)
        };
        let created = as_user(&mut o, "POST", CSRS, csr("a", "u", 3600));
        assert_eq!(created.code, 201);
        let path = format!("{CSRS}/a/approval");
        let body = approved(created.body);
        let no_update = as_user(&mut o, "PUT", &path, body.clone());
        assert_eq!(no_update.code, 403);
        o.grant(user, &["update"], "certificatesigningrequests/approval");
        let no_signer = as_user(&mut o, "PUT", &path, body.clone());
        assert_eq!(no_signer.code, 403);
        assert!(
            no_signer.body["message"]
                .as_str()
                .unwrap()
                .contains("not permitted to approve requests with signerName"),
            "{:?}",
            no_signer.body
        );
        o.grant(user, &["approve"], "signers");
        assert_eq!(as_user(&mut o, "PUT", &path, body).code, 200);
        // Granted rights are that user's only.
        let other = call(
            &mut o,
            "lab:other",
            &[],
            "GET",
            &format!("{CSRS}/a"),
            Value::Null,
        );
        assert_eq!(other.code, 403);
    }

    #[test]
    fn bindings_are_listed_by_label() {
        let mut o = Objects::new(Signer::Missing);
        admin(&mut o, "POST", BINDINGS, binding("ours", "u"));
        let mut theirs = binding("theirs", "u");
        theirs["metadata"]["labels"] = json!({"app": "other"});
        admin(&mut o, "POST", BINDINGS, theirs);
        let list = admin(
            &mut o,
            "GET",
            &format!("{BINDINGS}?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dspokekeeper"),
            Value::Null,
        );
        assert_eq!(list.code, 200);
        assert_eq!(list.body["kind"], "ClusterRoleBindingList");
        let names: Vec<&Value> = list.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| &i["metadata"]["name"])
            .collect();
        assert_eq!(names, vec!["ours"]);
        assert!(
            list.body["items"][0].get("kind").is_none(),
            "list items carry no kind"
        );
        assert_eq!(o.binding_names(), vec!["ours", "theirs"]);
    }
}
