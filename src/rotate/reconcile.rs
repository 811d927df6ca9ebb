//! One spoke: from its observation, decide -> (extract -> validate -> [mint] -> seal),
//! ending in a report and, when a credential is ready, a proposal to publish.

use time::OffsetDateTime;

use super::decide::{Decision, Extracted, Policy, Reason};
use super::direct::{Landing, Publish};
use super::error::SpokeError;
use super::message::commit_message;
use super::observe::{Committed, Observation};
use super::progress::Step;
use super::refresh::Fresh;
use super::sealer::Sealer;
use super::state::{Recorded, RecordedCredential, bundle_fingerprint};
use super::tick_report::{CredentialReport, Outcome, SpokeReport};
use super::{Context, Options, decide, minted, refresh};
use crate::config::{CredentialMode, SpokeConfig};
use crate::fingerprint::{Ca, CaBundle, Content, Fingerprint};
use crate::hub::cert::Untrusted;
use crate::seal::SealingKey;
use crate::secret::SecretBytes;

/// The one context a spoke's reconcile takes: the tick as every spoke sees it. It borrows
/// the process's [`Context`] and the caller's [`Options`], and adds what the tick settled
/// before working on any spoke (docs/ARCHITECTURE.md says why these stay apart).
pub(super) struct Tick<'a, P> {
    /// Lives as long as the process: configuration, repo, timeouts, memories across ticks.
    pub context: &'a Context,
    /// What the caller asked of this tick.
    pub options: &'a Options,
    /// The tick's clock, one for every spoke.
    pub now: OffsetDateTime,
    /// The tick's sealing key (None: no sealing.cert, every spoke is sops); with
    /// `untrusted` set nothing may be sealed to it.
    pub sealing: Option<&'a SealingKey>,
    pub untrusted: Option<&'a Untrusted>,
    pub publish: &'a P,
    /// The tick's listing of the hub's consumers (empty without a hub).
    pub listed: &'a crate::hub::consumers::Listed,
}

