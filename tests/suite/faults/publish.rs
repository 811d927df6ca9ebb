//! Faults while committing and pushing: a rejected or unreachable remote, a full disk, a kill between commit and push or inside the fast-import stream, two runs at once.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn push_rejected() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed = fleet.remote_file(0);
    let hook = fleet.remote.join("hooks/pre-receive");
    script(&hook, "echo 'main is protected' >&2\nexit 1\n");
    let (code, report, _) = fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 1);
    let repo_error = report["repo_error"].as_str().unwrap();
    assert!(repo_error.starts_with("push: "), "{report}");
    assert!(repo_error.contains("main is protected"), "{report}");
    assert_eq!(action(&report, 0), "rotated", "committed locally: {report}");
    intact(&fleet, 0, &committed).await;
    std::fs::remove_file(&hook).unwrap();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["pushed"], true, "the kept commit went out");
    assert_eq!(action(&report, 0), "healthy", "kept, not redone");
    assert_ne!(fleet.remote_file(0), committed);
    authenticates(&fleet.unsealed(0)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn remote_unreachable() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed = fleet.remote_file(0);
    let moved = fleet.dir.path().join("moved.git");
    std::fs::rename(&fleet.remote, &moved).unwrap();
    let (code, report, _) = fleet.rotate_json(&["--all", "--force"]);
    std::fs::rename(&moved, &fleet.remote).unwrap();
    assert_eq!(code, 1);
    let repo_error = report["repo_error"].as_str().unwrap();
    assert!(repo_error.starts_with("push: "), "{report}");
    assert!(
        repo_error.contains("fleet.git"),
        "names the remote: {report}"
    );
    assert_eq!(action(&report, 0), "rotated", "committed locally: {report}");
    assert_eq!(unpushed(&fleet), 1);
    intact(&fleet, 0, &committed).await;
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["pushed"], true);
    assert_eq!(action(&report, 0), "healthy", "kept, not redone");
    assert_ne!(fleet.remote_file(0), committed);
    authenticates(&fleet.unsealed(0)).await;
    fleet.assert_no_plaintext();
}

#[tokio::test(flavor = "multi_thread")]
async fn disk_full_while_writing() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed = fleet.remote_file(0);
    // spokekeeper's clone moves to a 1 MiB tmpfs.
    let disk = Tmpfs::mount(fleet.dir.path().join("small"), "1m");
    let clone = disk.0.join("clone");
    support::git::clone(&fleet.remote, &clone);
    set_config(
        &fleet,
        &format!("path: {}\n", fleet.clone.display()),
        &format!("path: {}\n", clone.display()),
    );
    assert_eq!(fleet.rotate(&["--all"]).0, 0, "healthy from the new clone");
    // Fill it, then free one page: less than a sealed manifest needs.
    let filler = disk.0.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 4096];
        while f.write_all(&block).is_ok() {}
        let len = f.metadata().unwrap().len();
        f.set_len(len.saturating_sub(4096)).unwrap();
    }
    let (code, report, _) = fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 1);
    assert_eq!(report["spokes"][0]["stage"], "commit", "{report}");
    assert!(
        error(&report, 0).contains("No space left on device"),
        "{report}"
    );
    intact(&fleet, 0, &committed).await;
    assert_eq!(
        git(
            &clone,
            &["show", "HEAD:fluxcd/spoke0-kubeconfig-sealed.yaml"]
        ),
        committed,
        "the clone still holds the committed credential"
    );
    std::fs::remove_file(&filler).unwrap();
    let (code, report, err) = fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated");
    assert_eq!(report["pushed"], true);
    authenticates(&fleet.unsealed(0)).await;
    assert_clean_clone(&clone);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_between_commit_and_push() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed: Vec<String> = (0..2).map(|i| fleet.remote_file(i)).collect();
    let pushed_before = fleet.remote_log().len();
    let hook = fleet.clone.join(".git/hooks/pre-push");
    kill_hook(&hook);
    let (code, out, err) = fleet.rotate(&["--all", "--force"]);
    assert_eq!(code, -1, "killed by SIGKILL: {out}\n{err}");
    assert!(!hook.exists(), "the hook fired");
    assert_eq!(unpushed(&fleet), 2, "both commits made, none pushed");
    for (i, c) in committed.iter().enumerate() {
        intact(&fleet, i, c).await;
    }
    fleet.assert_no_plaintext();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["pushed"], true, "the unpushed commits went out");
    assert_eq!(fleet.remote_log().len(), pushed_before + 2);
    for (i, old) in committed.iter().enumerate() {
        assert_eq!(action(&report, i), "healthy", "kept, not redone: {report}");
        assert_ne!(&fleet.remote_file(i), old);
        authenticates(&fleet.unsealed(i)).await;
    }
    assert_clean_clone(&fleet.clone);
}

