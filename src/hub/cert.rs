//! The controller's sealing certificate as the hub serves it: fetched (bounded in time),
//! the key a process starts with, and the report types a tick fills in. Choosing the
//! tick's key, trusting it and pinning a renewal are the tick's job (rotate/sealing_key).

use std::path::PathBuf;

use serde::Serialize;
use time::OffsetDateTime;

use super::{CALL_TIMEOUT, Hub, HubError};
use crate::fingerprint::{Fingerprint, Sealing};
use crate::seal::{KeyError, SealingKey};

/// The sealing certificate of a tick: what the hub gave (with `hub:`) and whether it is
/// trusted (see `rotate::sealing_key`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CertReport {
    /// With `hub:`: whether the controller's certificate could be fetched (absent without).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reachable: Option<bool>,
    /// The certificate sealed to in this tick (when not trusted: the one refused).
    pub sha256: Fingerprint<Sealing>,
    /// Set when the fetched certificate differs from the pinned one.
    pub renewed: Option<Renewed>,
    /// Why the pinned copy was used (unreachable, refused) or could not be updated.
    pub error: Option<String>,
    /// Whether anything may be sealed to it this tick.
    pub trusted: bool,
    /// What confirmed it, or why it is not trusted.
    pub trust: String,
    /// When not trusted: the fingerprints and the commit, for the report and the alert.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untrusted: Option<Untrusted>,
    /// The controller's version as its Service's `app.kubernetes.io/version` label says
    /// (the Helm chart sets it); read only when hub.controller.port is unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller_version: Option<String>,
}

impl CertReport {
    /// Sealing to `sha256`, not yet trusted, nothing heard from a hub.
    pub fn new(sha256: Fingerprint<Sealing>) -> Self {
        Self {
            reachable: None,
            sha256,
            renewed: None,
            error: None,
            trusted: false,
            trust: String::new(),
            untrusted: None,
            controller_version: None,
        }
    }
}

/// A sealing certificate nothing outside the fleet repo confirms.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Untrusted {
    /// The certificate refused.
    pub sha256: Fingerprint<Sealing>,
    /// What the anchor expects (sealing.sha256, what the hub served last, or what the
    /// committed credentials record).
    pub expected: Vec<Fingerprint<Sealing>>,
    /// `hub` (it serves another), `sealing.sha256`, `last-served` or `committed`.
    pub anchor: &'static str,
    /// The last commit that changed sealing.cert (None: outside the repo, or none found).
    pub commit: Option<String>,
    /// The whole story and the fix: each spoke that would rotate fails with it.
    pub error: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Renewed {
    pub old: Fingerprint<Sealing>,
    pub new: Fingerprint<Sealing>,
    /// The commit that pinned it, when sealing.cert is inside the fleet repo.
    pub commit: Option<String>,
}

/// The controller's certificate PEM, and its version when its Service was read; bounded
/// in time.
pub(crate) async fn fetch(hub: &Hub) -> Result<(String, Option<String>), HubError> {
    tokio::time::timeout(2 * CALL_TIMEOUT, async {
        let pem = hub.fetch_cert().await?;
        Ok((pem, hub.controller_version()))
    })
    .await
    .unwrap_or_else(|_| {
        Err(HubError::NoAnswer {
            secs: (2 * CALL_TIMEOUT).as_secs(),
        })
    })
}

/// Why sealing.cert itself cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PinnedError {
    #[error("sealing.cert: {0}")]
    Key(KeyError),
    #[error("sealing.cert {} does not exist yet", path.display())]
    Missing { path: PathBuf },
    #[error("cannot read sealing.cert {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Why a process has no sealing key to start with: sealing.cert cannot be used and,
/// with `hub:`, neither can what the hub gives.
#[derive(Debug, thiserror::Error)]
pub enum StartKeyError {
    #[error(transparent)]
    Pinned(PinnedError),
    #[error(
        "{pinned}, and the hub cannot give it: {error} (fix hub:, or pin it by hand: kubeseal --fetch-cert > {})",
        path.display()
    )]
    Unfetched {
        pinned: PinnedError,
        path: PathBuf,
        error: HubError,
    },
    /// `served` names what the hub gave: the controller's certificate, and where.
    #[error("{pinned}, and {served}: {error}")]
    Refused {
        pinned: PinnedError,
        served: String,
        error: KeyError,
    },
}

/// The sealing key a process starts with: sealing.cert, or, when that file cannot be used
/// (missing, a link, garbage, expired) and `hub:` is configured, the controller's
/// certificate (the first tick pins it). Without `hub:` a bad sealing.cert is an error that
/// names it. None when sealing.cert is not set (every spoke is sops): there is no key.
pub async fn initial(config: &crate::config::Config) -> Result<Option<SealingKey>, StartKeyError> {
    let Some(path) = &config.sealing_cert else {
        return Ok(None);
    };
    let now = OffsetDateTime::now_utc();
    let pinned = match crate::fsutil::read_under(path, &config.repo.path) {
        Ok(pem) => {
            SealingKey::from_pem(&pem, &path.display().to_string(), now).map_err(PinnedError::Key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(PinnedError::Missing { path: path.clone() })
        }
        Err(source) => Err(PinnedError::Read {
            path: path.clone(),
            error: source,
        }),
    };
    let (pinned_error, cfg) = match (pinned, &config.hub) {
        (Ok(key), _) => return Ok(Some(key)),
        (Err(e), None) => return Err(StartKeyError::Pinned(e)),
        (Err(e), Some(cfg)) => (e, cfg),
    };
    let served = format!(
        "the controller's certificate ({}/{})",
        cfg.controller.namespace, cfg.controller.name
    );
    let fetched = match Hub::connect_bounded(cfg).await {
        Ok(hub) => fetch(&hub).await,
        Err(e) => Err(e),
    };
    let pem = match fetched {
        Ok((pem, _)) => pem,
        Err(source) => {
            return Err(StartKeyError::Unfetched {
                pinned: pinned_error,
                path: path.clone(),
                error: source,
            });
        }
    };
    let key = match SealingKey::from_pem(pem.as_bytes(), &served, now) {
        Ok(key) => key,
        Err(source) => {
            return Err(StartKeyError::Refused {
                pinned: pinned_error,
                served,
                error: source,
            });
        }
    };
    tracing::warn!(sha256 = %key.fingerprint(), path = %path.display(), problem = %pinned_error, "sealing.cert cannot be used: starting with the controller's certificate; the tick pins it");
    Ok(Some(key))
}
