//! `credential.federated:`: whom a federated spoke trusts (the hub's ServiceAccount
//! issuer) and whom it lets in (the hub's Flux controllers), merged field by field, the
//! spoke's over the global one. docs/federated.md explains each field.

use std::path::PathBuf;

use serde::Deserialize;

/// The hub's Flux controllers: Flux's generic provider presents a token of the
/// controller's own ServiceAccount (fluxcd/pkg auth/generic/provider.go).
pub(crate) const DEFAULT_ACCOUNTS: &[&str] = &[
    "flux-system/kustomize-controller",
    "flux-system/helm-controller",
];
/// Whose token spokekeeper checks a spoke with: its own, never a controller's.
pub(crate) const DEFAULT_CHECK_AS: &str = "spokekeeper/spokekeeper";
pub(crate) const DEFAULT_PREFIX: &str = "{hub}:";
/// How a federated spoke without an issuer is refused (`add` offers its flag then).
pub const NO_ISSUER: &str = "credential.federated.issuer is not set";

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFederated {
    issuer: Option<String>,
    discovery_url: Option<String>,
    issuer_ca: Option<PathBuf>,
    service_accounts: Option<Vec<String>>,
    service_account_name: Option<String>,
    check_as: Option<String>,
    username_prefix: Option<String>,
    next: Option<RawNext>,
}

/// `credential.federated.next:`, the issuer the hub will sign as next, as a whole (the
/// spoke's over the global one).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNext {
    issuer: Option<String>,
    discovery_url: Option<String>,
    issuer_ca: Option<PathBuf>,
}

/// A refused value: its key (for the line) and the message, which starts with it.
#[derive(Debug)]
pub(super) struct Bad {
    pub key: String,
    pub message: String,
}

/// A hub ServiceAccount.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServiceAccount {
    pub namespace: String,
    pub name: String,
}

impl ServiceAccount {
    /// Its tokens' `sub`.
    pub fn subject(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    fn parse(s: &str) -> Option<ServiceAccount> {
        let (namespace, name) = s.split_once('/')?;
        (super::is_dns_label(namespace) && super::is_dns_subdomain(name)).then(|| ServiceAccount {
            namespace: namespace.into(),
            name: name.into(),
        })
    }
}

impl std::fmt::Display for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A federated spoke's resolved trust.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FederatedPolicy {
    /// The hub's `--service-account-issuer` (the tokens' `iss`).
    pub issuer: String,
    /// Where spokes fetch the issuer's discovery document (None: under `issuer`).
    pub discovery_url: Option<String>,
    /// PEM file of the CAs that verify the discovery and JWKS endpoints (None: the
    /// spokes' system roots). Resolved against the configuration file's directory.
    pub issuer_ca: Option<PathBuf>,
    /// The hub identities a spoke lets in, each bound to `credential.cluster_role`: the
    /// spoke's own account alone when it has one.
    pub service_accounts: Vec<ServiceAccount>,
    /// The spoke's own hub ServiceAccount (`service_account_name`, in the namespace of the
    /// spoke's ConfigMap, where Flux looks it up): the ConfigMap's `serviceAccountName`,
    /// whose tokens Flux's controllers ask for instead of their own (their
    /// ObjectLevelWorkloadIdentity feature gate). None: the controllers' own.
    pub own_account: Option<ServiceAccount>,
    /// Whose token spokekeeper proves a spoke with before committing.
    pub check_as: ServiceAccount,
    /// Before every hub identity's user on the spoke; `{hub}` filled in.
    pub username_prefix: String,
    /// The issuer the hub will sign as next, trusted beside `issuer` while it is set.
    pub next: Option<NextIssuer>,
}

/// `credential.federated.next`: a second issuer every spoke's file trusts alike (same
/// audience, claim rule and prefix), so the hub can switch to it without a gap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextIssuer {
    pub issuer: String,
    pub discovery_url: Option<String>,
    /// PEM file verifying its discovery and JWKS (None: the spokes' system roots);
    /// `credential.federated.issuer_ca` unless set.
    pub issuer_ca: Option<PathBuf>,
}

impl NextIssuer {
    /// Its discovery document's URL as the spoke fetches it.
    pub fn discovery(&self) -> String {
        discovery(&self.issuer, self.discovery_url.as_deref())
    }
}

fn discovery(issuer: &str, discovery_url: Option<&str>) -> String {
    discovery_url.map(str::to_string).unwrap_or_else(|| {
        format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        )
    })
}

