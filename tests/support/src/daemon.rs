//! `spokekeeper run` as a child process for tests: its log, its /metrics, and a kill on
//! drop so no daemon outlives its test.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::logs::{Lines, capture_stderr};

pub struct Daemon {
    child: Child,
    lines: Lines,
}

/// `spokekeeper --config CONFIG ARGS...` with `envs` added and logging at info without
/// colour; its stderr is captured line by line.
pub fn spawn(config: &Path, args: &[&str], envs: &[(&str, &OsStr)]) -> (Child, Lines) {
    let mut child = Command::new(crate::bin())
        .arg("--config")
        .arg(config)
        .args(args)
        .envs(envs.iter().copied())
        .env("SPOKEKEEPER_LOG", "spokekeeper=info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start spokekeeper");
    let lines = capture_stderr(&mut child);
    (child, lines)
}

/// VmRSS and VmHWM (the peak) of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> (u64, u64) {
    let field = |name: &str| {
        crate::status_kib(pid, name).unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

impl Daemon {
    /// `spokekeeper --config CONFIG run --now --listen 127.0.0.1:0 EXTRA...`.
    pub fn start(config: &Path, extra: &[&str]) -> Daemon {
        let run = ["run", "--now", "--listen", "127.0.0.1:0"];
        Daemon::start_args(config, &[&run[..], extra].concat())
    }

    /// `spokekeeper --config CONFIG ARGS...`.
    pub fn start_args(config: &Path, args: &[&str]) -> Daemon {
        let (child, lines) = spawn(config, args, &[]);
        Daemon { child, lines }
    }

    /// The process id, e.g. to read its /proc/PID/status.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        super::logs::text(&self.lines)
    }

    /// Waits (up to `within`) until the log contains `needle`; panics with the log if not.
    pub fn wait_for(&self, needle: &str, within: Duration) -> String {
        let end = Instant::now() + within;
        loop {
            let log = self.log();
            if log.contains(needle) {
                return log;
            }
            assert!(
                Instant::now() < end,
                "no {needle:?} within {within:?}:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The address /metrics is served on, from the startup log line.
    pub fn addr(&self) -> SocketAddr {
        let log = self.wait_for("listen=", Duration::from_secs(30));
        log.split("listen=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no listen address in:\n{log}"))
    }

    /// GET /metrics, the whole HTTP answer.
    pub fn metrics(&self) -> String {
        let addr = self.addr();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `run --leader-elect --now --interval INTERVAL` replica on 127.0.0.1:0, as pod `name`
/// in `namespace`, holding its Lease through `kubeconfig`; `envs` added.
pub fn spawn_replica(
    config: &Path,
    kubeconfig: &Path,
    (name, namespace): (&str, &str),
    interval: &str,
    envs: &[(&str, &OsStr)],
) -> (Child, Lines) {
    let pod: [(&str, &OsStr); 3] = [
        ("KUBECONFIG", kubeconfig.as_os_str()),
        ("POD_NAME", name.as_ref()),
        ("POD_NAMESPACE", namespace.as_ref()),
    ];
    spawn(
        config,
        &[
            "run",
            "--leader-elect",
            "--now",
            "--interval",
            interval,
            "--listen",
            "127.0.0.1:0",
        ],
        &[&pod[..], envs].concat(),
    )
}
