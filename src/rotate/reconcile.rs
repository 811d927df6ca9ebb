//! One spoke: from its observation, decide -> (extract -> validate -> [mint] -> seal),
//! ending in a report and, when a credential is ready, a proposal to publish.

use std::ops::ControlFlow;

use super::context::{Landing, SeenRoots, Spoke, Tick};
use super::decide::{Decision, Extracted, Policy, Reason};
use super::error::SpokeError;
use super::message::commit_message;
use super::observe::{Committed, Invalid, InvalidKind, Observation};
use super::progress::Step;
use super::refresh::Fresh;
use super::state::AnnotationError;
use super::state::{Recorded, RecordedCredential, SealedTo, bundle_fingerprint};
use super::tick_report::{CredentialReport, Outcome, SpokeReport};
use super::{Context, decide, refresh};
use crate::config::{CredentialMode, SpokeConfig};
use crate::fingerprint::{Content, Fingerprint};
use crate::mint::{self, GenerationError};
use crate::seal::Sealer;
use crate::secret::SecretBytes;

/// A credential ready to commit.
pub(super) struct Proposal {
    pub manifest: String,
    pub message: String,
    pub content_sha256: Fingerprint<Content>,
    /// What this tick encrypted it to.
    pub sealed_to: super::state::SealedTo,
    /// Direct mode: what to revoke once the hub has this credential.
    pub revocation: Option<crate::mint::Revocation>,
}

/// One spoke's result: its report, and what to publish when a credential is ready.
pub(super) struct Reconciled {
    pub report: SpokeReport,
    pub(crate) proposal: Option<Proposal>,
}

/// How far a spoke got: what its report says beside the outcome.
#[derive(Default)]
struct Reached {
    reason: Option<Reason>,
    /// Minted: the bindings deleted this tick.
    revoked: Vec<String>,
    /// The new credential once validated: who it authenticated as, and what it is.
    validated: Option<(String, CredentialReport)>,
    /// What the annotations will record, once it is to be committed.
    committing: Option<Recorded>,
}

impl Reached {
    /// The spoke's report, built once from its outcome: what is recorded (or about to
    /// be) and how far it got.
    fn report(self, seen: &Observation, outcome: Outcome) -> SpokeReport {
        let mut report = SpokeReport::new(&seen.spoke, outcome);
        let old = seen.committed.recorded();
        if let Some(r) = old {
            report.rotated_at = Some(r.rotated_at);
            report.credential = Some(CredentialReport::of(r));
        }
        if let Some(r) = self.committing.as_ref().or(old) {
            report.ca_sha256 = Some(r.ca_sha256);
            report.ca_not_after = Some(r.ca_not_after);
            report.client_not_after = r.client_not_after;
        }
        if let Some((user, credential)) = self.validated {
            report.user = Some(user);
            report.credential = Some(credential);
        }
        report.reason = self.reason;
        report.revoked = self.revoked;
        report
    }

    /// The spoke's tick ending with nothing to publish.
    fn end(self, seen: &Observation, outcome: Outcome) -> Reconciled {
        Reconciled {
            report: self.report(seen, outcome),
            proposal: None,
        }
    }
}

/// A stage's value, or the spoke's tick ending there with nothing failed (healthy,
/// unchanged, not renewed, pending review, a dry tick); `Err` is a failure.
type Next<T> = Result<ControlFlow<Outcome, T>, SpokeError>;

/// What the rule table weighs a spoke's observation against this tick (`sealer`: what
/// the spoke's output is encrypted to).
pub(super) fn policy(
    tick: &Tick<'_>,
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
        trust_refused: None,
        trust_sha256: spoke
            .credential
            .federated
            .as_ref()
            .map(|p| crate::federate::trust_fingerprint(p, tick.issuer_cas)),
    }
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

/// decide, for one spoke as observed: its record and why it is to rotate, or its
/// reconcile ended there (healthy, or failed). Age recipients that cannot be read or
/// are not trusted fail the spoke at `seal` before anything else, every tick, so the
/// problem is seen even while the committed credential needs nothing.
pub(super) fn decide<'a>(
    tick: &Tick<'a>,
    config: &'a SpokeConfig,
    seen: &'a Observation,
    trust_refused: Option<String>,
) -> ControlFlow<Reconciled, (Spoke<'a>, Reason)> {
    let committed = match seen.committed.record().map(|r| &r.sealed) {
        Some(super::output::Output::Sops(file)) => Some(file.recipients.as_slice()),
        _ => None,
    };
    let all = &tick.context.config;
    let ended = |outcome| ControlFlow::Break(Reached::default().end(seen, outcome));
    let sealer = match Sealer::for_spoke(all, config, tick.sealing, committed) {
        Ok(sealer) => sealer,
        Err(e) => return ended(Outcome::Failed(e.into())),
    };
    let policy = Policy {
        trust_refused,
        ..policy(tick, config, seen, &sealer)
    };
    let spoke = Spoke {
        config,
        seen,
        policy,
        sealer,
    };
    match decided(&spoke, tick.options.revoke) {
        Ok(Some(reason)) => ControlFlow::Continue((spoke, reason)),
        Ok(None) => ended(Outcome::Healthy),
        Err(e) => ended(Outcome::Failed(e)),
    }
}

