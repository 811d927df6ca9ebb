//! The ConfigMap git holds for a federated spoke: what Flux's generic provider reads to
//! reach it (fluxcd/pkg auth/utils/restconfig.go, the version kustomize-controller v1.9.6
//! uses): `provider: generic`, `address`, `ca.crt` (PEM), `audiences` (one per line;
//! Flux's default when absent is the address) and `serviceAccountName` (a hub
//! ServiceAccount in the ConfigMap's namespace, with the controllers'
//! ObjectLevelWorkloadIdentity feature gate). Nothing in it is secret, so it is committed
//! as is; spokekeeper's recorded state rides on its annotations.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;

/// Largest ConfigMap file read back from the fleet repo.
pub const MAX_BYTES: usize = 256 * 1024;
/// The ConfigMap keys Flux reads (meta.KubeConfigKey*).
pub const PROVIDER: &str = "provider";
pub const ADDRESS: &str = "address";
pub const CA: &str = "ca.crt";
pub const AUDIENCES: &str = "audiences";
pub const SERVICE_ACCOUNT: &str = "serviceAccountName";
/// Flux's provider that asks the hub's API for a ServiceAccount token.
pub const GENERIC: &str = "generic";

/// A federated spoke's ConfigMap, as written and as read back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Remote {
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Every key of `data`, values as they are (none is secret).
    pub data: BTreeMap<String, String>,
}

/// Why a committed file is not a ConfigMap spokekeeper can read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    #[error("it is {0} bytes, more than the {MAX_BYTES} a ConfigMap of ours can be")]
    TooLarge(usize),
    #[error("it does not parse as a Kubernetes object: {0}")]
    Parse(String),
    #[error("it is a {0}, not a ConfigMap (v1)")]
    WrongKind(String),
    #[error("metadata.{0} is missing")]
    Missing(&'static str),
    /// Its data is not what spokekeeper wrote with the record beside it: an edit in the
    /// fleet repo, which could send the hub's token elsewhere (address) or ask the hub
    /// for a token another server accepts (audiences).
    #[error(
        "data.{0} is not what spokekeeper wrote beside its annotations (edited in the fleet repo?): it is rewritten, and Flux reads the edited one until then"
    )]
    NotOurs(String),
    /// Its `serviceAccountName` is not the spoke's own hub ServiceAccount as configured
    /// (or there is one and none is configured): a token of another account.
    #[error(
        "data.serviceAccountName is not what spokekeeper wrote for credential.federated.service_account_name (edited in the fleet repo, or the setting changed since): it is rewritten, and Flux reads the committed one until then"
    )]
    NotOwnAccount,
}

impl Remote {
    /// The YAML file: keys in a fixed order, every string a JSON string.
    pub fn to_yaml(&self) -> String {
        let q = |s: &str| serde_json::Value::from(s).to_string();
        let mut out = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n");
        let _ = writeln!(
            out,
            "  name: {}\n  namespace: {}",
            q(&self.name),
            q(&self.namespace)
        );
        for (what, map) in [("labels", &self.labels), ("annotations", &self.annotations)] {
            if map.is_empty() {
                continue;
            }
            let _ = writeln!(out, "  {what}:");
            for (k, v) in map {
                let _ = writeln!(out, "    {}: {}", q(k), q(v));
            }
        }
        out.push_str("data:\n");
        for (k, v) in &self.data {
            if v.contains('\n') && !v.contains(['"', '\\', '\r', '\t']) {
                // PEM and audience lists read best as block literals.
                let _ = writeln!(
                    out,
                    "  {}: |{}",
                    q(k),
                    if v.ends_with('\n') { "" } else { "-" }
                );
                for line in v.lines() {
                    let _ = writeln!(out, "    {line}");
                }
            } else {
                let _ = writeln!(out, "  {}: {}", q(k), q(v));
            }
        }
        out
    }

    /// Reads a committed ConfigMap (hostile input: capped, and only its shape trusted).
    pub fn parse(bytes: &[u8]) -> Result<Remote, RemoteError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw {
            #[serde(default)]
            kind: String,
            #[serde(default)]
            api_version: String,
            #[serde(default)]
            metadata: Meta,
            #[serde(default)]
            data: BTreeMap<String, String>,
        }
        #[derive(Default, Deserialize)]
        struct Meta {
            name: Option<String>,
            namespace: Option<String>,
            #[serde(default)]
            labels: BTreeMap<String, String>,
            #[serde(default)]
            annotations: BTreeMap<String, String>,
        }
        if bytes.len() > MAX_BYTES {
            return Err(RemoteError::TooLarge(bytes.len()));
        }
        let text =
            std::str::from_utf8(bytes).map_err(|_| RemoteError::Parse("not UTF-8".into()))?;
        // As seal::input::parse_doc reads a manifest: no snippet (the lines around an error
        // are fleet-repo text), its quotes dropped, YAML 1.2 booleans.
        let mut options = serde_saphyr::Options::default();
        options.with_snippet = false;
        options.strict_booleans = true;
        let raw: Raw = serde_saphyr::from_str_with_options(text, options).map_err(|e| {
            let said = crate::text::unquoted(&e.to_string());
            RemoteError::Parse(crate::text::one_line(&said, 200))
        })?;
        if raw.kind != "ConfigMap" || raw.api_version != "v1" {
            let shown = crate::text::one_line(&format!("{} ({})", raw.kind, raw.api_version), 80);
            return Err(RemoteError::WrongKind(shown));
        }
        Ok(Remote {
            name: raw.metadata.name.ok_or(RemoteError::Missing("name"))?,
            namespace: raw
                .metadata
                .namespace
                .ok_or(RemoteError::Missing("namespace"))?,
            labels: raw.metadata.labels,
            annotations: raw.metadata.annotations,
            data: raw.data,
        })
    }
}

