//! The top-level keys the daemon runs by: `schedule`, `metrics`, `renew_before` and
//! `verify_every`.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Loading, Span};

pub(crate) const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    listen: String,
}

/// The daemon's keys, defaults filled in.
pub(super) struct Daemon {
    pub schedule: String,
    pub(crate) metrics_listen: SocketAddr,
    pub renew_before: Duration,
    pub verify_every: Duration,
}

/// Checks the schedule and the metrics address (the two spans are checked with the
/// loaded configuration, by `check::config`).
pub(super) fn load(
    schedule: Option<String>,
    metrics: Option<RawMetrics>,
    renew_before: Option<Span>,
    verify_every: Option<Span>,
    l: &Loading,
) -> Result<Daemon, ConfigError> {
    let schedule = schedule.unwrap_or_else(|| "*/15 * * * *".into());
    croner::Cron::from_str(&schedule).map_err(|e| {
        l.bad("schedule", format!("schedule {schedule:?} is not a cron expression ({e}): use 5 fields like \"*/15 * * * *\", or @hourly, @daily"))
    })?;
    let listen = metrics.map_or(DEFAULT_METRICS_LISTEN.to_string(), |m| m.listen);
    let metrics_listen = listen.parse().map_err(|_| {
        l.bad(
            "metrics.listen",
            format!("metrics.listen {listen:?} is not HOST:PORT: e.g. 127.0.0.1:9464"),
        )
    })?;
    Ok(Daemon {
        schedule,
        metrics_listen,
        renew_before: renew_before.map_or(Duration::from_secs(30 * 86_400), |s| s.0),
        verify_every: verify_every.map_or(Duration::from_secs(86_400), |s| s.0),
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{MIN, refused};

    #[test]
    fn daemon_mistakes_name_the_key_and_the_fix() {
        refused(
            &format!("{MIN}renew_before: 30\n"),
            &["renew_before", "30d"],
        );
        refused(&format!("{MIN}renew_before: 3w\n"), &["s, m, h or d"]);
        refused(
            &format!("{MIN}schedule: \"every day\"\n"),
            &["schedule", "@hourly"],
        );
        refused(
            &format!("{MIN}metrics: {{listen: nowhere}}\n"),
            &["metrics.listen", "HOST:PORT"],
        );
    }
}
