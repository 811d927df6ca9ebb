//! `credential:`: how the hub's credential for a spoke is made. Global default and
//! per-spoke override, merged field by field (per spoke wins).

use std::time::Duration;

use serde::Deserialize;

use super::Span;

/// Where the committed credential comes from.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum CredentialMode {
    /// The node's own admin kubeconfig (today's behaviour, the default).
    #[default]
    Extracted,
    /// A short-lived client certificate signed through the spoke's CSR API for a
    /// revocable user bound by a ClusterRoleBinding.
    Minted,
    /// No credential at all: the spoke trusts the hub's ServiceAccount issuer, and git
    /// holds a ConfigMap with its address and CA (docs/federated.md).
    Federated,
}

impl CredentialMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialMode::Extracted => "extracted",
            CredentialMode::Minted => "minted",
            CredentialMode::Federated => "federated",
        }
    }
}

impl std::fmt::Display for CredentialMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(30 * 86_400);
pub(crate) const DEFAULT_USER: &str = "spokekeeper:{hub}:{spoke}:{generation}";
/// `credential.hub_id` when unset: see docs/minted.md (why a constant, not a derived value).
pub(crate) const DEFAULT_HUB_ID: &str = "hub";
/// The longest hub_id: it is in every binding's name and minted user (a CN of at most 64).
const MAX_HUB_ID: usize = 20;
/// What each mint appends to the user: `:` and 8 random hex digits, so that no user name
/// is ever bound twice, even when the counter starts again.
pub(crate) const USER_SUFFIX_LEN: usize = 9;
/// A certificate's CN holds at most 64 characters (X.520 ub-common-name).
const MAX_CN: usize = 64;
pub(crate) const DEFAULT_CLUSTER_ROLE: &str = "cluster-admin";
/// Shorter lifetimes are refused (Kubernetes' own minimum is 600s).
pub(crate) const MIN_TTL: Duration = Duration::from_secs(3600);

/// `credential:` as written, globally or for one spoke.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCredential {
    pub mode: Option<CredentialMode>,
    pub ttl: Option<Span>,
    pub renew_before: Option<Span>,
    pub user: Option<String>,
    pub(crate) cluster_role: Option<String>,
    /// Global only: names this spokekeeper deployment on the spokes it mints on.
    pub(crate) hub_id: Option<String>,
    pub(crate) federated: Option<super::federated::RawFederated>,
}

/// A spoke's resolved credential settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialPolicy {
    pub mode: CredentialMode,
    /// The minted certificate's lifetime (the CSR's expirationSeconds).
    pub ttl: Duration,
    /// Renew a minted certificate when it expires sooner than this.
    pub renew_before: Duration,
    /// The user template; holds `{generation}`, may hold `{hub}` and `{spoke}`.
    pub user: String,
    pub(crate) cluster_role: String,
    /// `credential.hub_id`: this deployment's label on the spoke's bindings.
    pub hub_id: String,
    /// `credential.federated`, for a federated spoke (None for the other modes).
    pub federated: Option<super::federated::FederatedPolicy>,
}

impl Default for CredentialPolicy {
    fn default() -> Self {
        CredentialPolicy {
            mode: CredentialMode::Extracted,
            ttl: DEFAULT_TTL,
            renew_before: DEFAULT_TTL / 3,
            user: DEFAULT_USER.into(),
            cluster_role: DEFAULT_CLUSTER_ROLE.into(),
            hub_id: DEFAULT_HUB_ID.into(),
            federated: None,
        }
    }
}

impl CredentialPolicy {
    /// The template filled in for `spoke` and `generation`: each mint appends
    /// [`USER_SUFFIX_LEN`] characters of its own (`:` and 8 random hex digits).
    pub(crate) fn user_for(&self, spoke: &str, generation: u64) -> String {
        self.user
            .replace("{hub}", &self.hub_id)
            .replace("{spoke}", spoke)
            .replace("{generation}", &generation.to_string())
    }

    /// Whether `user` is what a mint of `generation` for `spoke` makes with this template.
    pub(crate) fn is_minted_user(&self, spoke: &str, generation: u64, user: &str) -> bool {
        user.strip_prefix(self.user_for(spoke, generation).as_str())
            .and_then(|rest| rest.strip_prefix(':'))
            .is_some_and(|hex| {
                hex.len() == USER_SUFFIX_LEN - 1
                    && hex
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            })
    }
}

/// A refused value: its key (for the line) and the message naming it and the fix.
pub(super) struct Refused {
    pub key: String,
    pub message: String,
}

