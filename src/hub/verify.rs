//! After a push: did the hub unseal what was committed, and does Flux deploy to the spoke
//! with it? Bounded by hub.verify_timeout; a failure is reported and alerted, and never
//! undoes the commit (the credential was validated against the spoke before it).

use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use tokio::time::Instant;

use super::{CALL_TIMEOUT, Hub, HubObject, rfc3339_nano};
use crate::config::{HubConfig, SpokeConfig};
use crate::rotate::SpokeReport;
use crate::seal::SealedSecret;

/// How often the hub is polled while waiting.
pub const POLL: Duration = Duration::from_millis(500);

/// One condition as the hub reported it, or what stood in for it.
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
            message,
        }
    }
}

/// The hub's view of one spoke after its credential was pushed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HubReport {
    /// The SealedSecret's Synced condition, for the committed ciphertext.
    pub synced: Check,
    /// The Kustomization's Ready condition after the reconcile request (None: not reached).
    pub ready: Option<Check>,
    /// The reconcile.fluxcd.io/requestedAt value set.
    pub requested_at: Option<String>,
}

impl HubReport {
    pub fn ok(&self) -> bool {
        self.synced.ok && self.ready.as_ref().is_some_and(|r| r.ok)
    }

    /// One line for tables and logs.
    pub fn summary(&self) -> String {
        match (&self.synced, &self.ready) {
            (s, _) if !s.ok => format!("not synced: {}", s.message),
            (_, Some(r)) if r.ok => "synced, ready".into(),
            (_, Some(r)) => format!("synced, not ready: {}", r.message),
            (_, None) => "synced".into(),
        }
    }
}

/// Waits for the SealedSecret holding `ciphertext` to be unsealed, asks Flux to reconcile
/// the spoke's Kustomization, and waits for its Ready condition, all within `timeout`.
pub async fn verify(
    hub: &Hub,
    spoke: &SpokeConfig,
    ciphertext: &str,
    timeout: Duration,
) -> HubReport {
    let deadline = Instant::now() + timeout;
    let synced = wait_synced(hub, spoke, ciphertext, deadline, timeout).await;
    if !synced.ok {
        return HubReport {
            synced,
            ready: None,
            requested_at: None,
        };
    }
    let k = &spoke.kustomization;
    let at = rfc3339_nano(time::OffsetDateTime::now_utc());
    if let Err(e) = hub.request_reconcile(&k.namespace, &k.name, &at).await {
        return HubReport {
            synced,
            ready: Some(Check::failed("Error", e)),
            requested_at: None,
        };
    }
    let ready = wait_ready(hub, spoke, &at, deadline, timeout).await;
    HubReport {
        synced,
        ready: Some(ready),
        requested_at: Some(at),
    }
}

/// How many spokes are verified at once (each polls two objects every POLL).
const VERIFY_CONCURRENCY: usize = 16;

/// Verifies every spoke committed in this tick (`committed`: index into `reports` and
/// `spokes`, and the manifest committed), concurrently, and records the result.
pub async fn after_push(
    cfg: &HubConfig,
    spokes: &[&SpokeConfig],
    reports: &mut [SpokeReport],
    committed: &[(usize, String)],
) {
    if committed.is_empty() {
        return;
    }
    let hub = match tokio::time::timeout(CALL_TIMEOUT, Hub::connect(cfg)).await {
        Ok(Ok(h)) => Ok(h),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("no answer".into()),
    };
    // Bounded: a renewal re-seals every spoke at once, and each polls the hub API.
    let checks: Vec<HubReport> = futures::stream::iter(committed.iter().map(|(i, manifest)| {
        let spoke = spokes[*i];
        let hub = &hub;
        async move {
            let hub = match hub {
                Ok(h) => h,
                Err(e) => {
                    return HubReport {
                        synced: Check::failed("Error", format!("hub API: {e}")),
                        ready: None,
                        requested_at: None,
                    };
                }
            };
            let ciphertext = SealedSecret::parse(manifest.as_bytes())
                .ok()
                .and_then(|s| s.encrypted_data.get(&spoke.secret.key).cloned())
                .unwrap_or_default();
            verify(hub, spoke, &ciphertext, cfg.verify_timeout).await
        }
    }))
    .buffered(VERIFY_CONCURRENCY)
    .collect()
    .await;
    for ((i, _), check) in committed.iter().zip(checks) {
        let r = &mut reports[*i];
        if check.ok() {
            tracing::info!(spoke = %r.spoke, "hub: unsealed and Ready");
        } else {
            tracing::warn!(spoke = %r.spoke, hub = %check.summary(), "hub: the pushed credential is not in use yet (the commit stays)");
        }
        r.hub = Some(check);
    }
}

