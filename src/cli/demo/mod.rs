//! `spokekeeper demo`: the whole loop against an embedded simulated fleet, no setup.
//!
//! In a temporary directory: a bare git remote (the fleet repo) and spokekeeper's clone;
//! four simulated k3s spokes, each a k3s-shaped k3s.yaml (read with the `local` source,
//! as when spokekeeper runs on the node; edge's over SSH) and a mock API server with real TLS and client
//! certificates; the demo sealing key from keys/demo/. Then: a first rotation, a second
//! that commits nothing, a rebuild of one spoke, the CA change detected and committed,
//! the new commit unsealed and proven against the rebuilt spoke, `prod`'s minted identity
//! revoked (its previous generation refused at once), and the fleet repo's log.
//! A simulated hub (the lab's `hub`: the controller holding a key made for this run, and Flux) serves
//! the sealing certificate and shows each pushed credential Synced, and Ready in each
//! Kustomization and HelmRelease that uses it. `dev`'s output is sops (`sealing.format:
//! sops`), encrypted for an age identity made for this run: the hub's kustomize-controller
//! decrypts it with that identity (spokekeeper's sops decryption, in memory only).
//!
//! `edge` is federated (credential.mode: federated): the hub's issuer signs real tokens
//! (ES256), spokekeeper writes edge's trust of it on the node over SSH, through the
//! federated recipe's script behind an sshd of its own (the system's OpenSSH server;
//! without one the demo leaves edge out and says so), binds the hub's controllers, proves
//! a hub token is accepted, and commits a ConfigMap: nothing secret in git, and the hub
//! stores no credential for it.
//!
//! The steps: `fleet` (the git remote, the clone, spokekeeper.yaml), `sim` (the spokes),
//! `node` (the federated spoke's sshd and script), `hub` (the simulated hub), `tour`
//! (steps 2 to 8), `federated` (what the tour shows of the federated spoke).

use std::time::Duration;

use spokekeeper_lab::SealingPair;
use spokekeeper_lab::federation::{Issuer, Reachable};
use tokio::runtime::Runtime;

/// println! that survives a closed pipe (`spokekeeper demo | head`).
macro_rules! say {
    ($($arg:tt)*) => { crate::cli::out(&format!("{}\n", format_args!($($arg)*))) };
}

mod federated;
mod fleet;
mod hub;
mod node;
mod sim;
mod tour;

const SPOKES: [&str; 4] = ["dev", "test", "prod", "edge"];
const REBUILT: usize = 1;
/// The spoke whose credential is minted (credential.mode: minted), the rest extracted.
const MINTED: usize = 2;
/// The spoke whose output is sops for the demo's age recipient, the rest SealedSecrets.
const SOPS: usize = 0;
/// The federated spoke (credential.mode: federated): git holds a ConfigMap, the hub no
/// credential; the last of [`SPOKES`], left out where no sshd can run for its node.
const FEDERATED: usize = 3;
/// Where kustomize-controller decrypts sops files from (its Kustomization's spec.path).
const SOPS_DIR: &str = "fluxcd/sops";
/// The simulated hub's `--service-account-issuer` (the spoke is handed its keys: no
/// discovery document is fetched, so a name that resolves nowhere).
const ISSUER: &str = "https://issuer.hub.demo.invalid";

/// Spoke `i`'s committed file in the fleet repo.
fn output(i: usize, name: &str) -> String {
    match i {
        SOPS => format!("{SOPS_DIR}/{name}-kubeconfig.yaml"),
        FEDERATED => format!("fluxcd/{name}-kubeconfig.yaml"),
        _ => format!("fluxcd/{name}-kubeconfig-sealed.yaml"),
    }
}

