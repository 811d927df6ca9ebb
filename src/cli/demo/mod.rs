//! `spokekeeper demo`: the whole loop against an embedded simulated fleet, no setup.
//!
//! In a temporary directory: a bare git remote (the fleet repo) and spokekeeper's clone;
//! three simulated k3s spokes, each a k3s-shaped k3s.yaml (read with the `local` source,
//! as when spokekeeper runs on the node) and a mock API server with real TLS and client
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
//! The steps: `fleet` (the git remote, the clone, spokekeeper.yaml), `sim` (the spokes),
//! `hub` (the simulated hub), `tour` (steps 2 to 8).

use std::time::Duration;

use spokekeeper_lab::SealingPair;
use tokio::runtime::Runtime;

/// println! that survives a closed pipe (`spokekeeper demo | head`).
macro_rules! say {
    ($($arg:tt)*) => { crate::cli::out(&format!("{}\n", format_args!($($arg)*))) };
}

mod fleet;
mod hub;
mod sim;
mod tour;

const SPOKES: [&str; 3] = ["dev", "test", "prod"];
const REBUILT: usize = 1;
/// The spoke whose credential is minted (credential.mode: minted), the rest extracted.
const MINTED: usize = 2;
/// The spoke whose output is sops for the demo's age recipient, the rest SealedSecrets.
const SOPS: usize = 0;
/// Where kustomize-controller decrypts sops files from (its Kustomization's spec.path).
const SOPS_DIR: &str = "fluxcd/sops";

/// Spoke `i`'s committed file in the fleet repo.
fn output(i: usize, name: &str) -> String {
    match i {
        SOPS => format!("{SOPS_DIR}/{name}-kubeconfig.yaml"),
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
        "the fleet: a git remote, three k3s spokes with real TLS API servers (prod's hub credential is minted: a short-lived certificate for its own revocable user, not the node's admin; dev's output is sops, not a SealedSecret)",
    );
    let repos = fleet::Repos::create(root_path)?;
    let mut spokes = sim::start_all(root_path, sim.handle())?;
    // The hub: the Sealed Secrets controller (holding a key made for this run) and Flux,
    // applying what the fleet repo's main holds.
    let pair = SealingPair::generate().map_err(DemoError::Pair)?;
    // kustomize-controller's age identity, for dev's sops output: in memory only.
    let age_key = age::x25519::Identity::generate();
    let recipient = age_key.to_public().to_string();
    let hub_api = hub::start(sim.handle(), &pair, &age_key, &repos.remote, &spokes)?;
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
        &spokes,
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
    };
    tour.run(&mut spokes, sim.handle())?;
    say!(
        "\nDone. Nothing here touched your machine beyond {}, now removed.",
        root_path.display()
    );
    drop(ctx);
    drop(hub_api);
    drop(spokes);
    sim.shutdown_timeout(Duration::from_secs(2));
    Ok(())
}
