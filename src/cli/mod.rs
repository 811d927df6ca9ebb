//! The command line: parse, dispatch, map results to exit codes.
//!
//! Each command lives in its own file and returns an [`ExitCode`]; errors are printed
//! here, once, to stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod check;
mod init;
mod inspect;
pub(crate) mod rotate;
mod run;
mod seal;
mod status;

/// `rotate`'s table of a tick report, as printed.
pub use rotate::table as rotate_table;

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
    version,
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
    Run(run::RunArgs),
    /// One tick now, for some or all spokes.
    Rotate(rotate::RotateArgs),
    /// Expiry and health report (exit 0 ok, 1 warning, 2 critical or expired, 3 unknown).
    Check(check::CheckArgs),
    /// Seal a Secret (YAML or JSON) from stdin, like kubeseal.
    Seal(seal::SealArgs),
    /// Recovery: print the unsealed Secret, given the controller's private key.
    Unseal(seal::UnsealArgs),
    /// A kubeconfig's or certificate's fingerprints, validity and problems.
    Inspect(inspect::InspectArgs),
    /// Per spoke: committed state, the hub's SealedSecret and Kustomization, the probe
    /// (exit 0 ok, 1 warning, 2 hub or configuration unreadable).
    Status,
    /// Scaffold a spokekeeper.yaml and print the least-privilege node recipe.
    Init(init::InitArgs),
    /// The whole loop against an embedded simulated fleet.
    Demo,
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
        Command::Init(args) => init::run(&args, &cli.config),
        Command::Demo => match crate::demo::run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail("demo", &e),
        },
        Command::Check(args) => check::run(&args, &cli.config, cli.output),
        Command::Run(args) => run::run(&args, &cli.config),
        Command::Status => status::run(&cli.config, cli.output),
    }
}

/// Prints an error chain to stderr as one line per cause.
pub(crate) fn report(context: &str, err: &dyn std::error::Error) {
    eprintln!("error: {context}: {err}");
    let mut source = err.source();
    while let Some(cause) = source {
        eprintln!("  caused by: {cause}");
        source = cause.source();
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

/// Prints a command's error to stderr and returns the failure exit code.
pub(crate) fn fail(command: &str, message: &str) -> ExitCode {
    eprintln!("spokekeeper {command}: error: {message}");
    ExitCode::FAILURE
}
