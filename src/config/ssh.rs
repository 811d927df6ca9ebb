//! `ssh:` and `spokes[].ssh:`: how the hub reaches a spoke node. The global block gives
//! the defaults, a spoke's block overrides them field by field; both are checked where
//! they are written (`check::ssh`), then merged into each spoke's [`SshSettings`].

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{Loading, Span};

/// SSH settings as written: every field optional so a spoke can override any of them.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshOverrides {
    pub user: Option<String>,
    #[serde(default, deserialize_with = "ssh_port")]
    pub port: Option<u16>,
    pub identity: Option<PathBuf>,
    pub known_hosts: Option<PathBuf>,
    pub sudo: Option<bool>,
    pub connect_timeout: Option<Span>,
    pub command_timeout: Option<Span>,
}

/// 1-65535, refused as written (with its line) rather than as "invalid u16".
fn ssh_port<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    let n = i64::deserialize(d)?;
    u16::try_from(n)
        .ok()
        .filter(|&p| p != 0)
        .map(Some)
        .ok_or_else(|| {
            serde::de::Error::custom(format!("port {n} is not 1-65535 (ssh: usually 22)"))
        })
}

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

/// A spoke's settings: its own overrides, else the global ones, else the defaults;
/// relative key and known_hosts paths resolved against the configuration's directory.
pub(super) fn settings(global: &SshOverrides, spoke: &SshOverrides, l: &Loading) -> SshSettings {
    let o = merge(global, spoke);
    let d = SshSettings::default();
    SshSettings {
        user: o.user.unwrap_or(d.user),
        port: o.port.unwrap_or(d.port),
        identity: o.identity.as_deref().map_or(d.identity, |p| l.resolve(p)),
        known_hosts: o
            .known_hosts
            .as_deref()
            .map_or(d.known_hosts, |p| l.resolve(p)),
        sudo: o.sudo.unwrap_or(d.sudo),
        connect_timeout: o.connect_timeout.map_or(d.connect_timeout, |s| s.0),
        command_timeout: o.command_timeout.map_or(d.command_timeout, |s| s.0),
    }
}

/// Field by field: the spoke's value where it sets one, else the global one.
fn merge(defaults: &SshOverrides, spoke: &SshOverrides) -> SshOverrides {
    SshOverrides {
        user: spoke.user.clone().or_else(|| defaults.user.clone()),
        port: spoke.port.or(defaults.port),
        identity: spoke.identity.clone().or_else(|| defaults.identity.clone()),
        known_hosts: spoke
            .known_hosts
            .clone()
            .or_else(|| defaults.known_hosts.clone()),
        sudo: spoke.sudo.or(defaults.sudo),
        connect_timeout: spoke.connect_timeout.or(defaults.connect_timeout),
        command_timeout: spoke.command_timeout.or(defaults.command_timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{MIN, refused};

    #[test]
    fn ssh_mistakes_name_the_field() {
        refused(
            &MIN.replace("10.0.0.1", "10.0.0.1, ssh: {prot: 22}"),
            &["prot"],
        );
    }
}
