//! Review mode as a way to publish (push to a branch, land at the merge).

use std::path::Path;
use std::sync::Arc;

use time::OffsetDateTime;

use super::pr_text::{same_text, signed_line, unverified};
use super::settle::{branch_head, open_or_update, record};
use super::{Review, branch_name, forge_failed};
use crate::config::SpokeConfig;
use crate::repo::{BranchState, RepoError};
use crate::rotate::Outcome;
use crate::rotate::context::Tick;
use crate::rotate::context::{Landing, Spoke};
use crate::rotate::direct::{Finished, Publish, Removal, RemoveError};
use crate::rotate::error::{ForgeFailure, PinError, ReviewError, SpokeError};
use crate::rotate::sealing_key::CERT_BRANCH;
use crate::rotate::tick_report::RepoFailure;
use crate::rotate::{Context, Options, Proposal, SpokeReport};

impl Publish for Review {
    fn landing(&self) -> Landing {
        Landing::AtMerge
    }

    async fn waiting(&self, ctx: &Context, spoke: &Spoke<'_>) -> Option<Outcome> {
        self.waiting_on_branch(ctx, spoke).await
    }

    /// After reconcile: push the proposal to the spoke's branch and open or update its
    /// pull request; for a pending spoke, find (or reopen) its pull request. The gate is
    /// asked before the push and again before the forge is written to: a refusal leaves
    /// the rest to the next tick here or the new leader, and is kept for the tick report.
    async fn spoke(
        &self,
        tick: &Tick<'_>,
        spoke: &SpokeConfig,
        report: &SpokeReport,
        proposal: Option<&Proposal>,
    ) -> Result<Option<Outcome>, SpokeError> {
        let (ctx, opts) = (tick.context, tick.options);
        let (dry_run, gate) = (opts.dry_run, &opts.gate);
        let beside = opts.beside.get(&spoke.name).map_or(&[][..], Vec::as_slice);
        let pending = matches!(report.outcome, Outcome::Pending { .. });
        if proposal.is_none() && !pending {
            return Ok(None);
        }
        let name = branch_name(spoke);
        if !dry_run && let Err(why) = gate.check() {
            let why = self.refused(why);
            return match proposal {
                Some(_) => Err(SpokeError::NotPushed { branch: name, why }),
                None => Ok(None),
            };
        }
        let done = branch_head(ctx, spoke, &name, proposal, beside).await?;
        let pushed = done.commit.as_deref();
        let forge = match &self.forge {
            Ok(f) => f,
            Err(e) => return Err(forge_failed(&name, pushed, ForgeFailure::Setup(e.clone()))),
        };
        if !dry_run && let Err(why) = gate.check() {
            let why = self.refused(why);
            return match pushed {
                Some(_) => Err(forge_failed(&name, pushed, ForgeFailure::NotSent(why))),
                None => Ok(None),
            };
        }
        let now = OffsetDateTime::now_utc();
        let result = if dry_run {
            let base = ctx.repo.target_branch();
            let found = forge.find_open(&name, base).await;
            found.map(|pr| pr.map(|pr| (pr, None)))
        } else {
            let reason = report.reason.as_ref();
            open_or_update(forge, ctx, spoke, reason, proposal, &done).await
        };
        record(spoke, name, done, result, now).map(Some)
    }

