//! observe -> decide: from the recorded state and a TLS probe, whether a spoke needs a
//! fresh credential. Pure: no I/O here, so every rule is unit-tested.

use std::fmt;
use std::time::Duration;

use time::OffsetDateTime;

use super::output::Output;
use super::state::{Recorded, SealedTo, rfc3339};
use crate::config::{CredentialMode, SpokeConfig};
use crate::fingerprint::{AgeRecipients, Ca, Fingerprint, Sealing};
use crate::spoke::{CaCheck, Judged, ProbeError, ProbeReport};

/// Why a spoke is rotated. The first that applies names the commit.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Reason {
    /// Nothing committed yet.
    Initial,
    /// The committed manifest or its annotations cannot be read (edited by hand?).
    Unreadable {
        detail: String,
    },
    /// The serving certificate no longer verifies against the recorded CA: rebuilt.
    CaChanged {
        old: Fingerprint<Ca>,
    },
    /// The serving chain reaches the recorded CA but presents a root the recorded bundle
    /// does not hold (a CA rotation, or a root appended by the server): re-extracted, and
    /// committed (as `ca-changed`) only when the node's bundle changed.
    RootChanged {
        old: Fingerprint<Ca>,
    },
    /// The recorded client certificate expires within `renew_before`.
    ClientExpiring {
        #[serde(with = "time::serde::rfc3339")]
        not_after: OffsetDateTime,
    },
    /// Sealed to another sealing certificate than the one configured.
    SealingKeyChanged {
        old: Fingerprint<Sealing>,
        new: Fingerprint<Sealing>,
    },
    /// A sops output encrypted for another set of age recipients than the configured one
    /// (`old`: the set its `sops.age[].recipient` entries name).
    RecipientsChanged {
        old: Fingerprint<AgeRecipients>,
        new: Fingerprint<AgeRecipients>,
    },
    /// The configuration asks for something the commit does not have.
    ConfigChanged {
        detail: String,
    },
    Forced,
    /// `verify_every` elapsed: re-extract and compare contents.
    Periodic,
    /// A periodic re-extraction found content the hub does not have.
    ContentChanged,
    /// Minted: the ClusterRoleBinding that authorizes the committed user is gone, or no
    /// longer binds it to the configured cluster role.
    BindingMissing {
        binding: String,
    },
    /// `spokekeeper revoke`: every binding of this hub's for the spoke entry was deleted
    /// (and an earlier version's binding of the recorded user); `generation` is the
    /// committed one, `found` the generations those bindings carried (they differ when the
    /// fleet repo's annotation was changed), `users` the users they bound.
    Revoked {
        generation: u64,
        found: Vec<u64>,
        users: Vec<String>,
    },
}

