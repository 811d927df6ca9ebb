//! What a tick reports: per spoke (outcome, credential, hub) and for the tick (the
//! sealing certificate, the fleet repo). The CLI, the metrics and the alerts render it.

use std::sync::Arc;

use time::OffsetDateTime;

use super::decide::Reason;
use super::error::SpokeError;
use super::observe::Observation;
use super::state::Recorded;
use crate::fingerprint::{Ca, Fingerprint};
use crate::repo::RepoError;
use crate::seal::SealingKey;

/// What happened to one spoke.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Outcome {
    /// Nothing needed doing (no SSH).
    #[default]
    Healthy,
    /// Re-extracted on schedule; the same credential: nothing to commit.
    Unchanged,
    /// A fresh credential was committed (and pushed, unless the push failed).
    Rotated { commit: String },
    /// --dry-run: would have committed this.
    WouldRotate,
    /// The client certificate is expiring and the node has not renewed it yet.
    NotRenewed,
    /// Stopped at the error's stage; the committed credential is untouched.
    Failed(SpokeError),
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

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SpokeReport {
    pub spoke: String,
    #[serde(flatten)]
    pub outcome: Outcome,
    pub reason: Option<Reason>,
    /// The CA the hub's credential trusts after this tick.
    pub ca_sha256: Option<Fingerprint<Ca>>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub ca_not_after: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub client_not_after: Option<OffsetDateTime>,
    /// The committed credential's `rotated-at` as the tick found it (for the
    /// last-rotation gauge after a restart).
    #[serde(skip)]
    pub rotated_at: Option<OffsetDateTime>,
    /// Who the new credential authenticated as, when one was validated.
    pub user: Option<String>,
    /// After a push with `hub:` configured: whether the hub unsealed it and Flux is Ready.
    /// (Boxed: most reports have none, and a tick holds one report a spoke.)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hub: Option<Box<crate::hub::verify::HubReport>>,
    /// The hub's credential for this spoke after this tick, when known.
    pub credential: Option<CredentialReport>,
    /// Minted: the ClusterRoleBindings deleted this tick (older generations, or the
    /// revoked one), so those credentials no longer work. Federated (`spokekeeper
    /// revoke`): the binding emptied at once, made again for the new audience.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub revoked: Vec<String>,
    /// Why superseded generations could not be revoked (they stay valid until they
    /// expire, or until the next minted rotation deletes them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoke_error: Option<String>,
    /// Federated, its old Secret still committed: where its removal stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration: Option<Box<super::migrate::Migration>>,
}

/// What kind of credential the hub holds for a spoke (`credential` in -o json).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CredentialReport {
    pub mode: crate::config::CredentialMode,
    /// Minted: the user the certificate was signed for. Extracted: who it authenticated as.
    pub user: Option<String>,
    /// Minted: the generation counter (the user and its binding carry it). Federated:
    /// the audience generation (each `spokekeeper revoke` moves to the next).
    pub generation: Option<u64>,
    /// Federated: the audience the spoke trusts hub tokens for, as the ConfigMap says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// The client certificate's notAfter (minted: the signed certificate's).
    #[serde(with = "time::serde::rfc3339::option")]
    pub not_after: Option<OffsetDateTime>,
    /// Minted this tick: the spoke issued less than credential.ttl, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shortened: Option<String>,
}

impl CredentialReport {
    /// What the recorded annotations say.
    pub fn of(r: &Recorded) -> CredentialReport {
        use crate::config::CredentialMode;
        let federated = r.credential.mode == CredentialMode::Federated;
        let counted = r.credential.mode != CredentialMode::Extracted;
        CredentialReport {
            mode: r.credential.mode,
            user: r.credential.user.clone(),
            generation: counted.then_some(r.credential.generation),
            audience: federated
                .then(|| crate::federate::audience(&r.server, r.credential.generation)),
            not_after: r.client_not_after,
            shortened: None,
        }
    }
}

impl SpokeReport {
    /// `spoke` with `outcome`, before anything else is known.
    pub fn new(spoke: &str, outcome: Outcome) -> SpokeReport {
        SpokeReport {
            spoke: spoke.to_string(),
            outcome,
            ..SpokeReport::default()
        }
    }

    pub fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Failed(_))
    }
}

