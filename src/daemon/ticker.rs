//! The tick loop of `spokekeeper run`.
//!
//! A tick runs in its own task, so an error or a panic in it is logged and counted and
//! never ends the daemon. Cancelling a tick drops it: the repo writes files atomically
//! and kills the git it started; the next tick's sync discards what was not committed.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use super::http::Health;
use super::signals::{Sig, Signals};
use super::{DaemonError, Loaded, MAX_NAP, Options, SHUTDOWN_GRACE, load, schedule};
use crate::alerts::{self, Notifier, NotifyOptions};
use crate::metrics::{Metrics, OtherStage};
use crate::rotate::{self, Outcome, TickReport};

/// How a tick ended, for the loop.
enum Ended {
    /// Finished, failed or cancelled by a lost lease: carry on.
    Continue,
    /// A stop signal came during the tick.
    Stop,
}

/// The tick loop: one tick at a time, while leading.
pub(super) struct Ticker {
    pub opts: Options,
    pub loaded: Loaded,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    /// Whether this process may tick (always true without leader election).
    pub leader: watch::Receiver<bool>,
    pub(crate) leader_alive: bool,
    /// Asked before the push and before telling the alert sinks.
    pub gate: rotate::Gate,
    pub signals: Signals,
    /// The alert sinks and what each was last told; kept across ticks and reloads that
    /// leave `alerts:` as it was.
    pub notifier: Notifier,
    /// The hub's Events and alerts.flux, with their open series; kept like `notifier`.
    pub events: alerts::Events,
}

/// The schedule's period now (15 minutes when it names none).
fn period(loaded: &Loaded) -> Duration {
    let period = loaded.schedule.period_at(SystemTime::now());
    period.unwrap_or(Duration::from_secs(15 * 60))
}

/// The sinks for a configuration: active alerts stay valid for a few schedule periods.
pub(super) fn notifier(loaded: &Loaded) -> Result<Notifier, DaemonError> {
    let opts = NotifyOptions {
        evaluation_period: period(loaded),
        ..NotifyOptions::default()
    };
    Notifier::new(&loaded.config().alerts, opts).map_err(|e| DaemonError::Alerts(Box::new(e)))
}

/// The Event sinks: a series stays open for two schedule periods and the jitter, so a
/// finding repeated every tick aggregates into one Event.
pub(super) fn events(loaded: &Loaded, jitter: Duration) -> Result<alerts::Events, DaemonError> {
    let instance = super::lease::default_identity().unwrap_or_else(|_| "spokekeeper".into());
    alerts::Events::new(
        loaded.config(),
        &instance,
        period(loaded).saturating_mul(2) + jitter,
        NotifyOptions::default(),
    )
    .map_err(|e| DaemonError::Alerts(Box::new(e)))
}

impl Ticker {
    /// Returns on SIGTERM or SIGINT, after the running tick finished or was cancelled.
    pub(super) async fn run(&mut self) {
        let mut leading = *self.leader.borrow_and_update();
        // The slot the next tick belongs to, and when it starts (slot + jitter).
        let mut due = leading.then(|| self.first_slot());
        let mut wake = due.map(|s| s + schedule::jitter(self.opts.jitter));
        loop {
            let nap = wake.map_or(MAX_NAP, |w| {
                w.duration_since(SystemTime::now())
                    .unwrap_or_default()
                    .min(MAX_NAP)
            });
            tokio::select! {
                sig = self.signals.recv() => match sig {
                    Sig::Stop(name) => {
                        tracing::info!("{name}: stopping (no tick was running)");
                        return;
                    }
                    Sig::Reload => {
                        if self.reload().await && leading {
                            due = self.loaded.schedule.next_after(SystemTime::now());
                            wake = due.map(|s| s + schedule::jitter(self.opts.jitter));
                        }
                    }
                },
                changed = self.leader.changed(), if self.leader_alive => {
                    if changed.is_err() {
                        self.leader_alive = false;
                        tracing::error!("leader election stopped: not ticking");
                    }
                    let now_leading = self.leader_alive && *self.leader.borrow_and_update();
                    if now_leading != leading {
                        leading = now_leading;
                        self.health.leading(leading);
                        due = leading.then(|| self.first_slot());
                        wake = due.map(|s| s + schedule::jitter(self.opts.jitter));
                        if let Some(w) = wake {
                            tracing::info!(next = %rfc3339(w), "leading: ticking on the schedule");
                        }
                    }
                }
                _ = tokio::time::sleep(nap), if wake.is_some() => {
                    let (Some(slot), Some(w)) = (due, wake) else { continue };
                    if SystemTime::now() < w {
                        continue;
                    }
                    let ended = self.tick().await;
                    let end = SystemTime::now();
                    if matches!(ended, Ended::Stop) {
                        return;
                    }
                    leading = self.leader_alive && *self.leader.borrow_and_update();
                    if !leading {
                        self.health.leading(false);
                    }
                    due = leading.then(|| self.next_slot(slot, end));
                    wake = due.map(|s| s.max(end) + schedule::jitter(self.opts.jitter));
                }
            }
        }
    }

