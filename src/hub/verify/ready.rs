//! Waiting for a consumer to answer the reconcile request: its Ready condition, what
//! Flux retries on its own, and a failing source named as the cause.

use std::time::Duration;

use tokio::time::Instant;

use super::{Check, FoundBy, POLL, Seen};
use crate::config::SpokeConfig;
use crate::hub::source::SourceRef;
use crate::hub::{Consumer, Hub, HubObject, Kind, rfc3339_nano};
use crate::text::one_line;

/// A HelmRelease helm-controller stopped retrying (`Stalled` True, `RetriesExceeded`):
/// it runs again only with a reset request (`flux reconcile hr --reset`), which is
/// what a fixed credential needs.
pub(super) fn retries_exceeded(c: &Consumer, obj: &HubObject) -> bool {
    c.kind == Kind::HelmRelease
        && obj
            .condition("Stalled")
            .is_some_and(|s| s.status == "True" && s.reason.as_deref() == Some("RetriesExceeded"))
}

/// The standing request a recheck waits for: one Flux has not answered yet, or answered
/// with anything but a final failure (a failure is asked again, so a fix is seen).
pub(super) fn reusable(obj: &HubObject) -> Option<String> {
    let at = obj.requested_at.clone()?;
    match ready(obj, &at) {
        Seen::Done(Check { ok: false, .. }) => None,
        _ => Some(at),
    }
}

pub(super) fn not_served(c: &Consumer) -> Check {
    let ar = c.kind.resource();
    Check::failed(
        "NotServed",
        format!(
            "the hub does not serve {}/{} {}: Flux is not installed there, or is older than v2.3 (upgrade Flux)",
            ar.group, ar.version, ar.plural
        ),
    )
}

/// The request a consumer's wait is for: its requestedAt, and whether resetAt came with it.
pub(super) struct Asked {
    pub(super) at: String,
    pub(super) reset: bool,
}

/// Waits for `c` to answer `asked`; and the request its answer is to (a newer one when
/// it was asked again).
pub(super) async fn wait_ready(
    hub: &Hub,
    spoke: &SpokeConfig,
    found_by: FoundBy,
    c: &Consumer,
    mut asked: Asked,
    deadline: Instant,
    timeout: Duration,
) -> (Check, String) {
    let check = wait_for(hub, spoke, found_by, c, &mut asked, deadline, timeout).await;
    (check, asked.at)
}

