//! A tick's minted lifecycle (credential.mode: minted): with the admin credential just
//! extracted and validated, keep the committed generation, revoke every one, or mint the
//! next. What a new generation supersedes goes here (review mode) or once the hub took
//! the push (direct mode: the [`Revocation`] it returns). See docs/minted.md.

use std::time::Duration;

use super::bindings::{binding_fits, revoke};
use super::generation::{self, GenerationError};
use super::{Bound, MintError, Minted, RecordedCredential, Request, Revocation, Scope};
use super::{Spoke, binding_name, mint, shown};
use crate::config::{CredentialMode, SpokeConfig};
use crate::fingerprint::{Ca, Fingerprint};
use crate::kubeconfig::Sanitized;
use crate::secret::SecretBytes;

/// What the fleet repo records of the spoke's credential.
pub(crate) struct Held<'a> {
    /// Nothing committed, or unreadable: the default.
    pub credential: RecordedCredential,
    /// Its credential annotations are malformed: the counter is unknown, and a guess
    /// could bind a revoked user again, so nothing is minted until it is restored.
    pub unknown: Option<GenerationError>,
    /// A periodic tick of a committed minted credential, or one whose server presents a
    /// root outside the recorded bundle: what the admin credential is held against.
    pub check: Option<Check<'a>>,
}

/// A kubeconfig's first CA, whole bundle and server (a minted one carries the admin one's).
pub(crate) struct Check<'a> {
    pub ca_sha256: Fingerprint<Ca>,
    pub ca_bundle: &'a [Vec<u8>],
    pub server: &'a str,
}

/// What the tick allows.
pub(crate) struct Allowed<E> {
    /// `spokekeeper revoke`: delete every binding of the entry first.
    pub revoke: bool,
    /// Direct mode: what a new generation supersedes is revoked once the hub took the
    /// push. Review mode revokes nothing after its push (the hub takes the credential only
    /// when the pull request is merged): the generations before the merged one go here.
    pub after_push: bool,
    /// Create and delete nothing on the spoke.
    pub dry_run: bool,
    /// Per API call.
    pub call: Duration,
    /// Waiting for the signer.
    pub sign: Duration,
    /// Why what is minted could not be sealed this tick (an untrusted sealing certificate,
    /// a Secret `seal` refuses): then nothing is minted, since each mint binds a user.
    pub unsealable: Option<E>,
}

/// What a renewal did, whatever its end: the bindings it deleted and what it found that
/// the tick's reason did not say.
pub(crate) struct Renewal<E> {
    pub revoked: Vec<String>,
    pub why: Option<Why>,
    pub end: Result<Renewed, E>,
}

pub(crate) enum Renewed {
    /// A periodic check found the committed minted credential still fits.
    Unchanged,
    /// --dry-run: would mint (nothing was created or deleted on the spoke).
    WouldMint,
    Minted {
        minted: Box<Minted>,
        /// Direct mode: what to revoke once the hub has it.
        revocation: Option<Revocation>,
    },
}

/// Why a new generation is minted, when the tick's reason did not know it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// `spokekeeper revoke` deleted the bindings: `found` are the generations they
    /// carried, `users` the users they bound.
    Revoked {
        generation: u64,
        found: Vec<u64>,
        users: Vec<String>,
    },
    /// The committed generation's binding is gone, or binds something else.
    BindingMissing { binding: String },
    /// The admin credential's first CA or bundle is not the recorded one.
    CaChanged { old: Fingerprint<Ca> },
    /// Its server is not the recorded one.
    ContentChanged,
}

/// Keeps, revokes or renews the spoke's minted credential with the admin credential
/// `admin`, which stays in memory.
pub(crate) async fn renew<E: From<MintError>>(
    spoke: &SpokeConfig,
    admin: &Sanitized,
    held: &Held<'_>,
    allowed: Allowed<E>,
) -> Renewal<E> {
    let mut run = Run {
        spoke,
        admin,
        yaml: admin.to_yaml(),
        held,
        scope: Scope::of(spoke),
        revoked: Vec::new(),
        why: None,
    };
    let end = run.renew(allowed).await;
    Renewal {
        revoked: run.revoked,
        why: run.why,
        end,
    }
}

/// One renewal, and what it did so far.
struct Run<'a> {
    spoke: &'a SpokeConfig,
    admin: &'a Sanitized,
    yaml: SecretBytes,
    held: &'a Held<'a>,
    scope: Scope<'a>,
    revoked: Vec<String>,
    why: Option<Why>,
}

