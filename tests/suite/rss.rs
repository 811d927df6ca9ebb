//! The daemon's memory figure in docs/operations.md ("The daemon"), reproduced and guarded:
//! `cargo test --test suite -- --nocapture rss::` starts `spokekeeper run` over 100 spokes that
//! cannot be reached and prints its VmRSS before the first tick (idle) and VmHWM after
//! one tick (the peak).
//! It fails when either exceeds twice the documented figure: a doubling is caught, noise is
//! not. Memory, not timing: the bound does not depend on how busy the machine is.

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::daemon::{Daemon, rss_kib};
use support::fleet::{extract_failures, unreachable_spokes};
use support::git::fleet_remote;

/// VmRSS of a daemon that has started (serving /metrics, the config loaded) and is
/// waiting for its first tick, an hour away: idle, however slow the machine is.
fn idle_rss_kib(config: &Path) -> u64 {
    let d = Daemon::start_args(
        config,
        &["run", "--listen", "127.0.0.1:0", "--interval", "1h"],
    );
    d.wait_for("listen=", Duration::from_secs(30));
    // Let startup's transient allocations settle.
    std::thread::sleep(Duration::from_secs(1));
    rss_kib(d.pid()).0
}

/// The "N MiB <words>" figure of docs/operations.md, in KiB.
fn documented_kib(words_after: &str) -> u64 {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"))
            .unwrap();
    let text = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let at = text
        .find(&format!(" MiB {words_after}"))
        .unwrap_or_else(|| panic!("docs/operations.md has no \"N MiB {words_after}\""));
    let number = text[..at].rsplit(' ').next().unwrap();
    let mib: f64 = number
        .parse()
        .unwrap_or_else(|e| panic!("docs/operations.md figure {number:?}: {e}"));
    (mib * 1024.0) as u64
}

#[test]
fn daemon_memory_over_100_unreachable_spokes_stays_within_twice_the_documented_figure() {
    let documented_idle = documented_kib("RSS idle");
    let documented_peak = documented_kib("at the peak of a tick");
    let dir = support::scratch_dir();
    let (_, mut clones) = fleet_remote(dir.path(), 1);
    let clone = clones.remove(0);
    // 127.254.0.0/16 is outside the lab's 127.0.0.0/16.
    let config = dir.path().join("spokekeeper.yaml");
    support::fleet::config(&clone, &[])
        .spokes(unreachable_spokes(dir.path(), 100, "127.254"))
        .write(&config)
        .unwrap();

    let idle = idle_rss_kib(&config);
    // `--now`: one tick at once, the next an hour later.
    let d = Daemon::start(&config, &["--interval", "1h"]);
    d.wait_for("tick finished", Duration::from_secs(120));
    let (_, peak) = rss_kib(d.pid());
    let m = d.metrics();
    assert_eq!(extract_failures(&m), 100, "every spoke was worked on: {m}");
    let mib = |kib: u64| kib as f64 / 1024.0;
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!(
        "spokekeeper run, 100 unreachable spokes ({build} build): {:.1} MiB RSS idle, {:.1} MiB at the peak of a tick; documented: {:.1} and {:.1} MiB",
        mib(idle),
        mib(peak),
        mib(documented_idle),
        mib(documented_peak)
    );
    assert!(
        idle <= 2 * documented_idle,
        "idle RSS {idle} KiB is over twice the documented {documented_idle} KiB"
    );
    assert!(
        peak <= 2 * documented_peak,
        "peak RSS {peak} KiB is over twice the documented {documented_peak} KiB"
    );
}
