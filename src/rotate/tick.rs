//! One tick: each spoke observed and reconciled, concurrently up to a bound; what is
//! ready published one at a time in configuration order under the repo lock, while later
//! spokes are still worked on (direct.rs: direct commits and one push, or review
//! branches); then the push, and the hub's verification.

use std::ops::ControlFlow;
use std::time::Duration;

use futures::StreamExt;
use time::OffsetDateTime;

use super::context::Tick;
use super::direct::{Direct, Publish};
use super::observe::{self, Observation};
use super::progress::Step;
use super::reconcile::{self, Reconciled};
use super::tick_report::{Outcome, RepoFailure, SpokeReport, TickReport};
use super::{Context, Options, Proposal, review, sealing_key};
use crate::config::SpokeConfig;
use crate::hub::consumers::{self, Listed};
use crate::hub::verify::{self, Ask, Committed, HubReport, Output};
use crate::hub::{Hub, HubError};
use crate::repo::{RepoError, Snapshot};

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
    match review::Review::start(ctx).await {
        Some(review) => run(ctx, opts, review, sync_error).await,
        None => run(ctx, opts, Direct::default(), sync_error).await,
    }
}

/// The spokes a tick is for: every one, or those named.
fn chosen<'a>(ctx: &'a Context, opts: &Options) -> Vec<&'a SpokeConfig> {
    ctx.config
        .spokes
        .iter()
        .filter(|s| opts.only.is_empty() || opts.only.contains(&s.name))
        .collect()
}

async fn run<P: Publish>(
    ctx: &Context,
    opts: &Options,
    mut publish: P,
    sync_error: Option<RepoFailure>,
) -> Result<TickReport, RepoError> {
    // HEAD listed once: each spoke's committed file is read without a git process of its
    // own. It names blobs by id, so this tick's own commits do not change what a later
    // spoke reads.
    let files = ctx.repo.snapshot().await?;
    // One hub client for the tick: the certificate's fetch and the verification share it.
    let hub = match &ctx.config.hub {
        Some(cfg) => Some(Hub::connect_bounded(cfg).await),
        None => None,
    };
    // None: no sealing.cert (every spoke is sops), so no certificate to fetch or trust.
    let sealed = sealing_key::for_tick(ctx, hub.as_ref(), opts.dry_run, &publish).await;
    let (sealing, cert) = match &sealed {
        Some((key, cert)) => (Some(key), Some(cert)),
        None => (None, None),
    };
    let spokes = chosen(ctx, opts);
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
    // Each issuer CA file read once, each issuer looked at once, whatever the spokes.
    let federated = || {
        spokes
            .iter()
            .filter_map(|s| s.credential.federated.as_ref())
    };
    let issuer_cas = crate::federate::IssuerCas::read(federated());
    let now = OffsetDateTime::now_utc();
    let tick = Tick {
        context: ctx,
        options: opts,
        now,
        sealing,
        untrusted: cert.and_then(|c| c.untrusted.as_ref()),
        landing: publish.landing(),
        listed: &listed,
        hub: hub.as_ref().and_then(|h| h.as_ref().ok()),
        issuer_cas: &issuer_cas,
    };
    let looked = crate::federate::issuer::look_all(federated(), &issuer_cas, ctx.live_timeout);
    let (mut worked, issuers) = futures::join!(work(&tick, &publish, &spokes, files), looked);
    migrate(&tick, &publish, &mut worked).await;
    let published = publish.finish(ctx, opts).await;
    if let Some((spokes, why)) = &published.lost {
        for w in worked.iter_mut().filter(|w| spokes.contains(&w.spoke.name)) {
            w.report.outcome = Outcome::Failed(super::error::SpokeError::Commit(why.clone()));
        }
    }
    // What the alerts grade: what each spoke's commit left, not a second look at the clone.
    for w in &mut worked {
        if let Some(manifest) = committed(&w.report, &w.proposal) {
            w.seen.committed_now(w.spoke, manifest).await;
        }
    }
    let pushed = published.pushed;
    let repo_error = published.repo_error.or(sync_error);
    if let (Some(cfg), Some(hub)) = (&ctx.config.hub, &hub)
        && !opts.dry_run
    {
        opts.progress.emit(Step::Fleet { stage: "hub" });
        verify_on_hub(ctx, cfg, hub, &mut worked, pushed, &listed).await;
    }
    if pushed {
        revoke_superseded(ctx, &mut worked).await;
    }
    for w in &mut worked {
        if let Some(Ok(old)) = w.old.as_deref() {
            super::migrate::after_push(&tick, &publish, w.spoke, old, pushed, &mut w.report).await;
        }
    }
    // The reports in place, the observations beside: unzip would copy every report
    // into a second buffer while the first is still held.
    let mut observed = Vec::with_capacity(worked.len());
    let spokes = worked
        .into_iter()
        .map(|w| {
            observed.push(*w.seen);
            w.report
        })
        .collect();
    Ok(TickReport {
        spokes,
        pushed,
        repo_error,
        sealing: cert.cloned(),
        sealing_key: sealing.cloned(),
        observed,
        issuers: crate::federate::issuer::Looked {
            cas: issuer_cas,
            seen: issuers,
        },
    })
}

