//! One SSH session to a node: the system `ssh` driven by the openssh crate (native mux).
//!
//! Each session gets a private directory under /tmp holding a generated ssh_config (so
//! neither ~/.ssh/config nor /etc/ssh/ssh_config can change what we trust or where we
//! connect) and the control socket (short path: Unix sockets are limited to ~108 bytes).
//! The session is always closed; if it cannot be closed cleanly, the ssh processes that
//! belong to it (found by that unique directory) are terminated.

use std::fmt::Write as _;
use std::fs;
use std::num::NonZeroUsize;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use openssh::{ControlPersist, KnownHosts, Session, SessionBuilder, Stdio};
use tokio::io::AsyncReadExt;
use tokio::time::timeout;
use zeroize::Zeroizing;

use super::error::{ExtractError, PathError, SettingsError};
use super::read::read_capped;
use super::{MAX_KUBECONFIG_BYTES, host_port, sanitize_remote_text};
use crate::config::SshSettings;
use crate::secret::SecretBytes;

/// Closing asks the local mux master to stop; it answers at once unless it is wedged.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// The master exits this long after its last client, should we never close it.
const CONTROL_PERSIST_SECS: usize = 10;
/// Kept from the remote stderr for error messages; the rest is drained and dropped.
const STDERR_KEEP: usize = 4096;

/// Reads `path` on the node at `address`: `cat PATH`, or `sudo -n cat PATH`.
pub(crate) async fn read_file(
    address: &str,
    s: &SshSettings,
    path: &str,
) -> Result<SecretBytes, ExtractError> {
    let target = format!("{}@{}", s.user, host_port(address, s.port));
    validate(address, s, path).map_err(|reason| ExtractError::Settings {
        target: target.clone(),
        reason,
    })?;
    let mut dir = SessionDir::create(s).map_err(|e| ExtractError::Ssh {
        target: target.clone(),
        detail: format!(
            "cannot prepare the session directory under {}: {e}",
            short_tmp().display()
        ),
    })?;
    let session = connect(&dir, address, s, &target).await?;
    let result = timeout(s.command_timeout, run_cat(&session, s, path, &target)).await;
    if result.is_err() {
        // The remote command still runs: a polite close only stops the master, which
        // then waits for it, no longer named after our directory ("ssh: [stopped mux]").
        terminate_processes_under(dir.path());
    }
    let closed = timeout(CLOSE_TIMEOUT, session.close()).await;
    if result.is_ok() && matches!(closed, Ok(Ok(()))) {
        dir.clean = true;
    }
    result.unwrap_or_else(|_| {
        Err(ExtractError::CommandTimeout {
            target,
            path: path.to_owned(),
            secs: s.command_timeout.as_secs_f64(),
        })
    })
}

async fn connect(
    dir: &SessionDir,
    address: &str,
    s: &SshSettings,
    target: &str,
) -> Result<Session, ExtractError> {
    let mut b = SessionBuilder::default();
    b.user(s.user.clone())
        .port(s.port)
        .known_hosts_check(KnownHosts::Strict)
        .connect_timeout(Duration::from_secs(ceil_secs(s.connect_timeout)))
        .control_directory(dir.path())
        .control_persist(ControlPersist::IdleFor(
            NonZeroUsize::new(CONTROL_PERSIST_SECS).expect("non-zero"),
        ))
        .config_file(dir.path().join("ssh_config"));
    match timeout(s.connect_timeout, b.connect_mux(address)).await {
        Err(_) => Err(ExtractError::ConnectTimeout {
            target: target.to_owned(),
            secs: s.connect_timeout.as_secs_f64(),
        }),
        Ok(Err(e)) => Err(classify_connect_error(&e, address, s, target)),
        Ok(Ok(session)) => Ok(session),
    }
}

