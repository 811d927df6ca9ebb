//! After a push: did the hub unseal what was committed, and does Flux deploy to the spoke
//! with it? Every consumer of the spoke's Secret (the Kustomizations and HelmReleases that
//! name it in spec.kubeConfig.secretRef, or the one `spokes[].kustomization` names) is
//! asked to reconcile and waited for. Bounded by hub.verify_timeout; a failure is reported
//! and alerted, and never undoes the commit (the credential was validated against the
//! spoke before it).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use tokio::time::Instant;

pub use super::consumers::FoundBy;
use super::consumers::{self, Listed};
use super::root::{self, Root};
use super::{Consumer, Hub, HubError, HubObject, Kind, rfc3339_nano};
use crate::config::{HubConfig, SpokeConfig};
use crate::seal::SealedSecret;
use crate::text::one_line;

/// How often the hub is polled while waiting.
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// Consumers of one spoke waited for at once.
const CONSUMER_CONCURRENCY: usize = 8;

/// Consumers named in one summary line; the rest are counted.
const SUMMARY_NAMES: usize = 5;

/// One condition as the hub reported it, or what stood in for it. Text from the hub is
/// one bounded line (text::one_line).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    pub ok: bool,
    /// The condition's status (True, False, Unknown), or Missing, TimedOut, Error.
    pub status: String,
    pub reason: Option<String>,
    pub message: String,
}

impl Check {
    fn failed(status: &str, message: String) -> Check {
        Check {
            ok: false,
            status: status.into(),
            reason: None,
            message: one_line(&message, 300),
        }
    }

    /// A settled condition from the hub.
    fn of(c: &super::Condition, ok: bool, default_message: &str) -> Check {
        Check {
            ok,
            status: one_line(&c.status, 40),
            reason: c.reason.as_deref().map(|r| one_line(r, 100)),
            message: one_line(c.message.as_deref().unwrap_or(default_message), 300),
        }
    }
}

/// One consumer and its Ready condition after the reconcile request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConsumerCheck {
    #[serde(flatten)]
    pub consumer: Consumer,
    pub ready: Check,
    /// Asked again during the wait (a HelmRelease that used up its retries while the
    /// first request ran, asked with resetAt): the request its `ready` answers. None: the
    /// spoke's `requested_at`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<String>,
}

/// The hub's view of one spoke after its credential was pushed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HubReport {
    /// The SealedSecret's Synced condition, for the committed ciphertext.
    pub synced: Check,
    /// The spoke's Secret, NAMESPACE/NAME.
    pub secret: String,
    pub found_by: FoundBy,
    /// Why the consumers could not be listed.
    pub list_error: Option<String>,
    /// Every consumer and its Ready condition; empty when not synced (nothing was
    /// requested) or when nothing deploys with the Secret.
    pub consumers: Vec<ConsumerCheck>,
    /// The reconcile.fluxcd.io/requestedAt value set.
    pub requested_at: Option<String>,
}

impl HubReport {
    fn new(spoke: &SpokeConfig, synced: Check) -> HubReport {
        HubReport {
            synced,
            secret: format!("{}/{}", spoke.secret.namespace, spoke.secret.name),
            found_by: consumers::found_by(spoke),
            list_error: None,
            consumers: Vec::new(),
            requested_at: None,
        }
    }

    /// Unsealed, and every consumer Ready. No consumer at all is ok: see
    /// [`HubReport::unused`].
    pub fn ok(&self) -> bool {
        self.synced.ok && self.list_error.is_none() && self.consumers.iter().all(|c| c.ready.ok)
    }

    /// Unsealed, but no Kustomization or HelmRelease uses the Secret. A warning, not a
    /// failure: the validated credential is on the hub, and nothing that deploys is
    /// broken by it (a spoke being set up, or one whose consumers name another Secret).
    pub(crate) fn unused(&self) -> bool {
        self.ok() && self.consumers.is_empty()
    }

