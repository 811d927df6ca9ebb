//! What alerts are graded from: the recorded state in the fleet repo clone as it is (no
//! fetch, no SSH) and a TLS probe of each spoke.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use time::OffsetDateTime;

use crate::config::{Config, SpokeConfig};
use crate::repo::Repo;
use crate::rotate::TickReport;
use crate::rotate::decide::expected_server;
use crate::rotate::state::Recorded;
use crate::seal::{KeyError, SealedSecret, SealingKey};
use crate::spoke::{self, ProbeError, ProbeReport};

/// Probes run at once.
const CONCURRENCY: usize = 8;

/// The committed SealedSecret's `spokekeeper.io/*` annotations, or why there are none.
#[derive(Clone, Debug)]
pub enum RecordedState {
    /// Nothing committed yet: never rotated.
    Missing,
    Unreadable(String),
    Recorded(Box<Recorded>),
}

/// One spoke as seen now.
#[derive(Debug)]
pub struct Observation {
    pub spoke: String,
    pub recorded: RecordedState,
    /// None when there was no server to probe (never rotated, no `api_server`).
    pub probe: Option<Result<ProbeReport, ProbeError>>,
}

/// The sealing certificate's name and expiry (None: a bare public key has none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealingCert {
    pub source: String,
    pub not_after: Option<OffsetDateTime>,
}

impl SealingCert {
    pub fn from_key(key: &SealingKey, source: &str) -> SealingCert {
        SealingCert {
            source: source.into(),
            not_after: key.not_after(),
        }
    }

    /// Reads `path` like `sealing.cert`, but an expired certificate is a fact to grade
    /// here, not an error ([`SealingKey::from_pem`] refuses it for sealing). Inside the
    /// clone, no component may be a symbolic link.
    pub fn load(path: &Path, clone: &Path, now: OffsetDateTime) -> Result<SealingCert, String> {
        let source = path.display().to_string();
        let pem = crate::fsutil::read_under(path, clone).map_err(|e| {
            format!("cannot read sealing.cert {source}: {e} (fix the path in the configuration)")
        })?;
        match SealingKey::from_pem(&pem, &source, now) {
            Ok(key) => Ok(Self::from_key(&key, &source)),
            Err(KeyError::Expired { not_after, .. }) => Ok(SealingCert {
                source,
                not_after: Some(not_after),
            }),
            Err(e) => Err(format!("sealing.cert: {e}")),
        }
    }
}

/// Reads each spoke's recorded state and probes its API server (concurrently, each
/// probe bounded by `timeout`). `only` selects spokes by name (empty: all).
pub async fn observe(
    config: &Config,
    repo: &Repo,
    only: &[String],
    timeout: Duration,
) -> Vec<Observation> {
    let spokes = config
        .spokes
        .iter()
        .filter(|s| only.is_empty() || only.contains(&s.name));
    let mut seen: Vec<(usize, Observation)> = futures::stream::iter(spokes.enumerate())
        .map(|(i, spoke)| async move { (i, observe_one(spoke, repo, timeout, None).await) })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    seen.sort_by_key(|(i, _)| *i);
    seen.into_iter().map(|(_, o)| o).collect()
}

/// Like [`observe`] after a tick: the recorded state is read again (the tick may have
/// committed), and the tick's own probe of each spoke is reused, so a spoke is probed
/// once per tick. Spokes the tick did not probe (nothing was recorded before) are probed.
pub async fn observe_after_tick(
    config: &Config,
    repo: &Repo,
    tick: &TickReport,
    timeout: Duration,
) -> Vec<Observation> {
    let probed = |name: &str| {
        tick.spokes
            .iter()
            .find(|s| s.spoke == name)
            .and_then(|s| s.probe.clone())
    };
    let mut seen: Vec<(usize, Observation)> =
        futures::stream::iter(config.spokes.iter().enumerate())
            .map(|(i, spoke)| {
                let known = probed(&spoke.name);
                async move { (i, observe_one(spoke, repo, timeout, known).await) }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
    seen.sort_by_key(|(i, _)| *i);
    seen.into_iter().map(|(_, o)| o).collect()
}

async fn observe_one(
    spoke: &SpokeConfig,
    repo: &Repo,
    timeout: Duration,
    known: Option<Result<ProbeReport, ProbeError>>,
) -> Observation {
    let recorded = match repo.read(&spoke.output) {
        Ok(None) => RecordedState::Missing,
        Ok(Some(bytes)) => match SealedSecret::parse(&bytes)
            .map_err(|e| e.to_string())
            .and_then(|s| Recorded::from_annotations(&s.annotations).map_err(|e| e.to_string()))
        {
            Ok(r) => RecordedState::Recorded(Box::new(r)),
            Err(e) => RecordedState::Unreadable(format!("{}: {e}", spoke.output.display())),
        },
        Err(e) => RecordedState::Unreadable(e.to_string()),
    };
    let server = match &recorded {
        RecordedState::Recorded(r) => expected_server(spoke, Some(r)),
        _ => expected_server(spoke, None),
    };
    let probe = match (known, server) {
        (Some(known), _) => Some(known),
        (None, Some(server)) => Some(spoke::probe(&server, timeout).await),
        (None, None) => None,
    };
    Observation {
        spoke: spoke.name.clone(),
        recorded,
        probe,
    }
}
