//! SECURITY.md's promise that every file spokekeeper reads from the fleet repo clone is
//! read through one confined, size-capped reader (`fsutil::read_under`: no symbolic link
//! followed below the clone, at most `fsutil::MAX_FILE_BYTES` of a regular file), kept
//! true: reads `src/` and fails when code outside the reader opens or reads a file by any
//! other call, unless the file is listed here with what it reads, which is never in the
//! clone. Comments and unit-test modules are skipped.

use std::path::Path;

/// Calls that read a file's content (std and tokio alike).
const READS: [&str; 5] = [
    "fs::read(",
    "fs::read_to_string(",
    "File::open(",
    "OpenOptions::new(",
    "read_to_end(",
];

/// The reads allowed elsewhere: file, call, and what it reads (never a file in the clone).
const ALLOWED: [(&str, &str, &str); 19] = [
    ("fsutil.rs", "OpenOptions::new(", "the reader itself"),
    (
        "fsutil.rs",
        "File::open(",
        "a directory, opened to fsync it",
    ),
    ("fsutil.rs", "read_to_end(", "the reader itself, capped"),
    (
        "config/mod.rs",
        "fs::read_to_string(",
        "spokekeeper.yaml, the operator's",
    ),
    (
        "cli/add/mod.rs",
        "fs::read_to_string(",
        "spokekeeper.yaml, to edit it",
    ),
    (
        "cli/add/readonly.rs",
        "OpenOptions::new(",
        "spokekeeper.yaml, opened for writing to learn whether add may edit it, never read",
    ),
    (
        "daemon/lease.rs",
        "fs::read_to_string(",
        "the pod's service-account namespace file",
    ),
    (
        "forge/mod.rs",
        "fs::read_to_string(",
        "repo.forge.token_file, the operator's",
    ),
    (
        "spoke/extract.rs",
        "File::open(",
        "a `source: local` kubeconfig on this host",
    ),
    (
        "repo/mod.rs",
        "OpenOptions::new(",
        "the clone's lock file under .git, opened to lock, never read",
    ),
    (
        "seal/sops/keys.rs",
        "read_to_end(",
        "a data key being decrypted, in memory",
    ),
    (
        "cli/seal.rs",
        "File::open(",
        "input named on `spokekeeper seal`'s command line: it has no clone",
    ),
    (
        "cli/seal.rs",
        "fs::read(",
        "files named on `spokekeeper seal`'s command line: it has no clone",
    ),
    (
        "cli/seal.rs",
        "fs::read_to_string(",
        "files named on `spokekeeper seal`'s command line: it has no clone",
    ),
    (
        "cli/inspect.rs",
        "File::open(",
        "a file named on its command line",
    ),
    (
        "cli/inspect.rs",
        "read_to_end(",
        "a file named on its command line, capped",
    ),
    (
        "federate/issuer/mod.rs",
        "fs::read(",
        "credential.federated.issuer_ca, the host's file beside spokekeeper.yaml",
    ),
    (
        "cli/demo/node.rs",
        "fs::read_to_string(",
        "the demo's node: its ssh keys and sshd log, in the demo's own directory",
    ),
    (
        "cli/demo/federated.rs",
        "fs::read_to_string(",
        "the demo's node: the AuthenticationConfiguration it shows, in the demo's own directory",
    ),
];

/// The lines of `text` before its unit-test module, comments cut: (line number, code).
fn code_lines(text: &str) -> Vec<(usize, String)> {
    super::size::outside_tests(text)
        .lines()
        .enumerate()
        .map(|(n, line)| {
            let code = line.find("//").map_or(line, |at| &line[..at]);
            (n + 1, code.to_string())
        })
        .collect()
}

/// Every read outside [`ALLOWED`] ("src/FILE:LINE: CALL"), and the entries of it used.
fn other_reads(src: &Path) -> (Vec<String>, Vec<usize>) {
    let mut files = Vec::new();
    super::size::rust_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    let mut used = Vec::new();
    for path in files {
        let rel = path
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        // A unit-test module in its own file.
        if rel.ends_with("/tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in code_lines(&text) {
            for call in READS.iter().filter(|c| line.contains(*c)) {
                match ALLOWED.iter().position(|(f, c, _)| *f == rel && c == call) {
                    Some(i) => used.push(i),
                    None => found.push(format!("src/{rel}:{n}: {call}")),
                }
            }
        }
    }
    (found, used)
}

#[test]
fn every_file_read_in_the_clone_goes_through_the_one_confined_capped_reader() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (found, used) = other_reads(&src);
    assert!(
        found.is_empty(),
        "files read by another call than spokekeeper::fsutil::read_under (which refuses links \
         in the fleet repo clone and caps the size); use it, or list the file in ALLOWED with \
         why what it reads is never in the clone:\n{}",
        found.join("\n")
    );
    // A listed file that no longer reads anything is listed for nothing.
    for (i, (file, call, _)) in ALLOWED.iter().enumerate() {
        assert!(used.contains(&i), "src/{file} has no {call}: unlist it");
    }
}

#[test]
fn the_scan_finds_reads_and_skips_comments_and_unit_tests() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("rotate")).unwrap();
    std::fs::write(
        src.join("rotate/x.rs"),
        "// std::fs::read(p) in a comment\nfn a() { let t = std::fs::read_to_string(p); }\nfn b() { tokio::fs::read(p).await; } // fs::read(\n#[cfg(test)]\nmod tests {\n    fn c() { std::fs::read(p); }\n}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("rotate/tests.rs"),
        "fn d() { std::fs::read(p); }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("fsutil.rs"),
        "fn r() { std::fs::OpenOptions::new(); }\n",
    )
    .unwrap();
    let (found, used) = other_reads(src);
    assert_eq!(
        found,
        [
            "src/rotate/x.rs:2: fs::read_to_string(",
            "src/rotate/x.rs:3: fs::read(",
        ]
    );
    assert_eq!(used, [0], "fsutil.rs's OpenOptions::new(");
}
