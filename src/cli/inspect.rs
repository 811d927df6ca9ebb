//! `spokekeeper inspect`: a kubeconfig's or certificate's fingerprints and validity.

use std::path::PathBuf;
use std::process::ExitCode;

use super::Format;

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// A kubeconfig or PEM certificate file; `-` or nothing reads stdin.
    pub file: Option<PathBuf>,
}

pub fn run(_args: &InspectArgs, _format: Option<Format>) -> ExitCode {
    eprintln!("spokekeeper inspect: not built yet in this version.");
    ExitCode::from(2)
}