/// Each spoke observed and reconciled, concurrently up to the bound, and published in
/// configuration order as soon as it and every spoke before it are done: the commits run
/// while later spokes are still being extracted, not after the last one.
async fn work<'a>(
    tick: &Tick<'_>,
    publish: &impl Publish,
    spokes: &[&'a SpokeConfig],
    files: Snapshot<'_>,
) -> Vec<Worked<'a>> {
    let (ctx, opts) = (tick.context, tick.options);
    let snapshot = &files;
    let (done, mut arrived) = futures::channel::mpsc::unbounded();
    let reconciled = futures::stream::iter(spokes.iter().copied().enumerate())
        .map(|(order, spoke)| async move {
            opts.progress.emit(Step::Stage {
                spoke: &spoke.name,
                stage: "probe",
            });
            let seen = observe::spoke(spoke, snapshot, ctx.probe_timeout).await;
            let result = reconciled(tick, publish, spoke, &seen).await;
            let all = &ctx.config.spokes;
            let old = match super::migrate::old(spoke, all, snapshot).await {
                None => super::migrate::landed(ctx, publish, spoke, all).await,
                old => old,
            };
            opts.progress.emit(Step::Done { spoke: &spoke.name });
            // Kept until the tick ends for every spoke: only what the alerts read.
            let committing = result.proposal.is_some();
            let mut w = Worked::new(spoke, seen.without_ciphertext(committing), result);
            w.old = old.map(Box::new);
            (order, w)
        })
        .buffer_unordered(opts.concurrency.max(1))
        // The sender is the closure's: it drops with this future once the last spoke is
        // in, which ends the publishing loop. The receiver lives until both are done.
        .for_each(move |arrival| {
            let _ = done.unbounded_send(arrival);
            std::future::ready(())
        });
    // Each spoke's result lands in its slot: a vector sized once, not grown by doubling
    // (at 10 000 spokes the old and new buffers together were the tick's peak).
    let mut slots: Vec<Option<Worked>> =
        std::iter::repeat_with(|| None).take(spokes.len()).collect();
    let published = async {
        let mut next = 0;
        while let Some((order, w)) = arrived.next().await {
            if let Some(slot) = slots.get_mut(order) {
                *slot = Some(w);
            }
            while let Some(Some(w)) = slots.get_mut(next) {
                publish_one(tick, publish, w).await;
                next += 1;
            }
        }
    };
    futures::join!(reconciled, published);
    // The listing and the cat-file process are not needed past the probes.
    drop(files);
    // filter_map collects in place (Option<Worked> is no larger than Worked); flatten
    // would allocate a second buffer.
    #[expect(clippy::filter_map_identity, reason = "in-place collection")]
    slots.into_iter().filter_map(|w| w).collect()
}

