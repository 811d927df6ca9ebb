//! The Flux objects that deploy with a spoke's kubeconfig Secret: every Kustomization and
//! HelmRelease in the Secret's namespace (Flux reads the Secret from the consumer's own
//! namespace) whose `spec.kubeConfig.secretRef.name` is that Secret.
//!
//! The hub is hostile input: a list is read in pages of [`PAGE`] objects, each body cut
//! off at [`PAGE_BYTES`] and parsed into the few fields used here, and at most
//! [`MAX_PAGES`] pages per kind are read; a consumer whose name is not a Kubernetes name
//! fails the listing (it never becomes a request path).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use kube::api::{ApiResource, GroupVersionKind, ListParams};
use serde::{Deserialize, Serialize};

use super::{CALL_TIMEOUT, CallError, Hub, HubError};
use crate::config::{SpokeConfig, is_dns_subdomain};
use crate::text::one_line;

/// Objects asked for per list request.
pub(crate) const PAGE: u32 = 100;
/// A list response longer than this is refused.
pub(crate) const PAGE_BYTES: usize = 4 << 20;
/// Pages read per kind and namespace: at most PAGE * MAX_PAGES objects.
pub(crate) const MAX_PAGES: usize = 10;

/// The Flux kinds that take a kubeconfig Secret; both take the reconcile annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Kind {
    Kustomization,
    HelmRelease,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Kind::Kustomization, Kind::HelmRelease];

    pub fn resource(self) -> ApiResource {
        let (group, version, plural) = match self {
            Kind::Kustomization => ("kustomize.toolkit.fluxcd.io", "v1", "kustomizations"),
            Kind::HelmRelease => ("helm.toolkit.fluxcd.io", "v2", "helmreleases"),
        };
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, self.as_str()),
            plural,
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Kustomization => "Kustomization",
            Kind::HelmRelease => "HelmRelease",
        }
    }
}

/// One Flux object that deploys with the Secret.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Consumer {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// How a spoke's consumers were found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FoundBy {
    /// Listed on the hub: every Kustomization and HelmRelease in the Secret's namespace
    /// whose spec.kubeConfig.secretRef.name is the Secret.
    Listed,
    /// `spokes[].kustomization`: that one Kustomization only.
    Configured,
}

pub fn found_by(spoke: &SpokeConfig) -> FoundBy {
    match spoke.kustomization {
        Some(_) => FoundBy::Configured,
        None => FoundBy::Listed,
    }
}

/// One listed consumer of a Secret, with what Flux reads through it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Listing {
    /// The Secret's name (spec.kubeConfig.secretRef.name), or a federated spoke's
    /// ConfigMap's (spec.kubeConfig.configMapRef.name).
    pub secret: String,
    /// Through spec.kubeConfig.configMapRef: a federated spoke's consumer.
    pub config_map: bool,
    pub consumer: Consumer,
    /// spec.kubeConfig.secretRef.key as the hub has it ("" when unset).
    pub key: String,
    /// spec.serviceAccountName ("" when unset): Flux impersonates it on the spoke.
    pub service_account: String,
}

/// A ServiceAccount Flux impersonates on the spoke with the spoke's credential
/// (`system:serviceaccount:NAMESPACE:NAME`, a username only), and a consumer that needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Impersonated {
    pub namespace: String,
    pub name: String,
    pub consumer: Consumer,
}

/// The ServiceAccounts the spoke's listed consumers make Flux impersonate, each once:
/// spec.serviceAccountName, else `default` (the controllers' --default-service-account),
/// in the consumer's namespace. Not listed (a configured `spokes[].kustomization`, or a
/// failed listing): none known.
pub fn impersonated(
    spoke: &SpokeConfig,
    listed: &Listed,
    default: Option<&str>,
) -> Vec<Impersonated> {
    let Some(Ok(all)) = listed.get(&spoke.secret.namespace) else {
        return Vec::new();
    };
    if spoke.kustomization.is_some() {
        return Vec::new();
    }
    let mut out: Vec<Impersonated> = Vec::new();
    for l in all.iter().filter(|l| uses(l, spoke)) {
        let name = match (l.service_account.as_str(), default) {
            ("", Some(d)) => d,
            ("", None) => continue,
            (sa, _) => sa,
        };
        if out
            .iter()
            .any(|i| i.namespace == l.consumer.namespace && i.name == name)
        {
            continue;
        }
        out.push(Impersonated {
            namespace: l.consumer.namespace.clone(),
            name: name.to_string(),
            consumer: l.consumer.clone(),
        });
    }
    out
}

