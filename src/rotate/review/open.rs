//! For `check`: the open pull requests and whether each is endorsed.

use time::OffsetDateTime;

use std::sync::Arc;

use super::{age, branch_name};
use crate::config::SpokeConfig;
use crate::forge::{self, Forge, PullRequest};
use crate::rotate::error::{ForgeFailure, ReviewError, SpokeError, Unendorsed};
use crate::rotate::{Outcome, SpokeReport};

/// For `check`: the open pull request of each named spoke, as a tick report that holds
/// only pending spokes (and those whose look-up failed). A pull request counts as
/// pending only when the forge shows the commit this clone last pushed to the branch
/// and that commit passes [`crate::repo::Repo::provenance`]; any other is reported as an
/// unverified pull request (failed at `review`), never as a validated fix. Reads the
/// forge and the clone; fetches nothing.
pub async fn open_reviews(
    config: &crate::config::Config,
    repo: &crate::repo::Repo,
    spokes: &[String],
) -> crate::rotate::TickReport {
    let mut out = Vec::new();
    let forge = config
        .repo
        .forge
        .as_ref()
        .map(|f| Forge::new(f).map_err(Arc::new));
    let Some(forge) = forge else {
        return crate::rotate::TickReport::of(out);
    };
    let now = OffsetDateTime::now_utc();
    for spoke in config.spokes.iter().filter(|s| spokes.contains(&s.name)) {
        let branch = branch_name(spoke);
        let found = match &forge {
            Ok(f) => f
                .find_open(&branch, &config.repo.branch)
                .await
                .map_err(|e| ForgeFailure::Forge(e.into())),
            Err(e) => Err(ForgeFailure::Setup(e.clone())),
        };
        let outcome = match found {
            Ok(None) => continue,
            Ok(Some(open)) => match endorsed(repo, spoke, &branch, &open).await {
                Ok(()) => Outcome::Pending {
                    branch,
                    commit: None,
                    pending_seconds: Some(age(&open.pr, now)),
                    pull_request: Some(open.pr),
                    change: None,
                },
                Err(why) => Outcome::Failed(SpokeError::Review(ReviewError::NotEndorsed {
                    url: open.pr.url.clone(),
                    why,
                    spoke: spoke.name.clone(),
                })),
            },
            Err(error) => {
                Outcome::Failed(SpokeError::Review(ReviewError::Lookup { branch, error }))
            }
        };
        out.push(SpokeReport::new(&spoke.name, outcome));
    }
    crate::rotate::TickReport::of(out)
}

/// Whether the forge's pull request shows the commit this clone last pushed to
/// `branch`, and that commit is provably spokekeeper's; else why not.
async fn endorsed(
    repo: &crate::repo::Repo,
    spoke: &SpokeConfig,
    branch: &str,
    open: &forge::Open,
) -> Result<(), Unendorsed> {
    let Some(recorded) = repo.pushed(branch).await else {
        return Err(Unendorsed::NoRecord {
            branch: branch.into(),
        });
    };
    match open.head.as_deref() {
        None => return Err(Unendorsed::NoHead),
        Some(h) if h != recorded => {
            return Err(Unendorsed::OtherHead {
                shown: h.into(),
                pushed: recorded,
            });
        }
        Some(_) => {}
    }
    repo.provenance(branch, &recorded, &spoke.output)
        .await
        .map_err(|why| Unendorsed::Untrusted {
            head: recorded,
            why: Box::new(why),
        })
}

/// For `check`: each named federated spoke whose old Secret's removal waits for review
/// (the forge shows the removal this clone pushed, and it is provably ours): (spoke, the
/// old Secret's file, the pull request). Reads the forge and the clone; fetches nothing.
pub async fn open_removals(
    config: &crate::config::Config,
    repo: &crate::repo::Repo,
    spokes: &[String],
) -> Vec<(String, String, PullRequest)> {
    let Some(Ok(forge)) = config.repo.forge.as_ref().map(Forge::new) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let federated = config.spokes.iter().filter(|s| {
        spokes.contains(&s.name) && s.credential.mode == crate::config::CredentialMode::Federated
    });
    for spoke in federated {
        let base = &config.repo.branch;
        if let Some(pr) = super::removal::open_removal(&forge, repo, spoke, base).await {
            let file = spoke.secret.sealed_output().display().to_string();
            out.push((spoke.name.clone(), file, pr));
        }
    }
    out
}
