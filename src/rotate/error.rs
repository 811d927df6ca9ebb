//! Why a spoke's pipeline stopped: one typed error per way it can stop, each knowing its
//! stage (the `stage` of `-o json` and of `spokekeeper_errors_total`). The committed
//! credential is untouched whenever a spoke fails.
//!
//! Causes are kept whole (behind `Arc`, so reports stay cheap to clone) and printed
//! once, with the message: `-o json` carries `stage` and `error`, the text as always.

use std::sync::Arc;

use crate::forge::ForgeError;
use crate::kubeconfig::KubeconfigError;
use crate::mint::MintError;
use crate::repo::RepoError;
use crate::seal::SealingError;
use crate::spoke::{ExtractError, LiveError, ProbeError};

/// Where a spoke's pipeline stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    Observe,
    Probe,
    Extract,
    Validate,
    /// Minting the credential with the admin one (credential.mode: minted).
    Mint,
    /// Writing and proving the spoke's trust of the hub (credential.mode: federated).
    Trust,
    Seal,
    Commit,
    Push,
    /// Opening or updating the pull request (`repo.mode: pull-request`).
    Review,
}

impl Stage {
    pub const ALL: [Stage; 10] = [
        Stage::Observe,
        Stage::Probe,
        Stage::Extract,
        Stage::Validate,
        Stage::Mint,
        Stage::Trust,
        Stage::Seal,
        Stage::Commit,
        Stage::Push,
        Stage::Review,
    ];

    /// The `stage` label of `spokekeeper_errors_total` (the JSON name, as a constant).
    pub(crate) fn metric_label(self) -> &'static str {
        match self {
            Stage::Observe => "observe",
            Stage::Probe => "probe",
            Stage::Extract => "extract",
            Stage::Validate => "validate",
            Stage::Mint => "mint",
            Stage::Trust => "trust",
            Stage::Seal => "seal",
            Stage::Commit => "commit",
            Stage::Push => "push",
            Stage::Review => "review",
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.metric_label())
    }
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum SpokeError {
    /// The clone could not be read.
    #[error("{0}")]
    Read(Arc<RepoError>),
    /// The probe of the API server failed: nothing is touched.
    #[error("{0}")]
    Unreachable(ProbeError),
    #[error("{0}")]
    Extract(Arc<ExtractError>),
    /// The extracted kubeconfig does not parse, sanitize or point at the spoke, or a
    /// certificate in it is not valid now.
    #[error("{0}")]
    Kubeconfig(Arc<KubeconfigError>),
    #[error("the new credential does not work against the live API: {0}")]
    Live(Arc<LiveError>),
    /// A consumer's spec.serviceAccountName makes Flux impersonate a ServiceAccount the
    /// new credential may not impersonate.
    #[error(
        "the new credential ({user}) may not impersonate ServiceAccount {service_account} (missing verb impersonate on serviceaccounts, checked with a SelfSubjectAccessReview), which {consumer} makes Flux impersonate (spec.serviceAccountName): Flux would fail with it; grant the credential impersonate on that ServiceAccount (credential.cluster_role, or a binding of its own), or drop spec.serviceAccountName"
    )]
    Impersonate {
        user: String,
        service_account: String,
        consumer: String,
    },
    /// Minting (or, for a validation failure of the admin credential, validating), and
    /// revoking or refusing to mint.
    #[error("{0}")]
    Mint(Arc<MintError>),
    /// A federated spoke does not trust the hub, or its trust could not be written or proven.
    #[error("{0}")]
    Federate(Arc<crate::federate::FederateError>),
    /// `spokekeeper revoke` on a spoke configured federated whose committed output is not
    /// (`had`: its credential.mode; None: nothing is committed).
    #[error(
        "{spoke} is configured with credential.mode: federated, but {}: there is no federated trust to revoke yet (spokekeeper rotate {spoke} commits one; to revoke a minted credential, set credential.mode: minted back and revoke)",
        match had {
            Some(mode) => format!("its committed credential is {mode}"),
            None => "nothing is committed for it".to_string(),
        }
    )]
    RevokeFederated {
        spoke: String,
        had: Option<crate::config::CredentialMode>,
    },
    /// `spokekeeper revoke` on a spoke whose configuration extracts.
    #[error(
        "{spoke} is configured with credential.mode: extracted: there is no minted credential to revoke (set credential.mode: minted)"
    )]
    RevokeExtracted { spoke: String },
    /// The tick's sealing certificate is not trusted: nothing is sealed to it.
    #[error("{0}")]
    Untrusted(String),
    /// The spoke's output cannot be sealed (its sealer, or the sealing itself).
    #[error("{0}")]
    Seal(Arc<SealingError>),
    #[error("{0}")]
    Commit(Arc<RepoError>),
    #[error("nothing changed in the file (unexpected: sealing is randomized)")]
    Unchanged,
    /// `spokekeeper add`: a file to commit beside the credential is not as it was when
    /// the change was computed (it exists now, or the remote changed it).
    #[error(
        "{file} {why} on the target branch: nothing was committed; run `spokekeeper add` again"
    )]
    BesideMoved { file: String, why: &'static str },
    /// Review mode: the spoke's branch was not pushed (the gate refused, or git failed).
    #[error("branch {branch} not pushed: {why}")]
    NotPushed { branch: String, why: String },
    #[error("branch {branch}: {error}")]
    BranchPush {
        branch: String,
        error: Arc<RepoError>,
    },
    /// Review mode: the pull request could not be opened, updated or endorsed.
    #[error("{0}")]
    Review(ReviewError),
}