    /// One line for tables and logs.
    pub fn summary(&self) -> String {
        if !self.synced.ok {
            return format!("not synced: {}", self.synced.message);
        }
        if let Some(e) = &self.list_error {
            return format!("synced, consumers not listed: {e}");
        }
        if self.consumers.is_empty() {
            let (ns, name) = self.secret.split_once('/').unwrap_or(("", &self.secret));
            return format!(
                "synced, but nothing deploys with it: no Kustomization or HelmRelease in {ns} has spec.kubeConfig.secretRef.name {name}"
            );
        }
        let (ready, not): (Vec<_>, Vec<_>) = self.consumers.iter().partition(|c| c.ready.ok);
        let names = |cs: &[&ConsumerCheck], with_message: bool| {
            let mut shown: Vec<String> = cs
                .iter()
                .take(SUMMARY_NAMES)
                .map(|c| match with_message {
                    true => format!("{} ({})", c.consumer, c.ready.message),
                    false => c.consumer.to_string(),
                })
                .collect();
            if cs.len() > SUMMARY_NAMES {
                shown.push(format!("{} more", cs.len() - SUMMARY_NAMES));
            }
            shown.join(", ")
        };
        match (not.is_empty(), ready.is_empty()) {
            (true, _) => format!("synced, ready: {}", names(&ready, false)),
            (false, true) => format!("synced, not ready: {}", names(&not, true)),
            (false, false) => format!(
                "synced, not ready: {}; ready: {}",
                names(&not, true),
                names(&ready, false)
            ),
        }
    }
}

/// Waits for the SealedSecret holding `ciphertext` to be unsealed, asks each of
/// `consumers` to reconcile, and waits for each one's Ready condition, all within
/// `timeout`. With [`Ask::Again`] (a recheck of a spoke already requested for this
/// commit) a consumer's standing requestedAt is waited for instead of a new one, so a
/// run longer than one recheck is not restarted every tick.
/// `root`: the Kustomization that applies the SealedSecret, whose failing source is
/// named as the cause while the SealedSecret is not the commit's.
pub async fn verify(
    hub: &Hub,
    spoke: &SpokeConfig,
    ciphertext: &str,
    consumers: Result<Vec<Consumer>, Arc<HubError>>,
    root: Option<&Root>,
    timeout: Duration,
    ask: Ask,
) -> HubReport {
    let deadline = Instant::now() + timeout;
    let synced = wait_synced(hub, spoke, ciphertext, root, deadline, timeout).await;
    let mut report = HubReport::new(spoke, synced);
    if !report.synced.ok {
        return report;
    }
    let consumers = match consumers {
        Ok(c) => c,
        Err(e) => {
            report.list_error = Some(one_line(&e.to_string(), 300));
            return report;
        }
    };
    let now = rfc3339_nano(time::OffsetDateTime::now_utc());
    // Every request first, so the controllers work on them side by side.
    let mut requested = Vec::new();
    for c in consumers {
        if let Some(check) = elsewhere(spoke, &c) {
            report.consumers.push(ConsumerCheck {
                consumer: c,
                ready: check,
                requested_at: None,
            });
            continue;
        }
        if Instant::now() >= deadline {
            let why = format!("not requested within {}s", timeout.as_secs());
            report.consumers.push(ConsumerCheck {
                consumer: c,
                ready: Check::failed("TimedOut", why),
                requested_at: None,
            });
            continue;
        }
        let again = ask == Ask::Again;
        let current = match again || c.kind == Kind::HelmRelease {
            true => hub.consumer(&c).await.ok().flatten(),
            false => None,
        };
        if again && let Some(at) = current.as_ref().and_then(reusable) {
            requested.push((c, at, false));
            continue;
        }
        let reset = current.as_ref().is_some_and(|o| retries_exceeded(&c, o));
        match hub.request(&c, &now, reset, deadline).await {
            Ok(()) => {
                report.requested_at = Some(now.clone());
                requested.push((c, now.clone(), reset));
            }
            Err(e) => {
                let ready = match hub.serves(c.kind).await {
                    Ok(false) => not_served(&c),
                    _ => Check::failed("Error", e.to_string()),
                };
                report.consumers.push(ConsumerCheck {
                    consumer: c,
                    ready,
                    requested_at: None,
                });
            }
        }
    }
    if report.requested_at.is_none() {
        report.requested_at = requested.first().map(|(_, at, _)| at.clone());
    }
    let found_by = report.found_by;
    let waited: Vec<ConsumerCheck> =
        futures::stream::iter(requested.into_iter().map(|(c, at, reset)| async move {
            let first = at.clone();
            let asked = Asked { at, reset };
            let (ready, at) = wait_ready(hub, spoke, found_by, &c, asked, deadline, timeout).await;
            ConsumerCheck {
                consumer: c,
                ready,
                requested_at: (at != first).then_some(at),
            }
        }))
        .buffered(CONSUMER_CONCURRENCY)
        .collect()
        .await;
    report.consumers.extend(waited);
    report.consumers.sort_by(|a, b| a.consumer.cmp(&b.consumer));
    report
}

