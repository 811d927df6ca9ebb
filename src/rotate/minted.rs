//! The minted step of a rotation (credential.mode: minted): with the admin credential
//! just extracted and validated, mint the next generation; and revoking what a newer
//! generation superseded. See docs/minted.md.

use std::time::Duration;

use super::decide::{self, MintedCheck, Reason};
use super::error::SpokeError;
use super::refresh::Fresh;
use super::state::{Recorded, RecordedCredential};
use crate::config::{CredentialMode, SpokeConfig};
use crate::mint::{self, MintError};
use crate::secret::SecretBytes;

/// Bindings to delete once the hub has the new credential: spokekeeper's, of
/// generations below `below`, with the admin credential kept in memory until then.
pub(crate) struct Revocation {
    pub admin: SecretBytes,
    pub below: u64,
}

impl std::fmt::Debug for Revocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Revocation(below {})", self.below)
    }
}

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
        /// Deleted before minting (`spokekeeper revoke`, review-mode cleanup).
        revoked: Vec<String>,
        /// The spoke issued less than credential.ttl.
        shortened: Option<mint::Shortfall>,
    },
}

/// How this tick runs the step.
pub(super) struct Run {
    /// `spokekeeper revoke`: delete the committed generation's binding first.
    pub revoke: bool,
    /// Review mode: nothing is revoked after the push.
    pub review: bool,
    /// Create and delete nothing on the spoke.
    pub dry_run: bool,
    /// Per API call.
    pub call: Duration,
    /// Waiting for the signer.
    pub sign: Duration,
}

fn failed(e: MintError) -> SpokeError {
    SpokeError::Mint(e.into())
}

/// `admin` is the extracted, validated admin credential; `reason` may be refined (a
/// periodic check that finds the binding gone says so).
pub(super) async fn step(
    spoke: &SpokeConfig,
    admin: Fresh,
    previous: Option<&Recorded>,
    reason: &mut Reason,
    run: &Run,
) -> Result<Step, SpokeError> {
    let (revoke_now, review, dry_run) = (run.revoke, run.review, run.dry_run);
    let limits = run;
    let had = previous.map(|r| r.credential.clone()).unwrap_or_default();
    let was_minted = had.mode == CredentialMode::Minted;
    let mut revoked = Vec::new();
    if revoke_now {
        if !was_minted {
            return Err(SpokeError::NotMinted {
                spoke: spoke.name.clone(),
                had: had.mode,
            });
        }
        if dry_run {
            return Ok(Step::WouldMint);
        }
        if mint::revoke(&admin.yaml, had.generation, limits.call)
            .await
            .map_err(failed)?
        {
            revoked.push(mint::binding_name(had.generation));
        }
        *reason = Reason::Revoked {
            generation: had.generation,
        };
    } else if let (Reason::Periodic, Some(prev)) = (&*reason, previous.filter(|_| was_minted)) {
        let user = had.user.as_deref().unwrap_or_default();
        let present = mint::binding_fits(
            &admin.yaml,
            had.generation,
            user,
            &spoke.credential,
            limits.call,
        )
        .await
        .map_err(failed)?;
        let kc = &admin.kubeconfig;
        let seen = MintedCheck {
            ca_sha256: kc.ca_certs()[0].fingerprint.as_kind(),
            server: &kc.server_string(),
            binding_present: present,
        };
        match decide::after_check(prev, &seen) {
            None => return Ok(Step::Unchanged),
            Some(r) => *reason = r,
        }
    }
    if dry_run {
        return Ok(Step::WouldMint);
    }
    // Review mode revokes nothing after its push (the hub takes the credential only when
    // the pull request is merged): the generations before the merged one go here.
    if review && was_minted && had.generation > 1 {
        match mint::revoke_older(&admin.yaml, had.generation, limits.call).await {
            Ok(names) => revoked.extend(names),
            Err(e) => {
                tracing::warn!(spoke = %spoke.name, error = %e, "cannot revoke older generations")
            }
        }
    }
    let bound = mint::highest_bound(&admin.yaml, limits.call)
        .await
        .map_err(failed)?;
    let generation = had.next_generation().max(bound.saturating_add(1));
    if generation != had.next_generation() {
        tracing::warn!(
            spoke = %spoke.name,
            recorded = had.generation,
            bound,
            "the recorded generation is behind the spoke's bindings (was the fleet repo's annotation changed?): minting above both"
        );
    }
    let request = mint::Request {
        spoke: &spoke.name,
        policy: &spoke.credential,
        generation,
        call_timeout: limits.call,
        sign_timeout: limits.sign,
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
        revoked,
        shortened,
    })
}
