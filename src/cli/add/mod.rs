//! `spokekeeper add NAME --address ... --distro ...`: a new spoke onboarded in one
//! command. Appends it to spokekeeper.yaml as text (comments kept, the result parsed
//! again), prints the node recipe and the host-key step, then rotates it through the
//! one-spoke rotate path, committing beside its credential, in the same commit, the Flux
//! objects that deploy to it (layout.rs) and the root kustomization.yaml's listing of
//! them: one commit, one push. In review mode that commit is an onboarding one on the
//! spoke's branch, with one pull request (spokekeeper::repo::Repo::commit_onboarding).
//! spokekeeper.yaml is written only once that commit is made (in review mode: pushed);
//! a failure leaves it, the clone and the remote as they were. A spokekeeper.yaml add
//! cannot write (the chart's) must hold the spoke first (readonly.rs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::{Chain, Format, fail, out};
use spokekeeper::config::{Config, CredentialMode, Distro, NewSpoke, RepoMode};
use spokekeeper::repo::Repo;
use spokekeeper::rotate::{Options, Outcome};

mod flux;
mod readonly;
mod steps;

/// Namespaces a spoke's Flux objects may not share: flux-system holds Flux's own
/// Secrets (the fleet repo's deploy key among them), which a HelmRelease there could
/// read through valuesFrom; kube-* and default are Kubernetes'.
const RESERVED_NAMESPACES: [&str; 2] = ["flux-system", "default"];

/// The API server port of k3s, rke2 and kubeadm alike.
const API_PORT: u16 = 6443;

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// The new spoke's name: a DNS label; its Secret, files and Kustomizations are named after it.
    pub name: String,
    /// The spoke's API server host (an IP address or DNS name); also the SSH target unless --ssh-host.
    #[arg(long)]
    pub address: String,
    /// The spoke's distribution: sets the kubeconfig path read on the node.
    #[arg(long, value_enum)]
    pub distro: Distro,
    /// Reach the node over SSH here instead of --address (the kubeconfig then points at https://ADDRESS:6443).
    #[arg(long)]
    pub ssh_host: Option<String>,
    /// The kubeconfig on the node, when not where the distribution writes it.
    #[arg(long)]
    pub kubeconfig_path: Option<String>,
    /// The root Kustomization's directory in the fleet repo (its spec.path), where the
    /// spoke's Kustomizations go [default: with hub:, the path of the Kustomization that
    /// applies the configured spokes' credentials there; else the credential's directory].
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// The spoke's manifests directory in the fleet repo [default: spokes/NAME].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The GitRepository the spoke's Kustomizations read, as [NAMESPACE/]NAME (flux
    /// bootstrap's is flux-system/flux-system; NAMESPACE defaults to flux-system).
    #[arg(long, default_value = "flux-system")]
    pub source: String,
    /// The spoke's own hub namespace: its Secret, its Kustomizations and its HelmReleases,
    /// and no other spoke's [default: NAME].
    #[arg(long)]
    pub namespace: Option<String>,
    /// The ServiceAccount Flux's controllers act as on the spoke (serviceAccountName, in
    /// the namespace of that name there): needed when they run with
    /// --default-service-account (Flux's multi-tenancy lockdown); the steps create it.
    #[arg(long)]
    pub service_account: Option<String>,
    /// The spoke's credential.mode [default: the configuration's credential.mode]:
    /// federated commits no credential, only a ConfigMap Flux reads with
    /// spec.kubeConfig.configMapRef (docs/federated.md).
    #[arg(long, value_enum)]
    pub credential: Option<CredentialMode>,
    /// The hub's --service-account-issuer, as the spoke's credential.federated.issuer
    /// [default: the configuration's credential.federated.issuer].
    #[arg(long)]
    pub issuer: Option<String>,
    /// Another control-plane node of a federated spoke, as spokes[].servers (repeat for
    /// each): its trust is written there over SSH and its own API server proven.
    #[arg(long = "server", value_name = "ADDRESS")]
    pub servers: Vec<String>,
}

pub(super) fn run(args: &AddArgs, config_path: &Path, format: Option<Format>) -> ExitCode {
    match add(args, config_path, format.unwrap_or(Format::Table)) {
        Ok(code) => code,
        Err(e) => fail("add", Chain(&e)),
    }
}

