//! Waiting for the SealedSecret holding the committed ciphertext to be unsealed.

use std::time::Duration;

use tokio::time::Instant;

use super::{Check, POLL, Seen};
use crate::config::SpokeConfig;
use crate::hub::root::Root;
use crate::hub::{Hub, HubObject};

pub(super) async fn wait_synced(
    hub: &Hub,
    spoke: &SpokeConfig,
    ciphertext: &str,
    root: Option<&Root>,
    deadline: Instant,
    timeout: Duration,
) -> Check {
    let (ns, name, key) = (
        &spoke.secret.namespace,
        &spoke.secret.name,
        &spoke.secret.key,
    );
    let mut false_since: Option<Instant> = None;
    let mut source_read: Option<Instant> = None;
    let version = hub.controller_version();
    loop {
        hub.pace(deadline).await;
        let got = hub.sealed_secret(ns, name).await;
        // Not the commit's yet: a failing fleet source means it never will be.
        let behind = match &got {
            Ok(Some(obj)) => obj.encrypted_data.get(key).map(String::as_str) != Some(ciphertext),
            Ok(None) => true,
            Err(_) => false,
        };
        if behind
            && let Some(r) = root
            && source_read.is_none_or(|t| t.elapsed() >= SOURCE_READ)
        {
            source_read = Some(Instant::now());
            if let Some(f) = r.source_failed(hub).await {
                return Check {
                    ok: false,
                    status: "SourceFailed".into(),
                    reason: f.reason,
                    message: f.message,
                };
            }
        }
        let last = match got {
            Ok(Some(obj)) => match synced(&obj, key, ciphertext, version.as_deref()) {
                Seen::Done(check) if check.ok => return check,
                Seen::Done(check) | Seen::Source(check) => {
                    let since = *false_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= SYNCED_RETRY || Instant::now() + POLL > deadline {
                        return check;
                    }
                    format!(
                        "Synced False ({}): waiting for the controller's retry",
                        check.message
                    )
                }
                Seen::Waiting(why) => {
                    false_since = None;
                    why
                }
            },
            Ok(None) => {
                format!("sealedsecrets {ns}/{name} does not exist on the hub (not applied yet?)")
            }
            Err(e) => e.to_string(),
        };
        if Instant::now() + POLL > deadline {
            return Check::failed(
                "TimedOut",
                format!("not unsealed within {}s: {last}", timeout.as_secs()),
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// How often the root's source is read while the SealedSecret is not the commit's.
const SOURCE_READ: Duration = Duration::from_secs(2);

/// The controller retries a failed unseal (5 times, backing off from 5 ms) after writing
/// Synced False; a False still there after this is its result.
const SYNCED_RETRY: Duration = Duration::from_secs(2);

/// Sealed Secrets writes status only from v0.17 (before, with --update-status), and
/// v0.24.2 does not advance observedGeneration when Synced stays True.
const NO_STATUS: &str = "the controller has written no status on it: it is not running, or does not report status (Sealed Secrets before v0.17 without --update-status, or run with --update-status=false; spokekeeper needs v0.24.3 or later)";

/// The oldest Sealed Secrets whose status spokekeeper can rely on.
const SUPPORTED: (u64, u64, u64) = (0, 24, 3);

/// Why a SealedSecret may have no status, with the controller's version when its Service
/// says it.
fn no_status(version: Option<&str>) -> String {
    let Some(v) = version else {
        return NO_STATUS.into();
    };
    let shown = format!("v{}", v.trim_start_matches('v'));
    match release(v) {
        // A pre-release comes before its release (semver).
        Some((r, pre)) if r < SUPPORTED || (r == SUPPORTED && pre) => format!(
            "the controller has written no status on it: its Service says Sealed Secrets {shown}, which spokekeeper does not support (it needs v0.24.3 or later; before v0.17 status is written only with --update-status): upgrade the controller"
        ),
        Some(_) => format!(
            "the controller has written no status on it: it is not running, or runs with --update-status=false (its Service says Sealed Secrets {shown})"
        ),
        None => format!("{NO_STATUS}; its Service's version label says {shown}"),
    }
}

/// `[v]MAJOR.MINOR.PATCH[-pre][+build]` as numbers, and whether it is a pre-release;
/// None for anything else.
fn release(version: &str) -> Option<((u64, u64, u64), bool)> {
    let v = version.trim_start_matches('v');
    let v = v.split('+').next()?;
    let (core, pre) = match v.split_once('-') {
        Some((core, _)) => (core, true),
        None => (v, false),
    };
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    let r = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some((r, pre))
}

/// Whether the hub's SealedSecret is the committed one and the controller has unsealed it.
pub(super) fn synced(obj: &HubObject, key: &str, ciphertext: &str, version: Option<&str>) -> Seen {
    if obj.encrypted_data.get(key).map(String::as_str) != Some(ciphertext) {
        return Seen::Waiting(
            "the hub still has an older encryptedData (Flux has not applied the commit yet)".into(),
        );
    }
    if obj.observed_generation.is_none() && obj.conditions.is_empty() {
        return Seen::Waiting(no_status(version));
    }
    if !obj.observed() {
        // Behind with Synced True stays so forever on v0.24.2 (True->True is not written).
        let hint = match obj.condition("Synced") {
            Some(c) if c.status == "True" => {
                "; if it stays so, the controller may be Sealed Secrets v0.24.2, which does not advance it while Synced stays True: upgrade to v0.24.3 or later"
            }
            _ => "",
        };
        return Seen::Waiting(format!(
            "the controller has not looked at generation {} yet (observedGeneration {}){hint}",
            obj.generation.unwrap_or_default(),
            obj.observed_generation
                .map_or("none".into(), |g| g.to_string())
        ));
    }
    match obj.condition("Synced") {
        Some(c) if c.status == "True" => Seen::Done(Check::of(c, true, "unsealed")),
        Some(c) => Seen::Done(Check::of(c, false, "not unsealed")),
        None => Seen::Waiting("no Synced condition yet".into()),
    }
}
