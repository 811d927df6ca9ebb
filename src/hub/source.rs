//! The Flux source a consumer takes its artifact from: a Kustomization's
//! `spec.sourceRef`, a HelmRelease's `spec.chartRef` or, for `spec.chart`, the HelmChart
//! helm-controller made for it (`status.helmChart`). Read when the consumer's Ready says
//! the source failed (`ArtifactFailed`, `SourceNotReady`), so the report names the
//! source and says what source-controller says of it.

use std::fmt;

use kube::api::{ApiResource, GroupVersionKind};
use serde::Serialize;

use super::{Hub, HubError, HubObject};
use crate::config::is_dns_subdomain;

/// Group and version of every Flux source kind.
const GROUP: &str = "source.toolkit.fluxcd.io";
const VERSION: &str = "v1";

/// The source kinds a consumer can name, and their plurals (`hub::ACCESS` grants `get`).
pub(crate) const KINDS: &[(&str, &str)] = &[
    ("GitRepository", "gitrepositories"),
    ("OCIRepository", "ocirepositories"),
    ("Bucket", "buckets"),
    ("HelmChart", "helmcharts"),
    ("ExternalArtifact", "externalartifacts"),
];

/// One source object. Built only from a known kind and Kubernetes names (the hub is
/// hostile input: these become a request path).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceRef {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for SourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

impl SourceRef {
    fn new(kind: &str, namespace: &str, name: &str) -> Option<SourceRef> {
        let kind = KINDS.iter().find(|(k, _)| *k == kind)?.0;
        (is_dns_subdomain(namespace) && is_dns_subdomain(name)).then(|| SourceRef {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        })
    }

    /// The source of a Kustomization or HelmRelease (its JSON body) in namespace `own`; a
    /// reference without a namespace is in the object's own.
    pub(crate) fn of(v: &serde_json::Value, own: &str) -> Option<SourceRef> {
        let spec = &v["spec"];
        let named = |r: &serde_json::Value| {
            SourceRef::new(
                r["kind"].as_str()?,
                r["namespace"].as_str().unwrap_or(own),
                r["name"].as_str()?,
            )
        };
        if spec["sourceRef"].is_object() {
            return named(&spec["sourceRef"]);
        }
        if spec["chartRef"].is_object() {
            return named(&spec["chartRef"]);
        }
        let (ns, name) = v["status"]["helmChart"].as_str()?.split_once('/')?;
        SourceRef::new("HelmChart", ns, name)
    }

    pub(crate) fn resource(&self) -> ApiResource {
        let plural = KINDS
            .iter()
            .find(|(k, _)| *k == self.kind)
            .map_or("", |(_, p)| p);
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, self.kind), plural)
    }
}

impl Hub {
    pub(crate) async fn source(&self, s: &SourceRef) -> Result<Option<HubObject>, HubError> {
        self.get(&s.resource(), &s.namespace, &s.name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_source_of_each_consumer_shape() {
        let k = json!({"metadata": {"namespace": "flux-system"},
            "spec": {"sourceRef": {"kind": "GitRepository", "name": "fleet"}}});
        let s = SourceRef::of(&k, k["metadata"]["namespace"].as_str().unwrap()).unwrap();
        assert_eq!(s.to_string(), "GitRepository flux-system/fleet");
        assert_eq!(s.resource().plural, "gitrepositories");
        let k = json!({"metadata": {"namespace": "apps"},
            "spec": {"sourceRef": {"kind": "OCIRepository", "name": "o", "namespace": "shared"}}});
        assert_eq!(
            SourceRef::of(&k, k["metadata"]["namespace"].as_str().unwrap())
                .unwrap()
                .to_string(),
            "OCIRepository shared/o"
        );
        let hr = json!({"metadata": {"namespace": "flux-system"},
            "spec": {"chart": {"spec": {"chart": "c", "sourceRef": {"kind": "HelmRepository", "name": "charts"}}}},
            "status": {"helmChart": "flux-system/flux-system-apps"}});
        assert_eq!(
            SourceRef::of(&hr, "flux-system").unwrap().to_string(),
            "HelmChart flux-system/flux-system-apps"
        );
        let hr = json!({"metadata": {"namespace": "flux-system"},
            "spec": {"chartRef": {"kind": "OCIRepository", "name": "podinfo"}}});
        assert_eq!(
            SourceRef::of(&hr, "flux-system").unwrap().to_string(),
            "OCIRepository flux-system/podinfo"
        );
        // Hostile or unknown: no source (never a request path).
        for bad in [
            json!({"spec": {"sourceRef": {"kind": "GitRepository", "name": "../x"}}}),
            json!({"spec": {"sourceRef": {"kind": "Secret", "name": "x"}}}),
            json!({"status": {"helmChart": "no-slash"}}),
        ] {
            assert_eq!(SourceRef::of(&bad, "flux-system"), None, "{bad}");
        }
    }
}
