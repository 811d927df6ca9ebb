//! `spokes:`: each spoke node, what is read from it, and where its sealed credential
//! goes. A spoke's `ssh:` and `credential:` are merged over the global ones.

use std::path::PathBuf;

use serde::Deserialize;

use super::credential::{self, CredentialMode, CredentialPolicy, RawCredential};
use super::sealing::{OneOrMany, age_pins};
use super::ssh::{self, SshOverrides, SshSettings};
use super::{ConfigError, Distro, Loading, Scope, SealingFormat, check, is_dns_subdomain};
use crate::fingerprint::{AgeRecipients, Fingerprint};

pub const DEFAULT_SECRET_NAMESPACE: &str = "flux-system";
pub const DEFAULT_SECRET_KEY: &str = "value";
pub const DEFAULT_KUSTOMIZATION_NAMESPACE: &str = "flux-system";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpoke {
    name: String,
    address: String,
    distro: Option<Distro>,
    source: Option<SourceKind>,
    kubeconfig_path: Option<String>,
    api_server: Option<String>,
    #[serde(default)]
    servers: Vec<String>,
    #[serde(default)]
    ssh: SshOverrides,
    secret: Option<RawSecretRef>,
    scope: Option<Scope>,
    output: Option<PathBuf>,
    kustomization: Option<RawKustomizationRef>,
    #[serde(default)]
    credential: RawCredential,
    sealing: Option<RawSpokeSealing>,
}

/// `spokes[].sealing`: the spoke's own output format, over `sealing.format`, and the
/// recipient sets its sops output may be encrypted for.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpokeSealing {
    format: Option<SealingFormat>,
    age_sha256: Option<OneOrMany>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecretRef {
    name: Option<String>,
    namespace: Option<String>,
    key: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKustomizationRef {
    name: Option<String>,
    namespace: Option<String>,
}

/// Where a spoke's kubeconfig is read from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// Over SSH from the node (the default).
    #[default]
    Ssh,
    /// A file on this host: spokekeeper runs on the node itself (and the demo).
    Local,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    pub name: String,
    pub namespace: String,
    pub key: String,
}

impl SecretRef {
    /// Where a sealed spoke's file is committed unless `spokes[].output` says otherwise;
    /// after a switch to federated, where its old Secret stays beside the ConfigMap.
    pub fn sealed_output(&self) -> PathBuf {
        PathBuf::from(format!("fluxcd/{}-sealed.yaml", self.name))
    }
}

/// `spokes[].kustomization`: the one Flux Kustomization verified after a push, instead
/// of every consumer of the spoke's Secret found on the hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KustomizationRef {
    pub name: String,
    pub namespace: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpokeConfig {
    pub name: String,
    pub address: String,
    /// The Kubernetes distribution, which says where its kubeconfig lives.
    pub distro: Distro,
    pub source: SourceKind,
    pub kubeconfig_path: String,
    /// None: https://ADDRESS:PORT-from-the-extracted-kubeconfig.
    pub api_server: Option<url::Url>,
    /// A federated spoke's other control-plane nodes, beside `address`: each is written
    /// its trust over SSH (the spoke's `ssh:`) and its own API server, at
    /// https://NODE:PORT with the port of the spoke's server, proven by itself.
    pub servers: Vec<String>,
    pub ssh: SshSettings,
    pub secret: SecretRef,
    pub scope: Scope,
    /// Relative to the repo root; never absolute, never leaves the repo.
    pub output: PathBuf,
    /// Used only when `hub:` is configured. None: verify every Kustomization and
    /// HelmRelease on the hub whose spec.kubeConfig.secretRef names the spoke's Secret.
    pub kustomization: Option<KustomizationRef>,
    /// `credential:` merged over the global one.
    pub credential: CredentialPolicy,
    /// `spokes[].sealing.format`, else `sealing.format`.
    pub format: SealingFormat,
    /// `spokes[].sealing.age_sha256`: the only recipient sets this spoke's sops output
    /// may be encrypted for, in order (empty: `sealing.age_sha256` binds it).
    pub age_sha256: Vec<Fingerprint<AgeRecipients>>,
}

