//! Pushing a proposal to the spoke's review branch.

use crate::config::SpokeConfig;
use crate::repo::{BranchState, RepoError};
use crate::rotate::{Context, Proposal};

/// What [`push`] did.
pub(super) struct Pushed {
    /// None: the branch already carried the same content (nothing pushed).
    pub(super) commit: Option<String>,
    /// The branch's head now: pushed, or kept because it is provably ours.
    pub(super) head: String,
    /// For the pull request body: the head replaced because it was not trusted.
    pub(super) replaced: Option<String>,
    /// The pushed commit is an onboarding one (carrying add's files).
    pub(super) onboarding: bool,
}

/// Commits the proposal on the target branch's head and pushes it to the spoke's
/// branch, replacing what is there only if it is still what we read. A branch that
/// already carries the same content is kept only when it is provably ours. With
/// `beside` (`spokekeeper add`) the commit is an onboarding one, carrying those files.
pub(super) async fn push(
    ctx: &Context,
    spoke: &SpokeConfig,
    branch: &str,
    p: &Proposal,
    beside: &[crate::rotate::Beside],
) -> Result<Pushed, RepoError> {
    let head = ctx.repo.remote_branch_head(branch).await;
    let mut replaced = None;
    let mut carried = Vec::new();
    if let Some(h) = &head
        && let BranchState::Open(proven) = ctx.repo.branch_state(branch, h, &spoke.output).await
    {
        // A new credential for a spoke whose onboarding waits for review keeps the
        // Flux objects `add` put beside it.
        if proven.is_ok() && beside.is_empty() {
            carried = ctx.repo.onboarding_files(h, &spoke.output).await?;
        }
        match proven {
            Err(why) => {
                tracing::warn!(spoke = %spoke.name, %branch, head = %h, reason = %why, "replacing a review branch spokekeeper cannot prove its own");
                replaced = Some(format!("replaced branch head {h}: {why}"));
            }
            Ok(()) if beside.is_empty() && same_content(ctx, spoke, h, p).await => {
                return Ok(Pushed {
                    commit: None,
                    head: h.clone(),
                    replaced: None,
                    onboarding: !carried.is_empty(),
                });
            }
            Ok(()) => {}
        }
    }
    let bytes = p.manifest.as_bytes();
    let onboard = |files| async move {
        ctx.repo
            .commit_onboarding(&spoke.name, &spoke.output, bytes, files, &p.message)
            .await
    };
    let mut onboarding = true;
    let sha = if !beside.is_empty() {
        onboard(beside).await?
    } else {
        let kept = match carried.is_empty() {
            true => None,
            false => match onboard(&carried).await {
                Ok(sha) => Some(sha),
                // The target branch moved under them: the credential goes alone.
                Err(e @ RepoError::BesideMoved { .. }) => {
                    tracing::warn!(spoke = %spoke.name, %branch, error = %e, "the onboarding files no longer fit the target branch; proposing the credential alone");
                    None
                }
                Err(e) => return Err(e),
            },
        };
        match kept {
            Some(sha) => sha,
            None => {
                onboarding = false;
                ctx.repo
                    .commit_on_target(&spoke.output, bytes, &p.message)
                    .await?
            }
        }
    };
    ctx.repo.push_branch(branch, &sha, head.as_deref()).await?;
    Ok(Pushed {
        head: sha.clone(),
        commit: Some(sha),
        replaced,
        onboarding,
    })
}

/// Whether the branch at `head` holds a credential with the proposal's content, sealed
/// to the same key.
async fn same_content(ctx: &Context, spoke: &SpokeConfig, head: &str, p: &Proposal) -> bool {
    let held = super::held(ctx, head, spoke).await;
    held.is_some_and(|(_, r)| r.content_sha256 == p.content_sha256 && r.sealed_to == p.sealed_to)
}
