//! Answering one authenticated request: authorization first, then the route (the
//! objects' store, discovery, /version, the reviews, /metrics).

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};

use super::discovery::{
    NAMESPACES, discovery, namespaces, not_found, not_found_at, serves, version,
};
use super::federated;
use super::{
    ANONYMOUS, ApiIdentity, SAR_PATH, SSAR_PATH, SSR_BETA_PATH, SSR_PATH, User, json, status,
};
use crate::objects::{self, Attributes, Caller, Objects};

pub(super) async fn respond(
    req: Request<Incoming>,
    user: Option<&User>,
    identity: &ApiIdentity,
) -> Response<Full<Bytes>> {
    let Some(user) = user else {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
    };
    let path = req.uri().path().to_owned();
    let path = match path.strip_prefix(identity.prefix.as_str()) {
        Some(p) if p.starts_with('/') => p,
        _ => return not_found(),
    };
    if Objects::serves(path) {
        return objects_reply(req, user, identity, path).await;
    }
    let kind = match path {
        SSR_PATH | SSR_BETA_PATH => "SelfSubjectReview",
        SSAR_PATH => "SelfSubjectAccessReview",
        _ => "",
    };
    if let Some(refused) = refused(&req, user, identity, kind, path) {
        return refused;
    }
    match (req.method(), path) {
        (&Method::GET, federated::METRICS) => return federated::metrics(user, identity),
        (&Method::POST, SAR_PATH) => {
            return federated::subject_access_review(req, identity).await;
        }
        _ => {}
    }
    let git_version = identity.git_version.as_str();
    if !serves(git_version, path) {
        return not_found_at(path);
    }
    let minor = minor(git_version);
    match (req.method(), path) {
        (&Method::GET, "/version") => json(StatusCode::OK, &version(git_version), true),
        (&Method::GET, NAMESPACES) => json(StatusCode::OK, &namespaces(), false),
        (&Method::GET, _) if discovery(path, minor).is_some() => json(
            StatusCode::OK,
            &discovery(path, minor).expect("checked"),
            false,
        ),
        (&Method::POST, SSR_PATH | SSR_BETA_PATH | SSAR_PATH) => {
            create_review(req, user, identity, path, kind).await
        }
        _ => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
    }
}

/// The minor version of a gitVersion (`v1.33.1+k3s1`: 33).
fn minor(git_version: &str) -> u32 {
    git_version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or(33)
}

/// A 403 for a caller not allowed what it asks, decided before routing as
/// kube-apiserver does; `kind` is the review a POST creates, empty for any other path.
fn refused(
    req: &Request<Incoming>,
    user: &User,
    identity: &ApiIdentity,
    kind: &str,
    path: &str,
) -> Option<Response<Full<Bytes>>> {
    // Discovery is for authenticated users only (system:discovery).
    if user.name == ANONYMOUS && kind.is_empty() && path != "/version" {
        return Some(status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!("forbidden: User \"{ANONYMOUS}\" cannot get path \"{path}\""),
        ));
    }
    // Authorization comes before routing: default RBAC lets anonymous callers read
    // /version and nothing else.
    if user.name == ANONYMOUS && !kind.is_empty() {
        let (resource, group) = match kind {
            "SelfSubjectReview" => ("selfsubjectreviews", "authentication.k8s.io"),
            _ => ("selfsubjectaccessreviews", "authorization.k8s.io"),
        };
        return Some(status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!(
                "{resource}.{group} is forbidden: User \"{ANONYMOUS}\" cannot create resource \"{resource}\" in API group \"{group}\" at the cluster scope"
            ),
        ));
    }
    // A user outside system:masters is authorized by its bindings, before routing: an
    // unbound minted user is refused (403), whatever it asks for.
    if kind.is_empty()
        && let Some(attrs) = objects::attributes_of(req.method().as_str(), path)
    {
        let caller = Caller {
            name: &user.name,
            groups: &user.groups,
        };
        let allowed = identity
            .objects
            .lock()
            .map(|o| o.allows(&caller, &attrs))
            .unwrap_or(false);
        if !allowed {
            let refused = objects::forbidden(&caller, &attrs);
            return Some(json(StatusCode::FORBIDDEN, &refused.body, false));
        }
    }
    None
}

