//! `spokekeeper completion bash|zsh|fish` and `spokekeeper man`: generated from the clap
//! definitions, so they never drift from the commands.

use std::process::ExitCode;

use clap::CommandFactory;

use super::{Cli, fail};

#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

pub(super) fn completion(args: &CompletionArgs) -> ExitCode {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "spokekeeper", &mut script);
    super::out(&String::from_utf8_lossy(&script));
    ExitCode::SUCCESS
}

pub(super) fn man() -> ExitCode {
    let mut page = Vec::new();
    if let Err(e) = clap_mangen::Man::new(Cli::command()).render(&mut page) {
        return fail("man", format!("cannot render the manual page: {e}"));
    }
    super::out(&String::from_utf8_lossy(&page));
    ExitCode::SUCCESS
}
