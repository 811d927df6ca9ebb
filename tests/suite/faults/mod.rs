//! The fault matrix: each fault leaves every committed credential intact and valid,
//! reports clearly (naming the stage), and the next run recovers. Every case runs the
//! real binary against the lab (real sshd, real TLS, a real bare git remote).
//!
//! | fault | test |
//! | --- | --- |
//! | spoke unreachable | `spoke_unreachable` |
//! | sshd hangs mid-transfer | `sshd_hangs_mid_transfer` |
//! | API down | `api_down` |
//! | API answers 401 | `api_answers_401_to_a_foreign_client_certificate` |
//! | wrong host key | `wrong_host_key` |
//! | kubeconfig truncated mid-file | `kubeconfig_truncated_mid_file` |
//! | push rejected | `push_rejected` |
//! | remote unreachable | `remote_unreachable` |
//! | disk full while writing | `disk_full_while_writing` (tmpfs), `killed_mid_write_by_the_file_size_limit` (RLIMIT_FSIZE) |
//! | SIGKILL between commit and push | `sigkill_between_commit_and_push` |
//! | SIGKILL between two commits of the tick's stream | `sigkill_between_two_commits_of_the_stream` |
//! | SIGKILL mid-commit in the stream | `sigkill_mid_commit_in_the_stream` |
//! | git's stream cut mid-commit | `the_stream_cut_mid_commit_fails_its_spokes_and_puts_the_clone_back` |
//! | two `rotate` runs at once | `two_runs_at_once_never_interleave` |
//! | committed manifest corrupted by hand | `committed_manifest_corrupted_by_hand` |
//! | sealing certificate replaced (and confirmed) / expired | `sealing_certificate_replaced_and_confirmed_reseals_every_spoke`, `sealing_certificate_expired_is_refused_and_nothing_changes` |

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use support::NodeOptions;
use support::fleet::{Fleet, action, authenticates, vectors};
use support::git::{GitWrapper, clone, git};
use support::procs::pids_mentioning;

fn set_config(fleet: &Fleet, from: &str, to: &str) {
    let text = std::fs::read_to_string(&fleet.config).unwrap();
    assert!(text.contains(from), "{from} not in the config");
    std::fs::write(&fleet.config, text.replace(from, to)).unwrap();
}

fn error(report: &serde_json::Value, i: usize) -> String {
    report["spokes"][i]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("spoke {i} has no error: {report}"))
        .to_string()
}

/// Spoke i's committed credential is still `committed`, and it still authenticates.
async fn intact(fleet: &Fleet, i: usize, committed: &str) {
    assert_eq!(
        fleet.remote_file(i),
        committed,
        "the committed credential is intact"
    );
    authenticates(&fleet.unsealed(i)).await;
}

