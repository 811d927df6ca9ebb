//! The per-spoke pipeline: observe -> decide -> extract -> validate -> seal -> commit,
//! then one push per tick.
//!
//! Spokes run concurrently up to a bound and one spoke's failure never blocks another;
//! commits are made one at a time, in configuration order, under the repo lock. A
//! credential is committed only after it worked against the live API, so a working
//! committed credential is never replaced by one that was not validated.

pub mod decide;
mod minted;
pub mod progress;
pub mod refresh;
pub mod review;
pub mod sealing;
pub mod state;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use time::OffsetDateTime;

pub use decide::{Decision, Reason};
pub use progress::{Progress, Step};
pub use refresh::Stage;

use crate::config::{Config, CredentialMode, SpokeConfig};
use crate::repo::{Pushed, Repo};
use crate::seal::{SealedSecret, SealingKey};
use crate::spoke::{self, ProbeError, ProbeReport};
use state::{Recorded, rfc3339, short};

/// What one tick needs: the configuration, the sealing key and the fleet repo.
pub struct Context {
    pub config: Config,
    pub sealing: SealingKey,
    pub repo: Repo,
    pub probe_timeout: Duration,
    pub live_timeout: Duration,
    /// How long a minted credential's CSR may wait for the spoke's signer.
    pub sign_timeout: Duration,
    /// When each spoke was last re-extracted (in memory: a fresh process re-checks once).
    verified: Mutex<HashMap<String, OffsetDateTime>>,
    /// Spokes whose pushed credential the hub had not taken at the last look: looked at
    /// again every tick until it has, so their hub gauges and alerts clear.
    hub_unverified: Mutex<std::collections::BTreeSet<String>>,
    /// `spokekeeper demo`: the demo key is allowed, also from the (simulated) hub.
    demo: bool,
}

impl Context {
    /// Refuses the demo sealing key: its private half is published in keys/demo/.
    pub fn new(config: Config, sealing: SealingKey, repo: Repo) -> Result<Context, String> {
        if sealing.is_demo() {
            return Err(format!(
                "sealing.cert {} is spokekeeper's demo key, whose private key is public (keys/demo/): \
                 anyone could unseal what is sealed to it. Use the hub controller's certificate \
                 (kubeseal --fetch-cert > keys/sealed-secrets-infra.pem)",
                config.sealing_cert.display()
            ));
        }
        Ok(Self::unchecked(config, sealing, repo))
    }

    /// For `spokekeeper demo` only: allows the demo key.
    pub fn for_demo(config: Config, sealing: SealingKey, repo: Repo) -> Context {
        Context {
            demo: true,
            ..Self::unchecked(config, sealing, repo)
        }
    }

    /// Whether this is the demo's context, where the demo key is allowed.
    pub fn is_demo(&self) -> bool {
        self.demo
    }

    fn unchecked(config: Config, sealing: SealingKey, repo: Repo) -> Context {
        Context {
            config,
            sealing,
            repo,
            probe_timeout: Duration::from_secs(10),
            live_timeout: Duration::from_secs(20),
            sign_timeout: Duration::from_secs(30),
            verified: Mutex::new(HashMap::new()),
            hub_unverified: Mutex::new(Default::default()),
            demo: false,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Rotate even when nothing says so.
    pub force: bool,
    /// `spokekeeper revoke`: delete the committed generation's binding at once, then mint
    /// the next (implies force; minted spokes only).
    pub revoke: bool,
    /// Decide and validate, but write, commit and push nothing.
    pub dry_run: bool,
    /// Only these spokes (empty: all).
    pub only: Vec<String>,
    /// How many spokes are worked on at once.
    pub concurrency: usize,
    /// Told where the tick is (`rotate` on a terminal); nothing by default.
    pub progress: progress::Progress,
    /// Asked right before the push; always yes by default.
    pub gate: Gate,
}

/// Whether this process may still act (with leader election: it holds the Lease with
/// time left), asked right before a side effect: Err says why not.
#[derive(Clone, Default)]
pub struct Gate(Option<std::sync::Arc<dyn Fn() -> Result<(), String> + Send + Sync>>);

impl Gate {
    pub fn new(check: impl Fn() -> Result<(), String> + Send + Sync + 'static) -> Gate {
        Gate(Some(std::sync::Arc::new(check)))
    }

    pub fn check(&self) -> Result<(), String> {
        self.0.as_ref().map_or(Ok(()), |check| check())
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Gate(checked)"
        } else {
            "Gate(open)"
        })
    }
}