/// Merges a spoke's `credential:` over the global one (field by field) and checks the
/// result; `at` is the spoke's key (`spokes[2]`), so an error names where the bad value
/// was written. `namespace` is the spoke's Secret's (or ConfigMap's) on the hub.
pub(super) fn resolve(
    global: &RawCredential,
    spoke: &RawCredential,
    at: &str,
    (name, namespace): (&str, &str),
) -> Result<CredentialPolicy, Refused> {
    let key = |field: &str, own: bool| {
        if own {
            format!("{at}.credential.{field}")
        } else {
            format!("credential.{field}")
        }
    };
    let refuse = |field: &str, own: bool, why: String| {
        let key = key(field, own);
        Refused {
            message: format!("{key} {why}"),
            key,
        }
    };
    let mode = spoke.mode.or(global.mode).unwrap_or_default();
    let (ttl, renew_before) = lifetimes(global, spoke, &refuse)?;
    let user_own = spoke.user.is_some();
    let user = spoke
        .user
        .clone()
        .or_else(|| global.user.clone())
        .unwrap_or_else(|| DEFAULT_USER.into());
    if spoke.hub_id.is_some() {
        return Err(refuse(
            "hub_id",
            true,
            "is global: it names this spokekeeper deployment, not a spoke; move it to the top-level credential: section".into(),
        ));
    }
    let hub_id = global
        .hub_id
        .clone()
        .unwrap_or_else(|| DEFAULT_HUB_ID.into());
    hub_id_name(&hub_id).map_err(|why| refuse("hub_id", false, why.to_string()))?;
    user_template(&user).map_err(|why| refuse("user", user_own, why.to_string()))?;
    // The longest user a mint can make: the largest generation and the suffix.
    let longest = user
        .replace("{hub}", &hub_id)
        .replace("{spoke}", name)
        .replace("{generation}", "4294967295")
        .len()
        + USER_SUFFIX_LEN;
    if longest > MAX_CN {
        return Err(refuse(
            "user",
            user_own,
            format!(
                "{:?} makes users of up to {longest} characters for spoke {name} (with credential.hub_id {hub_id:?}, a 10-digit generation and the {USER_SUFFIX_LEN} characters each mint appends), but a certificate's CN holds at most {MAX_CN}: shorten the spoke's name or credential.hub_id, or drop {{spoke}} from the template (e.g. \"spokekeeper:{{hub}}:{{generation}}\")",
                crate::text::one_line(&user, 80)
            ),
        ));
    }
    let role_own = spoke.cluster_role.is_some();
    let cluster_role = spoke
        .cluster_role
        .clone()
        .or_else(|| global.cluster_role.clone())
        .unwrap_or_else(|| DEFAULT_CLUSTER_ROLE.into());
    cluster_role_name(&cluster_role)
        .map_err(|why| refuse("cluster_role", role_own, why.to_string()))?;
    let federated = (mode == CredentialMode::Federated)
        .then(|| {
            super::federated::resolve(
                global.federated.as_ref(),
                spoke.federated.as_ref(),
                at,
                (&hub_id, name, namespace),
            )
            .map_err(|b| Refused {
                key: b.key,
                message: b.message,
            })
        })
        .transpose()?;
    Ok(CredentialPolicy {
        mode,
        ttl,
        renew_before,
        user,
        cluster_role,
        hub_id,
        federated,
    })
}

/// credential.ttl and credential.renew_before, merged and checked.
fn lifetimes(
    global: &RawCredential,
    spoke: &RawCredential,
    refuse: &dyn Fn(&str, bool, String) -> Refused,
) -> Result<(Duration, Duration), Refused> {
    let pick = |a: &Option<Span>, b: &Option<Span>| a.or(*b).map(|s| (s.0, a.is_some()));
    let (ttl, ttl_own) = pick(&spoke.ttl, &global.ttl).unwrap_or((DEFAULT_TTL, false));
    if ttl < MIN_TTL {
        return Err(refuse(
            "ttl",
            ttl_own,
            format!(
                "{} is shorter than 1h: a certificate that short would be renewed almost every tick (Kubernetes refuses under 10m); write e.g. 30d",
                Span(ttl)
            ),
        ));
    }
    let (renew_before, rb_own) = match pick(&spoke.renew_before, &global.renew_before) {
        Some(v) => v,
        None => (ttl / 3, false),
    };
    if renew_before.is_zero() || renew_before >= ttl {
        return Err(refuse(
            "renew_before",
            rb_own,
            format!(
                "{} must be longer than 0s and shorter than credential.ttl ({}): e.g. a third of it, {}",
                Span(renew_before),
                Span(ttl),
                Span(Duration::from_secs(ttl.as_secs() / 3))
            ),
        ));
    }
    Ok((ttl, renew_before))
}

