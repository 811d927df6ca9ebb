//! The AuthenticationConfiguration a spoke's kube-apiserver reads (`--authentication-config`):
//! it trusts tokens of the hub's ServiceAccount issuer for this spoke's audience, from the
//! accepted ServiceAccounts only, under a username prefix of their own.
//!
//! Facts it relies on (k8s.io/apiserver v0.37.2, pkg/apis/apiserver):
//! - `v1` exists from 1.34, `v1beta1` from 1.30 (structured authentication, beta); before
//!   1.30 there is no file to write;
//! - `issuer.url` must match the token's `iss`, may not be the spoke's own
//!   `--service-account-issuer` (validation.go: "must not overlap with disallowed issuers"),
//!   and `discoveryURL` must differ from it;
//! - `claimMappings.username.prefix` is required with `claim`;
//! - an `anonymous` block replaces `--anonymous-auth` (both set: the server refuses to
//!   start); it exists from 1.32 (AnonymousAuthConfigurableEndpoints, beta then, GA 1.34).
//!
//! Every string is written as a JSON string (valid YAML, no quoting rules to get wrong),
//! and the PEM as a block literal of lines we encoded ourselves.

use std::fmt::Write as _;

use crate::config::Distro;

/// The oldest minor version with structured authentication configuration.
pub const OLDEST_MINOR: u32 = 30;
/// The first minor version serving `apiserver.config.k8s.io/v1`.
const V1_MINOR: u32 = 34;
/// The first minor version whose configuration may hold an `anonymous` block.
const ANONYMOUS_MINOR: u32 = 32;
/// What kubeadm's kube-apiserver static pod probes unauthenticated (livenessProbe,
/// readinessProbe, startupProbe), and what `kubeadm join` reads before it has a credential.
const KUBEADM_ANONYMOUS: &[&str] = &[
    "/livez",
    "/readyz",
    "/healthz",
    "/api/v1/namespaces/kube-public/configmaps/cluster-info",
];

/// Whom the spoke trusts: the hub's issuer, for this spoke's audience.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trust {
    /// The hub's `--service-account-issuer`: the tokens' `iss`.
    pub issuer: String,
    /// Where the spoke fetches the issuer's discovery document, when not under `issuer`.
    pub discovery_url: Option<String>,
    /// PEM: the CAs that verify the discovery and JWKS endpoints (None: the spoke's system roots).
    pub issuer_ca: Option<String>,
    /// This spoke's audience: a token for another spoke is refused here.
    pub audience: String,
    /// The only token subjects accepted: `system:serviceaccount:NAMESPACE:NAME`.
    pub subjects: Vec<String>,
    /// Put before every accepted subject: the user the spoke authorizes.
    pub username_prefix: String,
    /// A second issuer trusted alike (same audience, rule and prefix): the hub's next.
    pub next: Option<Issuer>,
}

/// An issuer the file trusts beside [`Trust::issuer`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issuer {
    pub issuer: String,
    pub discovery_url: Option<String>,
    /// PEM (None: the spoke's system roots).
    pub issuer_ca: Option<String>,
}

impl Trust {
    /// The user a subject authenticates as on the spoke.
    pub fn username(&self, subject: &str) -> String {
        username(&self.username_prefix, subject)
    }
}

/// The user `subject` authenticates as on a spoke whose file names `prefix`.
pub fn username(prefix: &str, subject: &str) -> String {
    format!("{prefix}{subject}")
}

/// A spoke's Kubernetes version, from its `/version` (`v1.33.1+k3s1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl Version {
    /// Reads `vMAJOR.MINOR...`; None for anything else.
    pub fn parse(git_version: &str) -> Option<Version> {
        let rest = git_version.strip_prefix('v')?;
        let mut parts = rest.splitn(3, '.');
        let major = parts.next()?.parse().ok()?;
        let minor: String = parts
            .next()?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        Some(Version {
            major,
            minor: minor.parse().ok()?,
        })
    }

    fn at_least(self, minor: u32) -> bool {
        self.major > 1 || (self.major == 1 && self.minor >= minor)
    }
}

