//! What a federated spoke's API server answers beyond the reviews: GET /metrics (the
//! authentication configuration it runs) and SubjectAccessReviews (whether another user,
//! a hub controller's, may do something), both asked with the admin credential.

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use super::{ApiIdentity, User, json, status};
use crate::objects::{Attributes, Caller};

pub(super) const METRICS: &str = "/metrics";

/// GET /metrics: to system:masters (the admin), 403 to anyone else, as RBAC grants the
/// path to no default role.
pub(super) fn metrics(user: &User, identity: &ApiIdentity) -> Response<Full<Bytes>> {
    if !user.groups.iter().any(|g| g == "system:masters") {
        return status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!(
                "forbidden: User \"{}\" cannot get path \"{METRICS}\"",
                user.name
            ),
        );
    }
    // Without --authentication-config the server publishes nothing of one.
    let text = identity
        .trust
        .as_ref()
        .map(|t| t.metrics())
        .unwrap_or_default();
    Response::builder()
        .status(StatusCode::OK)
        .header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        .body(Full::new(Bytes::from(text)))
        .expect("valid response")
}

/// POST subjectaccessreviews (its caller authorized before routing): whether
/// `spec.user` (with `spec.groups`) may do `spec.resourceAttributes`, by the store's RBAC.
pub(super) async fn subject_access_review(
    req: Request<Incoming>,
    identity: &ApiIdentity,
) -> Response<Full<Bytes>> {
    let Ok(body) = Limited::new(req.into_body(), 3 << 20).collect().await else {
        return status(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            "request is too large",
        );
    };
    let review: Value = match serde_json::from_slice(&body.to_bytes()) {
        Ok(v @ Value::Object(_))
            if v["kind"]
                .as_str()
                .is_none_or(|k| k == "SubjectAccessReview") =>
        {
            v
        }
        _ => {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "the body of the request was in an unknown format",
            );
        }
    };
    let spec = &review["spec"];
    let name = spec["user"].as_str().unwrap_or_default();
    let groups: Vec<String> = spec["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(str::to_owned))
        .collect();
    if name.is_empty() && groups.is_empty() {
        let message = "SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified";
        let body = crate::status::failure(
            422,
            "Invalid",
            message,
            Some(
                json!({"group": "authorization.k8s.io", "kind": "SubjectAccessReview",
                "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: \"\": at least one of user or group must be specified", "field": "spec.user"}]}),
            ),
        );
        return json(StatusCode::UNPROCESSABLE_ENTITY, &body, false);
    }
    let ra = &spec["resourceAttributes"];
    let attrs = Attributes::of_review(ra);
    let caller = Caller {
        name,
        groups: &groups,
    };
    let allowed = identity
        .objects
        .lock()
        .map(|o| o.allows(&caller, &attrs))
        .unwrap_or(false);
    json(
        StatusCode::CREATED,
        &json!({
            "kind": "SubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "spec": spec,
            "status": {"allowed": allowed},
        }),
        false,
    )
}