/// decide, then extract -> validate -> [mint] -> seal, unless the spoke's fix already
/// waits for review (--force and --revoke extract all the same).
async fn reconciled(
    tick: &Tick<'_>,
    publish: &impl Publish,
    spoke: &SpokeConfig,
    seen: &Observation,
) -> Reconciled {
    let mut decided = reconcile::decide(tick, spoke, seen, None);
    // A healthy federated spoke must still take the hub's token: its certificate says
    // nothing of its trust.
    if let ControlFlow::Break(done) = &decided
        && matches!(done.report.outcome, Outcome::Healthy)
        && matches!(seen.probe, Some(Ok(_)))
        && let Some(recorded) = seen.committed.recorded()
        && let Some(why) = super::federated::refused(tick, spoke, recorded).await
    {
        decided = reconcile::decide(tick, spoke, seen, Some(why));
    }
    let (s, reason) = match decided {
        ControlFlow::Break(done) => return done,
        ControlFlow::Continue(decided) => decided,
    };
    let asked = tick.options;
    if !(asked.force || asked.revoke)
        && let Some(pending) = publish.waiting(tick.context, &s).await
    {
        return reconcile::waits(&s, reason, pending);
    }
    reconcile::rotate(tick, &s, reason).await
}

/// One spoke's proposal (or, in review mode, its waiting fix) published: the outcome
/// publishing gave replaces the one reconcile gave.
async fn publish_one(tick: &Tick<'_>, publish: &impl Publish, w: &mut Worked<'_>) {
    if w.proposal.is_some() {
        tick.options.progress.emit(Step::Stage {
            spoke: &w.spoke.name,
            stage: "commit",
        });
        warn_wrong_keys(w.spoke, tick.listed);
    }
    let proposal = w.proposal.as_deref();
    match publish.spoke(tick, w.spoke, &w.report, proposal).await {
        Ok(Some(outcome)) => w.report.outcome = outcome,
        Ok(None) => {}
        Err(e) => w.report.outcome = Outcome::Failed(e),
    }
}

/// One spoke through the tick: what was observed, its report, and what it proposed.
struct Worked<'a> {
    spoke: &'a SpokeConfig,
    /// What the alerts grade (boxed, so that a slot holds a pointer).
    seen: Box<Observation>,
    report: SpokeReport,
    /// Boxed: most spokes propose nothing, and every slot is as large as the largest.
    proposal: Option<Box<Proposal>>,
    /// Federated: its old Secret, still committed (or why that file is left alone).
    /// Boxed, as the proposal.
    old: Option<Box<Result<super::migrate::Old, super::migrate::Migration>>>,
}

impl<'a> Worked<'a> {
    fn new(spoke: &'a SpokeConfig, seen: Observation, done: Reconciled) -> Worked<'a> {
        Worked {
            spoke,
            seen: Box::new(seen),
            report: done.report,
            proposal: done.proposal.map(Box::new),
            old: None,
        }
    }

    /// The manifest this tick committed, once published.
    fn committed(&self) -> Option<&str> {
        committed(&self.report, &self.proposal)
    }
}

fn committed<'p>(report: &SpokeReport, proposal: &'p Option<Box<Proposal>>) -> Option<&'p str> {
    match (&report.outcome, proposal) {
        (Outcome::Rotated { .. }, Some(p)) => Some(&p.manifest),
        _ => None,
    }
}

/// Each federated spoke's old Secret judged, and removed where the rule allows, in
/// configuration order after every spoke's own commit and before the push.
async fn migrate(tick: &Tick<'_>, publish: &impl Publish, worked: &mut [Worked<'_>]) {
    let mut tree = None;
    for w in worked.iter_mut() {
        let migration = match w.old.as_deref() {
            None => continue,
            Some(Err(left)) => left.clone(),
            Some(Ok(old)) => {
                super::migrate::step(tick, publish, w.spoke, &w.report, old, &mut tree).await
            }
        };
        w.report.migration = Some(Box::new(migration));
    }
}

/// A consumer that reads another key of the Secret than the one written fails inside
/// Flux once the push lands: said before it.
fn warn_wrong_keys(spoke: &SpokeConfig, listed: &Listed) {
    for (consumer, why) in consumers::wrong_keys(spoke, listed) {
        tracing::warn!(spoke = %spoke.name, %consumer, "{why}");
    }
}