#[derive(Debug, Default, serde::Serialize)]
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
    /// Each spoke as the tick observed it, with what its commit left (the alerts grade
    /// them), without ciphertext.
    #[serde(skip)]
    pub observed: Vec<Observation>,
    /// Each issuer federated spokes trust, as fetched from here this tick (the alerts
    /// grade them).
    #[serde(skip)]
    pub issuers: crate::federate::issuer::Looked,
}

impl TickReport {
    /// Just these spokes: nothing pushed, no repo error, no hub.
    pub fn of(spokes: Vec<SpokeReport>) -> TickReport {
        TickReport {
            spokes,
            ..TickReport::default()
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

/// How the fleet repo failed in a tick. Only its [`RepoStage`] becomes a metric label,
/// so label values come from a fixed set, never from error text.
#[derive(Clone, Debug)]
pub enum RepoFailure {
    /// Fetching and rebasing onto the remote (the tick went on from the local clone).
    Sync(Arc<RepoError>),
    /// Pushing the tick's commits.
    Push(Arc<RepoError>),
    /// The push was not attempted: this process may no longer act (`why`: the Lease's
    /// words). The commits wait in the clone for the next tick or the new leader.
    NotPushed { why: String },
    /// Review mode: the clone holds commits that only a push of the target branch would
    /// publish, and review mode never pushes it.
    Unpushed {
        commits: usize,
        remote: String,
        branch: String,
        clone: std::path::PathBuf,
    },
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

    pub(crate) fn metric_label(self) -> &'static str {
        match self {
            RepoStage::Sync => "sync",
            RepoStage::Push => "push",
            RepoStage::Unpushed => "unpushed",
        }
    }
}

impl RepoFailure {
    pub fn stage(&self) -> RepoStage {
        match self {
            RepoFailure::Sync(_) => RepoStage::Sync,
            RepoFailure::Push(_) | RepoFailure::NotPushed { .. } => RepoStage::Push,
            RepoFailure::Unpushed { .. } => RepoStage::Unpushed,
        }
    }
}

/// The text reports and logs have always shown: "sync: ...", "push: ...", or the
/// unpushed-commits message alone.
impl std::fmt::Display for RepoFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RepoFailure::Sync(e) => write!(f, "sync: {e}"),
            RepoFailure::Push(e) => write!(f, "push: {e}"),
            RepoFailure::NotPushed { why } => write!(f, "push: not pushed: {why}"),
            RepoFailure::Unpushed {
                commits,
                remote,
                branch,
                clone,
            } => write!(
                f,
                "the clone has {commits} commit(s) that {remote}/{branch} does not: review mode never pushes the target branch; push or drop them by hand (git -C {} log @{{u}}..)",
                clone.display()
            ),
        }
    }
}

impl std::error::Error for RepoFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RepoFailure::Sync(e) | RepoFailure::Push(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

/// JSON keeps today's string, so scripts reading `repo_error` keep working.
impl serde::Serialize for RepoFailure {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_error_serializes_as_the_text_it_always_had() {
        let json = |failure| {
            let r = TickReport {
                repo_error: Some(failure),
                ..TickReport::of(vec![])
            };
            serde_json::to_value(&r).unwrap()["repo_error"].clone()
        };
        let git = |stderr: &str| {
            Arc::new(RepoError::Git {
                args: "push".into(),
                stderr: stderr.into(),
            })
        };
        assert_eq!(
            json(RepoFailure::Push(git("rejected"))),
            "push: git push failed: rejected"
        );
        assert_eq!(
            json(RepoFailure::Sync(git("offline"))),
            "sync: git push failed: offline"
        );
        let lost = RepoFailure::NotPushed {
            why: "lease lost".into(),
        };
        assert_eq!(lost.stage(), RepoStage::Push);
        assert_eq!(json(lost), "push: not pushed: lease lost");
        let left = RepoFailure::Unpushed {
            commits: 1,
            remote: "origin".into(),
            branch: "main".into(),
            clone: "/srv/fleet".into(),
        };
        assert_eq!(left.stage(), RepoStage::Unpushed);
        assert_eq!(
            json(left),
            "the clone has 1 commit(s) that origin/main does not: review mode never pushes the target branch; push or drop them by hand (git -C /srv/fleet log @{u}..)"
        );
    }
}
