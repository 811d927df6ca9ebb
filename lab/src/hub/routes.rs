//! The hub's API on the wire: each request recorded, then routed to the Service and its
//! proxy, SealedSecrets, Events, Flux sources and the Kustomizations and HelmReleases,
//! federated spokes' ConfigMaps and the ServiceAccounts' TokenRequests.

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use std::sync::Mutex;

use super::flux::{fetch, list, merge, patch, reconcile};
use super::sealed::{apply, unseal};
use super::{Controller, Kind, Seen, State, json_response, status};

/// The RBAC request attributes (group, resource[/subresource], verb) the API server's
/// authorizer derives from a namespaced request: on a named object GET is get, PATCH
/// patch, PUT update, DELETE delete; on a collection GET is list and POST create. None
/// for anything else.
pub fn rbac_attributes(method: &str, path: &str) -> Option<(String, String, &'static str)> {
    let verb = match method {
        "GET" => "get",
        "PATCH" => "patch",
        "PUT" => "update",
        "DELETE" => "delete",
        "POST" => "create",
        _ => return None,
    };
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => (String::new(), rest),
        ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
        _ => return None,
    };
    match rest {
        ["namespaces", _ns, resource] => match verb {
            "get" => Some((group, resource.to_string(), "list")),
            "create" => Some((group, resource.to_string(), "create")),
            _ => None,
        },
        ["namespaces", _ns, resource, _name] if verb != "create" => {
            Some((group, resource.to_string(), verb))
        }
        ["namespaces", _ns, resource, _name, sub, ..] => {
            Some((group, format!("{resource}/{sub}"), verb))
        }
        _ => None,
    }
}

pub(super) async fn handle(req: Request<Incoming>, state: &Mutex<State>) -> Response<Full<Bytes>> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match Limited::new(req.into_body(), 1 << 20).collect().await {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        Err(_) => {
            return status(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                "request is too large",
                None,
            );
        }
    };
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    st.seen.push(Seen {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        content_type: content_type.clone(),
        body: body.clone(),
        at: std::time::Instant::now(),
        throttled: false,
    });
    if let Some(refused) = throttled(&mut st, &path) {
        return refused;
    }
    let call = Call {
        method: &method,
        query: &query,
        content_type: content_type.as_deref(),
        body: &body,
    };
    route(&mut st, &path, &call)
}

/// A request as the routes read it, past its path.
struct Call<'a> {
    method: &'a Method,
    query: &'a str,
    content_type: Option<&'a str>,
    body: &'a str,
}

/// A 429 with Retry-After while [`super::HubSim::throttle`]'s count for the path lasts.
fn throttled(st: &mut State, path: &str) -> Option<Response<Full<Bytes>>> {
    let (p, times, after) = st.throttle.as_mut()?;
    if *times == 0 || !path.contains(p.as_str()) {
        return None;
    }
    *times -= 1;
    let after = *after;
    if let Some(last) = st.seen.last_mut() {
        last.throttled = true;
    }
    let mut resp = status(
        StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        "Too many requests, please try again later.",
        Some(json!({"retryAfterSeconds": after})),
    );
    resp.headers_mut().insert(
        "Retry-After",
        hyper::header::HeaderValue::from_str(&after.to_string()).expect("digits"),
    );
    Some(resp)
}

