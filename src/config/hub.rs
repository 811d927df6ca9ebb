//! `hub:`: the hub cluster's API, where the Sealed Secrets controller and Flux run.
//! Absent: no hub API (sealing.cert is used as is).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Loading, Span, is_dns_label, is_dns_subdomain};

pub const DEFAULT_CONTROLLER_NAMESPACE: &str = "kube-system";
pub const DEFAULT_CONTROLLER_NAME: &str = "sealed-secrets-controller";
pub const DEFAULT_VERIFY_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHub {
    kubeconfig: Option<PathBuf>,
    controller: Option<RawController>,
    verify_timeout: Option<Span>,
    flux_default_service_account: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawController {
    namespace: Option<String>,
    name: Option<String>,
    #[serde(default, deserialize_with = "service_port")]
    port: Option<String>,
}

/// A Service port's name, or its number (`port: 8080` as YAML writes it).
fn service_port<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NameOrNumber {
        Name(String),
        Number(u16),
    }
    Ok(Option::<NameOrNumber>::deserialize(d)?.map(|p| match p {
        NameOrNumber::Name(n) => n,
        NameOrNumber::Number(n) => n.to_string(),
    }))
}

/// The hub cluster's API: where the Sealed Secrets controller and Flux run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubConfig {
    /// None: in-cluster, else KUBECONFIG or ~/.kube/config (kube::Config::infer).
    pub kubeconfig: Option<PathBuf>,
    pub controller: ControllerRef,
    /// Bounds waiting for Synced, then Ready, after a push.
    pub verify_timeout: Duration,
    /// The Flux controllers' `--default-service-account`: impersonated on the spokes for a
    /// consumer without spec.serviceAccountName.
    pub flux_default_service_account: Option<String>,
}

/// The Sealed Secrets controller's Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerRef {
    pub namespace: String,
    pub name: String,
    /// None: the Service's first port (its name, else its number).
    pub port: Option<String>,
}

