//! The minted step of a rotation (credential.mode: minted): with the admin credential
//! just extracted and validated, mint the next generation; and revoking what a newer
//! generation superseded. See docs/minted.md.

use std::ops::ControlFlow;
use std::time::Duration;

use super::decide::{self, MintedCheck, Reason};
use super::direct::Landing;
use super::error::SpokeError;
use super::generation::{self, Bound, GenerationError};
use super::observe::{Committed, Invalid, InvalidKind};
use super::refresh::Fresh;
use super::state::AnnotationError;
use super::state::{Recorded, RecordedCredential};
use crate::config::{CredentialMode, SpokeConfig};
use crate::mint::{self, MintError};
use crate::secret::SecretBytes;

pub(super) enum Step {
    /// A periodic check found the committed minted credential still fits.
    Unchanged,
    /// --dry-run: would mint (nothing was created or deleted on the spoke).
    WouldMint,
    Minted {
        fresh: Box<Fresh>,
        credential: RecordedCredential,
        /// The admin credential, for the revocation after the push.
        admin: SecretBytes,
        /// The spoke issued less than credential.ttl.
        shortened: Option<mint::Shortfall>,
    },
}

/// How this tick runs the step.
pub(super) struct Mint {
    /// `spokekeeper revoke`: delete the committed generation's binding first.
    pub revoke: bool,
    /// At a merge (review mode): nothing is revoked after the push.
    pub landing: Landing,
    /// Create and delete nothing on the spoke.
    pub dry_run: bool,
    /// Per API call.
    pub call: Duration,
    /// Waiting for the signer.
    pub sign: Duration,
    /// Why what is minted could not be sealed this tick (an untrusted sealing certificate,
    /// a Secret `seal` refuses): then nothing is minted, since each mint binds a user.
    pub unsealable: Option<SpokeError>,
}

/// Minted: a credential annotation that is there but malformed (e.g. a generation above
/// MAX_GENERATION, which would freeze the counter) leaves the counter unknown, and a
/// guess could bind a revoked user again: nothing is minted until it is restored. One
/// removed reads as none minted, and the next generation is above the spoke's bindings.
pub(super) fn unknown_generation(
    spoke: &SpokeConfig,
    committed: &Committed,
) -> Option<GenerationError> {
    if spoke.credential.mode != CredentialMode::Minted {
        return None;
    }
    let Committed::Invalid(Invalid {
        path,
        kind: InvalidKind::Annotations(e),
    }) = committed
    else {
        return None;
    };
    if !matches!(e, AnnotationError::Malformed { key, .. } if key.starts_with("spokekeeper.io/credential-"))
    {
        return None;
    }
    Some(GenerationError::Annotation {
        spoke: spoke.name.clone(),
        file: path.display().to_string(),
        detail: e.to_string(),
    })
}

/// An earlier version's unscoped bindings are never left silently: the one of the
/// recorded user is this entry's and goes with its next revocation; any other is named
/// with the command that deletes it (spokekeeper cannot tell whose it is).
fn legacy_warnings(spoke: &SpokeConfig, legacy: &[mint::Bound], recorded: Option<&str>) {
    for b in legacy {
        if recorded.is_some() && b.user.as_deref() == recorded {
            continue;
        }
        tracing::warn!(
            spoke = %spoke.name,
            "ClusterRoleBinding {name} was made by an earlier spokekeeper (no spokekeeper.io/hub label) and binds {user}, not this spoke entry's recorded user: once no spoke entry of any spokekeeper records that user (annotation spokekeeper.io/credential-user), delete it: kubectl delete clusterrolebinding {name}",
            name = mint::shown(&b.name),
            user = b.user.as_deref().map_or("no single user".to_string(), mint::shown),
        );
    }
}

fn refused(spoke: &SpokeConfig, e: GenerationError) -> SpokeError {
    tracing::warn!(spoke = %spoke.name, error = %e, "refusing to mint");
    SpokeError::Generation(e)
}

fn failed(e: MintError) -> SpokeError {
    SpokeError::Mint(e.into())
}