/// After a push, the credentials it carried; and, every tick, those the hub had not taken
/// at the last look (briefly: they were already waited for once).
async fn verify_on_hub(
    ctx: &Context,
    cfg: &crate::config::HubConfig,
    hub: &Result<Hub, HubError>,
    worked: &mut [Worked<'_>],
    pushed: bool,
    listed: &Listed,
) {
    const RECHECK: Duration = Duration::from_secs(15);
    let waiting = ctx
        .hub_unverified
        .lock()
        .map(|s| s.clone())
        .unwrap_or_default();
    // Read again from the clone: what the hub should hold for a spoke it had not taken.
    let mut again_manifests = Vec::with_capacity(worked.len());
    for w in worked.iter() {
        let fresh = pushed && w.committed().is_some();
        if waiting.contains(&w.spoke.name) && !fresh && !w.report.failed() {
            let read = ctx.repo.read(&w.spoke.output).await.ok().flatten();
            let text = read.and_then(|bytes| String::from_utf8(bytes).ok());
            again_manifests.extend(text.map(|text| (w.spoke, text)));
        }
    }
    let fresh: Vec<Committed> = worked
        .iter()
        .filter(|_| pushed)
        .filter_map(|w| Some(to_verify(w.spoke, w.committed()?)))
        .collect();
    let again: Vec<Committed> = again_manifests
        .iter()
        .map(|(spoke, text)| to_verify(spoke, text))
        .collect();
    let checks = verify::after_push(cfg, hub, &fresh, listed, Ask::Now).await;
    let brief = crate::config::HubConfig {
        verify_timeout: cfg.verify_timeout.min(RECHECK),
        ..cfg.clone()
    };
    // The request made when they were pushed is waited for again, not replaced.
    let rechecks = verify::after_push(&brief, hub, &again, listed, Ask::Again).await;
    let looked: Vec<(String, HubReport)> = fresh
        .iter()
        .chain(&again)
        .map(|c| c.spoke.name.clone())
        .zip(checks.into_iter().chain(rechecks))
        .collect();
    for (name, check) in looked {
        if let Ok(mut set) = ctx.hub_unverified.lock() {
            match check.ok() {
                true => set.remove(&name),
                false => set.insert(name.clone()),
            };
        }
        if let Some(w) = worked.iter_mut().find(|w| w.spoke.name == name) {
            w.report.hub = Some(Box::new(check));
        }
    }
}

/// Minted, direct mode: once the push carried the new credential and, with `hub:`, the
/// hub unsealed it and its consumers are Ready, the older generations' bindings are
/// deleted, so a leaked older credential stops working. Not verified: left to the next
/// minted rotation, which deletes them the same way.
async fn revoke_superseded(ctx: &Context, worked: &mut [Worked<'_>]) {
    for w in worked {
        let Some(r) = w.proposal.take().and_then(|p| p.revocation) else {
            continue;
        };
        let report = &mut w.report;
        if !matches!(report.outcome, Outcome::Rotated { .. }) {
            continue;
        }
        let verified = report.hub.as_ref().is_some_and(|h| h.ok());
        if ctx.config.hub.is_some() && !verified {
            continue;
        }
        match r.revoke(ctx.live_timeout).await {
            Ok(names) => report.revoked.extend(names),
            Err(e) => {
                tracing::warn!(spoke = %report.spoke, error = %e, "cannot revoke superseded generations");
                report.revoke_error = Some(e.to_string());
            }
        }
    }
}

/// What the hub is given to take for a spoke: its mode and sealing format decide the output.
fn to_verify<'a>(spoke: &'a SpokeConfig, manifest: &'a str) -> Committed<'a> {
    let output = match (spoke.credential.mode, spoke.format) {
        (crate::config::CredentialMode::Federated, _) => Output::ConfigMap,
        (_, crate::config::SealingFormat::SealedSecrets) => Output::SealedSecret,
        (_, crate::config::SealingFormat::Sops) => Output::Sops,
    };
    Committed {
        spoke,
        manifest,
        output,
    }
}
