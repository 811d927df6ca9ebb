//! Applies [`crate::seal::trust`] to a tick: gathers what the committed credentials
//! record and, when the certificate is not trusted, the commit that changed it and the
//! message every refused spoke carries.

use std::collections::BTreeSet;

use super::cert::{Untrusted, inside};
use crate::rotate::Context;
use crate::rotate::state::SEALING_CERT_SHA256;
use crate::seal::trust::{Mismatch, confirm};
use crate::seal::{SealedSecret, SealingKey};

/// Whether `key` may be sealed to this tick; `served`: the hub's controller returned it.
pub(super) async fn check(
    ctx: &Context,
    key: &SealingKey,
    served: bool,
) -> Result<&'static str, Untrusted> {
    let sha256 = key.fingerprint();
    let recorded = if served {
        BTreeSet::new()
    } else {
        recorded(ctx)
    };
    let mismatch = match confirm(sha256, served, &ctx.config.sealing_sha256, &recorded) {
        Ok(anchor) => return Ok(anchor.describe()),
        Err(m) => m,
    };
    let path = &ctx.config.sealing_cert;
    let (commit, changed_by) = match inside(path, ctx.repo.path()) {
        None => (
            None,
            format!(
                "{} is outside the fleet repo, so no commit changed it: see who wrote it",
                path.display()
            ),
        ),
        Some(rel) => match ctx.repo.last_commit(&rel).await {
            Ok(Some(sha)) => (Some(sha.clone()), format!("last changed by commit {sha}")),
            Ok(None) => (None, "not committed in the fleet repo".into()),
            Err(e) => (None, format!("its last commit cannot be read: {e}")),
        },
    };
    let expected = mismatch.expected().to_vec();
    let (anchor, why) = match &mismatch {
        Mismatch::Configured { .. } => (
            "sealing.sha256",
            format!(
                "sealing.sha256 in {} allows only {}",
                ctx.config.file.display(),
                expected.join(", ")
            ),
        ),
        Mismatch::Committed { .. } => (
            "committed",
            format!(
                "the committed credentials are sealed to {}, and neither hub: nor sealing.sha256 confirms the change",
                expected.join(", ")
            ),
        ),
    };
    let revert = commit
        .as_deref()
        .map_or_else(String::new, |c| format!(" (git revert {c})"));
    let error = format!(
        "the sealing certificate {} is {sha256}, not trusted: {why}; it was {changed_by}. \
         Nothing is sealed to it: a write to the fleet repo must not re-seal every spoke's credential to a key its author may hold. \
         Fix: if the controller's key really changed, check it (kubeseal --fetch-cert | spokekeeper inspect) and set sealing.sha256: {sha256} in {}; otherwise revert the change{revert}",
        path.display(),
        ctx.config.file.display()
    );
    Err(Untrusted {
        sha256: sha256.to_string(),
        expected,
        anchor,
        commit,
        error,
    })
}

/// The sealing fingerprints every configured spoke's committed credential records.
fn recorded(ctx: &Context) -> BTreeSet<String> {
    ctx.config
        .spokes
        .iter()
        .filter_map(|s| ctx.repo.read(&s.output).ok().flatten())
        .filter_map(|bytes| SealedSecret::parse(&bytes).ok())
        .filter_map(|sealed| sealed.annotations.get(SEALING_CERT_SHA256).cloned())
        .collect()
}
