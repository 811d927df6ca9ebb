//! One tick: each spoke observed and reconciled, concurrently up to a bound; then what
//! is ready is published one at a time in configuration order under the repo lock
//! (publish.rs: direct commits and one push, or review branches), and verified on the hub.

use std::time::Duration;

use futures::StreamExt;
use time::OffsetDateTime;

use super::observe::{self, Probed};
use super::progress::Step;
use super::publish::{Direct, Publish};
use super::reconcile::{Reconciled, Run, policy, reconcile};
use super::report::{Outcome, RepoFailure, SpokeReport, TickReport};
use super::{Context, Options, minted, review, sealing};
use crate::config::SpokeConfig;
use crate::hub::consumers::{self, Listed};
use crate::hub::{Hub, HubError};

/// One tick over the selected spokes.
pub async fn tick(ctx: &Context, opts: &Options) -> Result<TickReport, crate::repo::RepoError> {
    let _lock = ctx.repo.lock()?;
    let mut sync_error = None;
    if !opts.dry_run
        && let Err(e) = ctx.repo.sync().await
    {
        tracing::warn!(error = %e, "cannot sync the fleet repo; working from the local clone");
        sync_error = Some(RepoFailure::Sync(std::sync::Arc::new(e)));
    }
    // Review branches first: a renewed sealing certificate may be proposed on one.
    Ok(match review::Review::start(ctx).await {
        Some(review) => run(ctx, opts, review, sync_error).await,
        None => run(ctx, opts, Direct::default(), sync_error).await,
    })
}

async fn run<P: Publish>(
    ctx: &Context,
    opts: &Options,
    mut publish: P,
    sync_error: Option<RepoFailure>,
) -> TickReport {
    // One hub client for the tick: the certificate's fetch and the verification share it.
    let hub = match &ctx.config.hub {
        Some(cfg) => Some(Hub::connect_bounded(cfg).await),
        None => None,
    };
    let (sealing, cert) = sealing::for_tick(ctx, hub.as_ref(), opts.dry_run, &publish).await;
    let spokes: Vec<&SpokeConfig> = ctx
        .config
        .spokes
        .iter()
        .filter(|s| opts.only.is_empty() || opts.only.contains(&s.name))
        .collect();
    opts.progress.emit(Step::Start {
        total: spokes.len(),
    });
    // Once per tick: what is about to be pushed is checked against it, and it is verified.
    let listed = match (&ctx.config.hub, &hub) {
        (Some(cfg), Some(Ok(h))) => {
            h.list_consumers(spokes.iter().copied(), cfg.verify_timeout)
                .await
        }
        _ => Listed::new(),
    };
    // HEAD listed once: each spoke's committed file is read without a git process of its
    // own (file by file, as before, should the listing fail).
    let files = ctx.repo.snapshot().await.ok();
    let files = files.as_ref();
    let mut results: Vec<(usize, Probed, Reconciled)> = {
        let run = Run {
            ctx,
            opts,
            now: OffsetDateTime::now_utc(),
            sealing: &sealing,
            untrusted: cert.untrusted.as_ref(),
            publish: &publish,
            listed: &listed,
        };
        let run = &run;
        futures::stream::iter(spokes.iter().enumerate())
            .map(|(i, spoke)| async move {
                opts.progress.emit(Step::Stage {
                    spoke: &spoke.name,
                    stage: "probe",
                });
                let seen = match files {
                    Some(f) => observe::spoke_in(spoke, f, ctx.probe_timeout, None).await,
                    None => observe::spoke(spoke, &ctx.repo, ctx.probe_timeout, None).await,
                };
                let done = reconcile(run, spoke, &seen, &policy(run, spoke, &seen)).await;
                opts.progress.emit(Step::Done { spoke: &spoke.name });
                // Kept until the tick ends for every spoke: only what is read later.
                (i, seen.into_probed(), done)
            })
            .buffer_unordered(opts.concurrency.max(1))
            .collect()
            .await
    };
    results.sort_by_key(|(i, _, _)| *i);

    opts.progress.emit(Step::Fleet { stage: "commit" });
    let mut reports = Vec::with_capacity(results.len());
    let mut seen = Vec::with_capacity(results.len());
    let mut sealed_now = Vec::new();
    let mut revocations = Vec::new();
    for (i, observed, done) in results {
        let Reconciled {
            mut report,
            proposal,
        } = done;
        if proposal.is_some() {
            warn_wrong_keys(spokes[i], &listed);
        }
        publish
            .spoke(ctx, spokes[i], &mut report, proposal.as_ref(), opts)
            .await;
        if let (Outcome::Rotated { .. }, Some(p)) = (&report.outcome, proposal) {
            sealed_now.push((reports.len(), p.manifest));
            if let Some(r) = p.revocation {
                revocations.push((reports.len(), r));
            }
        }
        reports.push(report);
        seen.push(observed);
    }
    let published = publish.finish(ctx, opts).await;
    let pushed = published.pushed;
    let repo_error = published.repo_error.or(sync_error);
    if let (Some(cfg), Some(hub)) = (&ctx.config.hub, &hub)
        && !opts.dry_run
    {
        opts.progress.emit(Step::Fleet { stage: "hub" });
        let tick = Pushed {
            pushed,
            sealed_now,
            listed: &listed,
        };
        verify_on_hub(ctx, cfg, hub, &spokes, &mut reports, tick).await;
    }
    if pushed {
        revoke_superseded(ctx, &mut reports, revocations).await;
    }
    TickReport {
        spokes: reports,
        pushed,
        repo_error,
        sealing: Some(cert.clone()),
        sealing_key: Some(sealing.clone()),
        seen,
    }
}

