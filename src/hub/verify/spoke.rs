//! One spoke's verification: its SealedSecret unsealed, then each consumer asked to
//! reconcile and waited for.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;

use super::ready::{Asked, not_served, retries_exceeded, reusable, wait_ready};
use super::synced::wait_synced;
use super::{Ask, Check, ConsumerCheck, Delivery, HubReport};
use crate::config::SpokeConfig;
use crate::hub::root::Root;
use crate::hub::{Consumer, Hub, HubError, Kind, rfc3339_nano};
use crate::text::one_line;

/// Consumers of one spoke waited for at once.
const CONSUMER_CONCURRENCY: usize = 8;

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
    let report = HubReport::new(spoke, Delivery::Synced(synced));
    ask_consumers(hub, spoke, report, consumers, deadline, timeout, ask).await
}

/// Asks the consumers to reconcile and waits for each, once the Secret is the commit's
/// (`report.delivery` ok); else returns `report` as it is.
pub(super) async fn ask_consumers(
    hub: &Hub,
    spoke: &SpokeConfig,
    mut report: HubReport,
    consumers: Result<Vec<Consumer>, Arc<HubError>>,
    deadline: Instant,
    timeout: Duration,
    ask: Ask,
) -> HubReport {
    if !report.delivery.check().ok {
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

/// Flux reads spec.kubeConfig.secretRef in the consumer's own namespace: a consumer
/// elsewhere (only a configured `spokes[].kustomization` can be) never sees the Secret.
pub(super) fn elsewhere(spoke: &SpokeConfig, c: &Consumer) -> Option<Check> {
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
