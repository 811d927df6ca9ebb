//! GitLab REST v4: merge requests (labels and reviewer ids go with the create).

use reqwest::Method;
use serde_json::{Value, json};

use super::{Forge, ForgeError, Keys, Open, Proposal, PullRequest, encode, pull_request};

const KEYS: Keys = Keys {
    number: "iid",
    url: "web_url",
    head: "/sha",
    body: "description",
};

fn mrs(f: &Forge) -> String {
    format!(
        "{}/projects/{}/merge_requests",
        f.api,
        encode(&f.repository)
    )
}

pub(super) async fn find_open(
    f: &Forge,
    branch: &str,
    base: &str,
) -> Result<Option<Open>, ForgeError> {
    let url = format!(
        "{}?state=opened&source_branch={}&target_branch={}",
        mrs(f),
        encode(branch),
        encode(base)
    );
    let what = "listing open merge requests";
    let a = f.call(Method::GET, &url, None, what).await?;
    let list = a.body.as_array().ok_or_else(|| f.unexpected(what, &a))?;
    Ok(list
        .iter()
        .filter(|m| m.get("source_branch").and_then(Value::as_str) == Some(branch))
        .find_map(|m| pull_request(m, &KEYS)))
}

/// None: one already exists (409).
pub(super) async fn create(f: &Forge, p: &Proposal<'_>) -> Result<Option<Open>, ForgeError> {
    let what = "opening the merge request";
    let mut body = json!({
        "source_branch": p.branch,
        "target_branch": p.base,
        "title": p.title,
        "description": p.body,
    });
    if !f.labels.is_empty() {
        body["labels"] = json!(f.labels.join(","));
    }
    if !f.reviewers.is_empty() {
        // Validated as numbers in the configuration.
        let ids: Vec<u64> = f.reviewers.iter().filter_map(|r| r.parse().ok()).collect();
        body["reviewer_ids"] = json!(ids);
    }
    let a = f.call(Method::POST, &mrs(f), Some(&body), what).await?;
    if f.already_exists(&a) {
        return Ok(None);
    }
    match a.status.as_u16() {
        201 => pull_request(&a.body, &KEYS)
            .map(Some)
            .ok_or_else(|| f.unexpected(what, &a)),
        _ => Err(f.unexpected(what, &a)),
    }
}

pub(super) async fn update(
    f: &Forge,
    pr: &PullRequest,
    p: &Proposal<'_>,
) -> Result<Open, ForgeError> {
    let what = "updating the merge request";
    let url = format!("{}/{}", mrs(f), pr.number);
    let body = json!({"title": p.title, "description": p.body});
    let a = f.call(Method::PUT, &url, Some(&body), what).await?;
    if a.status.as_u16() != 200 {
        return Err(f.unexpected(what, &a));
    }
    pull_request(&a.body, &KEYS).ok_or_else(|| f.unexpected(what, &a))
}
