//! One tick: the spokes run concurrently up to a bound, then commits one at a time in
//! configuration order under the repo lock, one push, and verification on the hub.

use std::time::Duration;

use futures::StreamExt;
use time::OffsetDateTime;

use super::Proposal;
use super::progress::Step;
use super::reconcile::reconcile;
use super::refresh::Stage;
use super::report::{Outcome, RepoFailure, RepoStage, SpokeReport, TickReport};
use super::{Context, Options, minted, review, sealing};
use crate::config::SpokeConfig;
use crate::repo::Pushed;

/// One tick over the selected spokes.
pub async fn tick(ctx: &Context, opts: &Options) -> Result<TickReport, crate::repo::RepoError> {
    let _lock = ctx.repo.lock()?;
    let mut repo_error = None;
    if !opts.dry_run
        && let Err(e) = ctx.repo.sync().await
    {
        tracing::warn!(error = %e, "cannot sync the fleet repo; working from the local clone");
        repo_error = Some(RepoFailure::new(RepoStage::Sync, e.to_string()));
    }
    // Review branches first: a renewed sealing certificate may be proposed on one.
    let review = review::Review::start(ctx).await;
    let review = review.as_ref();
    let (sealing, cert) = sealing::for_tick(ctx, opts.dry_run).await;
    let untrusted = cert.untrusted.as_ref();
    let spokes: Vec<&SpokeConfig> = ctx
        .config
        .spokes
        .iter()
        .filter(|s| opts.only.is_empty() || opts.only.contains(&s.name))
        .collect();
    let now = OffsetDateTime::now_utc();
    let sealing = &sealing;
    opts.progress.emit(Step::Start {
        total: spokes.len(),
    });
    let mut results: Vec<(usize, SpokeReport, Option<Proposal>)> =
        futures::stream::iter(spokes.iter().enumerate())
            .map(|(i, spoke)| async move {
                let (report, proposal) =
                    reconcile(ctx, spoke, opts, now, (sealing, untrusted), review).await;
                opts.progress.emit(Step::Done { spoke: &spoke.name });
                (i, report, proposal)
            })
            .buffer_unordered(opts.concurrency.max(1))
            .collect()
            .await;
    results.sort_by_key(|(i, _, _)| *i);

    opts.progress.emit(Step::Fleet { stage: "commit" });
    let mut committed = 0;
    let mut reports = Vec::with_capacity(results.len());
    let mut sealed_now = Vec::new();
    let mut revocations = Vec::new();
    let mut refused = None;
    for (i, mut report, proposal) in results {
        if let Some(rv) = review {
            let gate = &opts.gate;
            let spoke = spokes[i];
            if let Some(why) = rv
                .settle(
                    ctx,
                    spoke,
                    &mut report,
                    proposal.as_ref(),
                    opts.dry_run,
                    gate,
                )
                .await
            {
                refused = Some(why);
            }
        } else if let Some(p) = proposal {
            let spoke = spokes[i];
            match commit(ctx, spoke, &p).await {
                Ok(sha) => {
                    committed += 1;
                    sealed_now.push((reports.len(), p.manifest.clone()));
                    report.outcome = Outcome::Rotated { commit: sha };
                    if let Some(r) = p.revocation {
                        revocations.push((reports.len(), r));
                    }
                }
                Err(e) => {
                    report.outcome = Outcome::Failed {
                        stage: Stage::Commit,
                        error: e,
                    }
                }
            }
        }
        reports.push(report);
    }

    let mut pushed = false;
    if review.is_some() {
        // Review mode never pushes the target branch; say so if the clone holds commits
        // (left by an earlier direct-mode run) that only a push would publish.
        match ctx.repo.unpushed().await {
            Ok(0) | Err(_) => {}
            Ok(n) => {
                repo_error = Some(RepoFailure::new(
                    RepoStage::Unpushed,
                    format!(
                        "the clone has {n} commit(s) that {}/{} does not: review mode never pushes the target branch; push or drop them by hand (git -C {} log @{{u}}..)",
                        ctx.config.repo.remote,
                        ctx.config.repo.branch,
                        ctx.config.repo.path.display()
                    ),
                ))
            }
        }
        // Reported as in direct mode: the branches and pull requests wait for a tick
        // that may act.
        if let Some(why) = refused {
            repo_error = Some(RepoFailure::new(
                RepoStage::Push,
                format!("not pushed: {why}"),
            ));
        }
    } else if !opts.dry_run && ctx.config.repo.push {
        opts.progress.emit(Step::Fleet { stage: "push" });
        if let Err(why) = opts.gate.check() {
            // Left in the clone: the next tick here, or the new leader, pushes.
            if !matches!(ctx.repo.unpushed().await, Ok(0)) {
                repo_error = Some(RepoFailure::new(
                    RepoStage::Push,
                    format!("not pushed: {why}"),
                ));
            }
        } else {
            match ctx.repo.push().await {
                Ok(Pushed::Done { rebases }) => {
                    pushed = true;
                    tracing::info!(committed, rebases, "pushed");
                }
                Ok(Pushed::Nothing) => {}
                Err(e) => repo_error = Some(RepoFailure::new(RepoStage::Push, e.to_string())),
            }
        }
    }
    if let Some(hub) = &ctx.config.hub
        && !opts.dry_run
    {
        opts.progress.emit(Step::Fleet { stage: "hub" });
        let version = cert.controller_version.as_deref();
        verify_on_hub(ctx, hub, &spokes, &mut reports, pushed, sealed_now, version).await;
    }
    if pushed {
        revoke_superseded(ctx, &mut reports, revocations).await;
    }
    Ok(TickReport {
        spokes: reports,
        pushed,
        repo_error,
        sealing: Some(cert.clone()),
        sealing_key: Some(sealing.clone()),
    })
}

