//! publish: what a tick found to change reaches the fleet repo one of two ways, a commit
//! on the target branch and one push ([`Direct`]), or a branch and a pull request per
//! change ([`super::review::Review`], `repo.mode: pull-request`). A spoke's credential
//! and a renewed sealing certificate are both just something to publish.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::context::Tick;
use super::context::{Landing, Spoke};
use super::error::{PinError, SpokeError};
use super::tick_report::{Outcome, RepoFailure, SpokeReport};
use super::{Beside, Context, Options, Proposal};
use crate::config::SpokeConfig;
use crate::repo::{Commits, Pushed, RepoError};

/// How the tick's changes are published.
pub(super) trait Publish {
    /// When what is published can reach the hub.
    fn landing(&self) -> Landing;

    /// The pending outcome when the spoke's fix already waits for review, so nothing is
    /// extracted (direct mode: never).
    async fn waiting(&self, _: &Context, _: &Spoke<'_>) -> Option<Outcome> {
        None
    }

    /// After the spoke's reconcile: its proposal (or, when pending, the fix waiting for
    /// review) published, and the spoke's outcome now (None: as reconcile left it).
    /// Called one spoke at a time, in configuration order, while later spokes are still
    /// being reconciled.
    async fn spoke(
        &self,
        tick: &Tick<'_>,
        spoke: &SpokeConfig,
        report: &SpokeReport,
        proposal: Option<&Proposal>,
    ) -> Result<Option<Outcome>, SpokeError>;

    /// A renewed sealing certificate at `rel` in the clone, with its commit message:
    /// the commit made, if one was.
    async fn certificate(
        &self,
        ctx: &Context,
        rel: &Path,
        pem: &[u8],
        message: &str,
    ) -> Result<Option<String>, PinError>;

    /// Removes `rel` in a commit of its own (`spoke`'s old Secret, once nothing reads
    /// it): committed, or proposed for review; None when the target does not hold it.
    async fn remove(
        &self,
        tick: &Tick<'_>,
        spoke: &SpokeConfig,
        rel: &Path,
        message: &str,
    ) -> Result<Option<Removal>, RemoveError>;

    /// A removal of `spoke`'s `rel` proposed on an earlier tick that has landed since
    /// (review mode: merged, the file gone from the target branch): its commit. Direct
    /// mode: never, its removal lands with the tick's push.
    async fn landed(&self, _: &Context, _: &SpokeConfig, _: &Path) -> Option<String> {
        None
    }

    /// The landed removal of `spoke`'s old Secret is done with (the spoke's bindings
    /// deleted, or none to delete): no later tick takes it up again.
    async fn forget(&self, _: &Context, _: &SpokeConfig) -> Result<(), RepoError> {
        Ok(())
    }

    /// After every spoke: push, or say why nothing was.
    async fn finish(&mut self, ctx: &Context, opts: &Options) -> Finished;
}

/// What [`Publish::remove`] did.
#[derive(Debug)]
pub(super) enum Removal {
    /// Committed on the target branch (direct mode), pushed at the tick's end.
    Committed(String),
    /// Proposed for review on `branch` (review mode): `commit` pushed this tick (None:
    /// the branch already held it), the pull request the forge shows with it.
    Proposed {
        branch: String,
        commit: Option<String>,
        pull_request: crate::forge::PullRequest,
    },
}

/// Why a file was not removed.
#[derive(Debug, thiserror::Error)]
pub(super) enum RemoveError {
    #[error(transparent)]
    Repo(#[from] RepoError),
    /// Review mode: the branch or its pull request failed; `why` says what was kept.
    #[error("{why}")]
    Review { why: String },
    /// The gate refused a side effect this tick: a tick that may act proposes it.
    #[error("{why}")]
    Refused { why: String },
}

/// What publishing left for the tick report.
#[derive(Default)]
pub(super) struct Finished {
    /// The target branch was pushed this tick.
    pub pushed: bool,
    pub repo_error: Option<RepoFailure>,
    /// Spokes reported rotated whose commits were lost when the stream broke, and why.
    pub lost: Option<(Vec<String>, Arc<RepoError>)>,
}

/// Direct mode: commits on the target branch, one push per tick.
#[derive(Default)]
pub(super) struct Direct {
    committed: AtomicUsize,
    /// The tick's commits through one git process, opened at the first.
    stream: tokio::sync::Mutex<Stream>,
}

#[derive(Default)]
struct Stream {
    open: Option<Commits>,
    /// The spokes committed in the open stream.
    spokes: Vec<String>,
    lost: Vec<String>,
    error: Option<Arc<RepoError>>,
}

impl Direct {
    /// Commits `rels` in the tick's stream (for `spoke`, when one): the paths the tick
    /// may commit are checked for attributes once, when the stream opens. `remove`: their
    /// removal, not their contents.
    async fn commit(
        &self,
        ctx: &Context,
        rels: &[&Path],
        message: &str,
        (spoke, remove): (Option<&str>, bool),
    ) -> Result<Option<String>, RepoError> {
        let mut stream = self.stream.lock().await;
        let commits = match &mut stream.open {
            Some(c) => c,
            open @ None => {
                let mut expected: Vec<&Path> = ctx
                    .config
                    .spokes
                    .iter()
                    .map(|s| s.output.as_path())
                    .collect();
                expected.extend_from_slice(rels);
                open.insert(ctx.repo.commits(&expected).await?)
            }
        };
        let made = match remove {
            true => commits.remove(&ctx.repo, rels, message).await,
            false => commits.commit(&ctx.repo, rels, message).await,
        };
        if commits.broken() {
            stream.end(ctx).await;
        } else if let (Ok(Some(_)), Some(name)) = (&made, spoke) {
            stream.spokes.push(name.to_string());
        }
        made
    }