impl Remote {
    /// Whether its data is exactly `want`'s: the first key that differs, is missing or is
    /// extra is named (a key from the file shortened to one line; no value is shown).
    pub fn holds(&self, want: &Reach) -> Result<(), RemoteError> {
        let want = want.data();
        let keys = want.keys().chain(self.data.keys());
        for key in keys {
            if self.data.get(key) != want.get(key) {
                return Err(RemoteError::NotOurs(crate::text::one_line(key, 64)));
            }
        }
        Ok(())
    }
}

/// What a federated spoke's ConfigMap says to Flux.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reach {
    /// The spoke's API server URL.
    pub address: String,
    /// Every CA the spoke's serving certificate may chain to, PEM (old and new during a
    /// CA rotation).
    pub ca_pem: String,
    pub audiences: Vec<String>,
    /// A hub ServiceAccount in the ConfigMap's namespace (object-level workload identity).
    pub service_account: Option<String>,
}

impl Reach {
    /// The ConfigMap's data.
    pub fn data(&self) -> BTreeMap<String, String> {
        let mut data = BTreeMap::from([
            (PROVIDER.to_string(), GENERIC.to_string()),
            (ADDRESS.to_string(), self.address.clone()),
            (CA.to_string(), self.ca_pem.clone()),
            (AUDIENCES.to_string(), self.audiences.join("\n")),
        ]);
        if let Some(sa) = &self.service_account {
            data.insert(SERVICE_ACCOUNT.to_string(), sa.clone());
        }
        data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote() -> Remote {
        let reach = Reach {
            address: "https://10.0.0.5:6443".into(),
            ca_pem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(),
            audiences: vec!["https://10.0.0.5:6443".into()],
            service_account: None,
        };
        Remote {
            name: "dev-kubeconfig".into(),
            namespace: "flux-system".into(),
            labels: BTreeMap::from([("reconcile.fluxcd.io/watch".into(), "Enabled".into())]),
            annotations: BTreeMap::from([("spokekeeper.io/spoke".into(), "dev".into())]),
            data: reach.data(),
        }
    }

    #[test]
    fn what_is_written_reads_back_the_same_with_the_keys_flux_reads() {
        let r = remote();
        let text = r.to_yaml();
        assert_eq!(Remote::parse(text.as_bytes()).unwrap(), r, "{text}");
        assert_eq!(r.data["provider"], "generic");
        assert_eq!(r.data["address"], "https://10.0.0.5:6443");
        assert!(!r.data.contains_key("serviceAccountName"));
        let v: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(v["data"]["ca.crt"], r.data["ca.crt"]);
        let mut with_sa = remote();
        with_sa
            .data
            .insert(SERVICE_ACCOUNT.into(), "dev-deployer".into());
        with_sa.data.insert(AUDIENCES.into(), "a\nb".into());
        assert_eq!(
            Remote::parse(with_sa.to_yaml().as_bytes()).unwrap(),
            with_sa
        );
    }

    #[test]
    fn hostile_values_stay_strings_and_other_objects_are_refused() {
        let mut r = remote();
        r.annotations
            .insert("x".into(), "a\"\nkind: Secret\n\\".into());
        r.data.insert("k".into(), "v: 1 # not a comment".into());
        assert_eq!(Remote::parse(r.to_yaml().as_bytes()).unwrap(), r);
        let secret = r.to_yaml().replace("kind: ConfigMap", "kind: Secret");
        assert_eq!(
            Remote::parse(secret.as_bytes()),
            Err(RemoteError::WrongKind("Secret (v1)".into()))
        );
        let big = vec![b'a'; MAX_BYTES + 1];
        assert_eq!(
            Remote::parse(&big),
            Err(RemoteError::TooLarge(MAX_BYTES + 1))
        );
        // A parse error says where, never what the file held there.
        let broken = "apiVersion: v1\nkind: ConfigMap\ndata:\n  a: 's3cr3t\n";
        let e = Remote::parse(broken.as_bytes()).unwrap_err().to_string();
        assert!(
            e.starts_with("it does not parse") && !e.contains("s3cr3t"),
            "{e}"
        );
        let nameless = "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: a}\n";
        assert_eq!(
            Remote::parse(nameless.as_bytes()),
            Err(RemoteError::Missing("name"))
        );
    }
}
