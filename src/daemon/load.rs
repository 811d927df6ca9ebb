//! Everything a tick needs, built from the configuration file; rebuilt on SIGHUP.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use super::schedule::Schedule;
use crate::config::Config;
use crate::repo::Repo;
use crate::rotate::Context;
use crate::seal::SealingKey;

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
    let cert = &config.sealing_cert;
    let pem = std::fs::read(cert).map_err(|e| {
        format!(
            "{}: cannot read sealing.cert {}: {e}",
            path.display(),
            cert.display()
        )
    })?;
    let sealing =
        SealingKey::from_pem(&pem, &cert.display().to_string(), OffsetDateTime::now_utc())
            .map_err(|e| format!("{}: sealing.cert: {e}", path.display()))?;
    let repo = Repo::open(&config.repo)
        .await
        .map_err(|e| format!("{}: repo.path: {e}", path.display()))?;
    let context = Context::new(config, sealing, repo)?;
    Ok(Loaded {
        context: Arc::new(context),
        schedule,
    })
}