    fn first_slot(&self) -> SystemTime {
        let now = SystemTime::now();
        if self.opts.tick_now {
            return now;
        }
        self.loaded.schedule.next_after(now).unwrap_or(now)
    }

    /// The slot after `slot`; when the tick ran past it, now (late, never overlapping).
    fn next_slot(&self, slot: SystemTime, end: SystemTime) -> SystemTime {
        let schedule = &self.loaded.schedule;
        match schedule.next_after(slot) {
            Some(next) if next > end => next,
            Some(next) => {
                let took = end.duration_since(slot).unwrap_or_default();
                tracing::warn!(
                    took_s = took.as_secs(),
                    missed = %rfc3339(next),
                    schedule = %schedule,
                    "the tick ran past the next scheduled time: the next tick starts now instead (ticks never overlap)"
                );
                end
            }
            None => {
                tracing::error!(schedule = %schedule, "the schedule has no further time: no more ticks");
                end + Duration::from_secs(86_400 * 365)
            }
        }
    }

    /// Runs one tick to its end, unless a stop signal's grace runs out or the lease is
    /// lost, which cancel it.
    async fn tick(&mut self) -> Ended {
        let ctx = self.loaded.context.clone();
        let opts = rotate::Options {
            concurrency: self.opts.concurrency,
            gate: self.gate.clone(),
            ..rotate::Options::default()
        };
        let started = Instant::now();
        tracing::info!(spokes = ctx.config.spokes.len(), "tick started");
        let mut task = {
            let ctx = ctx.clone();
            tokio::task::spawn_local(async move { rotate::tick(&ctx, &opts).await })
        };
        let mut stop_by: Option<Instant> = None;
        let joined = loop {
            let grace = stop_by.unwrap_or_else(|| Instant::now() + MAX_NAP);
            tokio::select! {
                joined = &mut task => break Some(joined),
                sig = self.signals.recv() => match sig {
                    Sig::Reload => {
                        self.reload().await;
                    }
                    Sig::Stop(name) if stop_by.is_none() => {
                        tracing::info!(grace_s = SHUTDOWN_GRACE.as_secs(), "{name}: letting the running tick finish, then stopping");
                        stop_by = Some(Instant::now() + SHUTDOWN_GRACE);
                    }
                    Sig::Stop(name) => {
                        tracing::warn!("{name} while stopping: cancelling the running tick now");
                        break None;
                    }
                },
                _ = tokio::time::sleep_until(grace), if stop_by.is_some() => {
                    tracing::warn!(grace_s = SHUTDOWN_GRACE.as_secs(), "the tick did not finish in time after the stop signal: cancelling it");
                    break None;
                }
                changed = self.leader.changed(), if self.leader_alive => {
                    if changed.is_err() || !*self.leader.borrow() {
                        tracing::warn!("lost the lease: cancelling the running tick");
                        break None;
                    }
                }
            }
        };
        let took = started.elapsed();
        match joined {
            None => {
                task.abort();
                let _ = task.await;
                discard_uncommitted(&ctx).await;
                tracing::warn!(
                    took_ms = took.as_millis() as u64,
                    "tick cancelled: nothing it had not committed was kept"
                );
                self.report_unpushed(&ctx).await;
            }
            Some(Ok(Ok(report))) => {
                let findings = self.alert(&ctx, &report).await;
                let now = SystemTime::now();
                // Together, with no await between: a scrape sees one tick's series.
                self.metrics.observe_tick(&report, took, now);
                self.issuers(&ctx, &report);
                if let Some(key) = &report.sealing_key {
                    self.metrics.set_sealing_not_after(key.not_after());
                }
                for f in &findings {
                    if let (Some(t), alerts::Subject::Serving | alerts::Subject::Sealing) =
                        (f.not_after, f.subject)
                    {
                        self.metrics
                            .set_cert_not_after(&f.spoke, f.subject.as_str(), t);
                    }
                }
                self.health.tick_finished(now);
                log_report(&report, took);
                if report
                    .repo_error
                    .as_ref()
                    .is_some_and(|e| e.stage() == crate::rotate::RepoStage::Push)
                {
                    self.report_unpushed(&ctx).await;
                }
            }
            Some(Ok(Err(e))) => {
                tracing::error!(error = %e, "tick failed");
                self.metrics.other_error("", OtherStage::Tick);
            }
            Some(Err(e)) => {
                tracing::error!(error = %e, "tick failed unexpectedly (a bug: please report it)");
                self.metrics.other_error("", OtherStage::Tick);
            }
        }
        if stop_by.is_some() {
            Ended::Stop
        } else {
            Ended::Continue
        }
    }

