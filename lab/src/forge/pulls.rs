//! The emulated forges' pull requests and the git remote their head branches are on,
//! as the three APIs share them.

use serde_json::{Value, json};

use super::{Pull, Shared, rfc3339};

pub(super) fn parse_query(q: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(q.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

pub(super) fn param<'a>(q: &'a [(String, String)], k: &str) -> Option<&'a str> {
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

pub(super) fn branch_exists(s: &Shared, branch: &str) -> bool {
    remote_branch(s, branch).is_some()
}

/// The commit the head branch points at on the git remote now, as a forge shows it
/// (empty when the branch is gone).
pub(super) fn head_sha(s: &Shared, p: &Pull) -> String {
    if let Some(sha) = &p.shown_head {
        return sha.clone();
    }
    remote_branch(s, &p.head).unwrap_or_default()
}

/// The string fields `names` of `body`, or which one is missing.
pub(super) fn strings<'a>(
    body: &'a Value,
    names: &[&'static str],
) -> Result<Vec<&'a str>, &'static str> {
    names
        .iter()
        .map(|n| body.get(*n).and_then(Value::as_str).ok_or(*n))
        .collect()
}

pub(super) fn new_pull(s: &Shared, head: &str, base: &str, title: &str, body: &str) -> Pull {
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

pub(super) fn open_for(s: &Shared, head: &str, base: &str) -> Option<Pull> {
    s.inner
        .lock()
        .unwrap()
        .pulls
        .iter()
        .find(|p| p.head == head && p.base == base && p.state == "open")
        .cloned()
}

pub(super) fn with_pull<T>(s: &Shared, number: u64, f: impl FnOnce(&mut Pull) -> T) -> Option<T> {
    s.inner
        .lock()
        .unwrap()
        .pulls
        .iter_mut()
        .find(|p| p.number == number)
        .map(f)
}

pub(super) fn listed(
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

/// Sets pull `n`'s title and text where `body` has them (`text` is the forge's name for
/// the text field), then shows it.
pub(super) fn edit(
    s: &Shared,
    n: u64,
    body: &Value,
    text: &str,
    show: impl FnOnce(&Pull) -> Value,
) -> Option<Value> {
    let (title, text) = (
        body.get("title").and_then(Value::as_str),
        body.get(text).and_then(Value::as_str),
    );
    with_pull(s, n, |p| {
        if let Some(t) = title {
            p.title = t.into();
        }
        if let Some(b) = text {
            p.body = b.into();
        }
        show(p)
    })
}