async fn wait_synced(
    hub: &Hub,
    spoke: &SpokeConfig,
    ciphertext: &str,
    deadline: Instant,
    timeout: Duration,
) -> Check {
    let (ns, name, key) = (
        &spoke.secret.namespace,
        &spoke.secret.name,
        &spoke.secret.key,
    );
    loop {
        let last = match hub.sealed_secret(ns, name).await {
            Ok(Some(obj)) => match synced(&obj, key, ciphertext) {
                Seen::Done(check) => return check,
                Seen::Waiting(why) => why,
            },
            Ok(None) => {
                format!("sealedsecrets {ns}/{name} does not exist on the hub (not applied yet?)")
            }
            Err(e) => e,
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

enum Seen {
    Done(Check),
    Waiting(String),
}

/// Whether the hub's SealedSecret is the committed one and the controller has unsealed it.
fn synced(obj: &HubObject, key: &str, ciphertext: &str) -> Seen {
    if obj.encrypted_data.get(key).map(String::as_str) != Some(ciphertext) {
        return Seen::Waiting(
            "the hub still has an older encryptedData (Flux has not applied the commit yet)".into(),
        );
    }
    if !obj.observed() {
        return Seen::Waiting(format!(
            "the controller has not looked at generation {} yet (observedGeneration {})",
            obj.generation.unwrap_or_default(),
            obj.observed_generation
                .map_or("none".into(), |g| g.to_string())
        ));
    }
    match obj.condition("Synced") {
        Some(c) => Seen::Done(Check {
            ok: c.status == "True",
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone().unwrap_or_else(|| {
                if c.status == "True" {
                    "unsealed".into()
                } else {
                    "not unsealed".into()
                }
            }),
        }),
        None => Seen::Waiting("no Synced condition yet".into()),
    }
}

async fn wait_ready(
    hub: &Hub,
    spoke: &SpokeConfig,
    requested_at: &str,
    deadline: Instant,
    timeout: Duration,
) -> Check {
    let (ns, name) = (&spoke.kustomization.namespace, &spoke.kustomization.name);
    loop {
        let last = match hub.kustomization(ns, name).await {
            Ok(Some(obj)) => match ready(&obj, requested_at) {
                Seen::Done(check) => return check,
                Seen::Waiting(why) => why,
            },
            Ok(None) => {
                return Check::failed(
                    "Missing",
                    format!(
                        "kustomizations {ns}/{name} does not exist on the hub: set spokes[{}].kustomization",
                        spoke.name
                    ),
                );
            }
            Err(e) => e,
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

/// Ready once Flux handled our request and settled on True or False.
fn ready(obj: &HubObject, requested_at: &str) -> Seen {
    if obj.last_handled_reconcile_at.as_deref() != Some(requested_at) {
        return Seen::Waiting("Flux has not handled the reconcile request yet".into());
    }
    if !obj.observed() {
        return Seen::Waiting("observedGeneration is behind".into());
    }
    match obj.condition("Ready") {
        Some(c) if c.status == "True" || c.status == "False" => Seen::Done(Check {
            ok: c.status == "True",
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone().unwrap_or_default(),
        }),
        Some(c) => Seen::Waiting(format!(
            "Ready {} ({})",
            c.status,
            c.message.as_deref().unwrap_or_default()
        )),
        None => Seen::Waiting("no Ready condition yet".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::Condition;

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
            synced(&sealed("old", 2, 2, Some(ok.clone())), "value", "new"),
            Seen::Waiting(w) if w.contains("older encryptedData")
        ));
        assert!(matches!(
            synced(&sealed("new", 3, 2, Some(ok.clone())), "value", "new"),
            Seen::Waiting(w) if w.contains("generation 3")
        ));
        assert!(matches!(
            synced(&sealed("new", 3, 3, Some(ok)), "value", "new"),
            Seen::Done(Check { ok: true, .. })
        ));
        let bad = cond(
            "Synced",
            "False",
            "ErrUnsealFailed",
            "no key could decrypt secret (value)",
        );
        match synced(&sealed("new", 3, 3, Some(bad)), "value", "new") {
            Seen::Done(c) => {
                assert!(!c.ok);
                assert_eq!(c.status, "False");
                assert_eq!(c.message, "no key could decrypt secret (value)");
            }
            Seen::Waiting(w) => panic!("{w}"),
        }
        assert!(matches!(
            synced(&sealed("new", 3, 3, None), "value", "new"),
            Seen::Waiting(_)
        ));
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
            Seen::Waiting(w) => panic!("{w}"),
        }
    }
}