/// A `git` whose `fast-import` reads its stream through a filter (awk reading line by
/// line: `-W interactive`): at the `nth` line starting with `line`, `then` runs (awk),
/// before the line goes on.
fn stream_cut(line: &str, nth: usize, then: &str) -> GitWrapper {
    GitWrapper::new(&format!(
        "sk=$PPID\nawk -W interactive -v sk=\"$sk\" -v at='{line}' -v n={nth} 'index($0, at) == 1 && ++seen == n {{ {then} }} {{ print; fflush() }}' | '{git}' \"$@\"\nexit $?",
        git = support::git::real_git().display(),
    ))
}

/// Both spokes rebuilt, so the tick commits spoke0 and then spoke1 in one stream; the
/// stream is cut by `wrapper`. Returns the fleet and the credentials committed before.
async fn cut_mid_stream(wrapper: &GitWrapper) -> (Fleet, Vec<String>, (i32, String, String)) {
    let mut fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed: Vec<String> = (0..2).map(|i| fleet.remote_file(i)).collect();
    for node in &mut fleet.nodes {
        node.rebuild();
    }
    fleet.path = Some(wrapper.path());
    let before = git(&fleet.clone, &["rev-parse", "HEAD"]);
    let ran = fleet.rotate(&["-o", "json", "--all"]);
    fleet.path = None;
    assert_eq!(
        git(&fleet.clone, &["rev-parse", "HEAD"]),
        before,
        "no commit of the stream moved the branch: {ran:?}"
    );
    assert_eq!(unpushed(&fleet), 0);
    for (i, c) in committed.iter().enumerate() {
        // The rebuilt nodes no longer accept it: intact is all it can be.
        assert_eq!(
            &fleet.remote_file(i),
            c,
            "the committed credential is intact"
        );
    }
    assert!(!fleet.clone.join(".git/index.lock").exists());
    assert!(!fleet.clone.join(".git/refs/heads/main.lock").exists());
    fleet.assert_no_plaintext();
    (fleet, committed, ran)
}

/// The run after the cut rotates both spokes and leaves the clone clean.
async fn recovers(fleet: &Fleet) {
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    for i in 0..2 {
        assert_eq!(
            report["spokes"][i]["reason"]["kind"], "ca-changed",
            "{report}"
        );
        assert_eq!(action(&report, i), "rotated");
        authenticates(&fleet.unsealed(i)).await;
    }
    assert_eq!(report["pushed"], true);
    assert_clean_clone(&fleet.clone);
    git(&fleet.clone, &["fsck", "--no-dangling", "--no-progress"]);
}

/// spokekeeper dies between the stream's two commits (spoke0's made and its id read,
/// spoke1's not begun): git reads the stream's end without `done` and moves nothing.
#[tokio::test(flavor = "multi_thread")]
async fn sigkill_between_two_commits_of_the_stream() {
    crate::support::requires!(ROOT);
    let wrapper = stream_cut("get-mark :1", 1, KILL);
    let (fleet, _, (code, out, err)) = cut_mid_stream(&wrapper).await;
    assert_eq!(code, -1, "killed by SIGKILL: {out}\n{err}");
    let modified = git(
        &fleet.clone,
        &["status", "--porcelain", "--untracked-files=no"],
    );
    assert!(
        modified.contains("spoke0-kubeconfig-sealed.yaml"),
        "spoke0's file written, not committed: {modified}"
    );
    recovers(&fleet).await;
}

