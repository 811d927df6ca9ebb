//! What spokekeeper.yaml's values must look like, checked when the file is loaded: a
//! bad value is reported with its key, its line and the fix before anything runs, and
//! nothing reaches git or ssh unchecked. One validator per section, over the values as
//! loaded (defaults filled in); value checks below them.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use super::{
    AlertsConfig, Config, RepoConfig, SpokeConfig, SshOverrides, is_dns_label, is_dns_subdomain,
};

/// A value that fails its check: where it is and what to do.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Invalid {
    /// `spokes[2].address`, as [`super::lines::Lines::line`] reads it.
    pub key: String,
    /// Starts with the key.
    pub message: String,
}

/// What is wrong with a value and what to write instead; [`at`] puts its key before it.
/// Carries the value as written (never a credential: see [`BadValue::ApiServerCredentials`]).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadValue {
    #[error("{name:?} is also spokes[{other}]'s name: spoke names must be unique")]
    DuplicateName { name: String, other: usize },
    #[error("{:?} is also spokes[{other}]'s output: give each spoke its own file", .output.display())]
    DuplicateOutput { output: PathBuf, other: usize },
    #[error("{namespace}/{name} is also spokes[{other}]'s Secret: give each spoke its own")]
    DuplicateSecret {
        namespace: String,
        name: String,
        other: usize,
    },
    #[error(
        "{0:?} must be lowercase letters, digits and '-' (a DNS label, at most 63, starting and ending with a letter or digit): it names files, branches and Secrets"
    )]
    SpokeName(String),
    #[error(
        "{0:?} is not a Kubernetes namespace: lowercase letters, digits and '-', at most 63 (e.g. flux-system)"
    )]
    Namespace(String),
    #[error(
        "{0:?} is not a Kubernetes object name: lowercase letters, digits, '-' and '.', at most 253 (e.g. dev-kubeconfig)"
    )]
    ObjectName(String),
    #[error("is empty: {HOST_FIX}")]
    HostEmpty,
    #[error("{0:?} contains a space or control character: {HOST_FIX}")]
    HostSpace(String),
    #[error("{0:?} is a URL, not a host: {HOST_FIX}")]
    HostUrl(String),
    #[error("{0:?} names a user: set ssh.user for that, and {HOST_FIX}")]
    HostUser(String),
    #[error("{0:?} starts with '-': {HOST_FIX}")]
    HostDash(String),
    #[error(
        "{0:?} is not a host name or IP address (a port goes in ssh.port or api_server): {HOST_FIX}"
    )]
    HostPort(String),
    #[error("{0:?} is not a host name or IP address: {HOST_FIX}")]
    NotHost(String),
    #[error(
        "{0:?} is not a plain user name: letters, digits, '.', '_' and '-', not starting with '-' (e.g. spokekeeper)"
    )]
    SshUser(String),
    #[error("is 0: a port is 1-65535 (ssh: usually 22)")]
    PortZero,
    #[error("{0:?} must be an absolute path on the node (e.g. /etc/rancher/k3s/k3s.yaml)")]
    NodePathRelative(String),
    #[error(
        "{0:?} must be a path without control characters (NUL, line breaks), at most 4096 bytes"
    )]
    NodePathControl(String),
    #[error("{0:?} is not a Secret data key: letters, digits, '-', '.' and '_' (e.g. value)")]
    SecretKey(String),
    #[error("{0:?} is not a URL ({1}): {API_SERVER_FIX}")]
    ApiServerNotUrl(String, url::ParseError),
    #[error("{0:?} must be an https:// URL with a host: {API_SERVER_FIX}")]
    ApiServerNotHttps(String),
    #[error("{0:?} has port 0: {API_SERVER_FIX}")]
    ApiServerPortZero(String),
    /// The URL with its user and password replaced by `***`: the value is not repeated.
    #[error(
        "{0:?} carries a user or password: the credential is the kubeconfig's; {API_SERVER_FIX}"
    )]
    ApiServerCredentials(String),
    #[error("{0:?} has a query or fragment, which the API does not take: {API_SERVER_FIX}")]
    ApiServerQuery(String),
    #[error("must be longer than 0s: e.g. {example}")]
    NotPositive { example: &'static str },
    #[error(
        "{0:?} must be a remote's name or URL, not starting with '-', without spaces (e.g. origin)"
    )]
    Remote(String),
    #[error("{branch:?} is not a valid branch name: {why} {BRANCH_FIX}")]
    Branch { branch: String, why: &'static str },
    #[error(
        "{0:?} must be `Name <email>` on one line (e.g. spokekeeper <spokekeeper@example.org>)"
    )]
    Author(String),
    #[error("{:?} must be a relative path inside the repo: {OUTPUT_FIX}", .0.display())]
    OutputOutside(PathBuf),
    #[error(
        "{:?} starts with ':', which git reads as pathspec magic (':!a.yaml' means every file but a.yaml): {OUTPUT_FIX}",
        .0.display()
    )]
    OutputPathspec(PathBuf),
    #[error(
        "{:?} is inside .git, git's own directory (hooks run code from there): {OUTPUT_FIX}",
        .0.display()
    )]
    OutputInGit(PathBuf),
    #[error("{:?} contains a control character: {OUTPUT_FIX}", .0.display())]
    OutputControl(PathBuf),
    #[error(
        "{:?} is not written as git names it ({plain:?}): git lists and compares paths in that form, so a `//`, `/./` or trailing `/` would not match it. Fix: write {plain:?}",
        given.display()
    )]
    OutputNotPlain { given: PathBuf, plain: String },
}

