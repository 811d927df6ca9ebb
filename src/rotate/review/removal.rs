//! A federated spoke's old Secret removed by pull request: once every consumer is Ready
//! through the ConfigMap, one signed commit that deletes the old file alone goes to the
//! spoke's removal branch, and a pull request asks for it. Once it is merged, a later
//! tick deletes the old minted bindings (rotate/migrate), and the clone's record of the
//! push is dropped.

use std::path::Path;
use std::sync::Arc;

use super::pr_text::{removal_text, same_text, unverified};
use super::{Review, forge_failed};
use crate::config::SpokeConfig;
use crate::forge::{Forge, ForgeError, Open, PullRequest};
use crate::repo::{BranchState, RepoError};
use crate::rotate::Context;
use crate::rotate::context::Tick;
use crate::rotate::direct::{Removal, RemoveError};
use crate::rotate::error::ForgeFailure;

/// The branch a spoke's old Secret's removal is proposed on:
/// `spokekeeper/<spoke>.remove-old-secret`. A spoke's name is a DNS label, without a
/// dot, so no spoke's credential branch (`spokekeeper/<spoke>`) is named so, and git
/// can hold both (one is not a directory of the other).
pub fn removal_branch(spoke: &SpokeConfig) -> String {
    format!(
        "{}{}.remove-old-secret",
        crate::repo::BRANCH_PREFIX,
        spoke.name
    )
}

impl Review {
    /// The removal of `rel` on the spoke's removal branch, and its pull request: a branch
    /// provably ours that removes `rel` is kept; any other is replaced with a lease on
    /// the head read, and the pull request body names the head replaced. None: the
    /// target branch no longer holds `rel`.
    pub(super) async fn propose_removal(
        &self,
        tick: &Tick<'_>,
        spoke: &SpokeConfig,
        rel: &Path,
        message: &str,
    ) -> Result<Option<Removal>, RemoveError> {
        let (ctx, gate) = (tick.context, &tick.options.gate);
        let repo = &ctx.repo;
        let name = removal_branch(spoke);
        if let Err(why) = gate.check() {
            let why = self.refused(why);
            return Err(RemoveError::Refused { why });
        }
        let head = repo.remote_branch_head(&name).await;
        let mut replaced = None;
        let kept = match &head {
            Some(h) => match repo.removal_state(&name, h, rel).await {
                BranchState::Open(Ok(())) => Some(h.clone()),
                BranchState::Open(Err(why)) => {
                    tracing::warn!(spoke = %spoke.name, branch = %name, head = %h, reason = %why, "replacing a removal branch spokekeeper cannot prove its own");
                    replaced = Some(format!("replaced branch head {h}: {why}"));
                    None
                }
                // Merged before, and the file is back: a new removal.
                BranchState::Merged => None,
            },
            None => None,
        };
        let (pushed, trusted) = match kept {
            Some(h) => (None, h),
            None => {
                let Some(sha) = repo.commit_removal(rel, message).await? else {
                    return Ok(None);
                };
                repo.push_branch(&name, &sha, head.as_deref()).await?;
                tracing::info!(spoke = %spoke.name, branch = %name, commit = %sha, "pushed the old Secret's removal for review");
                (Some(sha.clone()), sha)
            }
        };
        let failed = |error| RemoveError::Review {
            why: forge_failed(&name, pushed.as_deref(), error).to_string(),
        };
        let forge = match &self.forge {
            Ok(f) => f,
            Err(e) => return Err(failed(ForgeFailure::Setup(e.clone()))),
        };
        if let Err(why) = gate.check() {
            let why = self.refused(why);
            return Err(failed(ForgeFailure::NotSent(why)));
        }
        let text = ctx.repo.commit_message(&trusted).await.ok();
        let (title, body) = removal_text(
            text.as_deref().unwrap_or(message),
            replaced.as_deref(),
            &trusted,
        );
        let open = removal_pr(forge, ctx, &name, (&title, &body), pushed.is_some())
            .await
            .map_err(|e| failed(ForgeFailure::Forge(Arc::new(e))))?;
        if open.head.as_deref() != Some(trusted.as_str()) {
            let why = unverified(&open, &trusted, pushed.is_some());
            return Err(RemoveError::Review { why });
        }
        tracing::info!(spoke = %spoke.name, number = open.pr.number, url = %open.pr.url, "the old Secret's removal waits for review");
        Ok(Some(Removal::Proposed {
            branch: name,
            commit: pushed,
            pull_request: open.pr,
        }))
    }
}

/// The open pull request of the removal branch, opened or given spokekeeper's text (one
/// that has it already, for a branch not pushed again, is not written again).
async fn removal_pr(
    forge: &Forge,
    ctx: &Context,
    name: &str,
    (title, body): (&str, &str),
    pushed: bool,
) -> Result<Open, ForgeError> {
    let base = ctx.repo.target_branch();
    match forge.find_open(name, base).await? {
        Some(o) if !pushed && same_text(&o, title, body) => Ok(o),
        open => {
            let ask = crate::forge::Proposal {
                branch: name,
                base,
                title,
                body,
            };
            Ok(forge.open_or_update(&ask, open).await?.0)
        }
    }
}

/// The removal of `spoke`'s `rel` this clone pushed, once it has landed on the target.
pub(super) async fn landed(ctx: &Context, spoke: &SpokeConfig, rel: &Path) -> Option<String> {
    ctx.repo.removal_landed(&removal_branch(spoke), rel).await
}

/// Drops the clone's record of the spoke's removal: its work is done.
pub(super) async fn forget(ctx: &Context, spoke: &SpokeConfig) -> Result<(), RepoError> {
    ctx.repo.forget_pushed(&removal_branch(spoke)).await
}

/// For `check`: the open pull request of the spoke's removal branch, when the forge
/// shows the removal this clone last pushed there and it is provably ours.
pub(super) async fn open_removal(
    forge: &Forge,
    repo: &crate::repo::Repo,
    spoke: &SpokeConfig,
    base: &str,
) -> Option<PullRequest> {
    let name = removal_branch(spoke);
    let rel = spoke.secret.sealed_output();
    let recorded = repo.pushed(&name).await?;
    let open = forge.find_open(&name, base).await.ok()??;
    if open.head.as_deref() != Some(recorded.as_str()) {
        return None;
    }
    repo.removal_provenance(&name, &recorded, &rel).await.ok()?;
    Some(open.pr)
}
