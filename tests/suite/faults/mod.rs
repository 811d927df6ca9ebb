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

/// SIGKILL of spokekeeper: `system(\"kill -9 \" sk)` in the filter. Cut of the stream
/// (git reads its end, spokekeeper lives): `exit 1`.
const KILL: &str = "system(\"kill -9 \" sk)";
const CUT: &str = "exit 1";

/// A child process killed and reaped when dropped (also when the test panics).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

mod publish;
