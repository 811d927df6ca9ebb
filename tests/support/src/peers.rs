//! Debian's real observability peers for tests: Alertmanager, Prometheus and promtool.
//!
//! Each server runs on 127.0.0.1 with a port the OS picks (read back from its
//! "Listening on" log line), its own temporary config and storage, and Alertmanager's
//! cluster listener off; it is killed when dropped. A missing binary fails the test with
//! the fix (scripts/test installs the packages); only `--quick` skips a test that
//! declares it (`requires!`). Services the Debian
//! packages may have started are neither used nor touched.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::logs::{Lines, capture_stderr};
use super::requires::{ALERTMANAGER_BIN, PROMETHEUS_BIN, PROMTOOL_BIN};

/// Runs promtool with `args` in `dir`, `stdin` piped in.
pub fn run_promtool(dir: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(PROMTOOL_BIN.path())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// A server process with its log; killed on drop.
pub struct Peer {
    name: &'static str,
    child: Child,
    lines: Lines,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Peer {
    fn start(name: &'static str, mut cmd: Command, dir: tempfile::TempDir) -> Peer {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let lines = capture_stderr(&mut child);
        let mut peer = Peer {
            name,
            child,
            lines,
            addr: "127.0.0.1:0".parse().unwrap(),
            _dir: dir,
        };
        peer.addr = peer.listening();
        peer.wait_ready();
        peer
    }

    /// Both answer 503 between listening and being ready (Prometheus opens its TSDB).
    fn wait_ready(&self) {
        let end = Instant::now() + Duration::from_secs(30);
        while self.get("/-/ready").0 != 200 {
            assert!(
                Instant::now() < end,
                "{} not ready within 30s:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        let lines = self.lines.lock().unwrap();
        let all: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
        all.join("\n")
    }

    /// The port the OS picked, from `msg="Listening on" address=127.0.0.1:PORT`.
    fn listening(&mut self) -> SocketAddr {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let log = self.log();
            if let Some(addr) = log
                .lines()
                .filter(|l| l.contains("msg=\"Listening on\""))
                .find_map(|l| l.split("address=").nth(1))
                .and_then(|s| s.split_whitespace().next())
                .and_then(|s| s.parse().ok())
            {
                return addr;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited ({status}):\n{log}", self.name);
            }
            assert!(
                Instant::now() < end,
                "{} did not listen within 30s:\n{log}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// GET `path`: (status code, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(self.addr, path)
    }

    /// GET `path` and parse the JSON body; panics with the log on anything but 200.
    pub fn get_json(&self, path: &str) -> serde_json::Value {
        let (code, body) = self.get(path);
        assert_eq!(
            code,
            200,
            "{} GET {path}: {body}\n{}",
            self.name,
            self.log()
        );
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.0 GET (no chunking to undo): (status code, body).
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line from {addr}{path}: {head}"));
    (code, body.to_string())
}

/// `prometheus-alertmanager` with `config` (YAML), its own storage, no cluster.
pub fn alertmanager(config: &str) -> Peer {
    let bin = ALERTMANAGER_BIN.path();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("alertmanager.yml");
    std::fs::write(&file, config).unwrap();
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.path={}",
            dir.path().join("data").display()
        ))
        .args([
            "--web.listen-address=127.0.0.1:0",
            "--cluster.listen-address=",
            "--log.level=info",
        ]);
    Peer::start("alertmanager", cmd, dir)
}

/// `prometheus` with `config` (YAML) and `files` (name, text) beside it, its own TSDB.
pub fn prometheus(config: &str, files: &[(&str, &str)]) -> Peer {
    let bin = PROMETHEUS_BIN.path();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prometheus.yml");
    std::fs::write(&file, config).unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .args(["--web.listen-address=127.0.0.1:0", "--log.level=info"]);
    Peer::start("prometheus", cmd, dir)
}
