//! Review mode (`repo.mode: pull-request`): a rotation becomes a branch
//! `spokekeeper/<spoke>` and a pull request instead of a commit on the target branch.
//!
//! - **Decide** runs against the target branch's committed state, as in direct mode (the
//!   clone's checkout stays on the target branch; review commits are made with plumbing
//!   on a private index and pushed by commit id).
//! - **Pending**: when the target branch says "rotate", the spoke's review branch is
//!   read (`origin/spokekeeper/<spoke>`, fetched each tick). If the branch is not merged
//!   and its manifest, put through the same decision with the same probe, would be
//!   healthy, the fix is already waiting for review: the spoke is *pending*, nothing is
//!   extracted, and the open pull request is looked up (and opened again when there is
//!   none, e.g. the forge failed on an earlier tick). If the branch's manifest would
//!   itself be rotated (the spoke was rebuilt again, the sealing key changed, its client
//!   certificate is expiring) the spoke is re-extracted and the branch is replaced with
//!   `--force-with-lease` on the head we read; the same pull request is updated. A fresh
//!   credential with the same content hash as the branch's is not pushed again.
//!   `--force` always re-extracts.
//! - **Provenance**: a branch counts only when it is provably spokekeeper's own
//!   ([`crate::repo::Repo::provenance`]: its head is signed with `repo.signing_key`, one
//!   commit on the target branch, changing the spoke's file alone (or, made by
//!   `spokekeeper add`, adding it with the new files its trailer names), and exactly the
//!   commit this clone last pushed there). Any other branch is treated as absent: the spoke is
//!   re-extracted, the branch replaced with a lease on the head we saw, a warning logged,
//!   and the pull request body names the replaced head. A pull request is pending only
//!   while the forge shows that same head; its title and body are spokekeeper's.
//! - **Merged**: the next tick sees a healthy target branch and touches nothing. The
//!   merged branch is left on the remote (the forge can delete it on merge); it is
//!   ignored because its head is in the target branch, and a later rotation replaces it.
//! - **Forge errors**: the branch is always pushed before the forge is called, so a
//!   forge failure loses nothing: the spoke is reported failed at stage `review`, and the
//!   next tick finds the branch pending and opens the pull request then.

mod open;
mod pr_text;
mod publish;
mod push_branch;
mod removal;
mod settle;

use time::OffsetDateTime;

use std::sync::Arc;

use super::context::Spoke;
use super::decide::{self, Decision, Observed, Policy};
use super::error::{ForgeFailure, ReviewError, SpokeError};
use super::state::Recorded;
use super::{Context, Outcome};
use crate::config::{RepoMode, SpokeConfig};
use crate::forge::{Forge, ForgeError, PullRequest};
use crate::repo::{BranchState, Untrusted};
use crate::rotate::observe::Output;
use crate::spoke::{Judged, ProbeError, ProbeReport};

pub use open::{open_removals, open_reviews};
pub use pr_text::human;
pub use removal::removal_branch;
// For message.rs's tests, which check a commit message makes a good pull request.
#[cfg(test)]
pub(crate) use pr_text::describe;

/// Review mode for one tick: the forge client (or why there is none).
pub struct Review {
    forge: Result<Forge, Arc<ForgeError>>,
    /// Why the gate refused a side effect this tick (the rest waits for a tick that may).
    refused: std::sync::Mutex<Option<String>>,
    /// The removal branches this clone recorded a push to, listed once a tick: only
    /// those spokes are asked whether their removal landed.
    removals: std::collections::BTreeSet<String>,
}

/// The unmerged review branch of a spoke.
pub struct Branch {
    pub head: String,
    /// Why it is not provably spokekeeper's own (None: its head is signed with
    /// repo.signing_key, on the target branch, and changes only the spoke's file).
    pub untrusted: Option<Untrusted>,
    /// The manifest it holds, when it holds a readable one.
    pub recorded: Option<(Output, Recorded)>,
}

/// The branch a spoke's pull request is pushed to.
pub fn branch_name(spoke: &SpokeConfig) -> String {
    format!("{}{}", crate::repo::BRANCH_PREFIX, spoke.name)
}

