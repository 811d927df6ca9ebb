//! An emulated forge (GitHub, GitLab or Gitea) for review-mode tests.
//!
//! It answers the documented REST calls for pull (merge) requests the way the real API
//! does (paths, status codes, JSON shapes, error bodies) and refuses what the real one
//! refuses: a wrong token (401), another repository (404), a missing or mistyped body
//! field (422), a head branch that does not exist on the git remote (422), a second
//! open pull request for the same branch (GitHub 422, GitLab and Gitea 409). Faults
//! (any status with headers and body, or a delay) can be queued for the next request
//! with a given method. Every request is recorded.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use serde_json::{Value, json};

use pulls::with_pull;

mod gitea;
mod github;
mod gitlab;
mod pulls;

pub const TOKEN: &str = "sk-forge-token-3f9a";
pub const OWNER: &str = "org";
pub const REPO: &str = "fleet";
pub const GITLAB_PROJECT_ID: u64 = 17;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Github,
    Gitlab,
    Gitea,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Github => "github",
            Kind::Gitlab => "gitlab",
            Kind::Gitea => "gitea",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Pull {
    pub number: u64,
    pub head: String,
    pub base: String,
    pub title: String,
    pub body: String,
    /// open, closed or merged
    pub state: String,
    pub created_at: String,
    pub labels: Vec<String>,
    pub reviewers: Vec<Value>,
    /// The head commit the forge shows instead of the branch's (a lagging forge).
    pub shown_head: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Value,
}

pub enum Fault {
    /// Answer with this instead.
    Status(u16, Vec<(&'static str, String)>, Value),
    /// Hold the answer this long first.
    Delay(Duration),
    /// List no pull requests (a create racing another client).
    HideList,
    /// Answer with this status and body, only for a path ending with the given suffix.
    StatusAt(&'static str, u16, Value),
}

#[derive(Default)]
struct Inner {
    pulls: Vec<Pull>,
    seen: Vec<Seen>,
    faults: VecDeque<(Method, Fault)>,
}

#[derive(Clone)]
struct Shared {
    kind: Kind,
    remote: PathBuf,
    inner: Arc<Mutex<Inner>>,
}

pub struct ForgeSim {
    pub kind: Kind,
    pub addr: SocketAddr,
    shared: Shared,
    rt: Option<tokio::runtime::Runtime>,
}

impl ForgeSim {
    /// A forge of `kind` for the bare git `remote`.
    pub fn start(kind: Kind, remote: PathBuf) -> ForgeSim {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let shared = Shared {
            kind,
            remote,
            inner: Arc::default(),
        };
        // Bound here, served there: start may be called from inside another runtime.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(handle).with_state(shared.clone());
        rt.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await
        });
        ForgeSim {
            kind,
            addr,
            shared,
            rt: Some(rt),
        }
    }

    /// What `repo.forge.url` is set to.
    pub fn url(&self) -> String {
        match self.kind {
            Kind::Github => format!("http://{}/", self.addr),
            _ => format!("http://{}", self.addr),
        }
    }

    /// `repo.forge.repository`.
    pub fn repository(&self) -> String {
        match self.kind {
            Kind::Gitlab => format!("{OWNER}/{REPO}"),
            _ => format!("{OWNER}/{REPO}"),
        }
    }

    /// The lines under `repo:` (review mode) that point spokekeeper at this forge, signing
    /// with the key at `signing_key` and reading the token from `token_file`.
    pub fn repo_yaml(&self, signing_key: &Path, token_file: &Path) -> String {
        format!(
            "  mode: pull-request\n  signing_key: {}\n  forge:\n    kind: {}\n    url: {}\n    repository: {}\n    token_file: {}\n",
            signing_key.display(),
            self.kind.name(),
            self.url(),
            self.repository(),
            token_file.display()
        )
    }

    pub fn pulls(&self) -> Vec<Pull> {
        self.shared.inner.lock().unwrap().pulls.clone()
    }

    pub fn open_pulls(&self) -> Vec<Pull> {
        self.pulls()
            .into_iter()
            .filter(|p| p.state == "open")
            .collect()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.inner.lock().unwrap().seen.clone()
    }

    pub fn count(&self, method: &str) -> usize {
        self.seen().iter().filter(|s| s.method == method).count()
    }

    /// Queues a fault for the next request with `method`.
    pub fn fault(&self, method: Method, fault: Fault) {
        self.shared
            .inner
            .lock()
            .unwrap()
            .faults
            .push_back((method, fault));
    }

    /// The forge's side of a merge: the pull request of `head` is merged.
    pub fn mark_merged(&self, head: &str) {
        for p in &mut self.shared.inner.lock().unwrap().pulls {
            if p.head == head && p.state == "open" {
                p.state = "merged".into();
            }
        }
    }

    /// Makes pull request `number` show `sha` as its head commit, whatever the branch holds.
    pub fn show_head(&self, number: u64, sha: &str) {
        with_pull(&self.shared, number, |p| p.shown_head = Some(sha.into()))
            .expect("the pull request");
    }

    /// Makes pull request `number` look opened `age` ago.
    pub fn backdate(&self, number: u64, age: Duration) {
        let created = rfc3339(time::OffsetDateTime::now_utc() - age);
        with_pull(&self.shared, number, |p| p.created_at = created).expect("the pull request");
    }

    /// Opens a pull request as if an earlier client had, created `age` ago.
    pub fn insert_pull(&self, head: &str, base: &str, age: Duration) -> u64 {
        let mut p = pulls::new_pull(&self.shared, head, base, "older", "");
        p.created_at = rfc3339(time::OffsetDateTime::now_utc() - age);
        let number = p.number;
        self.shared.inner.lock().unwrap().pulls.push(p);
        number
    }
}

impl Drop for ForgeSim {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.replace_nanosecond(0)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

fn answer(status: u16, headers: &[(&str, String)], body: &Value) -> Response {
    let mut b = Response::builder()
        .status(status)
        .header("content-type", "application/json; charset=utf-8");
    for (k, v) in headers {
        b = b.header(*k, v);
    }
    b.body(Body::from(body.to_string())).unwrap()
}

async fn handle(State(s): State<Shared>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let headers = req.headers().clone();
    let bytes = to_bytes(req.into_body(), 1 << 20).await.unwrap_or_default();
    let body: Value = if bytes.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(_) => return answer(400, &[], &json!({"message": "Problems parsing JSON"})),
        }
    };
    let fault = {
        let mut inner = s.inner.lock().unwrap();
        inner.seen.push(Seen {
            method: method.to_string(),
            path: path.clone(),
            query: query.clone(),
            body: body.clone(),
        });
        let at = inner.faults.iter().position(|(m, f)| {
            *m == method
                && match f {
                    Fault::StatusAt(suffix, ..) => path.ends_with(suffix),
                    _ => true,
                }
        });
        at.and_then(|i| inner.faults.remove(i)).map(|(_, f)| f)
    };
    let mut hide = false;
    match fault {
        Some(Fault::Status(code, h, b)) => return answer(code, &h, &b),
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
        Some(Fault::HideList) => hide = true,
        Some(Fault::StatusAt(_, code, b)) => return answer(code, &[], &b),
        None => {}
    }
    if let Some(r) = check_auth(s.kind, &headers) {
        return r;
    }
    let call = Call {
        method: &method,
        path: &path,
        query: pulls::parse_query(&query),
        body: &body,
        hide,
    };
    let (status, value) = match s.kind {
        Kind::Github => github::github(&s, &call),
        Kind::Gitlab => gitlab::gitlab(&s, &call),
        Kind::Gitea => gitea::gitea(&s, &call),
    };
    answer(status, &[], &value)
}

