//! spokekeeper.yaml: types, loading, validation. The bottom of the layering: every
//! layer reads these types, and nothing here imports a layer above (only `text`).
//!
//! One file per section of the file, each holding the section as written (the `Raw*`
//! serde types), as loaded (the public types, defaults filled in) and the `load`
//! function [`Config::parse`] calls to get from one to the other:
//!
//! - `repo.rs`: `repo:` (direct or pull-request mode, `repo.forge`, `repo.signing_key`);
//!   [`signing_key`] reads the key itself (at load, and for `repo::signing`);
//! - `sealing.rs`: `sealing:` (the format; the certificate and the fingerprints it is
//!   trusted by; the age recipients and their pins);
//! - `daemon.rs`: `schedule`, `metrics`, `renew_before`, `verify_every`;
//! - `alerts.rs`: `alerts:`;
//! - `hub.rs`: `hub:` (the hub's API and its Sealed Secrets controller);
//! - `ssh.rs`: `ssh:` and `spokes[].ssh:`, merged into each spoke's [`SshSettings`];
//! - `credential.rs`: `credential:` and `spokes[].credential:`; `federated.rs`: its
//!   `federated:` block;
//! - `spokes.rs`: `spokes:`;
//! - `types.rs`: [`Span`], and the value types the layers above use as they are
//!   ([`Scope`], [`Distro`]).
//!
//! `edit.rs` appends a spoke to the file as text (`spokekeeper add`), keeping its comments.
//!
//! `check.rs` holds what every value must look like, checked on the loaded
//! configuration; `lines.rs` finds the line of a key for errors found after parsing.
//!
//! Every error names the file, the line where known, and the fix. Unknown keys are
//! errors (a typo must not silently fall back to a default). Relative paths resolve
//! against the configuration file's directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::fingerprint::{Fingerprint, Sealing};

mod alerts;
mod check;
mod credential;
mod daemon;
mod edit;
mod federated;
mod hub;
mod lines;
mod repo;
mod sealing;
pub mod signing_key;
mod spokes;
mod ssh;
mod types;

pub use alerts::AlertsConfig;
pub use credential::{CredentialMode, CredentialPolicy};
pub use edit::{NewSpoke, add_spoke, spoke_entry};
pub use federated::{FederatedPolicy, NO_ISSUER, NextIssuer, ServiceAccount};
pub use hub::{
    ControllerRef, DEFAULT_CONTROLLER_NAME, DEFAULT_CONTROLLER_NAMESPACE, DEFAULT_VERIFY_TIMEOUT,
    HubConfig,
};
pub use repo::{ForgeConfig, ForgeKind, RepoConfig, RepoMode, TokenSource};
pub use sealing::{AgeRecipientsFrom, SealingFormat, SopsSettings};
pub use spokes::{
    DEFAULT_KUSTOMIZATION_NAMESPACE, DEFAULT_SECRET_KEY, DEFAULT_SECRET_NAMESPACE,
    KustomizationRef, SecretRef, SourceKind, SpokeConfig,
};
pub use ssh::{SshOverrides, SshSettings};
pub use types::{Distro, Scope, Span};

#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub message: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    repo: repo::RawRepo,
    sealing: sealing::RawSealing,
    schedule: Option<String>,
    metrics: Option<daemon::RawMetrics>,
    renew_before: Option<Span>,
    verify_every: Option<Span>,
    alerts: Option<alerts::RawAlerts>,
    #[serde(default)]
    ssh: SshOverrides,
    hub: Option<hub::RawHub>,
    #[serde(default)]
    credential: credential::RawCredential,
    spokes: Vec<spokes::RawSpoke>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub file: PathBuf,
    pub repo: RepoConfig,
    /// `sealing.cert`: the Sealed Secrets controller's certificate; None only when no
    /// spoke seals with Sealed Secrets (every spoke's format is sops).
    pub sealing_cert: Option<PathBuf>,
    /// `sealing.sha256`: the sealing certificate fingerprints this host trusts, kept
    /// outside the fleet repo (empty: not set).
    pub sealing_sha256: Vec<Fingerprint<Sealing>>,
    /// `sealing.age_recipients`, `sealing.age_sha256`, `sealing.sops_config`: for the
    /// spokes whose format is sops.
    pub sops: SopsSettings,
    pub schedule: String,
    pub(crate) metrics_listen: SocketAddr,
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

    /// Parses and validates; `base` resolves relative paths. Each section is loaded
    /// by its own file, in this order (the first error wins), then the whole is checked.
    pub fn parse(text: &str, file: &str, base: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = serde_saphyr::from_str(text).map_err(|e| ConfigError {
            file: file.to_string(),
            message: format!("{e}"),
        })?;
        let l = Loading {
            file,
            base,
            lines: lines::Lines::of(text),
        };
        // `ssh:` as written; each spoke's block is checked, then merged over it, by spokes.
        check::ssh("ssh", &raw.ssh).map_err(|i| l.invalid(i))?;
        let daemon = daemon::load(
            raw.schedule,
            raw.metrics,
            raw.renew_before,
            raw.verify_every,
            &l,
        )?;
        let alerts = alerts::load(raw.alerts, &l)?;
        let format = raw.sealing.format.unwrap_or_default();
        let spokes = spokes::load(raw.spokes, &raw.ssh, &raw.credential, format, &l)?;
        let hub = raw.hub.map(|h| hub::load(h, &l)).transpose()?;
        let repo = repo::load(raw.repo, &l)?;
        let sealing = sealing::load(raw.sealing, &l)?;

        let config = Config {
            file: PathBuf::from(file),
            repo,
            sealing_cert: sealing.cert,
            sealing_sha256: sealing.sha256,
            sops: sealing.sops,
            schedule: daemon.schedule,
            metrics_listen: daemon.metrics_listen,
            renew_before: daemon.renew_before,
            verify_every: daemon.verify_every,
            alerts,
            hub,
            spokes,
        };
        check::config(&config).map_err(|i| l.invalid(i))?;
        federated::check(&config).map_err(|b| l.bad(&b.key, b.message))?;
        Ok(config)
    }
}