/// A HelmRelease helm-controller stopped retrying (`Stalled` True, `RetriesExceeded`):
/// it runs again only with a reset request (`flux reconcile hr --reset`), which is
/// what a fixed credential needs.
fn retries_exceeded(c: &Consumer, obj: &HubObject) -> bool {
    c.kind == Kind::HelmRelease
        && obj
            .condition("Stalled")
            .is_some_and(|s| s.status == "True" && s.reason.as_deref() == Some("RetriesExceeded"))
}

/// The request a consumer's wait is for: its requestedAt, and whether resetAt came with it.
struct Asked {
    at: String,
    reset: bool,
}

/// The standing request a recheck waits for: one Flux has not answered yet, or answered
/// with anything but a final failure (a failure is asked again, so a fix is seen).
fn reusable(obj: &HubObject) -> Option<String> {
    let at = obj.requested_at.clone()?;
    match ready(obj, &at) {
        Seen::Done(Check { ok: false, .. }) => None,
        _ => Some(at),
    }
}

fn not_served(c: &Consumer) -> Check {
    let ar = c.kind.resource();
    Check::failed(
        "NotServed",
        format!(
            "the hub does not serve {}/{} {}: Flux is not installed there, or is older than v2.3 (upgrade Flux)",
            ar.group, ar.version, ar.plural
        ),
    )
}

/// Flux reads spec.kubeConfig.secretRef in the consumer's own namespace: a consumer
/// elsewhere (only a configured `spokes[].kustomization` can be) never sees the Secret.
fn elsewhere(spoke: &SpokeConfig, c: &Consumer) -> Option<Check> {
    (c.namespace != spoke.secret.namespace).then(|| {
        Check::failed(
            "WrongNamespace",
            format!(
                "{c} is in {}, but Flux reads its kubeConfig Secret from its own namespace and the Secret is {}/{}: set spokes[{}].kustomization.namespace or spokes[].secret.namespace so they match",
                c.namespace, spoke.secret.namespace, spoke.secret.name, spoke.name
            ),
        )
    })
}

/// How many spokes are verified at once (each polls its objects every POLL).
const VERIFY_CONCURRENCY: usize = 16;

/// How a verification asks the hub.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// Just pushed: the root and every consumer are asked to reconcile now.
    Now,
    /// A recheck of a spoke asked before: the request made then is waited for again, not
    /// replaced, and nothing is asked again.
    Again,
}

/// A credential committed: its spoke, and the manifest committed.
pub(crate) struct Committed<'a> {
    pub spoke: &'a SpokeConfig,
    pub manifest: &'a str,
}