/// spokekeeper dies inside the stream's second commit.
#[tokio::test(flavor = "multi_thread")]
async fn sigkill_mid_commit_in_the_stream() {
    crate::support::requires!(ROOT);
    let wrapper = stream_cut("commit refs/heads/", 2, KILL);
    let (fleet, _, (code, out, err)) = cut_mid_stream(&wrapper).await;
    assert_eq!(code, -1, "killed by SIGKILL: {out}\n{err}");
    recovers(&fleet).await;
}

/// git's stream ends inside the second commit while spokekeeper lives: both spokes fail
/// at commit (spoke0's commit is lost with the stream), the working tree is put back,
/// and the next run rotates both.
#[tokio::test(flavor = "multi_thread")]
async fn the_stream_cut_mid_commit_fails_its_spokes_and_puts_the_clone_back() {
    crate::support::requires!(ROOT);
    let wrapper = stream_cut("commit refs/heads/", 2, CUT);
    let (fleet, _, (code, out, err)) = cut_mid_stream(&wrapper).await;
    assert_eq!(code, 1, "{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    for i in 0..2 {
        assert_eq!(report["spokes"][i]["stage"], "commit", "{report}");
        assert!(error(&report, i).contains("fast-import"), "{report}");
    }
    assert_clean_clone(&fleet.clone);
    recovers(&fleet).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_runs_at_once_never_interleave() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    // The first run stops as its commits begin until the test lets it go on.
    let inside = fleet.dir.path().join("inside");
    let go_on = fleet.dir.path().join("go-on");
    let wrapper = GitWrapper::new(&format!(
        "touch {i}\nn=0\nwhile [ ! -e {g} ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done",
        i = inside.display(),
        g = go_on.display()
    ));
    let mut first = Running(
        Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
            .env("PATH", wrapper.path())
            .arg("--config")
            .arg(&fleet.config)
            .args(["rotate", "--all"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !inside.exists() {
        assert!(
            Instant::now() < deadline,
            "the first run never reached its commit"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, _, err) = fleet.rotate(&["--all"]);
    assert_eq!(code, 1);
    assert!(err.contains("another spokekeeper run holds"), "{err}");
    std::fs::write(&go_on, "").unwrap();
    let status = first.0.wait().unwrap();
    assert!(status.success(), "the first run finished: {status}");
    assert_eq!(
        fleet.remote_log().len(),
        2,
        "one commit, from the first run"
    );
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "healthy");
    authenticates(&fleet.unsealed(0)).await;
    assert_clean_clone(&fleet.clone);
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_mid_write_by_the_file_size_limit() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed = fleet.remote_file(0);
    // RLIMIT_FSIZE of 4 KiB: writing the sealed manifest (larger) raises SIGXFSZ, which
    // kills the process mid-write.
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -f 8; exec \"$0\" --config \"$1\" rotate --all --force")
        .arg(env!("CARGO_BIN_EXE_spokekeeper"))
        .arg(&fleet.config)
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(rustix::process::Signal::XFSZ.as_raw()),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let leftovers: Vec<String> = std::fs::read_dir(fleet.clone.join("fluxcd"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".spokekeeper-"))
        .collect();
    assert_eq!(
        leftovers.len(),
        1,
        "a partial temporary file: {leftovers:?}"
    );
    intact(&fleet, 0, &committed).await;
    assert_eq!(
        std::fs::read_to_string(fleet.output(0)).unwrap(),
        committed,
        "the file itself was never half-written"
    );
    fleet.assert_no_plaintext();
    let (code, report, err) = fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated");
    authenticates(&fleet.unsealed(0)).await;
    assert_clean_clone(&fleet.clone);
}