/// An executable script (a git hook, a forced command).
fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A hook that fires once: SIGKILLs the spokekeeper process it runs under (found by
/// walking up the parents).
fn kill_hook(path: &Path) {
    script(
        path,
        "rm -f \"$0\"\np=$PPID\nwhile [ \"$p\" -gt 1 ]; do\n  \
         if [ \"$(cat /proc/$p/comm)\" = spokekeeper ]; then kill -9 \"$p\"; exit 1; fi\n  \
         p=$(cut -d' ' -f4 /proc/$p/stat)\ndone\necho 'no spokekeeper above this hook' >&2\nexit 1\n",
    );
}

/// SSH logins the node's sshd accepted so far.
fn ssh_logins(node: &support::Node) -> usize {
    std::fs::read_to_string(node.dir.join("sshd.log"))
        .unwrap_or_default()
        .matches("Accepted publickey")
        .count()
}

fn unpushed(fleet: &Fleet) -> usize {
    git(&fleet.clone, &["rev-list", "--count", "origin/main..HEAD"])
        .trim()
        .parse()
        .unwrap()
}

fn assert_clean_clone(clone: &Path) {
    let status = git(clone, &["status", "--porcelain", "--ignored"]);
    assert!(status.trim().is_empty(), "leftovers in the clone: {status}");
    assert!(!clone.join(".git/index.lock").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn kubeconfig_truncated_mid_file() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::new(&[NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed = fleet.remote_file(0);
    fleet.nodes[0].rebuild();
    let full = fleet.nodes[0].kubeconfig_bytes();
    fleet.nodes[0].write_file("k3s.yaml", &full[..full.len() * 2 / 3]);
    let (code, report, _) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1);
    assert_eq!(
        report["spokes"][0]["reason"]["kind"], "ca-changed",
        "{report}"
    );
    assert_eq!(report["spokes"][0]["stage"], "validate", "{report}");
    assert_eq!(
        fleet.remote_file(0),
        committed,
        "the committed credential is intact"
    );
    fleet.nodes[0].write_file("k3s.yaml", &full);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated");
    authenticates(&fleet.unsealed(0)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn api_answers_401_to_a_foreign_client_certificate() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    // spoke0's node serves a kubeconfig whose client certificate belongs to spoke1's cluster.
    let mut parts = fleet.nodes[0].parts().clone();
    let foreign = fleet.nodes[1].parts();
    parts.client_chain_pem = foreign.client_chain_pem.clone();
    parts.client_key_pem = foreign.client_key_pem.clone();
    let server = format!("https://127.0.0.1:{}", fleet.nodes[0].api_port);
    let text = support::kubeconfig_yaml(&server, &parts, None, "");
    fleet.nodes[0].write_file("k3s.yaml", text.as_bytes());
    let (code, report, _) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1);
    assert_eq!(report["spokes"][0]["stage"], "validate");
    let error = report["spokes"][0]["error"].as_str().unwrap();
    assert!(error.contains("401 Unauthorized"), "{error}");
    assert!(
        !fleet.output(0).exists(),
        "a credential that does not work is never written"
    );
    assert_eq!(
        action(&report, 1),
        "rotated",
        "the other spoke is not affected"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn committed_manifest_corrupted_by_hand() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    // Someone edits the file on the remote and breaks it.
    let other = fleet.dir.path().join("editor");
    clone(&fleet.remote, &other);
    let file = other.join("fluxcd/spoke0-kubeconfig-sealed.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace("spokekeeper.io/ca-sha256", "spokekeeper.io/ca-sha265"),
    )
    .unwrap();
    git(
        &other,
        &[
            "-c",
            "user.name=e",
            "-c",
            "user.email=e@e",
            "commit",
            "--quiet",
            "-am",
            "hand edit",
        ],
    );
    git(&other, &["push", "--quiet", "origin", "HEAD:main"]);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        report["spokes"][0]["reason"]["kind"], "unreadable",
        "{report}"
    );
    assert!(
        report["spokes"][0]["reason"]["detail"]
            .as_str()
            .unwrap()
            .contains("ca-sha256"),
        "{report}"
    );
    assert_eq!(action(&report, 0), "rotated");
    authenticates(&fleet.unsealed(0)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sealing_certificate_replaced_and_confirmed_reseals_every_spoke() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let old = vectors().join("key/cert.pem");
    let new = vectors().join("other-key/tls.crt");
    // Without hub:, a new certificate is sealed to once sealing.sha256 confirms it.
    let fp = spokekeeper::seal::SealingKey::from_pem(
        &std::fs::read(&new).unwrap(),
        "new",
        time::OffsetDateTime::now_utc(),
    )
    .unwrap()
    .fingerprint()
    .to_string();
    set_config(
        &fleet,
        old.to_str().unwrap(),
        &format!("{}\n  sha256: {fp}", new.display()),
    );
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let keys = spokekeeper::seal::RecoveryKey::load_all(
        &std::fs::read(vectors().join("other-key/tls.key")).unwrap(),
        "other",
    )
    .unwrap();
    for i in 0..2 {
        assert_eq!(
            report["spokes"][i]["reason"]["kind"], "sealing-key-changed",
            "{report}"
        );
        let sealed =
            spokekeeper::seal::SealedSecret::parse(fleet.remote_file(i).as_bytes()).unwrap();
        let mut secret = sealed.unseal(&keys).expect("sealed to the new key");
        authenticates(&secret.data.remove("value").unwrap()).await;
    }
    assert!(fleet.remote_log()[0].contains("sealing key changed"));
}

#[tokio::test(flavor = "multi_thread")]
async fn sealing_certificate_expired_is_refused_and_nothing_changes() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed = fleet.remote_file(0);
    let expired = fleet.dir.path().join("expired.pem");
    // ring cannot generate RSA keys: sign with the vector key.
    let der = {
        use rsa::pkcs8::EncodePrivateKey;
        let k = spokekeeper::seal::RecoveryKey::load_all(
            &std::fs::read(vectors().join("key/tls.key")).unwrap(),
            "k",
        )
        .unwrap();
        k[0].private_key().to_pkcs8_der().unwrap()
    };
    let kp = rcgen::KeyPair::try_from(der.as_bytes()).unwrap();
    let mut params = rcgen::CertificateParams::new(vec![]).unwrap();
    params.not_before = time::OffsetDateTime::from_unix_timestamp(1_500_000_000).unwrap();
    params.not_after = time::OffsetDateTime::from_unix_timestamp(1_600_000_000).unwrap();
    std::fs::write(&expired, params.self_signed(&kp).unwrap().pem()).unwrap();
    set_config(
        &fleet,
        vectors().join("key/cert.pem").to_str().unwrap(),
        expired.to_str().unwrap(),
    );
    let (code, _, err) = fleet.rotate(&["--all", "--force"]);
    assert_eq!(code, 1);
    assert!(err.contains("expired on 2020-09-13T12:26:40Z"), "{err}");
    assert_eq!(fleet.remote_file(0), committed);
}

#[tokio::test(flavor = "multi_thread")]
async fn spoke_unreachable() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed = fleet.remote_file(0);
    // The whole node is down: the probe says so and nothing is touched.
    fleet.nodes[0].stop_api();
    fleet.nodes[0].stop_sshd();
    let (code, report, _) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1);
    assert_eq!(report["spokes"][0]["stage"], "probe", "{report}");
    assert!(error(&report, 0).contains("unreachable"), "{report}");
    assert_eq!(
        action(&report, 1),
        "healthy",
        "the other spoke is not affected"
    );
    // It comes back rebuilt, but sshd is still down: the rebuild is seen and the
    // extraction says why it cannot proceed.
    fleet.nodes[0].rebuild();
    fleet.nodes[0].start_api();
    let (code, report, _) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1);
    assert_eq!(
        report["spokes"][0]["reason"]["kind"], "ca-changed",
        "{report}"
    );
    assert_eq!(report["spokes"][0]["stage"], "extract", "{report}");
    assert!(error(&report, 0).contains("connection refused"), "{report}");
    assert_eq!(
        fleet.remote_file(0),
        committed,
        "the committed credential is intact"
    );
    fleet.nodes[0].start_sshd();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated");
    authenticates(&fleet.unsealed(0)).await;
    authenticates(&fleet.unsealed(1)).await;
    fleet.assert_no_plaintext();
}