/// What every section's `load` needs: the file (errors name it), where its keys are
/// (errors found after parsing name their line) and its directory (relative paths).
struct Loading<'a> {
    file: &'a str,
    base: &'a Path,
    lines: lines::Lines,
}

impl Loading<'_> {
    /// An error about the file as a whole: no key, no line.
    fn err(&self, message: String) -> ConfigError {
        ConfigError {
            file: self.file.to_string(),
            message,
        }
    }

    /// A value refused after parsing names its key and, through this, its line.
    fn invalid(&self, i: check::Invalid) -> ConfigError {
        match self.lines.line(&i.key) {
            Some(n) => self.err(format!("line {n}: {}", i.message)),
            None => self.err(i.message),
        }
    }

    fn bad(&self, key: &str, message: String) -> ConfigError {
        self.invalid(check::Invalid {
            key: key.to_string(),
            message,
        })
    }

    fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base.join(p)
        }
    }
}

/// Whether `s` is a valid Kubernetes object name (an RFC 1123 DNS subdomain).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Whether `s` is a valid namespace name (an RFC 1123 DNS label).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::daemon::DEFAULT_METRICS_LISTEN;
    use super::*;

    /// The lab's ConfigBuilder, which the tests and benchmarks write their configurations
    /// with, writes what this parser reads, quoted or not.
    #[test]
    fn the_labs_config_builder_writes_what_parse_reads() {
        use spokekeeper_lab::config::{AUTHOR, ConfigBuilder, Spoke, Ssh};
        let text = ConfigBuilder::new("/srv/fleet clone", "/k/cert.pem")
            .top("renew_before: 2d")
            .spoke(
                Spoke::new("1", "10.0.0.1")
                    .kubeconfig_path("/etc/rancher/k3s/k3s.yaml")
                    .ssh(&Ssh {
                        port: 2222,
                        identity: "/id".into(),
                        known_hosts: Some("/k,h".into()),
                        connect_timeout: Some("5s".into()),
                    })
                    .api_server("https://lb.example.org:8443"),
            )
            .spoke(Spoke::new("dev", "127.0.0.2").local("/n/k3s.yaml"))
            .yaml();
        let c = Config::parse(&text, "spokekeeper.yaml", Path::new("/")).unwrap();
        assert_eq!(c.repo.path, Path::new("/srv/fleet clone"));
        assert_eq!(c.repo.author.as_deref(), Some(AUTHOR));
        assert_eq!(c.sealing_cert.as_deref(), Some(Path::new("/k/cert.pem")));
        assert_eq!(c.renew_before, Duration::from_secs(2 * 86_400));
        let (a, b) = (&c.spokes[0], &c.spokes[1]);
        assert_eq!((a.name.as_str(), a.address.as_str()), ("1", "10.0.0.1"));
        assert_eq!(a.kubeconfig_path, "/etc/rancher/k3s/k3s.yaml");
        assert_eq!(
            (
                a.ssh.port,
                a.ssh.identity.as_path(),
                a.ssh.known_hosts.as_path()
            ),
            (2222, Path::new("/id"), Path::new("/k,h"))
        );
        assert_eq!(a.ssh.connect_timeout, Duration::from_secs(5));
        assert_eq!(
            a.api_server.as_ref().map(url::Url::as_str),
            Some("https://lb.example.org:8443/")
        );
        assert_eq!(a.source, SourceKind::Ssh);
        assert_eq!(
            (b.source, b.kubeconfig_path.as_str()),
            (SourceKind::Local, "/n/k3s.yaml")
        );
    }

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

    pub(super) fn parse(text: &str) -> Result<Config, ConfigError> {
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
            c.sealing_cert.as_deref(),
            Some(Path::new("/etc/spokekeeper/keys/sealed-secrets-infra.pem"))
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

    pub(super) fn refused(text: &str, needles: &[&str]) {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.starts_with("/etc/spokekeeper/spokekeeper.yaml: "), "{e}");
        for n in needles {
            assert!(e.contains(n), "want {n:?} in: {e}");
        }
    }

    pub(super) const MIN: &str =
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