impl Run<'_> {
    async fn renew<E: From<MintError>>(&mut self, allowed: Allowed<E>) -> Result<Renewed, E> {
        let (held, had, how) = (self.held, &self.held.credential, &allowed);
        if let (Some(e), false) = (&held.unknown, how.revoke) {
            return Err(self.refused(e.clone()).into());
        }
        // Generations deleted this tick: the next one is above them too.
        let mut gone = Vec::new();
        if how.revoke {
            // The spoke's bindings decide, not the fleet repo: a malformed annotation, or
            // a file a pusher deleted or broke, does not stop a revocation, only the mint
            // after it. Only a spoke with neither a minted commit nor a binding of the
            // entry has nothing to revoke.
            let not_minted =
                (had.mode != CredentialMode::Minted && held.unknown.is_none()).then(|| {
                    MintError::NotMinted {
                        spoke: self.spoke.name.clone(),
                        had: had.mode,
                    }
                });
            if how.dry_run {
                return match not_minted {
                    Some(e) => Err(e.into()),
                    None => Ok(Renewed::WouldMint),
                };
            }
            gone = self.revoke_all(how.call).await?;
            if let (true, Some(e)) = (gone.is_empty(), not_minted) {
                return Err(e.into());
            }
        } else if let Some(recorded) = &held.check {
            self.why = self.check(recorded, how.call).await?;
            if self.why.is_none() {
                return Ok(Renewed::Unchanged);
            }
        }
        if how.dry_run {
            return Ok(Renewed::WouldMint);
        }
        if !how.after_push && had.mode == CredentialMode::Minted && had.generation > 1 {
            let older = revoke(
                &self.yaml,
                &self.scope,
                Some(had.generation),
                None,
                how.call,
            );
            match older.await {
                Ok(gone) => self.revoked.extend(gone.into_iter().map(|b| b.name)),
                Err(e) => {
                    tracing::warn!(spoke = %self.spoke.name, error = %e, "cannot revoke older generations")
                }
            }
        }
        let generation = self.next_generation(&gone, how.call).await?;
        if let Some(e) = allowed.unsealable {
            return Err(e);
        }
        let request = Request {
            spoke: &self.spoke.name,
            policy: &self.spoke.credential,
            generation,
            call_timeout: how.call,
            sign_timeout: how.sign,
        };
        let minted = mint(self.admin, &request).await?;
        let revocation = how.after_push.then(|| Revocation {
            admin: self.yaml.clone(),
            below: generation,
            legacy_user: had.user.clone(),
            hub: self.spoke.credential.hub_id.clone(),
            spoke: self.spoke.name.clone(),
        });
        let minted = Box::new(minted);
        Ok(Renewed::Minted { minted, revocation })
    }

    /// `spokekeeper revoke`: every binding of the entry on the spoke, not the one the
    /// fleet repo names (that annotation may have been wound back to a generation long
    /// gone); the mint goes on above them.
    async fn revoke_all(&mut self, call: Duration) -> Result<Vec<Bound>, MintError> {
        let (held, had) = (self.held, &self.held.credential);
        let user = had.user.as_deref();
        let gone = revoke(&self.yaml, &self.scope, None, user, call).await?;
        // This hub's generations for the entry; an earlier version's binding adopted
        // with them carries its own counter.
        let found: Vec<u64> = gone
            .iter()
            .filter(|b| b.labels.hub.is_some())
            .filter_map(|b| b.generation)
            .collect();
        if found != [had.generation] {
            tracing::warn!(
                spoke = %self.spoke.name,
                recorded = had.generation,
                found = ?found,
                "the fleet repo's annotation spokekeeper.io/credential-generation disagrees with the bindings on the spoke: deleted every one"
            );
        }
        self.revoked.extend(gone.iter().map(|b| b.name.clone()));
        let users = gone.iter().filter_map(|b| b.user.as_deref()).map(shown);
        self.why = Some(Why::Revoked {
            generation: had.generation,
            found,
            users: users.collect(),
        });
        match &held.unknown {
            Some(e) => Err(self.refused(e.clone())),
            None => Ok(gone),
        }
    }

    /// Periodic: None while the committed generation's binding still fits and the node's
    /// bundle and server are the recorded ones, else why to mint again.
    async fn check(&self, recorded: &Check<'_>, call: Duration) -> Result<Option<Why>, MintError> {
        let (had, scope) = (&self.held.credential, &self.scope);
        let user = had.user.as_deref().unwrap_or_default();
        let policy = &self.spoke.credential;
        let present = binding_fits(&self.yaml, scope, had.generation, user, policy, call).await?;
        let bundle: Vec<Vec<u8>> = self
            .admin
            .ca_certs()
            .iter()
            .map(|c| c.der.clone())
            .collect();
        let seen = Check {
            ca_sha256: self.admin.ca_certs()[0].fingerprint.as_kind(),
            ca_bundle: &bundle,
            server: &self.admin.server_string(),
        };
        let binding = binding_name(scope, had.generation);
        Ok(compared(recorded, &seen, present, binding))
    }

    /// The generation to mint: above the recorded one, this hub's bindings for the spoke
    /// entry and those deleted this tick (`gone`). The recorded counter comes from the
    /// fleet repo, and one wound back there must not reuse a generation.
    async fn next_generation(&self, gone: &[Bound], call: Duration) -> Result<u64, MintError> {
        let had = &self.held.credential;
        let api = Spoke::admin(&self.yaml, call).await?;
        let ours = api.list_bindings(&self.scope).await?;
        legacy_warnings(self.spoke, &api.list_legacy().await?, had.user.as_deref());
        let bound = ours
            .iter()
            .chain(gone.iter().filter(|b| b.labels.hub.is_some()));
        let file = self.spoke.output.display().to_string();
        let generation = generation::next(&self.spoke.name, &file, had.generation, bound)
            .map_err(|e| self.refused(e))?;
        if generation != had.next_generation() {
            tracing::warn!(
                spoke = %self.spoke.name,
                recorded = had.generation,
                generation,
                "the recorded generation is behind the spoke's bindings (was the fleet repo's annotation changed?): minting above both"
            );
        }
        Ok(generation)
    }

    fn refused(&self, e: GenerationError) -> MintError {
        tracing::warn!(spoke = %self.spoke.name, error = %e, "refusing to mint");
        MintError::Refused(e)
    }
}

