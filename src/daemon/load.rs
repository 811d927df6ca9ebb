//! Everything a tick needs, built from the configuration file; rebuilt on SIGHUP.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::schedule::Schedule;
use crate::config::Config;
use crate::repo::Repo;
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

/// Loads and checks the file, the sealing certificate and the fleet clone. `interval`
/// (tests) replaces the configured schedule.
pub async fn load(path: &Path, interval: Option<Duration>) -> Result<Loaded, String> {
    let config = Config::load(path).map_err(|e| e.to_string())?;
    let schedule = match interval {
        Some(every) => Schedule::every(every)?,
        None => Schedule::cron(&config.schedule).map_err(|e| format!("{}: {e}", path.display()))?,
    };
    let sealing = crate::hub::cert::initial(&config)
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let repo = Repo::open(&config.repo)
        .await
        .map_err(|e| format!("{}: repo.path: {e}", path.display()))?;
    let context = Context::new(config, sealing, repo)?;
    Ok(Loaded {
        context: Arc::new(context),
        schedule,
    })
}