/// `admin` is the extracted, validated admin credential; `reason` may be refined (a
/// periodic check that finds the binding gone says so); `revoked` gets the bindings
/// deleted, also when the step then fails.
pub(super) async fn step(
    spoke: &SpokeConfig,
    admin: Fresh,
    committed: &Committed,
    reason: &mut Reason,
    revoked: &mut Vec<String>,
    how: &Mint,
) -> Result<Step, SpokeError> {
    let previous = committed.recorded();
    let had = previous.map(|r| r.credential.clone()).unwrap_or_default();
    let was_minted = had.mode == CredentialMode::Minted;
    let unknown = unknown_generation(spoke, committed);
    let scope = mint::Scope::of(spoke);
    if let (Some(e), false) = (&unknown, how.revoke) {
        return Err(refused(spoke, e.clone()));
    }
    // Generations deleted this tick: the next one is above them too.
    let mut gone: Vec<mint::Bound> = Vec::new();
    if how.revoke {
        let now = revoke_now(spoke, &admin, &had, unknown, reason, revoked, how);
        match now.await? {
            ControlFlow::Continue(deleted) => gone = deleted,
            ControlFlow::Break(step) => return Ok(step),
        }
    } else if let (Reason::Periodic | Reason::RootChanged { .. }, Some(prev)) =
        (&*reason, previous.filter(|_| was_minted))
        && let Some(step) = periodic_check(spoke, &admin, prev, &had, &scope, reason, how).await?
    {
        return Ok(step);
    }
    if how.dry_run {
        return Ok(Step::WouldMint);
    }
    // Review mode revokes nothing after its push (the hub takes the credential only when
    // the pull request is merged): the generations before the merged one go here.
    if how.landing == Landing::AtMerge && was_minted && had.generation > 1 {
        let older = mint::revoke(&admin.yaml, &scope, Some(had.generation), None, how.call);
        match older.await {
            Ok(gone) => revoked.extend(gone.into_iter().map(|b| b.name)),
            Err(e) => {
                tracing::warn!(spoke = %spoke.name, error = %e, "cannot revoke older generations")
            }
        }
    }
    let generation = next_generation(spoke, &admin, &had, &scope, &gone, how).await?;
    if let Some(e) = &how.unsealable {
        return Err(e.clone());
    }
    mint_next(spoke, admin, generation, how).await
}

/// `spokekeeper revoke`: delete every binding of the entry on the spoke, then go on to
/// mint (Continue, with the bindings deleted) unless this is a dry run.
async fn revoke_now(
    spoke: &SpokeConfig,
    admin: &Fresh,
    had: &RecordedCredential,
    unknown: Option<GenerationError>,
    reason: &mut Reason,
    revoked: &mut Vec<String>,
    how: &Mint,
) -> Result<ControlFlow<Step, Vec<mint::Bound>>, SpokeError> {
    // A malformed annotation does not stop a revocation, only the mint after it.
    if had.mode != CredentialMode::Minted && unknown.is_none() {
        return Err(SpokeError::NotMinted {
            spoke: spoke.name.clone(),
            had: had.mode,
        });
    }
    if how.dry_run {
        return Ok(ControlFlow::Break(Step::WouldMint));
    }
    // Every binding on the spoke, not the one the fleet repo names: that annotation
    // may have been wound back to a generation long gone.
    let gone = mint::revoke(
        &admin.yaml,
        &mint::Scope::of(spoke),
        None,
        had.user.as_deref(),
        how.call,
    )
    .await
    .map_err(failed)?;
    // This hub's generations for the entry; an earlier version's binding adopted
    // with them carries its own counter.
    let found: Vec<u64> = gone
        .iter()
        .filter(|b| b.labels.hub.is_some())
        .filter_map(|b| b.generation)
        .collect();
    if found != [had.generation] {
        tracing::warn!(
            spoke = %spoke.name,
            recorded = had.generation,
            found = ?found,
            "the fleet repo's annotation {} disagrees with the bindings on the spoke: deleted every one",
            super::state::CREDENTIAL_GENERATION
        );
    }
    revoked.extend(gone.iter().map(|b| b.name.clone()));
    *reason = Reason::Revoked {
        generation: had.generation,
        found,
        users: gone
            .iter()
            .filter_map(|b| b.user.as_deref())
            .map(mint::shown)
            .collect(),
    };
    if let Some(e) = unknown {
        return Err(refused(spoke, e));
    }
    Ok(ControlFlow::Continue(gone))
}

