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
//! Kustomization and HelmRelease that uses it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use time::OffsetDateTime;

use super::Format;
use super::rotate::print_report;
use crate::config::Config;
use crate::repo::Repo;
use crate::rotate::{self, Context, Options};
use crate::seal::{RecoveryKey, SealedSecret, SealingKey};
use spokekeeper_lab::{ApiIdentity, ApiServer, Pki, PkiOptions, SealingPair, kubeconfig_yaml};

/// println! that survives a closed pipe (`spokekeeper demo | head`).
macro_rules! say {
    ($($arg:tt)*) => { super::out(&format!("{}\n", format_args!($($arg)*))) };
}

const SPOKES: [&str; 3] = ["dev", "test", "prod"];
const REBUILT: usize = 1;
/// The spoke whose credential is minted (credential.mode: minted), the rest extracted.
const MINTED: usize = 2;

/// One simulated k3s node: its certificates, its k3s.yaml, its API server.
struct SimSpoke {
    name: &'static str,
    dir: PathBuf,
    port: u16,
    pki: Pki,
    api: Option<ApiServer>,
}

impl SimSpoke {
    fn start(
        name: &'static str,
        root: &Path,
        rt: &tokio::runtime::Handle,
    ) -> Result<SimSpoke, String> {
        let dir = root.join("nodes").join(name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut spoke = SimSpoke {
            name,
            dir,
            port: 0,
            pki: new_pki(),
            api: None,
        };
        spoke.serve(rt, 0)?;
        spoke.write_k3s_yaml()?;
        Ok(spoke)
    }

    fn serve(&mut self, rt: &tokio::runtime::Handle, port: u16) -> Result<(), String> {
        let identity = ApiIdentity::new(&self.pki, "v1.33.1+k3s1");
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        let api = ApiServer::start(rt, addr, identity)
            .map_err(|e| format!("{}: API server: {e}", self.name))?;
        self.port = api.port;
        self.api = Some(api);
        Ok(())
    }

    /// What k3s writes: the server is https://127.0.0.1:PORT, root-only.
    fn write_k3s_yaml(&self) -> Result<(), String> {
        let text = kubeconfig_yaml(
            &format!("https://127.0.0.1:{}", self.port),
            &self.pki.parts,
            None,
            "",
        );
        let path = self.k3s_yaml();
        crate::fsutil::write_atomic(&path, text.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| e.to_string())
    }

    fn k3s_yaml(&self) -> PathBuf {
        self.dir.join("k3s.yaml")
    }

    /// A reinstall: new CAs and certificates, a new k3s.yaml, the API back on its port.
    fn rebuild(&mut self, rt: &tokio::runtime::Handle) -> Result<(), String> {
        self.api = None;
        self.pki = new_pki();
        self.serve(rt, self.port)?;
        self.write_k3s_yaml()
    }
}

/// What the spoke answers a revoked credential that asks for namespaces: 403, as its
/// user is no longer bound to any role.
async fn refused_now(kubeconfig: &crate::secret::SecretBytes) -> Result<String, String> {
    let (client, _) = crate::spoke::live::client(kubeconfig, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    match namespaces
        .list(&kube::api::ListParams::default().limit(1))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(format!("403 Forbidden ({})", s.message)),
        Ok(_) => Err("the revoked generation can still list namespaces".into()),
        Err(e) => Err(format!("the revoked generation got: {e}")),
    }
}

fn new_pki() -> Pki {
    Pki::generate(&PkiOptions {
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        address_in_sans: true,
        client_cert_days: 365,
    })
}

fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .map_err(|e| format!("cannot run git: {e} (install git)"))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn step(n: u32, text: &str) {
    say!("\n== {n}. {text}");
}

/// Runs the demo; every error names what failed.
pub(super) fn run() -> Result<(), String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let root = tempfile::Builder::new()
        .prefix("spokekeeper-demo-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let root_path = root.path();
    // The simulated spokes serve from their own runtime, like separate machines.
    let sim = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("sim-spokes")
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let hub = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;

    say!(
        "spokekeeper demo: a simulated fleet in {}",
        root_path.display()
    );
    step(
        1,
        "the fleet: a git remote, three k3s spokes with real TLS API servers (prod's hub credential is minted: a short-lived certificate for its own revocable user, not the node's admin)",
    );
    let remote = root_path.join("fleet.git");
    git(
        root_path,
        &[
            "init",
            "--quiet",
            "--bare",
            "--initial-branch=main",
            &remote.display().to_string(),
        ],
    )?;
    let seed = root_path.join("seed");
    git(
        root_path,
        &[
            "clone",
            "--quiet",
            &remote.display().to_string(),
            &seed.display().to_string(),
        ],
    )?;
    std::fs::write(
        seed.join("README.md"),
        "The fleet repo: Flux manifests for the hub.\n",
    )
    .map_err(|e| e.to_string())?;
    git(&seed, &["add", "README.md"])?;
    git(
        &seed,
        &[
            "-c",
            "user.name=platform",
            "-c",
            "user.email=platform@example.org",
            "commit",
            "--quiet",
            "-m",
            "fleet repo",
        ],
    )?;
    git(&seed, &["push", "--quiet", "origin", "HEAD:main"])?;
    let clone = root_path.join("clone");
    git(
        root_path,
        &[
            "clone",
            "--quiet",
            &remote.display().to_string(),
            &clone.display().to_string(),
        ],
    )?;

    let mut spokes = Vec::new();
    for name in SPOKES {
        let s = SimSpoke::start(name, root_path, sim.handle())?;
        say!(
            "   {name:<5} k3s API on https://127.0.0.1:{}  kubeconfig {}",
            s.port,
            s.k3s_yaml().display()
        );
        spokes.push(s);
    }
    // The hub: the Sealed Secrets controller (holding a key made for this run) and Flux,
    // applying what the fleet repo's main holds.
    let pair = SealingPair::generate()?;
    let load_keys = || {
        RecoveryKey::load_all(pair.key_pem.as_bytes(), "the demo controller's key")
            .map_err(|e| e.to_string())
    };
    let keys = load_keys()?;
    let source_remote = remote.clone();
    let source: spokekeeper_lab::hub::Source = std::sync::Arc::new(move |file: &str| {
        git(&source_remote, &["show", &format!("main:{file}")])
            .ok()
            .map(String::into_bytes)
    });
    let hub_api = spokekeeper_lab::hub::HubSim::start(
        sim.handle(),
        "kube-system",
        "sealed-secrets-controller",
        &pair.cert_pem,
        keys,
        source,
    )
    .map_err(|e| format!("the simulated hub: {e}"))?;
    for s in &spokes {
        hub_api.add_spoke(spokekeeper_lab::hub::SimSpoke {
            secret_namespace: "flux-system".into(),
            secret_name: format!("{}-kubeconfig", s.name),
            kustomization_namespace: "flux-system".into(),
            kustomization_name: s.name.into(),
            file: format!("fluxcd/{}-kubeconfig-sealed.yaml", s.name),
        });
        // A second consumer of the same Secret: apps deployed with Helm.
        hub_api.add_consumer(
            spokekeeper_lab::hub::Kind::HelmRelease,
            "flux-system",
            &format!("{}-apps", s.name),
            Some(&format!("{}-kubeconfig", s.name)),
        );
    }
    let hub_kubeconfig = root_path.join("hub.kubeconfig");
    std::fs::write(&hub_kubeconfig, hub_api.kubeconfig_yaml()).map_err(|e| e.to_string())?;
    say!(
        "   hub   API on http://{}: the Sealed Secrets controller (a key made for this run) and Flux",
        hub_api.addr
    );
    let cert = root_path.join("sealed-secrets-demo.pem");
    std::fs::write(&cert, &pair.cert_pem).map_err(|e| e.to_string())?;
    let mut yaml = format!(
        "repo:\n  path: {}\n  author: \"spokekeeper <spokekeeper@example.org>\"\nsealing:\n  cert: {}\nspokes:\n",
        clone.display(),
        cert.display()
    );
    for (i, s) in spokes.iter().enumerate() {
        yaml.push_str(&format!(
            "  - name: {}\n    address: 127.0.0.1\n    source: local\n    kubeconfig_path: {}\n",
            s.name,
            s.k3s_yaml().display()
        ));
        if i == MINTED {
            yaml.push_str("    credential: {mode: minted}\n");
        }
    }
    yaml.push_str(&format!(
        "hub:\n  kubeconfig: {}\n  verify_timeout: 20s\n",
        hub_kubeconfig.display()
    ));
    let config_path = root_path.join("spokekeeper.yaml");
    std::fs::write(&config_path, &yaml).map_err(|e| e.to_string())?;
    let config = Config::load(&config_path).map_err(|e| e.to_string())?;
    let sealing = SealingKey::from_pem(
        pair.cert_pem.as_bytes(),
        &cert.display().to_string(),
        OffsetDateTime::now_utc(),
    )
    .map_err(|e| e.to_string())?;
    let repo = hub
        .block_on(Repo::open(&config.repo))
        .map_err(|e| e.to_string())?;
    let ctx = Context::new(config, sealing, repo).map_err(|e| e.to_string())?;
    let all = Options {
        concurrency: 8,
        ..Options::default()
    };
    let tick = |label: &str| -> Result<rotate::TickReport, String> {
        let report = hub
            .block_on(rotate::tick(&ctx, &all))
            .map_err(|e| e.to_string())?;
        print_report(&report, Format::Table);
        if !report.ok() {
            return Err(format!("{label}: the tick failed (see above)"));
        }
        if !report.hub_ok() {
            return Err(format!(
                "{label}: the hub did not take a pushed credential (see above)"
            ));
        }
        Ok(report)
    };

    step(
        2,
        "first tick: every spoke's kubeconfig extracted, validated live, sealed, committed, pushed, then verified on the hub (SealedSecret Synced, a reconcile requested of every Kustomization and HelmRelease using it, each Ready)",
    );
    tick("first tick")?;
    step(
        3,
        "second tick: nothing changed, so nothing is committed (and no extraction happens)",
    );
    let report = tick("second tick")?;
    if report
        .spokes
        .iter()
        .any(|s| s.outcome != rotate::Outcome::Healthy)
    {
        return Err("second tick: expected every spoke healthy".into());
    }

    let rebuilt = &mut spokes[REBUILT];
    step(
        4,
        &format!(
            "rebuild `{}`: new CAs and certificates, its API restarted",
            rebuilt.name
        ),
    );
    let old_ca = crate::certs::fingerprint(&rebuilt.pki.server_ca_der);
    rebuilt.rebuild(sim.handle())?;
    say!(
        "   CA {} -> {}",
        old_ca,
        crate::certs::fingerprint(&rebuilt.pki.server_ca_der)
    );

    step(
        5,
        "third tick: the probe sees the serving certificate no longer chains to the recorded CA",
    );
    tick("third tick")?;

    step(
        6,
        "the hub's view: unseal the rebuilt spoke's new commit and prod's minted one with the controller's key, and call each spoke with it",
    );
    let hubs_view = |name: &str| -> Result<crate::secret::SecretBytes, String> {
        let file = format!("fluxcd/{name}-kubeconfig-sealed.yaml");
        let committed = git(&remote, &["show", &format!("main:{file}")])?;
        let keys = load_keys()?;
        let sealed = SealedSecret::parse(committed.as_bytes()).map_err(|e| e.to_string())?;
        let mut secret = sealed.unseal(&keys).map_err(|e| e.to_string())?;
        let kubeconfig = secret
            .data
            .remove("value")
            .ok_or("the sealed secret has no key `value`")?;
        let live = hub
            .block_on(crate::spoke::check_live(
                &kubeconfig,
                Duration::from_secs(10),
            ))
            .map_err(|e| format!("the committed credential does not work: {e}"))?;
        say!(
            "   {file} unseals; it authenticates as {} (groups {}) against {} ({})",
            live.username,
            live.groups.join(","),
            live.server,
            live.git_version
        );
        Ok(kubeconfig)
    };
    hubs_view(spokes[REBUILT].name)?;
    let minted = spokes[MINTED].name;
    let old_minted = hubs_view(minted)?;

    step(
        7,
        &format!(
            "`spokekeeper revoke {minted}`: the minted generation's ClusterRoleBinding deleted, the next generation minted, validated, sealed, pushed and verified"
        ),
    );
    let revoke = Options {
        revoke: true,
        only: vec![minted.to_string()],
        ..Options::default()
    };
    let report = hub
        .block_on(rotate::tick(&ctx, &revoke))
        .map_err(|e| e.to_string())?;
    print_report(&report, Format::Table);
    if !report.ok() || !report.hub_ok() {
        return Err(format!("revoking {minted} failed (see above)"));
    }
    let refused = hub.block_on(refused_now(&old_minted))?;
    say!("   the previous generation's credential, still valid as a certificate: {refused}");

    step(
        8,
        "the fleet repo's log: one commit per rotation, each saying why",
    );
    super::out(&git(&remote, &["log", "--format=%h %s", "main"])?);
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

/// The lab's hub emulates the Sealed Secrets controller; what one of its keys opens is
/// spokekeeper's own unsealing (the demo's hub, and the tests').
impl spokekeeper_lab::hub::Key for RecoveryKey {
    fn opens(&self, sealed: &[u8]) -> bool {
        SealedSecret::parse(sealed).is_ok_and(|s| s.unseal(std::slice::from_ref(self)).is_ok())
    }
}