/// What happened to one spoke.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Outcome {
    /// Nothing needed doing (no SSH).
    Healthy,
    /// Re-extracted on schedule; the same credential: nothing to commit.
    Unchanged,
    /// A fresh credential was committed (and pushed, unless the push failed).
    Rotated { commit: String },
    /// --dry-run: would have committed this.
    WouldRotate,
    /// The client certificate is expiring and the node has not renewed it yet.
    NotRenewed,
    /// Stopped at `stage`; the committed credential is untouched.
    Failed { stage: Stage, error: String },
    /// `repo.mode: pull-request`: the fix is on `branch`, waiting for review.
    Pending {
        branch: String,
        /// Pushed to the branch this tick (None: it already held the fix).
        commit: Option<String>,
        /// The open pull request (None: none found, e.g. in a dry run).
        pull_request: Option<crate::forge::PullRequest>,
        /// Whether this tick opened or updated the pull request.
        change: Option<crate::forge::Action>,
        /// Since the pull request was opened.
        pending_seconds: Option<u64>,
    },
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct SpokeReport {
    pub spoke: String,
    #[serde(flatten)]
    pub outcome: Outcome,
    pub reason: Option<Reason>,
    /// The CA the hub's credential trusts after this tick.
    pub ca_sha256: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub ca_not_after: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub client_not_after: Option<OffsetDateTime>,
    /// Who the new credential authenticated as, when one was validated.
    pub user: Option<String>,
    /// The TLS probe this tick took, when it took one: alerts grade from it rather
    /// than probing again.
    #[serde(skip)]
    pub probe: Option<Result<ProbeReport, ProbeError>>,
    /// After a push with `hub:` configured: whether the hub unsealed it and Flux is Ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hub: Option<crate::hub::verify::HubReport>,
    /// The hub's credential for this spoke after this tick, when known.
    pub credential: Option<CredentialReport>,
    /// Minted: the ClusterRoleBindings deleted this tick (older generations, or the
    /// revoked one), so those credentials no longer work.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub revoked: Vec<String>,
    /// Why superseded generations could not be revoked (they stay valid until they
    /// expire, or until the next minted rotation deletes them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoke_error: Option<String>,
}

/// What kind of credential the hub holds for a spoke (`credential` in -o json).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CredentialReport {
    pub mode: crate::config::CredentialMode,
    /// Minted: the user the certificate was signed for. Extracted: who it authenticated as.
    pub user: Option<String>,
    /// Minted only: the generation counter (the user and its binding carry it).
    pub generation: Option<u64>,
    /// The client certificate's notAfter (minted: the signed certificate's).
    #[serde(with = "time::serde::rfc3339::option")]
    pub not_after: Option<OffsetDateTime>,
}

impl CredentialReport {
    /// What the recorded annotations say.
    pub fn of(r: &Recorded) -> CredentialReport {
        let minted = r.credential.mode == crate::config::CredentialMode::Minted;
        CredentialReport {
            mode: r.credential.mode,
            user: r.credential.user.clone(),
            generation: minted.then_some(r.credential.generation),
            not_after: r.client_not_after,
        }
    }
}

impl SpokeReport {
    /// `spoke` with `outcome`, before anything else is known.
    pub fn new(spoke: &str, outcome: Outcome) -> SpokeReport {
        SpokeReport {
            spoke: spoke.to_string(),
            outcome,
            reason: None,
            ca_sha256: None,
            ca_not_after: None,
            client_not_after: None,
            user: None,
            probe: None,
            hub: None,
            credential: None,
            revoked: Vec::new(),
            revoke_error: None,
        }
    }

    pub fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Failed { .. })
    }
}

#[derive(Debug, serde::Serialize)]
pub struct TickReport {
    pub spokes: Vec<SpokeReport>,
    /// Whether commits were pushed this tick (false when nothing was ahead).
    pub pushed: bool,
    /// Why the repo could not be synced or pushed, when it could not.
    pub repo_error: Option<RepoFailure>,
    /// The sealing certificate of this tick: whether it is trusted and, with `hub:`,
    /// what the controller served (None only in reports not made by a tick).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sealing: Option<crate::hub::cert::CertReport>,
    /// The sealing key this tick sealed to (alerts grade it).
    #[serde(skip)]
    pub sealing_key: Option<SealingKey>,
}

impl TickReport {
    /// Just these spokes: nothing pushed, no repo error, no hub.
    pub fn of(spokes: Vec<SpokeReport>) -> TickReport {
        TickReport {
            spokes,
            pushed: false,
            repo_error: None,
            sealing: None,
            sealing_key: None,
        }
    }