const HOST_FIX: &str =
    "write the node's host name or IP address alone (e.g. 10.0.0.1 or node1.example.org)";
const API_SERVER_FIX: &str = "write https://HOST:PORT, e.g. https://api.dev.example.org:6443";
const BRANCH_FIX: &str = "(git check-ref-format rules; e.g. main)";
const OUTPUT_FIX: &str =
    "write a relative path inside the repo, without '..' (e.g. fluxcd/dev-kubeconfig-sealed.yaml)";

type Reason = Result<(), BadValue>;

fn at(key: impl Into<String>, reason: Reason) -> Result<(), Invalid> {
    reason.map_err(|why| {
        let key = key.into();
        Invalid {
            message: format!("{key} {why}"),
            key,
        }
    })
}

/// Every section; the raw `ssh:` overrides are checked where they are written
/// ([`ssh`]), as they are merged into each spoke.
pub(super) fn config(c: &Config) -> Result<(), Invalid> {
    repo(&c.repo)?;
    at("renew_before", positive(c.renew_before, "30d"))?;
    at("verify_every", positive(c.verify_every, "24h"))?;
    alerts(&c.alerts)?;
    for (i, s) in c.spokes.iter().enumerate() {
        spoke(i, s)?;
    }
    sops(c)?;
    sealing_cert(c)?;
    flux_objects(c)?;
    fleet(&c.spokes)
}

/// `alerts.flux` posts about a spoke's Flux objects, which only `hub:` (listing the
/// Secret's consumers) or `spokes[].kustomization` can name: a spoke with neither would
/// have nothing an Alert can select.
fn flux_objects(c: &Config) -> Result<(), Invalid> {
    let unnamed = c
        .spokes
        .iter()
        .enumerate()
        .find(|(_, s)| s.kustomization.is_none());
    let Some((i, s)) = unnamed.filter(|_| c.alerts.flux.is_some() && c.hub.is_none()) else {
        return Ok(());
    };
    Err(Invalid {
        key: "alerts.flux".into(),
        message: format!(
            "alerts.flux is set, but spoke {} (spokes[{i}]) names no Flux object for its notifications, and without hub: its consumers cannot be listed: set spokes[{i}].kustomization to the Kustomization your Alert selects, or add hub:",
            s.name
        ),
    })
}

