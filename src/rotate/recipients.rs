//! The age recipients of a spoke's sops output: `.sops.yaml`'s creation rule for its
//! path when `sealing.sops_config` is set, else `sealing.age_recipients`. Recipients read
//! from the fleet repo (a recipients file in it, its `.sops.yaml`) are trusted only when
//! `sealing.age_sha256` pins them or they are the configured ones, as a sealing
//! certificate is: a push to the fleet repo must not redirect every credential to a key
//! its author holds.

use std::path::{Path, PathBuf};

use crate::config::{AgeRecipientsFrom, Config, SpokeConfig};
use crate::fingerprint::{self, Fingerprint};
use crate::fsutil::inside;
use crate::seal::sops::{self, AgeRecipients, SopsError};

/// Why a sops spoke's recipients cannot be used this tick.
#[derive(Debug, thiserror::Error)]
pub enum RecipientsError {
    #[error("cannot read {what} {}: {error} (fix the path in {config})", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        config: PathBuf,
        error: std::io::Error,
    },
    #[error("{what} {}: {error}", path.display())]
    Parse {
        what: &'static str,
        path: PathBuf,
        error: SopsError,
    },
    #[error(
        "the age recipients of {what} are {sha256}, not trusted: {why}. Nothing is encrypted for them: a write to the fleet repo must not redirect every spoke's credential to a key its author may hold. Fix: if the change is wanted, set sealing.age_sha256: {sha256} in {}; otherwise revert it",
        config.display()
    )]
    Untrusted {
        what: String,
        sha256: Fingerprint<fingerprint::AgeRecipients>,
        why: String,
        config: PathBuf,
    },
}

/// Where the configured recipients came from.
enum Origin {
    Config,
    File { path: PathBuf, in_repo: bool },
}

/// The spoke's age recipients: `.sops.yaml`'s rule for its output when
/// `sealing.sops_config` is set, else `sealing.age_recipients`; either trusted as the
/// module says.
pub(crate) fn recipients(
    config: &Config,
    spoke: &SpokeConfig,
) -> Result<AgeRecipients, RecipientsError> {
    let pins = &config.sops.age_sha256;
    let pinned = |r: &AgeRecipients| pins.contains(&r.fingerprint());
    let configured = configured(config)?;
    if let Some((r, origin)) = &configured {
        let in_repo = matches!(origin, Origin::File { in_repo: true, .. });
        if (in_repo || !pins.is_empty()) && !pinned(r) {
            let (what, why) = match origin {
                Origin::Config => (
                    "sealing.age_recipients".to_string(),
                    format!(
                        "sealing.age_sha256 in {} allows others",
                        config.file.display()
                    ),
                ),
                Origin::File { path, .. } if in_repo => (
                    format!("the recipients file {}", path.display()),
                    "it is in the fleet repo and sealing.age_sha256 does not pin it".into(),
                ),
                Origin::File { path, .. } => (
                    format!("the recipients file {}", path.display()),
                    format!(
                        "sealing.age_sha256 in {} allows others",
                        config.file.display()
                    ),
                ),
            };
            return Err(RecipientsError::Untrusted {
                what,
                sha256: r.fingerprint(),
                why,
                config: config.file.clone(),
            });
        }
    }
    let Some(path) = &config.sops.sops_config else {
        // `spokekeeper check` (config/check.rs) refuses sops without either.
        return configured
            .map(|(r, _)| r)
            .ok_or_else(|| RecipientsError::Parse {
                what: "sealing.age_recipients",
                path: config.file.clone(),
                error: SopsError::NoRecipients,
            });
    };
    let text = std::fs::read(path).map_err(|error| RecipientsError::Read {
        what: "sealing.sops_config",
        path: path.clone(),
        config: config.file.clone(),
        error,
    })?;
    let rel = relative_output(config, spoke, path);
    let r = sops::recipients_for(&text, &rel).map_err(|error| RecipientsError::Parse {
        what: "sealing.sops_config",
        path: path.clone(),
        error,
    })?;
    let same = configured
        .as_ref()
        .is_some_and(|(c, _)| c.fingerprint() == r.fingerprint());
    if !(same || pinned(&r)) {
        return Err(RecipientsError::Untrusted {
            what: format!("the creation rule of {} for {rel}", path.display()),
            sha256: r.fingerprint(),
            why: "neither sealing.age_recipients nor sealing.age_sha256 names them".into(),
            config: config.file.clone(),
        });
    }
    Ok(r)
}

/// `sealing.age_recipients`, read and parsed.
fn configured(config: &Config) -> Result<Option<(AgeRecipients, Origin)>, RecipientsError> {
    let parse = |path: &Path, error| RecipientsError::Parse {
        what: "sealing.age_recipients",
        path: path.to_path_buf(),
        error,
    };
    Ok(match &config.sops.age_recipients {
        None => None,
        Some(AgeRecipientsFrom::Inline(list)) => Some((
            AgeRecipients::parse(list).map_err(|e| parse(&config.file, e))?,
            Origin::Config,
        )),
        Some(AgeRecipientsFrom::File(path)) => {
            let text = std::fs::read_to_string(path).map_err(|error| RecipientsError::Read {
                what: "sealing.age_recipients file",
                path: path.clone(),
                config: config.file.clone(),
                error,
            })?;
            let r = AgeRecipients::parse_file(&text).map_err(|e| parse(path, e))?;
            let in_repo = inside(path, &config.repo.path).is_some();
            Some((
                r,
                Origin::File {
                    path: path.clone(),
                    in_repo,
                },
            ))
        }
    })
}

/// The output's path as sops sees it: relative to the `.sops.yaml`'s directory.
fn relative_output(config: &Config, spoke: &SpokeConfig, sops_config: &Path) -> String {
    let output = config.repo.path.join(&spoke.output);
    let dir = sops_config.parent().unwrap_or(Path::new(""));
    output
        .strip_prefix(dir)
        .unwrap_or(&spoke.output)
        .to_string_lossy()
        .into_owned()
}