impl Reason {
    /// The reason's kind, as in JSON output and the metrics' `reason` label.
    pub fn kind(&self) -> &'static str {
        match self {
            Reason::Initial => "initial",
            Reason::Unreadable { .. } => "unreadable",
            Reason::CaChanged { .. } => "ca-changed",
            Reason::RootChanged { .. } => "root-changed",
            Reason::ClientExpiring { .. } => "client-expiring",
            Reason::SealingKeyChanged { .. } => "sealing-key-changed",
            Reason::RecipientsChanged { .. } => "recipients-changed",
            Reason::ConfigChanged { .. } => "config-changed",
            Reason::Forced => "forced",
            Reason::Periodic => "periodic",
            Reason::ContentChanged => "content-changed",
            Reason::BindingMissing { .. } => "binding-missing",
            Reason::Revoked { .. } => "revoked",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Initial => f.write_str("initial credential"),
            Reason::Unreadable { detail } => write!(f, "committed manifest unreadable ({detail})"),
            Reason::CaChanged { old } => write!(f, "CA changed {}", old.short()),
            Reason::RootChanged { old } => {
                write!(f, "a root outside the CA bundle {} is served", old.short())
            }
            Reason::ClientExpiring { not_after } => {
                write!(f, "client certificate expiring on {}", rfc3339(*not_after))
            }
            Reason::SealingKeyChanged { old, new } => {
                write!(f, "sealing key changed {} -> {}", old.short(), new.short())
            }
            Reason::RecipientsChanged { old, new } => {
                write!(
                    f,
                    "age recipients changed {} -> {}",
                    old.short(),
                    new.short()
                )
            }
            Reason::ConfigChanged { detail } => write!(f, "configuration changed ({detail})"),
            Reason::Forced => f.write_str("forced"),
            Reason::Periodic => f.write_str("periodic check"),
            Reason::ContentChanged => f.write_str("content changed on the node (periodic check)"),
            Reason::BindingMissing { binding } => {
                write!(
                    f,
                    "ClusterRoleBinding {binding} of the minted user is missing or binds another role"
                )
            }
            Reason::Revoked {
                generation, found, ..
            } => {
                write!(f, "generation {generation} revoked")?;
                match found.iter().filter(|g| *g != generation).count() {
                    0 => Ok(()),
                    _ => write!(f, " (the spoke bound generations {found:?})"),
                }
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Nothing to do: no SSH at all.
    Healthy,
    Rotate(Reason),
    /// The API could not be probed: report it, touch nothing.
    Unreachable(ProbeError),
}

/// After a fresh extraction and its validation: whether it is worth committing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Extracted {
    /// Commit it, for this reason.
    Commit(Reason),
    /// A periodic check found what is committed on the node: nothing to commit.
    Unchanged,
    /// The client certificate is expiring and the node still serves the same one.
    NotRenewed,
    /// The server presents a root the recorded bundle lacks, and the node's kubeconfig
    /// still holds the recorded bundle: nothing to commit (the root is then seen).
    RootUnheld,
}

/// The rules after extraction (extracted mode compares with what is committed; a
/// periodic check that found anything new commits it as a content change; a root
/// outside the bundle is committed only with a new bundle, so it settles).
pub fn after_extraction(
    reason: Reason,
    previous: Option<&Recorded>,
    fresh: &Recorded,
    mode: CredentialMode,
) -> Extracted {
    let compared = previous.filter(|_| mode == CredentialMode::Extracted);
    let same_bundle = previous.is_some_and(|p| p.ca_bundle == fresh.ca_bundle);
    match (&reason, compared) {
        (Reason::Periodic, Some(prev)) if prev.content_sha256 == fresh.content_sha256 => {
            return Extracted::Unchanged;
        }
        (Reason::ClientExpiring { .. }, Some(prev))
            if prev.client_sha256 == fresh.client_sha256 && same_bundle =>
        {
            return Extracted::NotRenewed;
        }
        (Reason::RootChanged { .. }, _) if same_bundle => return Extracted::RootUnheld,
        _ => {}
    }
    match (reason, previous) {
        (Reason::Periodic, Some(_)) => Extracted::Commit(Reason::ContentChanged),
        (Reason::RootChanged { old }, _) => Extracted::Commit(Reason::CaChanged { old }),
        (reason, _) => Extracted::Commit(reason),
    }
}

/// What was observed for one spoke.
pub struct Observed<'a> {
    /// The committed manifest and its recorded state, or why they could not be read.
    pub committed: Option<Result<(&'a Output, &'a Recorded), &'a dyn std::error::Error>>,
    /// None when no probe was needed (nothing recorded to compare with).
    pub probe: Option<&'a Result<ProbeReport, ProbeError>>,
    /// The probed chain judged against the recorded CA bundle.
    pub ca: Option<&'a Judged>,
}

pub struct Policy {
    pub now: OffsetDateTime,
    pub renew_before: Duration,
    /// What this tick encrypts the spoke's output to.
    pub sealed_to: SealedTo,
    pub force: bool,
    /// `verify_every` has elapsed since this spoke was last re-extracted.
    pub verify_due: bool,
    /// Every root the chain presents outside the recorded bundle was seen before, with
    /// this bundle, and the node's kubeconfig did not hold it: no reason to extract.
    pub roots_seen: bool,
}

/// The server a spoke's kubeconfig should carry, as the configuration implies it:
/// `api_server` exactly as configured (scheme, host, port, path); else the recorded
/// server (its port and path) at the configured `address`. None when neither says.
/// This is also what is probed, so a re-addressed spoke is probed where it now is.
pub(crate) fn expected_server(spoke: &SpokeConfig, recorded: Option<&Recorded>) -> Option<String> {
    if let Some(url) = &spoke.api_server {
        return Some(crate::kubeconfig::server_string(url));
    }
    let recorded = crate::kubeconfig::parse_server(&recorded?.server).ok()?;
    Some(
        match crate::kubeconfig::with_host(&recorded, &spoke.address) {
            Ok(url) => crate::kubeconfig::server_string(&url),
            // Not a host: the probe reports the URL as invalid, naming it.
            Err(_) => format!(
                "https://{}:{}",
                spoke.address,
                recorded.port_or_known_default().unwrap_or(6443)
            ),
        },
    )
}