    /// The hub's issuers as the tick fetched them, and how many spokes trust the next
    /// one: said in the log each tick, and as metrics.
    fn issuers(&self, ctx: &rotate::Context, report: &TickReport) {
        let spokes = &ctx.config.spokes;
        let next = alerts::next_trust(spokes, &report.observed, &report.issuers);
        for n in &next {
            tracing::info!(issuer = %n.issuer, trusting = n.trusting, of = n.of, "{}", n.line());
        }
        self.metrics.observe_issuers(&report.issuers.seen, &next);
    }

    /// Grades every spoke's certificates and tells the sinks. A failing sink is logged,
    /// never fails the tick.
    async fn alert(&mut self, ctx: &rotate::Context, report: &TickReport) -> Vec<alerts::Finding> {
        // The key this tick sealed to: a renewal fetched from the hub replaces the one
        // loaded at start.
        // None without sealing.cert (every spoke is sops): nothing to expire.
        let sealing = match (&ctx.config.sealing_cert, &ctx.sealing) {
            (Some(path), Some(start)) => Some(alerts::SealingCert::from_key(
                report.sealing_key.as_ref().unwrap_or(start),
                &path.display().to_string(),
            )),
            _ => None,
        };
        let now = time::OffsetDateTime::now_utc();
        let mut findings = alerts::evaluate(
            &ctx.config.alerts,
            &report.observed,
            sealing.as_ref(),
            now,
            Some(report),
        );
        findings.extend(alerts::issuers(
            &ctx.config.alerts,
            &ctx.config.spokes,
            &report.observed,
            &report.issuers,
            now,
        ));
        // The new leader tells them; two replicas must not contradict each other. The
        // gate is asked before each sink, and the sends end with the tenure.
        let gate = self.gate.clone();
        let told = gate.bound(async {
            gate.check()?;
            let failed = self.notifier.notify_while(&findings, now, &gate).await;
            let events = self
                .events
                .record(&ctx.config, report, &findings, now, &gate);
            Ok::<_, rotate::Closed>((failed, events.await))
        });
        match told.await.and_then(|r| r) {
            Ok((failed, events)) => {
                for e in failed {
                    tracing::warn!(error = %e, "alert sink failed");
                    self.metrics.other_error("", OtherStage::Alert);
                }
                for e in events {
                    tracing::warn!(error = %e, "event not recorded");
                    self.metrics.other_error("", OtherStage::Alert);
                }
            }
            Err(why) => tracing::warn!(reason = %why, "not telling the alert sinks"),
        }
        findings
    }