/// A spoke to rotate whose fix already waits for review: nothing is extracted.
pub(super) fn waits(s: &Spoke<'_>, reason: Reason, pending: Outcome) -> Reconciled {
    let reached = Reached {
        reason: Some(reason),
        ..Reached::default()
    };
    reached.end(s.seen, pending)
}

/// extract -> validate -> [mint] -> seal for a spoke decide said to rotate, each stage
/// returning its value; what the report says of how far it got is kept here. With an
/// untrusted sealing key nothing is sealed: a rotation fails at `seal`.
pub(super) async fn rotate(tick: &Tick<'_>, s: &Spoke<'_>, reason: Reason) -> Reconciled {
    let mut reached = Reached {
        reason: Some(reason.clone()),
        ..Reached::default()
    };
    let next: Next<Proposal> = async {
        let admin = extract(tick, s.config).await?;
        if s.config.credential.mode == CredentialMode::Federated {
            return federated(tick, s, admin, reason, &mut reached).await;
        }
        let (reason, candidate) = match s.config.credential.mode {
            CredentialMode::Minted => {
                let (reason, revoked, step) = minted(tick, s, admin, reason).await;
                reached.reason = Some(reason.clone());
                reached.revoked = revoked;
                match step? {
                    ControlFlow::Continue(c) => (reason, c),
                    ControlFlow::Break(end) => return Ok(ControlFlow::Break(end)),
                }
            }
            CredentialMode::Extracted | CredentialMode::Federated => {
                (reason, extracted(tick, s, admin)?)
            }
        };
        impersonation(tick, s.config, &candidate).await?;
        let recorded = record(tick, s, &candidate);
        reached.validated = Some(validated(&candidate, &recorded));
        let previous = s.seen.committed.recorded();
        let mode = s.config.credential.mode;
        let reason = match decide::after_extraction(reason, previous, &recorded, mode) {
            Extracted::Commit(reason) => reason,
            Extracted::Unchanged | Extracted::RootUnheld => {
                return Ok(ControlFlow::Break(Outcome::Unchanged));
            }
            Extracted::NotRenewed => return Ok(ControlFlow::Break(Outcome::NotRenewed)),
        };
        reached.reason = Some(reason.clone());
        let recorded = reached.committing.insert(recorded);
        let Some(manifest) = seal(tick, s, &candidate, recorded)? else {
            return Ok(ControlFlow::Break(Outcome::WouldRotate));
        };
        let live = &candidate.fresh.live;
        Ok(ControlFlow::Continue(Proposal {
            manifest,
            message: commit_message(s.config, &reason, previous, recorded, live),
            content_sha256: recorded.content_sha256,
            sealed_to: s.sealer.sealed_to(),
            revocation: candidate.revocation,
        }))
    }
    .await;
    let (outcome, proposal) = match next {
        Ok(ControlFlow::Continue(p)) => (Outcome::Healthy, Some(p)),
        Ok(ControlFlow::Break(end)) => (end, None),
        Err(e) => (Outcome::Failed(e), None),
    };
    if let (Outcome::Unchanged, Some(Reason::RootChanged { .. })) = (&outcome, &reached.reason) {
        remember_roots(tick.context, s.config, s.seen);
    }
    Reconciled {
        report: reached.report(s.seen, outcome),
        proposal,
    }
}