/// A credential.user or credential.cluster_role that cannot be used; the value is shown
/// as one bounded line.
#[derive(Debug, thiserror::Error)]
enum BadName {
    #[error(
        "{0:?} must contain {{generation}}: each generation is its own user, so revoking one leaves the next working (e.g. \"{DEFAULT_USER}\")"
    )]
    UserWithoutGeneration(String),
    #[error(
        "{0:?} starts with system:, which Kubernetes reserves for its own identities: e.g. \"{DEFAULT_USER}\""
    )]
    UserReserved(String),
    #[error(
        "{0:?} may hold only letters, digits and - _ . : @ (at most 200): e.g. \"{DEFAULT_USER}\""
    )]
    UserCharacters(String),
    #[error(
        "{0:?} is not a DNS label of at most 20 characters (lowercase letters, digits and '-', not at either end): e.g. \"hub-eu\""
    )]
    HubId(String),
    #[error(
        "{0:?} holds a {{...}} other than {{generation}}, {{hub}} and {{spoke}}: e.g. \"{DEFAULT_USER}\""
    )]
    UserPlaceholder(String),
    #[error(
        "{0:?} is not a ClusterRole name: letters, digits and - _ . : (e.g. {DEFAULT_CLUSTER_ROLE})"
    )]
    ClusterRole(String),
}

fn user_template(u: &str) -> Result<(), BadName> {
    let shown = || crate::text::one_line(u, 80);
    if !u.contains("{generation}") {
        return Err(BadName::UserWithoutGeneration(shown()));
    }
    if u.starts_with("system:") {
        return Err(BadName::UserReserved(shown()));
    }
    let ok = u.len() <= 200
        && u.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:@{}".contains(&b));
    if !ok {
        return Err(BadName::UserCharacters(shown()));
    }
    let bare = ["{generation}", "{hub}", "{spoke}"]
        .iter()
        .fold(u.to_string(), |t, p| t.replace(p, ""));
    if bare.contains(['{', '}']) {
        return Err(BadName::UserPlaceholder(shown()));
    }
    Ok(())
}

fn hub_id_name(h: &str) -> Result<(), BadName> {
    if h.len() <= MAX_HUB_ID && super::is_dns_label(h) {
        Ok(())
    } else {
        Err(BadName::HubId(crate::text::one_line(h, 80)))
    }
}

