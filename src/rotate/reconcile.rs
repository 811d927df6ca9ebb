//! One spoke: from its observation, decide -> (extract -> validate -> [mint] -> seal),
//! ending in a report and, when a credential is ready, a proposal to publish.

use time::OffsetDateTime;

use super::decide::{Decision, Policy, Reason};
use super::error::SpokeError;
use super::message::commit_message;
use super::observe::{Committed, Observation};
use super::progress::Step;
use super::publish::Publish;
use super::report::{CredentialReport, Outcome, SpokeReport};
use super::state::{self, Recorded};
use super::{Context, Options, Proposal, decide, minted, refresh};
use crate::config::{CredentialMode, SpokeConfig};
use crate::hub::cert::Untrusted;
use crate::seal::SealingKey;
use crate::secret::SecretBytes;

/// What a tick gives every spoke's reconcile.
pub(super) struct Run<'a, P> {
    pub ctx: &'a Context,
    pub opts: &'a Options,
    pub now: OffsetDateTime,
    /// The tick's sealing key; with `untrusted` set nothing may be sealed to it.
    pub sealing: &'a SealingKey,
    pub untrusted: Option<&'a Untrusted>,
    pub publish: &'a P,
    /// The tick's listing of the hub's consumers (empty without a hub).
    pub listed: &'a crate::hub::consumers::Listed,
}

/// One spoke's result: its report, and what to publish when a credential is ready.
pub(super) struct Reconciled {
    pub report: SpokeReport,
    pub(crate) proposal: Option<Proposal>,
}

impl Reconciled {
    fn done(report: SpokeReport) -> Reconciled {
        Reconciled {
            report,
            proposal: None,
        }
    }
}

/// What the rule table weighs a spoke's observation against this tick.
pub(super) fn policy<P>(run: &Run<'_, P>, spoke: &SpokeConfig, seen: &Observation) -> Policy {
    let ctx = run.ctx;
    let recorded = seen.committed.recorded();
    let verify_due = {
        let last = ctx
            .verified
            .lock()
            .map(|m| m.get(&spoke.name).copied())
            .unwrap_or(None);
        let since = last.or(recorded.map(|r| r.rotated_at));
        since.is_none_or(|t| run.now - t >= ctx.config.verify_every)
    };
    // An untrusted key is no reason to rotate: against it, compare with what is recorded.
    let sealing_sha256 = match (run.untrusted, recorded) {
        (Some(_), Some(r)) => r.sealing_sha256,
        _ => run.sealing.fingerprint(),
    };
    Policy {
        now: run.now,
        renew_before: ctx.config.renew_before,
        sealing_sha256,
        force: run.opts.force || run.opts.revoke,
        verify_due,
    }
}

