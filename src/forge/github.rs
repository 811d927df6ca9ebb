//! GitHub REST: pulls, issue labels, requested reviewers.

use reqwest::Method;
use serde_json::{Value, json};

use super::{Forge, ForgeError, Keys, Open, Proposal, PullRequest, encode, pull_request};

const KEYS: Keys = Keys {
    number: "number",
    url: "html_url",
    head: "/head/sha",
    body: "body",
};

fn repo(f: &Forge) -> String {
    format!("{}/repos/{}", f.api, f.repository)
}

fn owner(f: &Forge) -> &str {
    f.repository.split('/').next().unwrap_or_default()
}

pub(super) async fn find_open(
    f: &Forge,
    branch: &str,
    base: &str,
) -> Result<Option<Open>, ForgeError> {
    let url = format!(
        "{}/pulls?state=open&head={}&base={}",
        repo(f),
        encode(&format!("{}:{branch}", owner(f))),
        encode(base)
    );
    let what = "listing open pull requests";
    let a = f.call(Method::GET, &url, None, what).await?;
    let list = a.body.as_array().ok_or_else(|| f.unexpected(what, &a))?;
    Ok(list
        .iter()
        .filter(|p| p.pointer("/head/ref").and_then(Value::as_str) == Some(branch))
        .find_map(|p| pull_request(p, &KEYS)))
}

/// None: one already exists (422).
pub(super) async fn create(f: &Forge, p: &Proposal<'_>) -> Result<Option<Open>, ForgeError> {
    let what = "opening the pull request";
    let body = json!({"title": p.title, "head": p.branch, "base": p.base, "body": p.body});
    let a = f
        .call(
            Method::POST,
            &format!("{}/pulls", repo(f)),
            Some(&body),
            what,
        )
        .await?;
    if f.already_exists(&a) {
        return Ok(None);
    }
    let pr = match a.status.as_u16() {
        201 => pull_request(&a.body, &KEYS).ok_or_else(|| f.unexpected(what, &a))?,
        _ => return Err(f.unexpected(what, &a)),
    };
    if !f.labels.is_empty() {
        let url = format!("{}/issues/{}/labels", repo(f), pr.pr.number);
        let body = json!({"labels": f.labels});
        f.extra(Method::POST, &url, &body, "adding labels", pr.pr.number)
            .await;
    }
    f.request_reviewers(&repo(f), pr.pr.number).await;
    Ok(Some(pr))
}

pub(super) async fn update(
    f: &Forge,
    pr: &PullRequest,
    p: &Proposal<'_>,
) -> Result<Open, ForgeError> {
    let what = "updating the pull request";
    let url = format!("{}/pulls/{}", repo(f), pr.number);
    let body = json!({"title": p.title, "body": p.body});
    let a = f.call(Method::PATCH, &url, Some(&body), what).await?;
    if a.status.as_u16() != 200 {
        return Err(f.unexpected(what, &a));
    }
    pull_request(&a.body, &KEYS).ok_or_else(|| f.unexpected(what, &a))
}