fn cluster_role_name(r: &str) -> Result<(), BadName> {
    let ok = !r.is_empty()
        && r.len() <= 253
        && r.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(BadName::ClusterRole(crate::text::one_line(r, 80)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    const HEAD: &str = "repo: {path: f}\nsealing: {cert: c}\n";

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, "t.yaml", std::path::Path::new("/")).map_err(|e| e.to_string())
    }

    fn refused(text: &str, needles: &[&str]) {
        let e = parse(text).expect_err(text);
        for n in needles {
            assert!(e.contains(n), "{e:?} lacks {n:?}");
        }
    }

    #[test]
    fn absent_means_extracted_with_the_documented_defaults() {
        let c = parse(&format!("{HEAD}spokes:\n  - {{name: dev, address: a}}\n")).unwrap();
        let p = &c.spokes[0].credential;
        assert_eq!(p, &CredentialPolicy::default());
        assert_eq!(p.mode, CredentialMode::Extracted);
        assert_eq!(p.ttl, Duration::from_secs(30 * 86_400));
        assert_eq!(p.renew_before, Duration::from_secs(10 * 86_400));
        assert_eq!(p.user_for("dev", 7), "spokekeeper:hub:dev:7");
        assert_eq!(p.hub_id, "hub");
        assert_eq!(p.cluster_role, "cluster-admin");
    }

    #[test]
    fn a_spoke_overrides_the_global_section_field_by_field() {
        let text = format!(
            "{HEAD}credential:\n  mode: minted\n  ttl: 3d\n  cluster_role: edit\nspokes:\n  - name: a\n    address: a\n  - name: b\n    address: b\n    credential: {{ttl: 6h, user: \"hub-{{generation}}@b\"}}\n  - name: c\n    address: c\n    credential: {{mode: extracted, renew_before: 2d}}\n"
        );
        let c = parse(&text).unwrap();
        let [a, b, cc] = [0, 1, 2].map(|i| c.spokes[i].credential.clone());
        assert_eq!(
            (a.mode, a.ttl, a.renew_before),
            (
                CredentialMode::Minted,
                Duration::from_secs(3 * 86_400),
                Duration::from_secs(86_400)
            )
        );
        assert_eq!(a.cluster_role, "edit");
        // renew_before defaults to a third of the spoke's own ttl.
        assert_eq!(
            (b.ttl, b.renew_before),
            (Duration::from_secs(6 * 3600), Duration::from_secs(2 * 3600))
        );
        assert_eq!(b.user_for("b", 3), "hub-3@b");
        assert_eq!(b.cluster_role, "edit");
        assert_eq!(
            (cc.mode, cc.renew_before),
            (CredentialMode::Extracted, Duration::from_secs(2 * 86_400))
        );
    }

    #[test]
    fn mistakes_name_the_field_the_line_and_the_fix() {
        let spokes = "spokes:\n  - name: dev\n    address: a\n";
        refused(
            &format!("{HEAD}credential:\n  mode: minted\n  ttl: 30m\n{spokes}"),
            &["line 5", "credential.ttl", "30m", "shorter than 1h", "30d"],
        );
        refused(
            &format!("{HEAD}credential:\n  ttl: 2d\n  renew_before: 2d\n{spokes}"),
            &[
                "line 5",
                "credential.renew_before",
                "shorter than credential.ttl",
                "16h",
            ],
        );
        refused(
            &format!("{HEAD}{spokes}    credential:\n      user: spokekeeper-hub\n"),
            &[
                "line 7",
                "spokes[0].credential.user",
                "{generation}",
                "spokekeeper:{hub}:{spoke}:{generation}",
            ],
        );
        refused(
            &format!("{HEAD}{spokes}    credential:\n      user: \"system:hub:{{generation}}\"\n"),
            &["spokes[0].credential.user", "system:"],
        );
        refused(
            &format!("{HEAD}credential:\n  user: \"a b\\n{{generation}}\"\n{spokes}"),
            &["line 4", "credential.user", "letters, digits"],
        );
        refused(
            &format!("{HEAD}credential:\n  cluster_role: \"a/b\"\n{spokes}"),
            &["line 4", "credential.cluster_role", "ClusterRole"],
        );
        refused(
            &format!("{HEAD}credential:\n  mode: issued\n{spokes}"),
            &["issued", "extracted", "minted"],
        );
        refused(&format!("{HEAD}credential:\n  tll: 1d\n{spokes}"), &["tll"]);
    }

    #[test]
    fn hub_id_is_a_short_global_dns_label_and_users_fit_a_cn() {
        let spokes = "spokes:\n  - name: dev\n    address: a\n";
        let c = parse(&format!("{HEAD}credential:\n  hub_id: eu-1\n{spokes}")).unwrap();
        let p = &c.spokes[0].credential;
        assert_eq!(p.hub_id, "eu-1");
        assert_eq!(p.user_for("dev", 4), "spokekeeper:eu-1:dev:4");
        assert!(p.is_minted_user("dev", 4, "spokekeeper:eu-1:dev:4:0a1b2c3d"));
        assert!(!p.is_minted_user("dev", 4, "spokekeeper:eu-1:dev:4"));
        assert!(!p.is_minted_user("dev", 4, "spokekeeper:eu-1:dev:41:0a1b2c3d"));
        for bad in ["Hub", "a.b", "-a", &"h".repeat(21)] {
            refused(
                &format!("{HEAD}credential:\n  hub_id: \"{bad}\"\n{spokes}"),
                &["line 4", "credential.hub_id", "DNS label of at most 20"],
            );
        }
        refused(
            &format!("{HEAD}{spokes}    credential:\n      hub_id: eu\n"),
            &[
                "line 7",
                "spokes[0].credential.hub_id",
                "is global",
                "top-level",
            ],
        );
        // spokekeeper:hub:{29 letters}:4294967295:xxxxxxxx is 65 characters.
        let long = "s".repeat(29);
        refused(
            &format!("{HEAD}spokes:\n  - name: {long}\n    address: a\n"),
            &["credential.user", "65 characters", "at most 64", "{spoke}"],
        );
        parse(&format!(
            "{HEAD}spokes:\n  - name: {}\n    address: a\n",
            &long[1..]
        ))
        .unwrap();
        refused(
            &format!("{HEAD}credential:\n  user: \"u:{{generaton}}{{generation}}\"\n{spokes}"),
            &[
                "line 4",
                "credential.user",
                "{generation}, {hub} and {spoke}",
            ],
        );
    }
}
