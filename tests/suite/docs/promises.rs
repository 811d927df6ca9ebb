//! SECURITY.md binds each promise to the tests that hold it, by name: a test renamed or
//! removed must not leave a promise naming a test that no longer runs.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.map(|e| e.expect("directory entry").path()) {
        if entry.is_dir() && !entry.ends_with("target") {
            sources(&entry, into);
        } else if entry.extension().is_some_and(|x| x == "rs") {
            into.push(entry);
        }
    }
}

/// A backticked word shaped like a test's name: snake case of four words or more, the
/// last segment of a path (`module::tests::name`). Metric names (`spokekeeper_...`) are
/// not test names.
fn test_names(text: &str) -> Vec<&str> {
    let mut names: Vec<&str> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|quoted| quoted.rsplit("::").next())
        .filter(|w| {
            w.split('_').count() >= 4
                && w.starts_with(|c: char| c.is_ascii_lowercase())
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && !w.starts_with("spokekeeper_")
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[test]
fn every_test_security_md_names_exists() {
    let security = std::fs::read_to_string(root().join("SECURITY.md")).expect("SECURITY.md");
    let mut files = Vec::new();
    for dir in ["src", "tests", "lab", "benches"] {
        sources(&root().join(dir), &mut files);
    }
    let code: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect();
    let names = test_names(&security);
    assert!(names.len() > 100, "SECURITY.md names {} tests", names.len());
    let missing: Vec<&&str> = names
        .iter()
        .filter(|name| {
            !code.contains(&format!("fn {name}(")) && !code.contains(&format!("fn {name}<"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "SECURITY.md names tests that do not exist (renamed? removed?): {missing:?}"
    );
}

#[test]
fn test_names_are_read_from_backticks_and_paths_only() {
    let text = "held (`a::tests::one_two_three_four`, `five_six_seven_eight`), not \
                five_six_seven_nine, `spokekeeper_sealing_cert_trusted`, `short_name`, \
                `Capital_case_is_not_one`";
    assert_eq!(
        test_names(text),
        ["five_six_seven_eight", "one_two_three_four"]
    );
}