/// A spoke whose API server cannot read an AuthenticationConfiguration.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the spoke runs Kubernetes {major}.{minor}: trusting the hub's issuer needs structured authentication configuration, from 1.{OLDEST_MINOR}: upgrade the spoke, or keep credential.mode extracted or minted for it"
)]
pub struct TooOld {
    pub major: u32,
    pub minor: u32,
}

/// The file for a spoke of `distro` running `version`.
pub fn render(trust: &Trust, distro: Distro, version: Version) -> Result<String, TooOld> {
    let api = api_version(version)?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Written by spokekeeper: this API server trusts the hub's ServiceAccount tokens for\n\
         # this spoke alone. Rewritten by each rotation; changes made here are replaced.\n\
         apiVersion: apiserver.config.k8s.io/{api}\n\
         kind: AuthenticationConfiguration\n\
         jwt:"
    );
    let first = Issuer {
        issuer: trust.issuer.clone(),
        discovery_url: trust.discovery_url.clone(),
        issuer_ca: trust.issuer_ca.clone(),
    };
    for issuer in std::iter::once(&first).chain(trust.next.as_ref()) {
        jwt(&mut out, trust, issuer);
    }
    out.push_str(&anonymous_block(distro, version));
    Ok(out)
}

/// The file's `apiVersion` suffix on `version`, or why the spoke cannot read one.
pub(super) fn api_version(version: Version) -> Result<&'static str, TooOld> {
    if !version.at_least(OLDEST_MINOR) {
        return Err(TooOld {
            major: version.major,
            minor: version.minor,
        });
    }
    Ok(if version.at_least(V1_MINOR) {
        "v1"
    } else {
        "v1beta1"
    })
}

/// The `anonymous` block for `distro` on `version` (none before it exists).
pub(super) fn anonymous_block(distro: Distro, version: Version) -> String {
    if version.at_least(ANONYMOUS_MINOR) {
        anonymous(distro)
    } else {
        String::new()
    }
}

/// One `jwt` entry: `issuer`, for the trust's audience, subjects and prefix.
fn jwt(out: &mut String, trust: &Trust, issuer: &Issuer) {
    let q = |s: &str| serde_json::Value::from(s).to_string();
    let _ = writeln!(out, "- issuer:\n    url: {}", q(&issuer.issuer));
    if let Some(d) = &issuer.discovery_url {
        let _ = writeln!(out, "    discoveryURL: {}", q(d));
    }
    if let Some(pem) = &issuer.issuer_ca {
        out.push_str("    certificateAuthority: |\n");
        for line in pem.lines().filter(|l| !l.trim().is_empty()) {
            let _ = writeln!(out, "      {}", line.trim());
        }
    }
    let subjects: Vec<String> = trust.subjects.iter().map(|s| q(s)).collect();
    let _ = writeln!(
        out,
        "    audiences:\n    - {}\n  claimValidationRules:\n  - expression: {}\n    message: {}\n  \
         claimMappings:\n    username:\n      claim: \"sub\"\n      prefix: {}",
        q(&trust.audience),
        q(&format!("claims.sub in [{}]", subjects.join(", "))),
        q("only the hub's accepted ServiceAccounts may authenticate (spokekeeper)"),
        q(&trust.username_prefix),
    );
}

/// What anonymous requests the distribution needs once the file replaces
/// `--anonymous-auth`: k3s and RKE2 run their API server with `--anonymous-auth=false`
/// and drop that flag when `authentication-config` is set, so anonymous stays off;
/// kubeadm's probes and `kubeadm join` are anonymous, so only those paths stay open.
fn anonymous(distro: Distro) -> String {
    match distro {
        Distro::K3s | Distro::Rke2 => "anonymous:\n  enabled: false\n".into(),
        Distro::Kubeadm => {
            let mut out = String::from("anonymous:\n  enabled: true\n  conditions:\n");
            for path in KUBEADM_ANONYMOUS {
                let _ = writeln!(out, "  - path: {path}");
            }
            out
        }
    }
}

#[cfg(test)]
mod tests;
