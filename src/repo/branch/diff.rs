//! What a branch's one commit changes, from `git diff-tree -r --no-renames --raw -z`:
//! one path alone, and only as the branch's kind allows.

use super::Untrusted;

/// Whether `git diff-tree -r --no-renames --raw -z` output changes `rel` alone, and as
/// `ours` accepts (its `OLDMODE NEWMODE OLDSHA NEWSHA STATUS`); `how` says what was
/// expected of it.
pub(super) fn only_changes(
    raw: &str,
    rel: &str,
    how: &str,
    ours: impl Fn(&[&str]) -> bool,
) -> Result<(), Untrusted> {
    let fields: Vec<&str> = raw.split('\0').filter(|f| !f.is_empty()).collect();
    let changes = |detail: String| Untrusted::Changes {
        rel: rel.to_string(),
        detail,
    };
    let mut others = Vec::new();
    let mut seen = false;
    for pair in fields.chunks(2) {
        let [meta, path] = pair else {
            return Err(changes("unreadable diff".into()));
        };
        let meta: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        if *path != rel {
            others.push(path.to_string());
            continue;
        }
        match meta.as_slice() {
            m if ours(m) => seen = true,
            [mode, new_mode, _, _, status] => {
                return Err(changes(format!(
                    "{rel} is not {how} (mode {mode} to {new_mode}, status {status})"
                )));
            }
            _ => return Err(changes("unreadable diff".into())),
        }
    }
    if !others.is_empty() {
        others.truncate(5);
        return Err(changes(format!(
            "also {}",
            crate::text::one_line(&others.join(", "), 300)
        )));
    }
    if !seen {
        return Err(changes(format!("{rel} is not changed")));
    }
    Ok(())
}