fn route(st: &mut State, path: &str, call: &Call) -> Response<Full<Bytes>> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api", "v1", "namespaces", ns, "services", name] => {
            if *call.method != Method::GET {
                return not_allowed();
            }
            service(st, ns, name)
        }
        [
            "api",
            "v1",
            "namespaces",
            ns,
            "services",
            target,
            "proxy",
            rest @ ..,
        ] => {
            if *call.method != Method::GET {
                return not_allowed();
            }
            proxy(st, ns, target, &rest.join("/"))
        }
        [
            "api",
            "v1",
            "namespaces",
            ns,
            "serviceaccounts",
            name,
            "token",
        ] => super::federated::token_request(st, call.method, (ns, name), call.body),
        ["api", "v1", "namespaces", ns, "configmaps", name] => {
            super::federated::config_map(st, call.method, ns, name)
        }
        [
            "apis",
            "bitnami.com",
            "v1alpha1",
            "namespaces",
            ns,
            "sealedsecrets",
            name,
        ] => {
            if *call.method != Method::GET {
                return not_allowed();
            }
            sealed_secret(st, ns, name)
        }
        [
            "apis",
            "events.k8s.io",
            "v1",
            "namespaces",
            ns,
            "events",
            rest @ ..,
        ] if rest.len() <= 1 => event(st, call.method, ns, rest.first().copied(), call.body),
        ["apis", group, version] if *call.method == Method::GET => resources(st, group, version),
        [
            "apis",
            "source.toolkit.fluxcd.io",
            "v1",
            "namespaces",
            ns,
            plural,
            name,
        ] => flux_source(st, call, ns, plural, name),
        ["apis", group, version, "namespaces", ns, plural, rest @ ..] if rest.len() <= 1 => {
            let Some(kind) = Kind::ALL.into_iter().find(|k| {
                k.group() == *group
                    && k.version() == *version
                    && k.plural() == *plural
                    && !st.not_served.contains(k)
            }) else {
                return no_route();
            };
            consumer(st, call, kind, ns, rest.first().copied())
        }
        _ => no_route(),
    }
}

/// A SealedSecret as read after "Flux" applied the fleet repo's and the controller had
/// its go at it.
fn sealed_secret(st: &mut State, ns: &str, name: &str) -> Response<Full<Bytes>> {
    let key = (ns.to_string(), name.to_string());
    apply(st, &key);
    unseal(st, &key);
    match st.sealed.get(&key) {
        Some(obj) => json_response(StatusCode::OK, obj),
        None => not_found("bitnami.com", "sealedsecrets", name),
    }
}

/// Discovery of a group version: the Flux kinds it serves.
fn resources(st: &State, group: &str, version: &str) -> Response<Full<Bytes>> {
    let served: Vec<Value> = Kind::ALL
        .into_iter()
        .filter(|k| !st.not_served.contains(k))
        .filter(|k| k.group() == group && k.version() == version)
        .map(|k| json!({"name": k.plural(), "namespaced": true, "kind": k.as_str(), "verbs": ["get", "list", "patch"]}))
        .collect();
    if served.is_empty() {
        return no_route();
    }
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/{version}"), "resources": served}),
    )
}

/// GET (source-controller fetches first) and merge-patch of a Flux source.
fn flux_source(
    st: &mut State,
    call: &Call,
    ns: &str,
    plural: &str,
    name: &str,
) -> Response<Full<Bytes>> {
    let key = (plural.to_string(), ns.to_string(), name.to_string());
    let Some(obj) = st.sources.get_mut(&key) else {
        return not_found("source.toolkit.fluxcd.io", plural, name);
    };
    match *call.method {
        Method::GET => {
            fetch(obj);
            json_response(StatusCode::OK, obj)
        }
        Method::PATCH if call.content_type == Some("application/merge-patch+json") => {
            let Ok(p) = serde_json::from_str::<Value>(call.body) else {
                return bad_body();
            };
            merge(obj, &p);
            json_response(StatusCode::OK, obj)
        }
        Method::PATCH => status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json",
            None,
        ),
        _ => not_allowed(),
    }
}

/// A Kustomization or HelmRelease (reconciled as it is read) or, without a name, the
/// namespace's list of them.
fn consumer(
    st: &mut State,
    call: &Call,
    kind: Kind,
    ns: &str,
    name: Option<&str>,
) -> Response<Full<Bytes>> {
    let Some(name) = name else {
        if *call.method != Method::GET {
            return not_allowed();
        }
        return list(st, kind, ns, call.query);
    };
    let key = (kind, ns.to_string(), name.to_string());
    if !st.consumers.contains_key(&key) {
        return not_found(kind.group(), kind.plural(), name);
    }
    match *call.method {
        Method::GET => {
            reconcile(st, &key);
            json_response(StatusCode::OK, &st.consumers[&key].obj)
        }
        Method::PATCH => patch(st, &key, call.content_type, call.body),
        _ => not_allowed(),
    }
}