    /// Says so when commits stay in the local clone only.
    async fn report_unpushed(&self, ctx: &rotate::Context) {
        if !ctx.config.repo.push {
            return;
        }
        match tokio::time::timeout(Duration::from_secs(1), ctx.repo.unpushed()).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::warn!(
                commits = n,
                repo = %ctx.repo.path().display(),
                "commits are in the local clone but not pushed: the next tick pushes them"
            ),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot tell whether commits are left unpushed")
            }
            Err(_) => tracing::warn!("cannot tell in time whether commits are left unpushed"),
        }
    }

    /// Returns whether the schedule changed. A broken file keeps the running config.
    async fn reload(&mut self) -> bool {
        let path = self.opts.config.display().to_string();
        tracing::info!(config = %path, "SIGHUP: reloading the configuration");
        match load(&self.opts.config, self.opts.interval).await {
            Ok(new) => {
                let old = self.loaded.config();
                if self.opts.listen.is_none() && new.config().metrics_listen != old.metrics_listen {
                    tracing::warn!(
                        listening = %old.metrics_listen,
                        configured = %new.config().metrics_listen,
                        "metrics.listen changed: restart to listen there"
                    );
                }
                let changed = new.schedule.to_string() != self.loaded.schedule.to_string();
                if changed || new.config().alerts != old.alerts {
                    match notifier(&new) {
                        Ok(n) => self.notifier = n,
                        Err(e) => {
                            tracing::error!(error = %e, "alert sinks not reloaded: keeping the previous ones")
                        }
                    }
                }
                if changed || new.config().alerts != old.alerts || new.config().hub != old.hub {
                    match events(&new, self.opts.jitter) {
                        Ok(e) => self.events = e,
                        Err(e) => {
                            tracing::error!(error = %e, "event sinks not reloaded: keeping the previous ones")
                        }
                    }
                }
                self.metrics.set_sealing_key(new.context.sealing.as_ref());
                self.health.config_loaded(new.schedule.clone(), path);
                tracing::info!(
                    spokes = new.config().spokes.len(),
                    schedule = %new.schedule,
                    "configuration reloaded"
                );
                self.loaded = new;
                changed
            }
            Err(e) => {
                tracing::error!(error = %e, "configuration not reloaded: still running on the previous one");
                self.metrics.other_error("", OtherStage::Reload);
                false
            }
        }
    }
}

fn log_report(report: &TickReport, took: Duration) {
    let mut rotated = 0;
    let mut failed = 0;
    for s in &report.spokes {
        match &s.outcome {
            Outcome::Rotated { commit } => {
                rotated += 1;
                let reason = s
                    .reason
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                tracing::info!(spoke = %s.spoke, %reason, %commit, "rotated");
            }
            Outcome::Failed(error) => {
                let stage = error.stage();
                failed += 1;
                tracing::warn!(spoke = %s.spoke, %stage, %error, "spoke failed");
            }
            Outcome::Pending {
                branch,
                pull_request,
                pending_seconds,
                ..
            } => tracing::info!(
                spoke = %s.spoke,
                %branch,
                url = pull_request.as_ref().map_or("", |p| p.url.as_str()),
                pending_seconds = pending_seconds.unwrap_or(0),
                "waiting for review"
            ),
            Outcome::NotRenewed => tracing::warn!(
                spoke = %s.spoke,
                "the client certificate expires soon and the node has not renewed it: restart k3s on the node"
            ),
            _ => {}
        }
    }
    if let Some(e) = &report.repo_error {
        tracing::warn!(error = %e, "fleet repo");
    }
    tracing::info!(
        took_ms = took.as_millis() as u64,
        spokes = report.spokes.len(),
        rotated,
        failed,
        pushed = report.pushed,
        "tick finished"
    );
}

fn rfc3339(t: SystemTime) -> String {
    crate::rotate::state::rfc3339(time::OffsetDateTime::from(t))
}

/// A cancelled tick's outputs, written but not committed (its commits reach the branch
/// only when the stream ends), put back as HEAD has them, within 5 s.
async fn discard_uncommitted(ctx: &rotate::Context) {
    let outputs: Vec<&std::path::Path> = ctx
        .config
        .spokes
        .iter()
        .map(|s| s.output.as_path())
        .collect();
    let discarded = ctx.repo.discard_uncommitted(&outputs);
    let _ = tokio::time::timeout(Duration::from_secs(5), discarded).await;
}
