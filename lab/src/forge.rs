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
        let mut inner = self.shared.inner.lock().unwrap();
        let number = inner.pulls.len() as u64 + 1;
        let created = time::OffsetDateTime::now_utc() - age;
        inner.pulls.push(Pull {
            number,
            head: head.into(),
            base: base.into(),
            title: "older".into(),
            body: String::new(),
            state: "open".into(),
            created_at: rfc3339(created),
            labels: vec![],
            reviewers: vec![],
            shown_head: None,
        });
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
    let q = parse_query(&query);
    let (status, value) = match s.kind {
        Kind::Github => github(&s, &method, &path, &q, &body, hide),
        Kind::Gitlab => gitlab(&s, &method, &path, &q, &body, hide),
        Kind::Gitea => gitea(&s, &method, &path, &q, &body, hide),
    };
    answer(status, &[], &value)
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

fn parse_query(q: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(q.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn param<'a>(q: &'a [(String, String)], k: &str) -> Option<&'a str> {
    q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

/// The commit `branch` points at on the git remote now; None when it is not there.
fn remote_branch(s: &Shared, branch: &str) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(&s.remote)
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("refs/heads/{branch}"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn branch_exists(s: &Shared, branch: &str) -> bool {
    remote_branch(s, branch).is_some()
}

/// The commit the head branch points at on the git remote now, as a forge shows it
/// (empty when the branch is gone).
fn head_sha(s: &Shared, p: &Pull) -> String {
    if let Some(sha) = &p.shown_head {
        return sha.clone();
    }
    remote_branch(s, &p.head).unwrap_or_default()
}

/// The string fields `names` of `body`, or which one is missing.
fn strings<'a>(body: &'a Value, names: &[&'static str]) -> Result<Vec<&'a str>, &'static str> {
    names
        .iter()
        .map(|n| body.get(*n).and_then(Value::as_str).ok_or(*n))
        .collect()
}

fn new_pull(s: &Shared, head: &str, base: &str, title: &str, body: &str) -> Pull {
    let inner = s.inner.lock().unwrap();
    Pull {
        number: inner.pulls.len() as u64 + 1,
        head: head.into(),
        base: base.into(),
        title: title.into(),
        body: body.into(),
        state: "open".into(),
        created_at: rfc3339(time::OffsetDateTime::now_utc()),
        labels: vec![],
        reviewers: vec![],
        shown_head: None,
    }
}

fn open_for(s: &Shared, head: &str, base: &str) -> Option<Pull> {
    s.inner
        .lock()
        .unwrap()
        .pulls
        .iter()
        .find(|p| p.head == head && p.base == base && p.state == "open")
        .cloned()
}

fn with_pull<T>(s: &Shared, number: u64, f: impl FnOnce(&mut Pull) -> T) -> Option<T> {
    s.inner
        .lock()
        .unwrap()
        .pulls
        .iter_mut()
        .find(|p| p.number == number)
        .map(f)
}

fn listed(
    s: &Shared,
    hide: bool,
    keep: impl Fn(&Pull) -> bool,
    show: impl Fn(&Pull) -> Value,
) -> Value {
    if hide {
        return json!([]);
    }
    Value::Array(
        s.inner
            .lock()
            .unwrap()
            .pulls
            .iter()
            .filter(|p| keep(p))
            .map(show)
            .collect(),
    )
}

// ---- GitHub: https://docs.github.com/en/rest/pulls/pulls

fn gh_pull(s: &Shared, p: &Pull) -> Value {
    let state = if p.state == "open" { "open" } else { "closed" };
    json!({
        "url": format!("https://api.github.com/repos/{OWNER}/{REPO}/pulls/{}", p.number),
        "id": 1000 + p.number,
        "number": p.number,
        "html_url": format!("https://github.com/{OWNER}/{REPO}/pull/{}", p.number),
        "state": state,
        "title": p.title,
        "body": p.body,
        "created_at": p.created_at,
        "merged_at": if p.state == "merged" { json!(p.created_at) } else { Value::Null },
        "head": {"ref": p.head, "label": format!("{OWNER}:{}", p.head), "sha": head_sha(s, p)},
        "base": {"ref": p.base, "label": format!("{OWNER}:{}", p.base)},
        "labels": p.labels.iter().map(|l| json!({"name": l})).collect::<Vec<_>>(),
        "requested_reviewers": p.reviewers.iter().map(|r| json!({"login": r})).collect::<Vec<_>>(),
    })
}

fn gh_invalid(field: &str, code: &str, message: Option<String>) -> (u16, Value) {
    let mut e = json!({"resource": "PullRequest", "field": field, "code": code});
    if let Some(m) = message {
        e = json!({"resource": "PullRequest", "code": "custom", "message": m});
    }
    (
        422,
        json!({"message": "Validation Failed", "errors": [e], "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request", "status": "422"}),
    )
}

fn github(
    s: &Shared,
    m: &Method,
    path: &str,
    q: &[(String, String)],
    body: &Value,
    hide: bool,
) -> (u16, Value) {
    let not_found = (
        404,
        json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"}),
    );
    let Some(rest) = path.strip_prefix(&format!("/repos/{OWNER}/{REPO}")) else {
        return not_found;
    };
    let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
    match (m.as_str(), parts.as_slice()) {
        ("GET", ["pulls"]) => {
            let state = param(q, "state").unwrap_or("open").to_string();
            let head = param(q, "head").map(str::to_string);
            let base = param(q, "base").map(str::to_string);
            let v = listed(
                s,
                hide,
                |p| {
                    let st = if p.state == "open" { "open" } else { "closed" };
                    (state == "all" || st == state)
                        && head
                            .as_ref()
                            .is_none_or(|h| *h == format!("{OWNER}:{}", p.head))
                        && base.as_ref().is_none_or(|b| *b == p.base)
                },
                |p| gh_pull(s, p),
            );
            (200, v)
        }
        ("POST", ["pulls"]) => {
            let [title, head, base] = match strings(body, &["title", "head", "base"]) {
                Ok(v) => [v[0], v[1], v[2]],
                Err(f) => return gh_invalid(f, "missing_field", None),
            };
            let text = body.get("body").and_then(Value::as_str).unwrap_or("");
            if !branch_exists(s, head) {
                return gh_invalid("head", "invalid", None);
            }
            if open_for(s, head, base).is_some() {
                return gh_invalid(
                    "",
                    "custom",
                    Some(format!("A pull request already exists for {OWNER}:{head}.")),
                );
            }
            let p = new_pull(s, head, base, title, text);
            s.inner.lock().unwrap().pulls.push(p.clone());
            (201, gh_pull(s, &p))
        }
        ("PATCH", ["pulls", n]) => {
            let Ok(n) = n.parse() else { return not_found };
            let (title, text) = (
                body.get("title").and_then(Value::as_str),
                body.get("body").and_then(Value::as_str),
            );
            with_pull(s, n, |p| {
                if let Some(t) = title {
                    p.title = t.into();
                }
                if let Some(b) = text {
                    p.body = b.into();
                }
                (200, gh_pull(s, p))
            })
            .unwrap_or(not_found)
        }
        ("POST", ["issues", n, "labels"]) => {
            let Ok(n) = n.parse() else { return not_found };
            let Some(labels) = body.get("labels").and_then(Value::as_array) else {
                return gh_invalid("labels", "missing_field", None);
            };
            let names: Vec<String> = labels
                .iter()
                .filter_map(|l| l.as_str().map(String::from))
                .collect();
            with_pull(s, n, |p| {
                p.labels.extend(names);
                (
                    200,
                    json!(
                        p.labels
                            .iter()
                            .map(|l| json!({"id": 1, "name": l, "color": "ededed"}))
                            .collect::<Vec<_>>()
                    ),
                )
            })
            .unwrap_or(not_found)
        }
        ("POST", ["pulls", n, "requested_reviewers"]) => {
            let Ok(n) = n.parse() else { return not_found };
            let Some(r) = body.get("reviewers").and_then(Value::as_array).cloned() else {
                return gh_invalid("reviewers", "missing_field", None);
            };
            with_pull(s, n, |p| {
                p.reviewers.extend(r);
                (201, gh_pull(s, p))
            })
            .unwrap_or(not_found)
        }
        _ => not_found,
    }
}

// ---- GitLab: https://docs.gitlab.com/api/merge_requests/

fn gl_mr(s: &Shared, p: &Pull) -> Value {
    let state = match p.state.as_str() {
        "open" => "opened",
        s => s,
    };
    json!({
        "id": 5000 + p.number,
        "iid": p.number,
        "project_id": GITLAB_PROJECT_ID,
        "title": p.title,
        "description": p.body,
        "state": state,
        "created_at": p.created_at,
        "source_branch": p.head,
        "sha": head_sha(s, p),
        "target_branch": p.base,
        "labels": p.labels,
        "reviewers": p.reviewers.iter().map(|r| json!({"id": r})).collect::<Vec<_>>(),
        "web_url": format!("https://gitlab.example.org/{OWNER}/{REPO}/-/merge_requests/{}", p.number),
    })
}

fn gitlab(
    s: &Shared,
    m: &Method,
    path: &str,
    q: &[(String, String)],
    body: &Value,
    hide: bool,
) -> (u16, Value) {
    let not_found = (404, json!({"message": "404 Project Not Found"}));
    let prefixes = [
        format!("/api/v4/projects/{OWNER}%2F{REPO}/merge_requests"),
        format!("/api/v4/projects/{GITLAB_PROJECT_ID}/merge_requests"),
    ];
    let Some(rest) = prefixes.iter().find_map(|p| path.strip_prefix(p.as_str())) else {
        return not_found;
    };
    match (m.as_str(), rest.trim_start_matches('/')) {
        ("GET", "") => {
            let state = param(q, "state").unwrap_or("all").to_string();
            let src = param(q, "source_branch").map(str::to_string);
            let dst = param(q, "target_branch").map(str::to_string);
            let v = listed(
                s,
                hide,
                |p| {
                    let st = if p.state == "open" {
                        "opened"
                    } else {
                        p.state.as_str()
                    };
                    (state == "all" || st == state)
                        && src.as_ref().is_none_or(|b| *b == p.head)
                        && dst.as_ref().is_none_or(|b| *b == p.base)
                },
                |p| gl_mr(s, p),
            );
            (200, v)
        }
        ("POST", "") => {
            let [src, dst, title] =
                match strings(body, &["source_branch", "target_branch", "title"]) {
                    Ok(v) => [v[0], v[1], v[2]],
                    Err(f) => return (400, json!({"error": format!("{f} is missing")})),
                };
            if body.get("labels").is_some_and(|l| !l.is_string()) {
                return (400, json!({"error": "labels is invalid"}));
            }
            if body
                .get("reviewer_ids")
                .is_some_and(|r| !r.as_array().is_some_and(|a| a.iter().all(Value::is_u64)))
            {
                return (400, json!({"error": "reviewer_ids is invalid"}));
            }
            if !branch_exists(s, src) {
                return (422, json!({"message": ["Source branch does not exist"]}));
            }
            if let Some(p) = open_for(s, src, dst) {
                return (
                    409,
                    json!({"message": [format!("Another open merge request already exists for this source branch: !{}", p.number)]}),
                );
            }
            let text = body
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("");
            let mut p = new_pull(s, src, dst, title, text);
            if let Some(l) = body.get("labels").and_then(Value::as_str) {
                p.labels = l.split(',').map(String::from).collect();
            }
            if let Some(r) = body.get("reviewer_ids").and_then(Value::as_array) {
                p.reviewers = r.clone();
            }
            s.inner.lock().unwrap().pulls.push(p.clone());
            (201, gl_mr(s, &p))
        }
        ("PUT", iid) => {
            let Ok(n) = iid.parse() else { return not_found };
            let (title, text) = (
                body.get("title").and_then(Value::as_str),
                body.get("description").and_then(Value::as_str),
            );
            with_pull(s, n, |p| {
                if let Some(t) = title {
                    p.title = t.into();
                }
                if let Some(b) = text {
                    p.body = b.into();
                }
                (200, gl_mr(s, p))
            })
            .unwrap_or((404, json!({"message": "404 Not found"})))
        }
        _ => not_found,
    }
}

// ---- Gitea/Forgejo: https://gitea.com/api/swagger

const GITEA_LABELS: [(u64, &str); 2] = [(3, "spokekeeper"), (4, "security")];

fn gt_pull(s: &Shared, p: &Pull) -> Value {
    let state = if p.state == "open" { "open" } else { "closed" };
    json!({
        "id": 2000 + p.number,
        "number": p.number,
        "html_url": format!("https://gitea.example.org/{OWNER}/{REPO}/pulls/{}", p.number),
        "state": state,
        "title": p.title,
        "body": p.body,
        "created_at": p.created_at,
        "merged": p.state == "merged",
        "head": {"ref": p.head, "label": p.head, "sha": head_sha(s, p)},
        "base": {"ref": p.base, "label": p.base},
        "labels": p.labels.iter().map(|l| json!({"name": l})).collect::<Vec<_>>(),
    })
}

fn gitea(
    s: &Shared,
    m: &Method,
    path: &str,
    q: &[(String, String)],
    body: &Value,
    hide: bool,
) -> (u16, Value) {
    let not_found = (
        404,
        json!({"errors": null, "message": "The target couldn't be found.", "url": "https://gitea.example.org/api/swagger"}),
    );
    let Some(rest) = path.strip_prefix(&format!("/api/v1/repos/{OWNER}/{REPO}")) else {
        return not_found;
    };
    let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
    match (m.as_str(), parts.as_slice()) {
        ("GET", ["labels"]) => (
            200,
            Value::Array(
                GITEA_LABELS
                    .iter()
                    .map(|(id, n)| json!({"id": id, "name": n, "color": "00aabb"}))
                    .collect(),
            ),
        ),
        ("GET", ["pulls"]) => {
            let state = param(q, "state").unwrap_or("open").to_string();
            let limit: usize = param(q, "limit").and_then(|l| l.parse().ok()).unwrap_or(30);
            let page: usize = param(q, "page").and_then(|l| l.parse().ok()).unwrap_or(1);
            let all = listed(
                s,
                hide,
                |p| {
                    let st = if p.state == "open" { "open" } else { "closed" };
                    state == "all" || st == state
                },
                |p| gt_pull(s, p),
            );
            let page: Vec<Value> = all
                .as_array()
                .unwrap()
                .iter()
                .skip((page - 1) * limit)
                .take(limit)
                .cloned()
                .collect();
            (200, Value::Array(page))
        }
        ("POST", ["pulls"]) => {
            let [head, base, title] = match strings(body, &["head", "base", "title"]) {
                Ok(v) => [v[0], v[1], v[2]],
                Err(f) => {
                    return (
                        422,
                        json!({"message": format!("[{f}]: Required"), "url": ""}),
                    );
                }
            };
            let mut labels = vec![];
            if let Some(ids) = body.get("labels") {
                let Some(ids) = ids.as_array().filter(|a| a.iter().all(Value::is_u64)) else {
                    return (
                        422,
                        json!({"message": "labels: cannot unmarshal into []int64", "url": ""}),
                    );
                };
                for id in ids {
                    match GITEA_LABELS.iter().find(|(i, _)| Some(*i) == id.as_u64()) {
                        Some((_, n)) => labels.push(n.to_string()),
                        None => {
                            return (422, json!({"message": "label does not exist", "url": ""}));
                        }
                    }
                }
            }
            if !branch_exists(s, head) {
                return not_found;
            }
            if let Some(p) = open_for(s, head, base) {
                return (
                    409,
                    json!({"message": format!("pull request already exists for these targets [id: {}, issue_id: {}, head_repo_id: 1, base_repo_id: 1, head_branch: {head}, base_branch: {base}]", 2000 + p.number, p.number), "url": ""}),
                );
            }
            let text = body.get("body").and_then(Value::as_str).unwrap_or("");
            let mut p = new_pull(s, head, base, title, text);
            p.labels = labels;
            s.inner.lock().unwrap().pulls.push(p.clone());
            (201, gt_pull(s, &p))
        }
        ("PATCH", ["pulls", n]) => {
            let Ok(n) = n.parse() else { return not_found };
            let (title, text) = (
                body.get("title").and_then(Value::as_str),
                body.get("body").and_then(Value::as_str),
            );
            with_pull(s, n, |p| {
                if let Some(t) = title {
                    p.title = t.into();
                }
                if let Some(b) = text {
                    p.body = b.into();
                }
                (201, gt_pull(s, p))
            })
            .unwrap_or(not_found)
        }
        ("POST", ["pulls", n, "requested_reviewers"]) => {
            let Ok(n) = n.parse() else { return not_found };
            let Some(r) = body.get("reviewers").and_then(Value::as_array).cloned() else {
                return (422, json!({"message": "[reviewers]: Required", "url": ""}));
            };
            with_pull(s, n, |p| {
                p.reviewers.extend(r);
                (201, json!([]))
            })
            .unwrap_or(not_found)
        }
        _ => not_found,
    }
}
