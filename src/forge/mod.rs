//! Pull requests on the forge that hosts the fleet repo (`repo.mode: pull-request`):
//! GitHub, GitLab (merge requests) and Gitea/Forgejo, over their REST APIs.
//!
//! One call, [`Forge::open_or_update`]: find the open pull request of a branch, update
//! its title and body, or open one. A create that races another ("already exists":
//! GitHub 422, GitLab and Gitea 409) is looked up and updated instead. Rate limits are
//! waited out when the wait is short (bounded by [`Forge::max_wait`]), else reported.
//! The token is read from a file or the environment when the client is built, kept in a
//! secrecy wrapper, and cut out of any error text.

mod pulls;

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use time::OffsetDateTime;

use crate::config::{ForgeConfig, ForgeKind, TokenSource};

/// An open pull (merge) request.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PullRequest {
    /// GitHub and Gitea: the number; GitLab: the iid (`!N`).
    pub number: u64,
    pub url: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// An open pull request as the forge lists it: the commit its head branch shows and
/// its text, so a caller can tell whether it is still what spokekeeper pushed and wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Open {
    pub(crate) pr: PullRequest,
    /// The head commit (GitHub and Gitea `head.sha`, GitLab `sha`); None if not given.
    pub head: Option<String>,
    pub title: String,
    pub body: String,
}

/// What to propose.
pub(crate) struct Proposal<'a> {
    pub branch: &'a str,
    pub base: &'a str,
    pub title: &'a str,
    pub body: &'a str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    Opened,
    Updated,
}

#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    #[error("{0}")]
    Token(String),
    #[error(
        "{kind} answered 401 Unauthorized to {what}: the token in {source_} is wrong or expired ({detail})"
    )]
    Unauthorized {
        kind: &'static str,
        what: String,
        source_: String,
        detail: String,
    },
    #[error(
        "{kind} answered 403 Forbidden to {what}: the token lacks permission (pull requests: write) ({detail})"
    )]
    Forbidden {
        kind: &'static str,
        what: String,
        detail: String,
    },
    #[error(
        "{kind} answered 404 Not Found to {what}: check repo.forge.repository ({repository}) and repo.forge.url ({detail})"
    )]
    NotFound {
        kind: &'static str,
        what: String,
        repository: String,
        detail: String,
    },
    #[error("{kind} rate limit hit on {what}: retry after {}s (longer than the {}s spokekeeper waits); the next tick retries", retry.as_secs(), max.as_secs())]
    RateLimited {
        kind: &'static str,
        what: String,
        retry: Duration,
        max: Duration,
    },
    #[error("{kind} did not answer {what} within {}s", secs)]
    Timeout {
        kind: &'static str,
        what: String,
        secs: u64,
    },
    #[error("{kind}: {what} failed: {detail}")]
    Other {
        kind: &'static str,
        what: String,
        detail: String,
    },
}

/// A forge client for one tick.
pub(crate) struct Forge {
    kind: ForgeKind,
    dialect: &'static pulls::Dialect,
    /// The API root: GitHub as configured, GitLab .../api/v4, Gitea .../api/v1.
    api: String,
    repository: String,
    token: SecretString,
    token_source: String,
    labels: Vec<String>,
    reviewers: Vec<String>,
    http: reqwest::Client,
    /// Longest rate-limit wait honoured before reporting.
    pub(crate) max_wait: Duration,
    timeout: Duration,
    /// Set by a timeout, rate limit or refused token: no more calls this tick.
    down: std::sync::Mutex<Option<String>>,
}

impl std::fmt::Debug for Forge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forge")
            .field("kind", &self.kind)
            .field("api", &self.api)
            .field("repository", &self.repository)
            .field("token", &"[redacted]")
            .finish()
    }
}

/// A response: status and JSON body (Null when empty or not JSON).
struct Answer {
    status: StatusCode,
    body: Value,
}

impl Forge {
    /// Reads the token and builds the client.
    pub(crate) fn new(cfg: &ForgeConfig) -> Result<Forge, ForgeError> {
        let (timeout, max_wait) = (cfg.timeout, cfg.rate_limit_wait);
        let (token, token_source) = read_token(&cfg.token)?;
        let dialect = pulls::dialect(cfg.kind);
        let base = cfg.url.as_str().trim_end_matches('/');
        let api = if base.ends_with(dialect.api_root) {
            base.to_string()
        } else {
            format!("{base}{}", dialect.api_root)
        };
        // reqwest has no crypto provider of its own: it takes the process default.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("spokekeeper/", env!("CARGO_PKG_VERSION")))
            // A redirect would carry the token (GitLab's PRIVATE-TOKEN is not stripped)
            // to wherever it points: answered as an error instead.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ForgeError::Token(format!("cannot build the HTTP client: {e}")))?;
        Ok(Forge {
            kind: cfg.kind,
            dialect,
            api,
            repository: cfg.repository.clone(),
            token,
            token_source,
            labels: cfg.labels.clone(),
            reviewers: cfg.reviewers.clone(),
            http,
            max_wait,
            timeout,
            down: std::sync::Mutex::new(None),
        })
    }