/// Per Secret namespace, the consumers of the Secrets asked for. A failed listing is
/// shared by every spoke whose Secret is in that namespace.
pub type Listed = BTreeMap<String, Result<Vec<Listing>, Arc<HubError>>>;

/// The key Flux reads when `spec.kubeConfig.secretRef.key` is unset: `value`, else
/// `value.yaml` (fluxcd/pkg runtime/client, impersonator.go).
const FLUX_DEFAULT_KEYS: [&str; 2] = ["value", "value.yaml"];

/// A consumer whose secretRef.key (`key`) makes Flux read something other than
/// `written`, the one key of the Secret spokekeeper writes: what it reads, as a phrase.
/// None when Flux reads `written`.
pub(crate) fn misread(key: &str, written: &str) -> Option<String> {
    match key {
        "" if FLUX_DEFAULT_KEYS.contains(&written) => None,
        "" => Some(format!(
            "reads key {} (then {}; spec.kubeConfig.secretRef.key is unset)",
            FLUX_DEFAULT_KEYS[0], FLUX_DEFAULT_KEYS[1]
        )),
        k if k == written => None,
        k => Some(format!("reads key {}", one_line(k, 80))),
    }
}

/// The spoke's listed consumers that read another key of its Secret than the one
/// written (spokes[].secret.key), each with the reason Flux will fail with it.
pub fn wrong_keys(spoke: &SpokeConfig, listed: &Listed) -> Vec<(Consumer, String)> {
    if spoke.kustomization.is_some() {
        return Vec::new();
    }
    let (ns, name, written) = (
        &spoke.secret.namespace,
        &spoke.secret.name,
        &spoke.secret.key,
    );
    let Some(Ok(all)) = listed.get(ns) else {
        return Vec::new();
    };
    all.iter()
        .filter(|l| &l.secret == name && !l.config_map)
        .filter_map(|l| {
            let reads = misread(&l.key, written)?;
            let why = format!(
                "{} {reads} of Secret {ns}/{name}, but spokekeeper writes key {written} (spokes[{}].secret.key): Flux will fail to read the kubeconfig; set its spec.kubeConfig.secretRef.key to {written}, or spokes[{}].secret.key to what it reads",
                l.consumer, spoke.name, spoke.name
            );
            Some((l.consumer.clone(), why))
        })
        .collect()
}

/// A federated spoke's listed consumers still on `secretRef` to its name: they read its
/// old Secret, which goes once none does (docs/federated.md, "Migration").
pub fn on_old_secret(spoke: &SpokeConfig, listed: &Listed) -> Vec<Consumer> {
    if spoke.credential.mode != crate::config::CredentialMode::Federated {
        return Vec::new();
    }
    let Some(Ok(all)) = listed.get(&spoke.secret.namespace) else {
        return Vec::new();
    };
    all.iter()
        .filter(|l| l.secret == spoke.secret.name && !l.config_map)
        .map(|l| l.consumer.clone())
        .collect()
}

/// A spoke's consumers: the configured Kustomization, or those `listed`.
pub fn of(spoke: &SpokeConfig, listed: &Listed) -> (FoundBy, Result<Vec<Consumer>, Arc<HubError>>) {
    if let Some(k) = &spoke.kustomization {
        let c = Consumer {
            kind: Kind::Kustomization,
            namespace: k.namespace.clone(),
            name: k.name.clone(),
        };
        return (FoundBy::Configured, Ok(vec![c]));
    }
    let ns = &spoke.secret.namespace;
    let found = match listed.get(ns) {
        Some(Ok(all)) => Ok(all
            .iter()
            .filter(|l| uses(l, spoke))
            .map(|l| l.consumer.clone())
            .collect()),
        Some(Err(e)) => Err(e.clone()),
        None => Err(Arc::new(HubError::NotListed {
            namespace: ns.clone(),
        })),
    };
    (FoundBy::Listed, found)
}

/// Whether a listed consumer reaches the spoke through what it commits: its Secret, or a
/// federated spoke's ConfigMap of that name.
fn uses(l: &Listing, spoke: &SpokeConfig) -> bool {
    let federated = spoke.credential.mode == crate::config::CredentialMode::Federated;
    l.secret == spoke.secret.name && l.config_map == federated
}

/// A list response, reduced to what is used (serde skips the rest without keeping it).
#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    items: Vec<Item>,
    #[serde(default)]
    metadata: PageMeta,
}

#[derive(Default, Deserialize)]
struct PageMeta {
    #[serde(default, rename = "continue")]
    next: Option<String>,
}