async fn run_cat(
    session: &Session,
    s: &SshSettings,
    path: &str,
    target: &str,
) -> Result<SecretBytes, ExtractError> {
    let shown = if s.sudo {
        format!("sudo -n cat {path}")
    } else {
        format!("cat {path}")
    };
    // SSH always hands the command line to the remote login shell; `command`/`arg`
    // quote each word, so the path arrives as one literal argument.
    let mut cmd = if s.sudo {
        let mut c = session.command("sudo");
        c.arg("-n").arg("cat");
        c
    } else {
        session.command("cat")
    };
    cmd.arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let ssh_err = |e: openssh::Error| ExtractError::Ssh {
        target: target.to_owned(),
        detail: format!("running `{shown}`: {e}"),
    };
    let mut child = cmd.spawn().await.map_err(ssh_err)?;
    let stdout = child.stdout().take();
    let stderr = child.stderr().take();
    let origin = format!("{target}:{path}");
    let (out, err) = tokio::join!(
        async {
            match stdout {
                Some(mut o) => read_capped(&mut o, MAX_KUBECONFIG_BYTES, &origin).await,
                None => Ok(SecretBytes::default()),
            }
        },
        read_stderr(stderr)
    );
    // Over the cap: stdout is already closed, the remote cat dies on SIGPIPE.
    if let Err(e @ ExtractError::TooLarge { .. }) = out {
        return Err(e);
    }
    let status = child.wait().await;
    let status = match status {
        Ok(status) => status,
        Err(openssh::Error::RemoteProcessTerminated) => {
            return Err(remote_failed(
                target,
                &shown,
                "killed by a signal".into(),
                &err,
            ));
        }
        Err(e) => return Err(ssh_err(e)),
    };
    if !status.success() {
        let code = status
            .code()
            .map_or("no exit code".into(), |c| format!("exit code {c}"));
        return Err(classify_remote_error(target, s, path, &shown, code, &err));
    }
    let bytes = out?;
    if bytes.is_empty() {
        return Err(ExtractError::Empty { origin });
    }
    Ok(bytes)
}

async fn read_stderr(stderr: Option<openssh::ChildStderr>) -> String {
    let Some(mut stderr) = stderr else {
        return String::new();
    };
    let mut kept = Vec::with_capacity(STDERR_KEEP);
    let mut buf = Zeroizing::new([0u8; 1024]);
    while let Ok(n) = stderr.read(&mut buf[..]).await {
        if n == 0 {
            break;
        }
        let room = STDERR_KEEP - kept.len();
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
    String::from_utf8_lossy(&kept).into_owned()
}

fn remote_failed(target: &str, shown: &str, status: String, stderr: &str) -> ExtractError {
    ExtractError::RemoteFailed {
        target: target.to_owned(),
        command: shown.to_owned(),
        status,
        detail: sanitize_remote_text(stderr, 160),
    }
}

fn classify_remote_error(
    target: &str,
    s: &SshSettings,
    path: &str,
    shown: &str,
    status: String,
    stderr: &str,
) -> ExtractError {
    let target_s = target.to_owned();
    let path_s = path.to_owned();
    let sudo_refusals = [
        "a password is required",
        "a terminal is required",
        "is not in the sudoers",
        "is not allowed to execute",
        "may not run sudo",
        "sudo: command not found",
    ];
    if s.sudo && sudo_refusals.iter().any(|m| stderr.contains(m)) {
        return ExtractError::SudoRefused {
            target: target_s,
            user: s.user.clone(),
            path: path_s,
        };
    }
    if stderr.contains("No such file or directory") {
        return ExtractError::NotFound {
            target: target_s,
            path: path_s,
        };
    }
    if stderr.contains("Permission denied") {
        return ExtractError::PermissionDenied {
            target: target_s,
            user: s.user.clone(),
            path: path_s,
        };
    }
    remote_failed(target, shown, status, stderr)
}

/// Turns what `ssh` logged into an error that says which check failed and what to do.
fn classify_connect_error(
    e: &openssh::Error,
    address: &str,
    s: &SshSettings,
    target: &str,
) -> ExtractError {
    let log = match e {
        openssh::Error::Connect(io) if io.kind() == std::io::ErrorKind::NotFound => {
            return ExtractError::Ssh {
                target: target.to_owned(),
                detail: "the `ssh` client is not installed on this host (install openssh-client)"
                    .into(),
            };
        }
        openssh::Error::Connect(io) | openssh::Error::Master(io) => io.to_string(),
        other => other.to_string(),
    };
    let host = host_port_known_hosts(address, s.port);
    let known_hosts = s.known_hosts.display().to_string();
    if log.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
        || log.contains("has changed and you have requested strict checking")
    {
        let presented = log
            .split_whitespace()
            .find(|w| w.starts_with("SHA256:"))
            .map(|w| w.trim_end_matches('.').to_owned())
            .unwrap_or_else(|| "an unknown fingerprint".into());
        return ExtractError::HostKeyChanged {
            host,
            address: address.to_owned(),
            port: s.port,
            known_hosts,
            presented,
        };
    }
    if log.contains("host key is known for") || log.contains("Host key verification failed") {
        return ExtractError::HostKeyUnknown {
            host,
            address: address.to_owned(),
            port: s.port,
            known_hosts,
        };
    }
    if log.contains("Permission denied (") {
        return ExtractError::AuthRefused {
            target: target.to_owned(),
            user: s.user.clone(),
            identity: s.identity.display().to_string(),
        };
    }
    if log.contains("timed out") {
        return ExtractError::ConnectTimeout {
            target: target.to_owned(),
            secs: s.connect_timeout.as_secs_f64(),
        };
    }
    for (needle, reason) in [
        (
            "Connection refused",
            "connection refused (is sshd running on that port?)",
        ),
        ("Could not resolve hostname", "the name does not resolve"),
        ("No route to host", "no route to host"),
        ("Network is unreachable", "network is unreachable"),
        (
            "Connection closed by",
            "the node closed the connection before authentication (sshd limits such as MaxStartups, AllowUsers or a firewall)",
        ),
        (
            "Connection reset",
            "the connection was reset during the handshake",
        ),
    ] {
        if log.contains(needle) {
            return ExtractError::Unreachable {
                target: target.to_owned(),
                reason: reason.into(),
            };
        }
    }
    ExtractError::Ssh {
        target: target.to_owned(),
        detail: sanitize_remote_text(&log, 200),
    }
}

/// How ssh names the host in known_hosts: `[addr]:port` unless the port is 22.
fn host_port_known_hosts(address: &str, port: u16) -> String {
    if port == 22 {
        address.to_owned()
    } else {
        format!("[{address}]:{port}")
    }
}

fn ceil_secs(d: Duration) -> u64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    s.max(1)
}