#[tokio::test(flavor = "multi_thread")]
async fn sshd_hangs_mid_transfer() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::new(&[NodeOptions::default()]);
    set_config(
        &fleet,
        "connect_timeout: 5s }",
        "connect_timeout: 5s, command_timeout: 3s }",
    );
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed = fleet.remote_file(0);
    fleet.nodes[0].rebuild();
    // The node sends the first part of the file and then stalls with the session open.
    // It notices the session is gone when its keep-alive dot to stderr fails.
    let stall = fleet.nodes[0].dir.join("stall.sh");
    script(
        &stall,
        &format!(
            "head -c 700 {}\nwhile sleep 1; do printf . >&2 || exit 0; done\n",
            fleet.nodes[0].kubeconfig_path.display()
        ),
    );
    fleet.nodes[0].set_authorized_key_options("root", &format!("command=\"{}\"", stall.display()));
    let started = Instant::now();
    let (code, report, _) = fleet.rotate_json(&["--all"]);
    let took = started.elapsed();
    assert_eq!(code, 1);
    assert_eq!(report["spokes"][0]["stage"], "extract", "{report}");
    assert!(
        error(&report, 0).contains("did not finish within 3s; the session was cut off"),
        "{report}"
    );
    assert!(
        took < Duration::from_secs(15),
        "command_timeout ended it: {took:?}"
    );
    assert_eq!(
        fleet.remote_file(0),
        committed,
        "the committed credential is intact"
    );
    // The cut-off session really ended on the node too.
    let needle = stall.display().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pids_mentioning(&needle).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = pids_mentioning(&needle);
    for pid in &left {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(*pid).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    assert!(
        left.is_empty(),
        "the stalled remote command outlived its session: {left:?}"
    );
    fleet.nodes[0].set_authorized_key_options("root", "");
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated");
    authenticates(&fleet.unsealed(0)).await;
    fleet.assert_no_plaintext();
}