/// At least one spoke, each with its defaults filled in and the global `ssh:` and
/// `credential:` merged under its own. Each value is checked by `check::spoke` once
/// the spoke is built, and what must differ between spokes by `check::fleet`.
pub(super) fn load(
    raw: Vec<RawSpoke>,
    ssh: &SshOverrides,
    credential: &RawCredential,
    format: SealingFormat,
    l: &Loading,
) -> Result<Vec<SpokeConfig>, ConfigError> {
    if raw.is_empty() {
        return Err(l.err("spokes is empty: add at least one spoke (name and address)".into()));
    }
    let mut spokes = Vec::with_capacity(raw.len());
    for (i, s) in raw.into_iter().enumerate() {
        spokes.push(spoke(i, s, ssh, credential, format, l)?);
    }
    Ok(spokes)
}

/// `spokes[i]`: the checks its defaults depend on (name, written `ssh:`, api_server,
/// `kustomization:`, `credential:`), then the spoke with its defaults.
fn spoke(
    i: usize,
    s: RawSpoke,
    global_ssh: &SshOverrides,
    global_credential: &RawCredential,
    global_format: SealingFormat,
    l: &Loading,
) -> Result<SpokeConfig, ConfigError> {
    let at = format!("spokes[{i}]");
    check::name(i, &s.name).map_err(|e| l.invalid(e))?;
    check::ssh(&format!("{at}.ssh"), &s.ssh).map_err(|e| l.invalid(e))?;
    let api_server = s
        .api_server
        .map(|u| {
            check::api_server(&u)
                .map_err(|e| l.bad(&format!("{at}.api_server"), format!("{at}.api_server {e}")))
        })
        .transpose()?;
    let distro = s.distro.unwrap_or(Distro::K3s);
    let kubeconfig_path = s
        .kubeconfig_path
        .unwrap_or_else(|| distro.kubeconfig_path().into());
    let ssh = ssh::settings(global_ssh, &s.ssh, l);
    let secret = s.secret.unwrap_or_default();
    let secret = SecretRef {
        name: secret
            .name
            .unwrap_or_else(|| format!("{}-kubeconfig", s.name)),
        namespace: secret
            .namespace
            .unwrap_or_else(|| DEFAULT_SECRET_NAMESPACE.into()),
        key: secret.key.unwrap_or_else(|| DEFAULT_SECRET_KEY.into()),
    };
    let mut credential = credential::resolve(
        global_credential,
        &s.credential,
        &at,
        (&s.name, &secret.namespace),
    )
    .map_err(|r| l.bad(&r.key, r.message))?;
    if let Some(f) = credential.federated.as_mut() {
        f.issuer_ca = f.issuer_ca.as_deref().map(|p| l.resolve(p));
        if let Some(n) = f.next.as_mut() {
            n.issuer_ca = n.issuer_ca.as_deref().map(|p| l.resolve(p));
        }
    }
    // A federated spoke's file is a ConfigMap, nothing sealed: named for what it is.
    let output = s.output.unwrap_or_else(|| match credential.mode {
        CredentialMode::Federated => PathBuf::from(format!("fluxcd/{}.yaml", secret.name)),
        _ => secret.sealed_output(),
    });
    servers(&at, &s.address, &s.servers, credential.mode, l)?;
    let kustomization = s
        .kustomization
        .map(|k| kustomization(&at, &s.name, k, l))
        .transpose()?;
    let sealing = s.sealing.unwrap_or_default();
    let age_sha256 = age_pins(sealing.age_sha256, &format!("{at}.sealing.age_sha256"), l)?;
    Ok(SpokeConfig {
        name: s.name,
        address: s.address,
        distro,
        source: s.source.unwrap_or_default(),
        kubeconfig_path,
        api_server,
        servers: s.servers,
        ssh,
        secret,
        scope: s.scope.unwrap_or_default(),
        output,
        kustomization,
        credential,
        format: sealing.format.unwrap_or(global_format),
        age_sha256,
    })
}

/// `spokes[i].servers`: hosts as `address` is, none twice nor `address` again, and only
/// on a federated spoke (a sealed one's credential, read from `address`, is the cluster's
/// and works through any server).
fn servers(
    at: &str,
    address: &str,
    servers: &[String],
    mode: CredentialMode,
    l: &Loading,
) -> Result<(), ConfigError> {
    if !servers.is_empty() && mode != CredentialMode::Federated {
        return Err(l.bad(
            &format!("{at}.servers"),
            format!(
                "{at}.servers is for federated spokes only (credential.mode: federated), whose trust is written on each server node: a {} spoke's credential, read from `address`, works through every server. Fix: remove {at}.servers",
                mode.as_str()
            ),
        ));
    }
    for (j, host) in servers.iter().enumerate() {
        let key = format!("{at}.servers[{j}]");
        check::host(host).map_err(|why| l.bad(&key, format!("{key} {why}")))?;
        if host == address {
            return Err(l.bad(
                &key,
                format!("{key} {host:?} is the spoke's address, always written: list only the other server nodes"),
            ));
        }
        if let Some(k) = servers[..j].iter().position(|h| h == host) {
            return Err(l.bad(
                &key,
                format!("{key} {host:?} is also {at}.servers[{k}]: list each server node once"),
            ));
        }
    }
    Ok(())
}

