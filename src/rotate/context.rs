//! What a tick runs with: the process's [`Context`] (configuration, sealing key, fleet
//! repo, memories across ticks), the caller's [`Options`], the [`Gate`] asked before
//! each side effect, and each spoke's record ([`Spoke`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use time::OffsetDateTime;

use super::decide::Policy;
use super::observe::Observation;
use super::progress;
use crate::config::{Config, SpokeConfig};
use crate::fingerprint::{Ca, CaBundle, Fingerprint};
use crate::repo::{Beside, Repo};
use crate::seal::Sealer;
use crate::seal::SealingKey;

/// sealing.cert is the published demo key: refused everywhere (the demo makes a key of
/// its own).
#[derive(Debug, thiserror::Error)]
#[error(
    "sealing.cert {} is spokekeeper's demo key, whose private key is public (keys/demo/): \
     anyone could unseal what is sealed to it. Use the hub controller's certificate \
     (kubeseal --fetch-cert > keys/sealed-secrets-infra.pem)",
    cert.display()
)]
pub struct DemoKey {
    pub cert: std::path::PathBuf,
}

/// What one tick needs: the configuration, the sealing key (None: no sealing.cert, every
/// spoke is sops) and the fleet repo. The hub client and the forge client are made from
/// the configuration at the start of each tick (`tick.rs`, `review/`) rather than kept
/// here: they read credentials (the hub's kubeconfig, the forge token) that are rotated
/// on disk, and a new tick must read them again.
pub struct Context {
    pub config: Config,
    pub sealing: Option<SealingKey>,
    pub repo: Repo,
    pub(crate) probe_timeout: Duration,
    pub(crate) live_timeout: Duration,
    /// How long a minted credential's CSR may wait for the spoke's signer.
    pub(crate) sign_timeout: Duration,
    /// When each spoke was last re-extracted (in memory: a fresh process re-checks once).
    pub(super) verified: Mutex<HashMap<String, OffsetDateTime>>,
    /// Spokes whose pushed credential the hub had not taken at the last look: looked at
    /// again every tick until it has, so their hub gauges and alerts clear.
    pub(super) hub_unverified: Mutex<std::collections::BTreeSet<String>>,
    /// Roots a spoke presents outside its recorded bundle that an extraction found the
    /// node's kubeconfig does not hold: not extracted for again (decide.rs's rule).
    pub(super) roots_seen: Mutex<HashMap<String, SeenRoots>>,
}

impl Context {
    /// Refuses the demo sealing key: its private half is published in keys/demo/.
    /// `SealingKey::from_pem` refuses it already; this holds should a key be made otherwise.
    /// `sealing`: a key, or None when sealing.cert is not set.
    pub fn new(
        config: Config,
        sealing: impl Into<Option<SealingKey>>,
        repo: Repo,
    ) -> Result<Context, DemoKey> {
        let sealing = sealing.into();
        if sealing.as_ref().is_some_and(SealingKey::is_demo) {
            return Err(DemoKey {
                cert: config.sealing_cert.unwrap_or_default(),
            });
        }
        Ok(Context {
            config,
            sealing,
            repo,
            probe_timeout: Duration::from_secs(10),
            live_timeout: Duration::from_secs(20),
            sign_timeout: Duration::from_secs(30),
            verified: Mutex::new(HashMap::new()),
            hub_unverified: Mutex::new(Default::default()),
            roots_seen: Mutex::new(HashMap::new()),
        })
    }
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Rotate even when nothing says so.
    pub force: bool,
    /// `spokekeeper revoke`: delete the committed generation's binding at once, then mint
    /// the next (implies force; minted spokes only).
    pub revoke: bool,
    /// With `revoke`, of a federated spoke: its file trusts no issuer from now on, and no
    /// tick writes the trust back until `rotate SPOKE --force` (nothing is committed).
    pub drop_issuer: bool,
    /// Decide and validate, but write, commit and push nothing.
    pub dry_run: bool,
    /// Only these spokes (empty: all).
    pub only: Vec<String>,
    /// How many spokes are worked on at once.
    pub concurrency: usize,
    /// Told where the tick is (`rotate` on a terminal); nothing by default.
    pub progress: progress::Progress,
    /// Asked right before the push; always yes by default.
    pub gate: Gate,
    /// Files committed in the same commit as a spoke's credential, by spoke name
    /// (`spokekeeper add`: the Flux objects that deploy with it). In review mode they go
    /// on the spoke's branch with it ([`crate::repo::Repo::commit_onboarding`]).
    pub beside: std::collections::BTreeMap<String, Vec<Beside>>,
}