#[derive(Deserialize)]
struct Item {
    metadata: ItemMeta,
    spec: Option<ItemSpec>,
}

#[derive(Deserialize)]
struct ItemMeta {
    name: String,
    namespace: Option<String>,
}

#[derive(Deserialize)]
struct ItemSpec {
    #[serde(default, rename = "kubeConfig")]
    kube_config: Option<KubeConfigRef>,
    #[serde(default, rename = "serviceAccountName")]
    service_account_name: Option<String>,
    path: Option<String>,
    decryption: Option<Decryption>,
}

#[derive(Deserialize)]
struct Decryption {
    provider: Option<String>,
}

#[derive(Deserialize)]
struct KubeConfigRef {
    #[serde(default, rename = "secretRef")]
    secret_ref: Option<SecretRef>,
    #[serde(default, rename = "configMapRef")]
    config_map_ref: Option<ConfigMapRef>,
}

#[derive(Deserialize)]
struct ConfigMapRef {
    name: String,
}

#[derive(Deserialize)]
struct SecretRef {
    name: String,
    key: Option<String>,
}

impl Hub {
    /// The consumers of the Secrets of `spokes` without `spokes[].kustomization`, listed
    /// once per namespace (a renewal verifies every spoke, often in one namespace), all
    /// within `bound`.
    pub async fn list_consumers<'a>(
        &self,
        spokes: impl Iterator<Item = &'a SpokeConfig>,
        bound: Duration,
    ) -> Listed {
        let mut wanted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for s in spokes.filter(|s| s.kustomization.is_none()) {
            wanted
                .entry(s.secret.namespace.clone())
                .or_default()
                .insert(s.secret.name.clone());
        }
        let deadline = tokio::time::Instant::now() + bound;
        let mut listed = Listed::new();
        for (ns, secrets) in wanted {
            let found = tokio::time::timeout_at(deadline, self.consumers(&ns, &secrets))
                .await
                .unwrap_or_else(|_| {
                    Err(HubError::ListTimeout {
                        namespace: ns.clone(),
                        secs: bound.as_secs(),
                    })
                });
            listed.insert(ns, found.map_err(Arc::new));
        }
        listed
    }

    /// Every Kustomization and HelmRelease in `namespace` whose kubeconfig Secret is one
    /// of `secrets`, sorted.
    pub async fn consumers(
        &self,
        namespace: &str,
        secrets: &BTreeSet<String>,
    ) -> Result<Vec<Listing>, HubError> {
        let mut found = Vec::new();
        for kind in Kind::ALL {
            let mut next: Option<String> = None;
            let mut pages = 0;
            loop {
                if pages == MAX_PAGES {
                    return Err(HubError::TooMany {
                        plural: kind.resource().plural,
                        namespace: namespace.to_string(),
                        max: MAX_PAGES * PAGE as usize,
                    });
                }
                pages += 1;
                let page = self.page(kind, namespace, next.as_deref()).await?;
                found.extend(matching(kind, namespace, page.items, secrets)?);
                match page.metadata.next {
                    Some(c) if !c.is_empty() => next = Some(c),
                    _ => break,
                }
            }
        }
        found.sort();
        found.dedup();
        Ok(found)
    }

    /// The Kustomizations in `namespace` that decrypt with sops (spec.decryption.provider
    /// `sops`), each with its spec.path.
    pub(crate) async fn sops_kustomizations(
        &self,
        namespace: &str,
    ) -> Result<Vec<(Consumer, String)>, HubError> {
        let kind = Kind::Kustomization;
        let mut found = Vec::new();
        let mut next: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let page = self.page(kind, namespace, next.as_deref()).await?;
            for item in page.items {
                let Some(spec) = item.spec else { continue };
                let sops = spec.decryption.and_then(|d| d.provider).as_deref() == Some("sops");
                if !sops || !crate::config::is_dns_subdomain(&item.metadata.name) {
                    continue;
                }
                let consumer = Consumer {
                    kind,
                    namespace: item.metadata.namespace.unwrap_or_else(|| namespace.into()),
                    name: item.metadata.name,
                };
                found.push((consumer, spec.path.unwrap_or_default()));
            }
            match page.metadata.next {
                Some(c) if !c.is_empty() => next = Some(c),
                _ => return Ok(found),
            }
        }
        Err(HubError::TooMany {
            plural: kind.resource().plural,
            namespace: namespace.to_string(),
            max: MAX_PAGES * PAGE as usize,
        })
    }

    /// One list page, its body bounded in size and time.
    async fn page(
        &self,
        kind: Kind,
        namespace: &str,
        next: Option<&str>,
    ) -> Result<Page, HubError> {
        let ar = kind.resource();
        let what = format!("{} in {namespace}", ar.plural);
        let mut lp = ListParams::default().limit(PAGE);
        if let Some(c) = next {
            lp = lp.continue_token(c);
        }
        let path = format!(
            "/apis/{}/{}/namespaces/{namespace}/{}",
            ar.group, ar.version, ar.plural
        );
        let req = kube::core::Request::new(path)
            .list(&lp)
            .map_err(|source| HubError::ListRequest {
                what: what.clone(),
                error: source,
            })?
            .map(kube::client::Body::from);
        let what = format!("list {what}");
        let read = async {
            let resp = self.client.send(req).await?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), PAGE_BYTES)
                .collect()
                .await
                .map_err(|_| CallError::TooLong {
                    mib: PAGE_BYTES >> 20,
                })?
                .to_bytes();
            Ok::<_, CallError>((status, body))
        };
        let (status, body) = tokio::time::timeout(CALL_TIMEOUT, read)
            .await
            .unwrap_or(Err(CallError::NoAnswer {
                secs: CALL_TIMEOUT.as_secs(),
            }))
            .map_err(|source| HubError::Call {
                what: what.clone(),
                error: source,
            })?;
        if status == hyper::http::StatusCode::NOT_FOUND {
            // The kind is not served (Flux installed without helm-controller, say): a
            // list in a namespace that does not exist is 200 and empty, never 404.
            tracing::debug!(
                kind = kind.as_str(),
                "not served by the hub: no consumers of it"
            );
            return Ok(Page {
                items: Vec::new(),
                metadata: PageMeta::default(),
            });
        }
        if !status.is_success() {
            return Err(refused(what, status, &body));
        }
        serde_json::from_slice(&body).map_err(|source| HubError::NotList {
            what,
            error: source,
        })
    }
}

