//! A child's stderr, line by line with arrival times, for tests that watch a daemon.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Lines the child writes to stderr (spawned with `Stdio::piped()`), as they arrive.
pub type Lines = Arc<Mutex<Vec<(Instant, String)>>>;

/// Starts collecting `child`'s stderr in a background thread.
pub fn capture_stderr(child: &mut Child) -> Lines {
    let lines: Lines = Arc::new(Mutex::new(Vec::new()));
    let stderr = child.stderr.take().expect("stderr piped");
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push((Instant::now(), line));
        }
    });
    lines
}

/// A daemon's tick intervals [start, end] from its captured log; one still open ends at
/// `until`.
pub fn tick_spans(lines: &Lines, until: Instant) -> Vec<(Instant, Instant)> {
    let mut out = Vec::new();
    let mut open = None;
    for (t, l) in lines.lock().unwrap().iter() {
        if l.contains("tick started") {
            open = Some(*t);
        } else if (l.contains("tick finished")
            || l.contains("tick cancelled")
            || l.contains("tick failed"))
            && let Some(s) = open.take()
        {
            out.push((s, *t));
        }
    }
    out.extend(open.map(|s| (s, until)));
    out
}

/// Fails when two daemons' ticks overlap: `spans` are (start, end, daemon), in any order;
/// times are shown from `t0`. Asks for at least `min` ticks so an empty run cannot pass.
pub fn assert_ticks_never_overlap(
    mut spans: Vec<(Instant, Instant, String)>,
    t0: Instant,
    min: usize,
) {
    spans.sort_by_key(|(s, _, _)| *s);
    assert!(spans.len() >= min, "{spans:?}");
    for w in spans.windows(2) {
        assert!(
            w[0].1 <= w[1].0 || w[0].2 == w[1].2,
            "{} ticked {:?}..{:?} while {} started at {:?}",
            w[0].2,
            w[0].0 - t0,
            w[0].1 - t0,
            w[1].2,
            w[1].0 - t0
        );
    }
}

/// Everything captured so far, one line each.
pub fn text(lines: &Lines) -> String {
    let lines = lines.lock().unwrap();
    let all: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    all.join("\n")
}

/// How many captured lines contain `needle`.
pub fn count(lines: &Lines, needle: &str) -> usize {
    times(lines, needle).len()
}

/// When each line containing `needle` arrived.
pub fn times(lines: &Lines, needle: &str) -> Vec<Instant> {
    lines
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, l)| l.contains(needle))
        .map(|(t, _)| *t)
        .collect()
}