pub fn decide(spoke: &SpokeConfig, seen: &Observed<'_>, policy: &Policy) -> Decision {
    let (sealed, recorded) = match &seen.committed {
        None => return Decision::Rotate(Reason::Initial),
        Some(Err(e)) => {
            return Decision::Rotate(Reason::Unreadable {
                detail: e.to_string(),
            });
        }
        Some(Ok(pair)) => *pair,
    };
    let mut root_changed = false;
    match (seen.probe, seen.ca.map(|j| j.check)) {
        (Some(Err(e)), _) => return Decision::Unreachable(e.clone()),
        (_, Some(CaCheck::NotSignedByCa)) => {
            return Decision::Rotate(Reason::CaChanged {
                old: recorded.ca_sha256,
            });
        }
        (_, Some(CaCheck::UnusableCa)) => {
            return Decision::Rotate(Reason::Unreadable {
                detail: format!("annotation {} does not parse", super::state::CA_DATA),
            });
        }
        (_, Some(CaCheck::RootChanged)) => root_changed = !policy.roots_seen,
        _ => {}
    }
    // A minted certificate renews on its own schedule (credential.renew_before).
    let renew_before = match recorded.credential.mode {
        CredentialMode::Minted => spoke.credential.renew_before,
        CredentialMode::Extracted => policy.renew_before,
    };
    if let Some(not_after) = recorded.client_not_after
        && not_after - policy.now < renew_before
    {
        return Decision::Rotate(Reason::ClientExpiring { not_after });
    }
    if let Some(reason) = sealed_to_changed(sealed, recorded, policy.sealed_to) {
        return Decision::Rotate(reason);
    }
    if let Some(detail) = config_drift(spoke, sealed, recorded) {
        return Decision::Rotate(Reason::ConfigChanged { detail });
    }
    if policy.force {
        return Decision::Rotate(Reason::Forced);
    }
    // After the rules above: any of them re-extracts, and commits the node's bundle.
    if root_changed {
        return Decision::Rotate(Reason::RootChanged {
            old: recorded.ca_sha256,
        });
    }
    if policy.verify_due {
        return Decision::Rotate(Reason::Periodic);
    }
    Decision::Healthy
}

/// What a periodic check of a minted spoke found with the admin credential it extracted.
pub(crate) struct MintedCheck<'a> {
    /// The admin kubeconfig's first CA, its whole bundle and server (the minted one
    /// carries the same).
    pub ca_sha256: Fingerprint<Ca>,
    pub ca_bundle: &'a [Vec<u8>],
    pub server: &'a str,
    /// Whether the committed generation's ClusterRoleBinding exists and binds the
    /// committed user to the configured cluster role.
    pub(crate) binding_present: bool,
    /// The name of that binding.
    pub(crate) binding: &'a str,
}

/// After a periodic re-extraction of a minted spoke: why to mint again, or None (the
/// committed credential still fits). The admin kubeconfig's own content is never
/// compared: it is not what the hub holds.
pub(crate) fn after_check(recorded: &Recorded, seen: &MintedCheck<'_>) -> Option<Reason> {
    if !seen.binding_present {
        return Some(Reason::BindingMissing {
            binding: seen.binding.to_string(),
        });
    }
    if seen.ca_sha256 != recorded.ca_sha256 || seen.ca_bundle != recorded.ca_bundle {
        return Some(Reason::CaChanged {
            old: recorded.ca_sha256,
        });
    }
    if seen.server != recorded.server {
        return Some(Reason::ContentChanged);
    }
    None
}

/// A difference between the configuration and what was committed.
/// The output's key against the one this tick seals to: a sealing certificate for a
/// SealedSecret, the set its `sops.age[].recipient` entries name for a sops file. A
/// change of format is a configuration change ([`config_drift`]).
fn sealed_to_changed(output: &Output, recorded: &Recorded, want: SealedTo) -> Option<Reason> {
    match (output, want) {
        (Output::SealedSecret(_), SealedTo::Cert(new)) => match recorded.sealed_to {
            SealedTo::Cert(old) if old == new => None,
            SealedTo::Cert(old) => Some(Reason::SealingKeyChanged { old, new }),
            SealedTo::Age(_) => Some(Reason::Unreadable {
                detail: format!(
                    "a SealedSecret without annotation {}",
                    super::state::SEALING_CERT_SHA256
                ),
            }),
        },
        (Output::Sops(file), SealedTo::Age(new)) => {
            let old = crate::seal::sops::recipients_fingerprint(&file.recipients);
            (old != new).then_some(Reason::RecipientsChanged { old, new })
        }
        _ => None,
    }
}