impl FederatedPolicy {
    /// The discovery document's URL as the spoke fetches it.
    pub fn discovery(&self) -> String {
        discovery(&self.issuer, self.discovery_url.as_deref())
    }

    /// Every issuer the spoke's file trusts: `issuer`, then `next` if set.
    pub fn issuers(&self) -> Vec<&str> {
        let mut all = vec![self.issuer.as_str()];
        all.extend(self.next.as_ref().map(|n| n.issuer.as_str()));
        all
    }
}

/// Merges the spoke's `credential.federated` over the global one and checks it.
pub(super) fn resolve(
    global: Option<&RawFederated>,
    spoke: Option<&RawFederated>,
    at: &str,
    (hub_id, spoke_name, namespace): (&str, &str, &str),
) -> Result<FederatedPolicy, Bad> {
    let none = RawFederated::default();
    let (g, s) = (global.unwrap_or(&none), spoke.unwrap_or(&none));
    let key = |field: &str, own: bool| {
        if own {
            format!("{at}.credential.federated.{field}")
        } else {
            format!("credential.federated.{field}")
        }
    };
    let refuse = |field: &str, own: bool, why: String| {
        let key = key(field, own);
        Bad {
            message: format!("{key} {why}"),
            key,
        }
    };
    let pick = |a: &Option<String>, b: &Option<String>| {
        a.clone()
            .map(|v| (v, true))
            .or(b.clone().map(|v| (v, false)))
    };
    let Some((issuer, own)) = pick(&s.issuer, &g.issuer) else {
        return Err(Bad {
            key: format!("{at}.credential.mode"),
            message: format!(
                "{at}.credential.mode is federated but {NO_ISSUER}: set it to the hub's --service-account-issuer (an https URL the spokes can reach, not the spokes' own issuer)"
            ),
        });
    };
    if let Some(why) = https_problem(&issuer) {
        return Err(refuse("issuer", own, why));
    }
    let discovery_url = pick(&s.discovery_url, &g.discovery_url);
    if let Some((d, own)) = &discovery_url {
        if let Some(why) = https_problem(d) {
            return Err(refuse("discovery_url", *own, why));
        }
        if d.trim_end_matches('/') == issuer.trim_end_matches('/') {
            return Err(refuse(
                "discovery_url",
                *own,
                "is the issuer itself: leave it unset to fetch {issuer}/.well-known/openid-configuration, or give the full URL of the discovery document".into(),
            ));
        }
    }
    let (service_accounts, own_account) = accounts(s, g, (spoke_name, namespace), &refuse)?;
    let (check_as, check_own) =
        pick(&s.check_as, &g.check_as).unwrap_or((DEFAULT_CHECK_AS.into(), false));
    let check_as = ServiceAccount::parse(&check_as)
        .ok_or_else(|| refuse("check_as", check_own, account_format(&check_as)))?;
    if service_accounts.contains(&check_as) {
        return Err(refuse(
            "check_as",
            check_own,
            format!(
                "is {check_as}, one of the accounts the spoke lets in (credential.federated.service_accounts or service_account_name): spokekeeper checks with a token of its own ServiceAccount, never a controller's or the spoke's (asking for a controller's token is asking for hub admin)"
            ),
        ));
    }
    let (prefix, prefix_own) =
        pick(&s.username_prefix, &g.username_prefix).unwrap_or((DEFAULT_PREFIX.into(), false));
    let username_prefix = prefix.replace("{hub}", hub_id);
    if let Some(why) = prefix_problem(&username_prefix) {
        return Err(refuse("username_prefix", prefix_own, why));
    }
    let issuer_ca = s.issuer_ca.clone().or(g.issuer_ca.clone());
    let discovery_url = discovery_url.map(|(d, _)| d);
    let after = (issuer.as_str(), discovery_url.as_deref());
    let next = match s
        .next
        .as_ref()
        .map(|n| (n, true))
        .or(g.next.as_ref().map(|n| (n, false)))
    {
        Some((n, own)) => Some(next(n, after, issuer_ca.as_ref(), &key("next", own))?),
        None => None,
    };
    Ok(FederatedPolicy {
        issuer,
        discovery_url,
        issuer_ca,
        service_accounts,
        own_account,
        check_as,
        username_prefix,
        next,
    })
}

