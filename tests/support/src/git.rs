//! A fleet repo for tests: a real bare remote with one commit on main, and clones of it.

use std::path::{Path, PathBuf};
use std::process::Command;

use spokekeeper::config::RepoConfig;

/// `git -C DIR`, to add arguments to.
fn git_in(dir: &Path) -> Command {
    let mut command = Command::new("git");
    command.arg("-C").arg(dir);
    command
}

/// Runs git in `dir`; panics with git's stderr when it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_in(dir).args(args).output().expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every object of the repository `repo` (loose and packed, reachable or not):
/// (oid, type, content).
pub fn all_objects(repo: &Path) -> Vec<(String, String, Vec<u8>)> {
    let out = git_in(repo)
        .args(["cat-file", "--batch-all-objects", "--batch", "--unordered"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run git cat-file");
    assert!(
        out.status.success(),
        "git cat-file in {}: {}",
        repo.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    // "OID TYPE SIZE\nCONTENT\n" per object.
    let mut objects = Vec::new();
    let mut rest = &out.stdout[..];
    while !rest.is_empty() {
        let nl = rest.iter().position(|&b| b == b'\n').expect("header line");
        let header = std::str::from_utf8(&rest[..nl]).expect("header");
        let mut f = header.split(' ');
        let (oid, kind, size) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
        let size: usize = size.parse().expect("object size");
        objects.push((
            oid.to_string(),
            kind.to_string(),
            rest[nl + 1..nl + 1 + size].to_vec(),
        ));
        rest = &rest[nl + 1 + size + 1..];
    }
    objects
}

/// `git clone --quiet REMOTE DEST`: another working copy of a lab remote.
pub fn clone(remote: &Path, dest: &Path) {
    git(
        dest.parent().expect("a destination inside a directory"),
        &[
            "clone",
            "--quiet",
            remote.to_str().expect("utf-8 path"),
            dest.to_str().expect("utf-8 path"),
        ],
    );
}

/// `git commit --quiet -m MESSAGE` of what is staged in `dir`, as "t <t@t>": no user
/// config is needed on the machine.
pub fn commit(dir: &Path, message: &str) {
    git(
        dir,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "--quiet",
            "-m",
            message,
        ],
    );
}

/// Someone with push access sets the annotation `key` of the committed file `rel` to
/// `value` (the line must be there), through their own clone `theirs` of `remote`.
pub fn push_annotation(remote: &Path, theirs: &Path, rel: &str, key: &str, value: &str) {
    clone(remote, theirs);
    let file = theirs.join(rel);
    let text = std::fs::read_to_string(&file).expect("the committed file");
    let prefix = format!("{key}:");
    let edited: String = text
        .lines()
        .map(|l| match l.split_once(&prefix) {
            Some((indent, _)) => format!("{indent}{key}: \"{value}\"\n"),
            None => format!("{l}\n"),
        })
        .collect();
    assert_ne!(edited, text, "{key} was in {rel}");
    std::fs::write(&file, edited).expect("write the edited file");
    git(theirs, &["add", "-A"]);
    commit(theirs, "tidy annotations");
    git(theirs, &["push", "--quiet", "origin", "main"]);
}

/// The config spokekeeper opens `path` with: remote origin, branch main, pushing, direct
/// mode unless the test changes it, signing with `signing_key` when given.
pub fn repo_config(path: &Path, signing_key: Option<PathBuf>) -> RepoConfig {
    RepoConfig {
        path: path.to_path_buf(),
        remote: "origin".into(),
        branch: "main".into(),
        author: Some("spokekeeper <spokekeeper@example.org>".into()),
        push: true,
        mode: Default::default(),
        forge: None,
        signing_key,
    }
}

/// `dir/fleet.git` with a README committed on main, and `clones` clones of it
/// (`dir/clone0`, ...).
pub fn fleet_remote(dir: &Path, clones: usize) -> (PathBuf, Vec<PathBuf>) {
    let remote = dir.join("fleet.git");
    let remote_s = remote.to_str().expect("utf-8 path");
    git(
        dir,
        &[
            "init",
            "--quiet",
            "--bare",
            "--initial-branch=main",
            remote_s,
        ],
    );
    let seed = dir.join("seed");
    git(
        dir,
        &[
            "clone",
            "--quiet",
            remote_s,
            seed.to_str().expect("utf-8 path"),
        ],
    );
    std::fs::write(seed.join("README.md"), "fleet\n").expect("write README");
    git(&seed, &["add", "README.md"]);
    commit(&seed, "seed");
    git(&seed, &["push", "--quiet", "origin", "HEAD:main"]);
    let clones = (0..clones)
        .map(|i| {
            let c = dir.join(format!("clone{i}"));
            git(
                dir,
                &[
                    "clone",
                    "--quiet",
                    remote_s,
                    c.to_str().expect("utf-8 path"),
                ],
            );
            c
        })
        .collect();
    (remote, clones)
}

/// A fresh ed25519 key without a passphrase at `path` (and `path.pub`): what
/// repo.signing_key names in review mode.
pub fn signing_key(path: &Path) -> PathBuf {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "spokekeeper", "-f"])
        .arg(path)
        .output()
        .expect("run ssh-keygen");
    assert!(
        out.status.success(),
        "ssh-keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path.to_path_buf()
}

/// `git verify-commit COMMIT` in `dir`, trusting only the public half of `key`.
pub fn verifies_with(dir: &Path, key: &Path, commit: &str) -> bool {
    let public = std::fs::read_to_string(format!("{}.pub", key.display())).expect("the .pub file");
    let allowed = PathBuf::from(format!("{}.allowed", key.display()));
    std::fs::write(&allowed, format!("spokekeeper {public}")).expect("write allowed signers");
    git_in(dir)
        .arg("-c")
        .arg(format!("gpg.ssh.allowedSignersFile={}", allowed.display()))
        .args(["verify-commit", commit])
        .output()
        .expect("run git")
        .status
        .success()
}

/// A `git` first on PATH that logs each call's subcommand (`git -C DIR SUB ...`) and runs
/// the real git; `on_fast_import` is shell run before a `fast-import` goes on (it may
/// `exec` git itself, e.g. behind a filter of its stream).
pub struct GitWrapper {
    dir: tempfile::TempDir,
}

impl GitWrapper {
    pub fn new(on_fast_import: &str) -> GitWrapper {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let calls = dir.path().join("calls");
        let script = format!(
            "#!/bin/sh\nprintf '%s\\n' \"$3\" >> '{calls}'\nif [ \"$3\" = fast-import ]; then\n:\n{on_fast_import}\nfi\nexec '{git}' \"$@\"\n",
            calls = calls.display(),
            git = real_git().display(),
        );
        let path = dir.path().join("git");
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        GitWrapper { dir }
    }

    /// PATH with the wrapper first.
    pub fn path(&self) -> std::ffi::OsString {
        let mut path = self.dir.path().as_os_str().to_owned();
        path.push(":");
        path.push(std::env::var_os("PATH").unwrap_or_default());
        path
    }

    /// The subcommands run so far, in order; the log starts again.
    pub fn take_calls(&self) -> Vec<String> {
        let calls = self.dir.path().join("calls");
        let text = std::fs::read_to_string(&calls).unwrap_or_default();
        let _ = std::fs::remove_file(&calls);
        text.lines().map(String::from).collect()
    }
}

/// The git PATH finds now (a wrapper's own git).
pub fn real_git() -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("git"))
        .find(|p| p.is_file())
        .expect("git on PATH")
}
