//! Everything a tick needs, built from the configuration file; rebuilt on SIGHUP.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::schedule::{Schedule, ScheduleError};
use crate::config::{Config, ConfigError};
use crate::hub::cert::StartKeyError;
use crate::repo::{Repo, RepoError};
use crate::rotate::Context;

pub struct Loaded {
    pub context: Arc<Context>,
    pub schedule: Schedule,
}

impl Loaded {
    pub fn config(&self) -> &Config {
        &self.context.config
    }
}

/// Why the daemon cannot (re)load: each names the configuration file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Interval(ScheduleError),
    #[error("{}: {error}", path.display())]
    Schedule { path: PathBuf, error: ScheduleError },
    #[error("{}: {error}", path.display())]
    Sealing { path: PathBuf, error: StartKeyError },
    #[error("{}: repo.path: {error}", path.display())]
    Repo { path: PathBuf, error: RepoError },
    /// The tick's context refused the configuration (its message names the setting).
    #[error(transparent)]
    Context(crate::rotate::DemoKey),
}

/// Loads and checks the file, the sealing certificate and the fleet clone. `interval`
/// (tests) replaces the configured schedule.
pub async fn load(path: &Path, interval: Option<Duration>) -> Result<Loaded, LoadError> {
    let config = Config::load(path)?;
    let schedule = match interval {
        Some(every) => Schedule::every(every).map_err(LoadError::Interval)?,
        None => Schedule::cron(&config.schedule).map_err(|source| LoadError::Schedule {
            path: path.to_path_buf(),
            error: source,
        })?,
    };
    let sealing =
        crate::hub::cert::initial(&config)
            .await
            .map_err(|source| LoadError::Sealing {
                path: path.to_path_buf(),
                error: source,
            })?;
    let repo = Repo::open(&config.repo)
        .await
        .map_err(|source| LoadError::Repo {
            path: path.to_path_buf(),
            error: source,
        })?;
    let context = Context::new(config, sealing, repo).map_err(LoadError::Context)?;
    Ok(Loaded {
        context: Arc::new(context),
        schedule,
    })
}