/// How review mode failed after or instead of pushing a branch.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ReviewError {
    #[error(
        "branch {branch} is no longer provably spokekeeper's: {why} (the next tick replaces it)"
    )]
    NotOurs { branch: String, why: String },
    /// The branch is pushed (or kept); the forge could not be written to.
    #[error(
        "{kept}; the pull request could not be opened or updated (the next tick retries): {error}"
    )]
    Forge { kept: String, error: ForgeFailure },
    /// The forge shows another head than the one spokekeeper pushed and verified.
    #[error("{0}")]
    Unverified(String),
    /// `check`: an open pull request whose head spokekeeper cannot vouch for.
    #[error(
        "unverified pull request {url}: {why}; spokekeeper does not vouch for what it carries: review it as anyone else's change (spokekeeper replaces the branch when it next rotates {spoke})"
    )]
    NotEndorsed {
        url: String,
        why: Unendorsed,
        spoke: String,
    },
    #[error("cannot look up the pull request of {branch}: {error}")]
    Lookup { branch: String, error: ForgeFailure },
}

/// Why a sealing certificate could not be pinned: written, committed, or proposed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PinError {
    /// sealing.cert is outside the fleet repo and could not be written.
    #[error("{}: {error}", path.display())]
    Write {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    /// Inside the fleet repo: it could not be written there or committed.
    #[error(transparent)]
    Repo(#[from] RepoError),
    /// Review mode: its branch could not be committed or pushed.
    #[error("branch {branch}: {error}")]
    Branch {
        branch: &'static str,
        error: RepoError,
    },
    /// Review mode: its pull request.
    #[error(transparent)]
    Review(#[from] ReviewError),
}

/// Why an open pull request is not provably the commit spokekeeper pushed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Unendorsed {
    #[error("this clone has no record of spokekeeper pushing {branch}")]
    NoRecord { branch: String },
    #[error("the forge does not say which commit it shows")]
    NoHead,
    #[error("the forge shows head {shown}, spokekeeper last pushed {pushed}")]
    OtherHead { shown: String, pushed: String },
    #[error("its head {head}: {why}")]
    Untrusted {
        head: String,
        // Boxed: large, and rare.
        why: Box<crate::repo::Untrusted>,
    },
}

/// Why the forge could not be used.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ForgeFailure {
    #[error("{0}")]
    Forge(Arc<ForgeError>),
    /// The forge client could not be set up (e.g. no token).
    #[error("{0}")]
    Setup(Arc<ForgeError>),
    /// The gate refused: this process may no longer act.
    #[error("not sent: {0}")]
    NotSent(String),
}

impl SpokeError {
    /// Where the pipeline stopped.
    pub fn stage(&self) -> Stage {
        match self {
            SpokeError::Read(_) => Stage::Observe,
            SpokeError::Unreachable(_) => Stage::Probe,
            SpokeError::Extract(_) => Stage::Extract,
            SpokeError::Kubeconfig(_) | SpokeError::Live(_) => Stage::Validate,
            SpokeError::Impersonate { .. } => Stage::Validate,
            SpokeError::Mint(e) if e.is_validation() => Stage::Validate,
            SpokeError::Mint(_) | SpokeError::RevokeExtracted { .. } => Stage::Mint,
            SpokeError::Federate(_) | SpokeError::RevokeFederated { .. } => Stage::Trust,
            SpokeError::Untrusted(_) | SpokeError::Seal(_) => Stage::Seal,
            SpokeError::Commit(_) | SpokeError::Unchanged | SpokeError::BesideMoved { .. } => {
                Stage::Commit
            }
            SpokeError::NotPushed { .. } | SpokeError::BranchPush { .. } => Stage::Push,
            SpokeError::Review(_) => Stage::Review,
        }
    }

    /// The `stage` label of `spokekeeper_errors_total`: from a fixed set.
    pub(crate) fn metric_label(&self) -> &'static str {
        self.stage().metric_label()
    }
}

impl From<MintError> for SpokeError {
    fn from(e: MintError) -> SpokeError {
        SpokeError::Mint(Arc::new(e))
    }
}

impl From<SealingError> for SpokeError {
    fn from(e: SealingError) -> SpokeError {
        SpokeError::Seal(Arc::new(e))
    }
}

/// Two failures are the same when they stopped at the same stage saying the same.
impl PartialEq for SpokeError {
    fn eq(&self, other: &Self) -> bool {
        self.stage() == other.stage() && self.to_string() == other.to_string()
    }
}

impl Eq for SpokeError {}

/// `{"stage": ..., "error": ...}`, as `-o json` has always said it.
impl serde::Serialize for SpokeError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("SpokeError", 2)?;
        st.serialize_field("stage", &self.stage())?;
        st.serialize_field("error", &self.to_string())?;
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_as_stage_and_text() {
        let e = SpokeError::NotPushed {
            branch: "spokekeeper/dev".into(),
            why: "not the leader".into(),
        };
        assert_eq!(e.metric_label(), "push");
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({"stage": "push", "error": "branch spokekeeper/dev not pushed: not the leader"})
        );
        let unchanged = SpokeError::Unchanged;
        assert_eq!(unchanged.stage(), Stage::Commit);
        assert_ne!(unchanged, e);
    }

    /// Whatever stops a spoke's sealing fails it at `seal`, saying the sealer's message.
    #[test]
    fn a_sealing_error_fails_at_seal_with_its_message() {
        let e = SpokeError::from(SealingError::NoSealingCert {
            spoke: "dev".into(),
        });
        assert_eq!(e.stage(), Stage::Seal);
        assert!(
            e.to_string()
                .starts_with("dev: seals with Sealed Secrets, but no sealing certificate"),
            "{e}"
        );
    }
}
