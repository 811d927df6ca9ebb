//! One spoke: observe -> decide -> (extract -> validate -> [mint] -> seal), ending in a
//! report and, when a credential is ready, a proposal to commit.

use time::OffsetDateTime;

use super::decide::{Decision, Reason};
use super::message::commit_message;
use super::progress::Step;
use super::refresh::Stage;
use super::report::{CredentialReport, Outcome, SpokeReport};
use super::state::{self, Recorded};
use super::{Context, Options, Proposal, decide, minted, refresh, review};
use crate::config::{CredentialMode, SpokeConfig};
use crate::seal::{SealedSecret, SealingKey};
use crate::spoke::{self};

/// observe -> decide -> (extract -> validate -> seal) for one spoke. With an untrusted
/// sealing key nothing is sealed: a rotation fails at `seal`.
pub(super) async fn reconcile(
    ctx: &Context,
    spoke: &SpokeConfig,
    opts: &Options,
    now: OffsetDateTime,
    (sealing, untrusted): (&SealingKey, Option<&crate::hub::cert::Untrusted>),
    review: Option<&review::Review>,
) -> (SpokeReport, Option<Proposal>) {
    let mut report = SpokeReport::new(&spoke.name, Outcome::Healthy);
    let stage = |stage| {
        opts.progress.emit(Step::Stage {
            spoke: &spoke.name,
            stage,
        })
    };
    // observe
    stage("probe");
    let committed = match ctx.repo.read(&spoke.output) {
        Ok(c) => c,
        Err(e) => {
            report.outcome = Outcome::Failed {
                stage: Stage::Observe,
                error: e.to_string(),
            };
            return (report, None);
        }
    };
    let parsed = committed.as_deref().map(|bytes| {
        let sealed = SealedSecret::parse(bytes).map_err(|e| e.to_string())?;
        let recorded =
            Recorded::from_annotations(&sealed.annotations).map_err(|e| e.to_string())?;
        Ok::<_, String>((sealed, recorded))
    });
    // Probed where the configuration says the spoke is now, not where it was recorded.
    report.probe = match &parsed {
        Some(Ok((_, recorded))) => match decide::expected_server(spoke, Some(recorded)) {
            Some(server) => Some(spoke::probe(&server, ctx.probe_timeout).await),
            None => None,
        },
        _ => None,
    };
    if let Some(Ok((_, r))) = &parsed {
        report.ca_sha256 = Some(r.ca_sha256.clone());
        report.ca_not_after = Some(r.ca_not_after);
        report.client_not_after = r.client_not_after;
        report.credential = Some(CredentialReport::of(r));
    }
    // decide
    let verify_due = {
        let last = ctx
            .verified
            .lock()
            .map(|m| m.get(&spoke.name).copied())
            .unwrap_or(None);
        let since = last.or(parsed
            .as_ref()
            .and_then(|p| p.as_ref().ok())
            .map(|(_, r)| r.rotated_at));
        since.is_none_or(|t| now - t >= ctx.config.verify_every)
    };
    let seen = decide::Observed {
        committed: parsed
            .as_ref()
            .map(|p| p.as_ref().map(|(s, r)| (s, r)).map_err(Clone::clone)),
        probe: report.probe.as_ref(),
    };
    // An untrusted key is no reason to rotate: against it, compare with what is recorded.
    let sealing_sha256 = match (untrusted, &parsed) {
        (Some(_), Some(Ok((_, r)))) => r.sealing_sha256.as_str(),
        _ => sealing.fingerprint(),
    };
    let policy = decide::Policy {
        now,
        renew_before: ctx.config.renew_before,
        sealing_sha256,
        force: opts.force || opts.revoke,
        verify_due,
    };
    let reason = match decide::decide(spoke, &seen, &policy) {
        Decision::Healthy => return (report, None),
        Decision::Unreachable(error) => {
            report.outcome = Outcome::Failed {
                stage: Stage::Probe,
                error,
            };
            return (report, None);
        }
        Decision::Rotate(reason) => reason,
    };
    report.reason = Some(reason.clone());
    if let Some(rv) = review
        && !(opts.force || opts.revoke)
        && rv.waiting(ctx, spoke, &mut report, &policy).await
    {
        return (report, None);
    }

    // extract -> validate
    stage("extract and validate");
    let fresh = match refresh::extract_and_validate(spoke, now, ctx.live_timeout).await {
        Ok(f) => f,
        Err(f) => {
            report.outcome = Outcome::Failed {
                stage: f.stage,
                error: f.error,
            };
            return (report, None);
        }
    };
    if let Ok(mut m) = ctx.verified.lock() {
        m.insert(spoke.name.clone(), now);
    }
    let previous = parsed
        .as_ref()
        .and_then(|p| p.as_ref().ok())
        .map(|(_, r)| r);
    let mut reason = reason;
    let mut revocation = None;
    let had = previous.map(|r| r.credential.clone()).unwrap_or_default();
    let extracted = spoke.credential.mode == CredentialMode::Extracted;
    let (fresh, credential) = if !extracted {
        stage("mint");
        let in_review = review.is_some();
        let run = minted::Run {
            revoke: opts.revoke,
            review: in_review,
            dry_run: opts.dry_run,
            call: ctx.live_timeout,
            sign: ctx.sign_timeout,
        };
        let step = minted::step(spoke, fresh, previous, &mut reason, &run).await;
        report.reason = Some(reason.clone());
        match step {
            Err(f) => {
                report.outcome = Outcome::Failed {
                    stage: f.stage,
                    error: f.error,
                };
                return (report, None);
            }
            Ok(minted::Step::Unchanged) => {
                report.outcome = Outcome::Unchanged;
                return (report, None);
            }
            Ok(minted::Step::WouldMint) => {
                report.outcome = Outcome::WouldRotate;
                return (report, None);
            }
            Ok(minted::Step::Minted {
                fresh,
                credential,
                admin,
                revoked,
            }) => {
                report.revoked = revoked;
                if !in_review {
                    let below = credential.generation;
                    revocation = Some(minted::Revocation { admin, below });
                }
                (*fresh, credential)
            }
        }
    } else {
        if opts.revoke {
            report.outcome = Outcome::Failed {
                stage: Stage::Mint,
                error: format!(
                    "{} is configured with credential.mode: extracted: there is no minted credential to revoke (set credential.mode: minted)",
                    spoke.name
                ),
            };
            return (report, None);
        }
        // Back from minted: every minted generation goes once the hub has this one.
        if had.mode == CredentialMode::Minted && review.is_none() && !opts.dry_run {
            revocation = Some(minted::Revocation {
                admin: fresh.yaml.clone(),
                below: had.next_generation(),
            });
        }
        let credential = state::RecordedCredential {
            mode: CredentialMode::Extracted,
            user: None,
            generation: had.generation,
        };
        (fresh, credential)
    };
    let mut recorded = refresh::record(
        spoke,
        &fresh.kubeconfig,
        &fresh.content_sha256,
        sealing,
        now,
    );
    recorded.credential = credential;
    report.user = Some(fresh.live.username.clone());
    let mut credential = CredentialReport::of(&recorded);
    if extracted {
        // Extracted: who it authenticated as.
        credential.user = Some(fresh.live.username.clone());
    }
    report.credential = Some(credential);
    match (&reason, previous.filter(|_| extracted)) {
        // On schedule, and the node serves what the hub already has.
        (Reason::Periodic, Some(prev)) if prev.content_sha256 == recorded.content_sha256 => {
            report.outcome = Outcome::Unchanged;
            return (report, None);
        }
        // Expiring, but the node still serves the same certificate: say so, keep it.
        (Reason::ClientExpiring { .. }, Some(prev))
            if prev.client_sha256 == recorded.client_sha256 =>
        {
            report.outcome = Outcome::NotRenewed;
            return (report, None);
        }
        _ => {}
    }
    let reason = match (&reason, previous) {
        (Reason::Periodic, Some(_)) => Reason::ContentChanged,
        _ => reason,
    };
    report.reason = Some(reason.clone());
    report.ca_sha256 = Some(recorded.ca_sha256.clone());
    report.ca_not_after = Some(recorded.ca_not_after);
    report.client_not_after = recorded.client_not_after;

    // seal
    stage("seal");
    if let Some(u) = untrusted {
        report.outcome = Outcome::Failed {
            stage: Stage::Seal,
            error: u.error.clone(),
        };
        return (report, None);
    }
    let manifest = match refresh::seal(spoke, &fresh.yaml, sealing, &recorded) {
        Ok(m) => m,
        Err(f) => {
            report.outcome = Outcome::Failed {
                stage: f.stage,
                error: f.error,
            };
            return (report, None);
        }
    };
    if opts.dry_run {
        report.outcome = Outcome::WouldRotate;
        return (report, None);
    }
    let message = commit_message(spoke, &reason, previous, &recorded, &fresh.live);
    let content_sha256 = recorded.content_sha256.clone();
    (
        report,
        Some(Proposal {
            manifest,
            message,
            content_sha256,
            sealing_sha256: sealing.fingerprint().to_string(),
            revocation,
        }),
    )
}
