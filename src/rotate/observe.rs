//! observe: what the fleet repo clone holds for a spoke (the committed SealedSecret and
//! its `spokekeeper.io/*` annotations) and what the spoke's API server serves now. The
//! tick, `check`, `status` and the alerts all read a spoke through here, so they see it
//! alike: no fetch, no SSH.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::decide::{Observed, expected_server};
pub use super::output::{InvalidKind, Output};
use super::state::Recorded;
use crate::config::{Config, SpokeConfig};
use crate::repo::{Repo, RepoError, Snapshot};
use crate::spoke::{self, Judged, ProbeError, ProbeReport};

/// Probes run at once outside a tick (a tick probes within its own bound).
const CONCURRENCY: usize = 8;

/// What the clone holds for a spoke.
#[derive(Debug)]
pub enum Committed {
    /// Nothing committed yet: never rotated.
    Missing,
    /// The clone could not be read.
    Unreadable(Arc<RepoError>),
    /// The file is there but is not a SealedSecret with readable annotations.
    Invalid(Invalid),
    Recorded(Box<Record>),
}

/// A readable committed credential.
#[derive(Debug)]
pub struct Record {
    pub sealed: Output,
    pub recorded: Recorded,
}

/// Why a committed file is not a credential spokekeeper can read.
#[derive(Debug, thiserror::Error)]
#[error("{}: {kind}", path.display())]
pub struct Invalid {
    pub path: PathBuf,
    pub kind: InvalidKind,
}

impl Committed {
    /// Reads what is committed at `spoke.output` in a snapshot of the clone's HEAD.
    pub async fn read(spoke: &SpokeConfig, files: &Snapshot<'_>) -> Committed {
        match files.read(&spoke.output).await {
            Ok(None) => Committed::Missing,
            Ok(Some(bytes)) => Committed::parse(spoke, &bytes),
            Err(e) => Committed::Unreadable(Arc::new(e)),
        }
    }

    /// Reads `bytes` as committed at `spoke.output`, a ConfigMap judged against the
    /// spoke's configuration too (its own hub ServiceAccount).
    pub fn parse(spoke: &SpokeConfig, bytes: &[u8]) -> Committed {
        Committed::parse_at(&spoke.output, own_account(spoke), bytes)
    }

    /// Reads `bytes` as committed at `path`; a ConfigMap must name `account` as its
    /// serviceAccountName (None: none).
    pub fn parse_at(
        path: &std::path::Path,
        account: Option<&crate::config::ServiceAccount>,
        bytes: &[u8],
    ) -> Committed {
        let invalid = |kind: InvalidKind| {
            Committed::Invalid(Invalid {
                path: path.to_path_buf(),
                kind,
            })
        };
        let sealed = match Output::parse(bytes) {
            Ok(s) => s,
            Err(e) => return invalid(e),
        };
        let recorded = match Recorded::from_annotations(sealed.annotations()) {
            Ok(r) => r,
            Err(e) => return invalid(e.into()),
        };
        if let Output::ConfigMap(remote) = &sealed
            && let Err(e) = super::federated::written(remote, &recorded, account)
        {
            return invalid(e);
        }
        Committed::Recorded(Box::new(Record { sealed, recorded }))
    }

    pub fn record(&self) -> Option<&Record> {
        match self {
            Committed::Recorded(r) => Some(r),
            _ => None,
        }
    }

    pub fn recorded(&self) -> Option<&Recorded> {
        self.record().map(|r| &r.recorded)
    }

    /// Why it cannot be read, for people (None: missing or readable).
    pub fn unreadable(&self) -> Option<String> {
        match self {
            Committed::Unreadable(e) => Some(e.to_string()),
            Committed::Invalid(e) => Some(e.to_string()),
            _ => None,
        }
    }
}

/// One spoke as seen now.
#[derive(Debug)]
pub struct Observation {
    pub spoke: String,
    pub committed: Committed,
    /// None when there was no server to probe (nothing recorded and no `api_server`).
    pub probe: Option<Result<ProbeReport, ProbeError>>,
    /// The probed chain judged against the recorded CA bundle, once (None without both).
    pub ca: Option<Judged>,
}

impl Observation {
    /// An observation, its chain judged here (one spoke, outside a tick: a tick judges
    /// off the async workers).
    pub fn new(
        spoke: String,
        committed: Committed,
        probe: Option<Result<ProbeReport, ProbeError>>,
    ) -> Observation {
        let ca = match (&probe, committed.recorded()) {
            (Some(Ok(p)), Some(r)) => Some(r.judge(p)),
            _ => None,
        };
        Observation {
            spoke,
            committed,
            probe,
            ca,
        }
    }

    /// [`judged`], kept.
    async fn judge(&mut self) {
        self.ca = match (&self.probe, self.committed.recorded()) {
            (Some(Ok(report)), Some(recorded)) => judged(report, recorded).await,
            _ => None,
        };
    }

    /// What a tick keeps for the alerts once the spoke is decided: the committed output
    /// without its ciphertext and raw annotations, and neither the presented chain nor
    /// the recorded bundle's DER (most of its memory; what they say is in the record and
    /// in `ca`, the one judged against the other, already). A spoke about to commit keeps
    /// the chain until [`Observation::committed_now`] judges it against the new bundle.
    pub(crate) fn without_ciphertext(mut self, committing: bool) -> Observation {
        self.trim(!committing);
        self
    }