/// [trust] for a federated spoke: its trust of the hub written and proven, then the
/// ConfigMap proposed (committed only when something changed).
async fn federated(
    tick: &Tick<'_>,
    s: &Spoke<'_>,
    admin: Fresh,
    reason: Reason,
    reached: &mut Reached,
) -> Next<Proposal> {
    if tick.options.revoke && tick.options.drop_issuer && !tick.options.dry_run {
        // Nothing to commit: the ConfigMap stays, and Flux is refused until trust is back.
        let dropping = super::federated::drop_issuer(tick, s, &admin).await;
        if let Some((reason, binding)) = dropping.cut {
            reached.reason = Some(reason);
            reached.revoked = vec![binding];
        }
        dropping.end?;
        return Ok(ControlFlow::Break(Outcome::Unchanged));
    }
    let trusted = if tick.options.revoke {
        if tick.options.dry_run {
            return Ok(ControlFlow::Break(Outcome::WouldRotate));
        }
        let revoking = super::federated::revoke(tick, s, &admin).await;
        if let Some((reason, binding)) = revoking.cut {
            reached.reason = Some(reason);
            reached.revoked = vec![binding];
        }
        revoking.end?
    } else if tick.options.dry_run {
        // A dry run writes nothing on the node and binds nothing: what it would commit.
        super::federated::planned(tick, s, &admin)?
    } else {
        super::federated::trust(tick, s, &admin).await?
    };
    drop(admin);
    let mut credential = CredentialReport::of(&trusted.recorded);
    credential.user = Some(trusted.user.clone());
    reached.validated = Some((trusted.user, credential));
    let previous = s.seen.committed.recorded();
    let mode = CredentialMode::Federated;
    let reason = reached.reason.clone().unwrap_or(reason);
    let reason = match decide::after_extraction(reason, previous, &trusted.recorded, mode) {
        Extracted::Commit(reason) => reason,
        Extracted::Unchanged | Extracted::RootUnheld => {
            return Ok(ControlFlow::Break(Outcome::Unchanged));
        }
        Extracted::NotRenewed => return Ok(ControlFlow::Break(Outcome::NotRenewed)),
    };
    reached.reason = Some(reason.clone());
    let recorded = reached.committing.insert(trusted.recorded);
    if tick.options.dry_run {
        return Ok(ControlFlow::Break(Outcome::WouldRotate));
    }
    Ok(ControlFlow::Continue(Proposal {
        manifest: trusted.remote.to_yaml(),
        message: super::message::federated_message(s.config, &reason, previous, recorded),
        content_sha256: recorded.content_sha256,
        sealed_to: SealedTo::Nothing,
        revocation: None,
    }))
}

fn stage(tick: &Tick<'_>, spoke: &SpokeConfig, stage: &'static str) {
    tick.options.progress.emit(Step::Stage {
        spoke: &spoke.name,
        stage,
    });
}

/// decide: what is committed and the probe, weighed by the rule table (None: healthy).
/// A revoke goes on past an unreadable commit or a failed probe: what it cuts is on
/// the spoke, reached over SSH at the configured address, and the fleet repo (a symlink
/// or a recorded port of a pusher's) must not keep a leaked credential working.
fn decided(s: &Spoke<'_>, revoke: bool) -> Result<Option<Reason>, SpokeError> {
    let stopped = match &s.seen.committed {
        Committed::Unreadable(e) => SpokeError::Read(e.clone()),
        _ => match decide::decide(s.config, &s.seen.observed(), &s.policy) {
            Decision::Healthy => return Ok(None),
            Decision::Unreachable(e) => SpokeError::Unreachable(e),
            Decision::Rotate(reason) => return Ok(Some(reason)),
        },
    };
    if !revoke {
        return Err(stopped);
    }
    tracing::warn!(spoke = %s.config.name, error = %stopped, "revoking all the same");
    Ok(Some(Reason::Forced))
}

/// extract -> validate: the node's admin credential, proven against the live API.
async fn extract(tick: &Tick<'_>, spoke: &SpokeConfig) -> Result<Fresh, SpokeError> {
    stage(tick, spoke, "extract and validate");
    let limit = tick.context.live_timeout;
    let fresh = refresh::extract_and_validate(spoke, tick.now, limit).await?;
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
    revocation: Option<crate::mint::Revocation>,
    /// Minted this tick: the admin credential and the generation, until it is committed.
    minted_now: Option<(SecretBytes, u64)>,
    shortened: Option<crate::mint::Shortfall>,
}

/// [mint]: the hub's own credential, minted with the admin one just validated. Returns
/// the reason as the renewal left it and the bindings it deleted, whatever its end.
async fn minted(
    tick: &Tick<'_>,
    s: &Spoke<'_>,
    admin: Fresh,
    reason: Reason,
) -> (Reason, Vec<String>, Next<Candidate>) {
    stage(tick, s.config, "mint");
    let allowed = mint::Allowed {
        revoke: tick.options.revoke,
        after_push: tick.landing == Landing::AtPush,
        dry_run: tick.options.dry_run,
        call: tick.context.live_timeout,
        sign: tick.context.sign_timeout,
        unsealable: match (&s.sealer, tick.untrusted) {
            (Sealer::SealedSecrets(_), Some(u)) => Some(SpokeError::Untrusted(u.error.clone())),
            _ => s.sealer.can_seal(s.config).err().map(SpokeError::from),
        },
    };
    let held = held(s, &reason);
    let renewal = mint::renew(s.config, &admin.kubeconfig, &held, allowed).await;
    let next = renewal.end.map(|renewed| match renewed {
        mint::Renewed::Minted { minted, revocation } => {
            let m = *minted;
            ControlFlow::Continue(Candidate {
                minted_now: Some((admin.yaml, m.credential.generation)),
                credential: m.credential,
                fresh: Fresh {
                    kubeconfig: m.kubeconfig,
                    yaml: m.yaml,
                    content_sha256: m.content_sha256,
                    live: m.live,
                },
                revocation,
                shortened: m.shortened,
            })
        }
        mint::Renewed::Unchanged => ControlFlow::Break(Outcome::Unchanged),
        mint::Renewed::WouldMint => ControlFlow::Break(Outcome::WouldRotate),
    });
    (
        renewal.why.map_or(reason, Reason::from),
        renewal.revoked,
        next,
    )
}

