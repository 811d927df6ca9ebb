//! The fleet repo (a bare remote and spokekeeper's clone) and the spokekeeper.yaml that
//! names it, the spokes and the hub.

use std::path::{Path, PathBuf};
use std::process::Command;

use time::OffsetDateTime;
use tokio::runtime::Runtime;

use super::node::NodeSshd;
use super::sim::SimSpoke;
use super::{DemoError, FEDERATED, ISSUER, MINTED, SOPS, io, output, part};
use spokekeeper::config::Config;
use spokekeeper::repo::Repo;
use spokekeeper::rotate::Context;
use spokekeeper::seal::SealingKey;

/// The fleet repo's bare remote, the clone spokekeeper works in, and their root.
pub(super) struct Repos {
    pub(super) root: PathBuf,
    pub(super) remote: PathBuf,
    pub(super) clone: PathBuf,
}

pub(super) fn git(dir: &Path, args: &[&str]) -> Result<String, DemoError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .map_err(DemoError::NoGit)?;
    if !out.status.success() {
        return Err(DemoError::Git {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Repos {
    /// A bare remote whose main holds one commit (a README), and a clone of it.
    pub(super) fn create(root: &Path) -> Result<Repos, DemoError> {
        let remote = root.join("fleet.git");
        let remote_arg = remote.display().to_string();
        git(
            root,
            &[
                "init",
                "--quiet",
                "--bare",
                "--initial-branch=main",
                &remote_arg,
            ],
        )?;
        let seed = root.join("seed");
        git(
            root,
            &["clone", "--quiet", &remote_arg, &seed.display().to_string()],
        )?;
        let readme = seed.join("README.md");
        std::fs::write(&readme, "The fleet repo: Flux manifests for the hub.\n")
            .map_err(io(readme.display()))?;
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
        let clone = root.join("clone");
        git(
            root,
            &[
                "clone",
                "--quiet",
                &remote_arg,
                &clone.display().to_string(),
            ],
        )?;
        Ok(Repos {
            root: root.to_path_buf(),
            remote,
            clone,
        })
    }
}

/// spokekeeper.yaml for the simulated fleet: the clone, the sealing certificate and the
/// age recipient, each spoke read with the `local` source (prod minted, dev in sops
/// format) but the federated one, read over SSH, and the hub.
fn config_yaml(
    repos: &Repos,
    cert: &Path,
    recipient: &str,
    (spokes, node): (&[SimSpoke], Option<&NodeSshd>),
    hub_kubeconfig: &Path,
) -> String {
    let mut yaml = format!(
        "repo:\n  path: {}\n  author: \"spokekeeper <spokekeeper@example.org>\"\nsealing:\n  cert: {}\n  age_recipients: [{recipient}]\nspokes:\n",
        repos.clone.display(),
        cert.display()
    );
    for (i, s) in spokes.iter().enumerate() {
        if let (FEDERATED, Some(node)) = (i, node) {
            yaml.push_str(&federated_yaml(s, node));
            continue;
        }
        yaml.push_str(&format!(
            "  - name: {}\n    address: 127.0.0.1\n    source: local\n    kubeconfig_path: {}\n",
            s.name,
            s.k3s_yaml().display()
        ));
        if i == MINTED {
            yaml.push_str("    credential: {mode: minted}\n");
        }
        if i == SOPS {
            yaml.push_str(&format!(
                "    sealing: {{format: sops}}\n    output: {}\n",
                output(i, s.name)
            ));
        }
    }
    yaml.push_str(&format!(
        "hub:\n  kubeconfig: {}\n  verify_timeout: 20s\n",
        hub_kubeconfig.display()
    ));
    yaml
}

/// The federated spoke's entry: read and written over SSH through its node's script,
/// trusting the hub's issuer.
fn federated_yaml(s: &SimSpoke, node: &NodeSshd) -> String {
    let q = |p: &Path| serde_json::Value::from(p.display().to_string()).to_string();
    format!(
        "  - name: {}\n    address: 127.0.0.1\n    kubeconfig_path: {}\n    \
         ssh: {{user: {}, port: {}, identity: {}, known_hosts: {}}}\n    \
         credential: {{mode: federated, federated: {{issuer: {ISSUER:?}}}}}\n",
        s.name,
        q(&s.k3s_yaml()),
        node.user,
        node.port,
        q(&node.identity),
        q(&node.known_hosts),
    )
}

/// Writes the sealing certificate and spokekeeper.yaml (with the age `recipient`), and
/// loads them as spokekeeper does: the context every tick of the demo runs in.
pub(super) fn context(
    repos: &Repos,
    spokes: (&[SimSpoke], Option<&NodeSshd>),
    hub_kubeconfig: &Path,
    cert_pem: &str,
    recipient: &str,
    hub: &Runtime,
) -> Result<Context, DemoError> {
    let cert = repos.root.join("sealed-secrets-demo.pem");
    std::fs::write(&cert, cert_pem).map_err(io(cert.display()))?;
    let config_path = repos.root.join("spokekeeper.yaml");
    std::fs::write(
        &config_path,
        config_yaml(repos, &cert, recipient, spokes, hub_kubeconfig),
    )
    .map_err(io(config_path.display()))?;
    let config = Config::load(&config_path).map_err(part("the demo's spokekeeper.yaml"))?;
    let cert_name = cert.display().to_string();
    let sealing = SealingKey::from_pem(cert_pem.as_bytes(), &cert_name, OffsetDateTime::now_utc())
        .map_err(part("the demo's sealing certificate"))?;
    let repo = hub
        .block_on(Repo::open(&config.repo))
        .map_err(part("the demo's fleet repo clone"))?;
    Context::new(config, sealing, repo).map_err(part("the demo's context"))
}