    /// Updates `open` (the branch's open pull request from [`Forge::find_open`]), or
    /// opens one (with labels and reviewers).
    pub(crate) async fn open_or_update(
        &self,
        p: &Proposal<'_>,
        open: Option<Open>,
    ) -> Result<(Open, Action), ForgeError> {
        if let Some(open) = open {
            return Ok((self.update(&open.pr, p).await?, Action::Updated));
        }
        match self.create(p).await? {
            Some(pr) => Ok((pr, Action::Opened)),
            // Opened by someone else between our look-up and our create.
            None => match self.find_open(p.branch, p.base).await? {
                Some(open) => Ok((self.update(&open.pr, p).await?, Action::Updated)),
                None => Err(self.other(
                    "opening the pull request",
                    "the forge says one already exists but lists none open".into(),
                )),
            },
        }
    }

    /// Sends one request; waits out a short rate limit once.
    /// One API call. After a timeout, a rate limit or a refused token the forge is not
    /// asked again in this tick: the remaining spokes fail at once, each keeping its
    /// pushed branch, instead of each waiting out the same problem.
    async fn call(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<Answer, ForgeError> {
        let earlier = self.down.lock().ok().and_then(|d| d.clone());
        if let Some(earlier) = earlier {
            return Err(self.other(
                what,
                format!("not tried: earlier in this tick {earlier}; the next tick retries"),
            ));
        }
        let result = self.call_once(method, url, body, what).await;
        if let Err(
            e @ (ForgeError::Timeout { .. }
            | ForgeError::RateLimited { .. }
            | ForgeError::Unauthorized { .. }),
        ) = &result
            && let Ok(mut down) = self.down.lock()
        {
            *down = Some(e.to_string());
        }
        result
    }

    async fn call_once(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<Answer, ForgeError> {
        let mut waited = false;
        loop {
            let mut req = self.http.request(method.clone(), url);
            req = match self.kind {
                ForgeKind::Github => req
                    .bearer_auth(self.token.expose_secret())
                    .header("Accept", "application/vnd.github+json")
                    .header("X-GitHub-Api-Version", "2022-11-28"),
                ForgeKind::Gitlab => req.header("PRIVATE-TOKEN", self.token.expose_secret()),
                ForgeKind::Gitea => req
                    .header(
                        "Authorization",
                        format!("token {}", self.token.expose_secret()),
                    )
                    .header("Accept", "application/json"),
            };
            if let Some(b) = body {
                req = req.json(b);
            }
            let resp = req.send().await.map_err(|e| self.transport(what, e))?;
            let status = resp.status();
            if status.is_redirection() {
                let to = resp
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("?")
                    .split('?')
                    .next()
                    .unwrap_or("?")
                    .to_string();
                return Err(self.other(
                    what,
                    format!(
                        "HTTP {status}, a redirect to {to}: spokekeeper does not follow redirects with the token; set repo.forge.url to the API's own address"
                    ),
                ));
            }
            let headers = resp.headers().clone();
            let text = resp.text().await.map_err(|e| self.transport(what, e))?;
            let body = serde_json::from_str(&text).unwrap_or(Value::Null);
            if let Some(retry) = self.rate_limited(status, &headers, &body) {
                if !waited && retry <= self.max_wait {
                    tracing::info!(
                        forge = self.dialect.name,
                        wait_s = retry.as_secs(),
                        "rate limited; waiting"
                    );
                    tokio::time::sleep(retry).await;
                    waited = true;
                    continue;
                }
                return Err(ForgeError::RateLimited {
                    kind: self.dialect.name,
                    what: what.into(),
                    retry,
                    max: self.max_wait,
                });
            }
            let answer = Answer { status, body };
            return match status.as_u16() {
                200..=299 | 409 | 422 => Ok(answer),
                401 => Err(ForgeError::Unauthorized {
                    kind: self.dialect.name,
                    what: what.into(),
                    source_: self.token_source.clone(),
                    detail: self.detail(&answer.body, &text),
                }),
                403 => Err(ForgeError::Forbidden {
                    kind: self.dialect.name,
                    what: what.into(),
                    detail: self.detail(&answer.body, &text),
                }),
                404 => Err(ForgeError::NotFound {
                    kind: self.dialect.name,
                    what: what.into(),
                    repository: self.repository.clone(),
                    detail: self.detail(&answer.body, &text),
                }),
                _ => Err(self.other(
                    what,
                    format!("HTTP {status}: {}", self.detail(&answer.body, &text)),
                )),
            };
        }
    }

    /// How long to wait when this answer is a rate limit: 429, or GitHub's 403 with
    /// Retry-After or `x-ratelimit-remaining: 0` (then until `x-ratelimit-reset`).
    fn rate_limited(&self, status: StatusCode, h: &HeaderMap, body: &Value) -> Option<Duration> {
        let num = |k: &str| {
            h.get(k)
                .and_then(|v: &HeaderValue| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let retry_after = num("retry-after").map(Duration::from_secs);
        let exhausted = num("x-ratelimit-remaining") == Some(0);
        let until_reset = num("x-ratelimit-reset").map(|reset| {
            let now = OffsetDateTime::now_utc().unix_timestamp().max(0) as u64;
            Duration::from_secs(reset.saturating_sub(now).max(1))
        });
        let says_rate = body
            .get("message")
            .and_then(Value::as_str)
            .is_some_and(|m| m.to_ascii_lowercase().contains("rate limit"));
        match status.as_u16() {
            429 => Some(
                retry_after
                    .or(until_reset)
                    .unwrap_or(Duration::from_secs(60)),
            ),
            403 if retry_after.is_some() => retry_after,
            403 if exhausted || says_rate => Some(until_reset.unwrap_or(Duration::from_secs(60))),
            _ => None,
        }
    }

    fn transport(&self, what: &str, e: reqwest::Error) -> ForgeError {
        if e.is_timeout() {
            ForgeError::Timeout {
                kind: self.dialect.name,
                what: what.into(),
                secs: self.timeout.as_secs().max(1),
            }
        } else {
            self.other(what, self.redact(&without_url(&e)))
        }
    }

    fn other(&self, what: &str, detail: String) -> ForgeError {
        ForgeError::Other {
            kind: self.dialect.name,
            what: what.into(),
            detail,
        }
    }

    /// The forge's own message from an error body, short and without the token.
    fn detail(&self, body: &Value, text: &str) -> String {
        let msg = match body.get("message") {
            Some(Value::String(s)) => s.clone(),
            Some(v @ (Value::Array(_) | Value::Object(_))) => v.to_string(),
            _ => text.to_string(),
        };
        let mut msg = self.redact(msg.trim());
        if let Some(errors) = body.get("errors").filter(|e| !e.is_null()) {
            msg.push_str(&format!(" {}", self.redact(&errors.to_string())));
        }
        if msg.chars().count() > 300 {
            msg = msg.chars().take(300).collect::<String>() + "...";
        }
        msg
    }

    fn redact(&self, s: &str) -> String {
        let t = self.token.expose_secret();
        if t.is_empty() {
            s.to_string()
        } else {
            s.replace(t, "[redacted]")
        }
    }

    /// Whether a 409/422 answer means "a pull request for this branch already exists".
    fn already_exists(&self, a: &Answer) -> bool {
        let text = a.body.to_string().to_ascii_lowercase();
        matches!(a.status.as_u16(), 409 | 422) && text.contains("already exist")
    }

    /// A call after the pull request exists (labels, reviewers): a failure is logged, not
    /// returned, so the pull request is still reported as open (and not opened twice).
    async fn extra(&self, method: Method, url: &str, body: &Value, what: &str, number: u64) {
        let err = match self.call(method, url, Some(body), what).await {
            Ok(a) if a.status.is_success() => return,
            Ok(a) => self.unexpected(what, &a),
            Err(e) => e,
        };
        tracing::warn!(number, error = %err, "the pull request is open, but {what} failed");
    }

    fn unexpected(&self, what: &str, a: &Answer) -> ForgeError {
        self.other(
            what,
            format!("HTTP {}: {}", a.status, self.detail(&a.body, "")),
        )
    }
}

/// reqwest's error text without the URL (it may carry query parameters).
fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(u) = e.url() {
        s = s.replace(u.as_str(), "<forge>");
    }
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(&format!(": {inner}"));
        src = inner.source();
    }
    s
}

fn read_token(src: &TokenSource) -> Result<(SecretString, String), ForgeError> {
    let (text, name) = match src {
        TokenSource::File(p) => (
            std::fs::read_to_string(p).map_err(|e| {
                ForgeError::Token(format!(
                    "repo.forge.token_file {}: cannot read it: {e} (write the forge token there, mode 600)",
                    p.display()
                ))
            })?,
            format!("repo.forge.token_file {}", p.display()),
        ),
        TokenSource::Env(v) => (
            std::env::var(v).map_err(|_| {
                ForgeError::Token(format!(
                    "repo.forge.token_env {v}: the variable is not set (export {v}=<forge token>)"
                ))
            })?,
            format!("repo.forge.token_env {v}"),
        ),
    };
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err(ForgeError::Token(format!(
            "{name}: the token is empty or has spaces inside: it must hold the token alone"
        )));
    }
    Ok((SecretString::from(token.to_string()), name))
}

/// A pull request from a JSON object, its fields named by the forge's [`pulls::Dialect`]: the
/// number (or iid), the URL, created_at, the head commit, the title and the body.
fn pull_request(v: &Value, keys: &pulls::Dialect) -> Option<Open> {
    let created = v.get("created_at")?.as_str()?;
    let text = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Some(Open {
        pr: PullRequest {
            number: v.get(keys.number)?.as_u64()?,
            url: v.get(keys.url)?.as_str()?.to_string(),
            created_at: OffsetDateTime::parse(
                created,
                &time::format_description::well_known::Rfc3339,
            )
            .ok()?,
        },
        head: v
            .pointer(keys.head)
            .and_then(Value::as_str)
            .map(str::to_string),
        title: text("title"),
        body: text(keys.body),
    })
}

/// Percent-encodes one path segment (GitLab's group%2Fproject, branch names in queries).
fn encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[cfg(test)]
mod tests;