/// A consumer that reads another key of the Secret than the one written fails inside
/// Flux once the push lands: said before it.
fn warn_wrong_keys(spoke: &SpokeConfig, listed: &Listed) {
    for (consumer, why) in consumers::wrong_keys(spoke, listed) {
        tracing::warn!(spoke = %spoke.name, %consumer, "{why}");
    }
}

/// What the tick published, for the hub's verification.
struct Pushed<'a> {
    pushed: bool,
    /// Index into the spokes, and the manifest committed.
    sealed_now: Vec<(usize, String)>,
    listed: &'a Listed,
}

/// After a push, the credentials it carried; and, every tick, those the hub had not taken
/// at the last look (briefly: they were already waited for once).
async fn verify_on_hub(
    ctx: &Context,
    cfg: &crate::config::HubConfig,
    hub: &Result<Hub, HubError>,
    spokes: &[&SpokeConfig],
    reports: &mut [SpokeReport],
    tick: Pushed<'_>,
) {
    const RECHECK: Duration = Duration::from_secs(15);
    let Pushed {
        pushed,
        sealed_now,
        listed,
    } = tick;
    let fresh = if pushed { sealed_now } else { Vec::new() };
    let waiting = ctx
        .hub_unverified
        .lock()
        .map(|s| s.clone())
        .unwrap_or_default();
    let mut again: Vec<(usize, String)> = Vec::new();
    for (i, s) in spokes.iter().enumerate() {
        if !waiting.contains(&s.name) || fresh.iter().any(|(j, _)| *j == i) || reports[i].failed() {
            continue;
        }
        if let Ok(Some(bytes)) = ctx.repo.read(&s.output).await
            && let Ok(text) = String::from_utf8(bytes)
        {
            again.push((i, text));
        }
    }
    let checks = crate::hub::verify::after_push(cfg, hub, spokes, &fresh, listed, false).await;
    for ((i, _), check) in fresh.iter().zip(checks) {
        reports[*i].hub = Some(check);
    }
    let brief = crate::config::HubConfig {
        verify_timeout: cfg.verify_timeout.min(RECHECK),
        ..cfg.clone()
    };
    // The request made when they were pushed is waited for again, not replaced.
    let checks = crate::hub::verify::after_push(&brief, hub, spokes, &again, listed, true).await;
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
        let scope = crate::mint::Scope {
            hub: &r.hub,
            spoke: &r.spoke,
        };
        let legacy = r.legacy_user.as_deref();
        match crate::mint::revoke_older(&r.admin, &scope, r.below, legacy, ctx.live_timeout).await {
            Ok(names) => report.revoked.extend(names),
            Err(e) => {
                tracing::warn!(spoke = %report.spoke, error = %e, "cannot revoke superseded generations");
                report.revoke_error = Some(e.to_string());
            }
        }
        // r.admin (the admin kubeconfig) is zeroized as it drops here.
    }
}