/// Refuses settings that ssh or the remote shell would interpret rather than take literally.
fn validate(address: &str, s: &SshSettings, path: &str) -> Result<(), SettingsError> {
    let host_ok = !address.is_empty()
        && !address.starts_with('-')
        && address
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_'));
    if !host_ok {
        return Err(SettingsError::Address(address.to_string()));
    }
    let user_ok = !s.user.is_empty()
        && !s.user.starts_with('-')
        && s.user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if !user_ok {
        return Err(SettingsError::User(s.user.clone()));
    }
    if s.port == 0 {
        return Err(SettingsError::PortZero);
    }
    if !path.starts_with('/') || path.len() > 4096 || path.chars().any(char::is_control) {
        return Err(SettingsError::KubeconfigPath(sanitize_remote_text(
            path, 100,
        )));
    }
    for (what, p) in [("identity", &s.identity), ("known_hosts", &s.known_hosts)] {
        config_path(p).map_err(|reason| SettingsError::FilePath {
            what,
            path: p.clone(),
            reason,
        })?;
        if !p.is_file() {
            return Err(SettingsError::FileMissing {
                what,
                path: p.clone(),
            });
        }
    }
    Ok(())
}

/// A path as written in ssh_config: absolute, quoted, and free of the characters ssh
/// expands (`%` tokens, `${ENV}`, `~`) or that would break the quoting.
fn config_path(p: &Path) -> Result<String, PathError> {
    let s = p.to_str().ok_or(PathError::NotUtf8)?;
    if !s.starts_with('/') {
        return Err(PathError::Relative);
    }
    if s.chars()
        .any(|c| c.is_control() || matches!(c, '%' | '$' | '"' | '\'' | '\\'))
    {
        return Err(PathError::Interpreted);
    }
    Ok(format!("\"{s}\""))
}