/// A request past the faults and the token check, as a forge's routes read it.
struct Call<'a> {
    method: &'a Method,
    path: &'a str,
    query: Vec<(String, String)>,
    body: &'a Value,
    /// A [`Fault::HideList`] hides every pull request from a list.
    hide: bool,
}

/// The real APIs' answers to a missing or wrong token.
fn check_auth(kind: Kind, h: &HeaderMap) -> Option<Response> {
    let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
    let ok = match kind {
        Kind::Github => {
            if get("user-agent").is_empty() {
                return Some(answer(
                    403,
                    &[],
                    &json!({"message": "Request forbidden by administrative rules. Please make sure your request has a User-Agent header"}),
                ));
            }
            assert_eq!(get("accept"), "application/vnd.github+json");
            assert_eq!(get("x-github-api-version"), "2022-11-28");
            let a = get("authorization");
            a == format!("Bearer {TOKEN}") || a == format!("token {TOKEN}")
        }
        Kind::Gitlab => {
            get("private-token") == TOKEN || get("authorization") == format!("Bearer {TOKEN}")
        }
        Kind::Gitea => get("authorization") == format!("token {TOKEN}"),
    };
    if ok {
        return None;
    }
    let body = match kind {
        Kind::Github => {
            json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"})
        }
        Kind::Gitlab => json!({"message": "401 Unauthorized"}),
        Kind::Gitea => {
            json!({"message": "user does not exist [uid: 0, name: ]", "url": "http://gitea/api/swagger"})
        }
    };
    Some(answer(401, &[], &body))
}
