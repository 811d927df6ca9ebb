//! Hostile text made safe to quote: what a spoke (or the fleet repo) reports goes into
//! commit messages and pull requests, where a newline could forge a trailer and Markdown
//! or HTML could dress up a pull request body.

/// `s` as one line of at most `max` characters: newlines, tabs and other control
/// characters become spaces (runs collapse to one), invisible format characters (bidi
/// overrides, zero-width) are dropped, and a longer value is cut at `max` chars with `…`.
pub fn one_line(s: &str, max: usize) -> String {
    let mut out = String::new();
    let mut space = false;
    for c in s.chars() {
        if invisible(c) {
            continue;
        }
        if c.is_control() || c.is_whitespace() {
            space = !out.is_empty();
            continue;
        }
        if space {
            out.push(' ');
            space = false;
        }
        out.push(c);
    }
    if out.chars().count() > max {
        let mut cut: String = out.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        return cut;
    }
    out
}

/// serde-saphyr's limits for YAML from a spoke, the fleet repo or a forge (hostile
/// input) of at most `max` bytes: what spokekeeper reads is shallow and has no anchors,
/// so an alias bomb or deep nesting fails to parse; no snippet (the lines around an
/// error may hold a secret).
pub fn hostile_yaml(max: usize) -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: Some(max),
            max_depth: 64,
            flow_nesting_limit: 64,
            max_documents: 256,
            max_aliases: 64,
            max_anchors: 64,
            max_nodes: 200_000,
            max_events: 800_000,
            max_total_scalar_bytes: 2 * max,
            max_merge_keys: 0,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 1_000,
            max_replay_stack_depth: 4,
            max_alias_expansions_per_anchor: 8,
        },
        merge_keys: serde_saphyr::options::MergeKeyPolicy::Error,
        // Which of two `kind:` keys counts differs between parsers: not parsed.
        duplicate_keys: serde_saphyr::options::DuplicateKeyPolicy::Error,
        with_snippet: false,
    }
}

/// Where a top-level YAML block list `key:` ends, to append items to it as text so every
/// other line (comments, layout) stays as written. The caller parses the result again.
#[derive(Debug, PartialEq, Eq)]
pub struct BlockList {
    /// Byte offset where new items go: after the list's last line (and its line break).
    pub at: usize,
    /// The column of the items' `-`, and the spaces between `-` and the item.
    pub indent: usize,
    pub gap: usize,
    /// The file's line break; `missing_eol` when the last line has none.
    pub eol: &'static str,
    pub missing_eol: bool,
}

/// Why a `key:` cannot be appended to as text; each names its line and the fix.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlockListError {
    #[error(
        "line {line}: {key} is written on one line (flow style): write it as a block list (`{key}:` then `- ...` lines), or edit it by hand"
    )]
    Flow { line: usize, key: String },
    #[error("line {line}: {key} has no `- ` item to follow: write the first one by hand")]
    NoItem { line: usize, key: String },
}

/// The block list under the top-level `key:` in `text`. None: no such key. Err (with
/// the line) when it is not a block list with at least one item: flow style
/// (`key: [...]`) or empty.
pub fn block_list(text: &str, key: &str) -> Result<Option<BlockList>, BlockListError> {
    let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let is_key = |l: &str| {
        l.strip_prefix(key)
            .and_then(|r| r.strip_prefix(':'))
            .is_some_and(|r| {
                let r = r.trim();
                r.is_empty() || r.starts_with('#')
            })
    };
    let flow = |l: &str| l.strip_prefix(key).is_some_and(|r| r.starts_with(':'));
    let Some(k) = lines.iter().position(|l| is_key(l)) else {
        return match lines.iter().position(|l| flow(l)) {
            Some(k) => Err(BlockListError::Flow {
                line: k + 1,
                key: key.to_string(),
            }),
            None => Ok(None),
        };
    };
    // The list: indented lines and `-` items at column 0, with comments and blank lines
    // between them; it ends at the next top-level key.
    let (mut last, mut item) = (None, None);
    for (i, line) in lines.iter().enumerate().skip(k + 1) {
        let body = line.trim_end_matches(['\n', '\r']);
        let trimmed = body.trim_start();
        let indent = body.len() - trimmed.len();
        if trimmed.is_empty() || (indent == 0 && trimmed.starts_with('#')) {
            continue;
        }
        if indent == 0 && !trimmed.starts_with('-') {
            break;
        }
        if item.is_none() && trimmed.starts_with('-') {
            let after = &trimmed[1..];
            item = Some((indent, (after.len() - after.trim_start().len()).max(1)));
        }
        last = Some(i);
    }
    let (Some(last), Some((indent, gap))) = (last, item) else {
        return Err(BlockListError::NoItem {
            line: k + 1,
            key: key.to_string(),
        });
    };
    let at = lines[..=last].iter().map(|l| l.len()).sum();
    Ok(Some(BlockList {
        at,
        indent,
        gap,
        eol,
        missing_eol: !lines[last].ends_with('\n'),
    }))
}

