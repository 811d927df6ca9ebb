//! Gitea and Forgejo REST v1: pulls (labels by id, looked up by name), requested
//! reviewers.

use reqwest::Method;
use serde_json::{Value, json};

use super::{Forge, ForgeError, Keys, Open, Proposal, PullRequest, pull_request};

const PAGE: usize = 50;
/// Pages of open pull requests searched for the branch (PAGE each).
const MAX_PAGES: usize = 20;

const KEYS: Keys = Keys {
    number: "number",
    url: "html_url",
    head: "/head/sha",
    body: "body",
};

fn repo(f: &Forge) -> String {
    format!("{}/repos/{}", f.api, f.repository)
}

pub(super) async fn find_open(
    f: &Forge,
    branch: &str,
    base: &str,
) -> Result<Option<Open>, ForgeError> {
    let what = "listing open pull requests";
    for page in 1..=MAX_PAGES {
        let url = format!("{}/pulls?state=open&limit={PAGE}&page={page}", repo(f));
        let a = f.call(Method::GET, &url, None, what).await?;
        let list = a.body.as_array().ok_or_else(|| f.unexpected(what, &a))?;
        let found = list
            .iter()
            .filter(|p| {
                p.pointer("/head/ref").and_then(Value::as_str) == Some(branch)
                    && p.pointer("/base/ref").and_then(Value::as_str) == Some(base)
            })
            .find_map(|p| pull_request(p, &KEYS));
        if found.is_some() || list.len() < PAGE {
            return Ok(found);
        }
    }
    Ok(None)
}

/// The ids of the configured labels; a name the repository lacks is an error.
async fn label_ids(f: &Forge) -> Result<Vec<u64>, ForgeError> {
    let what = "listing labels";
    let a = f
        .call(
            Method::GET,
            &format!("{}/labels?limit=50", repo(f)),
            None,
            what,
        )
        .await?;
    let list = a.body.as_array().ok_or_else(|| f.unexpected(what, &a))?;
    f.labels
        .iter()
        .map(|name| {
            list.iter()
                .find(|l| l.get("name").and_then(Value::as_str) == Some(name))
                .and_then(|l| l.get("id")?.as_u64())
                .ok_or_else(|| {
                    f.other(
                        what,
                        format!("the repository has no label {name:?}: create it, or remove it from repo.forge.labels"),
                    )
                })
        })
        .collect()
}

/// None: one already exists (409).
pub(super) async fn create(f: &Forge, p: &Proposal<'_>) -> Result<Option<Open>, ForgeError> {
    let what = "opening the pull request";
    let mut body = json!({"head": p.branch, "base": p.base, "title": p.title, "body": p.body});
    if !f.labels.is_empty() {
        body["labels"] = json!(label_ids(f).await?);
    }
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
    if a.status.as_u16() != 201 && a.status.as_u16() != 200 {
        return Err(f.unexpected(what, &a));
    }
    pull_request(&a.body, &KEYS).ok_or_else(|| f.unexpected(what, &a))
}
