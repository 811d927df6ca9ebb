//! `spokekeeper run` as a child process for tests: its log, its /metrics, and a kill on
//! drop so no daemon outlives its test.

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

impl Daemon {
    /// `spokekeeper --config CONFIG run --now --listen 127.0.0.1:0 EXTRA...`.
    pub fn start(config: &Path, extra: &[&str]) -> Daemon {
        let mut child = Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
            .arg("--config")
            .arg(config)
            .args(["run", "--now", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env("SPOKEKEEPER_LOG", "spokekeeper=info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start spokekeeper run");
        let lines = capture_stderr(&mut child);
        Daemon { child, lines }
    }

    /// The process id, e.g. to read its /proc/PID/status.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        let lines = self.lines.lock().unwrap();
        let all: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
        all.join("\n")
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