fn config_drift(spoke: &SpokeConfig, sealed: &Output, recorded: &Recorded) -> Option<String> {
    if sealed.format() != spoke.format {
        return Some(format!("format {} -> {}", sealed.format(), spoke.format));
    }
    if sealed.name() != spoke.secret.name || sealed.namespace() != spoke.secret.namespace {
        return Some(format!(
            "secret {}/{} -> {}/{}",
            crate::text::one_line(sealed.namespace(), 256),
            crate::text::one_line(sealed.name(), 256),
            spoke.secret.namespace,
            spoke.secret.name
        ));
    }
    // Sealed Secrets' scope; a sops Secret has none.
    if let Output::SealedSecret(sealed) = sealed
        && sealed.scope() != spoke.scope
    {
        return Some(format!("scope {} -> {}", sealed.scope(), spoke.scope));
    }
    if sealed.keys() != [spoke.secret.key.as_str()] {
        return Some(format!("key -> {}", spoke.secret.key));
    }
    let (had, want) = (&recorded.credential, &spoke.credential);
    if had.mode != want.mode {
        return Some(format!("credential.mode {} -> {}", had.mode, want.mode));
    }
    if want.mode == CredentialMode::Minted
        && !had
            .user
            .as_deref()
            .is_some_and(|u| want.is_minted_user(&spoke.name, had.generation, u))
    {
        return Some(format!(
            "credential.user {} -> {}",
            crate::text::one_line(had.user.as_deref().unwrap_or(""), 256),
            want.user
        ));
    }
    if recorded.spoke != spoke.name {
        return Some(format!("spoke {} -> {}", recorded.spoke, spoke.name));
    }
    match expected_server(spoke, Some(recorded)) {
        Some(want) if want != recorded.server => {
            let what = if spoke.api_server.is_some() {
                "server"
            } else {
                "address"
            };
            Some(format!("{what} {} -> {want}", recorded.server))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::seal::sops::SopsSecret;
    use crate::seal::{Scope, SealedSecret};

    fn spoke(extra: &str) -> SpokeConfig {
        let text = format!(
            "repo: {{path: f}}\nsealing: {{cert: c}}\nspokes:\n  - {{name: dev, address: 10.0.0.1{extra}}}\n"
        );
        Config::parse(&text, "t.yaml", std::path::Path::new("/"))
            .unwrap()
            .spokes
            .remove(0)
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    const SEAL: Fingerprint<Sealing> = Fingerprint::from_digest([4; 32]);
    const NEW_SEAL: Fingerprint<Sealing> = Fingerprint::from_digest([5; 32]);

    fn recorded() -> Recorded {
        Recorded {
            spoke: "dev".into(),
            server: "https://10.0.0.1:6443".into(),
            ca_sha256: Fingerprint::from_digest([1; 32]),
            ca_bundle: vec![],
            ca_not_after: now() + time::Duration::days(3000),
            client_sha256: Some(Fingerprint::from_digest([2; 32])),
            client_not_after: Some(now() + time::Duration::days(200)),
            content_sha256: Fingerprint::from_digest([3; 32]),
            sealed_to: SealedTo::Cert(SEAL),
            rotated_at: now() - time::Duration::days(1),
            credential: Default::default(),
        }
    }

    fn sealed(scope: Scope) -> Output {
        let mut s = SealedSecret {
            name: "dev-kubeconfig".into(),
            namespace: "flux-system".into(),
            ..Default::default()
        };
        if let Some(a) = scope.annotation() {
            s.annotations.insert(a.into(), "true".into());
        }
        s.encrypted_data.insert("value".into(), "AgA".into());
        Output::SealedSecret(s)
    }

    fn policy() -> Policy {
        Policy {
            now: now(),
            renew_before: Duration::from_secs(30 * 86_400),
            sealed_to: SealedTo::Cert(SEAL),
            force: false,
            verify_due: false,
            roots_seen: false,
        }
    }

    fn run(spoke: &SpokeConfig, s: &Output, r: &Recorded, p: &Policy) -> Decision {
        decide(
            spoke,
            &Observed {
                committed: Some(Ok((s, r))),
                probe: None,
                ca: None,
            },
            p,
        )
    }

    #[test]
    fn nothing_committed_or_unreadable() {
        let sp = spoke("");
        assert_eq!(
            decide(
                &sp,
                &Observed {
                    committed: None,
                    probe: None,
                    ca: None,
                },
                &policy()
            ),
            Decision::Rotate(Reason::Initial)
        );
        let d = decide(
            &sp,
            &Observed {
                committed: Some(Err(&std::fmt::Error)),
                probe: None,
                ca: None,
            },
            &policy(),
        );
        assert_eq!(
            d,
            Decision::Rotate(Reason::Unreadable {
                detail: std::fmt::Error.to_string()
            })
        );
    }

    #[test]
    fn each_rule_in_order() {
        let sp = spoke("");
        let (s, r) = (sealed(Scope::Strict), recorded());
        assert_eq!(run(&sp, &s, &r, &policy()), Decision::Healthy);
        let mut expiring = recorded();
        expiring.client_not_after = Some(now() + time::Duration::days(29));
        assert!(matches!(
            run(&sp, &s, &expiring, &policy()),
            Decision::Rotate(Reason::ClientExpiring { .. })
        ));
        let mut token_only = recorded();
        token_only.client_not_after = None;
        assert_eq!(run(&sp, &s, &token_only, &policy()), Decision::Healthy);
        let other_key = Policy {
            sealed_to: SealedTo::Cert(NEW_SEAL),
            ..policy()
        };
        assert!(matches!(
            run(&sp, &s, &r, &other_key),
            Decision::Rotate(Reason::SealingKeyChanged { .. })
        ));
        // Expiry outranks a sealing key change: it is the more urgent reason.
        assert!(matches!(
            run(&sp, &s, &expiring, &other_key),
            Decision::Rotate(Reason::ClientExpiring { .. })
        ));
        assert!(matches!(
            run(&spoke(", scope: cluster-wide"), &s, &r, &policy()),
            Decision::Rotate(Reason::ConfigChanged { .. })
        ));
        assert!(matches!(
            run(&spoke(", secret: {key: kubeconfig}"), &s, &r, &policy()),
            Decision::Rotate(Reason::ConfigChanged { .. })
        ));
        let moved = SpokeConfig {
            address: "10.0.0.2".into(),
            ..spoke("")
        };
        assert_eq!(
            run(&moved, &s, &r, &policy()),
            Decision::Rotate(Reason::ConfigChanged {
                detail: "address https://10.0.0.1:6443 -> https://10.0.0.2:6443".into()
            })
        );
        // A recorded server other than `api_server` exactly: port and path count.
        assert_eq!(
            run(
                &spoke(", api_server: \"https://lb.example.org\""),
                &s,
                &r,
                &policy()
            ),
            Decision::Rotate(Reason::ConfigChanged {
                detail: "server https://10.0.0.1:6443 -> https://lb.example.org".into()
            })
        );
        assert_eq!(
            run(
                &sp,
                &s,
                &r,
                &Policy {
                    force: true,
                    ..policy()
                }
            ),
            Decision::Rotate(Reason::Forced)
        );
        assert_eq!(
            run(
                &sp,
                &s,
                &r,
                &Policy {
                    verify_due: true,
                    ..policy()
                }
            ),
            Decision::Rotate(Reason::Periodic)
        );
    }

    #[test]
    fn the_server_the_configuration_implies() {
        let r = recorded();
        let at = |extra: &str, r: Option<&Recorded>| expected_server(&spoke(extra), r);
        assert_eq!(at("", None), None);
        assert_eq!(at("", Some(&r)).as_deref(), Some("https://10.0.0.1:6443"));
        let proxied = Recorded {
            server: "https://10.0.0.9:7443/k8s/dev".into(),
            ..recorded()
        };
        assert_eq!(
            at("", Some(&proxied)).as_deref(),
            Some("https://10.0.0.1:7443/k8s/dev")
        );
        for (api, want) in [
            ("https://lb.example.org", "https://lb.example.org"),
            ("https://lb.example.org:443/", "https://lb.example.org"),
            (
                "https://10.0.0.1:8443/k8s/spoke",
                "https://10.0.0.1:8443/k8s/spoke",
            ),
        ] {
            let extra = format!(", api_server: \"{api}\"");
            assert_eq!(at(&extra, Some(&r)).as_deref(), Some(want), "{api}");
            assert_eq!(at(&extra, None).as_deref(), Some(want), "{api}");
            // Recorded exactly as configured: no change, no rotation every tick.
            let same = Recorded {
                server: want.into(),
                ..recorded()
            };
            assert_eq!(
                run(&spoke(&extra), &sealed(Scope::Strict), &same, &policy()),
                Decision::Healthy,
                "{api}"
            );
        }
    }

    #[test]
    fn kind_is_the_json_tag() {
        for r in [
            Reason::Initial,
            Reason::Unreadable {
                detail: String::new(),
            },
            Reason::CaChanged {
                old: Fingerprint::from_digest([1; 32]),
            },
            Reason::ClientExpiring { not_after: now() },
            Reason::SealingKeyChanged {
                old: SEAL,
                new: NEW_SEAL,
            },
            Reason::ConfigChanged {
                detail: String::new(),
            },
            Reason::Forced,
            Reason::Periodic,
            Reason::ContentChanged,
            Reason::BindingMissing {
                binding: String::new(),
            },
            Reason::Revoked {
                generation: 1,
                found: vec![1],
                users: vec!["spokekeeper:hub:dev:1:0a1b2c3d".into()],
            },
        ] {
            assert_eq!(serde_json::to_value(&r).unwrap()["kind"], r.kind());
        }
    }

    #[test]
    fn reasons_read_well() {
        let r = Reason::SealingKeyChanged {
            old: Fingerprint::parse(&format!("sha256:{}", "0011223344556677".repeat(4))).unwrap(),
            new: Fingerprint::parse(&format!("sha256:{}", "8899aabbccddeeff".repeat(4))).unwrap(),
        };
        assert_eq!(
            r.to_string(),
            "sealing key changed sha256:00112233.. -> sha256:8899aabb.."
        );
        let r = Reason::ClientExpiring { not_after: now() };
        assert_eq!(
            r.to_string(),
            "client certificate expiring on 2027-01-15T08:00:00Z"
        );
    }

    fn minted(generation: u64) -> Recorded {
        Recorded {
            credential: crate::rotate::state::RecordedCredential {
                mode: CredentialMode::Minted,
                user: Some(format!("spokekeeper:hub:dev:{generation}:0a1b2c3d")),
                generation,
            },
            ..recorded()
        }
    }

    const MINTED: &str = ", credential: {mode: minted, ttl: 30d, renew_before: 10d}";

    const AGE_A: &str = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";
    const AGE_B: &str = "age1lggyhqrw2nlhcxprm67z43rta597azn8gknawjehu9d9dl0jq3yqqvfafg";
    const SOPS: &str = ", sealing: {format: sops}";

    /// A sops output for `recipients`, as the file's metadata names them.
    fn sops_file(recipients: &[&str]) -> Output {
        Output::Sops(SopsSecret {
            name: "dev-kubeconfig".into(),
            namespace: "flux-system".into(),
            labels: Default::default(),
            annotations: Default::default(),
            keys: vec!["value".into()],
            recipients: recipients.iter().map(|r| r.to_string()).collect(),
        })
    }

    fn sops_policy(recipients: &[&str]) -> Policy {
        Policy {
            sealed_to: SealedTo::Age(crate::seal::sops::recipients_fingerprint(recipients)),
            ..policy()
        }
    }

    fn sops_spoke() -> SpokeConfig {
        let text = format!(
            "repo: {{path: f}}\nsealing: {{cert: c, age_recipients: [{AGE_A}]}}\nspokes:\n  - {{name: dev, address: 10.0.0.1{SOPS}}}\n"
        );
        Config::parse(&text, "t.yaml", std::path::Path::new("/"))
            .unwrap()
            .spokes
            .remove(0)
    }

    #[test]
    fn a_sops_file_for_other_recipients_is_re_encrypted() {
        let sp = sops_spoke();
        let mut r = recorded();
        r.sealed_to = SealedTo::Age(crate::seal::sops::recipients_fingerprint([AGE_A]));
        let file = sops_file(&[AGE_A]);
        assert_eq!(
            run(&sp, &file, &r, &sops_policy(&[AGE_A])),
            Decision::Healthy
        );
        // The same set in another order, or repeated, is no change.
        let both = sops_file(&[AGE_B, AGE_A, AGE_B]);
        assert_eq!(
            run(&sp, &both, &r, &sops_policy(&[AGE_A, AGE_B])),
            Decision::Healthy
        );
        // The file's own recipients decide, whatever its annotation records.
        assert_eq!(
            run(&sp, &file, &r, &sops_policy(&[AGE_A, AGE_B])),
            Decision::Rotate(Reason::RecipientsChanged {
                old: crate::seal::sops::recipients_fingerprint([AGE_A]),
                new: crate::seal::sops::recipients_fingerprint([AGE_A, AGE_B]),
            })
        );
        let d = run(&sp, &sops_file(&[AGE_B]), &r, &sops_policy(&[AGE_A]));
        let Decision::Rotate(reason) = d else {
            panic!("{d:?}")
        };
        assert_eq!(reason.kind(), "recipients-changed");
        assert!(
            reason
                .to_string()
                .starts_with("age recipients changed sha256:"),
            "{reason}"
        );
        // The client certificate still comes first.
        r.client_not_after = Some(now() + time::Duration::days(2));
        assert!(matches!(
            run(&sp, &sops_file(&[AGE_B]), &r, &sops_policy(&[AGE_A])),
            Decision::Rotate(Reason::ClientExpiring { .. })
        ));
    }

    #[test]
    fn switching_format_is_a_configuration_change() {
        let mut r = recorded();
        assert_eq!(
            run(
                &sops_spoke(),
                &sealed(Scope::Strict),
                &r,
                &sops_policy(&[AGE_A])
            ),
            Decision::Rotate(Reason::ConfigChanged {
                detail: "format sealed-secrets -> sops".into()
            })
        );
        r.sealed_to = SealedTo::Age(crate::seal::sops::recipients_fingerprint([AGE_A]));
        assert_eq!(
            run(&spoke(""), &sops_file(&[AGE_A]), &r, &policy()),
            Decision::Rotate(Reason::ConfigChanged {
                detail: "format sops -> sealed-secrets".into()
            })
        );
        // A sops Secret has no Sealed Secrets scope to drift.
        let scoped = format!("{SOPS}, scope: cluster-wide");
        let mut sp = spoke(&scoped.replace(SOPS, ""));
        sp.format = crate::config::SealingFormat::Sops;
        assert_eq!(
            run(&sp, &sops_file(&[AGE_A]), &r, &sops_policy(&[AGE_A])),
            Decision::Healthy
        );
    }

    #[test]
    fn minted_renews_on_its_own_schedule() {
        let (sp, s) = (spoke(MINTED), sealed(Scope::Strict));
        let mut r = minted(4);
        // 29 days left: the global 30d would rotate; credential.renew_before is 10d.
        r.client_not_after = Some(now() + time::Duration::days(29));
        assert_eq!(run(&sp, &s, &r, &policy()), Decision::Healthy);
        r.client_not_after = Some(now() + time::Duration::days(9));
        assert!(matches!(
            run(&sp, &s, &r, &policy()),
            Decision::Rotate(Reason::ClientExpiring { .. })
        ));
        // A sealing key change still rotates a minted credential.
        r.client_not_after = Some(now() + time::Duration::days(20));
        let other_key = Policy {
            sealed_to: SealedTo::Cert(NEW_SEAL),
            ..policy()
        };
        assert!(matches!(
            run(&sp, &s, &r, &other_key),
            Decision::Rotate(Reason::SealingKeyChanged { .. })
        ));
    }

    #[test]
    fn switching_mode_or_user_is_a_configuration_change() {
        let s = sealed(Scope::Strict);
        assert_eq!(
            run(&spoke(MINTED), &s, &recorded(), &policy()),
            Decision::Rotate(Reason::ConfigChanged {
                detail: "credential.mode extracted -> minted".into()
            })
        );
        assert_eq!(
            run(&spoke(""), &s, &minted(2), &policy()),
            Decision::Rotate(Reason::ConfigChanged {
                detail: "credential.mode minted -> extracted".into()
            })
        );
        assert_eq!(
            run(&spoke(MINTED), &s, &minted(2), &policy()),
            Decision::Healthy
        );
        // An earlier version's user (unscoped, no per-mint suffix) is minted again at once.
        let mut legacy = minted(2);
        legacy.credential.user = Some("spokekeeper:hub:2".into());
        assert_eq!(
            run(&spoke(MINTED), &s, &legacy, &policy()),
            Decision::Rotate(Reason::ConfigChanged {
                detail:
                    "credential.user spokekeeper:hub:2 -> spokekeeper:{hub}:{spoke}:{generation}"
                        .into()
            })
        );
        let renamed = spoke(", credential: {mode: minted, user: \"hub-{generation}\"}");
        assert_eq!(
            run(&renamed, &s, &minted(2), &policy()),
            Decision::Rotate(Reason::ConfigChanged {
                detail: "credential.user spokekeeper:hub:dev:2:0a1b2c3d -> hub-{generation}".into()
            })
        );
    }

    #[test]
    fn a_periodic_check_of_a_minted_spoke() {
        let r = minted(3);
        let fits = MintedCheck {
            ca_sha256: r.ca_sha256,
            ca_bundle: &r.ca_bundle,
            server: &r.server,
            binding_present: true,
            binding: "spokekeeper.hub.dev.g3",
        };
        assert_eq!(after_check(&r, &fits), None);
        assert_eq!(
            after_check(
                &r,
                &MintedCheck {
                    binding_present: false,
                    ca_sha256: Fingerprint::from_digest([9; 32]),
                    ..fits
                }
            ),
            Some(Reason::BindingMissing {
                binding: "spokekeeper.hub.dev.g3".into()
            })
        );
        assert_eq!(
            after_check(
                &r,
                &MintedCheck {
                    ca_sha256: Fingerprint::from_digest([9; 32]),
                    ..fits
                }
            ),
            Some(Reason::CaChanged { old: r.ca_sha256 })
        );
        assert_eq!(
            after_check(
                &r,
                &MintedCheck {
                    server: "https://10.0.0.9:6443",
                    ..fits
                }
            ),
            Some(Reason::ContentChanged)
        );
        // The node's bundle gained a CA (a rotation under the same first CA): minted again.
        let grown = [b"first".to_vec(), b"new root".to_vec()];
        assert_eq!(
            after_check(
                &r,
                &MintedCheck {
                    ca_bundle: &grown,
                    ..fits
                }
            ),
            Some(Reason::CaChanged { old: r.ca_sha256 })
        );
    }

    fn probe_report() -> Result<ProbeReport, ProbeError> {
        Ok(ProbeReport {
            server: "10.0.0.1:6443".into(),
            host: "10.0.0.1".into(),
            chain: vec![],
            serving_sha256: Fingerprint::from_digest([6; 32]),
            not_before: now(),
            not_after: now() + time::Duration::days(300),
            dns_names: vec![],
            ip_addresses: vec![],
            address_in_sans: true,
        })
    }

    fn judged(check: CaCheck) -> Judged {
        let roots_outside = match check {
            CaCheck::RootChanged => vec![Fingerprint::from_digest([7; 32])],
            _ => vec![],
        };
        Judged {
            check,
            roots_outside,
        }
    }

    /// A root outside the recorded bundle re-extracts once; once seen (an extraction
    /// found the node's bundle unchanged) it is no reason, and any other rule outranks it.
    #[test]
    fn a_root_outside_the_bundle_is_a_reason_until_seen() {
        let (sp, s, r) = (spoke(""), sealed(Scope::Strict), recorded());
        let probe = probe_report();
        let at = |check: CaCheck, r: &Recorded, p: &Policy| {
            let ca = judged(check);
            let seen = Observed {
                committed: Some(Ok((&s, r))),
                probe: Some(&probe),
                ca: Some(&ca),
            };
            decide(&sp, &seen, p)
        };
        let root = Decision::Rotate(Reason::RootChanged { old: r.ca_sha256 });
        assert_eq!(at(CaCheck::RootChanged, &r, &policy()), root);
        assert_eq!(at(CaCheck::Verified, &r, &policy()), Decision::Healthy);
        let settled = Policy {
            roots_seen: true,
            ..policy()
        };
        assert_eq!(at(CaCheck::RootChanged, &r, &settled), Decision::Healthy);
        let due = Policy {
            verify_due: true,
            ..settled
        };
        assert_eq!(
            at(CaCheck::RootChanged, &r, &due),
            Decision::Rotate(Reason::Periodic)
        );
        // Outranks a periodic check; is outranked by an expiring client certificate.
        let unseen_due = Policy {
            verify_due: true,
            ..policy()
        };
        assert_eq!(at(CaCheck::RootChanged, &r, &unseen_due), root);
        let mut expiring = recorded();
        expiring.client_not_after = Some(now() + time::Duration::days(2));
        assert!(matches!(
            at(CaCheck::RootChanged, &expiring, &policy()),
            Decision::Rotate(Reason::ClientExpiring { .. })
        ));
        // A chain not signed by the recorded CA is a changed CA, seen roots or not.
        assert_eq!(
            at(CaCheck::NotSignedByCa, &r, &settled),
            Decision::Rotate(Reason::CaChanged { old: r.ca_sha256 })
        );
        assert_eq!(
            Reason::RootChanged { old: r.ca_sha256 }.kind(),
            "root-changed"
        );
    }

    /// After extracting for a root outside the bundle: the node's bundle unchanged is
    /// nothing to commit, in either mode; a new bundle is committed as a changed CA.
    #[test]
    fn a_root_outside_the_bundle_commits_only_a_new_bundle() {
        let old = Fingerprint::from_digest([1; 32]);
        let mut prev = recorded();
        prev.ca_bundle = vec![b"old".to_vec()];
        let mut rotated = recorded();
        rotated.ca_bundle = vec![b"old".to_vec(), b"new root".to_vec()];
        rotated.content_sha256 = Fingerprint::from_digest([8; 32]);
        for mode in [CredentialMode::Extracted, CredentialMode::Minted] {
            let reason = Reason::RootChanged { old };
            assert_eq!(
                after_extraction(reason.clone(), Some(&prev), &prev, mode),
                Extracted::RootUnheld
            );
            assert_eq!(
                after_extraction(reason, Some(&prev), &rotated, mode),
                Extracted::Commit(Reason::CaChanged { old })
            );
        }
        // An expiring client certificate the node did not renew, but a new bundle: committed.
        let mut same_client = rotated.clone();
        same_client.client_sha256 = prev.client_sha256;
        let expiring = Reason::ClientExpiring { not_after: now() };
        assert_eq!(
            after_extraction(
                expiring.clone(),
                Some(&prev),
                &same_client,
                CredentialMode::Extracted
            ),
            Extracted::Commit(expiring)
        );
    }

    #[test]
    fn after_extraction_compares_what_the_node_serves_with_the_commit() {
        let prev = recorded();
        let same = recorded();
        let mut renewed = recorded();
        renewed.client_sha256 = Some(Fingerprint::from_digest([9; 32]));
        renewed.content_sha256 = Fingerprint::from_digest([8; 32]);
        let expiring = Reason::ClientExpiring { not_after: now() };
        let ex = CredentialMode::Extracted;
        let after = |r: Reason, p: Option<&Recorded>, f: &Recorded, m| after_extraction(r, p, f, m);
        assert_eq!(
            after(Reason::Periodic, Some(&prev), &same, ex),
            Extracted::Unchanged
        );
        assert_eq!(
            after(Reason::Periodic, Some(&prev), &renewed, ex),
            Extracted::Commit(Reason::ContentChanged)
        );
        assert_eq!(
            after(expiring.clone(), Some(&prev), &same, ex),
            Extracted::NotRenewed
        );
        assert_eq!(
            after(expiring.clone(), Some(&prev), &renewed, ex),
            Extracted::Commit(expiring.clone())
        );
        // Minted: the fresh credential is a new mint, never compared with the commit.
        let mi = CredentialMode::Minted;
        assert_eq!(
            after(Reason::Periodic, Some(&prev), &same, mi),
            Extracted::Commit(Reason::ContentChanged)
        );
        assert_eq!(
            after(expiring.clone(), Some(&prev), &same, mi),
            Extracted::Commit(expiring)
        );
        // Nothing committed: the reason stands.
        assert_eq!(
            after(Reason::Periodic, None, &same, ex),
            Extracted::Commit(Reason::Periodic)
        );
        assert_eq!(
            after(Reason::Forced, Some(&prev), &same, ex),
            Extracted::Commit(Reason::Forced)
        );
    }
}
