//! The error convention of docs/ARCHITECTURE.md, kept true: an error either wraps its
//! cause (`#[source]`/`#[from]`, and its message does not print it) or says it (its
//! message prints it, and `source()` returns nothing), never both, so one printer can walk
//! the chain without printing a cause twice. Reads every `#[error(...)]` in `src/`.

use std::path::Path;

use super::size::{outside_tests, rust_files};

/// The text from `open` (an opening bracket) to its matching close, brackets inside
/// strings ignored.
fn balanced(text: &str, open: usize) -> &str {
    let bytes = text.as_bytes();
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'(' | b'{' | b'[' => depth += 1,
            b')' | b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return &text[open..=i];
                }
            }
            _ => {}
        }
    }
    &text[open..]
}

/// Each `#[error(...)]` with the item it is on: (message arguments, the item's fields).
fn errors(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("#[error(") {
        let start = from + at;
        let args = balanced(text, start + "#[error".len());
        let after = start + "#[error".len() + args.len() + 1;
        // The fields: the variant's or struct's first bracket after its name.
        let rest = &text[after..];
        let fields = match rest.find(['(', '{', ',', ';']) {
            Some(i) if matches!(rest.as_bytes()[i], b'(' | b'{') => balanced(rest, i).to_string(),
            _ => String::new(),
        };
        out.push((args.to_string(), fields));
        from = after;
    }
    out
}

/// The fields an error wraps: `#[source]`/`#[from]` ones and any named `source`.
fn wrapped(fields: &str) -> Vec<String> {
    let mut names = Vec::new();
    if fields.len() < 2 {
        return names;
    }
    let tuple = fields.starts_with('(');
    let inner = &fields[1..fields.len() - 1];
    let mut marked = false;
    let mut position = 0;
    for part in inner.split(',') {
        let part = part.trim();
        let is_marked = marked || part.contains("#[source]") || part.contains("#[from]");
        let name = if tuple {
            Some(position.to_string())
        } else {
            part.split_once(':').and_then(|(before, _)| {
                let word = before.split_whitespace().last()?;
                Some(word.trim_start_matches("pub").to_string())
            })
        };
        // An attribute alone before a field split off by a comma-free line: carried.
        marked = part.ends_with(']') && is_marked;
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            if is_marked || name == "source" {
                names.push(name);
            }
            position += 1;
        }
    }
    names
}

fn says(message: &str, field: &str) -> bool {
    let numbered = field.chars().all(|c| c.is_ascii_digit());
    let patterns = if numbered {
        vec![
            format!("{{{field}}}"),
            format!("{{{field}:"),
            format!(".{field}"),
        ]
    } else {
        vec![
            format!("{{{field}}}"),
            format!("{{{field}:"),
            format!(" {field}."),
            format!("({field})"),
            format!("({field}."),
            format!("{field}.to_string"),
        ]
    };
    patterns.iter().any(|p| message.contains(p))
}

fn violations(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (message, fields) in errors(text) {
        if message.contains("transparent") {
            continue;
        }
        for field in wrapped(&fields) {
            if says(&message, &field) {
                out.push(format!("{message} both prints and wraps `{field}`"));
            }
        }
    }
    out
}

#[test]
fn no_error_both_prints_and_wraps_its_cause() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for v in violations(&text) {
            found.push(format!("{}: {v}", f.strip_prefix(&src).unwrap().display()));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_check_sees_each_shape_of_both() {
    let both = [
        "#[error(\"read {path}: {source}\")]\n    Read { path: String, source: io::Error },",
        "#[error(\"sealing failed: {0}\")]\n    Seal(#[from] SealError),",
        "#[error(\"bad: {0}\")]\n    Bad(#[source] E),",
        "#[error(\"for {target}: {reason}\")]\n    Settings {\n        target: String,\n        #[source]\n        reason: E,\n    },",
        "#[error(\"client: {}\", chain(.0))]\n    Client(#[source] reqwest::Error),",
    ];
    for text in both {
        assert_eq!(violations(text).len(), 1, "not seen: {text}");
    }
    let fine = [
        "#[error(\"read {path}\")]\n    Read { path: String, source: io::Error },",
        "#[error(\"read {path}: {error}\")]\n    Read { path: String, error: io::Error },",
        "#[error(transparent)]\n    Repo(#[from] RepoError),",
        "#[error(\"sealing failed: {0}\")]\n    Seal(SealError),",
        "#[error(\"cannot seal\")]\n    Seal(#[source] SealError),",
    ];
    for text in fine {
        assert_eq!(violations(text), Vec::<String>::new(), "{text}");
    }
}

/// Files where a `Result<_, String>` is left while others reshape them; empty now.
const STRING_ERRORS_LEFT: &[&str] = &[];

/// Each `Result<T, String>` in `text` (its error type, at the top level of its
/// brackets, is `String`): the line it is on.
fn string_errors(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("Result<") {
        let open = from + at + "Result".len();
        // The type arguments at the top level of the brackets (a trailing comma adds none).
        let (mut depth, mut start, mut args) = (0usize, open + 1, Vec::new());
        for (i, c) in text[open..].char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' => {
                    depth -= 1;
                    if depth == 0 {
                        args.push(text[start..open + i].trim());
                        break;
                    }
                }
                ',' if depth == 1 => {
                    args.push(text[start..open + i].trim());
                    start = open + i + 1;
                }
                _ => {}
            }
        }
        args.retain(|a| !a.is_empty());
        if args.len() == 2 && args[1] == "String" {
            out.push(text[..open].lines().count());
        }
        from = open;
    }
    out
}

#[test]
fn no_result_with_a_string_error_outside_tests() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap().display().to_string();
        if STRING_ERRORS_LEFT.contains(&rel.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for line in string_errors(outside_tests(&text)) {
            found.push(format!(
                "src/{rel}:{line}: a Result<_, String>: type its error"
            ));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_string_error_check_sees_nested_and_split_signatures() {
    let caught = [
        "fn a() -> Result<String, String> {",
        "fn b() -> Result<Option<Vec<(u8, u8)>>, String> {",
        "fn c() -> Result<\n    BTreeMap<String, String>,\n    String,\n> {",
    ];
    for text in caught {
        assert_eq!(string_errors(text).len(), 1, "not seen: {text}");
    }
    let fine = [
        "fn d() -> Result<BTreeMap<String, String>, ManifestError> {",
        "fn e() -> Result<String, io::Error> {",
        "fn f() -> std::io::Result<String> {",
    ];
    for text in fine {
        assert_eq!(string_errors(text), Vec::<usize>::new(), "{text}");
    }
}