/// Verifies every spoke in `committed`, concurrently; one report per entry, in its order.
/// `listed`: the tick's listing of consumers; a namespace it could not list is listed again.
pub(crate) async fn after_push(
    cfg: &HubConfig,
    hub: &Result<Hub, HubError>,
    committed: &[Committed<'_>],
    listed: &Listed,
    ask: Ask,
) -> Vec<HubReport> {
    if committed.is_empty() {
        return Vec::new();
    }
    let mut listed = listed.clone();
    if let Ok(h) = hub {
        let missing = committed
            .iter()
            .map(|c| c.spoke)
            .filter(|s| !matches!(listed.get(&s.secret.namespace), Some(Ok(_))));
        let again = h.list_consumers(missing, cfg.verify_timeout).await;
        listed.extend(again);
    }
    // The fleet's GitRepository and the root first, as `flux reconcile ks --with-source`;
    // a recheck asks nothing again, and only reads the root's source.
    let started = Instant::now();
    let roots = match hub {
        Ok(h) => {
            let each = committed.iter().map(|c| c.spoke);
            let at = rfc3339_nano(time::OffsetDateTime::now_utc());
            let at = (ask == Ask::Now).then_some(at.as_str());
            root::roots(h, each, at, started + cfg.verify_timeout).await
        }
        Err(_) => Default::default(),
    };
    let timeout = cfg.verify_timeout.saturating_sub(started.elapsed());
    // Bounded: a renewal re-seals every spoke at once, and each polls the hub API.
    let checks: Vec<HubReport> = futures::stream::iter(committed.iter().map(|c| {
        let (spoke, manifest) = (c.spoke, c.manifest);
        let (listed, roots) = (&listed, &roots);
        async move {
            let hub = match hub {
                Ok(h) => h,
                Err(e) => {
                    return HubReport::new(spoke, Check::failed("Error", format!("hub API: {e}")));
                }
            };
            let ciphertext = SealedSecret::parse(manifest.as_bytes())
                .ok()
                .and_then(|s| s.encrypted_data.get(&spoke.secret.key).cloned())
                .unwrap_or_default();
            // A consumer reading another key fails inside Flux: said, not requested.
            let wrong = consumers::wrong_keys(spoke, listed);
            let consumers = consumers::of(spoke, listed).1.map(|cs| {
                cs.into_iter()
                    .filter(|c| !wrong.iter().any(|(w, _)| w == c))
                    .collect()
            });
            let root = roots.get(&spoke.name);
            let mut report = verify(hub, spoke, &ciphertext, consumers, root, timeout, ask).await;
            if report.synced.ok && report.list_error.is_none() {
                report
                    .consumers
                    .extend(wrong.into_iter().map(|(c, why)| ConsumerCheck {
                        consumer: c,
                        ready: Check::failed("WrongKey", why),
                        requested_at: None,
                    }));
                report.consumers.sort_by(|a, b| a.consumer.cmp(&b.consumer));
            }
            report
        }
    }))
    .buffered(VERIFY_CONCURRENCY)
    .collect()
    .await;
    for (c, check) in committed.iter().zip(&checks) {
        let spoke = &c.spoke.name;
        if check.unused() {
            tracing::warn!(%spoke, hub = %check.summary(), "hub: unsealed, but no Flux consumer uses the Secret");
        } else if check.ok() {
            tracing::info!(%spoke, hub = %check.summary(), "hub: unsealed and every consumer Ready");
        } else {
            tracing::warn!(%spoke, hub = %check.summary(), "hub: the pushed credential is not in use yet (the commit stays)");
        }
    }
    checks
}

async fn wait_synced(
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

#[derive(Debug)]
enum Seen {
    Done(Check),
    Waiting(String),
    /// A consumer's Ready False that blames its source (see [`SOURCE_FAILED`]).
    Source(Check),
}

/// Whether the hub's SealedSecret is the committed one and the controller has unsealed it.
fn synced(obj: &HubObject, key: &str, ciphertext: &str, version: Option<&str>) -> Seen {
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

/// Waits for `c` to answer `asked`; and the request its answer is to (a newer one when
/// it was asked again).
async fn wait_ready(
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
                    Ok(failed) => return failed,
                    Err(why) => why,
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
fn ready(obj: &HubObject, requested_at: &str) -> Seen {
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

/// The consumer's source failed (Ok: the report), or Flux retries it (Err: why waiting).
/// Missing, or Ready False, the source is the cause: reported
/// at once (`SourceFailed`), naming it, with source-controller's message or, when it is
/// missing, the consumer controller's. Otherwise (Ready True or in progress, or the
/// source not readable) Flux retries on its own, 30 s later by default.
async fn source_failed(
    hub: &Hub,
    source: Option<&super::source::SourceRef>,
    consumer: Check,
) -> Result<Check, String> {
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
        return Err(retries(""));
    };
    let failed = |reason: Option<String>, message: String| Check {
        ok: false,
        status: "SourceFailed".into(),
        reason,
        message: one_line(&format!("source {src}: {message}"), 300),
    };
    match hub.source(src).await {
        Ok(None) => Ok(failed(
            Some("NotFound".into()),
            format!(
                "does not exist on the hub ({}: {})",
                consumer.reason.as_deref().unwrap_or_default(),
                consumer.message
            ),
        )),
        Ok(Some(obj)) => match obj.condition("Ready") {
            Some(c) if c.status == "False" => Ok(failed(
                c.reason.as_deref().map(|r| one_line(r, 100)),
                c.message.clone().unwrap_or_default(),
            )),
            _ => Err(retries(&format!("; source {src} is not failing"))),
        },
        Err(e) => Err(retries(&format!("; source {src} not read: {e}"))),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::{Condition, Kind};

    fn cond(t: &str, s: &str, reason: &str, msg: &str) -> Condition {
        Condition {
            type_: t.into(),
            status: s.into(),
            reason: Some(reason.into()),
            message: Some(msg.into()),
            last_transition_time: None,
        }
    }

    fn sealed(ct: &str, generation: i64, observed: i64, c: Option<Condition>) -> HubObject {
        HubObject {
            generation: Some(generation),
            observed_generation: Some(observed),
            conditions: c.into_iter().collect(),
            encrypted_data: [("value".to_string(), ct.to_string())].into(),
            ..HubObject::default()
        }
    }

    #[test]
    fn synced_only_for_the_committed_ciphertext_at_the_current_generation() {
        let ok = cond("Synced", "True", "", "");
        assert!(matches!(
            synced(&sealed("old", 2, 2, Some(ok.clone())), "value", "new", None),
            Seen::Waiting(w) if w.contains("older encryptedData")
        ));
        assert!(matches!(
            synced(&sealed("new", 3, 2, Some(ok.clone())), "value", "new", None),
            Seen::Waiting(w) if w.contains("generation 3")
        ));
        assert!(matches!(
            synced(&sealed("new", 3, 3, Some(ok)), "value", "new", None),
            Seen::Done(Check { ok: true, .. })
        ));
        let bad = cond(
            "Synced",
            "False",
            "ErrUnsealFailed",
            "no key could decrypt secret (value)",
        );
        match synced(&sealed("new", 3, 3, Some(bad)), "value", "new", None) {
            Seen::Done(c) => {
                assert!(!c.ok);
                assert_eq!(c.status, "False");
                assert_eq!(c.message, "no key could decrypt secret (value)");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            synced(&sealed("new", 3, 3, None), "value", "new", None),
            Seen::Waiting(_)
        ));
    }

    #[test]
    fn hub_text_in_a_condition_becomes_one_bounded_line() {
        let hostile = cond(
            "Ready",
            "False",
            "Failed\nreason",
            &format!("line one\nrotate: forged\u{202E}{}", "x".repeat(10_000)),
        );
        let obj = HubObject {
            generation: Some(1),
            observed_generation: Some(1),
            conditions: vec![hostile],
            last_handled_reconcile_at: Some("now".into()),
            ..HubObject::default()
        };
        match ready(&obj, "now") {
            Seen::Done(c) => {
                assert!(c.message.starts_with("line one rotate: forged"), "{c:?}");
                assert!(!c.message.contains('\u{202E}'));
                assert!(c.message.chars().count() <= 300);
                assert_eq!(c.reason.as_deref(), Some("Failed reason"));
            }
            other => panic!("{other:?}"),
        }
    }

    fn consumers(n: usize, not_ready: &[usize]) -> Vec<ConsumerCheck> {
        (0..n)
            .map(|i| ConsumerCheck {
                consumer: Consumer {
                    kind: if i % 2 == 0 {
                        Kind::Kustomization
                    } else {
                        Kind::HelmRelease
                    },
                    namespace: "flux-system".into(),
                    name: format!("c{i}"),
                },
                ready: Check {
                    ok: !not_ready.contains(&i),
                    status: "True".into(),
                    reason: None,
                    message: format!("m{i}"),
                },
                requested_at: None,
            })
            .collect()
    }

    fn report(consumers: Vec<ConsumerCheck>) -> HubReport {
        HubReport {
            synced: Check {
                ok: true,
                status: "True".into(),
                reason: None,
                message: "unsealed".into(),
            },
            secret: "flux-system/dev-kubeconfig".into(),
            found_by: FoundBy::Listed,
            list_error: None,
            consumers,
            requested_at: None,
        }
    }

    #[test]
    fn the_summary_names_each_consumer_by_kind_and_counts_past_five() {
        let r = report(consumers(2, &[1]));
        assert!(!r.ok() && !r.unused());
        assert_eq!(
            r.summary(),
            "synced, not ready: HelmRelease flux-system/c1 (m1); ready: Kustomization flux-system/c0"
        );
        let r = report(consumers(8, &[]));
        assert!(r.ok() && !r.unused());
        assert_eq!(
            r.summary(),
            "synced, ready: Kustomization flux-system/c0, HelmRelease flux-system/c1, Kustomization flux-system/c2, HelmRelease flux-system/c3, Kustomization flux-system/c4, 3 more"
        );
        let r = report(Vec::new());
        assert!(r.ok() && r.unused(), "none found: a warning, not a failure");
        let mut r = report(Vec::new());
        r.list_error = Some("list helmreleases in flux-system: 403 Forbidden: no".into());
        assert!(!r.ok() && !r.unused());
        assert!(
            r.summary()
                .contains("consumers not listed: list helmreleases")
        );
    }

    #[test]
    fn ready_waits_for_our_request_and_a_settled_condition() {
        let k = |handled: &str, c: Condition| HubObject {
            generation: Some(1),
            observed_generation: Some(1),
            conditions: vec![c],
            last_handled_reconcile_at: Some(handled.into()),
            ..HubObject::default()
        };
        let progressing = cond(
            "Ready",
            "Unknown",
            "Progressing",
            "Reconciliation in progress",
        );
        let done = cond(
            "Ready",
            "True",
            "ReconciliationSucceeded",
            "Applied revision: main@sha1:abc",
        );
        let failed = cond(
            "Ready",
            "False",
            "ReconciliationFailed",
            "x509: certificate signed by unknown authority",
        );
        assert!(matches!(
            ready(&k("earlier", done.clone()), "now"),
            Seen::Waiting(_)
        ));
        assert!(
            matches!(ready(&k("now", progressing), "now"), Seen::Waiting(w) if w.contains("Unknown"))
        );
        assert!(matches!(
            ready(&k("now", done), "now"),
            Seen::Done(Check { ok: true, .. })
        ));
        match ready(&k("now", failed), "now") {
            Seen::Done(c) => assert!(!c.ok && c.message.contains("x509"), "{c:?}"),
            other => panic!("{other:?}"),
        }
    }

    fn echoed(generation: i64, observed: Option<i64>, c: Condition) -> HubObject {
        HubObject {
            generation: Some(generation),
            observed_generation: observed,
            conditions: vec![c],
            last_handled_reconcile_at: Some("now".into()),
            requested_at: Some("now".into()),
            ..HubObject::default()
        }
    }

    #[test]
    fn a_false_after_the_echo_is_final_though_observed_generation_is_behind() {
        // Flux advances observedGeneration only on success: after a failed run it stays.
        let failed = cond(
            "Ready",
            "False",
            "ReconciliationFailed",
            "kustomize build failed",
        );
        match ready(&echoed(2, Some(1), failed.clone()), "now") {
            Seen::Done(c) => assert!(!c.ok && c.message == "kustomize build failed", "{c:?}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            ready(&echoed(2, None, failed), "now"),
            Seen::Done(Check { ok: false, .. })
        ));
        // A True still needs the current generation.
        let done = cond("Ready", "True", "ReconciliationSucceeded", "Applied");
        assert!(matches!(
            ready(&echoed(2, Some(1), done.clone()), "now"),
            Seen::Waiting(w) if w.contains("older generation")
        ));
        assert!(matches!(
            ready(&echoed(2, Some(2), done), "now"),
            Seen::Done(Check { ok: true, .. })
        ));
    }

    #[test]
    fn a_failure_that_blames_the_source_has_the_source_read() {
        for (reason, msg) in [
            (
                "ArtifactFailed",
                "GitRepository.source.toolkit.fluxcd.io \"fleet\" not found",
            ),
            (
                "ArtifactFailed",
                "Source artifact not found, retrying in 30s",
            ),
            (
                "SourceNotReady",
                "HelmChart 'flux-system/flux-system-apps' is not ready: chart pull error",
            ),
        ] {
            let c = cond("Ready", "False", reason, msg);
            assert!(
                matches!(ready(&echoed(1, None, c), "now"), Seen::Source(c) if c.message == msg && c.reason.as_deref() == Some(reason)),
                "{reason}"
            );
        }
    }

    #[test]
    fn flux_retries_are_waited_through() {
        let reason = "DependencyNotReady";
        let c = cond(
            "Ready",
            "False",
            reason,
            "dependency 'flux-system/infra' is not ready",
        );
        assert!(
            matches!(ready(&echoed(1, None, c), "now"), Seen::Waiting(w) if w.starts_with("Flux retries") && w.contains(reason)),
            "{reason}"
        );
    }

    fn release(stalled_reason: &str) -> (Consumer, HubObject) {
        let mut obj = echoed(
            2,
            Some(1),
            cond(
                "Ready",
                "False",
                "UpgradeFailed",
                "Helm upgrade failed: x509",
            ),
        );
        obj.conditions.push(cond(
            "Stalled",
            "True",
            stalled_reason,
            "Failed to upgrade after 1 attempt(s)",
        ));
        let c = Consumer {
            kind: Kind::HelmRelease,
            namespace: "flux-system".into(),
            name: "apps".into(),
        };
        (c, obj)
    }

    #[test]
    fn only_a_helm_release_that_used_up_its_retries_is_reset() {
        let (c, obj) = release("RetriesExceeded");
        assert!(retries_exceeded(&c, &obj));
        // Stalled for a reason a reset does not cure, or not stalled: no reset.
        let (_, other) = release("InvalidCELExpression");
        assert!(!retries_exceeded(&c, &other));
        let mut over = obj.clone();
        over.conditions[1].status = "False".into();
        assert!(!retries_exceeded(&c, &over));
        let k = Consumer {
            kind: Kind::Kustomization,
            ..c
        };
        assert!(!retries_exceeded(&k, &obj), "resetAt is helm-controller's");
    }

    #[test]
    fn a_stalled_failure_says_it_is_stalled() {
        let (_, obj) = release("RetriesExceeded");
        match ready(&obj, "now") {
            Seen::Done(c) => {
                assert!(!c.ok);
                assert_eq!(c.reason.as_deref(), Some("UpgradeFailed"));
                assert_eq!(
                    c.message,
                    "stalled (RetriesExceeded: Failed to upgrade after 1 attempt(s)): Helm upgrade failed: x509"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_suspended_consumer_is_reported_as_suspended() {
        // It echoes the request and keeps the Ready True of its last run before the push.
        let mut obj = echoed(
            1,
            Some(1),
            cond("Ready", "True", "ReconciliationSucceeded", "old"),
        );
        obj.suspended = true;
        match ready(&obj, "now") {
            Seen::Done(c) => {
                assert!(!c.ok);
                assert_eq!(c.status, "Suspended");
                assert!(c.message.contains("flux resume"), "{}", c.message);
            }
            other => panic!("{other:?}"),
        }
        let v = serde_json::json!({"spec": {"suspend": true}});
        assert!(HubObject::from_json(&v).suspended);
        assert!(!HubObject::from_json(&serde_json::json!({"spec": {"suspend": "yes"}})).suspended);
    }

    #[test]
    fn a_consumer_outside_the_secrets_namespace_is_named() {
        let text = "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";
        let cfg =
            crate::config::Config::parse(text, "spokekeeper.yaml", std::path::Path::new("/x"))
                .unwrap_or_else(|e| panic!("{e}"));
        let spoke = &cfg.spokes[0];
        let at = |ns: &str| Consumer {
            kind: Kind::Kustomization,
            namespace: ns.into(),
            name: "dev".into(),
        };
        assert_eq!(elsewhere(spoke, &at(&spoke.secret.namespace)), None);
        let c = elsewhere(spoke, &at("apps")).unwrap();
        assert_eq!(c.status, "WrongNamespace");
        assert!(
            c.message.contains("spokes[dev].kustomization.namespace"),
            "{}",
            c.message
        );
    }

    #[test]
    fn a_sealed_secret_without_any_status_names_the_controller_versions() {
        let mut obj = sealed("new", 1, 0, None);
        obj.observed_generation = None;
        assert!(matches!(
            synced(&obj, "value", "new", None),
            Seen::Waiting(w) if w.contains("does not report status") && w.contains("v0.24.3")
        ));
    }

    #[test]
    fn a_sealed_secret_without_any_status_names_the_version_the_service_gives() {
        let mut obj = sealed("new", 1, 0, None);
        obj.observed_generation = None;
        let said = |v| match synced(&obj, "value", "new", Some(v)) {
            Seen::Waiting(w) => w,
            other => panic!("{other:?}"),
        };
        for old in ["0.24.2", "v0.16.0", "0.24.3-rc.1"] {
            let w = said(old);
            assert!(
                w.contains(&format!("v{}", old.trim_start_matches('v')))
                    && w.contains("does not support")
                    && w.contains("v0.24.3 or later"),
                "{w}"
            );
        }
        for new in ["0.24.3", "0.36.1", "v1.0.0"] {
            let w = said(new);
            assert!(
                w.contains("--update-status=false") && !w.contains("does not support"),
                "{w}"
            );
        }
        let w = said("main");
        assert!(w.contains("v0.24.3") && w.contains("says vmain"), "{w}");
    }

    #[test]
    fn a_recheck_reuses_a_request_unless_it_failed() {
        let progressing = cond(
            "Ready",
            "Unknown",
            "Progressing",
            "Reconciliation in progress",
        );
        let mut pending = echoed(1, Some(1), progressing);
        pending.last_handled_reconcile_at = Some("before".into());
        assert_eq!(reusable(&pending).as_deref(), Some("now"));
        let done = cond("Ready", "True", "ReconciliationSucceeded", "Applied");
        assert_eq!(reusable(&echoed(1, Some(1), done)).as_deref(), Some("now"));
        let retried = cond("Ready", "False", "DependencyNotReady", "waiting");
        assert_eq!(reusable(&echoed(1, None, retried)).as_deref(), Some("now"));
        let failed = cond("Ready", "False", "ReconciliationFailed", "x509");
        assert_eq!(reusable(&echoed(1, None, failed)), None, "asked again");
        let mut none = echoed(1, Some(1), cond("Ready", "True", "", ""));
        none.requested_at = None;
        assert_eq!(reusable(&none), None);
    }

    #[test]
    fn behind_with_synced_true_names_the_v0_24_2_quirk() {
        let ok = cond("Synced", "True", "", "");
        assert!(matches!(
            synced(&sealed("new", 3, 2, Some(ok)), "value", "new", None),
            Seen::Waiting(w) if w.contains("generation 3") && w.contains("v0.24.2")
        ));
        let bad = cond("Synced", "False", "ErrUnsealFailed", "no key");
        assert!(matches!(
            synced(&sealed("new", 3, 2, Some(bad)), "value", "new", None),
            Seen::Waiting(w) if !w.contains("v0.24.2")
        ));
    }
}
