//! The root: the Kustomization that applies a spoke's SealedSecret (a federated spoke's
//! ConfigMap), found from the
//! `kustomize.toolkit.fluxcd.io/{namespace,name}` labels kustomize-controller writes on
//! what it applies, and the GitRepository it applies from. After a push both are asked to
//! reconcile in turn, as `flux reconcile kustomization --with-source` does: the
//! GitRepository first, waited for until source-controller handled the request, then the
//! root; left to their intervals, the hub would take the commit minutes later. Each root
//! is asked once per tick, however many spokes it applies.
//!
//! The hub is hostile input: a label that is not a Kubernetes name names no root.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::source::SourceRef;
use super::{Consumer, Hub, HubObject, Kind};
use crate::config::{SpokeConfig, is_dns_subdomain};
use crate::text::one_line;

/// How often the GitRepository is read while waiting for it to handle the request.
const POLL: Duration = Duration::from_millis(500);

/// The labels kustomize-controller sets on every object it applies.
pub const NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";
pub const NAMESPACE_LABEL: &str = "kustomize.toolkit.fluxcd.io/namespace";

/// The Kustomization that applied an object, from its labels.
pub(crate) fn applied_by(labels: &BTreeMap<String, String>) -> Option<Consumer> {
    let (ns, name) = (labels.get(NAMESPACE_LABEL)?, labels.get(NAME_LABEL)?);
    (is_dns_subdomain(ns) && is_dns_subdomain(name)).then(|| Consumer {
        kind: Kind::Kustomization,
        namespace: ns.clone(),
        name: name.clone(),
    })
}

/// A spoke's root, and what it was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root {
    pub kustomization: Consumer,
    /// Its GitRepository (another source kind is not asked).
    pub source: Option<SourceRef>,
    /// The requestedAt the GitRepository was asked with (None: not asked, or refused).
    pub asked: Option<String>,
}

/// The root's GitRepository failed: its Ready reason, and `source KIND NS/NAME: MESSAGE`
/// (one bounded line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SourceFailure {
    pub reason: Option<String>,
    pub message: String,
}

impl Root {
    /// The GitRepository failed the fetch it was asked for (or, not asked, it is failing):
    /// the root stays on its old artifact, so the commit never reaches the hub. Reported
    /// at once, naming it and source-controller's message.
    pub(crate) async fn source_failed(&self, hub: &Hub) -> Option<SourceFailure> {
        let src = self.source.as_ref()?;
        let obj = hub.source(src).await.ok()??;
        failing(src, &obj, self.asked.as_deref())
    }
}

/// See [`Root::source_failed`].
fn failing(src: &SourceRef, obj: &HubObject, asked: Option<&str>) -> Option<SourceFailure> {
    let ready = obj.condition("Ready").filter(|c| c.status == "False")?;
    if asked.is_some() && obj.last_handled_reconcile_at.as_deref() != asked {
        return None;
    }
    Some(SourceFailure {
        reason: ready.reason.as_deref().map(|r| one_line(r, 100)),
        message: one_line(
            &format!(
                "source {src}: {}",
                ready.message.as_deref().unwrap_or_default()
            ),
            300,
        ),
    })
}

/// The roots of `spokes`' SealedSecrets, by spoke name. With `at`, each root's
/// GitRepository and then the root are asked to reconcile, all before `deadline`; a
/// refused request is logged and left to Flux's intervals and the watch label.
pub(crate) async fn roots<'a>(
    hub: &Hub,
    spokes: impl Iterator<Item = &'a SpokeConfig>,
    at: Option<&str>,
    deadline: Instant,
) -> BTreeMap<String, Root> {
    let mut of: BTreeMap<Consumer, Vec<String>> = BTreeMap::new();
    for s in spokes {
        let (ns, name) = (&s.secret.namespace, &s.secret.name);
        // A federated spoke's file is a ConfigMap, applied by its root as a SealedSecret is.
        let applied_by = if s.credential.mode == crate::config::CredentialMode::Federated {
            hub.config_map(ns, name)
                .await
                .ok()
                .flatten()
                .and_then(|c| c.applied_by)
        } else {
            hub.sealed_secret(ns, name)
                .await
                .ok()
                .flatten()
                .and_then(|o| o.applied_by)
        };
        if let Some(k) = applied_by {
            of.entry(k).or_default().push(s.name.clone());
        }
    }
    let mut found = BTreeMap::new();
    for (k, spokes) in of {
        let Some(root) = root_of(hub, k, at, deadline).await else {
            continue;
        };
        for s in spokes {
            found.insert(s, root.clone());
        }
    }
    found
}