    /// Ends the open stream: the branch and the index take its commits, or, when it
    /// broke, its spokes are lost.
    async fn settle(&self, ctx: &Context) {
        self.stream.lock().await.end(ctx).await;
    }
}

impl Stream {
    async fn end(&mut self, ctx: &Context) {
        let spokes = std::mem::take(&mut self.spokes);
        let Some(commits) = self.open.take() else {
            return;
        };
        if let Err(e) = commits.finish(&ctx.repo).await {
            tracing::warn!(error = %e, lost = spokes.len(), "the commits stream broke; its commits were not made");
            self.lost.extend(spokes);
            self.error = Some(Arc::new(e));
        }
    }
}

impl Publish for Direct {
    fn landing(&self) -> Landing {
        Landing::AtPush
    }

    async fn spoke(
        &self,
        tick: &Tick<'_>,
        spoke: &SpokeConfig,
        _: &SpokeReport,
        proposal: Option<&Proposal>,
    ) -> Result<Option<Outcome>, SpokeError> {
        let Some(p) = proposal else { return Ok(None) };
        let beside = tick.options.beside.get(&spoke.name).map(Vec::as_slice);
        let sha = commit(self, tick.context, spoke, p, beside.unwrap_or_default()).await?;
        self.committed.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Outcome::Rotated { commit: sha }))
    }

    async fn certificate(
        &self,
        ctx: &Context,
        rel: &Path,
        pem: &[u8],
        message: &str,
    ) -> Result<Option<String>, PinError> {
        ctx.repo.write_atomic(rel, pem)?;
        let committed = self.commit(ctx, &[rel], message, (None, false)).await;
        if committed.is_err() {
            ctx.repo.discard(rel).await;
        }
        Ok(committed?)
    }

    async fn remove(
        &self,
        tick: &Tick<'_>,
        _: &SpokeConfig,
        rel: &Path,
        message: &str,
    ) -> Result<Option<Removal>, RemoveError> {
        let made = self
            .commit(tick.context, &[rel], message, (None, true))
            .await?;
        if made.is_some() {
            self.committed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(made.map(Removal::Committed))
    }

    async fn finish(&mut self, ctx: &Context, opts: &Options) -> Finished {
        self.settle(ctx).await;
        let stream = self.stream.get_mut();
        let mut out = Finished {
            lost: stream
                .error
                .take()
                .map(|e| (std::mem::take(&mut stream.lost), e)),
            ..Finished::default()
        };
        if opts.dry_run || !ctx.config.repo.push {
            return out;
        }
        opts.progress.emit(super::Step::Fleet { stage: "push" });
        if let Err(why) = opts.gate.check() {
            // Left in the clone: the next tick here, or the new leader, pushes.
            if !matches!(ctx.repo.unpushed().await, Ok(0)) {
                out.repo_error = Some(RepoFailure::NotPushed {
                    why: why.to_string(),
                });
            }
            return out;
        }
        match ctx.repo.push().await {
            Ok(Pushed::Done { rebases }) => {
                out.pushed = true;
                let committed = self.committed.load(Ordering::Relaxed);
                tracing::info!(committed, rebases, "pushed");
            }
            Ok(Pushed::Nothing) => {}
            Err(e) => out.repo_error = Some(RepoFailure::Push(Arc::new(e))),
        }
        out
    }
}

/// The credential, and `beside` it the files `spokekeeper add` writes, in one commit.
/// A beside file the target branch no longer holds as expected stops the commit; on any
/// failure the clone is put back as HEAD has it.
async fn commit(
    direct: &Direct,
    ctx: &Context,
    spoke: &SpokeConfig,
    p: &Proposal,
    beside: &[Beside],
) -> Result<String, SpokeError> {
    let failed = |e| SpokeError::Commit(Arc::new(e));
    if !beside.is_empty() {
        // HEAD is read below: the stream's commits first.
        direct.settle(ctx).await;
    }
    for b in beside {
        let now = ctx.repo.read(&b.rel).await.map_err(failed)?;
        if now != b.was {
            let why = match (&now, &b.was) {
                (Some(_), None) => "exists now",
                (None, Some(_)) => "is gone",
                _ => "changed",
            };
            return Err(SpokeError::BesideMoved {
                file: b.rel.display().to_string(),
                why,
            });
        }
    }
    let mut rels: Vec<&Path> = vec![spoke.output.as_path()];
    rels.extend(beside.iter().map(|b| b.rel.as_path()));
    let written = async {
        ctx.repo
            .write_atomic(&spoke.output, p.manifest.as_bytes())
            .map_err(failed)?;
        for b in beside {
            ctx.repo.write_atomic(&b.rel, &b.bytes).map_err(failed)?;
        }
        match direct
            .commit(ctx, &rels, &p.message, (Some(&spoke.name), false))
            .await
        {
            Ok(Some(sha)) => Ok(sha),
            Ok(None) => Err(SpokeError::Unchanged),
            Err(e) => Err(failed(e)),
        }
    }
    .await;
    if written.is_err() && !beside.is_empty() {
        for rel in &rels {
            ctx.repo.discard(rel).await;
        }
    }
    written
}