pub(super) fn service(st: &State, ns: &str, name: &str) -> Response<Full<Bytes>> {
    if ns != st.namespace || name != st.name {
        return not_found("", "services", name);
    }
    let mut port = json!({"protocol": "TCP", "port": 8080, "targetPort": 8080});
    if !st.port_name.is_empty() {
        port["name"] = json!(st.port_name);
    }
    let mut labels = json!({"app.kubernetes.io/name": "sealed-secrets"});
    if let Some(v) = &st.version_label {
        labels["app.kubernetes.io/version"] = json!(v);
    }
    json_response(
        StatusCode::OK,
        &json!({
            "kind": "Service",
            "apiVersion": "v1",
            "metadata": {
                "name": st.name, "namespace": st.namespace,
                "labels": labels,
                "resourceVersion": "42", "uid": "00000000-0000-4000-8000-00000000002a",
            },
            "spec": {
                "ports": [port],
                "selector": {"app.kubernetes.io/name": "sealed-secrets"},
                "clusterIP": "10.43.0.42", "type": "ClusterIP",
            },
        }),
    )
}

/// `[scheme:]name[:port]` -> the controller's cert.pem.
pub(super) fn proxy(st: &State, ns: &str, target: &str, rest: &str) -> Response<Full<Bytes>> {
    let mut fields = target.split(':').collect::<Vec<_>>();
    if matches!(fields.first(), Some(&"http" | &"https")) && fields.len() > 1 {
        fields.remove(0);
    }
    let (name, port) = (fields[0], fields.get(1).copied().unwrap_or(""));
    if ns != st.namespace || name != st.name {
        return not_found("", "services", name);
    }
    // As the API server: a number stands for its port's name, and endpoints match by
    // name only (so "" reaches only an unnamed port).
    let port = if port == "8080" {
        st.port_name.as_str()
    } else {
        port
    };
    if port != st.port_name {
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            &format!("no endpoints available for service \"{target}\""),
            None,
        );
    }
    if st.controller == Controller::Down {
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            &format!("no endpoints available for service \"{name}\""),
            None,
        );
    }
    if rest != "v1/cert.pem" {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .header("Content-Type", "text/plain; charset=utf-8")
            .body(Full::new(Bytes::from("404 page not found\n")))
            .expect("response");
    }
    Response::builder()
        .status(StatusCode::OK)
        .header("Content-Type", "text/plain")
        .body(Full::new(Bytes::from(st.cert_pem.clone())))
        .expect("response")
}

/// Create (POST to the collection, 409 when the name is taken) and merge-patch (404 when
/// gone) of an Event; nothing else.
pub(super) fn event(
    st: &mut State,
    method: &Method,
    ns: &str,
    name: Option<&str>,
    body: &str,
) -> Response<Full<Bytes>> {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return bad_body();
    };
    match (method, name) {
        (&Method::POST, None) => {
            let name = v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let key = (ns.to_string(), name.clone());
            if st.events.contains_key(&key) {
                return status(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    &format!("events.events.k8s.io \"{name}\" already exists"),
                    None,
                );
            }
            st.events.insert(key, v.clone());
            json_response(StatusCode::CREATED, &v)
        }
        (&Method::PATCH, Some(name)) => {
            match st.events.get_mut(&(ns.to_string(), name.to_string())) {
                Some(obj) => {
                    merge(obj, &v);
                    json_response(StatusCode::OK, obj)
                }
                None => not_found("events.k8s.io", "events", name),
            }
        }
        _ => not_allowed(),
    }
}

pub(super) fn not_found(group: &str, resource: &str, name: &str) -> Response<Full<Bytes>> {
    let what = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{what} \"{name}\" not found"),
        Some(json!({"name": name, "group": group, "kind": resource})),
    )
}

pub(super) fn no_route() -> Response<Full<Bytes>> {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the server could not find the requested resource",
        None,
    )
}

pub(super) fn bad_body() -> Response<Full<Bytes>> {
    status(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        "the body of the request was in an unknown format",
        None,
    )
}

pub(super) fn not_allowed() -> Response<Full<Bytes>> {
    status(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        None,
    )
}