/// The Kustomization that applies the first of `spokes`' SealedSecrets found on the hub
/// (by its labels), and its spec.path as written: where `spokekeeper add` lays a new
/// spoke's files. None when the hub shows none (not applied yet, sops Secrets, no answer).
pub async fn applying<'a>(
    hub: &Hub,
    spokes: impl Iterator<Item = &'a SpokeConfig>,
) -> Option<(Consumer, String)> {
    for s in spokes {
        let (ns, name) = (&s.secret.namespace, &s.secret.name);
        let Ok(Some(obj)) = hub.sealed_secret(ns, name).await else {
            continue;
        };
        let Some(k) = obj.applied_by else { continue };
        if let Ok(Some(root)) = hub.consumer(&k).await
            && let Some(path) = root.path
        {
            return Some((k, path));
        }
    }
    None
}

/// `k` as a root, with its GitRepository; with `at`, both asked to reconcile as
/// [`roots`] asks them. None when `k` is not on the hub.
pub(crate) async fn root_of(
    hub: &Hub,
    k: Consumer,
    at: Option<&str>,
    deadline: Instant,
) -> Option<Root> {
    // Labels outlive their Kustomization (a renamed root): only one there is asked.
    let source = match hub.consumer(&k).await {
        Ok(Some(obj)) => obj.source.filter(|s| s.kind == "GitRepository"),
        _ => return None,
    };
    let mut root = Root {
        kustomization: k,
        source,
        asked: None,
    };
    if let Some(at) = at {
        ask(hub, &mut root, at, deadline).await;
    }
    Some(root)
}

/// The GitRepository, waited for until it handled the request, then the root.
async fn ask(hub: &Hub, root: &mut Root, at: &str, deadline: Instant) {
    if let Some(src) = &root.source {
        match hub
            .annotate(
                &src.resource(),
                &src.namespace,
                &src.name,
                at,
                false,
                deadline,
            )
            .await
        {
            Ok(()) => root.asked = Some(at.to_string()),
            Err(e) => {
                tracing::warn!(source = %src, error = %e, "cannot ask the fleet's source to fetch now; left to its interval")
            }
        }
    }
    if let (Some(src), Some(_)) = (&root.source, &root.asked) {
        loop {
            match hub.source(src).await {
                Ok(Some(obj)) if obj.last_handled_reconcile_at.as_deref() == Some(at) => {
                    if failing(src, &obj, Some(at)).is_some() {
                        // Nothing new to apply: the verification names the source.
                        return;
                    }
                    break;
                }
                Ok(None) => break,
                _ => {}
            }
            if Instant::now() + POLL > deadline {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
    }
    if let Err(e) = hub.request(&root.kustomization, at, false, deadline).await {
        tracing::warn!(root = %root.kustomization, error = %e, "cannot ask the Kustomization that applies the SealedSecrets to reconcile; left to its interval");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::Condition;

    #[test]
    fn the_root_comes_from_kustomize_controllers_labels_when_they_are_names() {
        let labels = |ns: &str, name: &str| {
            BTreeMap::from([
                (NAMESPACE_LABEL.to_string(), ns.to_string()),
                (NAME_LABEL.to_string(), name.to_string()),
            ])
        };
        assert_eq!(
            applied_by(&labels("flux-system", "infra")).map(|k| k.to_string()),
            Some("Kustomization flux-system/infra".into())
        );
        assert_eq!(applied_by(&labels("flux-system", "../x")), None);
        assert_eq!(applied_by(&labels("a/b", "infra")), None);
        assert_eq!(applied_by(&BTreeMap::new()), None);
    }

    #[test]
    fn a_failing_source_counts_once_it_handled_the_request() {
        let src = SourceRef::of(
            &serde_json::json!({"spec": {"sourceRef": {"kind": "GitRepository", "name": "flux-system"}}}),
            "flux-system",
        )
        .unwrap();
        let obj = |handled: Option<&str>, status: &str| HubObject {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: status.into(),
                reason: Some("GitOperationFailed".into()),
                message: Some("failed to checkout\nand determine revision".into()),
                ..Condition::default()
            }],
            last_handled_reconcile_at: handled.map(str::to_string),
            ..HubObject::default()
        };
        let c = failing(&src, &obj(Some("t1"), "False"), Some("t1")).unwrap();
        assert_eq!(c.reason.as_deref(), Some("GitOperationFailed"));
        assert_eq!(
            c.message,
            "source GitRepository flux-system/flux-system: failed to checkout and determine revision"
        );
        // Not handled yet: its Ready is from before the request.
        assert_eq!(failing(&src, &obj(Some("t0"), "False"), Some("t1")), None);
        assert_eq!(failing(&src, &obj(Some("t1"), "True"), Some("t1")), None);
        // Not asked (refused): a failing source is the cause as it stands.
        assert!(failing(&src, &obj(None, "False"), None).is_some());
    }
}