/// `s` as literal text in Markdown (CommonMark, GitHub, GitLab, Gitea): every ASCII
/// punctuation mark that Markdown or HTML could act on is backslash-escaped. Autolinks
/// and references are found in the rendered text, after escapes are gone, so they are
/// broken with a zero-width space instead (a backslash before `:` would not help:
/// cmark-gfm merges the text back before it looks for links): after `@` (mentions), `#`
/// and `!` (issue and merge request references), after a `:` before `/`
/// (`http://...`), and before the dot of `www.`.
pub(crate) fn markdown(s: &str) -> String {
    const ZWSP: &str = "&#8203;";
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '@' => {
                out.push('@');
                out.push_str(ZWSP);
            }
            '#' | '!' => {
                out.push('\\');
                out.push(c);
                out.push_str(ZWSP);
            }
            ':' => {
                out.push(':');
                if chars.peek() == Some(&'/') {
                    out.push_str(ZWSP);
                }
            }
            '.' if out.to_ascii_lowercase().ends_with("www") => {
                out.push_str(ZWSP);
                out.push_str("\\.");
            }
            '\\' | '`' | '*' | '_' | '{' | '}' | '[' | ']' | '(' | ')' | '+' | '-' | '.' | '|'
            | '<' | '>' | '~' | '&' | '=' | '$' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// Characters that render as nothing but can reorder or hide text (Unicode format
/// characters: bidi controls, zero-width, tags).
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}'
        | '\u{061C}'
        | '\u{180E}'
        | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{206F}'
        | '\u{FEFF}'
        | '\u{FFF9}'..='\u{FFFB}'
        | '\u{E0001}'
        | '\u{E0020}'..='\u{E007F}')
}

/// A YAML parse error of fleet-repo text, said without that text: the kind of fault
/// (what precedes the message's first `:`, its quotes cut) and where. serde-saphyr names
/// a duplicate key or an unexpected value after a colon, and that may be a secret's line.
pub(crate) fn yaml_fault(e: &serde_saphyr::Error) -> String {
    let at = e.location().filter(|l| l.line() > 0);
    let mut msg = e.to_string();
    if let Some(l) = at {
        for suffix in [
            format!(" at line {}, column {}", l.line(), l.column()),
            format!(" at line {}", l.line()),
        ] {
            if let Some(cut) = msg.strip_suffix(&suffix) {
                msg = cut.to_owned();
                break;
            }
        }
    }
    let kind = unquoted(msg.split(':').next().unwrap_or_default().trim());
    match at {
        Some(l) => format!("{kind} at line {}, column {}", l.line(), l.column()),
        None => kind,
    }
}