/// The items of one page that use one of `secrets`. A matching name that is not a
/// Kubernetes name fails the whole listing: it would become a request path.
fn matching(
    kind: Kind,
    namespace: &str,
    items: Vec<Item>,
    secrets: &BTreeSet<String>,
) -> Result<Vec<Listing>, HubError> {
    let mut out = Vec::new();
    for item in items {
        if item
            .metadata
            .namespace
            .as_deref()
            .is_some_and(|ns| ns != namespace)
        {
            continue;
        }
        let Some(spec) = item.spec else {
            continue;
        };
        let (secret_ref, config_map) = match spec.kube_config {
            Some(KubeConfigRef {
                secret_ref: Some(r),
                ..
            }) if secrets.contains(&r.name) => (r, false),
            Some(KubeConfigRef {
                config_map_ref: Some(r),
                ..
            }) if secrets.contains(&r.name) => (
                SecretRef {
                    name: r.name,
                    key: None,
                },
                true,
            ),
            _ => continue,
        };
        let service_account = spec.service_account_name.unwrap_or_default();
        if !service_account.is_empty() && !is_dns_subdomain(&service_account) {
            return Err(HubError::BadServiceAccount {
                consumer: format!(
                    "{} {namespace}/{}",
                    kind.as_str(),
                    one_line(&item.metadata.name, 80)
                ),
                service_account: one_line(&service_account, 80),
            });
        }
        let secret = secret_ref.name;
        let name = item.metadata.name;
        if !is_dns_subdomain(&name) {
            return Err(HubError::BadName {
                kind: kind.as_str(),
                namespace: namespace.to_string(),
                name: one_line(&name, 80),
                secret,
            });
        }
        out.push(Listing {
            secret,
            config_map,
            consumer: Consumer {
                kind,
                namespace: namespace.to_string(),
                name,
            },
            key: secret_ref.key.unwrap_or_default(),
            service_account,
        });
    }
    Ok(out)
}

/// A failed call to `what`, with its answer (see [`api_error`]).
pub(super) fn refused(what: String, status: hyper::http::StatusCode, body: &[u8]) -> HubError {
    HubError::Refused {
        what,
        status: status.as_u16(),
        answer: api_error(status, body),
    }
}

/// A failed call's metav1 Status as one bounded line.
pub(super) fn api_error(status: hyper::http::StatusCode, body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Status {
        #[serde(default)]
        reason: String,
        #[serde(default)]
        message: String,
    }
    match serde_json::from_slice::<Status>(body) {
        Ok(s) => one_line(
            &format!("{} {}: {}", status.as_u16(), s.reason, s.message),
            300,
        ),
        Err(_) => format!("{status}"),
    }
}

#[cfg(test)]
mod tests;