/// Whom the spoke lets in: its own account (`service_account_name`, `{spoke}` filled in,
/// in `namespace`) alone, else `service_accounts` (default: Flux's two controllers). The
/// spoke's own setting wins over the global one; both fields at one level are refused.
fn accounts(
    s: &RawFederated,
    g: &RawFederated,
    (spoke_name, namespace): (&str, &str),
    refuse: &dyn Fn(&str, bool, String) -> Bad,
) -> Result<(Vec<ServiceAccount>, Option<ServiceAccount>), Bad> {
    for (raw, own) in [(s, true), (g, false)] {
        if raw.service_account_name.is_some() && raw.service_accounts.is_some() {
            return Err(refuse(
                "service_account_name",
                own,
                "is set beside service_accounts: a spoke with its own hub ServiceAccount lets in that account alone; drop one of them".into(),
            ));
        }
    }
    let name = match (&s.service_account_name, &s.service_accounts) {
        (Some(n), _) => Some((n, true)),
        (None, Some(_)) => None,
        (None, None) => g.service_account_name.as_ref().map(|n| (n, false)),
    };
    if let Some((template, own)) = name {
        let name = template.replace("{spoke}", spoke_name);
        if !super::is_dns_subdomain(&name) {
            return Err(refuse(
                "service_account_name",
                own,
                format!(
                    "{:?} is not a ServiceAccount name (a DNS subdomain; {{spoke}} is the spoke's name), e.g. \"{{spoke}}-flux\"",
                    crate::text::one_line(template, 80)
                ),
            ));
        }
        let account = ServiceAccount {
            namespace: namespace.into(),
            name,
        };
        return Ok((vec![account.clone()], Some(account)));
    }
    Ok((service_accounts(s, g, refuse)?, None))
}

/// `next` (written at `at`), checked against the `issuer` (and its `discovery_url`) it
/// is to follow: the API server refuses a file naming either twice.
fn next(
    raw: &RawNext,
    (issuer, discovery_url): (&str, Option<&str>),
    issuer_ca: Option<&PathBuf>,
    at: &str,
) -> Result<NextIssuer, Bad> {
    let refuse = |field: &str, why: String| Bad {
        key: format!("{at}.{field}"),
        message: format!("{at}.{field} {why}"),
    };
    let Some(next) = raw.issuer.clone() else {
        return Err(Bad {
            key: at.to_string(),
            message: format!(
                "{at} has no issuer: set {at}.issuer to the issuer the hub will sign as next, or remove {at}"
            ),
        });
    };
    if let Some(why) = https_problem(&next) {
        return Err(refuse("issuer", why));
    }
    if next.trim_end_matches('/') == issuer.trim_end_matches('/') {
        return Err(refuse(
            "issuer",
            format!(
                "is the issuer itself ({issuer}): once the hub signs as it and it is promoted to issuer, remove {at}"
            ),
        ));
    }
    if let Some(d) = &raw.discovery_url {
        if let Some(why) = https_problem(d) {
            return Err(refuse("discovery_url", why));
        }
        if d.trim_end_matches('/') == next.trim_end_matches('/') {
            return Err(refuse(
                "discovery_url",
                "is the issuer itself: leave it unset to fetch {issuer}/.well-known/openid-configuration, or give the full URL of the discovery document".into(),
            ));
        }
        if discovery_url == Some(d.as_str()) {
            return Err(refuse(
                "discovery_url",
                "is credential.federated.discovery_url too: one discovery document names one issuer, and the API server refuses a file naming a discovery URL twice; serve the next issuer's document at a URL of its own".into(),
            ));
        }
    }
    Ok(NextIssuer {
        issuer: next,
        discovery_url: raw.discovery_url.clone(),
        issuer_ca: raw.issuer_ca.clone().or(issuer_ca.cloned()),
    })
}

/// `service_accounts`, the spoke's or the global one or the default, parsed.
fn service_accounts(
    s: &RawFederated,
    g: &RawFederated,
    refuse: &dyn Fn(&str, bool, String) -> Bad,
) -> Result<Vec<ServiceAccount>, Bad> {
    let accounts_own = s.service_accounts.is_some();
    let accounts: Vec<String> = s
        .service_accounts
        .clone()
        .or(g.service_accounts.clone())
        .unwrap_or_else(|| DEFAULT_ACCOUNTS.iter().map(|a| a.to_string()).collect());
    if accounts.is_empty() || accounts.len() > 16 {
        return Err(refuse(
            "service_accounts",
            accounts_own,
            "must list 1 to 16 hub ServiceAccounts as NAMESPACE/NAME (default: flux-system/kustomize-controller and flux-system/helm-controller)".into(),
        ));
    }
    accounts
        .iter()
        .map(|a| {
            ServiceAccount::parse(a)
                .ok_or_else(|| refuse("service_accounts", accounts_own, account_format(a)))
        })
        .collect()
}