    /// The target branch is never pushed to, so the renewed certificate goes on its own
    /// branch and pull request, like a rotation. The clone's checkout is left as it is;
    /// until the pull request is merged the pinned copy there stays the old one.
    async fn certificate(
        &self,
        ctx: &Context,
        rel: &Path,
        pem: &[u8],
        message: &str,
    ) -> Result<Option<String>, PinError> {
        let branch = |source| PinError::Branch {
            branch: CERT_BRANCH,
            error: source,
        };
        let kept = |error| ReviewError::Forge {
            kept: format!("branch {CERT_BRANCH} pushed"),
            error,
        };
        let repo = &ctx.repo;
        let head = repo.remote_branch_head(CERT_BRANCH).await;
        let waiting = match &head {
            Some(h) => match repo.branch_state(CERT_BRANCH, h, rel).await {
                BranchState::Merged => false,
                BranchState::Open(proven) => match proven {
                    // Only spokekeeper's own signed commit is left waiting; another is replaced.
                    Ok(()) => repo.show(h, rel).await.ok().flatten().as_deref() == Some(pem),
                    Err(why) => {
                        tracing::warn!(branch = CERT_BRANCH, head = %h, reason = %why, "replacing a review branch spokekeeper cannot prove its own");
                        false
                    }
                },
            },
            None => false,
        };
        let (pushed, trusted) = if let (true, Some(h)) = (waiting, &head) {
            (None, h.clone())
        } else {
            let sha = repo
                .commit_on_target(rel, pem, message)
                .await
                .map_err(branch)?;
            repo.push_branch(CERT_BRANCH, &sha, head.as_deref())
                .await
                .map_err(branch)?;
            (Some(sha.clone()), sha)
        };
        let forge = self
            .forge
            .as_ref()
            .map_err(|e| kept(ForgeFailure::Setup(e.clone())))?;
        let base = repo.target_branch();
        let open = forge
            .find_open(CERT_BRANCH, base)
            .await
            .map_err(|e| kept(ForgeFailure::Forge(Arc::new(e))))?;
        let (title, body) = message.split_once("\n\n").unwrap_or((message, ""));
        // The head line lets a reviewer compare with the commit the forge shows.
        let body = format!("{body}\n\n{}", signed_line(&trusted));
        let shown = match open {
            // An open pull request (ours or adopted) always gets spokekeeper's text.
            Some(o) if pushed.is_none() && same_text(&o, title, &body) => o,
            open => {
                let ask = crate::forge::Proposal {
                    branch: CERT_BRANCH,
                    base,
                    title,
                    body: &body,
                };
                let (pr, action) = forge
                    .open_or_update(&ask, open)
                    .await
                    .map_err(|e| kept(ForgeFailure::Forge(Arc::new(e))))?;
                tracing::info!(number = pr.pr.number, url = %pr.pr.url, ?action, "sealing certificate pull request");
                pr
            }
        };
        if shown.head.as_deref() != Some(trusted.as_str()) {
            let why = unverified(&shown, &trusted, pushed.is_some());
            return Err(ReviewError::Unverified(why).into());
        }
        Ok(pushed)
    }

    /// Proposed on the spoke's removal branch, with a pull request (removal.rs).
    async fn remove(
        &self,
        tick: &Tick<'_>,
        spoke: &SpokeConfig,
        rel: &Path,
        message: &str,
    ) -> Result<Option<Removal>, RemoveError> {
        self.propose_removal(tick, spoke, rel, message).await
    }

    async fn landed(&self, ctx: &Context, spoke: &SpokeConfig, rel: &Path) -> Option<String> {
        let branch = super::removal_branch(spoke);
        if !self.removals.contains(&branch) {
            return None;
        }
        super::removal::landed(ctx, spoke, rel).await
    }

    async fn forget(&self, ctx: &Context, spoke: &SpokeConfig) -> Result<(), RepoError> {
        super::removal::forget(ctx, spoke).await
    }

    async fn finish(&mut self, ctx: &Context, _: &Options) -> Finished {
        let mut out = Finished::default();
        // Review mode never pushes the target branch; say so if the clone holds commits
        // (left by an earlier direct-mode run) that only a push would publish.
        match ctx.repo.unpushed().await {
            Ok(0) | Err(_) => {}
            Ok(n) => {
                out.repo_error = Some(RepoFailure::Unpushed {
                    commits: n,
                    remote: ctx.config.repo.remote.clone(),
                    branch: ctx.config.repo.branch.clone(),
                    clone: ctx.config.repo.path.clone(),
                })
            }
        }
        // Reported as in direct mode: the branches and pull requests wait for a tick
        // that may act.
        if let Some(why) = self.refused.lock().ok().and_then(|r| r.clone()) {
            out.repo_error = Some(RepoFailure::NotPushed { why });
        }
        out
    }
}