/// A credential ready to commit.
pub(super) struct Proposal {
    pub manifest: String,
    pub message: String,
    pub content_sha256: Fingerprint<Content>,
    /// What this tick encrypted it to.
    pub sealed_to: super::state::SealedTo,
    /// Direct mode: what to revoke once the hub has this credential.
    pub revocation: Option<minted::Revocation>,
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

/// What the rule table weighs a spoke's observation against this tick (`sealer`: what
/// the spoke's output is encrypted to).
pub(super) fn policy<P>(
    tick: &Tick<'_, P>,
    spoke: &SpokeConfig,
    seen: &Observation,
    sealer: &Sealer<'_>,
) -> Policy {
    let context = tick.context;
    let recorded = seen.committed.recorded();
    let verify_due = {
        let last = context
            .verified
            .lock()
            .map(|m| m.get(&spoke.name).copied())
            .unwrap_or(None);
        let since = last.or(recorded.map(|r| r.rotated_at));
        since.is_none_or(|t| tick.now - t >= context.config.verify_every)
    };
    // An untrusted key is no reason to rotate: against it, compare with what is recorded.
    let sealed_to = match (sealer, tick.untrusted, recorded) {
        (Sealer::SealedSecrets(_), Some(_), Some(r)) => r.sealed_to,
        _ => sealer.sealed_to(),
    };
    Policy {
        now: tick.now,
        renew_before: context.config.renew_before,
        sealed_to,
        force: tick.options.force || tick.options.revoke,
        verify_due,
        roots_seen: roots_seen(context, spoke, seen),
    }
}

/// Roots presented outside a recorded bundle, found absent from the node's kubeconfig by
/// an extraction, and the bundle they were judged against.
#[derive(Debug)]
pub(super) struct SeenRoots {
    bundle: Fingerprint<CaBundle>,
    roots: Vec<Fingerprint<Ca>>,
}

/// Whether every root the spoke presents outside its recorded bundle was seen already.
fn roots_seen(context: &Context, spoke: &SpokeConfig, seen: &Observation) -> bool {
    let (Some(recorded), Some(judged)) = (seen.committed.recorded(), &seen.ca) else {
        return false;
    };
    let bundle = bundle_fingerprint(&recorded.ca_bundle);
    let Ok(memory) = context.roots_seen.lock() else {
        return false;
    };
    memory.get(&spoke.name).is_some_and(|s| {
        s.bundle == bundle && judged.roots_outside.iter().all(|r| s.roots.contains(r))
    })
}

/// After an extraction found the node's bundle unchanged for a root-changed spoke.
fn remember_roots(context: &Context, spoke: &SpokeConfig, seen: &Observation) {
    let (Some(recorded), Some(judged)) = (seen.committed.recorded(), &seen.ca) else {
        return;
    };
    tracing::warn!(
        spoke = %spoke.name,
        roots = ?judged.roots_outside.iter().map(|r| r.short()).collect::<Vec<_>>(),
        "the API server presents a root its kubeconfig does not hold; nothing to commit (check the server's --tls-cert-file)"
    );
    if let Ok(mut memory) = context.roots_seen.lock() {
        let seen = SeenRoots {
            bundle: bundle_fingerprint(&recorded.ca_bundle),
            roots: judged.roots_outside.clone(),
        };
        memory.insert(spoke.name.clone(), seen);
    }
}

/// The spoke's sealer, then [`reconcile`]: age recipients that cannot be read or are
/// not trusted fail the spoke at `seal` before anything else, every tick, so the
/// problem is seen even while the committed credential needs nothing.
pub(super) async fn spoke<P: Publish>(
    tick: &Tick<'_, P>,
    spoke: &SpokeConfig,
    seen: &Observation,
) -> Reconciled {
    let config = &tick.context.config;
    let committed = seen.committed.record().map(|r| &r.sealed);
    let sealer = Sealer::for_spoke(config, spoke, tick.sealing)
        .and_then(|s| s.keeping_order(config, spoke, committed));
    match sealer {
        Ok(sealer) => {
            let policy = policy(tick, spoke, seen, &sealer);
            reconcile(tick, spoke, seen, &policy, &sealer).await
        }
        Err(e) => {
            let mut report = SpokeReport::new(&spoke.name, Outcome::Healthy);
            note_recorded(&mut report, seen);
            report.outcome = Outcome::Failed(e);
            Reconciled::done(report)
        }
    }
}

fn note_recorded(report: &mut SpokeReport, seen: &Observation) {
    if let Some(r) = seen.committed.recorded() {
        report.ca_sha256 = Some(r.ca_sha256);
        report.ca_not_after = Some(r.ca_not_after);
        report.client_not_after = r.client_not_after;
        report.rotated_at = Some(r.rotated_at);
        report.credential = Some(CredentialReport::of(r));
    }
}

/// decide -> (extract -> validate -> [mint] -> seal) for one spoke as observed. With an
/// untrusted sealing key nothing is sealed: a rotation fails at `seal`.
pub(super) async fn reconcile<P: Publish>(
    tick: &Tick<'_, P>,
    spoke: &SpokeConfig,
    seen: &Observation,
    policy: &Policy,
    sealer: &Sealer<'_>,
) -> Reconciled {
    let mut report = SpokeReport::new(&spoke.name, Outcome::Healthy);
    note_recorded(&mut report, seen);
    match rotate(tick, spoke, seen, policy, sealer, &mut report).await {
        Ok(proposal) => Reconciled {
            report,
            proposal: Some(proposal),
        },
        Err(end) => {
            if let (Outcome::Unchanged, Some(Reason::RootChanged { .. })) = (&end, &report.reason) {
                remember_roots(tick.context, spoke, seen);
            }
            report.outcome = end;
            Reconciled::done(report)
        }
    }
}

/// The pipeline. An `Err` is how the spoke's tick ends without a proposal: healthy,
/// unchanged, pending review, a dry tick, or failed at a stage.
async fn rotate<P: Publish>(
    tick: &Tick<'_, P>,
    spoke: &SpokeConfig,
    seen: &Observation,
    policy: &Policy,
    sealer: &Sealer<'_>,
    report: &mut SpokeReport,
) -> Result<Proposal, Outcome> {
    let mut reason = decided(spoke, seen, policy)?;
    report.reason = Some(reason.clone());
    let asked = tick.options;
    if !(asked.force || asked.revoke)
        && tick
            .publish
            .waiting(tick.context, spoke, seen, report, policy)
            .await
    {
        return Err(report.outcome.clone());
    }
    let admin = extract(tick, spoke).await?;
    let candidate = match spoke.credential.mode {
        CredentialMode::Minted => {
            minted(tick, spoke, seen, admin, sealer, &mut reason, report).await?
        }
        CredentialMode::Extracted => extracted(tick, spoke, seen, admin)?,
    };
    impersonation(tick, spoke, &candidate).await?;
    let recorded = record(tick, spoke, &candidate, sealer, report);
    let previous = seen.committed.recorded();
    let reason = match decide::after_extraction(reason, previous, &recorded, spoke.credential.mode)
    {
        Extracted::Commit(reason) => reason,
        Extracted::Unchanged | Extracted::RootUnheld => return Err(Outcome::Unchanged),
        Extracted::NotRenewed => return Err(Outcome::NotRenewed),
    };
    report.reason = Some(reason.clone());
    report.ca_sha256 = Some(recorded.ca_sha256);
    report.ca_not_after = Some(recorded.ca_not_after);
    report.client_not_after = recorded.client_not_after;
    let manifest = seal(tick, spoke, &candidate, sealer, &recorded)?;
    let fresh = &candidate.fresh;
    Ok(Proposal {
        manifest,
        message: commit_message(spoke, &reason, previous, &recorded, &fresh.live),
        content_sha256: recorded.content_sha256,
        sealed_to: sealer.sealed_to(),
        revocation: candidate.revocation,
    })
}

impl From<SpokeError> for Outcome {
    fn from(e: SpokeError) -> Outcome {
        Outcome::Failed(e)
    }
}

fn stage<P>(tick: &Tick<'_, P>, spoke: &SpokeConfig, stage: &'static str) {
    tick.options.progress.emit(Step::Stage {
        spoke: &spoke.name,
        stage,
    });
}

/// decide: what is committed and the probe, weighed by the rule table.
fn decided(spoke: &SpokeConfig, seen: &Observation, policy: &Policy) -> Result<Reason, Outcome> {
    if let Committed::Unreadable(e) = &seen.committed {
        return Err(SpokeError::Read(e.clone()).into());
    }
    match decide::decide(spoke, &seen.observed(), policy) {
        Decision::Healthy => Err(Outcome::Healthy),
        Decision::Unreachable(e) => Err(SpokeError::Unreachable(e).into()),
        Decision::Rotate(reason) => Ok(reason),
    }
}

/// extract -> validate: the node's admin credential, proven against the live API.
async fn extract<P>(tick: &Tick<'_, P>, spoke: &SpokeConfig) -> Result<Fresh, SpokeError> {
    stage(tick, spoke, "extract and validate");
    let fresh = refresh::extract_and_validate(spoke, tick.now, tick.context.live_timeout).await?;
    if let Ok(mut m) = tick.context.verified.lock() {
        m.insert(spoke.name.clone(), tick.now);
    }
    Ok(fresh)
}

/// The credential about to be committed, and what goes with it.
struct Candidate {
    fresh: Fresh,
    credential: RecordedCredential,
    /// Direct mode: what to revoke once the hub has it.
    revocation: Option<minted::Revocation>,
    /// Minted this tick: the admin credential and the generation, until it is committed.
    minted_now: Option<(SecretBytes, u64)>,
    shortened: Option<crate::mint::Shortfall>,
}

/// [mint]: the hub's own credential, minted with the admin one just validated.
async fn minted<P: Publish>(
    tick: &Tick<'_, P>,
    spoke: &SpokeConfig,
    seen: &Observation,
    admin: Fresh,
    sealer: &Sealer<'_>,
    reason: &mut Reason,
    report: &mut SpokeReport,
) -> Result<Candidate, Outcome> {
    stage(tick, spoke, "mint");
    let landing = tick.publish.landing();
    let how = minted::Mint {
        revoke: tick.options.revoke,
        landing,
        dry_run: tick.options.dry_run,
        call: tick.context.live_timeout,
        sign: tick.context.sign_timeout,
        unsealable: match (sealer, tick.untrusted) {
            (Sealer::SealedSecrets(_), Some(u)) => Some(SpokeError::Untrusted(u.error.clone())),
            _ => sealer.can_seal(spoke).err(),
        },
    };
    let step = minted::step(
        spoke,
        admin,
        &seen.committed,
        reason,
        &mut report.revoked,
        &how,
    )
    .await;
    report.reason = Some(reason.clone());
    let (fresh, credential, admin, shortened) = match step? {
        minted::Step::Minted {
            fresh,
            credential,
            admin,
            shortened,
        } => (fresh, credential, admin, shortened),
        minted::Step::Unchanged => return Err(Outcome::Unchanged),
        minted::Step::WouldMint => return Err(Outcome::WouldRotate),
    };
    let had = seen.committed.recorded().map(|r| &r.credential);
    let revocation = (landing == Landing::AtPush).then(|| minted::Revocation {
        admin: admin.clone(),
        below: credential.generation,
        legacy_user: had.and_then(|h| h.user.clone()),
        hub: spoke.credential.hub_id.clone(),
        spoke: spoke.name.clone(),
    });
    Ok(Candidate {
        fresh: *fresh,
        minted_now: Some((admin, credential.generation)),
        credential,
        revocation,
        shortened,
    })
}

/// Extracted: the admin credential itself is what the hub gets.
fn extracted<P: Publish>(
    tick: &Tick<'_, P>,
    spoke: &SpokeConfig,
    seen: &Observation,
    fresh: Fresh,
) -> Result<Candidate, SpokeError> {
    if tick.options.revoke {
        return Err(SpokeError::RevokeExtracted {
            spoke: spoke.name.clone(),
        });
    }
    let had = seen
        .committed
        .recorded()
        .map(|r| r.credential.clone())
        .unwrap_or_default();
    // Back from minted: every minted generation goes once the hub has this one.
    let lands_at_push = tick.publish.landing() == Landing::AtPush;
    let revocation = (had.mode == CredentialMode::Minted && lands_at_push && !tick.options.dry_run)
        .then(|| minted::Revocation {
            admin: fresh.yaml.clone(),
            below: had.next_generation(),
            legacy_user: had.user.clone(),
            hub: spoke.credential.hub_id.clone(),
            spoke: spoke.name.clone(),
        });
    Ok(Candidate {
        fresh,
        credential: RecordedCredential {
            mode: CredentialMode::Extracted,
            user: None,
            generation: had.generation,
        },
        revocation,
        minted_now: None,
        shortened: None,
    })
}

/// validate, for Flux: the ServiceAccounts its consumers impersonate with the credential.
/// A generation minted for nothing is withdrawn.
async fn impersonation<P>(
    tick: &Tick<'_, P>,
    spoke: &SpokeConfig,
    c: &Candidate,
) -> Result<(), SpokeError> {
    let hub = tick.context.config.hub.as_ref();
    let default_sa = hub.and_then(|h| h.flux_default_service_account.as_deref());
    let needed = crate::hub::consumers::impersonated(spoke, tick.listed, default_sa);
    let checked = refresh::may_impersonate(&c.fresh, &needed, tick.context.live_timeout).await;
    if checked.is_err()
        && let Some((admin, generation)) = &c.minted_now
    {
        minted::withdraw(spoke, admin, *generation, tick.context.live_timeout).await;
    }
    checked
}

/// What the annotations will record, and the report's view of the new credential.
fn record<P>(
    tick: &Tick<'_, P>,
    spoke: &SpokeConfig,
    c: &Candidate,
    sealer: &Sealer<'_>,
    report: &mut SpokeReport,
) -> Recorded {
    let fresh = &c.fresh;
    let mut recorded = refresh::record(
        spoke,
        &fresh.kubeconfig,
        fresh.content_sha256,
        sealer.sealed_to(),
        tick.now,
    );
    recorded.credential = c.credential.clone();
    report.user = Some(fresh.live.username.clone());
    let mut credential = CredentialReport::of(&recorded);
    if c.credential.mode == CredentialMode::Extracted {
        // Extracted: who it authenticated as.
        credential.user = Some(fresh.live.username.clone());
    }
    credential.shortened = c.shortened.map(|s| s.to_string());
    report.credential = Some(credential);
    recorded
}

/// seal, unless the sealing key is untrusted (Sealed Secrets) or this is a dry tick.
fn seal<P>(
    tick: &Tick<'_, P>,
    spoke: &SpokeConfig,
    c: &Candidate,
    sealer: &Sealer<'_>,
    recorded: &Recorded,
) -> Result<String, Outcome> {
    stage(tick, spoke, "seal");
    if let (Sealer::SealedSecrets(_), Some(u)) = (sealer, tick.untrusted) {
        return Err(SpokeError::Untrusted(u.error.clone()).into());
    }
    let manifest = sealer.seal_recorded(spoke, &c.fresh.yaml, recorded, tick.now)?;
    if tick.options.dry_run {
        return Err(Outcome::WouldRotate);
    }
    Ok(manifest)
}
