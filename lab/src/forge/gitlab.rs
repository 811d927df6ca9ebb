//! GitLab's merge requests: https://docs.gitlab.com/api/merge_requests/

use serde_json::{Value, json};

use super::pulls::{branch_exists, edit, head_sha, listed, new_pull, open_for, param, strings};
use super::{Call, GITLAB_PROJECT_ID, OWNER, Pull, REPO, Shared};

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

pub(super) fn gitlab(s: &Shared, call: &Call) -> (u16, Value) {
    let (path, body) = (call.path, call.body);
    let not_found = (404, json!({"message": "404 Project Not Found"}));
    let prefixes = [
        format!("/api/v4/projects/{OWNER}%2F{REPO}/merge_requests"),
        format!("/api/v4/projects/{GITLAB_PROJECT_ID}/merge_requests"),
    ];
    let Some(rest) = prefixes.iter().find_map(|p| path.strip_prefix(p.as_str())) else {
        return not_found;
    };
    match (call.method.as_str(), rest.trim_start_matches('/')) {
        ("GET", "") => (200, list(s, call)),
        ("POST", "") => create(s, body),
        ("PUT", iid) => {
            let Ok(n) = iid.parse() else { return not_found };
            edit(s, n, body, "description", |p| gl_mr(s, p))
                .map_or((404, json!({"message": "404 Not found"})), |v| (200, v))
        }
        _ => not_found,
    }
}

fn list(s: &Shared, call: &Call) -> Value {
    let q = &call.query;
    let state = param(q, "state").unwrap_or("all").to_string();
    let src = param(q, "source_branch").map(str::to_string);
    let dst = param(q, "target_branch").map(str::to_string);
    listed(
        s,
        call.hide,
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
    )
}

fn create(s: &Shared, body: &Value) -> (u16, Value) {
    let [src, dst, title] = match strings(body, &["source_branch", "target_branch", "title"]) {
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
