//! A sops output on the hub. There is no SealedSecret: kustomize-controller decrypts the
//! committed file itself, so the Kustomization that does (spec.decryption.provider `sops`,
//! its spec.path holding the file) is asked to reconcile after its GitRepository, as a
//! SealedSecret's root is, and its Ready for that request is the delivery. When it cannot
//! decrypt, kustomize-controller (v1.9) writes Ready False, reason `BuildFailed`, message
//! `decryption failed for '<gvk>/<name>': failed to decrypt and format ...`: reported as
//! `DecryptionFailed`.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::ready::{Asked, reusable, wait_ready};
use super::spoke::ask_consumers;
use super::{Ask, Check, Delivery, FoundBy, HubReport};
use crate::config::SpokeConfig;
use crate::hub::root::root_of;
use crate::hub::{Consumer, Hub, HubError, rfc3339_nano};

/// What kustomize-controller's message starts with when it could not decrypt.
const DECRYPTION_FAILED: &str = "decryption failed for '";

/// For a spoke whose output is sops: waits for the Kustomization that decrypts it, then
/// asks `consumers` to reconcile and waits for each, as [`super::verify`] does after the
/// SealedSecret is unsealed.
pub async fn verify_sops(
    hub: &Hub,
    spoke: &SpokeConfig,
    consumers: Result<Vec<Consumer>, Arc<HubError>>,
    timeout: Duration,
    ask: Ask,
) -> HubReport {
    let deadline = Instant::now() + timeout;
    let decrypted = wait_decrypted(hub, spoke, deadline, timeout, ask).await;
    let report = HubReport::new(spoke, Delivery::Decrypted(decrypted));
    ask_consumers(hub, spoke, report, consumers, deadline, timeout, ask).await
}

async fn wait_decrypted(
    hub: &Hub,
    spoke: &SpokeConfig,
    deadline: Instant,
    timeout: Duration,
    ask: Ask,
) -> Check {
    let ns = &spoke.secret.namespace;
    let listed = match hub.sops_kustomizations(ns).await {
        Ok(l) => l,
        Err(e) => return Check::failed("Error", e.to_string()),
    };
    let Some(k) = decrypter(&listed, &spoke.output) else {
        return Check::failed(
            "Missing",
            format!(
                "no Kustomization in {ns} decrypts {} (spec.decryption.provider: sops, spec.path a directory holding it): add one, as docs/sealing.md shows",
                spoke.output.display()
            ),
        );
    };
    // A recheck waits for the request made at the push, unless it failed.
    let standing = match ask {
        Ask::Again => hub.consumer(&k).await.ok().flatten(),
        Ask::Now => None,
    };
    let at = match standing.as_ref().and_then(reusable) {
        Some(at) => at,
        None => {
            let at = rfc3339_nano(time::OffsetDateTime::now_utc());
            root_of(hub, k.clone(), Some(&at), deadline).await;
            at
        }
    };
    let asked = Asked { at, reset: false };
    let (check, _) = wait_ready(hub, spoke, FoundBy::Listed, &k, asked, deadline, timeout).await;
    decryption(check)
}

/// A failed Ready that says the decryption failed is reported as such.
pub(super) fn decryption(check: Check) -> Check {
    match !check.ok && check.message.contains(DECRYPTION_FAILED) {
        true => Check {
            status: "DecryptionFailed".into(),
            ..check
        },
        false => check,
    }
}

/// The sops Kustomization whose spec.path is the deepest directory holding `file` (both
/// relative to the fleet repo's root).
pub(super) fn decrypter(listed: &[(Consumer, String)], file: &Path) -> Option<Consumer> {
    listed
        .iter()
        .filter_map(|(c, path)| {
            let dir: PathBuf = Path::new(path)
                .components()
                .filter(|p| matches!(p, Component::Normal(_)))
                .collect();
            file.starts_with(&dir)
                .then(|| (dir.components().count(), c))
        })
        .max_by_key(|(depth, _)| *depth)
        .map(|(_, c)| c.clone())
}
