//! The sealing certificate for a tick: fetched from the controller when the hub is
//! configured (hub::cert), else (or when the hub cannot be reached) the pinned copy in
//! sealing.cert; then whether it is trusted (anchors.rs). None when sealing.cert is not set
//! (every spoke is sops): nothing is fetched, pinned or trusted.
//!
//! A renewed certificate is pinned (written atomically, committed when sealing.cert is in
//! the fleet repo) before any spoke is committed, and every spoke is then re-sealed to it
//! because its recorded sealing-cert-sha256 differs. In review mode it is proposed on
//! its own branch and pull request instead.

mod anchors;
mod served;
mod trust;

use std::path::Path;

use time::OffsetDateTime;

use super::Context;
use super::context::Landing;
use super::direct::Publish;
use super::error::PinError;
use crate::fingerprint::{Fingerprint, Sealing};
use crate::fsutil::inside;
use crate::hub::cert::{CertReport, Renewed, Untrusted, fetch};
use crate::hub::{Hub, HubError};
use crate::seal::SealingKey;
use trust::Controller;

/// Review mode's branch for a renewed certificate. Spoke names are DNS labels, so no
/// spoke's branch can be this one.
pub(crate) const CERT_BRANCH: &str = "spokekeeper/sealing.cert";

/// The key for this tick, what happened on the hub, and whether the key is trusted:
/// when `report.untrusted` is set, nothing may be sealed to it. None without
/// sealing.cert (or a key loaded at start).
pub(super) async fn for_tick(
    ctx: &Context,
    hub: Option<&Result<Hub, HubError>>,
    dry_run: bool,
    publish: &impl Publish,
) -> Option<(SealingKey, CertReport)> {
    let (Some(cert), Some(start)) = (&ctx.config.sealing_cert, &ctx.sealing) else {
        return None;
    };
    let (key, report, heard) = choose(ctx, cert, start, hub, dry_run, publish).await;
    let mut report = report.unwrap_or_else(|| CertReport::new(key.fingerprint()));
    if ctx.config.hub.is_none() && ctx.config.sealing_sha256.is_empty() {
        tracing::warn!(
            "no hub: and no sealing.sha256: a sealing certificate pushed to the fleet repo is only checked against what the committed credentials record; set sealing.sha256 in {} to {} once you have checked it with the controller",
            ctx.config.file.display(),
            key.fingerprint()
        );
    }
    let listed = &ctx.config.sealing_sha256;
    if heard == Controller::Served && !listed.is_empty() && !listed.contains(&key.fingerprint()) {
        tracing::warn!(
            "the hub's controller serves {} but sealing.sha256 in {} does not list it: add it, or ticks while the hub is unreachable seal nothing",
            key.fingerprint(),
            ctx.config.file.display()
        );
    }
    match anchors::check(&ctx.config, cert, &ctx.repo, key.fingerprint(), heard).await {
        Ok(how) => {
            report.trusted = true;
            report.trust = how.to_string();
        }
        Err(u) => {
            tracing::error!(sha256 = %u.sha256, expected = ?u.expected, commit = ?u.commit, "{}", u.error);
            report.trusted = false;
            report.trust = u.error.clone();
            report.untrusted = Some(u);
        }
    }
    Some((key, report))
}

/// `spokekeeper check`: the tick's trust rule for the certificate `sha256` (read from
/// `cert`, sealing.cert) without asking the hub (no network), as for a tick that cannot
/// reach it: `sealing.sha256`, else with `hub:` the certificate it last served to this
/// clone, else what the committed credentials record.
pub async fn trusted_offline(
    config: &crate::config::Config,
    cert: &Path,
    repo: &crate::repo::Repo,
    sha256: Fingerprint<Sealing>,
) -> Result<&'static str, Untrusted> {
    anchors::check(config, cert, repo, sha256, Controller::Silent).await
}

/// The key for this tick (`cert`: sealing.cert; `start`: the key loaded at start), the
/// hub's part of the report (None: no hub), and what the hub's controller served.
async fn choose(
    ctx: &Context,
    cert: &Path,
    start: &SealingKey,
    hub: Option<&Result<Hub, HubError>>,
    dry_run: bool,
    publish: &impl Publish,
) -> (SealingKey, Option<CertReport>, Controller) {
    let now = OffsetDateTime::now_utc();
    let (pinned, on_disk) = pinned(ctx, cert, start, now);
    let (Some(cfg), Some(hub)) = (&ctx.config.hub, hub) else {
        return (pinned, None, Controller::Silent);
    };
    let mut report = CertReport {
        reachable: Some(false),
        ..CertReport::new(pinned.fingerprint())
    };
    let answer;
    let fetched = match hub {
        Ok(hub) => {
            answer = fetch(hub).await;
            answer.as_ref()
        }
        Err(e) => Err(e),
    };
    let pem = match fetched {
        Ok((pem, version)) => {
            report.controller_version = version.clone();
            pem.clone()
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot fetch the sealing certificate from the hub: using the pinned copy");
            report.error = Some(format!(
                "hub unreachable, using the pinned sealing.cert: {e}"
            ));
            return (pinned, Some(report), Controller::Silent);
        }
    };
    report.reachable = Some(true);
    let source = format!(
        "the controller's certificate ({}/{})",
        cfg.controller.namespace, cfg.controller.name
    );
    // from_pem refuses the demo key too.
    let key = match SealingKey::from_pem(pem.as_bytes(), &source, now) {
        Ok(k) => k,
        Err(e) => {
            let e = format!("refused: {e}");
            tracing::error!(error = %e, "the hub's sealing certificate is not usable: using the pinned copy");
            report.error = Some(e);
            return (pinned, Some(report), Controller::Silent);
        }
    };
    // What a tick that cannot reach the hub may trust (hub/served.rs).
    if !dry_run && let Err(e) = served::record(ctx.repo.path(), key.fingerprint()) {
        tracing::warn!(error = %e, "cannot record the hub's certificate");
    }
    if key.fingerprint() == pinned.fingerprint() {
        // Started from the hub (see `initial`): sealing.cert is missing or unusable.
        if !dry_run && !on_disk {
            let message = format!(
                "sealing: pin the controller's certificate {}\n\n{}\nFetched from {source}, as kubeseal --fetch-cert does.\n",
                key.fingerprint().short(),
                key.fingerprint()
            );
            if let Err(e) = pin(ctx, cert, pem.as_bytes(), &message, publish).await {
                tracing::error!(error = %e, "cannot pin the controller's certificate");
                report.error = Some(format!("cannot pin the certificate: {e}"));
            }
        }
        return (pinned, Some(report), Controller::Served);
    }
    let renewal = Renewal {
        cert,
        pinned,
        key,
        pem: pem.as_bytes(),
    };
    renew(ctx, renewal, dry_run, publish, report).await
}

