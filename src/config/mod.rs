//! spokekeeper.yaml: types, loading, validation.
//!
//! Every error names the file, the line where known, and the fix. Unknown keys are
//! errors (a typo must not silently fall back to a default). Relative paths resolve
//! against the configuration file's directory.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

mod check;
mod credential;
mod lines;
pub mod signing_key;
mod ssh;
mod types;

pub use credential::{CredentialMode, CredentialPolicy};
pub use ssh::SshSettings;
pub use types::{Distro, Scope};

pub const DEFAULT_SECRET_NAMESPACE: &str = "flux-system";
pub const DEFAULT_SECRET_KEY: &str = "value";
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";
pub const DEFAULT_CONTROLLER_NAMESPACE: &str = "kube-system";
pub const DEFAULT_CONTROLLER_NAME: &str = "sealed-secrets-controller";
pub const DEFAULT_KUSTOMIZATION_NAMESPACE: &str = "flux-system";
pub const DEFAULT_VERIFY_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub message: String,
}

/// A duration written as a number and a unit: `30s`, `15m`, `24h`, `30d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span(pub Duration);

impl FromStr for Span {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
        let n: u64 = num.parse().map_err(|_| {
            format!("{s:?} is not a duration: write a number and a unit, like 30s, 15m, 24h or 30d")
        })?;
        let secs = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => {
                return Err(format!(
                    "{s:?} has no known unit: use s, m, h or d (e.g. 30d)"
                ));
            }
        };
        n.checked_mul(secs)
            .map(|t| Span(Duration::from_secs(t)))
            .ok_or_else(|| format!("{s:?} is too long"))
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.as_secs();
        match s {
            s if s % 86_400 == 0 && s > 0 => write!(f, "{}d", s / 86_400),
            s if s % 3600 == 0 && s > 0 => write!(f, "{}h", s / 3600),
            s if s % 60 == 0 && s > 0 => write!(f, "{}m", s / 60),
            s => write!(f, "{s}s"),
        }
    }
}

/// Where a spoke's kubeconfig is read from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// Over SSH from the node (the default).
    #[default]
    Ssh,
    /// A file on this host: spokekeeper runs on the node itself (and the demo).
    Local,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    repo: RawRepo,
    sealing: RawSealing,
    #[serde(default)]
    schedule: Option<String>,
    #[serde(default)]
    metrics: Option<RawMetrics>,
    #[serde(default)]
    renew_before: Option<Span>,
    #[serde(default)]
    verify_every: Option<Span>,
    #[serde(default)]
    alerts: Option<RawAlerts>,
    #[serde(default)]
    ssh: SshOverrides,
    #[serde(default)]
    hub: Option<RawHub>,
    #[serde(default)]
    credential: credential::RawCredential,
    spokes: Vec<RawSpoke>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHub {
    #[serde(default)]
    kubeconfig: Option<PathBuf>,
    #[serde(default)]
    controller: Option<RawController>,
    #[serde(default)]
    verify_timeout: Option<Span>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawController {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default, deserialize_with = "service_port")]
    port: Option<String>,
}

