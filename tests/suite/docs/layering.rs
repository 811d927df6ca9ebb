//! The layering of docs/ARCHITECTURE.md, kept true: reads `src/` and fails when a module
//! imports one above it or beside it, or when files of one module import each other in a
//! circle. Comments are skipped (doc links are not imports); unit tests inside a module
//! count, like the rest of its code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules of `src/`, from the top down. A module may import only modules in
/// layers below its own. The reasons are in docs/ARCHITECTURE.md.
const LAYERS: &[&[&str]] = &[
    // The binary's module (src/main.rs declares it): commands and their output, over the
    // library it imports as `spokekeeper::`; `cli/demo/` runs the demo (the lab crate, lab/).
    &["cli"],
    // `spokekeeper run`: schedule, leader election, endpoints.
    &["daemon"],
    // Renderers of a tick's report.
    &["metrics", "alerts"],
    // The tick: observe, decide, extract, validate, seal, publish, verify.
    &["rotate"],
    // Federated spokes: their trust of the hub, written, bound and proven.
    &["federate"],
    // What a tick talks to besides the spokes: the hub's API, forges, the spokes' CSR API.
    &["hub", "forge", "mint"],
    // Reaching a spoke; Sealed Secrets; the fleet repo; its Flux layout.
    &["spoke", "seal", "repo", "flux"],
    &["kubeconfig"],
    &["certs"],
    // spokekeeper.yaml: every layer reads it.
    &["config"],
    // Leaves anyone may use.
    &["secret", "text", "fsutil", "fingerprint"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The code of a Rust file without comments (line and block); string contents are kept,
/// which is harmless here: no string in `src/` spells a `crate::` path.
fn code(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_block = 0usize;
    for (n, line) in text.lines().enumerate() {
        let mut kept = String::new();
        let mut rest = line;
        loop {
            if in_block > 0 {
                match (rest.find("*/"), rest.find("/*")) {
                    (Some(e), Some(s)) if s < e => {
                        in_block += 1;
                        rest = &rest[s + 2..];
                    }
                    (Some(e), _) => {
                        in_block -= 1;
                        rest = &rest[e + 2..];
                    }
                    (None, _) => break,
                }
                continue;
            }
            let line_comment = rest.find("//");
            let block = rest.find("/*");
            match (line_comment, block) {
                (Some(l), b) if b.is_none_or(|b| l < b) => {
                    kept.push_str(&rest[..l]);
                    break;
                }
                (_, Some(b)) => {
                    kept.push_str(&rest[..b]);
                    in_block += 1;
                    rest = &rest[b + 2..];
                }
                (None, None) => {
                    kept.push_str(rest);
                    break;
                }
                (Some(_), None) => unreachable!("handled by the first arm"),
            }
        }
        out.push((n + 1, kept));
    }
    out
}

/// The first path segment after each `prefix` in `line` (`crate::a::b` -> `a`;
/// `crate::{a, b::c}` -> `a`, `b`).
fn segments_after(line: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => items.push(std::mem::take(&mut item)),
                    _ => item.push(c),
                }
            }
            items.push(item);
            for it in items {
                let name: String = it
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level module a file of `src/` belongs to (None: the crate roots).
fn module_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib" && name != "main").then_some(name)
}

/// Every import of a module above or beside the importer: "file:line: a imports b".
fn upward_imports(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (rel, text) in files {
        let Some(from) = module_of(rel) else { continue };
        let Some(from_layer) = layer_of(&from) else {
            continue;
        };
        for (n, line) in code(text) {
            for to in segments_after(&line, "crate::") {
                if to == from {
                    continue;
                }
                match layer_of(&to) {
                    Some(l) if l > from_layer => {}
                    Some(_) => found.push(format!(
                        "src/{}:{n}: {from} imports {to}, which is not below it",
                        rel.display()
                    )),
                    None => {}
                }
            }
        }
    }
    found
}

/// Circles among the files of one directory (a module's own file, `mod.rs` or `x.rs`
/// beside `x/`, declares and re-exports its children, so it is left out).
fn file_cycles(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut by_dir: BTreeMap<PathBuf, Vec<(String, &String)>> = BTreeMap::new();
    for (rel, text) in files {
        let Some(dir) = rel.parent() else { continue };
        if dir.as_os_str().is_empty() {
            continue;
        }
        let stem = rel.file_stem().unwrap().to_str().unwrap().to_string();
        if stem == "mod" {
            continue;
        }
        by_dir
            .entry(dir.to_path_buf())
            .or_default()
            .push((stem, text));
    }
    let mut found = Vec::new();
    for (dir, members) in by_dir {
        let names: BTreeSet<&str> = members.iter().map(|(s, _)| s.as_str()).collect();
        let module_path = dir
            .components()
            .map(|c| c.as_os_str().to_str().unwrap())
            .collect::<Vec<_>>()
            .join("::");
        let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (stem, text) in &members {
            for (_, line) in code(text) {
                let mut to = segments_after(&line, "super::");
                to.extend(segments_after(&line, &format!("crate::{module_path}::")));
                for t in to {
                    if let Some(t) = names.get(t.as_str())
                        && *t != stem.as_str()
                    {
                        edges.entry(stem.as_str()).or_default().insert(t);
                    }
                }
            }
        }
        for (a, outs) in &edges {
            for b in outs {
                if a < b && edges.get(b).is_some_and(|o| o.contains(a)) {
                    found.push(format!(
                        "src/{}: {a}.rs and {b}.rs import each other",
                        dir.display()
                    ));
                }
            }
        }
    }
    found
}

fn read_src() -> Vec<(PathBuf, String)> {
    let root = src();
    let mut paths = Vec::new();
    rust_files(&root, &mut paths);
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p.strip_prefix(&root).unwrap().to_path_buf(), text)
        })
        .collect()
}

