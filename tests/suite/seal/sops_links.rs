//! A push that turns a sops input in the fleet repo (`sealing.age_recipients`' file,
//! `sealing.sops_config`'s `.sops.yaml`) into a symbolic link: to a file the daemon can
//! read that holds a forge token and an age identity, or to `/dev/zero`. The daemon's tick
//! fails at `seal` naming the file and the fix, and no sink it writes to (its log, the
//! webhook alert, the hub's Events, the Flux notification) nor `check` carries a byte of
//! the secret; `/dev/zero` is not read without bound (the daemon runs under a data limit
//! it would cross).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use spokekeeper_lab::webhook::Receiver;

use crate::support::daemon::{Daemon, rss_kib};
use crate::support::git::{commit, git};
use crate::verify::hub::{HubLab, lab};

const TOKEN: &str = "ghp_Zq9Xw2Lr7Tn4Vb6Mk1Hs8Pd3Fy5Gc0Jt2Ue7";
const HOOK_PATH: &str = "/hooks/links";
const FLUX_PATH: &str = "/";
/// The daemon's data segment may grow this much past where it starts: far more than a
/// tick needs, far less than the machine has.
const DATA_HEADROOM: u64 = 512 << 20;

/// A one-line token and an age identity, as the chart's forge token or a key file holds
/// them; and the identity's line.
fn secrets(dir: &Path) -> (PathBuf, String) {
    let id = age::x25519::Identity::generate();
    let line = age::secrecy::ExposeSecret::expose_secret(&id.to_string()).to_string();
    let file = dir.join("secrets.txt");
    std::fs::write(&file, format!("{TOKEN}\n{line}\n")).unwrap();
    (file, line)
}

/// Commits and pushes a link at `rel` in the lab's clone to `target`.
fn push_link(l: &HubLab, rel: &str, target: &Path) {
    let at = l.fleet.clone.join(rel);
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, &at).unwrap();
    git(&l.fleet.clone, &["add", "-A"]);
    commit(&l.fleet.clone, "keys: sops inputs");
    git(&l.fleet.clone, &["push", "--quiet", "origin", "HEAD:main"]);
}

/// What every sink received.
struct Sinks {
    log: String,
    webhook: Vec<Value>,
    flux: Vec<Value>,
    events: Vec<Value>,
    check: String,
}

impl Sinks {
    fn all(&self) -> Vec<(&'static str, String)> {
        let json = |v: &[Value]| serde_json::to_string(v).unwrap();
        vec![
            ("log", self.log.clone()),
            ("webhook", json(&self.webhook)),
            ("flux", json(&self.flux)),
            ("events", json(&self.events)),
            ("check", self.check.clone()),
        ]
    }
}

