//! Settling a spoke's review branch and pull request after reconcile: the steps of
//! review mode's [`crate::rotate::direct::Publish::spoke`].

use time::OffsetDateTime;

use crate::config::SpokeConfig;
use crate::forge::{self, Action, Forge, ForgeError, Open};
use crate::rotate::context::Closed;
use crate::rotate::error::{ForgeFailure, ReviewError, SpokeError};
use crate::rotate::{Beside, Context, Outcome, Proposal, Reason};

use super::pr_text::{describe, same_text, signed_line, unverified};
use super::push_branch::{Pushed, push};
use super::{Review, age, branch_name, forge_failed};

impl Review {
    /// Keeps why the gate refused, for the tick report.
    pub(super) fn refused(&self, why: Closed) -> String {
        let why = why.to_string();
        if let Ok(mut refused) = self.refused.lock() {
            *refused = Some(why.clone());
        }
        why
    }
}

/// The branch's head to hold the pull request to: the proposal pushed, or (pending) the
/// branch as it is when it is still provably ours.
pub(super) async fn branch_head(
    ctx: &Context,
    spoke: &SpokeConfig,
    name: &str,
    proposal: Option<&Proposal>,
    beside: &[Beside],
) -> Result<Pushed, SpokeError> {
    if let Some(p) = proposal {
        return push(ctx, spoke, name, p, beside)
            .await
            .map_err(|e| SpokeError::BranchPush {
                branch: name.to_string(),
                error: e.into(),
            });
    }
    // Pending: `waiting` found the branch provably ours this tick; checked again
    // here, as the pull request will be compared with it.
    let trusted = match ctx.repo.remote_branch_head(name).await {
        Some(h) => ctx
            .repo
            .provenance(name, &h, &spoke.output)
            .await
            .map(|()| h)
            .map_err(|why| why.to_string()),
        None => Err("the branch is gone".to_string()),
    };
    match trusted {
        Ok(head) => Ok(Pushed {
            commit: None,
            head,
            replaced: None,
            onboarding: false,
        }),
        Err(why) => Err(SpokeError::Review(ReviewError::NotOurs {
            branch: name.to_string(),
            why,
        })),
    }
}

/// Opens the pull request for `done.head`, or gives an open one (ours or adopted)
/// spokekeeper's title and body; one that already has them is not written again.
pub(super) async fn open_or_update(
    forge: &Forge,
    ctx: &Context,
    spoke: &SpokeConfig,
    reason: Option<&Reason>,
    proposal: Option<&Proposal>,
    done: &Pushed,
) -> Result<Option<(Open, Option<Action>)>, ForgeError> {
    let (name, base) = (branch_name(spoke), ctx.repo.target_branch());
    let head = &done.head;
    // An onboarding commit's message gains the trailer naming every file.
    let message = match proposal {
        Some(p) if !done.onboarding => Some(p.message.clone()),
        _ => ctx.repo.commit_message(head).await.ok(),
    };
    let replaced = done.replaced.as_deref();
    let (title, body) = match message {
        Some(m) => describe(&m, reason, replaced, head),
        None => (
            format!("{}: rotate kubeconfig", spoke.name),
            signed_line(head),
        ),
    };
    let ask = forge::Proposal {
        branch: &name,
        base,
        title: &title,
        body: &body,
    };
    match forge.find_open(&name, base).await? {
        Some(open) if proposal.is_none() && same_text(&open, &title, &body) => {
            Ok(Some((open, None)))
        }
        open => forge
            .open_or_update(&ask, open)
            .await
            .map(|(pr, a)| Some((pr, Some(a)))),
    }
}

/// The outcome for what the forge answered: pending on an endorsed pull request (or
/// none yet); failed when it shows another head or the forge failed.
pub(super) fn record(
    spoke: &SpokeConfig,
    name: String,
    done: Pushed,
    result: Result<Option<(Open, Option<Action>)>, ForgeError>,
    now: OffsetDateTime,
) -> Result<Outcome, SpokeError> {
    let (head, pushed) = (done.head, done.commit);
    match result {
        Ok(Some((open, _))) if open.head.as_deref() != Some(head.as_str()) => {
            let error = unverified(&open, &head, pushed.is_some());
            tracing::warn!(spoke = %spoke.name, branch = %name, error = %error, "pull request not endorsed");
            Err(SpokeError::Review(ReviewError::Unverified(error)))
        }
        Ok(found) => {
            let (pr, change) = found.map_or((None, None), |(open, a)| (Some(open.pr), a));
            if let Some(pr) = &pr {
                tracing::info!(spoke = %spoke.name, number = pr.number, url = %pr.url, ?change, "pull request");
            }
            Ok(Outcome::Pending {
                branch: name,
                commit: pushed,
                pending_seconds: pr.as_ref().map(|p| age(p, now)),
                pull_request: pr,
                change,
            })
        }
        Err(e) => {
            let error = ForgeFailure::Forge(e.into());
            Err(forge_failed(&name, pushed.as_deref(), error))
        }
    }
}
