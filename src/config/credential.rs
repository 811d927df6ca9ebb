//! `credential:`: how the hub's credential for a spoke is made. Global default and
//! per-spoke override, merged field by field (per spoke wins).

use serde::Deserialize;

/// Where the committed credential comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CredentialMode {
    /// The node's own admin kubeconfig (today's behaviour, the default).
    #[default]
    Extracted,
    /// A short-lived client certificate signed through the spoke's CSR API for a
    /// revocable user bound by a ClusterRoleBinding.
    Minted,
}

impl CredentialMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialMode::Extracted => "extracted",
            CredentialMode::Minted => "minted",
        }
    }
}

impl std::fmt::Display for CredentialMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
