//! Reaching a spoke: SSH extraction, TLS probe, live API check.
//!
//! - [`extract`]: read the kubeconfig from the node (SSH, or a local file), into memory only;
//! - [`probe`]: the serving chain of the spoke API, taken without trusting it;
//! - [`live`]: call the spoke API with a kubeconfig and report who it authenticates as.
//!
//! Everything read from a spoke is hostile input: sizes are capped, every step is bounded
//! by a timeout, errors say what failed and what to do, and never carry secret bytes.

pub mod chain;
mod error;
pub mod extract;
pub mod live;
pub mod probe;
mod read;
mod ssh;

pub use crate::config::{Distro, SshSettings};
pub use chain::{CaCheck, Judged};
pub use error::ExtractError;
pub use extract::{Source, extract, read_local, read_over_ssh};
pub use live::{LiveError, LiveReport, check_live, may_impersonate};
pub use probe::{ProbeError, ProbeReport, probe};

/// Largest kubeconfig accepted from a spoke. Bigger is an error, never a truncation.
pub const MAX_KUBECONFIG_BYTES: usize = 1 << 20;

/// The least-privilege setup for a node, printed by `spokekeeper init` and docs/operations.md.
///
/// The forced command means the hub's key can do exactly one thing on the node even if
/// the hub is compromised: print that one file.
pub const NODE_RECIPE: &str = r#"# Least privilege on each spoke node (k3s shown; rke2: /etc/rancher/rke2/rke2.yaml,
# kubeadm: /etc/kubernetes/admin.conf). Run as root on the node.

# 1. A dedicated user with no password (`*` is "no password", not "locked": public-key
#    login then works whether or not sshd uses PAM).
useradd --system --create-home --shell /bin/sh spokekeeper
usermod -p '*' spokekeeper

# 2. ~spokekeeper/.ssh/authorized_keys (mode 600, owned by spokekeeper): the hub's public
#    key, allowed to run one command and nothing else (whatever the client asks for).
command="sudo -n cat /etc/rancher/k3s/k3s.yaml",no-pty,no-port-forwarding,no-agent-forwarding,no-X11-forwarding ssh-ed25519 AAAA...the-hub-key... spokekeeper@hub

# 3. /etc/sudoers.d/spokekeeper (mode 440; check it with `visudo -cf` before installing):
#    root lets that user read that one file, nothing else.
spokekeeper ALL=(root) NOPASSWD: /usr/bin/cat /etc/rancher/k3s/k3s.yaml

# 4. On the hub: add the node's host key to spokekeeper's known_hosts after comparing its
#    fingerprint with `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` run on the node:
#      ssh-keyscan -t ed25519 NODE >> /etc/spokekeeper/ssh/known_hosts
#    and in spokekeeper.yaml for this spoke:  ssh: { user: spokekeeper }
"#;

/// `host:port`, with brackets around IPv6 literals, for messages.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Text from a remote party, made safe to put in an error: one line, printable ASCII,
/// short, and with long base64-like runs (keys, certificates, tokens) blanked out.
pub(crate) fn sanitize_remote_text(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("");
    let printable: String = line
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    let mut out = String::with_capacity(printable.len().min(max));
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() >= 32 {
            out.push_str("<redacted>");
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in printable.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_') {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    if out.len() > max {
        out.truncate(max);
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_text_is_one_short_printable_line_without_key_material() {
        let key = "LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0NBUUVFSUJ";
        let text = format!("first line\ncat: {key}: No such file\x1b[31m\n\n");
        let clean = sanitize_remote_text(&text, 200);
        assert_eq!(clean, "cat: <redacted>: No such file?[31m");
        assert_eq!(sanitize_remote_text(&"x ".repeat(300), 20).len(), 23);
    }

    #[test]
    fn recipe_has_the_forced_command_and_a_single_file_sudo_rule() {
        assert!(NODE_RECIPE.contains(
            r#"command="sudo -n cat /etc/rancher/k3s/k3s.yaml",no-pty,no-port-forwarding,no-agent-forwarding,no-X11-forwarding ssh-ed25519 "#
        ));
        assert!(
            NODE_RECIPE.contains(
                "spokekeeper ALL=(root) NOPASSWD: /usr/bin/cat /etc/rancher/k3s/k3s.yaml\n"
            )
        );
    }
}