/// A parser's error message with whatever it quotes (`"..."`, `` `...` ``) cut to `…`:
/// serde's messages quote the value or key that did not fit (`invalid type: string
/// "ghp_..."`, `` unknown field `...` ``), and fleet-repo text may be a secret's line.
/// What is left (the kind of fault, the line and column) still says where to look.
pub(crate) fn unquoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '"' && c != '`' {
            continue;
        }
        let mut escaped = false;
        for inner in chars.by_ref() {
            match inner {
                '\\' if c == '"' && !escaped => escaped = true,
                _ if inner == c && !escaped => break,
                _ => escaped = false,
            }
        }
        out.push('…');
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newlines_and_controls_become_one_space() {
        assert_eq!(
            one_line("admin\nSigned-off-by: x\r\n\t<b>", 100),
            "admin Signed-off-by: x <b>"
        );
        assert_eq!(one_line("a\u{7}\u{1b}[31mb\u{85}c", 100), "a [31mb c");
        assert_eq!(one_line("  \n x \n ", 100), "x");
    }

    #[test]
    fn line_and_paragraph_separators_are_newlines_too() {
        assert_eq!(one_line("a\u{2028}b\u{2029}c", 100), "a b c");
    }

    #[test]
    fn bidi_and_zero_width_characters_are_dropped() {
        assert_eq!(
            one_line(
                "sys\u{202E}nimda\u{202C}:\u{200B}x\u{2066}y\u{2069}\u{FEFF}",
                100
            ),
            "sysnimda:xy"
        );
    }

    #[test]
    fn length_is_bounded_in_chars_not_bytes() {
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(one_line("abcd", 4), "abcd");
        // Multi-byte characters are never split.
        let s = one_line(&"é".repeat(50), 10);
        assert_eq!(s.chars().count(), 10);
        assert_eq!(s, format!("{}…", "é".repeat(9)));
    }

    #[test]
    fn markdown_and_html_are_escaped() {
        assert_eq!(markdown("<script>x</script>"), "\\<script\\>x\\</script\\>");
        assert_eq!(
            markdown("[click](https://e.x) **b** `c` # h"),
            "\\[click\\]\\(https:&#8203;//e\\.x\\) \\*\\*b\\*\\* \\`c\\` \\#&#8203; h"
        );
        assert_eq!(markdown("a\\b &lt;"), "a\\\\b \\&lt;");
        assert_eq!(markdown("plain words 123"), "plain words 123");
    }

    /// What a renderer shows for `markdown`'s output: escapes gone, the zero-width
    /// space as a character. cmark-gfm merges text nodes before it looks for autolinks,
    /// so a backslash escape alone does not stop one.
    fn rendered(s: &str) -> String {
        let s = s.replace("&#8203;", "\u{200B}");
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => out.extend(chars.next()),
                c => out.push(c),
            }
        }
        out
    }

    #[test]
    fn urls_and_references_are_not_links() {
        for text in [
            "see http://16909060/x",
            "HTTPS://evil.example/a",
            "ftp://h/x",
            "go to www.evil.example now",
            "fixes #123 and org/fleet#4",
            "see !7",
        ] {
            let shown = rendered(&markdown(text));
            assert_eq!(
                shown.replace('\u{200B}', ""),
                text,
                "the text reads the same"
            );
            let lower = shown.to_ascii_lowercase();
            assert!(!lower.contains("://"), "{shown:?}");
            assert!(!lower.contains("www."), "{shown:?}");
            assert!(
                !shown
                    .as_bytes()
                    .windows(2)
                    .any(|w| matches!(w[0], b'#' | b'!') && w[1].is_ascii_alphanumeric()),
                "{shown:?}"
            );
        }
        assert_eq!(
            markdown("sha256:ab"),
            "sha256:ab",
            "a fingerprint stays whole"
        );
    }

    #[test]
    fn mentions_are_neutralised() {
        assert_eq!(markdown("cc @admins"), "cc @&#8203;admins");
    }

    #[test]
    fn unquoted_cuts_what_a_parser_quotes() {
        assert_eq!(
            unquoted(r#"invalid type: string "ghp_a\"b", expected struct X at line 1 column 1"#),
            r#"invalid type: string "…", expected struct X at line 1 column 1"#
        );
        assert_eq!(
            unquoted("unknown field `AGE-SECRET-KEY-1X`, expected `spec` at line 3"),
            "unknown field `…`, expected `…` at line 3"
        );
        // An unclosed quote cuts to the end.
        assert_eq!(unquoted("at line 2: \"ghp_abc"), "at line 2: \"…\"");
        assert_eq!(unquoted("no quotes, line 4"), "no quotes, line 4");
    }
}
