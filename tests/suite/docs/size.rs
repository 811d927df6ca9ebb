//! The size limits of docs/ARCHITECTURE.md, kept true: no Rust file in `src/`, `lab/` or
//! `tests/` has over 500 lines of code and no function there is over 100 lines, unit tests,
//! `tests.rs` files and test functions included. Lines of code are the lines neither blank
//! nor comments; a function's length is its lines of code from `fn` to its closing brace.

use std::path::{Path, PathBuf};

const MAX_FILE_CODE: usize = 500;
const MAX_FN_LINES: usize = 100;

/// The folders measured, from the repository root.
const MEASURED: &[&str] = &["src", "lab", "tests"];

pub(super) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text before the file's unit tests (`#[cfg(test)] mod ...`).
pub(super) fn outside_tests(text: &str) -> &str {
    let mut from = 0;
    while let Some(at) = text[from..].find("#[cfg(test)]") {
        let start = from + at;
        let rest = text[start + "#[cfg(test)]".len()..].trim_start();
        let mod_after = |vis: &str| {
            rest.strip_prefix(vis)
                .is_some_and(|r| r.starts_with("mod "))
        };
        if ["", "pub(crate) ", "pub(super) "]
            .into_iter()
            .any(mod_after)
        {
            return &text[..start];
        }
        from = start + 1;
    }
    text
}

fn lines_of_code(text: &str) -> usize {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count()
}

/// The index just past the brace closing the one at `open`, skipping strings, char
/// literals and comments.
fn close_of(text: &str, open: usize) -> usize {
    let b = text.as_bytes();
    let (mut i, mut depth) = (open, 0usize);
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'r' if text[i..].starts_with("r#\"") => {
                i += text[i + 3..].find("\"#").map_or(b.len(), |e| e + 4);
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            // A char literal ('x', '\n', '{'), not a lifetime ('a).
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 2,
            b'\'' if b.get(i + 1) == Some(&b'\\') => {
                i += text[i + 2..].find('\'').map_or(b.len(), |e| e + 2);
            }
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    b.len()
}

/// Each function with a body: (its name, its length in lines).
fn functions(code: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for line in code.split_inclusive('\n') {
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| *w == "fn");
        let lead = at.is_some_and(|a| {
            words[..a].iter().all(|w| {
                matches!(
                    *w,
                    "pub" | "pub(crate)" | "pub(super)" | "async" | "const" | "unsafe"
                ) || w.starts_with("extern")
            })
        });
        if let (Some(a), true) = (at, lead) {
            let name = words.get(a + 1).map_or("", |w| w);
            let name: String = name
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // The body: the first `{` after the signature, unless a `;` ends it first.
            let rest = &code[offset..];
            let open = rest.find('{');
            let semi = rest.find(';');
            if let Some(open) = open.filter(|o| semi.is_none_or(|s| s > *o)) {
                let end = close_of(code, offset + open);
                let lines = code[offset..end]
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with("//"))
                    .count();
                out.push((name, lines));
            }
        }
        offset += line.len();
    }
    out
}

fn too_big(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let loc = lines_of_code(text);
    if loc > MAX_FILE_CODE {
        out.push(format!("{loc} lines of code (at most {MAX_FILE_CODE})"));
    }
    for (name, lines) in functions(text) {
        if lines > MAX_FN_LINES {
            out.push(format!(
                "fn {name} is {lines} lines (at most {MAX_FN_LINES})"
            ));
        }
    }
    out
}

#[test]
fn no_file_or_function_is_over_its_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in MEASURED {
        rust_files(&root.join(dir), &mut files);
    }
    let mut found = Vec::new();
    for f in files {
        let name = f
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        for v in too_big(&std::fs::read_to_string(&f).unwrap()) {
            found.push(format!("{name}: {v}; split it by concern"));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_check_measures_files_and_functions() {
    let body = "    let x = '{';\n    let s = \"}\";\n    // }\n".repeat(51);
    let long = format!("pub(crate) async fn long(a: u8) -> u8 {{\n{body}}}\n");
    assert_eq!(functions(&long), vec![("long".to_string(), 104)]);
    assert_eq!(too_big(&long).len(), 1);
    let in_tests = format!("#[cfg(test)]\nmod tests {{\n{long}}}\n");
    assert_eq!(functions(&in_tests), vec![("long".to_string(), 104)]);
    let short = "fn short() {\n\n    // why\n    1\n}\nfn decl();\n";
    assert_eq!(functions(short), vec![("short".to_string(), 3)]);
    let file = format!(
        "{}#[cfg(test)]\nmod tests {{\n{}}}\n",
        "let a = 1;\n\n// c\n".repeat(200),
        "x\n".repeat(298)
    );
    assert_eq!(lines_of_code(&file), 501, "unit tests count");
    assert_eq!(
        too_big(&file),
        vec!["501 lines of code (at most 500)".to_string()]
    );
    assert!(too_big(&"let a = 1;\n".repeat(500)).is_empty());
}

/// The module-file convention of docs/ARCHITECTURE.md: a module with files of its own is
/// `x/mod.rs`, never `x.rs` beside a directory `x/`.
#[test]
fn every_module_with_files_of_its_own_is_a_directory_with_mod_rs() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let paired: Vec<String> = files
        .iter()
        .filter(|f| f.with_extension("").is_dir())
        .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    assert!(
        paired.is_empty(),
        "beside a directory of the same name (git mv x.rs x/mod.rs): {paired:?}"
    );
}
