//! `spokekeeper seal` and `spokekeeper unseal`.

use std::path::PathBuf;
use std::process::ExitCode;

use super::Format;

#[derive(Debug, clap::Args)]
pub struct SealArgs {
    /// The sealing certificate (what the controller serves at /v1/cert.pem) or public key, PEM.
    #[arg(long)]
    pub cert: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct UnsealArgs {
    /// Private keys, comma-separated or repeated.
    #[arg(long = "recovery-key", value_delimiter = ',', required = true)]
    pub recovery_key: Vec<PathBuf>,
    /// The SealedSecret; `-` or nothing reads stdin.
    pub file: Option<PathBuf>,
}

pub fn seal(_args: &SealArgs, _format: Option<Format>) -> ExitCode {
    ExitCode::from(2)
}

pub fn unseal(_args: &UnsealArgs, _format: Option<Format>) -> ExitCode {
    ExitCode::from(2)
}