    /// No spoke failed, the repo synced and pushed, and the sealing key is trusted.
    pub fn ok(&self) -> bool {
        self.repo_error.is_none()
            && !self.spokes.iter().any(SpokeReport::failed)
            && self.sealing.as_ref().is_none_or(|c| c.untrusted.is_none())
    }

    /// Every credential pushed this tick was unsealed on the hub and each of its consumers
    /// is Ready (trivially true without `hub:`).
    pub fn hub_ok(&self) -> bool {
        self.spokes
            .iter()
            .all(|s| s.hub.as_ref().is_none_or(|h| h.ok()))
    }
}

/// Where the fleet repo failed in a tick; the stage is the only part that becomes a
/// metric label, so label values come from a fixed set, never from error text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoFailure {
    pub stage: RepoStage,
    pub error: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepoStage {
    /// Fetching and rebasing onto the remote.
    Sync,
    /// Pushing the tick's commits.
    Push,
    /// Review mode found commits in the clone that only a push would publish.
    Unpushed,
}

impl RepoStage {
    pub const ALL: [RepoStage; 3] = [RepoStage::Sync, RepoStage::Push, RepoStage::Unpushed];

    pub fn metric_label(self) -> &'static str {
        match self {
            RepoStage::Sync => "sync",
            RepoStage::Push => "push",
            RepoStage::Unpushed => "unpushed",
        }
    }
}

impl RepoFailure {
    pub fn new(stage: RepoStage, error: String) -> RepoFailure {
        RepoFailure { stage, error }
    }
}

/// The text reports and logs have always shown: "sync: ...", "push: ...", or the
/// unpushed-commits message alone.
impl std::fmt::Display for RepoFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.stage {
            RepoStage::Unpushed => f.write_str(&self.error),
            s => write!(f, "{}: {}", s.metric_label(), self.error),
        }
    }
}

/// JSON keeps today's string, so scripts reading `repo_error` keep working.
impl serde::Serialize for RepoFailure {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Stage {
    pub const ALL: [Stage; 9] = [
        Stage::Observe,
        Stage::Probe,
        Stage::Extract,
        Stage::Validate,
        Stage::Mint,
        Stage::Seal,
        Stage::Commit,
        Stage::Push,
        Stage::Review,
    ];

    /// The `stage` label of `spokekeeper_errors_total` (the JSON name, as a constant).
    pub fn metric_label(self) -> &'static str {
        match self {
            Stage::Observe => "observe",
            Stage::Probe => "probe",
            Stage::Extract => "extract",
            Stage::Validate => "validate",
            Stage::Mint => "mint",
            Stage::Seal => "seal",
            Stage::Commit => "commit",
            Stage::Push => "push",
            Stage::Review => "review",
        }
    }
}

/// A credential ready to commit.
struct Proposal {
    manifest: String,
    message: String,
    content_sha256: String,
    /// The sealing certificate this tick sealed to.
    sealing_sha256: String,
    /// Direct mode: what to revoke once the hub has this credential.
    revocation: Option<minted::Revocation>,
}

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