/// [`wait_ready`]'s loop; `asked` is the request waited for, replaced when asked again.
async fn wait_for(
    hub: &Hub,
    spoke: &SpokeConfig,
    found_by: FoundBy,
    c: &Consumer,
    asked: &mut Asked,
    deadline: Instant,
    timeout: Duration,
) -> Check {
    loop {
        hub.pace(deadline).await;
        let last = match hub.consumer(c).await {
            Ok(Some(obj)) => match ready(&obj, &asked.at) {
                // It used up its retries while the request ran (on the old credential,
                // say): asked once more, with the reset.
                Seen::Done(check) if !check.ok && !asked.reset && retries_exceeded(c, &obj) => {
                    let at = rfc3339_nano(time::OffsetDateTime::now_utc());
                    match hub.request(c, &at, true, deadline).await {
                        Ok(()) => {
                            *asked = Asked { at, reset: true };
                            "stalled after its retries: asked again with reconcile.fluxcd.io/resetAt".into()
                        }
                        Err(_) => return check,
                    }
                }
                Seen::Done(check) => return check,
                Seen::Waiting(why) => why,
                Seen::Source(check) => match source_failed(hub, obj.source.as_ref(), check).await {
                    Blame::Source(failed) => return failed,
                    Blame::Retried(why) => why,
                },
            },
            Ok(None) => {
                // A 404 is also what a kind the hub does not serve answers.
                if let Ok(false) = hub.serves(c.kind).await {
                    return not_served(c);
                }
                let fix = match found_by {
                    FoundBy::Configured => format!("set spokes[{}].kustomization", spoke.name),
                    FoundBy::Listed => "deleted since it was listed".into(),
                };
                return Check::failed("Missing", format!("{c} does not exist on the hub: {fix}"));
            }
            Err(e) => e.to_string(),
        };
        if Instant::now() + POLL > deadline {
            return Check::failed(
                "TimedOut",
                format!("not ready within {}s: {last}", timeout.as_secs()),
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Ready False reasons Flux retries on its own (after `--requeue-dependency`, 30s by
/// default) without a new request: a dependency not ready yet.
const RETRIED: &[&str] = &["DependencyNotReady"];

/// Ready False reasons that blame the consumer's source: kustomize-controller's
/// `ArtifactFailed` (source missing, without an artifact, or not fetched),
/// helm-controller's `ArtifactFailed` (chart source missing, chart not loaded) and
/// `SourceNotReady`. The source is then read: missing or Ready False, it is the cause.
const SOURCE_FAILED: &[&str] = &["ArtifactFailed", "SourceNotReady"];

/// Ready once Flux handled our request and settled on True or False.
///
/// Flux advances observedGeneration only when Ready is True, so it gates a True (for
/// the current spec) but never hides a False: once lastHandledReconcileAt echoes the
/// request, a False is the run's result. A suspended object echoes the request too while
/// nothing runs, keeping its old Ready.
pub(super) fn ready(obj: &HubObject, requested_at: &str) -> Seen {
    if obj.suspended {
        return Seen::Done(Check::failed(
            "Suspended",
            "suspended (spec.suspend: true): Flux does not reconcile it, so it has not used the new credential; resume it (flux resume)".into(),
        ));
    }
    if obj.last_handled_reconcile_at.as_deref() != Some(requested_at) {
        return Seen::Waiting("Flux has not handled the reconcile request yet".into());
    }
    let Some(c) = obj.condition("Ready") else {
        return Seen::Waiting("no Ready condition yet".into());
    };
    let message = c.message.as_deref().unwrap_or_default();
    match c.status.as_str() {
        "True" if obj.observed() => Seen::Done(Check::of(c, true, "")),
        "True" => Seen::Waiting(
            "Ready True for an older generation (observedGeneration is behind)".into(),
        ),
        "False"
            if c.reason
                .as_deref()
                .is_some_and(|r| SOURCE_FAILED.contains(&r)) =>
        {
            Seen::Source(Check::of(c, false, ""))
        }
        "False" if c.reason.as_deref().is_some_and(|r| RETRIED.contains(&r)) => {
            Seen::Waiting(one_line(
                &format!(
                    "Flux retries: Ready False ({}: {message})",
                    c.reason.as_deref().unwrap_or_default()
                ),
                300,
            ))
        }
        "False" => Seen::Done(stalled(obj, Check::of(c, false, ""))),
        other => Seen::Waiting(one_line(&format!("Ready {other} ({message})"), 300)),
    }
}

/// What a consumer's Ready False that names its source comes to.
#[derive(Debug)]
enum Blame {
    /// The source failed: the report.
    Source(Check),
    /// Flux retries on its own: why the wait goes on.
    Retried(String),
}

/// Whether the consumer's source failed, or Flux retries it.
/// Missing, or Ready False, the source is the cause: reported
/// at once (`SourceFailed`), naming it, with source-controller's message or, when it is
/// missing, the consumer controller's. Otherwise (Ready True or in progress, or the
/// source not readable) Flux retries on its own, 30 s later by default.
async fn source_failed(hub: &Hub, source: Option<&SourceRef>, consumer: Check) -> Blame {
    let retries = |extra: &str| {
        one_line(
            &format!(
                "Flux retries: Ready False ({}: {}){extra}",
                consumer.reason.as_deref().unwrap_or_default(),
                consumer.message
            ),
            300,
        )
    };
    let Some(src) = source else {
        return Blame::Retried(retries(""));
    };
    let failed = |reason: Option<String>, message: String| Check {
        ok: false,
        status: "SourceFailed".into(),
        reason,
        message: one_line(&format!("source {src}: {message}"), 300),
    };
    match hub.source(src).await {
        Ok(None) => Blame::Source(failed(
            Some("NotFound".into()),
            format!(
                "does not exist on the hub ({}: {})",
                consumer.reason.as_deref().unwrap_or_default(),
                consumer.message
            ),
        )),
        Ok(Some(obj)) => match obj.condition("Ready") {
            Some(c) if c.status == "False" => Blame::Source(failed(
                c.reason.as_deref().map(|r| one_line(r, 100)),
                c.message.clone().unwrap_or_default(),
            )),
            _ => Blame::Retried(retries(&format!("; source {src} is not failing"))),
        },
        Err(e) => Blame::Retried(retries(&format!("; source {src} not read: {e}"))),
    }
}

/// A failed Ready of an object Flux stopped retrying says so (`Stalled` True: it runs
/// again only on a spec change, or for a HelmRelease a reset request).
fn stalled(obj: &HubObject, mut check: Check) -> Check {
    if let Some(s) = obj.condition("Stalled").filter(|s| s.status == "True") {
        let why = match (s.reason.as_deref(), s.message.as_deref()) {
            (Some(r), Some(m)) => format!("{r}: {m}"),
            (r, m) => r.or(m).unwrap_or_default().to_string(),
        };
        check.message = one_line(&format!("stalled ({why}): {}", check.message), 300);
    }
    check
}