#[test]
fn every_module_imports_only_modules_below_it() {
    let found = upward_imports(&read_src());
    assert!(
        found.is_empty(),
        "imports against the layering (tests/suite/docs/layering.rs LAYERS, docs/ARCHITECTURE.md):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_top_level_module_has_a_layer() {
    let mut missing: BTreeSet<String> = BTreeSet::new();
    for (rel, _) in read_src() {
        if let Some(m) = module_of(&rel)
            && layer_of(&m).is_none()
        {
            missing.insert(m);
        }
    }
    assert!(
        missing.is_empty(),
        "modules not placed in LAYERS (tests/suite/docs/layering.rs): {missing:?}"
    );
    for layer in LAYERS {
        for m in *layer {
            assert!(
                src().join(format!("{m}.rs")).is_file() || src().join(m).is_dir(),
                "LAYERS names {m}, which src/ does not have"
            );
        }
    }
}

#[test]
fn no_two_files_of_a_module_import_each_other() {
    let found = file_cycles(&read_src());
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_checks_catch_a_planted_upward_import_and_a_planted_circle() {
    let files = vec![
        (
            PathBuf::from("seal/key.rs"),
            "// crate::rotate in a comment is not an import\n/* crate::daemon */ use crate::certs;\nuse crate::{secret, rotate::Context};\n".to_string(),
        ),
        (
            PathBuf::from("spoke/ssh.rs"),
            "use super::extract::ExtractError;\n".to_string(),
        ),
        (
            PathBuf::from("spoke/extract.rs"),
            "use super::{MAX, ssh};\n".to_string(),
        ),
        (
            PathBuf::from("spoke/mod.rs"),
            "pub use extract::x; use super::ssh;\n".to_string(),
        ),
    ];
    assert_eq!(
        upward_imports(&files),
        vec!["src/seal/key.rs:3: seal imports rotate, which is not below it".to_string()]
    );
    assert_eq!(
        file_cycles(&files),
        vec!["src/spoke: extract.rs and ssh.rs import each other".to_string()]
    );
}
