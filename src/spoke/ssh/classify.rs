//! Turns what ssh and the remote command said on stderr into an error that says which check
//! failed and what to do.

use super::super::error::ExtractError;
use super::super::sanitize_remote_text;
use crate::config::SshSettings;

pub(super) fn remote_failed(
    target: &str,
    shown: &str,
    status: String,
    stderr: &str,
) -> ExtractError {
    ExtractError::RemoteFailed {
        target: target.to_owned(),
        command: shown.to_owned(),
        status,
        detail: sanitize_remote_text(stderr, 160),
    }
}

/// The remote command ran and failed.
pub(super) fn remote_error(
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

/// ssh gave up before the node accepted our key; `log` is what it said.
pub(super) fn connect_error(
    log: &str,
    address: &str,
    s: &SshSettings,
    target: &str,
) -> ExtractError {
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
        detail: sanitize_remote_text(log, 200),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SshSettings {
        SshSettings {
            identity: "/etc/hosts".into(),
            known_hosts: "/etc/hosts".into(),
            port: 2222,
            ..SshSettings::default()
        }
    }

    #[test]
    fn host_key_messages_say_which_file_and_how_to_fix() {
        let s = settings();
        let changed = "The fingerprint for the ED25519 key sent by the remote host is\nSHA256:+1pD9zOIR4hcwyqD91CQsNOozjD6htjIsi8XG3x9Xa8.\n\
             Host key for [127.0.0.5]:2222 has changed and you have requested strict checking.\nHost key verification failed.";
        let e = connect_error(changed, "127.0.0.5", &s, "root@127.0.0.5:2222");
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

        let unknown = "No ED25519 host key is known for [127.0.0.5]:2222 and you have requested strict checking.\nHost key verification failed.";
        let e = connect_error(unknown, "127.0.0.5", &s, "t");
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
    fn the_banner_timeout_is_a_connect_timeout() {
        let s = settings();
        let log = "Connection timed out during banner exchange\r\nConnection to 127.0.0.5 port 2222 timed out\r\n";
        let e = connect_error(log, "127.0.0.5", &s, "t");
        assert!(matches!(e, ExtractError::ConnectTimeout { .. }), "{e}");
    }
}
