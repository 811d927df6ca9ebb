//! Authorization: what a request asks as RBAC sees it, the built-in ClusterRoles and
//! their rules, and kube-apiserver's refusal.

use serde_json::{Value, json};

use super::replies::{details, failure, qualified};
use super::{Attributes, BINDINGS, CSR_GROUP, CSRS, Caller, RBAC_GROUP, ROLES, Reply};

pub(super) enum Route {
    Csr,
    Binding,
    Role,
}

/// The authorizer's attributes and the route of a request, or None for a path under
/// these collections that names nothing (`.../a/b/c`).
pub(super) fn route(method: &str, path: &str) -> Option<(Attributes, Route)> {
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
pub(super) fn verb_of(method: &str, name: &str) -> Option<&'static str> {
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

pub(super) fn attributes(
    verb: &str,
    group: &str,
    resource: &str,
    sub: &str,
    name: &str,
) -> Attributes {
    Attributes {
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        subresource: sub.into(),
        name: name.into(),
        namespace: String::new(),
    }
}

pub(super) fn cluster_admin() -> Value {
    json!({"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1",
        "metadata": {"name": "cluster-admin", "labels":
            {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                  {"nonResourceURLs": ["*"], "verbs": ["*"]}]})
}

/// The built-in `view` ClusterRole as kube-apiserver bootstraps it (its rules in part:
/// reads only, and no `impersonate`).
pub(super) fn view() -> Value {
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
pub(super) fn builtin_role(name: &str) -> Option<Value> {
    match name {
        "cluster-admin" => Some(cluster_admin()),
        "view" => Some(view()),
        _ => None,
    }
}

/// Whether one of `role`'s resource rules covers the request, as RBAC matches them.
pub(super) fn role_allows(role: &Value, attrs: &Attributes, resource: &str) -> bool {
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
