//! Real OpenSSH servers for lab nodes, and the node-side users and sudoers rules.

use std::fs::{self, File};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

use super::addr::LAB_DIR;

pub const SSHD: &str = "/usr/sbin/sshd";

/// An sshd listener; drop kills it and every process it forked (per-connection sshd
/// children call setsid, so a process group would not reach them), then reaps it.
pub(crate) struct Sshd {
    child: Child,
    pub port: u16,
    pub config: PathBuf,
}

impl Sshd {
    /// Starts sshd for the node in `dir` on `addr:port` (port 0: a free one).
    pub fn start(dir: &Path, addr: Ipv4Addr, requested: u16) -> Sshd {
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = if requested != 0 {
                requested
            } else {
                crate::realstack::free_port(addr.into())
            };
            let config = dir.join("sshd_config");
            fs::write(&config, sshd_config(dir, addr, port)).expect("write sshd_config");
            let log = File::create(dir.join("sshd.log")).expect("create sshd.log");
            let child = Command::new(SSHD)
                .arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot start {SSHD}: {e} (scripts/test installs openssh-server)")
                });
            let mut sshd = Sshd {
                child,
                port,
                config,
            };
            match sshd.wait_ready(addr) {
                Ok(()) => return sshd,
                Err(e) => last_error = e,
            }
            drop(sshd);
            if !last_error.contains("Address already in use") {
                break;
            }
            // A fixed port may still be held for a moment by a process forked before it
            // closed; a free port is simply chosen again.
            if requested != 0 {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        panic!("sshd for {} did not start: {last_error}", dir.display());
    }

    pub fn pid(&self) -> Pid {
        Pid::from_child(&self.child)
    }

    pub fn signal(&self, sig: Signal) {
        kill_process(self.pid(), sig).expect("signal sshd");
    }

    fn wait_ready(&mut self, addr: Ipv4Addr) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(15);
        let sock = SocketAddr::from((addr, self.port));
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log =
                    fs::read_to_string(self.config.with_file_name("sshd.log")).unwrap_or_default();
                return Err(format!("exited with {status}: {}", log.trim()));
            }
            if let Ok(mut tcp) = TcpStream::connect_timeout(&sock, Duration::from_millis(200)) {
                let _ = tcp.set_read_timeout(Some(Duration::from_secs(2)));
                let mut banner = [0u8; 4];
                if tcp.read_exact(&mut banner).is_ok() && &banner == b"SSH-" {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err("no SSH banner within 15 s".into())
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        use super::procs::{alive, descendants};
        let pid = self.pid();
        // Freeze the listener, then every process below it until no new one appears: a
        // stopped process forks nothing (a connection's child may be forking its
        // privilege-separated one right now).
        let _ = kill_process(pid, Signal::STOP);
        let mut stopped: Vec<i32> = Vec::new();
        loop {
            let found: Vec<i32> = descendants(pid.as_raw_nonzero().get())
                .into_iter()
                .filter(|p| alive(*p) && !stopped.contains(p))
                .collect();
            if found.is_empty() {
                break;
            }
            for p in found {
                if let Some(child) = Pid::from_raw(p) {
                    let _ = kill_process(child, Signal::STOP);
                }
                stopped.push(p);
            }
        }
        for child in stopped.iter().filter_map(|p| Pid::from_raw(*p)) {
            let _ = kill_process(child, Signal::KILL);
        }
        let _ = kill_process(pid, Signal::KILL);
        let _ = kill_process(pid, Signal::CONT);
        let _ = self.child.wait();
        // A SIGKILL takes effect when the kernel next runs the process, which on a loaded
        // machine is not at once: the node is stopped when they are gone.
        let deadline = Instant::now() + Duration::from_secs(10);
        while stopped.iter().any(|p| alive(*p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn sshd_config(dir: &Path, addr: Ipv4Addr, port: u16) -> String {
    let d = dir.display();
    let mut c = format!(
        "ListenAddress {addr}:{port}\n\
         HostKey {d}/ssh_host_ed25519_key\n\
         PidFile none\n\
         AuthorizedKeysFile {d}/authorized_keys.%u\n\
         StrictModes no\n\
         PermitRootLogin prohibit-password\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UsePAM no\n\
         AllowUsers root {user}\n\
         MaxStartups 1000\n\
         MaxSessions 100\n\
         LoginGraceTime 30\n\
         X11Forwarding no\n\
         AllowTcpForwarding no\n\
         AllowAgentForwarding no\n\
         PermitTunnel no\n\
         PrintMotd no\n\
         PrintLastLog no\n\
         LogLevel VERBOSE\n",
        user = super::LAB_USER,
    );
    // Newer OpenSSH penalizes sources with failed logins: the lab fails on purpose.
    if supports_option("PerSourcePenalties no") {
        c.push_str("PerSourcePenalties no\n");
    }
    c
}

fn supports_option(line: &str) -> bool {
    static PENALTIES: OnceLock<bool> = OnceLock::new();
    *PENALTIES.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("hk");
        keygen(&key);
        let cfg = dir.path().join("cfg");
        fs::write(
            &cfg,
            format!("HostKey {}\nUsePAM no\n{line}\n", key.display()),
        )
        .expect("write");
        Command::new(SSHD)
            .arg("-t")
            .arg("-f")
            .arg(&cfg)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// ssh-keygen -t ed25519, no passphrase.
pub fn keygen(path: &Path) {
    let _ = fs::remove_file(path);
    let _ = fs::remove_file(path.with_extension("pub"));
    let status = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "spokekeeper-lab",
            "-f",
        ])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .expect("run ssh-keygen (openssh-client)");
    assert!(status.success(), "ssh-keygen failed for {}", path.display());
}

/// The `type base64` part of a .pub file.
pub fn public_key(private: &Path) -> String {
    let text = fs::read_to_string(format!("{}.pub", private.display())).expect("read .pub");
    text.split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Creates the lab's unprivileged user once per machine (serialized across processes).
pub fn ensure_user(name: &str) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        fs::create_dir_all(LAB_DIR).expect("lab dir");
        let lock = File::create(Path::new(LAB_DIR).join("users.lock")).expect("users.lock");
        lock.lock().expect("lock users.lock");
        let exists = Command::new("id")
            .arg("-u")
            .arg(name)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !exists.is_ok_and(|s| s.success()) {
            let status = Command::new("useradd")
                .args([
                    "--system",
                    "--no-create-home",
                    "--home-dir",
                    "/",
                    "--shell",
                    "/bin/sh",
                    name,
                ])
                .status()
                .expect("run useradd (passwd package)");
            assert!(status.success(), "useradd {name} failed");
        }
        // "*" = no password but not locked: sshd without PAM refuses locked accounts.
        let status = Command::new("usermod")
            .args(["-p", "*", name])
            .status()
            .expect("run usermod");
        assert!(status.success(), "usermod -p '*' {name} failed");
    });
}

/// Installs a sudoers drop-in after `visudo -cf` accepts it; returns the error otherwise.
pub fn install_sudoers(target: &Path, rules: &str) -> Result<(), String> {
    let dir = target.parent().expect("sudoers.d");
    fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    // A dotted name: sudo ignores it while it is being checked.
    let staging = dir.join(format!(
        ".{}.tmp",
        target.file_name().expect("name").to_string_lossy()
    ));
    fs::write(&staging, rules).map_err(|e| e.to_string())?;
    fs::set_permissions(&staging, fs::Permissions::from_mode(0o440)).map_err(|e| e.to_string())?;
    let out = Command::new("visudo")
        .arg("-cf")
        .arg(&staging)
        .output()
        .map_err(|e| format!("visudo: {e}"))?;
    if !out.status.success() {
        let _ = fs::remove_file(&staging);
        return Err(format!(
            "visudo rejected the rules: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    fs::rename(&staging, target).map_err(|e| e.to_string())
}
