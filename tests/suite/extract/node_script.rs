//! The federated recipe's script run by /bin/sh on this host, its paths moved into a
//! scratch directory: the refusals and the odd targets a node's sshd test leaves aside.

use crate::support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use spokekeeper::spoke::Distro;
use spokekeeper::spoke::recipe::node_script;

/// Runs the k3s script, localized under `dir`, with `args` and `input` on stdin.
fn run(dir: &Path, args: &[&str], input: &[u8]) -> Output {
    let script = node_script(Distro::K3s)
        .replace(
            "/etc/rancher/k3s/k3s.yaml",
            &format!("{}/k3s.yaml", dir.display()),
        )
        .replace(
            "/etc/rancher/k3s/spokekeeper",
            &format!("{}/sk", dir.display()),
        );
    let path = dir.join("spokekeeper-node");
    std::fs::write(&path, script).unwrap();
    let mut child = Command::new("/bin/sh")
        .arg(&path)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(input);
    drop(stdin);
    child.wait_with_output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn anything_but_the_three_commands_is_refused_in_one_line_with_its_own_exit_code() {
    let scratch = support::scratch_dir();
    std::fs::write(scratch.path().join("k3s.yaml"), b"kind: Config\n").unwrap();
    let read = run(scratch.path(), &["read"], b"");
    assert_eq!(
        (read.status.code(), &read.stdout[..]),
        (Some(0), &b"kind: Config\n"[..])
    );
    for args in [
        &["cat /etc/shadow"][..],
        &["read extra"],
        &["read", "extra"],
        &[],
        &[""],
        &["write-authentication-config; id"],
    ] {
        let out = run(scratch.path(), args, b"x\n");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("spokekeeper-node: refused: "),
            "{args:?}: {err}"
        );
    }
    assert!(!scratch.path().join("sk").exists(), "nothing written");
}

#[test]
fn odd_targets_are_replaced_or_refused_never_written_through() {
    let scratch = support::scratch_dir();
    let dir = scratch.path().join("sk");
    let file = dir.join("authentication-config.yaml");
    let write = |input: &[u8]| run(scratch.path(), &["write-authentication-config"], input);

    // A symlink to a directory: mv would move the file into it; the link is replaced.
    let elsewhere = scratch.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
    let out = write(b"one\n");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read(&file).unwrap(), b"one\n");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

    // A real directory at the target, or the directory a symlink: refused, unchanged.
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    let out = write(b"two\n");
    assert_eq!(out.status.code(), Some(73), "{}", stderr(&out));
    assert!(file.is_dir());
    std::fs::remove_dir(&file).unwrap();
    std::fs::remove_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
    let out = write(b"three\n");
    assert_eq!(out.status.code(), Some(73), "{}", stderr(&out));
    assert!(stderr(&out).contains("is a symlink"), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// `read-authentication-config-header` prints the first line of that one file, capped,
/// nothing when there is none, and reads through no symlink and nothing but a file.
#[test]
fn the_header_verb_prints_the_files_first_line_capped_and_reads_nothing_else() {
    let scratch = support::scratch_dir();
    let dir = scratch.path().join("sk");
    let file = dir.join("authentication-config.yaml");
    let header = || run(scratch.path(), &["read-authentication-config-header"], b"");
    let out = header();
    assert_eq!((out.status.code(), &out.stdout[..]), (Some(0), &b""[..]));

    let write = run(
        scratch.path(),
        &["write-authentication-config"],
        b"# first\nsecond\n",
    );
    assert_eq!(write.status.code(), Some(0), "{}", stderr(&write));
    let out = header();
    assert_eq!(
        (out.status.code(), &out.stdout[..]),
        (Some(0), &b"# first\n"[..])
    );
    let long = format!("{}\nsecond\n", "x".repeat(1000));
    run(
        scratch.path(),
        &["write-authentication-config"],
        long.as_bytes(),
    );
    let out = header();
    assert_eq!(out.stdout, "x".repeat(256).as_bytes(), "{}", stderr(&out));

    // A symlink in the file's place, or the directory's, is not followed.
    let secret = scratch.path().join("secret");
    std::fs::write(&secret, b"root:hash\n").unwrap();
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(&secret, &file).unwrap();
    let out = header();
    assert_eq!(out.status.code(), Some(66), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("is a symlink; nothing read"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    let out = header();
    assert_eq!(out.status.code(), Some(66), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is not a regular file"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir(&file).unwrap();
    std::fs::remove_dir(&dir).unwrap();
    let elsewhere = scratch.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("authentication-config.yaml"), b"theirs\n").unwrap();
    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
    let out = header();
    assert_eq!(out.status.code(), Some(66), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
}