/// decide -> (extract -> validate -> [mint] -> seal) for one spoke as observed. With an
/// untrusted sealing key nothing is sealed: a rotation fails at `seal`.
pub(super) async fn reconcile<P: Publish>(
    run: &Run<'_, P>,
    spoke: &SpokeConfig,
    seen: &Observation,
    policy: &Policy,
) -> Reconciled {
    let (ctx, opts, now, sealing, untrusted) =
        (run.ctx, run.opts, run.now, run.sealing, run.untrusted);
    let mut report = SpokeReport::new(&spoke.name, Outcome::Healthy);
    let stage = |stage| {
        opts.progress.emit(Step::Stage {
            spoke: &spoke.name,
            stage,
        })
    };
    if let Committed::Unreadable(e) = &seen.committed {
        report.outcome = Outcome::Failed(SpokeError::Read(e.clone()));
        return Reconciled::done(report);
    }
    let previous: Option<&Recorded> = seen.committed.recorded();
    if let Some(r) = previous {
        report.ca_sha256 = Some(r.ca_sha256);
        report.ca_not_after = Some(r.ca_not_after);
        report.client_not_after = r.client_not_after;
        report.credential = Some(CredentialReport::of(r));
    }
    // decide
    let reason = match decide::decide(spoke, &seen.observed(), policy) {
        Decision::Healthy => return Reconciled::done(report),
        Decision::Unreachable(_) => {
            // decide says so only for a failed probe, which the observation holds.
            if let Some(Err(e)) = &seen.probe {
                report.outcome = Outcome::Failed(SpokeError::Unreachable(e.clone()));
            }
            return Reconciled::done(report);
        }
        Decision::Rotate(reason) => reason,
    };
    report.reason = Some(reason.clone());
    let review = run.publish.reviews();
    if !(opts.force || opts.revoke)
        && run
            .publish
            .waiting(ctx, spoke, seen, &mut report, policy)
            .await
    {
        return Reconciled::done(report);
    }

    // extract -> validate
    stage("extract and validate");
    let fresh = match refresh::extract_and_validate(spoke, now, ctx.live_timeout).await {
        Ok(f) => f,
        Err(e) => {
            report.outcome = Outcome::Failed(e);
            return Reconciled::done(report);
        }
    };
    if let Ok(mut m) = ctx.verified.lock() {
        m.insert(spoke.name.clone(), now);
    }
    let mut reason = reason;
    let mut revocation = None;
    let mut shortened = None;
    // The admin credential and the generation minted this tick, until it is committed.
    let mut minted_now: Option<(SecretBytes, u64)> = None;
    let had = previous.map(|r| r.credential.clone()).unwrap_or_default();
    let extracted = spoke.credential.mode == CredentialMode::Extracted;
    let (fresh, credential) = if !extracted {
        stage("mint");
        let in_review = review;
        let run = minted::Run {
            revoke: opts.revoke,
            review: in_review,
            dry_run: opts.dry_run,
            call: ctx.live_timeout,
            sign: ctx.sign_timeout,
            unsealable: match untrusted {
                Some(u) => Some(SpokeError::Untrusted(u.error.clone())),
                None => refresh::can_seal(spoke, sealing).err(),
            },
        };
        let step = minted::step(
            spoke,
            fresh,
            &seen.committed,
            &mut reason,
            &mut report.revoked,
            &run,
        )
        .await;
        report.reason = Some(reason.clone());
        match step {
            Err(e) => {
                report.outcome = Outcome::Failed(e);
                return Reconciled::done(report);
            }
            Ok(minted::Step::Unchanged) => {
                report.outcome = Outcome::Unchanged;
                return Reconciled::done(report);
            }
            Ok(minted::Step::WouldMint) => {
                report.outcome = Outcome::WouldRotate;
                return Reconciled::done(report);
            }
            Ok(minted::Step::Minted {
                fresh,
                credential,
                admin,
                shortened: short,
            }) => {
                shortened = short;
                minted_now = Some((admin.clone(), credential.generation));
                if !in_review {
                    let below = credential.generation;
                    let legacy_user = had.user.clone();
                    revocation = Some(minted::Revocation {
                        admin,
                        below,
                        legacy_user,
                        hub: spoke.credential.hub_id.clone(),
                        spoke: spoke.name.clone(),
                    });
                }
                (*fresh, credential)
            }
        }
    } else {
        if opts.revoke {
            report.outcome = Outcome::Failed(SpokeError::RevokeExtracted {
                spoke: spoke.name.clone(),
            });
            return Reconciled::done(report);
        }
        // Back from minted: every minted generation goes once the hub has this one.
        if had.mode == CredentialMode::Minted && !review && !opts.dry_run {
            revocation = Some(minted::Revocation {
                admin: fresh.yaml.clone(),
                below: had.next_generation(),
                legacy_user: had.user.clone(),
                hub: spoke.credential.hub_id.clone(),
                spoke: spoke.name.clone(),
            });
        }
        let credential = state::RecordedCredential {
            mode: CredentialMode::Extracted,
            user: None,
            generation: had.generation,
        };
        (fresh, credential)
    };
    // validate, for Flux: the ServiceAccounts its consumers impersonate with it.
    let default_sa =
        (ctx.config.hub.as_ref()).and_then(|h| h.flux_default_service_account.as_deref());
    let needed = crate::hub::consumers::impersonated(spoke, run.listed, default_sa);
    if let Err(e) = refresh::may_impersonate(&fresh, &needed, ctx.live_timeout).await {
        if let Some((admin, generation)) = &minted_now {
            minted::withdraw(spoke, admin, *generation, ctx.live_timeout).await;
        }
        report.outcome = Outcome::Failed(e);
        return Reconciled::done(report);
    }
    let mut recorded =
        refresh::record(spoke, &fresh.kubeconfig, fresh.content_sha256, sealing, now);
    recorded.credential = credential;
    report.user = Some(fresh.live.username.clone());
    let mut credential = CredentialReport::of(&recorded);
    if extracted {
        // Extracted: who it authenticated as.
        credential.user = Some(fresh.live.username.clone());
    }
    credential.shortened = shortened.map(|s| s.to_string());
    report.credential = Some(credential);
    match (&reason, previous.filter(|_| extracted)) {
        // On schedule, and the node serves what the hub already has.
        (Reason::Periodic, Some(prev)) if prev.content_sha256 == recorded.content_sha256 => {
            report.outcome = Outcome::Unchanged;
            return Reconciled::done(report);
        }
        // Expiring, but the node still serves the same certificate: say so, keep it.
        (Reason::ClientExpiring { .. }, Some(prev))
            if prev.client_sha256 == recorded.client_sha256 =>
        {
            report.outcome = Outcome::NotRenewed;
            return Reconciled::done(report);
        }
        _ => {}
    }
    let reason = match (&reason, previous) {
        (Reason::Periodic, Some(_)) => Reason::ContentChanged,
        _ => reason,
    };
    report.reason = Some(reason.clone());
    report.ca_sha256 = Some(recorded.ca_sha256);
    report.ca_not_after = Some(recorded.ca_not_after);
    report.client_not_after = recorded.client_not_after;

    // seal
    stage("seal");
    if let Some(u) = untrusted {
        report.outcome = Outcome::Failed(SpokeError::Untrusted(u.error.clone()));
        return Reconciled::done(report);
    }
    let manifest = match refresh::seal(spoke, &fresh.yaml, sealing, &recorded) {
        Ok(m) => m,
        Err(e) => {
            report.outcome = Outcome::Failed(e);
            return Reconciled::done(report);
        }
    };
    if opts.dry_run {
        report.outcome = Outcome::WouldRotate;
        return Reconciled::done(report);
    }
    let message = commit_message(spoke, &reason, previous, &recorded, &fresh.live);
    let content_sha256 = recorded.content_sha256;
    Reconciled {
        report,
        proposal: Some(Proposal {
            manifest,
            message,
            content_sha256,
            sealing_sha256: sealing.fingerprint(),
            revocation,
        }),
    }
}