/// Defaults filled in; the controller's names and port, and the verify timeout checked.
pub(super) fn load(h: RawHub, l: &Loading) -> Result<HubConfig, ConfigError> {
    let c = h.controller.unwrap_or_default();
    let controller = ControllerRef {
        namespace: c
            .namespace
            .unwrap_or_else(|| DEFAULT_CONTROLLER_NAMESPACE.into()),
        name: c.name.unwrap_or_else(|| DEFAULT_CONTROLLER_NAME.into()),
        port: c.port,
    };
    for (field, v) in [
        ("namespace", &controller.namespace),
        ("name", &controller.name),
    ] {
        if !is_dns_label(v) {
            return Err(l.bad(&format!("hub.controller.{field}"), format!(
                "hub.controller.{field} {v:?} is not a Kubernetes name: lowercase letters, digits and '-' (e.g. {})",
                if field == "name" { DEFAULT_CONTROLLER_NAME } else { DEFAULT_CONTROLLER_NAMESPACE }
            )));
        }
    }
    // "" is an unnamed port, as kubeseal asks for it (upstream controller.yaml).
    if let Some(p) = &controller.port
        && !p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(l.bad("hub.controller.port", format!(
            "hub.controller.port {p:?} must be the Service's port name or number (e.g. http or 8080; \"\" for an unnamed port), or left out to use its first port"
        )));
    }
    let verify_timeout = h.verify_timeout.map_or(DEFAULT_VERIFY_TIMEOUT, |s| s.0);
    if verify_timeout.is_zero() {
        return Err(l.bad(
            "hub.verify_timeout",
            "hub.verify_timeout must be longer than 0s: e.g. 2m".into(),
        ));
    }
    if let Some(sa) = &h.flux_default_service_account
        && !is_dns_subdomain(sa)
    {
        return Err(l.bad("hub.flux_default_service_account", format!(
            "hub.flux_default_service_account {sa:?} is not a ServiceAccount name: set it to what the Flux controllers' --default-service-account says (e.g. flux-deployer), or leave it out when they have none"
        )));
    }
    Ok(HubConfig {
        kubeconfig: h.kubeconfig.as_deref().map(|p| l.resolve(p)),
        controller,
        verify_timeout,
        flux_default_service_account: h.flux_default_service_account,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::super::KustomizationRef;
    use super::super::tests::{MIN, parse, refused};
    use super::*;

    #[test]
    fn hub_keys_and_their_defaults() {
        let c = parse(MIN).unwrap();
        assert_eq!(c.hub, None, "no hub: key, no hub API");
        assert_eq!(
            c.spokes[0].kustomization, None,
            "no kustomization: every consumer of the Secret is found on the hub"
        );
        let c = parse(&MIN.replace("10.0.0.1}", "10.0.0.1, kustomization: {}}")).unwrap();
        assert_eq!(
            c.spokes[0].kustomization,
            Some(KustomizationRef {
                name: "dev".into(),
                namespace: "flux-system".into()
            }),
            "an empty kustomization: takes the defaults and is still the override"
        );
        let c = parse(&format!("{MIN}hub: {{}}\n")).unwrap();
        let hub = c.hub.unwrap();
        assert_eq!(hub.kubeconfig, None);
        assert_eq!(
            hub.controller,
            ControllerRef {
                namespace: "kube-system".into(),
                name: "sealed-secrets-controller".into(),
                port: None
            }
        );
        assert_eq!(hub.verify_timeout, Duration::from_secs(120));
        assert_eq!(hub.flux_default_service_account, None);
        let c = parse(&format!(
            "{MIN}hub: {{flux_default_service_account: flux-deployer}}\n"
        ))
        .unwrap();
        assert_eq!(
            c.hub.unwrap().flux_default_service_account.as_deref(),
            Some("flux-deployer")
        );
        let text = MIN.replace(
            "10.0.0.1}",
            "10.0.0.1, kustomization: {name: apps-dev, namespace: fleet}}",
        ) + "hub:\n  kubeconfig: hub.kubeconfig\n  controller: {namespace: ss, name: sealer, port: http}\n  verify_timeout: 30s\n";
        let c = parse(&text).unwrap();
        let hub = c.hub.unwrap();
        assert_eq!(
            hub.kubeconfig.as_deref(),
            Some(Path::new("/etc/spokekeeper/hub.kubeconfig"))
        );
        assert_eq!(hub.controller.port.as_deref(), Some("http"));
        assert_eq!(hub.controller.name, "sealer");
        // Upstream controller.yaml's unnamed port, as kubeseal asks for it, or its number.
        for (port, want) in [("\"\"", ""), ("8080", "8080"), ("\"8080\"", "8080")] {
            let c = parse(&format!("{MIN}hub: {{controller: {{port: {port}}}}}\n")).unwrap();
            assert_eq!(
                c.hub.unwrap().controller.port.as_deref(),
                Some(want),
                "{port}"
            );
        }
        assert_eq!(hub.verify_timeout, Duration::from_secs(30));
        let k = c.spokes[0].kustomization.as_ref().unwrap();
        assert_eq!(
            (k.name.as_str(), k.namespace.as_str()),
            ("apps-dev", "fleet")
        );
    }

    #[test]
    fn hub_mistakes_name_the_field() {
        refused(&format!("{MIN}hub: {{kubecfg: x}}\n"), &["kubecfg"]);
        refused(
            &format!("{MIN}hub: {{controller: {{nmae: x}}}}\n"),
            &["nmae"],
        );
        refused(
            &format!("{MIN}hub: {{controller: {{name: Sealed_Secrets}}}}\n"),
            &["hub.controller.name", "sealed-secrets-controller"],
        );
        refused(
            &format!("{MIN}hub: {{controller: {{port: \"http/8080\"}}}}\n"),
            &["hub.controller.port"],
        );
        refused(
            &format!("{MIN}hub: {{verify_timeout: 0s}}\n"),
            &["hub.verify_timeout"],
        );
        refused(
            &format!("{MIN}hub: {{flux_default_service_account: Flux_Deployer}}\n"),
            &[
                "hub.flux_default_service_account",
                "--default-service-account",
            ],
        );
        refused(
            &format!("{MIN}hub: {{verify_timeout: 2}}\n"),
            &["verify_timeout"],
        );
        refused(
            &MIN.replace("10.0.0.1}", "10.0.0.1, kustomization: {name: Dev}}"),
            &["line 4: spokes[0].kustomization.name", "Dev"],
        );
        refused(
            &MIN.replace("10.0.0.1}", "10.0.0.1, kustomization: {nam: dev}}"),
            &["nam"],
        );
    }
}