/// A Service port's name, or its number (`port: 8080` as YAML writes it).
fn service_port<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NameOrNumber {
        Name(String),
        Number(u16),
    }
    Ok(Option::<NameOrNumber>::deserialize(d)?.map(|p| match p {
        NameOrNumber::Name(n) => n,
        NameOrNumber::Number(n) => n.to_string(),
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKustomizationRef {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRepo {
    path: PathBuf,
    #[serde(default)]
    remote: Option<String>,
    #[serde(default)]
    branch: Option<String>,
    #[serde(default)]
    author: Option<String>,
    #[serde(default)]
    push: Option<bool>,
    #[serde(default)]
    mode: Option<RepoMode>,
    #[serde(default)]
    forge: Option<RawForge>,
    #[serde(default)]
    signing_key: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawForge {
    kind: ForgeKind,
    url: String,
    repository: String,
    #[serde(default)]
    token_file: Option<PathBuf>,
    #[serde(default)]
    token_env: Option<String>,
    /// Present only to be refused with the fix: a token never lives in the config.
    #[serde(default)]
    token: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    reviewers: Vec<String>,
    #[serde(default)]
    timeout: Option<Span>,
    #[serde(default)]
    rate_limit_wait: Option<Span>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSealing {
    cert: PathBuf,
    #[serde(default)]
    sha256: Option<OneOrMany>,
}

/// `sealing.sha256`: one fingerprint, or a list (a planned key rollover).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    listen: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlerts {
    #[serde(default)]
    warn_before: Option<Span>,
    #[serde(default)]
    critical_before: Option<Span>,
    #[serde(default)]
    alertmanager: Option<String>,
    #[serde(default)]
    webhook: Option<String>,
    #[serde(default)]
    pending_review_after: Option<Span>,
}

/// SSH settings as written: every field optional so a spoke can override any of them.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshOverrides {
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default, deserialize_with = "ssh_port")]
    pub port: Option<u16>,
    #[serde(default)]
    pub identity: Option<PathBuf>,
    #[serde(default)]
    pub known_hosts: Option<PathBuf>,
    #[serde(default)]
    pub sudo: Option<bool>,
    #[serde(default)]
    pub connect_timeout: Option<Span>,
    #[serde(default)]
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecretRef {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    key: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpoke {
    name: String,
    address: String,
    #[serde(default)]
    distro: Option<Distro>,
    #[serde(default)]
    source: Option<SourceKind>,
    #[serde(default)]
    kubeconfig_path: Option<String>,
    #[serde(default)]
    api_server: Option<String>,
    #[serde(default)]
    ssh: SshOverrides,
    #[serde(default)]
    secret: Option<RawSecretRef>,
    #[serde(default)]
    scope: Option<Scope>,
    #[serde(default)]
    output: Option<PathBuf>,
    #[serde(default)]
    kustomization: Option<RawKustomizationRef>,
    #[serde(default)]
    credential: credential::RawCredential,
}

/// How a rotation reaches the target branch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RepoMode {
    /// Commit on the target branch and push (the default).
    #[default]
    Direct,
    /// One branch `spokekeeper/<spoke>` and one pull request per rotated spoke.
    PullRequest,
}

/// Which forge API opens the pull requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForgeKind {
    Github,
    Gitlab,
    /// Gitea and Forgejo (the same API).
    #[serde(alias = "forgejo")]
    Gitea,
}

/// Where the forge token is read from at each use (never from the config itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    File(PathBuf),
    Env(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForgeConfig {
    pub kind: ForgeKind,
    /// The API base as written (GitLab gets /api/v4, Gitea /api/v1 appended).
    pub url: url::Url,
    /// owner/name; for GitLab a numeric project id or group/project.
    pub repository: String,
    pub token: TokenSource,
    pub labels: Vec<String>,
    /// Usernames (GitHub, Gitea); GitLab: numeric user ids.
    pub reviewers: Vec<String>,
    /// Per request (default 20s).
    pub timeout: Duration,
    /// The longest rate-limit wait honoured before giving up until the next tick (60s).
    pub rate_limit_wait: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoConfig {
    pub path: PathBuf,
    pub remote: String,
    pub branch: String,
    pub author: Option<String>,
    pub push: bool,
    pub mode: RepoMode,
    /// Set exactly when `mode` is pull-request.
    pub forge: Option<ForgeConfig>,
    /// The OpenSSH private key that signs review commits; set exactly when `mode` is
    /// pull-request (a review branch is trusted only when its head verifies against it).
    pub signing_key: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertsConfig {
    pub warn_before: Duration,
    pub critical_before: Duration,
    pub alertmanager: Option<url::Url>,
    pub webhook: Option<url::Url>,
    /// How long a fix for a broken hub credential may wait for review before an alert.
    pub pending_review_after: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    pub name: String,
    pub namespace: String,
    pub key: String,
}

/// The hub cluster's API: where the Sealed Secrets controller and Flux run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubConfig {
    /// None: in-cluster, else KUBECONFIG or ~/.kube/config (kube::Config::infer).
    pub kubeconfig: Option<PathBuf>,
    pub controller: ControllerRef,
    /// Bounds waiting for Synced, then Ready, after a push.
    pub verify_timeout: Duration,
}

/// The Sealed Secrets controller's Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerRef {
    pub namespace: String,
    pub name: String,
    /// None: the Service's first port (its name, else its number).
    pub port: Option<String>,
}

/// `spokes[].kustomization`: the one Flux Kustomization verified after a push, instead
/// of every consumer of the spoke's Secret found on the hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KustomizationRef {
    pub name: String,
    pub namespace: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpokeConfig {
    pub name: String,
    pub address: String,
    pub distro: Distro,
    pub source: SourceKind,
    pub kubeconfig_path: String,
    /// None: https://ADDRESS:PORT-from-the-extracted-kubeconfig.
    pub api_server: Option<url::Url>,
    pub ssh: SshSettings,
    pub secret: SecretRef,
    pub scope: Scope,
    /// Relative to the repo root; never absolute, never leaves the repo.
    pub output: PathBuf,
    /// Used only when `hub:` is configured. None: verify every Kustomization and
    /// HelmRelease on the hub whose spec.kubeConfig.secretRef names the spoke's Secret.
    pub kustomization: Option<KustomizationRef>,
    /// `credential:` merged over the global one.
    pub credential: CredentialPolicy,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub file: PathBuf,
    pub repo: RepoConfig,
    pub sealing_cert: PathBuf,
    /// `sealing.sha256`: the sealing certificate fingerprints this host trusts, kept
    /// outside the fleet repo (lowercase `sha256:<hex>`; empty: not set).
    pub sealing_sha256: Vec<String>,
    pub schedule: String,
    pub metrics_listen: SocketAddr,
    pub renew_before: Duration,
    pub verify_every: Duration,
    pub alerts: AlertsConfig,
    /// None: no hub API; sealing.cert is used as is.
    pub hub: Option<HubConfig>,
    pub spokes: Vec<SpokeConfig>,
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            message: format!("cannot read it: {e} (pass --config FILE, or set SPOKEKEEPER_CONFIG; `spokekeeper init` writes one)"),
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let config = Self::parse(&text, &file, &base)?;
        if let Some(key) = &config.repo.signing_key {
            signing_key::public_key(key).map_err(|e| ConfigError {
                file: file.clone(),
                message: match lines::Lines::of(&text).line("repo.signing_key") {
                    Some(n) => format!("line {n}: {e}"),
                    None => e.to_string(),
                },
            })?;
        }
        Ok(config)
    }

    /// Parses and validates; `base` resolves relative paths.
    pub fn parse(text: &str, file: &str, base: &Path) -> Result<Config, ConfigError> {
        let err = |message: String| ConfigError {
            file: file.to_string(),
            message,
        };
        let raw: RawConfig = serde_saphyr::from_str(text).map_err(|e| err(format!("{e}")))?;
        // A value refused after parsing names its key and, through this, its line.
        let lines = lines::Lines::of(text);
        let invalid = |i: check::Invalid| match lines.line(&i.key) {
            Some(n) => err(format!("line {n}: {}", i.message)),
            None => err(i.message),
        };
        let bad = |key: &str, message: String| {
            invalid(check::Invalid {
                key: key.to_string(),
                message,
            })
        };
        check::ssh("ssh", &raw.ssh).map_err(invalid)?;
        let resolve = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };

        let schedule = raw.schedule.unwrap_or_else(|| "*/15 * * * *".into());
        croner::Cron::from_str(&schedule).map_err(|e| {
            bad("schedule", format!("schedule {schedule:?} is not a cron expression ({e}): use 5 fields like \"*/15 * * * *\", or @hourly, @daily"))
        })?;
        let listen = raw
            .metrics
            .map_or(DEFAULT_METRICS_LISTEN.to_string(), |m| m.listen);
        let metrics_listen = listen.parse().map_err(|_| {
            bad(
                "metrics.listen",
                format!("metrics.listen {listen:?} is not HOST:PORT: e.g. 127.0.0.1:9464"),
            )
        })?;

        let alerts = raw.alerts;
        let url = |field: &str, v: Option<String>| -> Result<Option<url::Url>, ConfigError> {
            v.map(|s| {
                url::Url::parse(&s)
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https"))
                    .ok_or_else(|| bad(field, format!("{field} {s:?} is not an http(s) URL")))
            })
            .transpose()
        };
        let (warn, crit, am, hook, pending) = match alerts {
            Some(a) => (
                a.warn_before,
                a.critical_before,
                a.alertmanager,
                a.webhook,
                a.pending_review_after,
            ),
            None => (None, None, None, None, None),
        };
        let alerts = AlertsConfig {
            warn_before: warn.map_or(Duration::from_secs(30 * 86_400), |s| s.0),
            critical_before: crit.map_or(Duration::from_secs(7 * 86_400), |s| s.0),
            alertmanager: url("alerts.alertmanager", am)?,
            webhook: url("alerts.webhook", hook)?,
            pending_review_after: pending.map_or(Duration::from_secs(4 * 3600), |s| s.0),
        };
        if alerts.critical_before > alerts.warn_before {
            return Err(bad(
                "alerts.critical_before",
                format!(
                    "alerts.critical_before ({}) is longer than alerts.warn_before ({}): critical must come later, closer to expiry",
                    Span(alerts.critical_before),
                    Span(alerts.warn_before)
                ),
            ));
        }

        if raw.spokes.is_empty() {
            return Err(err(
                "spokes is empty: add at least one spoke (name and address)".into(),
            ));
        }
        let mut spokes = Vec::with_capacity(raw.spokes.len());
        for (i, s) in raw.spokes.into_iter().enumerate() {
            // Each value is checked by check::spoke once the spoke is built.
            let at = format!("spokes[{i}]");
            check::name(i, &s.name).map_err(invalid)?;
            check::ssh(&format!("{at}.ssh"), &s.ssh).map_err(invalid)?;
            let api_server = s
                .api_server
                .map(|u| {
                    check::api_server(&u).map_err(|e| {
                        bad(&format!("{at}.api_server"), format!("{at}.api_server {e}"))
                    })
                })
                .transpose()?;
            let distro = s.distro.unwrap_or(Distro::K3s);
            let kubeconfig_path = s
                .kubeconfig_path
                .unwrap_or_else(|| distro.kubeconfig_path().into());
            let o = merge_ssh(&raw.ssh, &s.ssh);
            let d = SshSettings::default();
            let ssh = SshSettings {
                user: o.user.unwrap_or(d.user),
                port: o.port.unwrap_or(d.port),
                identity: o.identity.as_deref().map_or(d.identity, resolve),
                known_hosts: o.known_hosts.as_deref().map_or(d.known_hosts, resolve),
                sudo: o.sudo.unwrap_or(d.sudo),
                connect_timeout: o.connect_timeout.map_or(d.connect_timeout, |s| s.0),
                command_timeout: o.command_timeout.map_or(d.command_timeout, |s| s.0),
            };
            let secret = s.secret.unwrap_or(RawSecretRef {
                name: None,
                namespace: None,
                key: None,
            });
            let secret = SecretRef {
                name: secret
                    .name
                    .unwrap_or_else(|| format!("{}-kubeconfig", s.name)),
                namespace: secret
                    .namespace
                    .unwrap_or_else(|| DEFAULT_SECRET_NAMESPACE.into()),
                key: secret.key.unwrap_or_else(|| DEFAULT_SECRET_KEY.into()),
            };
            let output = s
                .output
                .unwrap_or_else(|| PathBuf::from(format!("fluxcd/{}-sealed.yaml", secret.name)));
            let kustomization = match s.kustomization {
                None => None,
                Some(k) => {
                    let k = KustomizationRef {
                        name: k.name.unwrap_or_else(|| s.name.clone()),
                        namespace: k
                            .namespace
                            .unwrap_or_else(|| DEFAULT_KUSTOMIZATION_NAMESPACE.into()),
                    };
                    for (field, v) in [("name", &k.name), ("namespace", &k.namespace)] {
                        if !is_dns_subdomain(v) {
                            return Err(bad(
                                &format!("{at}.kustomization.{field}"),
                                format!(
                                    "{at}.kustomization.{field} {v:?} is not a Kubernetes object name: lowercase letters, digits, '-' and '.'"
                                ),
                            ));
                        }
                    }
                    Some(k)
                }
            };
            let credential = credential::resolve(&raw.credential, &s.credential, &at)
                .map_err(|r| bad(&r.key, r.message))?;
            spokes.push(SpokeConfig {
                name: s.name,
                address: s.address,
                distro,
                source: s.source.unwrap_or_default(),
                kubeconfig_path,
                api_server,
                ssh,
                secret,
                scope: s.scope.unwrap_or_default(),
                output,
                kustomization,
                credential,
            });
        }

        let hub = raw
            .hub
            .map(|h| {
                let c = h.controller.unwrap_or_default();
                let controller = ControllerRef {
                    namespace: c
                        .namespace
                        .unwrap_or_else(|| DEFAULT_CONTROLLER_NAMESPACE.into()),
                    name: c.name.unwrap_or_else(|| DEFAULT_CONTROLLER_NAME.into()),
                    port: c.port,
                };
                for (field, v) in [
                    ("namespace", &controller.namespace),
                    ("name", &controller.name),
                ] {
                    if !is_dns_label(v) {
                        return Err(bad(&format!("hub.controller.{field}"), format!(
                            "hub.controller.{field} {v:?} is not a Kubernetes name: lowercase letters, digits and '-' (e.g. {})",
                            if field == "name" { DEFAULT_CONTROLLER_NAME } else { DEFAULT_CONTROLLER_NAMESPACE }
                        )));
                    }
                }
                // "" is an unnamed port, as kubeseal asks for it (upstream controller.yaml).
                if let Some(p) = &controller.port
                    && !p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                {
                    return Err(bad("hub.controller.port", format!(
                        "hub.controller.port {p:?} must be the Service's port name or number (e.g. http or 8080; \"\" for an unnamed port), or left out to use its first port"
                    )));
                }
                let verify_timeout = h.verify_timeout.map_or(DEFAULT_VERIFY_TIMEOUT, |s| s.0);
                if verify_timeout.is_zero() {
                    return Err(bad("hub.verify_timeout", 
                        "hub.verify_timeout must be longer than 0s: e.g. 2m".into(),
                    ));
                }
                Ok(HubConfig {
                    kubeconfig: h.kubeconfig.as_deref().map(resolve),
                    controller,
                    verify_timeout,
                })
            })
            .transpose()?;
        let mode = raw.repo.mode.unwrap_or_default();
        let forge = match (mode, raw.repo.forge) {
            (RepoMode::Direct, None) => None,
            (RepoMode::Direct, Some(_)) => {
                return Err(err(
                    "repo.forge is set but repo.mode is direct: set repo.mode: pull-request, or remove repo.forge".into(),
                ));
            }
            (RepoMode::PullRequest, None) => {
                return Err(err(
                    "repo.mode pull-request needs repo.forge (kind, url, repository, token_file or token_env)".into(),
                ));
            }
            (RepoMode::PullRequest, Some(f)) => {
                Some(forge_config(f, &resolve).map_err(|e| bad("repo.forge", e))?)
            }
        };
        let signing_key = match (mode, raw.repo.signing_key) {
            (RepoMode::PullRequest, Some(k)) => Some(resolve(&k)),
            (RepoMode::PullRequest, None) => {
                return Err(bad(
                    "repo.mode",
                    format!(
                        "repo.signing_key is required with repo.mode: pull-request: spokekeeper signs every review commit with it and trusts a review branch only when its signature verifies. Create one ({}) and set repo.signing_key: /etc/spokekeeper/signing-key",
                        signing_key::KEYGEN
                    ),
                ));
            }
            (RepoMode::Direct, Some(_)) => {
                return Err(bad(
                    "repo.signing_key",
                    "repo.signing_key is set but repo.mode is direct: it signs review commits only; set repo.mode: pull-request, or remove repo.signing_key".into(),
                ));
            }
            (RepoMode::Direct, None) => None,
        };
        if mode == RepoMode::PullRequest && raw.repo.push == Some(false) {
            return Err(err(
                "repo.push: false cannot work with repo.mode pull-request (the branch must be pushed to open a pull request): remove one".into(),
            ));
        }

        let sealing_sha256 = match raw.sealing.sha256 {
            None => Vec::new(),
            Some(OneOrMany::One(v)) => vec![v],
            Some(OneOrMany::Many(v)) => v,
        };
        let sealing_sha256 = sealing_sha256
            .into_iter()
            .map(|v| {
                let hex = v.strip_prefix("sha256:").unwrap_or("");
                if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
                } else {
                    Err(bad(
                        "sealing.sha256",
                        format!(
                            "sealing.sha256 {:?} is not a certificate fingerprint: write sha256: and 64 hex digits, as `spokekeeper inspect CERT` prints it (a list for a key rollover)",
                            crate::text::one_line(&v, 80)
                        ),
                    ))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;

        let config = Config {
            hub,
            file: PathBuf::from(file),
            repo: RepoConfig {
                path: resolve(&raw.repo.path),
                remote: raw.repo.remote.unwrap_or_else(|| "origin".into()),
                branch: raw.repo.branch.unwrap_or_else(|| "main".into()),
                author: raw.repo.author,
                push: raw.repo.push.unwrap_or(true),
                mode,
                forge,
                signing_key,
            },
            sealing_cert: resolve(&raw.sealing.cert),
            sealing_sha256,
            schedule,
            metrics_listen,
            renew_before: raw
                .renew_before
                .map_or(Duration::from_secs(30 * 86_400), |s| s.0),
            verify_every: raw
                .verify_every
                .map_or(Duration::from_secs(86_400), |s| s.0),
            alerts,
            spokes,
        };
        check::config(&config).map_err(invalid)?;
        Ok(config)
    }
}

fn forge_config(f: RawForge, resolve: &dyn Fn(&Path) -> PathBuf) -> Result<ForgeConfig, String> {
    if f.token.is_some() {
        return Err(
            "repo.forge.token is not allowed: a token never goes in the configuration file. \
             Put it in a file (repo.forge.token_file: /etc/spokekeeper/forge-token, mode 600) \
             or an environment variable (repo.forge.token_env: SPOKEKEEPER_FORGE_TOKEN)"
                .into(),
        );
    }
    let token = match (f.token_file, f.token_env) {
        (Some(p), None) => TokenSource::File(resolve(&p)),
        (None, Some(v)) if !v.trim().is_empty() => TokenSource::Env(v),
        (None, None) | (None, Some(_)) => {
            return Err(
                "repo.forge needs token_file (a file holding the token) or token_env (the variable's name)".into(),
            );
        }
        (Some(_), Some(_)) => {
            return Err("repo.forge has both token_file and token_env: keep exactly one".into());
        }
    };
    let url = url::Url::parse(&f.url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| {
            format!(
                "repo.forge.url {:?} is not an http(s) URL: e.g. https://api.github.com, https://gitlab.example.org",
                f.url
            )
        })?;
    // The token travels in a header: plain HTTP only to this machine.
    let loopback = match url.host() {
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    };
    if url.scheme() == "http" && !loopback {
        return Err(format!(
            "repo.forge.url {:?} is plain http: the token would cross the network in clear; use https",
            f.url
        ));
    }
    let repo = f.repository.trim();
    let ok = match f.kind {
        ForgeKind::Gitlab => {
            repo.bytes().all(|b| b.is_ascii_digit()) && !repo.is_empty()
                || repo.split('/').count() >= 2 && repo.split('/').all(|p| !p.is_empty())
        }
        _ => repo.split('/').count() == 2 && repo.split('/').all(|p| !p.is_empty()),
    };
    if !ok {
        return Err(format!(
            "repo.forge.repository {:?} must be owner/name (GitLab: a numeric project id or group/project)",
            f.repository
        ));
    }
    if f.kind == ForgeKind::Gitlab
        && let Some(r) = f.reviewers.iter().find(|r| r.parse::<u64>().is_err())
    {
        return Err(format!(
            "repo.forge.reviewers {r:?}: GitLab takes reviewer user ids (numbers, from /api/v4/users?username=NAME)"
        ));
    }
    Ok(ForgeConfig {
        kind: f.kind,
        url,
        repository: repo.to_string(),
        token,
        labels: f.labels,
        reviewers: f.reviewers,
        timeout: f.timeout.map_or(Duration::from_secs(20), |s| s.0),
        rate_limit_wait: f.rate_limit_wait.map_or(Duration::from_secs(60), |s| s.0),
    })
}

/// ` (line N)` for the first line holding `needle`, or nothing.
fn merge_ssh(defaults: &SshOverrides, spoke: &SshOverrides) -> SshOverrides {
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

pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
repo:
  path: fleet
  branch: trunk
  author: "spokekeeper <spokekeeper@example.org>"
  push: false
sealing:
  cert: keys/sealed-secrets-infra.pem
schedule: "@hourly"
metrics:
  listen: 127.0.0.1:9999
renew_before: 20d
verify_every: 12h
alerts:
  warn_before: 21d
  critical_before: 3d
  alertmanager: http://alertmanager.monitoring:9093
ssh:
  user: spokekeeper
  identity: ssh/id_ed25519
  known_hosts: /etc/spokekeeper/known_hosts
  sudo: true
  connect_timeout: 5s
spokes:
  - name: dev
    address: 192.168.1.20
    ssh: { port: 2222, sudo: false }
  - name: test
    address: test.example.org
    distro: kubeadm
    api_server: https://api.test.example.org:6443
    scope: namespace-wide
    secret: { name: t, namespace: other, key: kubeconfig }
    output: clusters/test.yaml
"#;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(
            text,
            "/etc/spokekeeper/spokekeeper.yaml",
            Path::new("/etc/spokekeeper"),
        )
    }

    #[test]
    fn full_file_with_defaults_and_overrides() {
        let c = parse(FULL).unwrap();
        assert_eq!(c.repo.path, Path::new("/etc/spokekeeper/fleet"));
        assert_eq!(
            (c.repo.remote.as_str(), c.repo.branch.as_str(), c.repo.push),
            ("origin", "trunk", false)
        );
        assert_eq!(
            c.sealing_cert,
            Path::new("/etc/spokekeeper/keys/sealed-secrets-infra.pem")
        );
        assert_eq!(c.renew_before, Duration::from_secs(20 * 86_400));
        assert_eq!(c.verify_every, Duration::from_secs(12 * 3600));
        assert_eq!(c.alerts.critical_before, Duration::from_secs(3 * 86_400));
        assert_eq!(c.metrics_listen.port(), 9999);
        let dev = &c.spokes[0];
        assert_eq!(dev.kubeconfig_path, "/etc/rancher/k3s/k3s.yaml");
        assert_eq!(dev.ssh.port, 2222);
        assert!(!dev.ssh.sudo, "the spoke's override wins");
        assert_eq!(dev.ssh.user, "spokekeeper", "the default fills the rest");
        assert_eq!(
            dev.ssh.identity,
            Path::new("/etc/spokekeeper/ssh/id_ed25519")
        );
        assert_eq!(
            dev.ssh.known_hosts,
            Path::new("/etc/spokekeeper/known_hosts")
        );
        assert_eq!(dev.source, SourceKind::Ssh);
        assert_eq!(dev.ssh.connect_timeout, Duration::from_secs(5));
        assert_eq!(
            dev.secret,
            SecretRef {
                name: "dev-kubeconfig".into(),
                namespace: "flux-system".into(),
                key: "value".into()
            }
        );
        assert_eq!(dev.output, Path::new("fluxcd/dev-kubeconfig-sealed.yaml"));
        assert_eq!(dev.scope, Scope::Strict);
        let test = &c.spokes[1];
        assert_eq!(test.kubeconfig_path, "/etc/kubernetes/admin.conf");
        assert!(test.ssh.sudo);
        assert_eq!(test.ssh.port, 22);
        assert_eq!(test.scope, Scope::NamespaceWide);
        assert_eq!(test.api_server.as_ref().unwrap().port(), Some(6443));
    }

    fn refused(text: &str, needles: &[&str]) {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.starts_with("/etc/spokekeeper/spokekeeper.yaml: "), "{e}");
        for n in needles {
            assert!(e.contains(n), "want {n:?} in: {e}");
        }
    }

    const MIN: &str =
        "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";

    #[test]
    fn minimal_file_takes_defaults() {
        let c = parse(MIN).unwrap();
        assert_eq!(c.schedule, "*/15 * * * *");
        assert_eq!(c.metrics_listen.to_string(), DEFAULT_METRICS_LISTEN);
        assert_eq!(c.spokes[0].ssh.user, "root");
        assert_eq!(c.alerts.warn_before, Duration::from_secs(30 * 86_400));
    }

    #[test]
    fn mistakes_name_the_field_and_the_fix() {
        refused(&MIN.replace("address", "adress"), &["adress", "line 4"]);
        refused(&format!("{MIN}bogus: 1\n"), &["bogus"]);
        refused(
            &format!("{MIN}renew_before: 30\n"),
            &["renew_before", "30d"],
        );
        refused(&format!("{MIN}renew_before: 3w\n"), &["s, m, h or d"]);
        refused(
            &format!("{MIN}schedule: \"every day\"\n"),
            &["schedule", "@hourly"],
        );
        refused(
            &format!("{MIN}metrics: {{listen: nowhere}}\n"),
            &["metrics.listen", "HOST:PORT"],
        );
        refused(
            &format!("{MIN}alerts: {{warn_before: 1d, critical_before: 7d}}\n"),
            &["critical_before", "warn_before"],
        );
        refused(
            &MIN.replace("name: dev", "name: Dev_1"),
            &["Dev_1", "lowercase"],
        );
        refused(
            &format!("{MIN}  - {{name: dev, address: 10.0.0.2}}\n"),
            &["line 5: spokes[1].name", "spokes[0]", "unique"],
        );
        refused(
            &MIN.replace("10.0.0.1", "10.0.0.1, output: ../escape.yaml"),
            &["output", "inside the repo"],
        );
        refused(
            &MIN.replace("10.0.0.1", "10.0.0.1, api_server: http://x:6443"),
            &["api_server", "https"],
        );
        refused(
            &MIN.replace("10.0.0.1", "10.0.0.1, distro: talos"),
            &["talos"],
        );
        refused(
            &MIN.replace("10.0.0.1", "10.0.0.1, scope: global"),
            &["strict, namespace-wide or cluster-wide"],
        );
        refused(
            &MIN.replace("10.0.0.1", "10.0.0.1, kubeconfig_path: k3s.yaml"),
            &["absolute"],
        );
        refused(
            &MIN.replace("10.0.0.1", "10.0.0.1, ssh: {prot: 22}"),
            &["prot"],
        );
        refused(
            "repo: {path: f}\nsealing: {cert: c}\nspokes: []\n",
            &["at least one spoke"],
        );
    }

    const REVIEW: &str = "repo:\n  path: f\n  mode: pull-request\n  signing_key: signing-key\n  forge:\n    kind: gitlab\n    url: https://gitlab.example.org\n    repository: infra/fleet\n    token_env: FORGE_TOKEN\n    labels: [spokekeeper]\n    reviewers: [\"42\"]\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";

    #[test]
    fn review_mode_needs_a_signing_key() {
        let c = parse(REVIEW).unwrap();
        assert_eq!(
            c.repo.signing_key.as_deref(),
            Some(Path::new("/etc/spokekeeper/signing-key")),
            "relative to the configuration"
        );
        refused(
            &REVIEW.replace("  signing_key: signing-key\n", ""),
            &[
                "repo.signing_key",
                "line 3",
                "ssh-keygen -t ed25519 -N '' -C spokekeeper -f /etc/spokekeeper/signing-key",
            ],
        );
        refused(
            &MIN.replace("path: f", "path: f, signing_key: k"),
            &["repo.signing_key", "line 1", "repo.mode is direct"],
        );
    }

    #[test]
    fn review_mode_reads_the_forge() {
        let c = parse(REVIEW).unwrap();
        assert_eq!(c.repo.mode, RepoMode::PullRequest);
        let f = c.repo.forge.unwrap();
        assert_eq!(f.kind, ForgeKind::Gitlab);
        assert_eq!(f.repository, "infra/fleet");
        assert_eq!(f.token, TokenSource::Env("FORGE_TOKEN".into()));
        assert_eq!((f.labels.len(), f.reviewers.len()), (1, 1));
        assert_eq!(f.timeout, Duration::from_secs(20));
        assert_eq!(c.alerts.pending_review_after, Duration::from_secs(4 * 3600));
        let c = parse(&REVIEW.replace("token_env: FORGE_TOKEN", "token_file: tok")).unwrap();
        assert_eq!(
            c.repo.forge.unwrap().token,
            TokenSource::File("/etc/spokekeeper/tok".into()),
            "relative to the configuration"
        );
        assert_eq!(parse(MIN).unwrap().repo.mode, RepoMode::Direct);
    }

    #[test]
    fn review_mode_mistakes_name_the_field_and_the_fix() {
        refused(
            &REVIEW.replace("token_env: FORGE_TOKEN", "token: ghp_abc"),
            &["repo.forge.token", "token_file", "token_env"],
        );
        refused(
            &REVIEW.replace("    token_env: FORGE_TOKEN\n", ""),
            &["token_file", "token_env"],
        );
        refused(
            &REVIEW.replace("token_env: FORGE_TOKEN", "token_env: A\n    token_file: b"),
            &["exactly one"],
        );
        refused(
            &REVIEW.replace("[\"42\"]", "[alice]"),
            &["reviewers", "user ids"],
        );
        refused(
            &REVIEW.replace("kind: gitlab", "kind: bitbucket"),
            &["bitbucket"],
        );
        refused(
            &REVIEW
                .replace("kind: gitlab", "kind: github")
                .replace("infra/fleet", "fleet"),
            &["repo.forge.repository", "owner/name"],
        );
        refused(
            &REVIEW.replace("https://gitlab.example.org", "gitlab"),
            &["repo.forge.url"],
        );
        refused(
            &REVIEW.replace("https://gitlab.example.org", "http://gitlab.example.org"),
            &["repo.forge.url", "https"],
        );
        assert!(
            parse(&REVIEW.replace("https://gitlab.example.org", "http://127.0.0.1:8080")).is_ok(),
            "loopback may be plain http"
        );
        refused(
            &REVIEW.replace("  mode: pull-request\n", ""),
            &["repo.mode: pull-request"],
        );
        refused(
            &REVIEW.replace("  forge:", "  push: false\n  forge:"),
            &["repo.push"],
        );
        let no_forge = "repo: {path: f, mode: pull-request}\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";
        refused(no_forge, &["repo.forge"]);
        assert_eq!(
            parse(&REVIEW.replace("kind: gitlab", "kind: forgejo"))
                .unwrap()
                .repo
                .forge
                .unwrap()
                .kind,
            ForgeKind::Gitea
        );
    }

    #[test]
    fn hub_keys_and_their_defaults() {
        let c = parse(MIN).unwrap();
        assert_eq!(c.hub, None, "no hub: key, no hub API");
        assert_eq!(
            c.spokes[0].kustomization, None,
            "no kustomization: every consumer of the Secret is found on the hub"
        );
        let c = parse(&MIN.replace("10.0.0.1}", "10.0.0.1, kustomization: {}}")).unwrap();
        assert_eq!(
            c.spokes[0].kustomization,
            Some(KustomizationRef {
                name: "dev".into(),
                namespace: "flux-system".into()
            }),
            "an empty kustomization: takes the defaults and is still the override"
        );
        let c = parse(&format!("{MIN}hub: {{}}\n")).unwrap();
        let hub = c.hub.unwrap();
        assert_eq!(hub.kubeconfig, None);
        assert_eq!(
            hub.controller,
            ControllerRef {
                namespace: "kube-system".into(),
                name: "sealed-secrets-controller".into(),
                port: None
            }
        );
        assert_eq!(hub.verify_timeout, Duration::from_secs(120));
        let text = MIN.replace(
            "10.0.0.1}",
            "10.0.0.1, kustomization: {name: apps-dev, namespace: fleet}}",
        ) + "hub:\n  kubeconfig: hub.kubeconfig\n  controller: {namespace: ss, name: sealer, port: http}\n  verify_timeout: 30s\n";
        let c = parse(&text).unwrap();
        let hub = c.hub.unwrap();
        assert_eq!(
            hub.kubeconfig.as_deref(),
            Some(Path::new("/etc/spokekeeper/hub.kubeconfig"))
        );
        assert_eq!(hub.controller.port.as_deref(), Some("http"));
        assert_eq!(hub.controller.name, "sealer");
        // Upstream controller.yaml's unnamed port, as kubeseal asks for it, or its number.
        for (port, want) in [("\"\"", ""), ("8080", "8080"), ("\"8080\"", "8080")] {
            let c = parse(&format!("{MIN}hub: {{controller: {{port: {port}}}}}\n")).unwrap();
            assert_eq!(
                c.hub.unwrap().controller.port.as_deref(),
                Some(want),
                "{port}"
            );
        }
        assert_eq!(hub.verify_timeout, Duration::from_secs(30));
        let k = c.spokes[0].kustomization.as_ref().unwrap();
        assert_eq!(
            (k.name.as_str(), k.namespace.as_str()),
            ("apps-dev", "fleet")
        );
    }

    #[test]
    fn hub_mistakes_name_the_field() {
        refused(&format!("{MIN}hub: {{kubecfg: x}}\n"), &["kubecfg"]);
        refused(
            &format!("{MIN}hub: {{controller: {{nmae: x}}}}\n"),
            &["nmae"],
        );
        refused(
            &format!("{MIN}hub: {{controller: {{name: Sealed_Secrets}}}}\n"),
            &["hub.controller.name", "sealed-secrets-controller"],
        );
        refused(
            &format!("{MIN}hub: {{controller: {{port: \"http/8080\"}}}}\n"),
            &["hub.controller.port"],
        );
        refused(
            &format!("{MIN}hub: {{verify_timeout: 0s}}\n"),
            &["hub.verify_timeout"],
        );
        refused(
            &format!("{MIN}hub: {{verify_timeout: 2}}\n"),
            &["verify_timeout"],
        );
        refused(
            &MIN.replace("10.0.0.1}", "10.0.0.1, kustomization: {name: Dev}}"),
            &["line 4: spokes[0].kustomization.name", "Dev"],
        );
        refused(
            &MIN.replace("10.0.0.1}", "10.0.0.1, kustomization: {nam: dev}}"),
            &["nam"],
        );
    }

    #[test]
    fn sealing_sha256_takes_one_or_a_list_and_names_a_bad_one() {
        let fp = format!("sha256:{}", "AB".repeat(32));
        let one = MIN.replace("cert: c.pem}", &format!("cert: c.pem, sha256: \"{fp}\"}}"));
        let c = parse(&one).unwrap();
        assert_eq!(c.sealing_sha256, [fp.to_lowercase()]);
        let two = format!("sha256:{}", "0".repeat(64));
        let list = MIN.replace(
            "cert: c.pem}",
            &format!("cert: c.pem, sha256: [\"{fp}\", \"{two}\"]}}"),
        );
        assert_eq!(parse(&list).unwrap().sealing_sha256.len(), 2);
        assert!(parse(MIN).unwrap().sealing_sha256.is_empty());
        for bad in ["abcd", "sha256:abcd", "sha1:0000"] {
            refused(
                &MIN.replace("cert: c.pem}", &format!("cert: c.pem, sha256: \"{bad}\"}}")),
                &["sealing.sha256", bad, "64 hex digits"],
            );
        }
    }

    #[test]
    fn spans_read_and_print() {
        assert_eq!(
            "30d".parse::<Span>().unwrap().0,
            Duration::from_secs(2_592_000)
        );
        assert_eq!(Span(Duration::from_secs(90)).to_string(), "90s");
        assert_eq!(Span(Duration::from_secs(7200)).to_string(), "2h");
        assert!("99999999999999999999d".parse::<Span>().is_err());
        assert!("d".parse::<Span>().is_err());
    }

    #[test]
    fn load_names_a_missing_file_and_the_fix() {
        let e = Config::load(Path::new("/nonexistent/spokekeeper.yaml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/spokekeeper.yaml") && e.contains("--config"),
            "{e}"
        );
    }
}
