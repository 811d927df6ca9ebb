//! GitHub's pull requests: https://docs.github.com/en/rest/pulls/pulls

use serde_json::{Value, json};

use super::pulls::{
    branch_exists, edit, head_sha, listed, new_pull, open_for, param, strings, with_pull,
};
use super::{Call, OWNER, Pull, REPO, Shared};

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

pub(super) fn github(s: &Shared, call: &Call) -> (u16, Value) {
    let (path, body) = (call.path, call.body);
    let not_found = (
        404,
        json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"}),
    );
    let Some(rest) = path.strip_prefix(&format!("/repos/{OWNER}/{REPO}")) else {
        return not_found;
    };
    let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
    match (call.method.as_str(), parts.as_slice()) {
        ("GET", ["pulls"]) => (200, list(s, call)),
        ("POST", ["pulls"]) => create(s, body),
        ("PATCH", ["pulls", n]) => {
            let Ok(n) = n.parse() else { return not_found };
            edit(s, n, body, "body", |p| gh_pull(s, p)).map_or(not_found, |v| (200, v))
        }
        ("POST", ["issues", n, "labels"]) => {
            let Ok(n) = n.parse() else { return not_found };
            let Some(labels) = body.get("labels").and_then(Value::as_array) else {
                return gh_invalid("labels", "missing_field", None);
            };
            add_labels(s, n, labels).unwrap_or(not_found)
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

fn list(s: &Shared, call: &Call) -> Value {
    let q = &call.query;
    let state = param(q, "state").unwrap_or("open").to_string();
    let head = param(q, "head").map(str::to_string);
    let base = param(q, "base").map(str::to_string);
    listed(
        s,
        call.hide,
        |p| {
            let st = if p.state == "open" { "open" } else { "closed" };
            (state == "all" || st == state)
                && head
                    .as_ref()
                    .is_none_or(|h| *h == format!("{OWNER}:{}", p.head))
                && base.as_ref().is_none_or(|b| *b == p.base)
        },
        |p| gh_pull(s, p),
    )
}

fn create(s: &Shared, body: &Value) -> (u16, Value) {
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

fn add_labels(s: &Shared, n: u64, labels: &[Value]) -> Option<(u16, Value)> {
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
}
