//! Find, open and update a pull request over the three REST dialects: one path, and
//! what differs per forge in its [`Dialect`].

use reqwest::Method;
use serde_json::{Value, json};

use super::{Forge, ForgeError, Open, Proposal, PullRequest, encode, pull_request};
use crate::config::ForgeKind;

/// Gitea lists every open pull request: PAGE at a time, at most MAX_PAGES searched.
const PAGE: usize = 50;
const MAX_PAGES: usize = 20;

/// What a forge calls things and where it puts them.
pub(super) struct Dialect {
    pub(super) name: &'static str,
    /// Appended to repo.forge.url unless it ends with it.
    pub(super) api_root: &'static str,
    /// "pull request" or "merge request", in the messages.
    noun: &'static str,
    /// A pull request's fields: the number (or iid), the URL, the head commit (a JSON
    /// pointer) and the text.
    pub(super) number: &'static str,
    pub(super) url: &'static str,
    pub(super) head: &'static str,
    pub(super) body: &'static str,
    /// A listed pull request's head branch and, where checked, its base (JSON pointers).
    head_ref: &'static str,
    base_ref: Option<&'static str>,
    /// The branch fields of a create.
    source: &'static str,
    target: &'static str,
    update: Method,
}

const GITHUB: Dialect = Dialect {
    name: "GitHub",
    api_root: "",
    noun: "pull request",
    number: "number",
    url: "html_url",
    head: "/head/sha",
    body: "body",
    head_ref: "/head/ref",
    base_ref: None,
    source: "head",
    target: "base",
    update: Method::PATCH,
};

const GITLAB: Dialect = Dialect {
    name: "GitLab",
    api_root: "/api/v4",
    noun: "merge request",
    number: "iid",
    url: "web_url",
    head: "/sha",
    body: "description",
    head_ref: "/source_branch",
    base_ref: None,
    source: "source_branch",
    target: "target_branch",
    update: Method::PUT,
};

const GITEA: Dialect = Dialect {
    name: "Gitea",
    api_root: "/api/v1",
    base_ref: Some("/base/ref"),
    ..GITHUB
};

pub(super) fn dialect(kind: ForgeKind) -> &'static Dialect {
    match kind {
        ForgeKind::Github => &GITHUB,
        ForgeKind::Gitlab => &GITLAB,
        ForgeKind::Gitea => &GITEA,
    }
}

impl Forge {
    /// GitHub and Gitea: .../pulls; GitLab: .../merge_requests.
    fn pulls(&self) -> String {
        match self.kind {
            ForgeKind::Gitlab => format!(
                "{}/projects/{}/merge_requests",
                self.api,
                encode(&self.repository)
            ),
            ForgeKind::Github | ForgeKind::Gitea => {
                format!("{}/repos/{}/pulls", self.api, self.repository)
            }
        }
    }