/// The committed credential as mint reads it. A credential annotation that is there but
/// malformed (e.g. a generation above MAX_GENERATION, which would freeze the counter)
/// leaves the counter unknown; one removed reads as none minted, and the next generation
/// is above the spoke's bindings.
fn held<'a>(s: &'a Spoke<'_>, reason: &Reason) -> mint::Held<'a> {
    let recorded = s.seen.committed.recorded();
    let periodic = matches!(reason, Reason::Periodic | Reason::RootChanged { .. });
    let unknown = match &s.seen.committed {
        Committed::Invalid(Invalid {
            path,
            kind: InvalidKind::Annotations(e @ AnnotationError::Malformed { key, .. }),
        }) if key.starts_with("spokekeeper.io/credential-") => Some(GenerationError::Annotation {
            spoke: s.config.name.clone(),
            file: path.display().to_string(),
            detail: e.to_string(),
        }),
        _ => None,
    };
    mint::Held {
        credential: recorded.map(|r| r.credential.clone()).unwrap_or_default(),
        unknown,
        check: recorded
            .filter(|r| periodic && r.credential.mode == CredentialMode::Minted)
            .map(|r| mint::Check {
                ca_sha256: r.ca_sha256,
                ca_bundle: &r.ca_bundle,
                server: &r.server,
            }),
    }
}

/// Extracted: the admin credential itself is what the hub gets.
fn extracted(tick: &Tick<'_>, s: &Spoke<'_>, fresh: Fresh) -> Result<Candidate, SpokeError> {
    let spoke = s.config;
    if tick.options.revoke {
        return Err(SpokeError::RevokeExtracted {
            spoke: spoke.name.clone(),
        });
    }
    let had = s
        .seen
        .committed
        .recorded()
        .map(|r| r.credential.clone())
        .unwrap_or_default();
    // Back from minted: every minted generation goes once the hub has this one.
    let lands_at_push = tick.landing == Landing::AtPush;
    let revocation = (had.mode == CredentialMode::Minted && lands_at_push && !tick.options.dry_run)
        .then(|| crate::mint::Revocation {
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
async fn impersonation(
    tick: &Tick<'_>,
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
        crate::mint::withdraw(spoke, admin, *generation, tick.context.live_timeout).await;
    }
    checked
}

/// What the annotations will record.
fn record(tick: &Tick<'_>, s: &Spoke<'_>, c: &Candidate) -> Recorded {
    let fresh = &c.fresh;
    let sealed_to = s.sealer.sealed_to();
    let mut recorded = refresh::record(
        s.config,
        &fresh.kubeconfig,
        fresh.content_sha256,
        sealed_to,
        tick.now,
    );
    recorded.credential = c.credential.clone();
    recorded
}

/// The report's view of the new credential: who it authenticated as, and what it is.
fn validated(c: &Candidate, recorded: &Recorded) -> (String, CredentialReport) {
    let user = c.fresh.live.username.clone();
    let mut credential = CredentialReport::of(recorded);
    if c.credential.mode == CredentialMode::Extracted {
        // Extracted: who it authenticated as.
        credential.user = Some(user.clone());
    }
    credential.shortened = c.shortened.map(|s| s.to_string());
    (user, credential)
}

/// seal, unless the sealing key is untrusted (Sealed Secrets); None on a dry tick.
fn seal(
    tick: &Tick<'_>,
    s: &Spoke<'_>,
    c: &Candidate,
    recorded: &Recorded,
) -> Result<Option<String>, SpokeError> {
    stage(tick, s.config, "seal");
    if let (Sealer::SealedSecrets(_), Some(u)) = (&s.sealer, tick.untrusted) {
        return Err(SpokeError::Untrusted(u.error.clone()));
    }
    let annotations = recorded.to_annotations();
    let manifest = s
        .sealer
        .seal(s.config, &c.fresh.yaml, &annotations, tick.now)
        .map_err(SpokeError::from)?;
    Ok((!tick.options.dry_run).then_some(manifest))
}