/// Why a spoke was not added; each says what to do.
#[derive(Debug, thiserror::Error)]
enum AddError {
    #[error("{}: cannot read it: {error} (pass --config FILE; `spokekeeper init` writes one)", file.display())]
    ReadConfig {
        file: PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] spokekeeper::config::ConfigError),
    #[error("{0}; or pass --issuer URL (the hub's --service-account-issuer) for this spoke")]
    NoIssuer(spokekeeper::config::ConfigError),
    #[error(
        "--issuer is credential.federated.issuer, but {spoke}'s credential.mode is {mode}: pass --credential federated, or drop --issuer"
    )]
    NotFederated { spoke: String, mode: CredentialMode },
    #[error("--credential {given} is not {spoke}'s credential.mode {configured} in {}, which add cannot write: drop the flag, or change the entry there", file.display())]
    OtherCredential {
        spoke: String,
        given: CredentialMode,
        configured: CredentialMode,
        file: PathBuf,
    },
    #[error("--issuer {given:?} is not {spoke}'s credential.federated.issuer {configured:?} in {}, which add cannot write: drop the flag, or change the entry there", file.display())]
    OtherIssuer {
        spoke: String,
        given: String,
        configured: String,
        file: PathBuf,
    },
    #[error("--server {given:?} is not {spoke}'s servers {configured:?} in {}, which add cannot write: drop the flags, or change the entry there", file.display())]
    OtherServers {
        spoke: String,
        given: Vec<String>,
        configured: Vec<String>,
        file: PathBuf,
    },
    #[error("the spoke is not in the edited configuration")]
    NotInConfig,
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("repo.path: {0}")]
    Repo(Box<spokekeeper::repo::RepoError>),
    #[error("{0}")]
    Lock(Box<spokekeeper::repo::RepoError>),
    #[error("{}: {error}", rel.display())]
    Read {
        rel: PathBuf,
        error: Box<spokekeeper::repo::RepoError>,
    },
    #[error("{flag} {}: give a directory inside the fleet repo, relative to its root (e.g. clusters/hub)", path.display())]
    Outside { flag: &'static str, path: PathBuf },
    #[error(
        "--source {0:?} is not [NAMESPACE/]NAME of a GitRepository (e.g. flux-system/flux-system)"
    )]
    Source(String),
    #[error("--service-account {0:?} is not a Kubernetes object name (e.g. flux-applier)")]
    Account(String),
    #[error(
        "--namespace {0:?} is not the spoke's own: Flux and Kubernetes keep their own objects there (pick e.g. the spoke's name)"
    )]
    Namespace(String),
    #[error("{} exists in the fleet repo: add overwrites nothing; remove it, or pick another name", .0.display())]
    Exists(PathBuf),
    #[error("{} lists the root's resources, but the spoke's credential {} is outside {}: set spokes[].output under it, or pass --root", file.display(), output.display(), root.display())]
    CredentialOutside {
        file: PathBuf,
        output: PathBuf,
        root: PathBuf,
    },
    #[error(
        "{kustomization} applies the spokes' credentials on the hub, but its spec.path {path:?} leaves the fleet repo: pass --root"
    )]
    HubRoot { kustomization: String, path: String },
    #[error("{}: not UTF-8 text", .0.display())]
    NotText(PathBuf),
    #[error("{}: its last line has no line break, and in review mode add may only add lines to it; end the file with one on {branch} and run add again", file.display())]
    NoLineBreak { file: PathBuf, branch: String },
    #[error("{}: {error}", file.display())]
    Listing {
        file: PathBuf,
        error: spokekeeper::flux::layout::ListError,
    },
    #[error(transparent)]
    Tick(Box<super::rotate::RunTickError>),
    #[error("{spoke} was not added: nothing was committed and {} is unchanged; follow the steps above (the node recipe, the host key) and run add again", file.display())]
    NotAdded { spoke: String, file: PathBuf },
    #[error("{spoke} was not added: {} cannot be written (the Helm chart mounts it from a ConfigMap) and does not configure it; nothing was committed: add the entry printed above to the chart's config.spokes, roll it out and run add again", file.display())]
    ReadOnly { spoke: String, file: PathBuf },
    #[error("--namespace {given:?} is not the spoke's secret.namespace {configured:?} in {}, which add cannot write: drop the flag, or change the entry there", file.display())]
    OtherNamespace {
        given: String,
        configured: String,
        file: PathBuf,
    },
    #[error("{spoke} is committed ({commit}) but {} could not be written: {error}; add the spoke to it by hand", file.display())]
    NotWritten {
        spoke: String,
        commit: String,
        file: PathBuf,
        error: std::io::Error,
    },
}