    /// The open pull request from `branch` into `base`, if any.
    pub(crate) async fn find_open(
        &self,
        branch: &str,
        base: &str,
    ) -> Result<Option<Open>, ForgeError> {
        let d = self.dialect;
        let what = format!("listing open {}s", d.noun);
        let pulls = self.pulls();
        let pages = if self.kind == ForgeKind::Gitea {
            MAX_PAGES
        } else {
            1
        };
        for page in 1..=pages {
            let url = match self.kind {
                ForgeKind::Github => {
                    let owner = self.repository.split('/').next().unwrap_or_default();
                    let head = encode(&format!("{owner}:{branch}"));
                    format!("{pulls}?state=open&head={head}&base={}", encode(base))
                }
                ForgeKind::Gitlab => format!(
                    "{pulls}?state=opened&source_branch={}&target_branch={}",
                    encode(branch),
                    encode(base)
                ),
                ForgeKind::Gitea => format!("{pulls}?state=open&limit={PAGE}&page={page}"),
            };
            let a = self.call(Method::GET, &url, None, &what).await?;
            let list = a
                .body
                .as_array()
                .ok_or_else(|| self.unexpected(&what, &a))?;
            let found = list
                .iter()
                .filter(|p| {
                    let on =
                        |k: &str, name: &str| p.pointer(k).and_then(Value::as_str) == Some(name);
                    on(d.head_ref, branch) && d.base_ref.is_none_or(|k| on(k, base))
                })
                .find_map(|p| pull_request(p, d));
            if found.is_some() || list.len() < PAGE {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Opens a pull request with labels and reviewers; None: one already exists (GitHub
    /// 422, GitLab and Gitea 409).
    pub(super) async fn create(&self, p: &Proposal<'_>) -> Result<Option<Open>, ForgeError> {
        let d = self.dialect;
        let what = format!("opening the {}", d.noun);
        let mut body =
            json!({d.source: p.branch, d.target: p.base, "title": p.title, d.body: p.body});
        match self.kind {
            ForgeKind::Gitlab => {
                if !self.labels.is_empty() {
                    body["labels"] = json!(self.labels.join(","));
                }
                if !self.reviewers.is_empty() {
                    // Validated as numbers in the configuration.
                    let ids: Vec<u64> = self
                        .reviewers
                        .iter()
                        .filter_map(|r| r.parse().ok())
                        .collect();
                    body["reviewer_ids"] = json!(ids);
                }
            }
            ForgeKind::Gitea if !self.labels.is_empty() => {
                body["labels"] = json!(self.label_ids().await?);
            }
            ForgeKind::Github | ForgeKind::Gitea => {}
        }
        let a = self
            .call(Method::POST, &self.pulls(), Some(&body), &what)
            .await?;
        if self.already_exists(&a) {
            return Ok(None);
        }
        let pr = match a.status.as_u16() {
            201 => pull_request(&a.body, d).ok_or_else(|| self.unexpected(&what, &a))?,
            _ => return Err(self.unexpected(&what, &a)),
        };
        let number = pr.pr.number;
        if self.kind == ForgeKind::Github && !self.labels.is_empty() {
            let url = format!(
                "{}/repos/{}/issues/{number}/labels",
                self.api, self.repository
            );
            let body = json!({"labels": self.labels});
            self.extra(Method::POST, &url, &body, "adding labels", number)
                .await;
        }
        if self.kind != ForgeKind::Gitlab && !self.reviewers.is_empty() {
            let url = format!("{}/{number}/requested_reviewers", self.pulls());
            let body = json!({"reviewers": self.reviewers});
            self.extra(Method::POST, &url, &body, "requesting reviewers", number)
                .await;
        }
        Ok(Some(pr))
    }

    /// Gitea: the ids of the configured labels; a name the repository lacks is an error.
    async fn label_ids(&self) -> Result<Vec<u64>, ForgeError> {
        let what = "listing labels";
        let url = format!("{}/repos/{}/labels?limit=50", self.api, self.repository);
        let a = self.call(Method::GET, &url, None, what).await?;
        let list = a.body.as_array().ok_or_else(|| self.unexpected(what, &a))?;
        self.labels
            .iter()
            .map(|name| {
                list.iter()
                    .find(|l| l.get("name").and_then(Value::as_str) == Some(name))
                    .and_then(|l| l.get("id")?.as_u64())
                    .ok_or_else(|| {
                        self.other(
                            what,
                            format!("the repository has no label {name:?}: create it, or remove it from repo.forge.labels"),
                        )
                    })
            })
            .collect()
    }

    /// Sets the title and text of `pr`.
    pub(super) async fn update(
        &self,
        pr: &PullRequest,
        p: &Proposal<'_>,
    ) -> Result<Open, ForgeError> {
        let d = self.dialect;
        let what = format!("updating the {}", d.noun);
        let url = format!("{}/{}", self.pulls(), pr.number);
        let body = json!({"title": p.title, d.body: p.body});
        let a = self
            .call(d.update.clone(), &url, Some(&body), &what)
            .await?;
        // Gitea answers an edit with 201.
        let gitea_created = self.kind == ForgeKind::Gitea && a.status.as_u16() == 201;
        if a.status.as_u16() != 200 && !gitea_created {
            return Err(self.unexpected(&what, &a));
        }
        pull_request(&a.body, d).ok_or_else(|| self.unexpected(&what, &a))
    }
}