/// What failed in the demo: each names the part, and wraps or says its cause.
#[derive(Debug, thiserror::Error)]
pub(super) enum DemoError {
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot run git (install git)")]
    NoGit(#[source] std::io::Error),
    #[error("git {args}: {stderr}")]
    Git { args: String, stderr: String },
    /// A part of spokekeeper or the lab that the demo runs.
    #[error("{what}")]
    Part {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("the demo sealing pair: {0}")]
    Pair(String),
    #[error("{label}: the tick failed (see above)")]
    TickFailed { label: String },
    #[error("{label}: the hub did not take a pushed credential (see above)")]
    HubRefused { label: String },
    #[error("second tick: expected every spoke healthy")]
    NotHealthy,
    #[error("{file}: the sealed secret has no key `value`")]
    NoValue { file: String },
    #[error("revoking {spoke} failed (see above)")]
    RevokeFailed { spoke: String },
    #[error("the revoked generation can still list namespaces")]
    StillListed,
    #[error("the revoked generation got an answer other than 403 Forbidden")]
    NotRefused(#[source] kube::Error),
    #[error("{file}: {what} in the committed ConfigMap, which must hold nothing secret")]
    Secret { file: String, what: &'static str },
    #[error("{spoke}: no ClusterRoleBinding {name} on the spoke after its rotation")]
    NoBinding { spoke: String, name: String },
}

/// Wraps an I/O error with what it was about.
fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> DemoError {
    let what = what.to_string();
    move |source| DemoError::Io { what, source }
}

/// Wraps an error of a part the demo runs with what that part was doing.
fn part<E: std::error::Error + Send + Sync + 'static>(
    what: impl std::fmt::Display,
) -> impl FnOnce(E) -> DemoError {
    let what = what.to_string();
    move |e| DemoError::Part {
        what,
        source: Box::new(e),
    }
}

fn step(n: u32, text: &str) {
    say!("\n== {n}. {text}");
}

/// Runs the demo; every error names what failed.
pub(super) fn run() -> Result<(), DemoError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let root = tempfile::Builder::new()
        .prefix("spokekeeper-demo-")
        .tempdir()
        .map_err(io("the demo's temporary directory"))?;
    let root_path = root.path();
    // The simulated spokes serve from their own runtime, like separate machines.
    let sim = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("sim-spokes")
        .enable_all()
        .build()
        .map_err(io("the simulated spokes' runtime"))?;
    let hub = Runtime::new().map_err(io("the demo's runtime"))?;

    say!(
        "spokekeeper demo: a simulated fleet in {}",
        root_path.display()
    );
    step(
        1,
        "the fleet: a git remote, k3s spokes with real TLS API servers (prod's hub credential is minted: a short-lived certificate for its own revocable user, not the node's admin; dev's output is sops, not a SealedSecret; edge is federated: it trusts the hub's ServiceAccount tokens, and git holds no credential for it)",
    );
    let repos = fleet::Repos::create(root_path)?;
    let issuer = std::sync::Arc::new(Issuer::new(ISSUER));
    let mut spokes = sim::start_all(root_path, sim.handle(), &Reachable::of(&issuer))?;
    let node = federated::node(&mut spokes, &hub);
    // The hub: the Sealed Secrets controller (holding a key made for this run) and Flux,
    // applying what the fleet repo's main holds.
    let pair = SealingPair::generate().map_err(DemoError::Pair)?;
    // kustomize-controller's age identity, for dev's sops output: in memory only.
    let age_key = age::x25519::Identity::generate();
    let recipient = age_key.to_public().to_string();
    let hub_api = hub::start(sim.handle(), &pair, &age_key, &repos.remote, &spokes)?;
    hub::federate(&hub_api, &issuer);
    let hub_kubeconfig = root_path.join("hub.kubeconfig");
    std::fs::write(&hub_kubeconfig, hub_api.kubeconfig_yaml())
        .map_err(io(hub_kubeconfig.display()))?;
    say!(
        "   hub   API on http://{}: the Sealed Secrets controller (a key made for this run) and Flux",
        hub_api.addr
    );
    say!(
        "          and kustomize-controller, decrypting {SOPS_DIR}/ with an age identity made for this run (recipient {recipient})"
    );
    let ctx = fleet::context(
        &repos,
        (&spokes, node.as_ref()),
        &hub_kubeconfig,
        &pair.cert_pem,
        &recipient,
        &hub,
    )?;
    let tour = tour::Tour {
        hub: &hub,
        ctx: &ctx,
        remote: &repos.remote,
        key_pem: &pair.key_pem,
        age_key: &age_key,
        issuer: &issuer,
    };
    tour.run(&mut spokes, sim.handle())?;
    say!(
        "\nDone. Nothing here touched your machine beyond {}, now removed.",
        root_path.display()
    );
    drop(ctx);
    drop(hub_api);
    drop(node);
    drop(spokes);
    sim.shutdown_timeout(Duration::from_secs(2));
    Ok(())
}