/// Edits the configuration in memory, prints the node's steps, rotates the spoke with
/// its Flux files beside it, and only then writes the configuration.
fn add(args: &AddArgs, config_path: &Path, format: Format) -> Result<ExitCode, AddError> {
    let (edited, config) = if readonly::writable(config_path) {
        let (text, config) = edit(args, config_path)?;
        (Some(text), config)
    } else {
        (None, readonly::configured(args, config_path)?)
    };
    let Some(spoke) = config.spokes.iter().find(|s| s.name == args.name).cloned() else {
        return Err(AddError::NotInConfig);
    };
    if args.issuer.is_some() && spoke.credential.mode != CredentialMode::Federated {
        return Err(AddError::NotFederated {
            spoke: spoke.name,
            mode: spoke.credential.mode,
        });
    }
    let steps = steps::node_steps(&spoke, args.service_account.as_deref());
    if format == Format::Table {
        out(&steps);
    } else {
        eprint!("{steps}");
    }
    let runtime = tokio::runtime::Runtime::new().map_err(AddError::Runtime)?;
    let review = config.repo.mode == RepoMode::PullRequest;
    let branch = spokekeeper::rotate::review::branch_name(&spoke);
    let (beside, pushed_before) = runtime.block_on(flux::flux_files(&config, &spoke, args))?;
    let files: Vec<String> = beside.iter().map(|b| b.rel.display().to_string()).collect();
    let opts = Options {
        only: vec![spoke.name.clone()],
        concurrency: 1,
        beside: BTreeMap::from([(spoke.name.clone(), beside)]),
        ..Options::default()
    };
    let repo_config = config.repo.clone();
    let report = runtime
        .block_on(super::rotate::run_tick(config, &opts))
        .map_err(|e| AddError::Tick(Box::new(e)))?;
    super::rotate::print_report(&report, format);
    let committed = if review {
        // Pushed this run, whether or not the forge then answered: the next tick opens
        // the pull request of a pushed branch, once the spoke is in spokekeeper.yaml.
        runtime
            .block_on(pushed_to(&repo_config, &branch))
            .filter(|now| Some(now) != pushed_before.as_ref())
    } else {
        rotated(&report, &spoke.name)
    };
    let Some(commit) = committed else {
        return Err(AddError::NotAdded {
            spoke: spoke.name,
            file: config_path.to_path_buf(),
        });
    };
    let added = match edited {
        Some(edited) => {
            spokekeeper::fsutil::write_atomic(config_path, edited.as_bytes()).map_err(|error| {
                AddError::NotWritten {
                    spoke: spoke.name.clone(),
                    commit: commit.clone(),
                    file: config_path.to_path_buf(),
                    error,
                }
            })?;
            format!("added {} to {}", spoke.name, config_path.display())
        }
        None => format!(
            "onboarded {} as {} has it",
            spoke.name,
            config_path.display()
        ),
    };
    let short = commit.chars().take(12).collect::<String>();
    if review {
        eprintln!(
            "{added}; pushed its credential with {} to branch {branch} at {short} for review: merging its pull request makes Flux deploy it",
            files.join(", "),
        );
    } else {
        eprintln!(
            "{added}; committed its credential with {} in {short}",
            files.join(", "),
        );
    }
    Ok(if report.ok() && report.hub_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// spokekeeper.yaml as read, with the spoke appended (not written yet), and the
/// configuration it loads as.
fn edit(args: &AddArgs, config_path: &Path) -> Result<(String, Config), AddError> {
    let text = std::fs::read_to_string(config_path).map_err(|error| AddError::ReadConfig {
        file: config_path.to_path_buf(),
        error,
    })?;
    let file = config_path.display().to_string();
    let spoke = new_spoke(args);
    checked(args, &spoke.namespace)?;
    let base = config_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    spokekeeper::config::add_spoke(&text, &file, &base, &spoke).map_err(|e| {
        if args.issuer.is_none() && e.message.contains(spokekeeper::config::NO_ISSUER) {
            AddError::NoIssuer(e)
        } else {
            AddError::Config(e)
        }
    })
}

/// The flags add checks itself, with the spoke's hub namespace.
fn checked(args: &AddArgs, namespace: &str) -> Result<(), AddError> {
    if let Some(sa) = args
        .service_account
        .as_ref()
        .filter(|sa| !spokekeeper::config::is_dns_subdomain(sa))
    {
        return Err(AddError::Account(sa.clone()));
    }
    if RESERVED_NAMESPACES.contains(&namespace) || namespace.starts_with("kube-") {
        return Err(AddError::Namespace(namespace.to_string()));
    }
    Ok(())
}

/// The commit the tick made for `spoke` (direct mode), if it rotated it.
fn rotated(report: &spokekeeper::rotate::TickReport, spoke: &str) -> Option<String> {
    report
        .spokes
        .iter()
        .find(|s| s.spoke == spoke)
        .and_then(|s| match &s.outcome {
            Outcome::Rotated { commit } => Some(commit.clone()),
            _ => None,
        })
}

/// The spoke as the flags give it.
fn new_spoke(args: &AddArgs) -> NewSpoke {
    let (address, api_server) = match &args.ssh_host {
        Some(ssh) => (
            ssh.clone(),
            Some(format!(
                "https://{}",
                spokekeeper::spoke::host_port(&args.address, API_PORT)
            )),
        ),
        None => (args.address.clone(), None),
    };
    NewSpoke {
        name: args.name.clone(),
        address,
        distro: args.distro,
        kubeconfig_path: args.kubeconfig_path.clone(),
        api_server,
        namespace: args.namespace.clone().unwrap_or_else(|| args.name.clone()),
        credential: args.credential,
        issuer: args.issuer.clone(),
        servers: args.servers.clone(),
    }
}

/// The commit this clone last pushed to `branch` (review mode), if any.
async fn pushed_to(config: &spokekeeper::config::RepoConfig, branch: &str) -> Option<String> {
    Repo::open(config).await.ok()?.pushed(branch).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> AddArgs {
        use clap::Parser;
        let mut argv = vec!["spokekeeper", "add", "edge-1", "--address", "10.0.0.9"];
        argv.extend_from_slice(extra);
        match super::super::Cli::parse_from(argv).command {
            super::super::Command::Add(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_ssh_host_keeps_the_address_for_the_api_server() {
        let s = new_spoke(&args(&[
            "--distro",
            "kubeadm",
            "--ssh-host",
            "bastion.example.org",
        ]));
        assert_eq!(s.address, "bastion.example.org");
        assert_eq!(s.api_server.as_deref(), Some("https://10.0.0.9:6443"));
        assert_eq!(s.distro, Distro::Kubeadm);
        let s = new_spoke(&args(&["--distro", "rke2"]));
        assert_eq!((s.address.as_str(), s.api_server), ("10.0.0.9", None));
    }

    #[test]
    fn the_template_gains_the_spoke_and_the_steps_name_its_node() {
        let (text, config) = spokekeeper::config::add_spoke(
            super::super::init::TEMPLATE,
            "spokekeeper.yaml",
            Path::new("/etc/spokekeeper"),
            &new_spoke(&args(&["--distro", "rke2"])),
        )
        .unwrap();
        assert!(text.starts_with(super::super::init::TEMPLATE), "{text}");
        let steps = steps::node_steps(&config.spokes[1], None);
        for want in [
            "NOPASSWD: /usr/bin/cat /etc/rancher/rke2/rke2.yaml",
            "ssh-keyscan -p 22 -t ed25519 10.0.0.9 > edge-1.hostkey",
            "cat edge-1.hostkey >> /etc/spokekeeper/ssh/known_hosts",
        ] {
            assert!(steps.contains(want), "{want:?} in {steps}");
        }
        assert!(!steps.contains("k3s.yaml"), "{steps}");
        // The recipe's own host-key line appends unchecked: only the checked step is shown.
        assert_eq!(steps.matches("ssh-keyscan").count(), 1, "{steps}");
        // No account given: the lockdown is warned about, and nothing is created.
        assert!(steps.contains("pass --service-account NAME"), "{steps}");
        assert!(!steps.contains("kubectl"), "{steps}");
    }

    #[test]
    fn a_service_account_is_created_on_the_spoke_and_written_where_flux_reads_it() {
        let a = args(&["--distro", "k3s", "--service-account", "flux-applier"]);
        let (_, config) = spokekeeper::config::add_spoke(
            super::super::init::TEMPLATE,
            "spokekeeper.yaml",
            Path::new("/etc/spokekeeper"),
            &new_spoke(&a),
        )
        .unwrap();
        let spoke = &config.spokes[1];
        assert_eq!(spoke.secret.namespace, "edge-1");
        let steps = steps::node_steps(spoke, a.service_account.as_deref());
        for want in [
            "kubectl create namespace edge-1\n",
            "kubectl -n edge-1 create serviceaccount flux-applier\n",
            "--serviceaccount=edge-1:flux-applier\n",
        ] {
            assert!(steps.contains(want), "{want:?} in {steps}");
        }
        assert!(!steps.contains("pass --service-account"), "{steps}");
        let layout = spokekeeper::flux::layout::Layout {
            root: "fluxcd".into(),
            dir: "spokes/edge-1".into(),
            source: spokekeeper::flux::layout::Source::parse("flux-system").unwrap(),
            spoke_account: a.service_account.clone(),
        };
        let text = layout.objects(spoke);
        let docs: Vec<serde_json::Value> = text
            .split("\n---\n")
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect();
        let (apps, helm) = (&docs[4], &docs[5]);
        assert_eq!(apps["spec"]["serviceAccountName"], "flux-applier");
        // The hub-side Kustomization keeps its own, hub-side account.
        assert_eq!(helm["spec"]["serviceAccountName"], "edge-1-helmreleases");
        let ops: serde_json::Value =
            serde_saphyr::from_str(helm["spec"]["patches"][0]["patch"].as_str().unwrap()).unwrap();
        assert_eq!(
            ops[1],
            serde_json::json!({"op": "add", "path": "/spec/serviceAccountName", "value": "flux-applier"})
        );
        let e = add_error(&["--distro", "k3s", "--service-account", "Bad_Name"]);
        assert!(e.starts_with("--service-account \"Bad_Name\""), "{e}");
    }

    /// The error `edit` gives for these flags, on the template.
    fn add_error(extra: &[&str]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("spokekeeper.yaml");
        std::fs::write(&file, super::super::init::TEMPLATE).unwrap();
        edit(&args(extra), &file).unwrap_err().to_string()
    }

    #[test]
    fn a_namespace_flux_or_kubernetes_keeps_its_own_objects_in_is_refused() {
        for ns in ["flux-system", "default", "kube-system", "kube-public"] {
            let e = add_error(&["--distro", "k3s", "--namespace", ns]);
            assert!(
                e.starts_with(&format!("--namespace {ns:?} is not the spoke's own")),
                "{e}"
            );
        }
        let e = add_error(&["--distro", "k3s", "--namespace", "Edge"]);
        assert!(e.contains("spokes[1].secret.namespace"), "{e}");
    }

    #[test]
    fn a_federated_spoke_without_an_issuer_anywhere_is_refused_naming_it_and_the_flag() {
        let e = add_error(&["--distro", "k3s", "--credential", "federated"]);
        assert!(
            e.contains(
                "spokes[1].credential.mode is federated but credential.federated.issuer is not set"
            ) && e.ends_with(
                "; or pass --issuer URL (the hub's --service-account-issuer) for this spoke"
            ),
            "{e}"
        );
        // With the issuer, the next thing missing is named: the template has no hub.
        let e = add_error(&[
            "--distro",
            "k3s",
            "--credential",
            "federated",
            "--issuer",
            "https://hub.example:6443",
        ]);
        assert!(e.contains("there is no hub: section"), "{e}");
    }
}
