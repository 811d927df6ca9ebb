//! What a verification found: [`HubReport`], one per spoke, and its one-line summary.

use serde::Serialize;

use super::FoundBy;
use crate::config::SpokeConfig;
use crate::hub::{Condition, Consumer, consumers};
use crate::text::one_line;

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
    pub(super) fn failed(status: &str, message: String) -> Check {
        Check {
            ok: false,
            status: status.into(),
            reason: None,
            message: one_line(&message, 300),
        }
    }

    /// A settled condition from the hub.
    pub(super) fn of(c: &Condition, ok: bool, default_message: &str) -> Check {
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

/// How the committed credential became the spoke's Secret on the hub, written in the
/// report as `synced`, `decrypted` or `applied`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Delivery {
    /// A SealedSecret: its Synced condition, for the committed ciphertext.
    #[serde(rename = "synced")]
    Synced(Check),
    /// A sops output: the Ready condition of the Kustomization that decrypts and applies
    /// it, for this request (`DecryptionFailed` when kustomize-controller could not).
    #[serde(rename = "decrypted")]
    Decrypted(Check),
    /// A federated spoke's ConfigMap: its data on the hub is the commit's.
    #[serde(rename = "applied")]
    Applied(Check),
}

impl Delivery {
    pub fn check(&self) -> &Check {
        match self {
            Delivery::Synced(c) | Delivery::Decrypted(c) | Delivery::Applied(c) => c,
        }
    }

    /// The word the summary uses for it.
    fn word(&self) -> &'static str {
        match self {
            Delivery::Synced(_) => "synced",
            Delivery::Decrypted(_) => "decrypted",
            Delivery::Applied(_) => "applied",
        }
    }
}

/// The hub's view of one spoke after its credential was pushed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HubReport {
    #[serde(flatten)]
    pub delivery: Delivery,
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
    pub(super) fn new(spoke: &SpokeConfig, delivery: Delivery) -> HubReport {
        HubReport {
            delivery,
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
        self.delivery.check().ok
            && self.list_error.is_none()
            && self.consumers.iter().all(|c| c.ready.ok)
    }

    /// Unsealed, but no Kustomization or HelmRelease uses the Secret. A warning, not a
    /// failure: the validated credential is on the hub, and nothing that deploys is
    /// broken by it (a spoke being set up, or one whose consumers name another Secret).
    pub(crate) fn unused(&self) -> bool {
        self.ok() && self.consumers.is_empty()
    }

    /// One line for tables and logs.
    pub fn summary(&self) -> String {
        let done = self.delivery.word();
        if !self.delivery.check().ok {
            return format!("not {done}: {}", self.delivery.check().message);
        }
        if let Some(e) = &self.list_error {
            return format!("{done}, consumers not listed: {e}");
        }
        if self.consumers.is_empty() {
            let (ns, name) = self.secret.split_once('/').unwrap_or(("", &self.secret));
            return format!(
                "{done}, but nothing deploys with it: no Kustomization or HelmRelease in {ns} has spec.kubeConfig.secretRef.name {name}"
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
            (true, _) => format!("{done}, ready: {}", names(&ready, false)),
            (false, true) => format!("{done}, not ready: {}", names(&not, true)),
            (false, false) => format!(
                "{done}, not ready: {}; ready: {}",
                names(&not, true),
                names(&ready, false)
            ),
        }
    }
}
