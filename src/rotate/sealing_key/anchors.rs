//! Applies [`super::trust`] to a tick: gathers the fallback (what the hub last served
//! to this clone with `hub:`, else what the committed credentials record) and, when the
//! certificate is not trusted, the commit that changed it and the message every refused
//! spoke carries.

use super::trust::{Committed, Controller, Fallback, Mismatch, confirm};
use crate::config::Config;
use crate::fingerprint::{Fingerprint, Sealing};
use crate::fsutil::inside;
use crate::hub::cert::Untrusted;
use crate::repo::Repo;
use crate::rotate::state::{self, SEALING_CERT_SHA256};
use crate::seal::SealedSecret;

/// Whether the certificate `sha256` (read from `path`, sealing.cert) may be sealed to in
/// the clone `repo`; `hub`: what the hub's controller served (`Silent` when it was not
/// asked, as in `spokekeeper check`).
pub(super) async fn check(
    config: &Config,
    path: &std::path::Path,
    repo: &Repo,
    sha256: Fingerprint<Sealing>,
    hub: Controller,
) -> Result<&'static str, Untrusted> {
    let committed;
    let last;
    let fallback = if config.hub.is_some() {
        last = super::served::last(repo.path()).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "ignoring the record of the hub's last certificate");
            None
        });
        Fallback::LastServed(last)
    } else {
        committed = recorded(config, repo).await;
        Fallback::Committed(&committed)
    };
    let mismatch = match confirm(sha256, hub, &config.sealing_sha256, fallback) {
        Ok(anchor) => return Ok(anchor.describe()),
        Err(m) => m,
    };
    let (commit, changed_by) = changed_by(path, repo).await;
    let expected = mismatch.expected().to_vec();
    let listed = expected
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let file = config.file.display();
    let revert = commit
        .as_deref()
        .map_or_else(String::new, |c| format!(" (git revert {c})"));
    let set = format!(
        "if the controller's key really changed, check it (kubeseal --fetch-cert | spokekeeper inspect) and set sealing.sha256: {sha256} in {file}"
    );
    let (anchor, why, fix) = match &mismatch {
        Mismatch::HubServes { served } => (
            "hub",
            format!(
                "the hub's controller serves {served} instead, which could not be pinned this tick"
            ),
            "see why the renewal could not be pinned (the sealing error); the next tick that can pin it seals to it".to_string(),
        ),
        Mismatch::Configured { .. } => (
            "sealing.sha256",
            format!("sealing.sha256 in {file} allows only {listed}"),
            format!("{set}; otherwise revert the change{revert}"),
        ),
        Mismatch::LastServed { expected } if expected.is_empty() => (
            "last-served",
            format!(
                "the hub is unreachable and this clone has no record ({}) of a certificate it served",
                super::served::path(repo.path()).display()
            ),
            format!("make the hub reachable, or {set}"),
        ),
        Mismatch::LastServed { .. } => (
            "last-served",
            format!(
                "the hub is unreachable, and the certificate it served last is {listed}"
            ),
            format!("{set}; otherwise revert the change{revert}"),
        ),
        Mismatch::Committed { .. } => (
            "committed",
            format!(
                "the committed credentials are sealed to {listed}, and neither hub: nor sealing.sha256 confirms the change"
            ),
            format!("{set}; otherwise revert the change{revert}"),
        ),
        Mismatch::Unknown { spokes } => (
            "committed",
            format!(
                "no committed credential records a valid {SEALING_CERT_SHA256}, but the outputs of {} exist (unreadable, unparsable or unannotated), so this is no fresh install",
                spokes.join(", ")
            ),
            format!("{set}, or restore the outputs{revert}"),
        ),
    };
    let error = format!(
        "the sealing certificate {} is {sha256}, not trusted: {why}; it was {changed_by}. \
         Nothing is sealed to it: a write to the fleet repo must not re-seal every spoke's credential to a key its author may hold. \
         Fix: {fix}",
        path.display(),
    );
    Err(Untrusted {
        sha256,
        expected,
        anchor,
        commit,
        error,
    })
}

/// The commit that last changed sealing.cert, and the words for it.
async fn changed_by(path: &std::path::Path, repo: &Repo) -> (Option<String>, String) {
    match inside(path, repo.path()) {
        None => (
            None,
            format!(
                "{} is outside the fleet repo, so no commit changed it: see who wrote it",
                path.display()
            ),
        ),
        Some(rel) => match repo.last_commit(&rel).await {
            Ok(Some(sha)) => (Some(sha.clone()), format!("last changed by commit {sha}")),
            Ok(None) => (None, "not committed in the fleet repo".into()),
            Err(e) => (None, format!("its last commit cannot be read: {e}")),
        },
    }
}

/// What every configured spoke's committed output records: valid sealing fingerprints
/// (through the annotation validator), and the spokes whose output exists but records
/// none (unreadable, a link, unparsable, unannotated or malformed).
async fn recorded(config: &Config, repo: &Repo) -> Committed {
    let mut out = Committed::default();
    // HEAD listed once, not two git processes per spoke (file by file should that fail).
    let files = repo.snapshot().await.ok();
    // A sops output is sealed to no certificate: it neither confirms nor contradicts one.
    let sealed = config
        .spokes
        .iter()
        .filter(|s| s.format == crate::config::SealingFormat::SealedSecrets);
    for s in sealed {
        let read = match &files {
            Some(f) => f.read(&s.output).await,
            None => repo.read(&s.output).await,
        };
        let valid = match read {
            Ok(None) => continue,
            Ok(Some(bytes)) => SealedSecret::parse(&bytes).ok().and_then(|sealed| {
                let v = sealed.annotations.get(SEALING_CERT_SHA256)?;
                state::fingerprint::<Sealing>(SEALING_CERT_SHA256, v).ok()
            }),
            Err(_) => None,
        };
        match valid {
            Some(fp) => {
                out.recorded.insert(fp);
            }
            None => out.unknown.push(s.name.clone()),
        }
    }
    out
}
