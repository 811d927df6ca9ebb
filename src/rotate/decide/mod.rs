//! observe -> decide: from the recorded state and a TLS probe, whether a spoke needs a
//! fresh credential. Pure: no I/O here, so every rule is unit-tested.

use std::fmt;
use std::time::Duration;

use time::OffsetDateTime;

use super::output::Output;
use super::state::{Recorded, SealedTo, rfc3339};
use crate::config::{CredentialMode, SpokeConfig};
use crate::fingerprint::{AgeRecipients, Ca, Content, Fingerprint, Sealing};
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
    /// Federated: the spoke refused a hub token of the check account this tick (its trust
    /// of the hub is gone or broken: a file reverted, a restart without the flag, keys
    /// it cannot fetch), though its certificate is as recorded.
    TrustRefused {
        detail: String,
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
    /// `spokekeeper revoke --drop-issuer`: the spoke's binding binds nobody (it keeps the
    /// audience `generation`) and its file trusts no issuer since `at`: a fresh hub
    /// token for `audience` was refused.
    IssuerDropped {
        at: String,
        generation: u64,
        audience: String,
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
            Reason::TrustRefused { .. } => "trust-refused",
            Reason::Revoked { .. } => "revoked",
            Reason::IssuerDropped { .. } => "issuer-dropped",
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
            Reason::TrustRefused { detail } => {
                write!(f, "the spoke refused the hub's token ({detail})")
            }
            Reason::IssuerDropped { at, .. } => write!(f, "the hub's issuer dropped at {at}"),
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

/// The rules after extraction (extracted and federated compare with what is committed; a
/// periodic check that found anything new commits it as a content change; a root
/// outside the bundle is committed only with a new bundle, so it settles).
pub fn after_extraction(
    reason: Reason,
    previous: Option<&Recorded>,
    fresh: &Recorded,
    mode: CredentialMode,
) -> Extracted {
    // Minted mints anew each time: nothing to compare. Federated compares its ConfigMap.
    let compared = previous.filter(|_| mode != CredentialMode::Minted);
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
    /// Federated: why the spoke refused the hub's token this tick, if it did.
    pub trust_refused: Option<String>,
    /// Federated: what the spoke's file would say of the hub this tick
    /// ([`crate::federate::trust_fingerprint`], with the tick's issuer CA files).
    pub trust_sha256: Option<Fingerprint<Content>>,
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
        // Federated: no client certificate is recorded, so nothing expires here.
        CredentialMode::Extracted | CredentialMode::Federated => policy.renew_before,
    };
    if let Some(not_after) = recorded.client_not_after
        && not_after - policy.now < renew_before
    {
        return Decision::Rotate(Reason::ClientExpiring { not_after });
    }
    if let Some(reason) = sealed_to_changed(sealed, recorded, policy.sealed_to) {
        return Decision::Rotate(reason);
    }
    if let Some(detail) = config_drift(spoke, sealed, recorded, policy.trust_sha256) {
        return Decision::Rotate(Reason::ConfigChanged { detail });
    }
    if policy.force {
        return Decision::Rotate(Reason::Forced);
    }
    // After the rules above: any of them re-extracts, and commits the node's bundle.
    if let Some(detail) = &policy.trust_refused {
        return Decision::Rotate(Reason::TrustRefused {
            detail: detail.clone(),
        });
    }
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

/// What a minted spoke's renewal found that the tick's reason did not say.
impl From<crate::mint::Why> for Reason {
    fn from(why: crate::mint::Why) -> Reason {
        use crate::mint::Why;
        match why {
            Why::Revoked {
                generation,
                found,
                users,
            } => Reason::Revoked {
                generation,
                found,
                users,
            },
            Why::BindingMissing { binding } => Reason::BindingMissing { binding },
            Why::CaChanged { old } => Reason::CaChanged { old },
            Why::ContentChanged => Reason::ContentChanged,
        }
    }
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
            SealedTo::Age(_) | SealedTo::Nothing => Some(Reason::Unreadable {
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

fn config_drift(
    spoke: &SpokeConfig,
    sealed: &Output,
    recorded: &Recorded,
    trust: Option<Fingerprint<Content>>,
) -> Option<String> {
    let federated = spoke.credential.mode == CredentialMode::Federated;
    if let Some(format) = sealed.format()
        && !federated
        && format != spoke.format
    {
        return Some(format!("format {format} -> {}", spoke.format));
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
    let config_map = matches!(sealed, Output::ConfigMap(_));
    if !federated && !config_map && sealed.keys() != [spoke.secret.key.as_str()] {
        return Some(format!("key -> {}", spoke.secret.key));
    }
    let (had, want) = (&recorded.credential, &spoke.credential);
    if had.mode != want.mode {
        return Some(format!("credential.mode {} -> {}", had.mode, want.mode));
    }
    if want.federated.is_some()
        && let Some(trust) = trust
        && recorded.trust_sha256 != Some(trust)
    {
        return Some("credential.federated".into());
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
mod tests;