/// A periodic tick of a committed minted credential, or one whose server presents a root
/// outside the recorded bundle: Unchanged while its binding still fits and the node's
/// bundle is the recorded one, else `reason` says why a new generation is minted.
async fn periodic_check(
    spoke: &SpokeConfig,
    admin: &Fresh,
    prev: &Recorded,
    had: &RecordedCredential,
    scope: &mint::Scope<'_>,
    reason: &mut Reason,
    how: &Mint,
) -> Result<Option<Step>, SpokeError> {
    let user = had.user.as_deref().unwrap_or_default();
    let binding = mint::binding_name(scope, had.generation);
    let present = mint::binding_fits(
        &admin.yaml,
        scope,
        had.generation,
        user,
        &spoke.credential,
        how.call,
    )
    .await
    .map_err(failed)?;
    let kc = &admin.kubeconfig;
    let bundle: Vec<Vec<u8>> = kc.ca_certs().iter().map(|c| c.der.clone()).collect();
    let seen = MintedCheck {
        ca_sha256: kc.ca_certs()[0].fingerprint.as_kind(),
        ca_bundle: &bundle,
        server: &kc.server_string(),
        binding_present: present,
        binding: &binding,
    };
    match decide::after_check(prev, &seen) {
        None => Ok(Some(Step::Unchanged)),
        Some(r) => {
            *reason = r;
            Ok(None)
        }
    }
}

/// The generation to mint: above the recorded one, the bindings on the spoke and those
/// deleted this tick (`gone`).
async fn next_generation(
    spoke: &SpokeConfig,
    admin: &Fresh,
    had: &RecordedCredential,
    scope: &mint::Scope<'_>,
    gone: &[mint::Bound],
    how: &Mint,
) -> Result<u64, SpokeError> {
    let listed = mint::bound(&admin.yaml, scope, how.call)
        .await
        .map_err(failed)?;
    legacy_warnings(spoke, &listed.legacy, had.user.as_deref());
    let bound: Vec<Bound> = listed
        .ours
        .iter()
        .chain(gone.iter().filter(|b| b.labels.hub.is_some()))
        .map(|b| (b.name.clone(), b.generation))
        .collect();
    let file = spoke.output.display().to_string();
    let generation = generation::next(&spoke.name, &file, had.generation, &bound)
        .map_err(|e| refused(spoke, e))?;
    if generation != had.next_generation() {
        tracing::warn!(
            spoke = %spoke.name,
            recorded = had.generation,
            generation,
            "the recorded generation is behind the spoke's bindings (was the fleet repo's annotation changed?): minting above both"
        );
    }
    Ok(generation)
}

/// Mint `generation` with the admin credential.
async fn mint_next(
    spoke: &SpokeConfig,
    admin: Fresh,
    generation: u64,
    how: &Mint,
) -> Result<Step, SpokeError> {
    let request = mint::Request {
        spoke: &spoke.name,
        policy: &spoke.credential,
        generation,
        call_timeout: how.call,
        sign_timeout: how.sign,
    };
    let minted = mint::mint(&admin.kubeconfig, &request)
        .await
        .map_err(failed)?;
    let credential = RecordedCredential {
        mode: CredentialMode::Minted,
        user: Some(minted.user.clone()),
        generation,
    };
    let shortened = minted.shortened;
    let fresh = Fresh {
        kubeconfig: minted.kubeconfig,
        yaml: minted.yaml,
        content_sha256: minted.content_sha256,
        live: minted.live,
    };
    Ok(Step::Minted {
        fresh: Box::new(fresh),
        credential,
        admin: admin.yaml,
        shortened,
    })
}