fn ssh_config(s: &SshSettings) -> Result<String, PathError> {
    let mut c =
        String::from("# Generated by spokekeeper for one session; removed when it ends.\nHost *\n");
    let alive = ceil_secs(s.command_timeout).div_ceil(3).max(1);
    let lines = [
        format!("UserKnownHostsFile {}", config_path(&s.known_hosts)?),
        "GlobalKnownHostsFile /dev/null".into(),
        "StrictHostKeyChecking yes".into(),
        "UpdateHostKeys no".into(),
        "HashKnownHosts no".into(),
        "CheckHostIP no".into(),
        "VerifyHostKeyDNS no".into(),
        format!("IdentityFile {}", config_path(&s.identity)?),
        "IdentitiesOnly yes".into(),
        "IdentityAgent none".into(),
        "PreferredAuthentications publickey".into(),
        "PasswordAuthentication no".into(),
        "KbdInteractiveAuthentication no".into(),
        "HostbasedAuthentication no".into(),
        "GSSAPIAuthentication no".into(),
        "BatchMode yes".into(),
        "ForwardAgent no".into(),
        "ForwardX11 no".into(),
        "ClearAllForwardings yes".into(),
        "PermitLocalCommand no".into(),
        "ProxyCommand none".into(),
        "ProxyJump none".into(),
        "RequestTTY no".into(),
        "EscapeChar none".into(),
        "ConnectionAttempts 1".into(),
        // curve25519 first: the default sntrup761 hybrid costs the client ~7x the CPU of
        // a handshake (measured in benches/fleet.rs). What it protects against, a recorded
        // session decrypted years later, does not fit a kubeconfig whose client
        // certificate expires within a year. The rest: for servers without curve25519
        // (FIPS mode); all known to OpenSSH >= 7.3.
        "KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256,ecdh-sha2-nistp384,ecdh-sha2-nistp521,diffie-hellman-group16-sha512,diffie-hellman-group18-sha512,diffie-hellman-group14-sha256".into(),
        // A node that stops answering mid-session is dropped by ssh itself too.
        format!("ServerAliveInterval {alive}"),
        "ServerAliveCountMax 3".into(),
        "LogLevel ERROR".into(),
    ];
    for l in lines {
        let _ = writeln!(c, "    {l}");
    }
    Ok(c)
}

/// A short base for control sockets (paths must fit 108 bytes): TMPDIR when it is
/// absolute and short, else /tmp when it exists, else the system's default.
fn short_tmp() -> PathBuf {
    short_tmp_from(std::env::var_os("TMPDIR").as_deref())
}

/// The session directory and socket names add under 45 bytes.
const TMPDIR_MAX: usize = 60;

fn short_tmp_from(tmpdir: Option<&std::ffi::OsStr>) -> PathBuf {
    if let Some(t) = tmpdir.map(Path::new)
        && t.is_absolute()
        && t.as_os_str().len() <= TMPDIR_MAX
        && t.is_dir()
    {
        return t.to_owned();
    }
    let tmp = Path::new("/tmp");
    if tmp.is_dir() {
        tmp.to_owned()
    } else {
        std::env::temp_dir()
    }
}

/// The per-session directory; on drop, unless the session closed cleanly, terminates
/// every process whose command line points into it (the ssh master or a stuck `ssh -f`).
struct SessionDir {
    dir: tempfile::TempDir,
    clean: bool,
}