/// observe -> decide -> (extract -> validate -> seal) for one spoke. With an untrusted
/// sealing key nothing is sealed: a rotation fails at `seal`.
async fn reconcile(
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

/// One line that says why, then the facts a reviewer wants. What the spoke reported
/// (and what the fleet repo held) is quoted as one bounded line each: a hostile value
/// cannot add lines or forge a trailer.
fn commit_message(
    spoke: &SpokeConfig,
    reason: &Reason,
    previous: Option<&Recorded>,
    new: &Recorded,
    live: &spoke::LiveReport,
) -> String {
    use crate::text::one_line;
    let why = match (reason, previous) {
        (Reason::CaChanged { old }, _) => {
            format!("CA changed {} -> {}", short(old), short(&new.ca_sha256))
        }
        _ => reason.to_string(),
    };
    let minted = new.credential.mode == crate::config::CredentialMode::Minted;
    let title = match (&new.credential.user, minted) {
        (Some(user), true) => format!("{}: rotate kubeconfig, minted {user}: {why}", spoke.name),
        _ => format!("{}: rotate kubeconfig: {why}", spoke.name),
    };
    let mut msg = one_line(&title, 200);
    msg.push_str("\n\n");
    if let (Some(user), true) = (&new.credential.user, minted) {
        msg.push_str(&format!(
            "credential: minted for user {} (generation {}, ClusterRoleBinding {}); the admin credential is not committed\n",
            one_line(user, 200),
            new.credential.generation,
            crate::mint::binding_name(new.credential.generation)
        ));
    }
    msg.push_str(&format!("server: {}\n", one_line(&new.server, 200)));
    msg.push_str(&format!(
        "CA: {} (valid until {})\n",
        new.ca_sha256,
        rfc3339(new.ca_not_after)
    ));
    if let (Some(fp), Some(na)) = (&new.client_sha256, new.client_not_after) {
        msg.push_str(&format!(
            "client certificate: {fp} (valid until {})\n",
            rfc3339(na)
        ));
    }
    msg.push_str(&format!(
        "validated: authenticated as {} against {} ({})\n",
        one_line(&live.username, 200),
        one_line(&live.server, 200),
        one_line(&live.git_version, 64)
    ));
    msg.push_str(&format!(
        "sealed to: {} ({} {}/{})\n",
        new.sealing_sha256, spoke.scope, spoke.secret.namespace, spoke.secret.name
    ));
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spoke reports a username and version built to add lines, forge a trailer and
    /// inject Markdown/HTML: the commit message keeps one line per fact and no trailer,
    /// and the pull request body shows the values as escaped text.
    #[test]
    fn spoke_supplied_text_cannot_add_lines_trailers_or_markup() {
        let text =
            "repo: {path: f}\nsealing: {cert: c}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";
        let spoke = Config::parse(text, "t.yaml", std::path::Path::new("/"))
            .unwrap()
            .spokes
            .remove(0);
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let new = Recorded {
            spoke: "dev".into(),
            server: "https://10.0.0.1:6443\nSigned-off-by: server".into(),
            ca_sha256: "sha256:ca".into(),
            ca_bundle: vec![vec![]],
            ca_not_after: now + time::Duration::days(3000),
            client_sha256: None,
            client_not_after: None,
            content_sha256: "c".into(),
            sealing_sha256: "sha256:seal".into(),
            rotated_at: now,
            credential: Default::default(),
        };
        let live = spoke::LiveReport {
            server: "https://10.0.0.1:6443".into(),
            git_version: "v1.33.1\n\n# Approved\n[merge me](https://evil.example)".into(),
            platform: "linux/amd64".into(),
            username: "admin\nSigned-off-by: x\n<script>alert(1)</script> @org/admins\u{202E}"
                .into(),
            uid: None,
            groups: vec![],
        };
        let msg = commit_message(&spoke, &Reason::Initial, None, &new, &live);
        let lines: Vec<&str> = msg.lines().collect();
        assert_eq!(lines.len(), 6, "{msg}");
        assert!(
            lines.iter().all(|l| !l.starts_with("Signed-off-by")
                && !l.starts_with('#')
                && !l.starts_with('[')),
            "{msg}"
        );
        assert_eq!(
            lines[4],
            "validated: authenticated as admin Signed-off-by: x <script>alert(1)</script> @org/admins against https://10.0.0.1:6443 (v1.33.1 # Approved [merge me](https://evil.example))"
        );
        assert_eq!(
            lines[2],
            "server: https://10.0.0.1:6443 Signed-off-by: server"
        );

        let (title, body) = review::describe(&msg, None, None, &"a".repeat(40));
        assert_eq!(title, "dev: rotate kubeconfig: initial credential");
        assert!(
            body.contains("admin Signed\\-off\\-by: x \\<script\\>alert\\(1\\)\\</script\\> @&#8203;org/admins")
                && body.contains("\\[merge me\\]\\(https:&#8203;//evil\\.example\\)")
                && body.contains("\\#&#8203; Approved"),
            "{body}"
        );
        assert!(
            !body.contains("<script>") && !body.contains("\n#"),
            "{body}"
        );
    }

    #[test]
    fn repo_error_serializes_as_the_text_it_always_had() {
        let json = |stage, error: &str| {
            let r = TickReport {
                repo_error: Some(RepoFailure::new(stage, error.into())),
                ..TickReport::of(vec![])
            };
            serde_json::to_value(&r).unwrap()["repo_error"].clone()
        };
        assert_eq!(json(RepoStage::Push, "rejected"), "push: rejected");
        assert_eq!(json(RepoStage::Sync, "offline"), "sync: offline");
        assert_eq!(
            json(RepoStage::Unpushed, "the clone has 1 commit(s)"),
            "the clone has 1 commit(s)"
        );
    }
}