/// `spokes[i].kustomization`: named after the spoke and in flux-system unless written.
fn kustomization(
    at: &str,
    spoke: &str,
    k: RawKustomizationRef,
    l: &Loading,
) -> Result<KustomizationRef, ConfigError> {
    let k = KustomizationRef {
        name: k.name.unwrap_or_else(|| spoke.to_string()),
        namespace: k
            .namespace
            .unwrap_or_else(|| DEFAULT_KUSTOMIZATION_NAMESPACE.into()),
    };
    for (field, v) in [("name", &k.name), ("namespace", &k.namespace)] {
        if !is_dns_subdomain(v) {
            return Err(l.bad(
                &format!("{at}.kustomization.{field}"),
                format!(
                    "{at}.kustomization.{field} {v:?} is not a Kubernetes object name: lowercase letters, digits, '-' and '.'"
                ),
            ));
        }
    }
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{MIN, parse, refused};

    /// A federated spoke with `servers: LIST` (the hub's issuer set).
    fn federated(servers: &str) -> String {
        format!(
            "repo: {{path: f}}\nsealing: {{cert: c.pem}}\nhub: {{}}\nspokes:\n- name: dev\n  address: 10.0.0.1\n  servers: {servers}\n  credential: {{mode: federated, federated: {{issuer: \"https://hub\"}}}}\n"
        )
    }

    #[test]
    fn a_federated_spoke_lists_its_other_server_nodes() {
        let c = parse(&federated("[10.0.0.2, cp3.example.org]")).unwrap();
        assert_eq!(c.spokes[0].servers, ["10.0.0.2", "cp3.example.org"]);
        assert!(parse(MIN).unwrap().spokes[0].servers.is_empty());
    }

    #[test]
    fn server_mistakes_name_the_field_the_line_and_the_fix() {
        refused(
            &federated("[10.0.0.2, 10.0.0.2]"),
            &[
                "line 7: spokes[0].servers[1]",
                "spokes[0].servers[0]",
                "once",
            ],
        );
        refused(
            &federated("[10.0.0.1]"),
            &[
                "line 7: spokes[0].servers[0]",
                "the spoke's address",
                "other server nodes",
            ],
        );
        refused(
            &federated("[\"10.0.0.2:6443\"]"),
            &[
                "line 7: spokes[0].servers[0]",
                "a port goes in",
                "host name or IP address alone",
            ],
        );
        refused(
            &MIN.replace("10.0.0.1", "10.0.0.1, servers: [10.0.0.2]"),
            &[
                "line 4: spokes[0].servers",
                "federated spokes only",
                "extracted",
                "remove spokes[0].servers",
            ],
        );
    }

    #[test]
    fn spoke_mistakes_name_the_field_and_the_fix() {
        refused(
            &MIN.replace("name: dev", "name: Dev_1"),
            &["Dev_1", "lowercase"],
        );
        refused(
            &format!("{MIN}  - {{name: dev, address: 10.0.0.2}}\n"),
            &["line 5: spokes[1].name", "spokes[0]", "unique"],
        );
        refused(
            &MIN.replace("10.0.0.1", "10.0.0.1, output: ../escape.yaml"),
            &["output", "inside the repo"],
        );
        refused(
            &MIN.replace("10.0.0.1", "10.0.0.1, api_server: http://x:6443"),
            &["api_server", "https"],
        );
        refused(
            &MIN.replace("10.0.0.1", "10.0.0.1, distro: talos"),
            &["distro", "talos", "k3s, rke2 or kubeadm"],
        );
        refused(
            &MIN.replace("10.0.0.1", "10.0.0.1, scope: global"),
            &["strict, namespace-wide or cluster-wide"],
        );
        refused(
            &MIN.replace("10.0.0.1", "10.0.0.1, kubeconfig_path: k3s.yaml"),
            &["absolute"],
        );
        refused(
            "repo: {path: f}\nsealing: {cert: c}\nspokes: []\n",
            &["at least one spoke"],
        );
    }
}
