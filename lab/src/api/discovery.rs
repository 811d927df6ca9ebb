//! What a kube-apiserver of a given version serves: the review endpoints, legacy
//! discovery, /version, the namespaces, and its 404s.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};

use super::{SSAR_PATH, SSR_BETA_PATH, SSR_PATH, status};

/// The review endpoints a version serves: SelfSubjectReview v1 from 1.28, v1beta1 from
/// 1.27 until its removal in 1.33 (upstream's prerelease lifecycle; a real 1.37 serves no
/// v1beta1); SelfSubjectAccessReview always.
pub(super) fn serves(git_version: &str, path: &str) -> bool {
    let minor: u32 = git_version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or(33);
    match path {
        SSR_PATH | AUTHN_V1 => minor >= 28,
        SSR_BETA_PATH | AUTHN_V1BETA1 => serves_v1beta1(minor),
        "/version" | SSAR_PATH | "/api" | "/api/v1" | "/apis" | AUTHZ_V1 | NAMESPACES => true,
        _ => false,
    }
}

/// authentication.k8s.io/v1beta1: introduced in 1.27, no longer served from 1.33.
fn serves_v1beta1(minor: u32) -> bool {
    (27..33).contains(&minor)
}

const AUTHN_V1: &str = "/apis/authentication.k8s.io/v1";
const AUTHN_V1BETA1: &str = "/apis/authentication.k8s.io/v1beta1";
const AUTHZ_V1: &str = "/apis/authorization.k8s.io/v1";

/// Legacy discovery for what this server serves (clients such as controller-runtime's,
/// which Flux uses, look a kind up there before they call it).
pub(super) fn discovery(path: &str, minor: u32) -> Option<serde_json::Value> {
    let resource = |name: &str, kind: &str| {
        serde_json::json!({"name": name, "singularName": name.trim_end_matches('s'),
            "namespaced": false, "kind": kind, "verbs": ["create"]})
    };
    let list = |gv: &str, resources: Vec<serde_json::Value>| {
        serde_json::json!({"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": gv, "resources": resources})
    };
    let version = |gv: &str, v: &str| serde_json::json!({"groupVersion": gv, "version": v});
    Some(match path {
        "/api" => serde_json::json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]}),
        "/api/v1" => list("v1", vec![]),
        "/apis" => {
            let mut authn = Vec::new();
            if minor >= 28 {
                authn.push(version("authentication.k8s.io/v1", "v1"));
            }
            if serves_v1beta1(minor) {
                authn.push(version("authentication.k8s.io/v1beta1", "v1beta1"));
            }
            let mut groups = Vec::new();
            if let Some(preferred) = authn.first().cloned() {
                groups.push(serde_json::json!({"name": "authentication.k8s.io",
                    "versions": authn, "preferredVersion": preferred}));
            }
            let authz = version("authorization.k8s.io/v1", "v1");
            groups.push(serde_json::json!({"name": "authorization.k8s.io",
                "versions": [authz.clone()], "preferredVersion": authz}));
            serde_json::json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        }
        AUTHN_V1 => list(
            "authentication.k8s.io/v1",
            vec![resource("selfsubjectreviews", "SelfSubjectReview")],
        ),
        AUTHN_V1BETA1 => list(
            "authentication.k8s.io/v1beta1",
            vec![resource("selfsubjectreviews", "SelfSubjectReview")],
        ),
        AUTHZ_V1 => list(
            "authorization.k8s.io/v1",
            vec![resource(
                "selfsubjectaccessreviews",
                "SelfSubjectAccessReview",
            )],
        ),
        _ => return None,
    })
}

/// The namespaces a fresh cluster has.
pub(super) const NAMESPACES: &str = "/api/v1/namespaces";

pub(super) fn namespaces() -> serde_json::Value {
    let items: Vec<serde_json::Value> =
        ["default", "kube-node-lease", "kube-public", "kube-system"]
            .iter()
            .map(|n| {
                serde_json::json!({"metadata": {"name": n}, "spec": {"finalizers": ["kubernetes"]},
                               "status": {"phase": "Active"}})
            })
            .collect();
    serde_json::json!({"kind": "NamespaceList", "apiVersion": "v1",
                       "metadata": {"resourceVersion": "1"}, "items": items})
}

/// A path nothing serves, as kube-apiserver answers it: under /api or a group it
/// serves (both review groups exist in every version), a 404 `Status`; elsewhere, Go's
/// plain-text "404 page not found".
pub(super) fn not_found_at(path: &str) -> Response<Full<Bytes>> {
    let served_group = [
        "/api/",
        "/apis/authentication.k8s.io/",
        "/apis/authorization.k8s.io/",
    ]
    .iter()
    .any(|g| path.starts_with(g) || path == g.trim_end_matches('/'));
    if served_group {
        return not_found();
    }
    Response::builder()
        .status(StatusCode::NOT_FOUND)
        .header("Content-Type", "text/plain; charset=utf-8")
        .header("X-Content-Type-Options", "nosniff")
        .body(Full::new(Bytes::from("404 page not found\n")))
        .expect("valid response")
}

/// A missing resource, as kube-apiserver answers it: 404 with a `Status`.
pub(super) fn not_found() -> Response<Full<Bytes>> {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the server could not find the requested resource",
    )
}

pub(super) fn version(git_version: &str) -> serde_json::Value {
    let minor = git_version.split('.').nth(1).unwrap_or("33").to_owned();
    serde_json::json!({
        "major": "1",
        "minor": minor,
        "emulationMajor": "1",
        "emulationMinor": minor,
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": git_version,
        "gitCommit": "99d91538b1327da933356c318dc8040335fbb66c",
        "gitTreeState": "clean",
        "buildDate": "2025-05-14T23:49:42Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // What a real kube-apiserver answers (tests/suite/realstack/conformance/ checks it
    // against 1.37).
    #[test]
    fn v1beta1_reviews_are_served_from_1_27_until_1_33() {
        assert!(!serves("v1.26.9", SSR_BETA_PATH));
        assert!(serves("v1.27.3+k3s1", SSR_BETA_PATH));
        assert!(serves("v1.32.1", AUTHN_V1BETA1));
        assert!(!serves("v1.33.1+k3s1", SSR_BETA_PATH));
        assert!(!serves("v1.37.2", AUTHN_V1BETA1));
        assert!(serves("v1.37.2", SSR_PATH));
    }

    #[test]
    fn unknown_paths_are_a_status_only_under_served_groups() {
        let content_type = |path: &str| {
            let r = not_found_at(path);
            assert_eq!(r.status(), StatusCode::NOT_FOUND);
            r.headers()["Content-Type"].to_str().unwrap().to_owned()
        };
        assert_eq!(content_type("/api/v1/nothing"), "application/json");
        assert_eq!(
            content_type("/apis/authentication.k8s.io/v1beta1"),
            "application/json"
        );
        assert_eq!(
            content_type("/apis/nothing.example.org/v1"),
            "text/plain; charset=utf-8"
        );
        assert_eq!(content_type("/nothing"), "text/plain; charset=utf-8");
    }
}
