//! The command line: parse, dispatch, map results to exit codes.
//!
//! Each command lives in its own file and returns an [`ExitCode`]; `table.rs` draws their
//! tables and `progress.rs` the progress line on a terminal. A command's error is printed
//! to stderr by `fail` or `fail_with` here: `spokekeeper CMD: error: MESSAGE`, then
//! each cause the message does not already say. `check` and `status` report in their
//! own format (and exit code) instead, so a script reading `-o json` gets the failure too.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod add;
mod check;
mod completion;
#[cfg(feature = "demo")]
mod demo;
mod init;
mod inspect;
mod progress;
mod revoke;
pub(crate) mod rotate;
mod run;
mod seal;
mod status;
mod table;
#[cfg(test)]
mod tests;

/// `--version`: the package version, the git commit it was built from and the build date.
pub(crate) const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SPOKEKEEPER_GIT_COMMIT"),
    ", built ",
    env!("SPOKEKEEPER_BUILD_DATE"),
    ")"
);

/// Output format. Commands that print for people default to a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Yaml,
    Json,
}

#[derive(Debug, Parser)]
#[command(
    name = "spokekeeper",
    version = VERSION,
    about = "Keeps a GitOps hub's spoke kubeconfigs valid: probe, rotate, seal, commit, alert"
)]
pub struct Cli {
    /// The configuration file.
    #[arg(
        long,
        global = true,
        env = "SPOKEKEEPER_CONFIG",
        default_value = "spokekeeper.yaml"
    )]
    pub config: PathBuf,

    /// Output format (each command has its own default).
    #[arg(short = 'o', long = "output", global = true, value_enum)]
    pub output: Option<Format>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The daemon: tick on the schedule, serve /metrics, /healthz, /readyz.
    #[command(after_help = "Examples:\n  \
        spokekeeper --config /etc/spokekeeper/spokekeeper.yaml run\n  \
        spokekeeper run --now --listen 127.0.0.1:9464 --jitter 30s\n  \
        spokekeeper run --leader-elect --lease-namespace spokekeeper")]
    Run(run::RunArgs),
    /// One tick now, for some or all spokes.
    #[command(after_help = "Examples:\n  \
        spokekeeper rotate --all\n  \
        spokekeeper rotate dev test --dry-run\n  \
        spokekeeper rotate dev --force -o json\n\n\
        On a terminal, progress (spokes done of total, the current stage) goes to stderr.")]
    Rotate(rotate::RotateArgs),
    /// Revoke a spoke's minted hub credential now and mint, commit and push the next.
    #[command(after_help = "Examples:\n  \
        spokekeeper revoke edge-1\n  \
        spokekeeper revoke edge-1 -o json\n  \
        spokekeeper revoke edge-2 --drop-issuer\n\n\
        Deletes the committed generation's ClusterRoleBinding on the spoke at once (that user is refused\n\
        from then on), then mints the next generation through the normal pipeline (reason: revoked).\n\
        A federated spoke moves to a new audience instead; with --drop-issuer it trusts no hub token\n\
        until `spokekeeper rotate SPOKE --force` (docs/federated.md).")]
    Revoke(revoke::RevokeArgs),
    /// Expiry and health report (exit 0 ok, 1 warning, 2 critical or expired, 3 unknown).
    #[command(after_help = "Examples:\n  \
        spokekeeper check\n  \
        spokekeeper check dev -o json | jq '.findings[] | select(.severity != \"ok\")'")]
    Check(check::CheckArgs),
    /// Seal a Secret (YAML or JSON) from stdin, like kubeseal.
    #[command(after_help = "Examples:\n  \
        kubectl create secret generic dev-kubeconfig -n flux-system --from-file=value=dev.yaml \\\n    \
        --dry-run=client -o yaml | spokekeeper seal --cert keys/sealed-secrets-infra.pem > dev-sealed.yaml\n  \
        printf %s \"$TOKEN\" | spokekeeper seal --cert cert.pem --raw --namespace ns --name app\n  \
        spokekeeper seal --format sops --age age1... < secret.yaml > secret.sops.yaml")]
    Seal(seal::SealArgs),
    /// Recovery: print the unsealed Secret, given the controller's private key (or an age key, for sops).
    #[command(after_help = "Examples:\n  \
        spokekeeper unseal --recovery-key sealed-secrets-keys.yaml fluxcd/dev-kubeconfig-sealed.yaml\n  \
        spokekeeper unseal --recovery-key key.pem -o json < sealed.yaml\n  \
        spokekeeper unseal --age-key age.agekey clusters/dev-kubeconfig.sops.yaml")]
    Unseal(seal::UnsealArgs),
    /// A kubeconfig's or certificate's fingerprints, validity and problems.
    #[command(after_help = "Examples:\n  \
        spokekeeper inspect ~/.kube/config\n  \
        ssh node sudo cat /etc/rancher/k3s/k3s.yaml | spokekeeper inspect -o json")]
    Inspect(inspect::InspectArgs),
    /// Per spoke: committed state, the hub's SealedSecret and every Flux consumer of it, the probe
    /// (exit 0 ok, 1 warning, 2 hub or configuration unreadable).
    #[command(after_help = "Examples:\n  \
        spokekeeper status\n  \
        spokekeeper --config /etc/spokekeeper/spokekeeper.yaml status -o yaml")]
    Status,
    /// Onboard a new spoke: add it to the configuration, print its node recipe, rotate it
    /// and commit beside its credential the Flux objects that deploy to it.
    #[command(after_help = "Examples:\n  \
        spokekeeper add edge-1 --address 192.168.1.30 --distro k3s\n  \
        spokekeeper add edge-2 --address 10.0.0.7 --distro rke2 --ssh-host bastion.example.org --source flux-system\n  \
        spokekeeper add edge-3 --address 10.0.0.8 --distro k3s --credential federated --issuer https://hub.example.org:6443\n\n\
        In the same commit as the sealed credential (a federated spoke's ConfigMap): ROOT/NAME.yaml with a\n\
        Kustomization that applies spokes/NAME/apps on the spoke and one that applies spokes/NAME/helmreleases\n\
        on the hub with spec.kubeConfig (secretRef; configMapRef when federated) patched into each HelmRelease,\n\
        listed in ROOT/kustomization.yaml when it exists.")]
    Add(add::AddArgs),
    /// Scaffold a spokekeeper.yaml and print the least-privilege node recipe (the federated one
    /// where the flags or the configuration's spokes ask for it).
    #[command(after_help = "Examples:\n  \
        spokekeeper init\n  \
        spokekeeper --config fleet/spokekeeper.yaml init --force\n  \
        spokekeeper init --credential federated --distro rke2")]
    Init(init::InitArgs),
    /// The whole loop against an embedded simulated fleet.
    #[command(after_help = "Example:\n  \
        spokekeeper demo")]
    #[cfg(feature = "demo")]
    Demo,
    /// Print a shell completion script (bash, zsh or fish).
    #[command(after_help = "Examples:\n  \
        source <(spokekeeper completion bash)\n  \
        spokekeeper completion zsh > \"${fpath[1]}/_spokekeeper\"\n  \
        spokekeeper completion fish > ~/.config/fish/completions/spokekeeper.fish")]
    Completion(completion::CompletionArgs),
    /// Print the manual page (roff) generated from these definitions.
    #[command(after_help = "Examples:\n  \
        spokekeeper man | man -l -\n  \
        spokekeeper man > /usr/local/share/man/man1/spokekeeper.1")]
    Man,
}

/// Parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // The daemon says what each tick did; one-shot commands print their own report.
    init_logging(if matches!(cli.command, Command::Run(_)) {
        "info"
    } else {
        "warn"
    });
    match cli.command {
        Command::Seal(args) => seal::seal(&args, cli.output),
        Command::Unseal(args) => seal::unseal(&args, cli.output),
        Command::Inspect(args) => inspect::run(&args, cli.output),
        Command::Rotate(args) => rotate::run(&args, &cli.config, cli.output),
        Command::Revoke(args) => revoke::run(&args, &cli.config, cli.output),
        Command::Init(args) => init::run(&args, &cli.config),
        Command::Add(args) => add::run(&args, &cli.config, cli.output),
        #[cfg(feature = "demo")]
        Command::Demo => match demo::run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail("demo", Chain(&e)),
        },
        Command::Check(args) => check::run(&args, &cli.config, cli.output),
        Command::Run(args) => run::run(&args, &cli.config),
        Command::Status => status::run(&cli.config, cli.output),
        Command::Completion(args) => completion::completion(&args),
        Command::Man => completion::man(),
    }
}

/// How every error is printed: its message, then one line per cause it wraps. An error
/// either wraps its cause or says it, never both (docs/ARCHITECTURE.md; the suite's
/// docs::errors test holds it), so nothing is printed twice.
pub(crate) struct Chain<'a>(pub &'a dyn std::error::Error);

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, "\n  caused by: {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// Logs to stderr; `SPOKEKEEPER_LOG` (e.g. `debug`, `spokekeeper=trace`) overrides the
/// level. Colour only on a terminal: journald and pod logs get plain text.
fn init_logging(default: &str) {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SPOKEKEEPER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .init();
}

/// Writes to stdout; a closed pipe (`| head`) is not an error worth a panic.
pub fn out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

/// Prints a command's error to stderr and returns the failure exit code: a message that
/// says its cause, or an error as a [`Chain`].
pub(crate) fn fail(command: &str, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("spokekeeper {command}: error: {message}");
    ExitCode::FAILURE
}
