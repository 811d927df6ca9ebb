//! What the fleet and scale benchmarks measure of a process: /proc fields, reaped
//! children's CPU, and the descriptor limit they raise.

use std::time::Duration;

/// A `/proc/PID/status` field in KiB (`VmHWM:`, `VmRSS:`).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time of every child this process has reaped (and theirs): cutime + cstime.
pub fn children_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let rest = stat.rsplit_once(')').expect("stat").1;
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|w| w.parse().unwrap_or(0))
        .collect();
    // Fields 16 and 17 (cutime, cstime), counted from the state field (3); in USER_HZ,
    // which the /proc ABI fixes at 100.
    Duration::from_millis((f[13] + f[14]) * 10)
}

/// Raises the soft descriptor limit to the hard one (raising the hard one needs
/// CAP_SYS_RESOURCE); returns (soft before, hard), for the bench to say so.
pub fn raise_nofile() -> (Option<u64>, Option<u64>) {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    )
    .expect("raise RLIMIT_NOFILE to its hard limit");
    (limit.current, limit.maximum)
}