/// Whether this process may still act (with leader election: it holds the Lease with
/// time left), asked right before a side effect: Err says why not.
#[derive(Clone, Default)]
pub struct Gate(Option<std::sync::Arc<GateFn>>);

/// Ok with how long side effects may still be started (None: no limit), or why not.
type GateFn = dyn Fn() -> Result<Option<std::time::Duration>, Closed> + Send + Sync;

/// Why the [`Gate`] refused a side effect.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
pub struct Closed(std::sync::Arc<dyn std::error::Error + Send + Sync>);

impl Gate {
    pub fn new<E>(check: impl Fn() -> Result<(), E> + Send + Sync + 'static) -> Gate
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Gate::with_tenure(move || check().map(|()| None))
    }

    /// A gate that also says how long it stays open (a leader's remaining tenure), so a
    /// caller can bound what it starts by it.
    pub fn with_tenure<E>(
        check: impl Fn() -> Result<Option<std::time::Duration>, E> + Send + Sync + 'static,
    ) -> Gate
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Gate(Some(std::sync::Arc::new(move || {
            check().map_err(|e| Closed(std::sync::Arc::new(e)))
        })))
    }

    pub fn check(&self) -> Result<(), Closed> {
        self.left().map(|_| ())
    }

    /// Ok with how long the gate stays open (None: no limit).
    pub fn left(&self) -> Result<Option<std::time::Duration>, Closed> {
        self.0.as_ref().map_or(Ok(None), |check| check())
    }

    /// Runs `work` while the gate stays open: when the time it said it stays open has
    /// passed it is asked again (a leader renews), and `work` is dropped, unfinished, once
    /// it is closed.
    pub async fn bound<T>(&self, work: impl Future<Output = T>) -> Result<T, Closed> {
        let mut work = std::pin::pin!(work);
        loop {
            let Some(left) = self.left()? else {
                return Ok(work.await);
            };
            // Asked again no sooner than this: a gate about to close is not spun on.
            let next = left.max(std::time::Duration::from_millis(20));
            tokio::select! {
                done = &mut work => return Ok(done),
                () = tokio::time::sleep(next) => {}
            }
        }
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Gate(checked)"
        } else {
            "Gate(open)"
        })
    }
}

/// When a published change can reach the hub, which decides when superseded minted
/// generations may be revoked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Landing {
    /// Direct mode: the push is on the target branch.
    AtPush,
    /// Review mode: nothing reaches the target branch before a person merges it.
    AtMerge,
}

/// One spoke as its tick holds it, built once and read by every stage: its
/// configuration, what was observed, the policy it is weighed by, and its sealer.
pub(super) struct Spoke<'a> {
    pub config: &'a SpokeConfig,
    pub seen: &'a Observation,
    pub policy: Policy,
    pub sealer: Sealer<'a>,
}

/// Roots presented outside a recorded bundle, found absent from the node's kubeconfig by
/// an extraction, and the bundle they were judged against.
#[derive(Debug)]
pub(super) struct SeenRoots {
    pub bundle: Fingerprint<CaBundle>,
    pub roots: Vec<Fingerprint<Ca>>,
}

/// The one context a spoke's reconcile takes: the tick as every spoke sees it. It borrows
/// the process's [`Context`] and the caller's [`Options`], and adds what the tick settled
/// before working on any spoke (docs/ARCHITECTURE.md says why these stay apart).
pub(super) struct Tick<'a> {
    /// Lives as long as the process: configuration, repo, timeouts, memories across ticks.
    pub context: &'a Context,
    /// What the caller asked of this tick.
    pub options: &'a Options,
    /// The tick's clock, one for every spoke.
    pub now: OffsetDateTime,
    /// The tick's sealing key (None: no sealing.cert, every spoke is sops); with
    /// `untrusted` set nothing may be sealed to it.
    pub sealing: Option<&'a SealingKey>,
    pub untrusted: Option<&'a crate::hub::cert::Untrusted>,
    /// When what the tick publishes can reach the hub.
    pub landing: Landing,
    /// The tick's listing of the hub's consumers (empty without a hub).
    pub listed: &'a crate::hub::consumers::Listed,
    /// The tick's hub client, when `hub:` is configured and it connected.
    pub hub: Option<&'a crate::hub::Hub>,
    /// The issuer CA files of federated spokes, read once this tick.
    pub issuer_cas: &'a crate::federate::IssuerCas,
}
