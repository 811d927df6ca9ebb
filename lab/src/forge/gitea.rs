//! Gitea's and Forgejo's pull requests: https://gitea.com/api/swagger

use serde_json::{Value, json};

use super::pulls::{
    branch_exists, edit, head_sha, listed, new_pull, open_for, param, strings, with_pull,
};
use super::{Call, OWNER, Pull, REPO, Shared};

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

pub(super) fn gitea(s: &Shared, call: &Call) -> (u16, Value) {
    let (path, body) = (call.path, call.body);
    let not_found = (
        404,
        json!({"errors": null, "message": "The target couldn't be found.", "url": "https://gitea.example.org/api/swagger"}),
    );
    let Some(rest) = path.strip_prefix(&format!("/api/v1/repos/{OWNER}/{REPO}")) else {
        return not_found;
    };
    let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
    match (call.method.as_str(), parts.as_slice()) {
        ("GET", ["labels"]) => (
            200,
            Value::Array(
                GITEA_LABELS
                    .iter()
                    .map(|(id, n)| json!({"id": id, "name": n, "color": "00aabb"}))
                    .collect(),
            ),
        ),
        ("GET", ["pulls"]) => (200, list(s, call)),
        ("POST", ["pulls"]) => create(s, body).unwrap_or(not_found),
        ("PATCH", ["pulls", n]) => {
            let Ok(n) = n.parse() else { return not_found };
            edit(s, n, body, "body", |p| gt_pull(s, p)).map_or(not_found, |v| (201, v))
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

/// One page of the pull requests in a state.
fn list(s: &Shared, call: &Call) -> Value {
    let q = &call.query;
    let state = param(q, "state").unwrap_or("open").to_string();
    let limit: usize = param(q, "limit").and_then(|l| l.parse().ok()).unwrap_or(30);
    let page: usize = param(q, "page").and_then(|l| l.parse().ok()).unwrap_or(1);
    let all = listed(
        s,
        call.hide,
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
    Value::Array(page)
}

/// The created pull request, or the refusal; None when the head branch is not on the
/// remote (Gitea answers that with its 404).
fn create(s: &Shared, body: &Value) -> Option<(u16, Value)> {
    let [head, base, title] = match strings(body, &["head", "base", "title"]) {
        Ok(v) => [v[0], v[1], v[2]],
        Err(f) => {
            return Some((
                422,
                json!({"message": format!("[{f}]: Required"), "url": ""}),
            ));
        }
    };
    let labels = match labels(body) {
        Ok(l) => l,
        Err(refused) => return Some(refused),
    };
    if !branch_exists(s, head) {
        return None;
    }
    if let Some(p) = open_for(s, head, base) {
        return Some((
            409,
            json!({"message": format!("pull request already exists for these targets [id: {}, issue_id: {}, head_repo_id: 1, base_repo_id: 1, head_branch: {head}, base_branch: {base}]", 2000 + p.number, p.number), "url": ""}),
        ));
    }
    let text = body.get("body").and_then(Value::as_str).unwrap_or("");
    let mut p = new_pull(s, head, base, title, text);
    p.labels = labels;
    s.inner.lock().unwrap().pulls.push(p.clone());
    Some((201, gt_pull(s, &p)))
}

/// The names of the label ids a create sends, or the refusal.
fn labels(body: &Value) -> Result<Vec<String>, (u16, Value)> {
    let mut labels = vec![];
    if let Some(ids) = body.get("labels") {
        let Some(ids) = ids.as_array().filter(|a| a.iter().all(Value::is_u64)) else {
            return Err((
                422,
                json!({"message": "labels: cannot unmarshal into []int64", "url": ""}),
            ));
        };
        for id in ids {
            match GITEA_LABELS.iter().find(|(i, _)| Some(*i) == id.as_u64()) {
                Some((_, n)) => labels.push(n.to_string()),
                None => {
                    return Err((422, json!({"message": "label does not exist", "url": ""})));
                }
            }
        }
    }
    Ok(labels)
}
