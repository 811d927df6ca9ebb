//! Scalars written the way kubeseal's Go encoders write them, so our manifests match
//! kubeseal's byte for byte where it matters (and are valid YAML/JSON everywhere).
//!
//! YAML follows go-yaml v2 (via sigs.k8s.io/yaml): plain when the string would read back
//! as a string; double quotes when it would read back as another type ("true", "123",
//! dates); single quotes when plain would be ambiguous; double quotes with escapes for
//! control characters and line breaks. JSON follows Go's encoding/json, which escapes
//! `<`, `>`, `&`, U+2028 and U+2029.

use std::borrow::Cow;
use std::fmt::Write;

/// A YAML scalar (key or value) for block context.
pub(super) fn scalar(s: &str) -> Cow<'_, str> {
    if needs_escapes(s) {
        return Cow::Owned(double_quoted(s));
    }
    if resolves_to_non_string(s) {
        return Cow::Owned(format!("\"{s}\""));
    }
    if plain_allowed(s) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(format!("'{}'", s.replace('\'', "''")))
}

/// Characters that only double quotes can carry.
fn needs_escapes(s: &str) -> bool {
    s.chars().any(|c| {
        (c.is_control() && c != '\t') || c == '\u{feff}' || c == '\u{2028}' || c == '\u{2029}'
    }) || s.contains('\t')
}

fn plain_allowed(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    let last = s.chars().next_back().unwrap_or(first);
    if first == ' ' || last == ' ' || last == ':' {
        return false;
    }
    if "#,[]{}&*!|>'\"%@`".contains(first) {
        return false;
    }
    let second = s.chars().nth(1);
    if "-?:".contains(first) && matches!(second, None | Some(' ')) {
        return false;
    }
    if s.starts_with("---") || s.starts_with("...") {
        return false;
    }
    !(s.contains(": ") || s.contains(" #"))
}

/// Would YAML 1.1 (go-yaml v2's resolver) read this plain scalar as something else?
fn resolves_to_non_string(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "", "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
        "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
        ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan",
        ".NaN", ".NAN", "<<",
    ];
    if WORDS.contains(&s) {
        return true;
    }
    let Some(first) = s.chars().next() else {
        return true;
    };
    if !(first.is_ascii_digit() || "+-.".contains(first)) {
        return false;
    }
    let plain: String = s.chars().filter(|&c| c != '_').collect();
    let unsigned = plain.trim_start_matches(['+', '-']);
    plain.parse::<i64>().is_ok()
        || plain.parse::<f64>().is_ok()
        || unsigned
            .strip_prefix("0x")
            .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
        || unsigned
            .strip_prefix("0b")
            .is_some_and(|b| !b.is_empty() && b.chars().all(|c| c == '0' || c == '1'))
        || looks_like_timestamp(s)
}

/// `2006-01-02` and `2006-01-02T15:04:05Z`-like forms: Go resolves these to timestamps.
fn looks_like_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 8
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && s.chars()
            .all(|c| c.is_ascii_digit() || "-:.TtZz +".contains(c))
}

fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if c.is_control() || matches!(c, '\u{feff}' | '\u{2028}' | '\u{2029}') => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON string as Go's encoding/json writes it.
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads_back(s: &str) {
        let yaml = format!("k: {}\n", scalar(s));
        let map: std::collections::BTreeMap<String, String> =
            serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{yaml:?}: {e}"));
        assert_eq!(map["k"], s, "{yaml:?}");
    }

    #[test]
    fn quoting_matches_go_yaml() {
        assert_eq!(scalar("true"), "\"true\"");
        assert_eq!(scalar("123"), "\"123\"");
        assert_eq!(scalar("1e3"), "\"1e3\"");
        assert_eq!(scalar("2026-11-29T18:00:00Z"), "\"2026-11-29T18:00:00Z\"");
        assert_eq!(scalar("tenant-a"), "tenant-a");
        assert_eq!(
            scalar("sealedsecrets.bitnami.com/cluster-wide"),
            "sealedsecrets.bitnami.com/cluster-wide"
        );
        assert_eq!(scalar("AgA+/x=="), "AgA+/x==");
        assert_eq!(scalar("sha256:ab12"), "sha256:ab12");
        assert_eq!(scalar("https://10.0.0.1:6443"), "https://10.0.0.1:6443");
        assert_eq!(scalar("a: b"), "'a: b'");
        assert_eq!(scalar("*star"), "'*star'");
        assert_eq!(scalar(""), "\"\"");
        assert_eq!(scalar("line\nbreak"), "\"line\\nbreak\"");
    }

    #[test]
    fn every_form_reads_back_as_the_same_string() {
        for s in [
            "true",
            "no",
            "~",
            "123",
            "0x1F",
            "-1.5",
            "2026-11-29",
            "a: b",
            "#x",
            "x #y",
            "- a",
            "? q",
            ":",
            "it's",
            "'quoted'",
            "\"dq\"",
            " lead",
            "trail ",
            "tab\there",
            "nl\n",
            "ctrl\u{1}",
            "back\\slash",
            "---",
            "{x}",
            "[x]",
            "%x",
            "@x",
            "`x",
            "plain text",
            "ü",
        ] {
            reads_back(s);
        }
    }

    #[test]
    fn json_escapes_like_go() {
        assert_eq!(
            json_string("a<b>&\"c\"\n"),
            "\"a\\u003cb\\u003e\\u0026\\\"c\\\"\\n\""
        );
        assert_eq!(json_string("\u{1}\u{2028}"), "\"\\u0001\\u2028\"");
        let back: String = serde_json::from_str(&json_string("x<&>\u{2029}\\")).unwrap();
        assert_eq!(back, "x<&>\u{2029}\\");
    }
}
