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
fn anything_but_the_two_commands_is_refused_in_one_line_with_its_own_exit_code() {
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