/// A SelfSubjectReview or SelfSubjectAccessReview created from the request's body.
async fn create_review(
    req: Request<Incoming>,
    user: &User,
    identity: &ApiIdentity,
    path: &str,
    kind: &str,
) -> Response<Full<Bytes>> {
    let req_protobuf = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/vnd.kubernetes.protobuf"));
    let body = match Limited::new(req.into_body(), 3 << 20).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return status(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                "request is too large",
            );
        }
    };
    // Clients of built-in types may send protobuf (controller-runtime's, as
    // Flux uses, does): the envelope is "k8s\0" and TypeMeta names the kind.
    // A review's request has nothing else to read; the answer is JSON, which
    // such clients accept too.
    let protobuf = req_protobuf && body.starts_with(b"k8s\0");
    let parsed: Result<serde_json::Value, _> = if protobuf {
        if body.windows(kind.len()).any(|w| w == kind.as_bytes()) {
            Ok(serde_json::json!({ "kind": kind }))
        } else {
            Ok(serde_json::json!({ "kind": "Unknown" }))
        }
    } else {
        serde_json::from_slice(&body)
    };
    match parsed {
        Ok(v)
            if v.get("kind")
                .and_then(|k| k.as_str())
                .is_none_or(|k| k == kind) =>
        {
            let allowed = path == SSAR_PATH && access_allowed(user, identity, &v);
            json(StatusCode::CREATED, &review(path, user, &v, allowed), false)
        }
        _ => status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the body of the request was in an unknown format",
        ),
    }
}

/// Whether an access review's resource attributes are allowed to `user`: by
/// system:masters or a binding to cluster-admin (see [`Objects::allows`]).
fn access_allowed(user: &User, identity: &ApiIdentity, request: &serde_json::Value) -> bool {
    let ra = &request["spec"]["resourceAttributes"];
    let attrs = Attributes::of_review(ra);
    let caller = Caller {
        name: &user.name,
        groups: &user.groups,
    };
    identity
        .objects
        .lock()
        .map(|o| o.allows(&caller, &attrs))
        .unwrap_or(false)
}

/// A CSR, ClusterRoleBinding or ClusterRole call, answered by the store.
async fn objects_reply(
    req: Request<Incoming>,
    user: &User,
    identity: &ApiIdentity,
    path: &str,
) -> Response<Full<Bytes>> {
    let method = req.method().as_str().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let Ok(body) = Limited::new(req.into_body(), 3 << 20).collect().await else {
        return status(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            "request is too large",
        );
    };
    let caller = Caller {
        name: &user.name,
        groups: &user.groups,
    };
    let reply = match identity.objects.lock() {
        Ok(mut o) => o.handle(&caller, &method, path, &query, &body.to_bytes()),
        Err(_) => {
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "the store is poisoned",
            );
        }
    };
    let code = StatusCode::from_u16(reply.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(code, &reply.body, false)
}

/// The created review: who asked, or (an access review) whether they may.
fn review(
    path: &str,
    user: &User,
    request: &serde_json::Value,
    allowed: bool,
) -> serde_json::Value {
    if path == SSAR_PATH {
        return serde_json::json!({
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "spec": request.get("spec").cloned().unwrap_or_default(),
            "status": {"allowed": allowed},
        });
    }
    let api_version = if path == SSR_PATH {
        "authentication.k8s.io/v1"
    } else {
        "authentication.k8s.io/v1beta1"
    };
    serde_json::json!({
        "kind": "SelfSubjectReview",
        "apiVersion": api_version,
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": {"username": user.name, "groups": user.groups}},
    })
}