/// After a push, the credentials it carried; and, every tick, those the hub had not taken
/// at the last look (briefly: they were already waited for once).
async fn verify_on_hub(
    ctx: &Context,
    hub: &crate::config::HubConfig,
    spokes: &[&SpokeConfig],
    reports: &mut [SpokeReport],
    pushed: bool,
    sealed_now: Vec<(usize, String)>,
    controller_version: Option<&str>,
) {
    const RECHECK: Duration = Duration::from_secs(15);
    let fresh = if pushed { sealed_now } else { Vec::new() };
    let waiting = ctx
        .hub_unverified
        .lock()
        .map(|s| s.clone())
        .unwrap_or_default();
    let again: Vec<(usize, String)> = spokes
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            waiting.contains(&s.name) && !fresh.iter().any(|(j, _)| j == i) && !reports[*i].failed()
        })
        .filter_map(|(i, s)| {
            let bytes = ctx.repo.read(&s.output).ok()??;
            Some((i, String::from_utf8(bytes).ok()?))
        })
        .collect();
    let version = controller_version;
    let checks = crate::hub::verify::after_push(hub, spokes, &fresh, false, version).await;
    for ((i, _), check) in fresh.iter().zip(checks) {
        reports[*i].hub = Some(check);
    }
    let brief = crate::config::HubConfig {
        verify_timeout: hub.verify_timeout.min(RECHECK),
        ..hub.clone()
    };
    // The request made when they were pushed is waited for again, not replaced.
    let checks = crate::hub::verify::after_push(&brief, spokes, &again, true, version).await;
    for ((i, _), check) in again.iter().zip(checks) {
        reports[*i].hub = Some(check);
    }
    if let Ok(mut set) = ctx.hub_unverified.lock() {
        for (i, _) in fresh.iter().chain(&again) {
            match &reports[*i].hub {
                Some(h) if h.ok() => set.remove(&reports[*i].spoke),
                _ => set.insert(reports[*i].spoke.clone()),
            };
        }
    }
}

/// Minted, direct mode: once the push carried the new credential and, with `hub:`, the
/// hub unsealed it and its consumers are Ready, the older generations' bindings are
/// deleted, so a leaked older credential stops working. Not verified: left to the next
/// minted rotation, which deletes them the same way.
async fn revoke_superseded(
    ctx: &Context,
    reports: &mut [SpokeReport],
    revocations: Vec<(usize, minted::Revocation)>,
) {
    for (i, r) in revocations {
        let report = &mut reports[i];
        let verified = report.hub.as_ref().is_some_and(|h| h.ok());
        if ctx.config.hub.is_some() && !verified {
            continue;
        }
        match crate::mint::revoke_older(&r.admin, r.below, ctx.live_timeout).await {
            Ok(names) => report.revoked.extend(names),
            Err(e) => {
                tracing::warn!(spoke = %report.spoke, error = %e, "cannot revoke superseded generations");
                report.revoke_error = Some(e.to_string());
            }
        }
        // r.admin (the admin kubeconfig) is zeroized as it drops here.
    }
}

async fn commit(ctx: &Context, spoke: &SpokeConfig, p: &Proposal) -> Result<String, String> {
    ctx.repo
        .write_atomic(&spoke.output, p.manifest.as_bytes())
        .map_err(|e| e.to_string())?;
    match ctx.repo.commit(&spoke.output, &p.message).await {
        Ok(Some(sha)) => Ok(sha),
        Ok(None) => Err("nothing changed in the file (unexpected: sealing is randomized)".into()),
        Err(e) => Err(e.to_string()),
    }
}
