//! Settling a spoke's review branch and pull request after reconcile.

use time::OffsetDateTime;

use crate::config::SpokeConfig;
use crate::forge::{self, Action, Forge, ForgeError, Open};
use crate::rotate::error::{ForgeFailure, ReviewError, SpokeError};
use crate::rotate::{Beside, Context, Options, Outcome, Proposal, SpokeReport};

use super::pr_text::{describe, same_text, signed_line, unverified};
use super::push_branch::{Pushed, push};
use super::{Review, age, branch_name, fail};

impl Review {
    /// After reconcile: push the proposal to the spoke's branch and open or update its
    /// pull request; for a pending spoke, find (or reopen) its pull request. The gate is
    /// asked before the push and again before the forge is written to: a refusal leaves
    /// the rest to the next tick here or the new leader, and is returned.
    pub(super) async fn settle(
        &self,
        ctx: &Context,
        spoke: &SpokeConfig,
        report: &mut SpokeReport,
        proposal: Option<&Proposal>,
        opts: &Options,
    ) -> Option<String> {
        let (dry_run, gate) = (opts.dry_run, &opts.gate);
        let beside = opts.beside.get(&spoke.name).map_or(&[][..], Vec::as_slice);
        let pending = matches!(report.outcome, Outcome::Pending { .. });
        if proposal.is_none() && !pending {
            return None;
        }
        let name = branch_name(spoke);
        if !dry_run && let Err(why) = gate.check() {
            if proposal.is_some() {
                report.outcome = Outcome::Failed(SpokeError::NotPushed {
                    branch: name.clone(),
                    why: why.to_string(),
                });
            }
            return Some(why.to_string());
        }
        // None: the report says why there is no head to hold a pull request to.
        let done = branch_head(ctx, spoke, &name, proposal, beside, report).await?;
        let forge = match &self.forge {
            Ok(f) => f,
            Err(e) => {
                let error = ForgeFailure::Setup(e.clone());
                fail(report, &name, done.commit.as_deref(), error);
                return None;
            }
        };
        if !dry_run && let Err(why) = gate.check() {
            if done.commit.is_some() {
                let error = ForgeFailure::NotSent(why.to_string());
                fail(report, &name, done.commit.as_deref(), error);
            }
            return Some(why.to_string());
        }
        let now = OffsetDateTime::now_utc();
        let result = if dry_run {
            let base = ctx.repo.target_branch();
            let found = forge.find_open(&name, base).await;
            found.map(|pr| pr.map(|pr| (pr, None)))
        } else {
            open_or_update(forge, ctx, spoke, report, proposal, &done).await
        };
        record(report, spoke, name, done, result, now);
        None
    }
}

/// The branch's head to hold the pull request to: the proposal pushed, or (pending) the
/// branch as it is when it is still provably ours. None: the report says why not.
async fn branch_head(
    ctx: &Context,
    spoke: &SpokeConfig,
    name: &str,
    proposal: Option<&Proposal>,
    beside: &[Beside],
    report: &mut SpokeReport,
) -> Option<Pushed> {
    if let Some(p) = proposal {
        return match push(ctx, spoke, name, p, beside).await {
            Ok(done) => Some(done),
            Err(e) => {
                report.outcome = Outcome::Failed(SpokeError::BranchPush {
                    branch: name.to_string(),
                    error: e.into(),
                });
                None
            }
        };
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
        Ok(head) => Some(Pushed {
            commit: None,
            head,
            replaced: None,
            onboarding: false,
        }),
        Err(why) => {
            report.outcome = Outcome::Failed(SpokeError::Review(ReviewError::NotOurs {
                branch: name.to_string(),
                why,
            }));
            None
        }
    }
}

/// Opens the pull request for `done.head`, or gives an open one (ours or adopted)
/// spokekeeper's title and body; one that already has them is not written again.
async fn open_or_update(
    forge: &Forge,
    ctx: &Context,
    spoke: &SpokeConfig,
    report: &SpokeReport,
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
        Some(m) => describe(&m, report.reason.as_ref(), replaced, head),
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

/// The report for what the forge answered: pending on an endorsed pull request (or
/// none yet), failed when it shows another head or the forge failed.
fn record(
    report: &mut SpokeReport,
    spoke: &SpokeConfig,
    name: String,
    done: Pushed,
    result: Result<Option<(Open, Option<Action>)>, ForgeError>,
    now: OffsetDateTime,
) {
    let (head, pushed) = (done.head, done.commit);
    match result {
        Ok(Some((open, _))) if open.head.as_deref() != Some(head.as_str()) => {
            let error = unverified(&open, &head, pushed.is_some());
            tracing::warn!(spoke = %spoke.name, branch = %name, error = %error, "pull request not endorsed");
            report.outcome = Outcome::Failed(SpokeError::Review(ReviewError::Unverified(error)));
        }
        Ok(found) => {
            let (pr, change) = found.map_or((None, None), |(open, a)| (Some(open.pr), a));
            if let Some(pr) = &pr {
                tracing::info!(spoke = %spoke.name, number = pr.number, url = %pr.url, ?change, "pull request");
            }
            report.outcome = Outcome::Pending {
                branch: name,
                commit: pushed,
                pending_seconds: pr.as_ref().map(|p| age(p, now)),
                pull_request: pr,
                change,
            };
        }
        Err(e) => fail(
            report,
            &name,
            pushed.as_deref(),
            ForgeFailure::Forge(e.into()),
        ),
    }
}
