//! After a push: did the hub unseal what was committed, and does Flux deploy to the spoke
//! with it? Every consumer of the spoke's Secret (the Kustomizations and HelmReleases that
//! name it in spec.kubeConfig.secretRef, or the one `spokes[].kustomization` names) is
//! asked to reconcile and waited for. Bounded by hub.verify_timeout; a failure is reported
//! and alerted, and never undoes the commit (the credential was validated against the
//! spoke before it).

mod applied;
mod decrypted;
mod ready;
mod report;
mod spoke;
mod synced;
#[cfg(test)]
mod tests;

use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;

pub use super::consumers::FoundBy;
use super::consumers::{self, Listed};
use super::root;
use super::{Hub, HubError, rfc3339_nano};
use crate::config::{HubConfig, SpokeConfig};
use crate::seal::SealedSecret;
pub use decrypted::verify_sops;
pub use report::{Check, ConsumerCheck, Delivery, HubReport};
pub use spoke::verify;

/// How often the hub is polled while waiting.
pub(crate) const POLL: Duration = Duration::from_millis(500);

#[derive(Debug)]
enum Seen {
    Done(Check),
    Waiting(String),
    /// A consumer's Ready False that blames its source (see [`SOURCE_FAILED`]).
    Source(Check),
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

/// Which output a spoke's committed file is: what becomes its Secret on the hub.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// A SealedSecret the Sealed Secrets controller unseals.
    SealedSecret,
    /// A sops-encrypted Secret kustomize-controller decrypts.
    Sops,
    /// A federated spoke's ConfigMap, applied as it is.
    ConfigMap,
}

impl Output {
    fn delivery(self, check: Check) -> Delivery {
        match self {
            Output::SealedSecret => Delivery::Synced(check),
            Output::Sops => Delivery::Decrypted(check),
            Output::ConfigMap => Delivery::Applied(check),
        }
    }
}

/// A credential committed: its spoke, the manifest committed, and which output it is.
pub(crate) struct Committed<'a> {
    pub spoke: &'a SpokeConfig,
    pub manifest: &'a str,
    pub output: Output,
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
        let (spoke, manifest, output) = (c.spoke, c.manifest, c.output);
        let (listed, roots) = (&listed, &roots);
        async move {
            let hub = match hub {
                Ok(h) => h,
                Err(e) => {
                    let failed = Check::failed("Error", format!("hub API: {e}"));
                    return HubReport::new(spoke, output.delivery(failed));
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
            let mut report = match output {
                Output::SealedSecret => {
                    verify(hub, spoke, &ciphertext, consumers, root, timeout, ask).await
                }
                Output::Sops => verify_sops(hub, spoke, consumers, timeout, ask).await,
                Output::ConfigMap => {
                    applied::verify_config_map(hub, spoke, manifest, consumers, timeout, ask).await
                }
            };
            if report.delivery.check().ok && report.list_error.is_none() {
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