fn account_format(a: &str) -> String {
    format!(
        "{:?} is not NAMESPACE/NAME of a ServiceAccount (e.g. flux-system/kustomize-controller)",
        crate::text::one_line(a, 80)
    )
}

/// What keeps `u` from being an https URL without user, query or fragment (what the API
/// server accepts as an issuer), if anything.
fn https_problem(u: &str) -> Option<String> {
    let shown = crate::text::one_line(u, 120);
    let parsed = match url::Url::parse(u) {
        Ok(p) => p,
        Err(e) => return Some(format!("{shown:?} is not a URL ({e})")),
    };
    if parsed.scheme() != "https" {
        return Some(format!(
            "{shown:?} is not https: a spoke fetches the issuer's keys over TLS only"
        ));
    }
    let extra = !parsed.username().is_empty()
        || parsed.password().is_some()
        || parsed.query().is_some()
        || parsed.fragment().is_some()
        || parsed.host_str().is_none();
    if extra {
        return Some(format!(
            "{shown:?} may not hold a user, password, query or fragment"
        ));
    }
    (u.len() > 2048).then(|| "is longer than 2048 characters".to_string())
}

/// What keeps `p` from keeping the hub's users apart from the spoke's own, if anything.
fn prefix_problem(p: &str) -> Option<String> {
    let shown = crate::text::one_line(p, 80);
    if p.is_empty() {
        return Some("is empty: a hub ServiceAccount would then be the spoke's own user of that name; e.g. \"hub:\"".into());
    }
    if p.starts_with("system:") {
        return Some(format!(
            "{shown:?} starts with system:, which Kubernetes reserves for its own identities; e.g. \"hub:\""
        ));
    }
    let ok = p.len() <= 100
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:@".contains(&b));
    (!ok).then(|| format!("{shown:?} may hold only letters, digits and - _ . : @ (at most 100)"))
}

/// What a federated spoke needs beyond its own block: the hub (spokekeeper asks it for the
/// token it proves the spoke with), and SSH (the trust is written on the node).
pub(super) fn check(c: &super::Config) -> Result<(), Bad> {
    let federated = |s: &&super::SpokeConfig| s.credential.mode == super::CredentialMode::Federated;
    let Some((i, s)) = c.spokes.iter().enumerate().find(|(_, s)| federated(s)) else {
        return Ok(());
    };
    if c.hub.is_none() {
        return Err(Bad {
            key: format!("spokes[{i}].credential"),
            message: format!(
                "spokes[{i}].credential.mode is federated ({}), but there is no hub: section: spokekeeper asks the hub for a ServiceAccount token to prove the spoke trusts it; add hub: (its kubeconfig, or in-cluster)",
                s.name
            ),
        });
    }
    if let Some((i, s)) = c
        .spokes
        .iter()
        .enumerate()
        .find(|(_, s)| federated(s) && s.source != super::SourceKind::Ssh)
    {
        return Err(Bad {
            key: format!("spokes[{i}].source"),
            message: format!(
                "spokes[{i}].source is local, but {} is federated: its trust of the hub is written on the node over SSH through the federated node recipe; use source: ssh",
                s.name
            ),
        });
    }
    own_accounts_apart(c)
}

/// No two spokes share their own hub ServiceAccount: a token of it would be good on both.
fn own_accounts_apart(c: &super::Config) -> Result<(), Bad> {
    let mut seen: std::collections::HashMap<&ServiceAccount, &str> = Default::default();
    for (i, s) in c.spokes.iter().enumerate() {
        let own = s
            .credential
            .federated
            .as_ref()
            .and_then(|f| f.own_account.as_ref());
        let Some(account) = own else { continue };
        if let Some(other) = seen.insert(account, &s.name) {
            return Err(Bad {
                key: format!("spokes[{i}].credential"),
                message: format!(
                    "spokes[{i}] ({}) and {other} both use the hub ServiceAccount {account} (credential.federated.service_account_name in namespace secret.namespace): a token of it would be accepted by both; give each spoke its own (a name with {{spoke}}, or each spoke's own secret.namespace)",
                    s.name
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