impl SessionDir {
    fn create(s: &SshSettings) -> std::io::Result<Self> {
        let config = ssh_config(s).map_err(std::io::Error::other)?;
        let dir = tempfile::Builder::new()
            .prefix("sk")
            .tempdir_in(short_tmp())?;
        fs::write(dir.path().join("ssh_config"), config)?;
        Ok(Self { dir, clean: false })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SessionDir {
    fn drop(&mut self) {
        if !self.clean {
            terminate_processes_under(self.dir.path());
        }
    }
}

/// Linux: finds our own ssh processes by the unique session directory in their command
/// line (the master retitles itself "ssh: DIR/SOCKET [mux]", one string).
fn terminate_processes_under(dir: &Path) {
    let mut prefix = dir.as_os_str().as_bytes().to_vec();
    prefix.push(b'/');
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmdline
            .windows(prefix.len())
            .any(|w| w == prefix.as_slice())
            && let Some(pid) = rustix::process::Pid::from_raw(pid)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_directories_go_under_a_short_tmpdir_else_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let given = |p: &Path| short_tmp_from(Some(p.as_os_str()));
        assert_eq!(given(dir.path()), dir.path());
        let long = dir.path().join("x".repeat(TMPDIR_MAX));
        std::fs::create_dir(&long).unwrap();
        assert_eq!(given(&long), Path::new("/tmp"));
        assert_eq!(given(Path::new("relative")), Path::new("/tmp"));
        assert_eq!(given(&dir.path().join("missing")), Path::new("/tmp"));
        assert_eq!(short_tmp_from(None), Path::new("/tmp"));
    }

    fn settings() -> SshSettings {
        SshSettings {
            identity: "/etc/hosts".into(),
            known_hosts: "/etc/hosts".into(),
            ..SshSettings::default()
        }
    }

    #[test]
    fn validate_refuses_what_ssh_or_a_shell_would_interpret() {
        let s = settings();
        assert!(validate("127.0.0.5", &s, "/etc/rancher/k3s/k3s.yaml").is_ok());
        assert!(validate("node-1.example.org", &s, "/etc/x y.yaml").is_ok());
        assert!(
            validate("-oProxyCommand=sh", &s, "/x")
                .unwrap_err()
                .to_string()
                .contains("not a host name")
        );
        assert!(validate("a b", &s, "/x").is_err());
        assert!(
            validate("h", &s, "relative.yaml")
                .unwrap_err()
                .to_string()
                .contains("absolute")
        );
        assert!(validate("h", &s, "/x\n/y").is_err());
        let bad_user = SshSettings {
            user: "-lroot".into(),
            ..settings()
        };
        assert!(
            validate("h", &bad_user, "/x")
                .unwrap_err()
                .to_string()
                .contains("user")
        );
        let pct = SshSettings {
            identity: "/keys/%u/id".into(),
            ..settings()
        };
        assert!(
            validate("h", &pct, "/x")
                .unwrap_err()
                .to_string()
                .contains("would interpret")
        );
        let rel = SshSettings {
            known_hosts: "known_hosts".into(),
            ..settings()
        };
        assert!(
            validate("h", &rel, "/x")
                .unwrap_err()
                .to_string()
                .contains("absolute")
        );
        let missing = SshSettings {
            known_hosts: "/nonexistent/known_hosts".into(),
            ..settings()
        };
        assert!(
            validate("h", &missing, "/x")
                .unwrap_err()
                .to_string()
                .contains("ssh-keyscan")
        );
    }

    #[test]
    fn generated_config_pins_trust_to_the_given_files() {
        let s = SshSettings {
            identity: "/keys/id ed25519".into(),
            known_hosts: "/keys/known_hosts".into(),
            command_timeout: Duration::from_secs(30),
            ..SshSettings::default()
        };
        let c = ssh_config(&s).unwrap();
        assert!(c.contains("    UserKnownHostsFile \"/keys/known_hosts\"\n"));
        assert!(c.contains("    GlobalKnownHostsFile /dev/null\n"));
        assert!(c.contains("    IdentityFile \"/keys/id ed25519\"\n"));
        assert!(c.contains("    StrictHostKeyChecking yes\n"));
        assert!(c.contains("    ServerAliveInterval 10\n"));
        assert!(c.contains("    ProxyCommand none\n"));
        assert!(c.contains("    KexAlgorithms curve25519-sha256,"));
    }

    #[test]
    fn host_key_messages_say_which_file_and_how_to_fix() {
        let s = SshSettings {
            port: 2222,
            ..settings()
        };
        let changed = std::io::Error::other(
            "The fingerprint for the ED25519 key sent by the remote host is\nSHA256:+1pD9zOIR4hcwyqD91CQsNOozjD6htjIsi8XG3x9Xa8.\n\
             Host key for [127.0.0.5]:2222 has changed and you have requested strict checking.\nHost key verification failed.",
        );
        let e = classify_connect_error(
            &openssh::Error::Connect(changed),
            "127.0.0.5",
            &s,
            "root@127.0.0.5:2222",
        );
        let msg = e.to_string();
        assert!(matches!(e, ExtractError::HostKeyChanged { .. }), "{msg}");
        assert!(
            msg.contains("presents SHA256:+1pD9zOIR4hcwyqD91CQsNOozjD6htjIsi8XG3x9Xa8, "),
            "{msg}"
        );
        assert!(
            msg.contains("ssh-keygen -R '[127.0.0.5]:2222' -f /etc/hosts"),
            "{msg}"
        );

        let unknown = std::io::Error::other(
            "No ED25519 host key is known for [127.0.0.5]:2222 and you have requested strict checking.\nHost key verification failed.",
        );
        let e = classify_connect_error(&openssh::Error::Connect(unknown), "127.0.0.5", &s, "t");
        let msg = e.to_string();
        assert!(
            msg.starts_with("host key for [127.0.0.5]:2222 is not in /etc/hosts"),
            "{msg}"
        );
        assert!(
            msg.contains("ssh-keyscan -p 2222 127.0.0.5 >> /etc/hosts"),
            "{msg}"
        );
    }

    #[test]
    fn ceil_secs_never_yields_zero() {
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(2500)), 3);
        assert_eq!(ceil_secs(Duration::from_secs(4)), 4);
    }
}