/// What a periodic check found (`present`: the committed generation's binding still
/// fits). The admin kubeconfig's own content is never compared: it is not what the hub
/// holds.
fn compared(recorded: &Check<'_>, seen: &Check<'_>, present: bool, binding: String) -> Option<Why> {
    if !present {
        return Some(Why::BindingMissing { binding });
    }
    if seen.ca_sha256 != recorded.ca_sha256 || seen.ca_bundle != recorded.ca_bundle {
        return Some(Why::CaChanged {
            old: recorded.ca_sha256,
        });
    }
    (seen.server != recorded.server).then_some(Why::ContentChanged)
}

/// An earlier version's unscoped bindings are never left silently: the one of the
/// recorded user is this entry's and goes with its next revocation; any other is named
/// with the command that deletes it (spokekeeper cannot tell whose it is).
fn legacy_warnings(spoke: &SpokeConfig, legacy: &[Bound], recorded: Option<&str>) {
    for b in legacy {
        if recorded.is_some() && b.user.as_deref() == recorded {
            continue;
        }
        tracing::warn!(
            spoke = %spoke.name,
            "ClusterRoleBinding {name} was made by an earlier spokekeeper (no spokekeeper.io/hub label) and binds {user}, not this spoke entry's recorded user: once no spoke entry of any spokekeeper records that user (annotation spokekeeper.io/credential-user), delete it: kubectl delete clusterrolebinding {name}",
            name = shown(&b.name),
            user = b.user.as_deref().map_or("no single user".to_string(), shown),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_periodic_check_of_a_minted_spoke() {
        let bundle = [b"first".to_vec()];
        let fits = Check {
            ca_sha256: Fingerprint::from_digest([1; 32]),
            ca_bundle: &bundle,
            server: "https://10.0.0.1:6443",
        };
        let binding = "spokekeeper.hub.dev.g3";
        let check = |seen: &Check<'_>, present| compared(&fits, seen, present, binding.into());
        let old = fits.ca_sha256;
        assert_eq!(check(&fits, true), None);
        let other_ca = Check {
            ca_sha256: Fingerprint::from_digest([9; 32]),
            ..fits
        };
        let missing = Why::BindingMissing {
            binding: binding.into(),
        };
        assert_eq!(check(&other_ca, false), Some(missing));
        assert_eq!(check(&other_ca, true), Some(Why::CaChanged { old }));
        let moved = Check {
            server: "https://10.0.0.9:6443",
            ..fits
        };
        assert_eq!(check(&moved, true), Some(Why::ContentChanged));
        // The node's bundle gained a CA (a rotation under the same first CA): minted again.
        let grown = [b"first".to_vec(), b"new root".to_vec()];
        let grown = Check {
            ca_bundle: &grown,
            ..fits
        };
        assert_eq!(check(&grown, true), Some(Why::CaChanged { old }));
    }
}