/// The lab's spoke0 in sops format with `sealing` lines, alerts to a webhook and Flux's
/// notification-controller (both recorded); the daemon, under a data limit, for two
/// ticks; then `check`.
async fn run_daemon(l: &HubLab, sealing: &str) -> Sinks {
    let hook = Receiver::start(HOOK_PATH).await;
    let flux = Receiver::start(FLUX_PATH).await;
    let alerts = format!(
        "alerts:\n  webhook: {}\n  flux:\n    address: {}\n",
        hook.url(),
        flux.url()
    );
    let yaml = l.builder().sealing(sealing).top(&alerts).yaml().replacen(
        "  - name: spoke0\n",
        "  - name: spoke0\n    sealing: {format: sops}\n",
        1,
    );
    std::fs::write(&l.fleet.config, yaml).unwrap();
    // No --now: the first tick waits one interval, long enough to set the limit first.
    let daemon = Daemon::start_args(
        &l.fleet.config,
        &["run", "--listen", "127.0.0.1:0", "--interval", "2s"],
    );
    daemon.wait_for("listen=", Duration::from_secs(30));
    limit_data(daemon.pid());
    let end = Instant::now() + Duration::from_secs(90);
    while daemon.log().matches("tick finished").count() < 2 {
        assert!(Instant::now() < end, "{}", daemon.log());
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", daemon.pid())).unwrap();
        assert!(!stat.contains(") Z "), "the daemon died: {}", daemon.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, peak) = rss_kib(daemon.pid());
    assert!(peak < 256 * 1024, "peak RSS {peak} KiB: {}", daemon.log());
    let log = daemon.log();
    drop(daemon);
    let (_, out, err) = l.fleet.run(&["check"]);
    let bodies = |r: &Receiver| -> Vec<Value> { r.posts().into_iter().map(|p| p.body).collect() };
    Sinks {
        log,
        webhook: bodies(&hook),
        flux: bodies(&flux),
        events: l.hub.events(),
        check: format!("{out}{err}"),
    }
}

/// RLIMIT_DATA of `pid`: where its data segment is now, plus [`DATA_HEADROOM`]. A read
/// without bound ends the daemon instead of the machine's memory.
fn limit_data(pid: u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let data_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmData:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    let limit = data_kib * 1024 + DATA_HEADROOM;
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::prlimit(
        Some(pid),
        rustix::process::Resource::Data,
        rustix::process::Rlimit {
            current: Some(limit),
            maximum: Some(limit),
        },
    )
    .unwrap();
}

/// Every sink: none holds any part of a secret; the log, the webhook alert, the hub's
/// Event, the Flux notification and `check` each name the link; the log, the alert and
/// `check` say the fix (an Event's note is cut at 1 KiB).
fn assert_named_not_leaked(sinks: &Sinks, secrets: &[&str], named: &str) {
    for (sink, text) in sinks.all() {
        for secret in secrets {
            // Any 12 characters of it would be a leak.
            for at in (0..secret.len().saturating_sub(12)).step_by(6) {
                let part = &secret[at..at + 12];
                assert!(!text.contains(part), "{sink} holds {part:?}: {text}");
            }
        }
        assert!(
            text.contains(&format!("{named} is a symbolic link")),
            "{sink} does not name {named}: {text}"
        );
    }
    for (sink, text) in [
        ("log", sinks.log.clone()),
        ("webhook", serde_json::to_string(&sinks.webhook).unwrap()),
        ("check", sinks.check.clone()),
    ] {
        assert!(
            text.contains("replace it with a regular file"),
            "{sink} says no fix: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipients_file_pushed_as_a_link_to_a_secret_leaks_it_to_no_sink() {
    crate::support::requires!(ROOT);
    let l = lab(1, "");
    let (file, identity) = secrets(l.fleet.dir.path());
    push_link(&l, "keys/age.txt", &file);
    let recipients = l.fleet.clone.join("keys/age.txt");
    let sinks = run_daemon(&l, &format!("  age_recipients: {}\n", recipients.display())).await;
    assert_named_not_leaked(&sinks, &[TOKEN, &identity], "keys/age.txt");
    assert!(
        sinks.log.contains("failed at seal"),
        "the tick fails at seal: {}",
        sinks.log
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sops_yaml_pushed_as_a_link_to_dev_zero_is_not_read_without_bound() {
    crate::support::requires!(ROOT);
    let l = lab(1, "");
    push_link(&l, ".sops.yaml", Path::new("/dev/zero"));
    let recipient = age::x25519::Identity::generate().to_public().to_string();
    let sealing = format!(
        "  age_recipients: [{recipient}]\n  sops_config: {}\n",
        l.fleet.clone.join(".sops.yaml").display()
    );
    let sinks = run_daemon(&l, &sealing).await;
    assert_named_not_leaked(&sinks, &[], ".sops.yaml");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sops_yaml_pushed_as_a_link_to_a_secret_leaks_it_to_no_sink() {
    crate::support::requires!(ROOT);
    let l = lab(1, "");
    let (file, identity) = secrets(l.fleet.dir.path());
    push_link(&l, ".sops.yaml", &file);
    let recipient = age::x25519::Identity::generate().to_public().to_string();
    let sealing = format!(
        "  age_recipients: [{recipient}]\n  sops_config: {}\n",
        l.fleet.clone.join(".sops.yaml").display()
    );
    let sinks = run_daemon(&l, &sealing).await;
    assert_named_not_leaked(&sinks, &[TOKEN, &identity], ".sops.yaml");
}