/// `sealing.cert` may be left out only when no spoke seals with Sealed Secrets.
fn sealing_cert(c: &Config) -> Result<(), Invalid> {
    if c.sealing_cert.is_some() {
        return Ok(());
    }
    let sealed: Vec<&str> = c
        .spokes
        .iter()
        .filter(|s| s.format == super::SealingFormat::SealedSecrets)
        .map(|s| s.name.as_str())
        .collect();
    if sealed.is_empty() {
        return Ok(());
    }
    const SHOWN: usize = 5;
    let mut names = sealed[..sealed.len().min(SHOWN)].join(", ");
    if sealed.len() > SHOWN {
        names.push_str(&format!(" and {} more", sealed.len() - SHOWN));
    }
    let (spokes, seal) = match sealed.len() {
        1 => ("spoke", "seals"),
        _ => ("spokes", "seal"),
    };
    Err(Invalid {
        key: "sealing.cert".into(),
        message: format!(
            "sealing.cert is not set, but {spokes} {names} {seal} with Sealed Secrets (sealing.format: sealed-secrets, the default), which needs the controller's certificate: set sealing.cert (kubeseal --fetch-cert > keys/sealed-secrets.pem), or set sealing.format: sops for them"
        ),
    })
}

/// A spoke in sops format needs somewhere its recipients come from.
fn sops(c: &Config) -> Result<(), Invalid> {
    let s = &c.sops;
    if s.age_recipients.is_some() || s.sops_config.is_some() {
        return Ok(());
    }
    let Some((i, _)) = c
        .spokes
        .iter()
        .enumerate()
        .find(|(_, s)| s.format == super::SealingFormat::Sops)
    else {
        return Ok(());
    };
    let key = if c
        .spokes
        .iter()
        .all(|s| s.format == super::SealingFormat::Sops)
    {
        "sealing.format".to_string()
    } else {
        format!("spokes[{i}].sealing.format")
    };
    Err(Invalid {
        message: format!(
            "{key} is sops, but no age recipient is configured: set sealing.age_recipients (age1... public keys, or a recipients file) or sealing.sops_config (the fleet repo's .sops.yaml)"
        ),
        key,
    })
}

pub(super) fn repo(r: &RepoConfig) -> Result<(), Invalid> {
    at("repo.remote", remote(&r.remote))?;
    at("repo.branch", branch(&r.branch))?;
    if let Some(a) = &r.author {
        at("repo.author", author(a))?;
    }
    if let Some(f) = &r.forge {
        at("repo.forge.timeout", positive(f.timeout, "20s"))?;
    }
    Ok(())
}

pub(super) fn alerts(a: &AlertsConfig) -> Result<(), Invalid> {
    at("alerts.warn_before", positive(a.warn_before, "30d"))?;
    at("alerts.critical_before", positive(a.critical_before, "7d"))?;
    at(
        "alerts.pending_review_after",
        positive(a.pending_review_after, "4h"),
    )
}

/// `ssh:` or `spokes[N].ssh:` as written (`prefix` is that key).
pub(super) fn ssh(prefix: &str, o: &SshOverrides) -> Result<(), Invalid> {
    if let Some(u) = &o.user {
        at(format!("{prefix}.user"), ssh_user(u))?;
    }
    if let Some(p) = o.port {
        at(format!("{prefix}.port"), port(p))?;
    }
    for (field, d) in [
        ("connect_timeout", o.connect_timeout),
        ("command_timeout", o.command_timeout),
    ] {
        if let Some(d) = d {
            at(format!("{prefix}.{field}"), positive(d.0, "30s"))?;
        }
    }
    Ok(())
}

/// First of a spoke's checks: its defaults (Secret, output, the `kustomization:` override) derive from it.
pub(super) fn name(i: usize, v: &str) -> Result<(), Invalid> {
    at(format!("spokes[{i}].name"), spoke_name(v))
}