impl Review {
    /// None in direct mode. Fetches the review branches; a forge that cannot be set up
    /// (no token) is reported per spoke, after its branch is pushed.
    pub async fn start(ctx: &Context) -> Option<Review> {
        let cfg = ctx.config.repo.forge.as_ref()?;
        if ctx.config.repo.mode != RepoMode::PullRequest {
            return None;
        }
        if let Err(e) = ctx.repo.fetch_review_branches().await {
            tracing::warn!(error = %e, "cannot fetch the review branches; using the last fetched");
        }
        let removals = match ctx.repo.pushed_branches().await {
            Ok(all) => all.into_iter().collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the clone's push records: no merged removal is taken up this tick");
                Default::default()
            }
        };
        Some(Review {
            forge: Forge::new(cfg).map_err(Arc::new),
            refused: std::sync::Mutex::new(None),
            removals,
        })
    }

    /// The spoke's review branch, unless there is none or it is merged.
    pub async fn branch(&self, ctx: &Context, spoke: &SpokeConfig) -> Option<Branch> {
        let name = branch_name(spoke);
        let head = ctx.repo.remote_branch_head(&name).await?;
        let untrusted = match ctx.repo.branch_state(&name, &head, &spoke.output).await {
            BranchState::Merged => return None,
            BranchState::Open(proven) => proven.err(),
        };
        let recorded = held(ctx, &head, spoke).await;
        Some(Branch {
            head,
            untrusted,
            recorded,
        })
    }

    /// The pending outcome when the spoke's fix already waits on its branch. Probes the
    /// spoke when the target branch gave nothing to probe with.
    async fn waiting_on_branch(&self, ctx: &Context, s: &Spoke<'_>) -> Option<Outcome> {
        let (spoke, seen) = (s.config, s.seen);
        let branch = self.branch(ctx, spoke).await?;
        if let Some(why) = &branch.untrusted {
            tracing::warn!(spoke = %spoke.name, branch = %branch_name(spoke), head = %branch.head, reason = %why, "review branch not trusted: re-extracting; the branch will be replaced");
            return None;
        }
        // The target branch gave nothing to probe with: the branch's record may.
        let recorded = branch.recorded.as_ref().map(|(_, r)| r);
        let server = recorded.and_then(|r| decide::expected_server(spoke, Some(r)));
        let own = match (&seen.probe, server) {
            (None, Some(server)) => Some(crate::spoke::probe(&server, ctx.probe_timeout).await),
            _ => None,
        };
        let probe = seen.probe.as_ref().or(own.as_ref());
        let ca = match (probe, recorded) {
            (Some(Ok(p)), Some(r)) => super::observe::judged(p, r).await,
            _ => None,
        };
        branch_fixes(spoke, &branch, probe, ca.as_ref(), &s.policy).then(|| Outcome::Pending {
            branch: branch_name(spoke),
            commit: None,
            pull_request: None,
            change: None,
            pending_seconds: None,
        })
    }
}

/// The spoke's manifest at `head` and what it records, when it holds a readable one.
async fn held(ctx: &Context, head: &str, spoke: &SpokeConfig) -> Option<(Output, Recorded)> {
    let bytes = ctx.repo.show(head, &spoke.output).await.ok()??;
    let sealed = Output::parse(&bytes).ok()?;
    let recorded = Recorded::from_annotations(sealed.annotations()).ok()?;
    Some((sealed, recorded))
}

/// Whether the branch's manifest would be healthy: the fix is waiting for review.
/// `ca`: the probed chain judged against the branch's bundle.
pub(crate) fn branch_fixes(
    spoke: &SpokeConfig,
    branch: &Branch,
    probe: Option<&Result<ProbeReport, ProbeError>>,
    ca: Option<&Judged>,
    policy: &Policy,
) -> bool {
    if branch.untrusted.is_some() {
        return false;
    }
    let Some((sealed, recorded)) = &branch.recorded else {
        return false;
    };
    let seen = Observed {
        committed: Some(Ok((sealed, recorded))),
        probe,
        ca,
    };
    let policy = Policy {
        now: policy.now,
        renew_before: policy.renew_before,
        sealed_to: policy.sealed_to,
        force: false,
        verify_due: false,
        roots_seen: false,
        trust_refused: None,
        trust_sha256: policy.trust_sha256,
    };
    decide::decide(spoke, &seen, &policy) == Decision::Healthy
}

/// The forge failed for the spoke's branch: what was kept is said beside it.
fn forge_failed(branch: &str, pushed: Option<&str>, error: ForgeFailure) -> SpokeError {
    let kept = match pushed {
        Some(sha) => format!(
            "branch {branch} pushed at {}",
            sha.chars().take(12).collect::<String>()
        ),
        None => format!("branch {branch} kept"),
    };
    SpokeError::Review(ReviewError::Forge { kept, error })
}

fn age(pr: &PullRequest, now: OffsetDateTime) -> u64 {
    (now - pr.created_at).whole_seconds().max(0) as u64
}
