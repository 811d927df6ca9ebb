//! The pull request's title, body and the other text shown to people.

use crate::forge::{self};
use crate::rotate::decide::Reason;
use crate::text;

/// The error for a pull request whose head is not the commit spokekeeper verified.
pub(crate) fn unverified(open: &forge::Open, head: &str, just_pushed: bool) -> String {
    let shows = match &open.head {
        Some(h) => format!("the forge shows head {h}"),
        None => "the forge does not say which commit it shows".into(),
    };
    let lag = if just_pushed {
        " (the forge may not have seen the push yet)"
    } else {
        ""
    };
    format!(
        "unverified pull request {}: {shows}, not {head} which spokekeeper pushed and verified{lag}; it is not endorsed, the next tick checks again",
        open.pr.url
    )
}

/// Whether the open pull request already carries `title` and `body` (the note about a
/// replaced head, written when the branch was replaced, may stay in front).
pub(crate) fn same_text(open: &forge::Open, title: &str, body: &str) -> bool {
    let note = text::markdown("replaced branch head ");
    open.title == title
        && (open.body == body
            || open.body.strip_suffix(body).is_some_and(|before| {
                before.starts_with(&note)
                    && before.ends_with("\n\n")
                    && before.trim_end().lines().count() == 1
            }))
}

/// Title (the commit's subject) and body (its facts, the full fingerprints, what to do,
/// the verified head commit; and, when an untrusted branch head was replaced, which and
/// why). The message's text carries values a spoke reported: the body quotes it
/// escaped, as literal Markdown.
pub(crate) fn describe(
    message: &str,
    reason: Option<&Reason>,
    replaced: Option<&str>,
    head: &str,
) -> (String, String) {
    let (title, rest) = message.split_once('\n').unwrap_or((message, ""));
    let mut body = String::new();
    if let Some(why) = replaced {
        body.push_str(&text::markdown(&text::one_line(why, 400)));
        body.push_str("\n\n");
    }
    if let Some(Reason::CaChanged { old }) = reason {
        body.push_str(&format!("previous CA: {old}\n"));
    }
    for line in rest.trim().lines() {
        body.push_str(&text::markdown(&text::one_line(line, 1000)));
        body.push('\n');
    }
    body.push_str(
        "\nOpened by spokekeeper after validating the new credential against the live API. \
         Merging makes the hub use it; if the spoke changes again first, spokekeeper replaces \
         this branch and updates this pull request.\n",
    );
    body.push('\n');
    body.push_str(&signed_line(head));
    (text::one_line(title, 200), body)
}

/// A removal's title (the commit's subject) and body (the rest of its message but the
/// trailer, what merging does, the verified head; and, when an untrusted branch head
/// was replaced, which and why). Consumer names come from the hub: quoted escaped.
pub(crate) fn removal_text(message: &str, replaced: Option<&str>, head: &str) -> (String, String) {
    let (title, rest) = message.split_once('\n').unwrap_or((message, ""));
    let mut body = String::new();
    if let Some(why) = replaced {
        body.push_str(&text::markdown(&text::one_line(why, 400)));
        body.push_str("\n\n");
    }
    let trailer = crate::repo::REMOVES.trim_end();
    for line in rest.trim().lines().filter(|l| !l.starts_with(trailer)) {
        body.push_str(&text::markdown(&text::one_line(line, 1000)));
        body.push('\n');
    }
    body.push_str(
        "\nOpened by spokekeeper: this commit deletes the old Secret's file and nothing else. \
         Once it is merged, the next tick checks the hub and the fleet repo again and, for a \
         spoke that was minted, deletes the minted bindings on the spoke.\n",
    );
    body.push('\n');
    body.push_str(&signed_line(head));
    (text::one_line(title, 200), body)
}

/// The line a reviewer compares with the head commit the forge shows.
pub(crate) fn signed_line(head: &str) -> String {
    format!("head {}, signed by spokekeeper\n", text::markdown(head))
}

/// An age for people: `45s`, `12m`, `3h 27m`, `2d 4h`.
pub fn human(secs: u64) -> String {
    let (d, h, m) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{secs}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, m) => format!("{h}h {m}m"),
        (d, h, _) => format!("{d}d {h}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_plainly() {
        assert_eq!(human(45), "45s");
        assert_eq!(human(12 * 60 + 5), "12m");
        assert_eq!(human(3 * 3600 + 27 * 60), "3h 27m");
        assert_eq!(human(2 * 86_400 + 4 * 3600 + 59), "2d 4h");
    }

    #[test]
    fn a_removal_is_described_without_its_trailer_and_with_its_head() {
        let msg = "edge: remove the old Secret edge/kc: migrated to federated\n\nReady: Kustomization edge/*x*\n\nSpokekeeper-Removes: fluxcd/kc-sealed.yaml\n";
        let (title, body) =
            removal_text(msg, Some("replaced branch head 99: unsigned"), "0123abcd");
        assert_eq!(
            title,
            "edge: remove the old Secret edge/kc: migrated to federated"
        );
        assert!(
            body.starts_with(
                "replaced branch head 99: unsigned\n\nReady: Kustomization edge/\\*x\\*\n"
            ),
            "{body}"
        );
        assert!(!body.contains("Spokekeeper-Removes"), "{body}");
        assert!(
            body.ends_with("\nhead 0123abcd, signed by spokekeeper\n"),
            "{body}"
        );
    }

    #[test]
    fn description_carries_both_fingerprints() {
        let old = crate::fingerprint::Fingerprint::from_digest([0xaa; 32]);
        let msg = "dev: rotate kubeconfig: CA changed sha256:aaaa.. -> sha256:bbbb..\n\nCA: sha256:bbbbfull (valid until 2036-01-01T00:00:00Z)\nvalidated: authenticated as system:admin\n";
        let (title, body) = describe(msg, Some(&Reason::CaChanged { old }), None, "0123abcd");
        assert_eq!(
            title,
            "dev: rotate kubeconfig: CA changed sha256:aaaa.. -> sha256:bbbb.."
        );
        assert!(
            body.starts_with(&format!("previous CA: {old}\nCA: sha256:bbbbfull")),
            "{body}"
        );
        assert!(
            body.contains("validated: authenticated as system:admin"),
            "{body}"
        );
        assert!(
            body.ends_with("\nhead 0123abcd, signed by spokekeeper\n"),
            "the head a reviewer compares with the forge's: {body}"
        );
    }
}
