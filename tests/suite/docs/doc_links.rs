//! The documentation's relative links: README.md, SECURITY.md and docs/*.md link each
//! other by path and `#anchor`; a page moved or a heading renamed must not leave a link
//! pointing at nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, SECURITY.md and every docs/*.md and docs/history/*.md.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md"), root().join("SECURITY.md")];
    for dir in ["docs", "docs/history"] {
        let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap_or_else(|e| panic!("read {dir}/: {e}"))
            .map(|e| e.expect("docs/ entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        docs.sort();
        pages.extend(docs);
    }
    pages
}

/// The lines outside fenced code blocks, with their 1-based numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// The targets of inline links `[text](target)` on a line, outside `code spans`.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '`' => in_code = !in_code,
            ']' if !in_code && chars.get(i + 1) == Some(&'(') => {
                let start = i + 2;
                if let Some(len) = chars[start..].iter().position(|&c| c == ')') {
                    out.push(chars[start..start + len].iter().collect());
                    i = start + len;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens;
/// a repeated heading gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line) in prose(text) {
        let Some(title) = line.trim_start_matches('#').strip_prefix(' ') else {
            continue;
        };
        if !line.starts_with('#') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while seen.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        seen.insert(unique);
    }
    seen
}

/// Every relative link of every page as (page, line, target).
fn relative_links() -> Vec<(PathBuf, usize, String)> {
    let mut out = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        for (n, line) in prose(&text) {
            for target in link_targets(line) {
                let external = ["http://", "https://", "mailto:"]
                    .iter()
                    .any(|s| target.starts_with(s));
                if !external {
                    out.push((page.clone(), n, target));
                }
            }
        }
    }
    out
}

fn resolve(page: &Path, target: &str) -> (PathBuf, Option<String>) {
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a.to_string())),
        None => (target, None),
    };
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().expect("page dir").join(path)
    };
    (file, anchor)
}

fn shown(page: &Path) -> String {
    page.strip_prefix(root())
        .unwrap_or(page)
        .display()
        .to_string()
}

#[test]
fn every_relative_link_in_the_docs_points_at_an_existing_file() {
    let links = relative_links();
    assert!(
        links.iter().any(|(p, _, _)| p.ends_with("README.md")),
        "the README links no page"
    );
    let broken: Vec<String> = links
        .iter()
        .filter(|(page, _, target)| !resolve(page, target).0.exists())
        .map(|(page, n, target)| format!("{}:{n}: {target}", shown(page)))
        .collect();
    assert!(
        broken.is_empty(),
        "links to missing files:\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_anchor_in_the_docs_names_a_heading_of_its_page() {
    let mut broken = Vec::new();
    for (page, n, target) in relative_links() {
        let (file, Some(anchor)) = resolve(&page, &target) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // a missing file is the other test's finding
        };
        if !anchors(&text).contains(&anchor) {
            broken.push(format!("{}:{n}: {target}", shown(&page)));
        }
    }
    assert!(
        broken.is_empty(),
        "anchors naming no heading:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_readme_is_at_most_300_lines() {
    let text = std::fs::read_to_string(root().join("README.md")).expect("read README.md");
    let lines = text.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines: move detail to docs/ and link it"
    );
}

#[test]
fn github_anchors_drop_punctuation_and_number_repeats() {
    let text = "# A, b (c)\n```\n# not a heading\n```\n## `x` [-o json]\n## A, b (c)\n";
    let got: Vec<String> = anchors(text).into_iter().collect();
    assert_eq!(got, ["a-b-c", "a-b-c-1", "x--o-json"]);
}
