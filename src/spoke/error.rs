//! What can go wrong reading a kubeconfig from a node: each error names the node and the fix,
//! and never carries the bytes read.

#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error("invalid SSH settings for {target}: {reason}")]
    Settings {
        target: String,
        reason: SettingsError,
    },
    #[error(
        "host key for {host} is not in {known_hosts}: refusing to trust it on first use. Check the node's \
         fingerprint out of band (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the node), then add \
         it with `ssh-keyscan -p {port} {address} >> {known_hosts}`"
    )]
    HostKeyUnknown {
        host: String,
        address: String,
        port: u16,
        known_hosts: String,
    },
    #[error(
        "host key for {host} has CHANGED: the node presents {presented}, which does not match {known_hosts}. \
         Either the node was reinstalled or the connection is being intercepted. Check the new fingerprint \
         on the node, then replace the entry: `ssh-keygen -R '{host}' -f {known_hosts}` and \
         `ssh-keyscan -p {port} {address} >> {known_hosts}`"
    )]
    HostKeyChanged {
        host: String,
        address: String,
        port: u16,
        known_hosts: String,
        presented: String,
    },
    #[error(
        "{target}: the node refused the key {identity} (publickey): add {identity}.pub to the authorized_keys \
         of user {user} on the node"
    )]
    AuthRefused {
        target: String,
        user: String,
        identity: String,
    },
    #[error("cannot reach {target}: {reason}")]
    Unreachable { target: String, reason: String },
    #[error(
        "{target}: no SSH session within {secs}s (the TCP connection may open, but sshd did not complete \
         the handshake): is the node overloaded, or sshd stopped?"
    )]
    ConnectTimeout { target: String, secs: f64 },
    #[error("{target}: `{command}` did not finish within {secs}s; the session was cut off")]
    CommandTimeout {
        target: String,
        command: String,
        secs: f64,
    },
    #[error(
        "{target}: sudo -n refused to run `cat {path}` as root for user {user}: add a NOPASSWD sudoers rule \
         for exactly that command (see `spokekeeper init`)"
    )]
    SudoRefused {
        target: String,
        user: String,
        path: String,
    },
    #[error(
        "{target}: {path} does not exist on the node: check the spoke's distro (k3s, rke2, kubeadm) or set \
         kubeconfig_path"
    )]
    NotFound { target: String, path: String },
    #[error(
        "{target}: user {user} may not read {path}: set `ssh.sudo: true` and add the sudoers rule from \
         `spokekeeper init`, or connect as root"
    )]
    PermissionDenied {
        target: String,
        user: String,
        path: String,
    },
    #[error("{target}: `{command}` failed ({status}): {detail}")]
    RemoteFailed {
        target: String,
        command: String,
        status: String,
        detail: String,
    },
    #[error(
        "{origin}: larger than the {limit}-byte limit for a kubeconfig; refused, not truncated (is the path \
         right?)"
    )]
    TooLarge { origin: String, limit: usize },
    #[error("{origin}: the kubeconfig is empty")]
    Empty { origin: String },
    #[error("{target}: `{command}` on the node: {problem}. Fix: {fix}")]
    NodeScript {
        target: String,
        command: String,
        problem: String,
        fix: String,
    },
    #[error(
        "{target}: the node answered `{verb}` with {printed} bytes that are not the federated \
         script's acknowledgement, so the hub's key there does not run that script (the older recipe's \
         `sudo -n cat` prints the kubeconfig whatever is asked), and the AuthenticationConfiguration is not known to be written. Fix: \
         install the federated node recipe on the node (its script, forced command and sudoers rule)"
    )]
    NotFederated {
        target: String,
        verb: String,
        printed: usize,
    },
    #[error(
        "{target}: the AuthenticationConfiguration to write is {len} bytes; the node's script takes 1 \
         to {limit} bytes, so nothing was sent"
    )]
    AuthenticationConfigSize {
        target: String,
        len: usize,
        limit: usize,
    },
    #[error("ssh to {target} failed: {detail}")]
    Ssh { target: String, detail: String },
    #[error("cannot read {path}: {reason}")]
    Local { path: String, reason: String },
}

/// SSH settings that ssh or the remote shell would interpret rather than take literally:
/// each names the setting.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("address {0:?} is not a host name or IP address")]
    Address(String),
    #[error("user {0:?} is not a plain user name")]
    User(String),
    #[error("port 0 is not a valid SSH port")]
    PortZero,
    /// The path as shown (sanitized, bounded).
    #[error("kubeconfig path {0:?} must be an absolute path without control characters")]
    KubeconfigPath(String),
    #[error("{what} {}: {reason}", path.display())]
    FilePath {
        what: &'static str,
        path: std::path::PathBuf,
        reason: PathError,
    },
    #[error("{what} file {} does not exist or is not a file{}", path.display(), missing_fix(what))]
    FileMissing {
        what: &'static str,
        path: std::path::PathBuf,
    },
}

fn missing_fix(what: &str) -> &'static str {
    if what == "known_hosts" {
        ": create it with ssh-keyscan after checking the node's fingerprint"
    } else {
        ": generate one with `ssh-keygen -t ed25519 -N '' -f PATH`"
    }
}

/// A path that cannot be written into ssh_config as it is.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("is not UTF-8")]
    NotUtf8,
    #[error("must be an absolute path")]
    Relative,
    #[error("contains a character ssh would interpret (% $ quotes backslash or control)")]
    Interpreted,
}
