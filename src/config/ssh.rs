//! `ssh:` and `spokes[].ssh:`: how the hub reaches a spoke node.

use std::path::PathBuf;
use std::time::Duration;

/// How the hub reaches one spoke node over SSH. The config loader fills it from the
/// `ssh:` block (global defaults, then the spoke's overrides).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshSettings {
    pub user: String,
    pub port: u16,
    /// Private key file; only this key is offered.
    pub identity: PathBuf,
    /// The only known_hosts file consulted; unknown or changed host keys are refused.
    pub known_hosts: PathBuf,
    /// Read the file with `sudo -n cat` (root-only files such as k3s.yaml).
    pub sudo: bool,
    /// Bound on TCP connect, SSH handshake and authentication together.
    pub connect_timeout: Duration,
    /// Bound on running the command and reading its output.
    pub command_timeout: Duration,
}

impl Default for SshSettings {
    fn default() -> Self {
        Self {
            user: "root".into(),
            port: 22,
            identity: "/etc/spokekeeper/ssh/id_ed25519".into(),
            known_hosts: "/etc/spokekeeper/ssh/known_hosts".into(),
            sudo: false,
            connect_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_secs(30),
        }
    }
}