    fn trim(&mut self, chain: bool) {
        if let Committed::Recorded(r) = &mut self.committed {
            match &mut r.sealed {
                Output::SealedSecret(s) => {
                    s.encrypted_data = Default::default();
                    s.annotations = Default::default();
                }
                Output::Sops(s) => s.annotations = Default::default(),
                Output::ConfigMap(c) => {
                    c.annotations = Default::default();
                    c.data = Default::default();
                }
            }
            r.recorded.ca_bundle = Vec::new();
        }
        if let Some(Ok(probe)) = &mut self.probe
            && chain
        {
            probe.chain = Vec::new();
        }
    }

    /// What the tick's commit of `manifest` left committed, the tick's probe judged
    /// against it (kept as [`Observation::without_ciphertext`] keeps it).
    pub(super) async fn committed_now(&mut self, spoke: &SpokeConfig, manifest: &str) {
        self.committed = Committed::parse(spoke, manifest.as_bytes());
        self.judge().await;
        self.trim(true);
    }

    /// What [`super::decide::decide`] is given: the committed pair, or why it is unusable.
    pub fn observed(&self) -> Observed<'_> {
        Observed {
            committed: match &self.committed {
                Committed::Missing | Committed::Unreadable(_) => None,
                Committed::Invalid(e) => Some(Err(&e.kind)),
                Committed::Recorded(r) => Some(Ok((&r.sealed, &r.recorded))),
            },
            probe: self.probe.as_ref(),
            ca: self.ca.as_ref(),
        }
    }
}

/// The spoke's own hub ServiceAccount, if it is federated with one.
fn own_account(spoke: &SpokeConfig) -> Option<&crate::config::ServiceAccount> {
    let policy = spoke.credential.federated.as_ref()?;
    policy.own_account.as_ref()
}

/// Reads what is committed for `spoke` from a snapshot of the clone's HEAD (many spokes:
/// two git processes in all rather than two per spoke) and probes where the configuration
/// says the spoke is now (not where it was recorded), bounded by `timeout`.
pub async fn spoke(spoke: &SpokeConfig, files: &Snapshot<'_>, timeout: Duration) -> Observation {
    let committed = Committed::read(spoke, files).await;
    let probe = match expected_server(spoke, committed.recorded()) {
        Some(server) => Some(spoke::probe(&server, timeout).await),
        None => None,
    };
    let mut seen = Observation {
        spoke: spoke.name.clone(),
        committed,
        probe,
        ca: None,
    };
    seen.judge().await;
    seen
}

/// The chain judged off the async workers: signature checks are CPU work, and a tick's
/// spokes share the task that awaits them (a hostile spoke's chain must not stall the
/// others' deadlines).
pub(crate) async fn judged(report: &ProbeReport, recorded: &Recorded) -> Option<Judged> {
    let (chain, bundle) = (report.chain.clone(), recorded.ca_bundle.clone());
    tokio::task::spawn_blocking(move || spoke::chain::judge(&chain, &bundle))
        .await
        .ok()
}

/// When each spoke's committed credential was rotated, by its annotations (no probe):
/// what a starting daemon exports before its first tick. A clone that cannot be read
/// gives none.
pub async fn rotated_at(config: &Config, repo: &Repo) -> Vec<(String, time::OffsetDateTime)> {
    let Ok(files) = repo.snapshot().await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for s in &config.spokes {
        if let Some(r) = Committed::read(s, &files).await.recorded() {
            out.push((s.name.clone(), r.rotated_at));
        }
    }
    out
}

/// Every spoke of the configuration (`only`: those named; empty: all), in configuration
/// order, probed concurrently. A clone whose HEAD cannot be listed is an error.
pub async fn fleet(
    config: &Config,
    repo: &Repo,
    only: &[String],
    timeout: Duration,
) -> Result<Vec<Observation>, RepoError> {
    let files = repo.snapshot().await?;
    let spokes = config
        .spokes
        .iter()
        .filter(|s| only.is_empty() || only.contains(&s.name));
    Ok(in_order(spokes.map(|s| spoke(s, &files, timeout))).await)
}

async fn in_order(
    each: impl Iterator<Item = impl Future<Output = Observation>>,
) -> Vec<Observation> {
    // Each in its slot of a vector sized once: no doubling, no sort buffer, and the
    // result collected in place.
    // (The futures are made as they run, not collected: each is kilobytes.)
    let (low, high) = each.size_hint();
    let mut slots: Vec<Option<Observation>> = std::iter::repeat_with(|| None)
        .take(high.unwrap_or(low))
        .collect();
    futures::stream::iter(each.enumerate())
        .map(|(i, f)| async move { (i, f.await) })
        .buffer_unordered(CONCURRENCY)
        .for_each(|(i, o)| {
            if slots.len() <= i {
                slots.resize_with(i + 1, || None);
            }
            slots[i] = Some(o);
            std::future::ready(())
        })
        .await;
    #[expect(clippy::filter_map_identity, reason = "in-place collection")]
    slots.into_iter().filter_map(|o| o).collect()
}