pub(super) fn spoke(i: usize, s: &SpokeConfig) -> Result<(), Invalid> {
    let key = |field: &str| format!("spokes[{i}].{field}");
    name(i, &s.name)?;
    at(key("address"), host(&s.address))?;
    at(key("kubeconfig_path"), node_path(&s.kubeconfig_path))?;
    at(key("secret.name"), dns_subdomain(&s.secret.name))?;
    at(key("secret.namespace"), dns_label(&s.secret.namespace))?;
    at(key("secret.key"), secret_key(&s.secret.key))?;
    at(key("output"), output(&s.output))?;
    // The merged values; where they were written was checked by `ssh`.
    at(key("ssh.user"), ssh_user(&s.ssh.user))?;
    at(key("ssh.port"), port(s.ssh.port))
}

/// What must differ between spokes.
pub(super) fn fleet(spokes: &[SpokeConfig]) -> Result<(), Invalid> {
    let mut names = BTreeMap::new();
    let mut outputs = BTreeMap::new();
    let mut secrets = BTreeMap::new();
    for (i, s) in spokes.iter().enumerate() {
        if let Some(j) = names.insert(s.name.as_str(), i) {
            return at(
                format!("spokes[{i}].name"),
                Err(BadValue::DuplicateName {
                    name: s.name.clone(),
                    other: j,
                }),
            );
        }
        if let Some(j) = outputs.insert(s.output.as_path(), i) {
            return at(
                format!("spokes[{i}].output"),
                Err(BadValue::DuplicateOutput {
                    output: s.output.clone(),
                    other: j,
                }),
            );
        }
        let secret = (s.secret.namespace.as_str(), s.secret.name.as_str());
        if let Some(j) = secrets.insert(secret, i) {
            return at(
                format!("spokes[{i}].secret.name"),
                Err(BadValue::DuplicateSecret {
                    namespace: secret.0.to_string(),
                    name: secret.1.to_string(),
                    other: j,
                }),
            );
        }
    }
    Ok(())
}

// The value checks: Err says what is wrong with the value and what to write instead.

pub(crate) fn spoke_name(v: &str) -> Reason {
    is_dns_label(v)
        .then_some(())
        .ok_or_else(|| BadValue::SpokeName(v.to_string()))
}

pub(crate) fn dns_label(v: &str) -> Reason {
    is_dns_label(v)
        .then_some(())
        .ok_or_else(|| BadValue::Namespace(v.to_string()))
}

pub(crate) fn dns_subdomain(v: &str) -> Reason {
    is_dns_subdomain(v)
        .then_some(())
        .ok_or_else(|| BadValue::ObjectName(v.to_string()))
}

/// A host name or an IP address, nothing around it: it is ssh's destination and the
/// API server's default host.
pub(super) fn host(v: &str) -> Reason {
    if v.is_empty() {
        return Err(BadValue::HostEmpty);
    }
    if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(BadValue::HostSpace(v.to_string()));
    }
    if v.contains("://") || v.contains('/') {
        return Err(BadValue::HostUrl(v.to_string()));
    }
    if v.contains('@') {
        return Err(BadValue::HostUser(v.to_string()));
    }
    if v.starts_with('-') {
        return Err(BadValue::HostDash(v.to_string()));
    }
    if v.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    if v.contains(':') {
        return Err(BadValue::HostPort(v.to_string()));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if v.len() <= 253 && v.split('.').all(label_ok) {
        return Ok(());
    }
    Err(BadValue::NotHost(v.to_string()))
}

/// Given to ssh as the login name: nothing it or a shell could read as more.
pub(crate) fn ssh_user(v: &str) -> Reason {
    let plain = !v.is_empty()
        && v.len() <= 256
        && !v.starts_with('-')
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if plain {
        return Ok(());
    }
    Err(BadValue::SshUser(v.to_string()))
}

pub(super) fn port(p: u16) -> Reason {
    if p == 0 {
        return Err(BadValue::PortZero);
    }
    Ok(())
}

/// A path on the node, read with `cat PATH`.
pub(crate) fn node_path(v: &str) -> Reason {
    if !v.starts_with('/') {
        return Err(BadValue::NodePathRelative(v.to_string()));
    }
    if v.len() > 4096 || v.chars().any(char::is_control) {
        return Err(BadValue::NodePathControl(v.to_string()));
    }
    Ok(())
}

