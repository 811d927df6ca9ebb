//! Settling a spoke's review branch and pull request after reconcile.

use time::OffsetDateTime;

use crate::config::SpokeConfig;
use crate::forge::{self, Action, Forge, ForgeError, Open};
use crate::rotate::context::Closed;
use crate::rotate::error::{ForgeFailure, ReviewError, SpokeError};
use crate::rotate::reconcile::Tick;
use crate::rotate::{Beside, Context, Outcome, Proposal, Reason, SpokeReport};

use super::pr_text::{describe, same_text, signed_line, unverified};
use super::push_branch::{Pushed, push};
use super::{Review, age, branch_name, forge_failed};

impl Review {
    /// After reconcile: push the proposal to the spoke's branch and open or update its
    /// pull request; for a pending spoke, find (or reopen) its pull request. The gate is
    /// asked before the push and again before the forge is written to: a refusal leaves
    /// the rest to the next tick here or the new leader, and is kept for the tick report.
    pub(super) async fn settle(
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

    /// Keeps why the gate refused, for the tick report.
    fn refused(&self, why: Closed) -> String {
        let why = why.to_string();
        if let Ok(mut refused) = self.refused.lock() {
            *refused = Some(why.clone());
        }
        why
    }
}

/// The branch's head to hold the pull request to: the proposal pushed, or (pending) the
/// branch as it is when it is still provably ours.
async fn branch_head(
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
async fn open_or_update(
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
fn record(
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