/// The controller's certificate `key` (as served, `pem`) in place of the `pinned` one
/// in `cert`.
struct Renewal<'a> {
    cert: &'a Path,
    pinned: SealingKey,
    key: SealingKey,
    pem: &'a [u8],
}

/// The controller serves another certificate than the pinned one: pin it (direct mode)
/// or propose it (review mode), and seal to it unless it cannot be pinned.
async fn renew(
    ctx: &Context,
    renewal: Renewal<'_>,
    dry_run: bool,
    publish: &impl Publish,
    mut report: CertReport,
) -> (SealingKey, Option<CertReport>, Controller) {
    let Renewal {
        cert,
        pinned,
        key,
        pem,
    } = renewal;
    let mut renewed = Renewed {
        old: pinned.fingerprint(),
        new: key.fingerprint(),
        commit: None,
    };
    tracing::info!(old = %renewed.old, new = %renewed.new, "the controller's sealing certificate changed: re-sealing every spoke");
    report.sha256 = renewed.new;
    if !dry_run {
        let message = format!(
            "sealing: controller certificate renewed {} -> {}\n\nold: {}\nnew: {}\nEvery spoke is re-sealed to the new certificate.\n",
            renewed.old.short(),
            renewed.new.short(),
            renewed.old,
            renewed.new
        );
        match pin(ctx, cert, pem, &message, publish).await {
            Ok(commit) => renewed.commit = commit,
            // Review mode: the certificate's branch may be pushed already; seal to it.
            Err(e) if publish.landing() == Landing::AtMerge => {
                tracing::error!(error = %e, "cannot propose the renewed sealing certificate (sealing to it anyway)");
                report.error = Some(format!("cannot propose the renewed certificate: {e}"));
            }
            // Direct mode: sealing to a certificate the repo does not pin would flip back
            // whenever the hub is unreachable. Keep the pinned one until it is pinned.
            Err(e) => {
                tracing::error!(error = %e, "cannot pin the renewed sealing certificate: sealing to the pinned copy until it can be");
                report.sha256 = pinned.fingerprint();
                report.error = Some(format!(
                    "the controller's certificate changed ({} -> {}) but cannot be pinned, so this tick sealed to the pinned copy: {e}",
                    renewed.old.short(),
                    renewed.new.short()
                ));
                // The hub has just contradicted the pinned copy: not trusted this tick.
                return (pinned, Some(report), Controller::Contradicts(renewed.new));
            }
        }
    }
    report.renewed = Some(renewed);
    (key, Some(report), Controller::Served)
}

/// sealing.cert (`path`) as it is now on disk, and true; the key loaded at start and
/// false when it cannot be used.
fn pinned(
    ctx: &Context,
    path: &Path,
    start: &SealingKey,
    now: OffsetDateTime,
) -> (SealingKey, bool) {
    crate::fsutil::read_under(path, ctx.repo.path())
        .map_err(|e| e.to_string())
        .and_then(|pem| {
            SealingKey::from_pem(&pem, &path.display().to_string(), now).map_err(|e| e.to_string())
        })
        .map(|key| (key, true))
        .unwrap_or_else(|e| {
            if path.exists() || path.is_symlink() {
                tracing::warn!(error = %e, "sealing.cert cannot be used: using the copy loaded at start");
            }
            (start.clone(), false)
        })
}

/// Writes sealing.cert atomically; inside the fleet repo it is published like a
/// credential (committed, or proposed for review).
async fn pin(
    ctx: &Context,
    path: &Path,
    pem: &[u8],
    message: &str,
    publish: &impl Publish,
) -> Result<Option<String>, PinError> {
    let Some(rel) = inside(path, ctx.repo.path()) else {
        crate::fsutil::write_atomic(path, pem).map_err(|source| PinError::Write {
            path: path.to_path_buf(),
            error: source,
        })?;
        return Ok(None);
    };
    publish.certificate(ctx, &rel, pem, message).await
}