/// A key of a Secret's data.
pub(crate) fn secret_key(v: &str) -> Reason {
    let ok = !v.is_empty()
        && v.len() <= 253
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if ok {
        return Ok(());
    }
    Err(BadValue::SecretKey(v.to_string()))
}

/// The spoke's API server as the hub reaches it.
pub(super) fn api_server(v: &str) -> Result<url::Url, BadValue> {
    let u = url::Url::parse(v).map_err(|e| BadValue::ApiServerNotUrl(v.to_string(), e))?;
    if u.scheme() != "https" || u.host().is_none() {
        return Err(BadValue::ApiServerNotHttps(v.to_string()));
    }
    if u.port() == Some(0) {
        return Err(BadValue::ApiServerPortZero(v.to_string()));
    }
    if !u.username().is_empty() || u.password().is_some() {
        let mut shown = u.clone();
        let _ = shown.set_username("***");
        let _ = shown.set_password(u.password().map(|_| "***"));
        return Err(BadValue::ApiServerCredentials(shown.to_string()));
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Err(BadValue::ApiServerQuery(v.to_string()));
    }
    Ok(u)
}

pub(crate) fn positive(d: Duration, example: &'static str) -> Reason {
    if d.is_zero() {
        return Err(BadValue::NotPositive { example });
    }
    Ok(())
}

/// A remote's name or URL, given to `git fetch` and `git push`.
pub(super) fn remote(v: &str) -> Reason {
    if v.is_empty() || v.starts_with('-') || v.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(BadValue::Remote(v.to_string()));
    }
    Ok(())
}

/// A branch name, by `git check-ref-format --branch`'s rules.
pub(super) fn branch(v: &str) -> Reason {
    let bad = |why: &'static str| {
        Err(BadValue::Branch {
            branch: v.to_string(),
            why,
        })
    };
    if v.is_empty() {
        return bad("it is empty");
    }
    if v.starts_with('-') {
        return bad("it starts with '-'");
    }
    if v == "@" || v == "HEAD" {
        return bad("it is reserved");
    }
    if v.chars()
        .any(|c| c.is_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\'))
    {
        return bad("it contains a space, a control character or one of ~ ^ : ? * [ \\");
    }
    if v.contains("..") || v.contains("@{") || v.contains("//") {
        return bad("it contains '..', '@{' or '//'");
    }
    if v.starts_with('/') || v.ends_with('/') || v.ends_with('.') {
        return bad("it starts or ends with '/', or ends with '.'");
    }
    if v.split('/')
        .any(|c| c.starts_with('.') || c.ends_with(".lock"))
    {
        return bad("a part starts with '.' or ends with '.lock'");
    }
    Ok(())
}

/// `Name <email>`, as git takes it.
pub(super) fn author(v: &str) -> Reason {
    let parsed = v
        .split_once('<')
        .and_then(|(name, rest)| Some((name.trim(), rest.strip_suffix('>')?.trim())));
    let ok = parsed.is_some_and(|(name, email)| {
        !name.is_empty() && !email.is_empty() && !email.contains(['<', '>'])
    }) && !v.chars().any(char::is_control);
    if ok {
        return Ok(());
    }
    Err(BadValue::Author(v.to_string()))
}

/// A file in the fleet repo, relative to its root.
pub(super) fn output(p: &Path) -> Reason {
    let inside =
        !p.as_os_str().is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
    if !inside {
        return Err(BadValue::OutputOutside(p.to_path_buf()));
    }
    if p.to_string_lossy().starts_with(':') {
        return Err(BadValue::OutputPathspec(p.to_path_buf()));
    }
    if p.components()
        .any(|c| c.as_os_str().eq_ignore_ascii_case(".git"))
    {
        return Err(BadValue::OutputInGit(p.to_path_buf()));
    }
    if p.to_string_lossy().chars().any(char::is_control) {
        return Err(BadValue::OutputControl(p.to_path_buf()));
    }
    let plain = p
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/");
    if p.to_str() != Some(plain.as_str()) {
        return Err(BadValue::OutputNotPlain {
            given: p.to_path_buf(),
            plain,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
