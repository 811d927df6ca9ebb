//! The federated spoke's node side: an OpenSSH sshd of its own in the demo's directory,
//! its key forced to run the federated recipe's script (`spokekeeper-node`), which writes
//! the AuthenticationConfiguration the spoke's API server reads. As the operator installs
//! it, less the dedicated user and sudo: the demo's own user owns the node's directory.
//!
//! sshd is the system's (OpenSSH, /usr/sbin/sshd); where it is missing, will not start or
//! will not let the demo's user in, the demo goes on without its federated spoke and says
//! why.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use spokekeeper::spoke::{Distro, authentication_config_path};

const SSHD: &str = "/usr/sbin/sshd";

/// Why the federated spoke's node has no sshd: said once, and the demo goes on without it.
#[derive(Debug, thiserror::Error)]
pub(super) enum NodeError {
    #[error("{SSHD} is not installed (OpenSSH's server)")]
    NoSshd,
    #[error("{what}: {error}")]
    Io { what: String, error: std::io::Error },
    #[error("{program}: {said}")]
    Failed { program: &'static str, said: String },
    #[error("the node's script over SSH: {0}")]
    Unreached(String),
}

impl From<spokekeeper::spoke::ExtractError> for NodeError {
    fn from(e: spokekeeper::spoke::ExtractError) -> NodeError {
        NodeError::Unreached(e.to_string())
    }
}

fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> NodeError {
    let what = what.to_string();
    move |error| NodeError::Io { what, error }
}

/// A running sshd for one node, and what the hub needs to reach it.
pub(super) struct NodeSshd {
    child: Child,
    pub(super) port: u16,
    pub(super) user: String,
    pub(super) identity: PathBuf,
    pub(super) known_hosts: PathBuf,
}

impl Drop for NodeSshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The node's AuthenticationConfiguration, in its directory `dir` (the recipe's k3s
/// path, moved there).
pub(super) fn authentication_config(dir: &Path) -> PathBuf {
    dir.join("spokekeeper/authentication-config.yaml")
}

/// Installs the recipe's script for the node in `dir` (its k3s.yaml `kubeconfig`) and
/// starts an sshd whose one key may run it; why not, when it cannot.
pub(super) fn start(dir: &Path, kubeconfig: &Path) -> Result<NodeSshd, NodeError> {
    if !Path::new(SSHD).is_file() {
        return Err(NodeError::NoSshd);
    }
    let ssh = dir.join("ssh");
    std::fs::create_dir_all(&ssh).map_err(io(ssh.display()))?;
    let script = install_script(dir, kubeconfig)?;
    for key in ["host_key", "id_ed25519"] {
        keygen(&ssh.join(key))?;
    }
    let user = run("id", &["-un"])?.trim().to_string();
    let client_key = read(&ssh.join("id_ed25519.pub"))?;
    let forced = format!(
        "command=\"{} \\\"$SSH_ORIGINAL_COMMAND\\\"\",no-pty,no-port-forwarding,no-agent-forwarding,no-X11-forwarding {}",
        script.display(),
        client_key.trim()
    );
    write(&ssh.join("authorized_keys"), &format!("{forced}\n"))?;
    let port = free_port()?;
    let config = ssh.join("sshd_config");
    write(&config, &sshd_config(&ssh, port, &user))?;
    let log_path = ssh.join("sshd.log");
    let log = std::fs::File::create(&log_path).map_err(io(log_path.display()))?;
    let child = Command::new(SSHD)
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(io(format!("cannot start {SSHD}")))?;
    let host_key = read(&ssh.join("host_key.pub"))?;
    let known_hosts = ssh.join("known_hosts");
    write(
        &known_hosts,
        &format!("[127.0.0.1]:{port} {}", host_key.trim()),
    )?;
    let mut node = NodeSshd {
        child,
        port,
        user,
        identity: ssh.join("id_ed25519"),
        known_hosts,
    };
    node.wait_ready(&log_path)?;
    Ok(node)
}

impl NodeSshd {
    fn wait_ready(&mut self, log: &Path) -> Result<(), NodeError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                let said = read(log).unwrap_or_default();
                let last = said.lines().last().unwrap_or_default();
                return Err(NodeError::Failed {
                    program: SSHD,
                    said: format!("exited with {status}: {last}"),
                });
            }
            if let Ok(mut tcp) = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)) {
                use std::io::Read as _;
                let _ = tcp.set_read_timeout(Some(Duration::from_secs(2)));
                let mut banner = [0u8; 4];
                if tcp.read_exact(&mut banner).is_ok() && &banner == b"SSH-" {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(NodeError::Failed {
            program: SSHD,
            said: "did not answer within 10 s".into(),
        })
    }
}

/// The recipe's script, its k3s paths moved into the node's directory.
fn install_script(dir: &Path, kubeconfig: &Path) -> Result<PathBuf, NodeError> {
    use std::os::unix::fs::PermissionsExt as _;
    let k3s_file = authentication_config_path(Distro::K3s);
    let k3s_dir = k3s_file.trim_end_matches("/authentication-config.yaml");
    let node_dir = authentication_config(dir);
    let node_dir = node_dir.parent().unwrap_or(dir);
    let text = spokekeeper::spoke::recipe::node_script(Distro::K3s)
        .replace(
            Distro::K3s.kubeconfig_path(),
            &kubeconfig.display().to_string(),
        )
        .replace(k3s_dir, &node_dir.display().to_string());
    let script = dir.join("spokekeeper-node");
    write(&script, &text)?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .map_err(io(script.display()))?;
    Ok(script)
}

/// Listens on 127.0.0.1 only, lets in the demo's user with its one key, no PAM (no
/// password prompt, no system login rules), no strict modes (the temporary directory
/// is the demo's).
fn sshd_config(ssh: &Path, port: u16, user: &str) -> String {
    let d = ssh.display();
    format!(
        "ListenAddress 127.0.0.1:{port}\nHostKey {d}/host_key\nPidFile none\n\
         AuthorizedKeysFile {d}/authorized_keys\nAllowUsers {user}\nPubkeyAuthentication yes\n\
         PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n\
         PermitRootLogin prohibit-password\nLogLevel VERBOSE\n"
    )
}

fn keygen(path: &Path) -> Result<(), NodeError> {
    let out = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "spokekeeper-demo",
            "-f",
        ])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(io("cannot run ssh-keygen"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(NodeError::Failed {
            program: "ssh-keygen",
            said: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }),
    }
}

fn run(program: &str, args: &[&str]) -> Result<String, NodeError> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(io(format!("cannot run {program}")))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn free_port() -> Result<u16, NodeError> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io("a free port on 127.0.0.1"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(io("a free port on 127.0.0.1"))
}

/// A file of the node's own, in the demo's directory (never in the fleet repo's clone).
fn read(path: &Path) -> Result<String, NodeError> {
    std::fs::read_to_string(path).map_err(io(path.display()))
}

fn write(path: &Path, text: &str) -> Result<(), NodeError> {
    std::fs::write(path, text).map_err(io(path.display()))
}