#[tokio::test(flavor = "multi_thread")]
async fn api_down() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed = fleet.remote_file(0);
    let logins = ssh_logins(&fleet.nodes[0]);
    // Rebuilt, and its API is not up yet.
    fleet.nodes[0].rebuild();
    fleet.nodes[0].stop_api();
    let (code, report, _) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1);
    assert_eq!(report["spokes"][0]["stage"], "probe", "{report}");
    assert!(error(&report, 0).contains("unreachable"), "{report}");
    assert_eq!(
        ssh_logins(&fleet.nodes[0]),
        logins,
        "no SSH while the API is down"
    );
    assert_eq!(
        fleet.remote_file(0),
        committed,
        "the committed credential is intact"
    );
    intact(&fleet, 1, &fleet.remote_file(1)).await;
    fleet.nodes[0].start_api();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        report["spokes"][0]["reason"]["kind"], "ca-changed",
        "{report}"
    );
    assert_eq!(action(&report, 0), "rotated");
    authenticates(&fleet.unsealed(0)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_host_key() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::new(&[NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let committed = fleet.remote_file(0);
    fleet.nodes[0].rebuild();
    fleet.nodes[0].rotate_host_key();
    // The table output, as an operator sees it.
    let (code, _, err) = fleet.rotate(&["--all"]);
    assert_eq!(code, 1);
    assert!(err.contains("spoke0: failed at extract: "), "{err}");
    assert!(err.contains("CHANGED"), "{err}");
    assert!(err.contains("ssh-keygen -R"), "says how to fix it: {err}");
    assert_eq!(
        fleet.remote_file(0),
        committed,
        "the committed credential is intact"
    );
    // The operator checks the new fingerprint and accepts it.
    let line = fleet.nodes[0].host_key_line();
    std::fs::write(&fleet.nodes[0].known_hosts_path, format!("{line}\n")).unwrap();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated");
    authenticates(&fleet.unsealed(0)).await;
}

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

/// A small tmpfs, unmounted (lazily, should something still use it) when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: PathBuf, size: &str) -> Tmpfs {
        std::fs::create_dir_all(&at).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .status()
            .unwrap();
        assert!(status.success(), "mount a tmpfs (the tests run as root)");
        Tmpfs(at)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
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

/// SIGKILL of spokekeeper: `system(\"kill -9 \" sk)` in the filter. Cut of the stream
/// (git reads its end, spokekeeper lives): `exit 1`.
const KILL: &str = "system(\"kill -9 \" sk)";
const CUT: &str = "exit 1";

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

/// A child process killed and reaped when dropped (also when the test panics).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
