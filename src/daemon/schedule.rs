//! When ticks are due: the configured cron expression (evaluated in UTC), or a fixed
//! interval for tests.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};

/// A schedule that cannot be used: names the expression and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error(
        "schedule {expr:?} is not a cron expression ({error}): use 5 fields like \"*/15 * * * *\", or @hourly, @daily"
    )]
    NotCron {
        expr: String,
        error: croner::errors::CronError,
    },
    #[error("schedule {expr:?} never fires: check day and month")]
    NeverFires { expr: String },
    #[error("the tick interval must be longer than 0s")]
    ZeroInterval,
}

#[derive(Clone, Debug)]
pub enum Schedule {
    /// `schedule` from spokekeeper.yaml.
    Cron {
        expr: String,
        cron: Box<croner::Cron>,
    },
    /// The hidden `--interval` of `run`: a fixed period, for tests.
    Every(Duration),
}

impl Schedule {
    /// Parses a 5-field cron expression or a nickname like @hourly.
    pub(crate) fn cron(expr: &str) -> Result<Schedule, ScheduleError> {
        let cron = croner::Cron::from_str(expr).map_err(|source| ScheduleError::NotCron {
            expr: expr.to_string(),
            error: source,
        })?;
        // Refuse expressions that never fire (e.g. February 30th) now, not at the first tick.
        let schedule = Schedule::Cron {
            expr: expr.to_string(),
            cron: Box::new(cron),
        };
        schedule
            .next_after(SystemTime::now())
            .map(|_| schedule.clone())
            .ok_or_else(|| ScheduleError::NeverFires {
                expr: expr.to_string(),
            })
    }

    /// A fixed period; zero is refused.
    pub(crate) fn every(period: Duration) -> Result<Schedule, ScheduleError> {
        if period.is_zero() {
            return Err(ScheduleError::ZeroInterval);
        }
        Ok(Schedule::Every(period))
    }

    /// The first slot strictly after `t`; None when there is none.
    pub(crate) fn next_after(&self, t: SystemTime) -> Option<SystemTime> {
        match self {
            Schedule::Every(period) => t.checked_add(*period),
            Schedule::Cron { cron, .. } => {
                let since = t.duration_since(UNIX_EPOCH).ok()?;
                let at = DateTime::<Utc>::from_timestamp(
                    i64::try_from(since.as_secs()).ok()?,
                    since.subsec_nanos(),
                )?;
                let next = cron.find_next_occurrence(&at, false).ok()?;
                UNIX_EPOCH.checked_add(Duration::from_secs(u64::try_from(next.timestamp()).ok()?))
            }
        }
    }

    /// The `n`th slot after `t` (n >= 1).
    pub(crate) fn nth_after(&self, t: SystemTime, n: usize) -> Option<SystemTime> {
        (0..n).try_fold(t, |at, _| self.next_after(at))
    }

    /// The time between the next two slots after `t`.
    pub(crate) fn period_at(&self, t: SystemTime) -> Option<Duration> {
        let first = self.next_after(t)?;
        self.next_after(first)?.duration_since(first).ok()
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Cron { expr, .. } => write!(f, "{expr:?} (UTC)"),
            Schedule::Every(d) => write!(f, "every {}", crate::config::Span(*d)),
        }
    }
}

/// A uniformly random delay in [0, max), for `--jitter`.
pub(crate) fn jitter(max: Duration) -> Duration {
    let ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return Duration::ZERO;
    }
    // A failing system RNG only loses the spread, never the tick.
    Duration::from_millis(getrandom::u64().unwrap_or(0) % ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn cron_slots_are_strictly_after_and_on_the_minute() {
        // 2025-01-01T00:07:30Z
        let t = at(1_735_689_600 + 7 * 60 + 30);
        let s = Schedule::cron("*/15 * * * *").unwrap();
        assert_eq!(s.next_after(t), Some(at(1_735_689_600 + 15 * 60)));
        assert_eq!(
            s.next_after(at(1_735_689_600 + 15 * 60)),
            Some(at(1_735_689_600 + 30 * 60))
        );
        assert_eq!(s.nth_after(t, 2), Some(at(1_735_689_600 + 30 * 60)));
        assert_eq!(s.period_at(t), Some(Duration::from_secs(15 * 60)));
    }

    #[test]
    fn nicknames_and_bad_expressions() {
        let t = at(1_735_689_600 + 10);
        let hourly = Schedule::cron("@hourly").unwrap();
        assert_eq!(hourly.next_after(t), Some(at(1_735_689_600 + 3600)));
        assert_eq!(
            Schedule::cron("@daily").unwrap().period_at(t),
            Some(Duration::from_secs(86_400))
        );
        let e = Schedule::cron("*/15 * *").unwrap_err().to_string();
        assert!(e.contains("\"*/15 * *\"") && e.contains("@hourly"), "{e}");
        let e = Schedule::cron("0 0 30 2 *").unwrap_err().to_string();
        assert!(e.contains("never fires"), "{e}");
    }

    #[test]
    fn intervals_and_jitter() {
        let s = Schedule::every(Duration::from_secs(2)).unwrap();
        assert_eq!(s.nth_after(at(100), 3), Some(at(106)));
        assert!(Schedule::every(Duration::ZERO).is_err());
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
        let max = Duration::from_millis(50);
        let samples: Vec<Duration> = (0..200).map(|_| jitter(max)).collect();
        assert!(samples.iter().all(|d| *d < max));
        assert!(
            samples.iter().any(|d| *d != samples[0]),
            "spread, not constant"
        );
    }
}
