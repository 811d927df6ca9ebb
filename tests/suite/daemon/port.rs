//! The daemon's HTTP port under abuse (issue 28, defect 5), through the binary: unfinished
//! heads, oversized heads, more connections than the cap, a slow loris and a client that
//! never reads are all cut, and the daemon's memory does not follow them. The limits are
//! read from the startup log line, so the tests follow the code's constants; no assertion
//! is timed tighter than those limits plus MARGIN.

use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::daemon::{Daemon, rss_kib};
use support::fleet::unreachable_spokes;
use support::git::fleet_remote;

/// Slack on every limit: a loaded 2-core machine is slow to schedule, never this slow.
const MARGIN: Duration = Duration::from_secs(5);

/// The port's limits, as the daemon logs them at startup.
struct Limits {
    header_timeout: Duration,
    lifetime: Duration,
    max_connections: usize,
    max_head_bytes: usize,
}

/// An idle daemon (the first tick an hour away: nothing else allocates) and its
/// limits; the scratch directory holds its config.
struct Port {
    d: Daemon,
    addr: SocketAddr,
    limits: Limits,
    _dir: tempfile::TempDir,
}

impl Port {
    fn start() -> Port {
        let dir = support::scratch_dir();
        let (_, mut clones) = fleet_remote(dir.path(), 1);
        let config = dir.path().join("spokekeeper.yaml");
        // One spoke that cannot be reached (the config needs one); it is never ticked.
        support::fleet::config(&clones.remove(0), &[])
            .spokes(unreachable_spokes(dir.path(), 1, "127.254"))
            .write(&config)
            .unwrap();
        let d = Daemon::start_args(
            &config,
            &["run", "--listen", "127.0.0.1:0", "--interval", "1h"],
        );
        let log = d.wait_for("running: serving", Duration::from_secs(30));
        let field = |name: &str| -> u64 {
            log.split(&format!(" {name}="))
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name}= in the startup line:\n{log}"))
        };
        let limits = Limits {
            header_timeout: Duration::from_secs(field("header_timeout_s")),
            lifetime: Duration::from_secs(field("connection_lifetime_s")),
            max_connections: field("max_connections") as usize,
            max_head_bytes: field("max_head_bytes") as usize,
        };
        let addr = d.addr();
        Port {
            d,
            addr,
            limits,
            _dir: dir,
        }
    }

    fn connect(&self) -> TcpStream {
        TcpStream::connect_timeout(&self.addr, Duration::from_secs(5)).unwrap()
    }

    /// A connection that sent the start of a head and nothing more.
    fn unfinished(&self, padding: usize) -> TcpStream {
        let mut s = self.connect();
        let head = format!(
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nX-Pad: {}",
            self.addr,
            "a".repeat(padding)
        );
        s.write_all(head.as_bytes()).unwrap();
        s
    }

    /// GET `path` on a new connection: the status, or None when the port closed it unanswered.
    fn status(&self, path: &str, extra_headers: &str) -> Option<u16> {
        let mut s = self.connect();
        s.set_read_timeout(Some(MARGIN)).unwrap();
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n{extra_headers}\r\n",
            self.addr
        );
        s.write_all(req.as_bytes()).ok()?;
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        status_of(&raw)
    }

    /// /healthz answers 200, once the connections that held the port are gone (their slots
    /// are freed as the daemon sees them close: a few tries).
    fn assert_healthz_answers(&self) {
        let mut last = None;
        for _ in 0..50 {
            last = self.status("/healthz", "");
            if last == Some(200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("/healthz answered {last:?}, not 200:\n{}", self.d.log());
    }

    /// The sockets the daemon holds open (the listener, its connections).
    fn daemon_sockets(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.d.pid()))
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
            })
            .count()
    }
}

fn status_of(raw: &[u8]) -> Option<u16> {
    let text = String::from_utf8_lossy(raw);
    text.strip_prefix("HTTP/1.1 ")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Whether the daemon closed `s` by `deadline`: reads (discarding any answer, e.g. a 431)
/// until end of stream or a reset.
fn closed_by(mut s: &TcpStream, deadline: Instant) -> bool {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

/// Whether `s` is still open with nothing from the daemon (it neither answered nor closed).
fn still_open(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let open = matches!(s.peek(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock);
    s.set_nonblocking(false).unwrap();
    open
}

#[test]
fn unfinished_heads_on_many_connections_are_closed_at_the_header_timeout() {
    let p = Port::start();
    // Under the cap, so only the header timeout can close them.
    let n = p.limits.max_connections - 4;
    let sent = Instant::now();
    let conns: Vec<TcpStream> = (0..n).map(|_| p.unfinished(1024)).collect();
    let deadline = sent + p.limits.header_timeout + MARGIN;
    let open: Vec<usize> = conns
        .iter()
        .enumerate()
        .filter_map(|(i, s)| (!closed_by(s, deadline)).then_some(i))
        .collect();
    assert!(
        open.is_empty(),
        "{} of {n} connections with an unfinished head were still open {:?} after it was sent (header timeout {:?}): {open:?}",
        open.len(),
        sent.elapsed(),
        p.limits.header_timeout
    );
    p.assert_healthz_answers();
}

#[test]
fn an_oversized_head_is_refused_without_growing_the_daemons_memory() {
    let p = Port::start();
    p.assert_healthz_answers();
    let (before, _) = rss_kib(p.d.pid());
    // The shape: 250 connections, each 384 KiB of one header that never ends.
    let padding = 384 * 1024;
    let mut conns = Vec::new();
    for _ in 0..250 {
        let mut s = p.connect();
        // The daemon stops reading (431, or closed past the cap): the rest is refused.
        s.set_write_timeout(Some(MARGIN)).unwrap();
        let head = format!("GET /metrics HTTP/1.1\r\nX-Pad: {}", "a".repeat(padding));
        let _ = s.write_all(head.as_bytes());
        conns.push(s);
    }
    // Measured while every connection is still open on this side.
    let (during, peak) = rss_kib(p.d.pid());
    let grown_mib = during.saturating_sub(before) / 1024;
    println!(
        "daemon RSS {before} KiB before, {during} KiB with 250 oversized heads sent (peak {peak} KiB)"
    );
    // They sent 94 MiB; the daemon may keep its cap's worth of small buffers.
    assert!(
        grown_mib < 16,
        "the daemon's RSS grew {grown_mib} MiB ({before} -> {during} KiB) holding 250 oversized heads"
    );
    let deadline = Instant::now() + p.limits.header_timeout + MARGIN;
    let open = conns.iter().filter(|s| !closed_by(s, deadline)).count();
    assert_eq!(open, 0, "connections with an oversized head left open");
    drop(conns);
    p.assert_healthz_answers();
}

#[test]
fn a_head_larger_than_the_limit_or_with_too_many_headers_gets_431_and_a_scrape_still_works() {
    let p = Port::start();
    // A complete request, every byte sent: the answer is 431, not a hang or a 200.
    let big = format!("X-Pad: {}\r\n", "b".repeat(2 * p.limits.max_head_bytes));
    assert_eq!(p.status("/metrics", &big), Some(431), "{}", p.d.log());
    let many: String = (0..40).map(|i| format!("X-H{i}: v\r\n")).collect();
    assert_eq!(p.status("/metrics", &many), Some(431), "{}", p.d.log());
    // What Prometheus sends is well within both.
    let scrape = "Accept: text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\nAccept-Encoding: gzip\r\n\
                  User-Agent: Prometheus/3.0.0\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n";
    assert_eq!(p.status("/metrics", scrape), Some(200));
}

#[test]
fn connections_past_the_cap_are_closed_at_once_hold_nothing_and_healthz_answers_after() {
    let p = Port::start();
    let cap = p.limits.max_connections;
    let held: Vec<TcpStream> = (0..cap).map(|_| p.unfinished(16)).collect();
    let extra_sent = Instant::now();
    let extra: Vec<TcpStream> = (0..2 * cap).map(|_| p.unfinished(16)).collect();
    let deadline = extra_sent + p.limits.header_timeout + MARGIN;
    let extra_open = extra.iter().filter(|s| !closed_by(s, deadline)).count();
    assert_eq!(
        extra_open,
        0,
        "{extra_open} of {} connections past the cap of {cap} were still open {:?} after they connected",
        2 * cap,
        extra_sent.elapsed()
    );
    // The first `cap` are still held: the cap closed the others, not the header timeout.
    let held_open = held.iter().filter(|s| still_open(s)).count();
    let sockets = p.daemon_sockets();
    assert_eq!(
        held_open,
        cap,
        "the connections within the cap were closed too (after {:?}): the cap was not what closed the rest",
        extra_sent.elapsed()
    );
    // Its cap's connections, the listener, and a few for the runtime and logging.
    assert!(
        sockets <= cap + 8,
        "the daemon holds {sockets} sockets with {} connections open to it (cap {cap})",
        3 * cap
    );
    drop(held);
    p.assert_healthz_answers();
}

#[test]
fn a_slow_loris_trickling_a_header_byte_a_second_is_cut_at_the_header_timeout() {
    let p = Port::start();
    let mut s = p.unfinished(0);
    let start = Instant::now();
    let mut cut = None;
    // At most header timeout + margin seconds, one byte each.
    for _ in 0..(p.limits.header_timeout + MARGIN).as_secs() {
        std::thread::sleep(Duration::from_secs(1));
        if s.write_all(b"x").is_err() || !still_open(&s) {
            cut = Some(start.elapsed());
            break;
        }
    }
    let cut = cut.unwrap_or_else(|| {
        panic!(
            "a header trickled at one byte a second was still being read after {:?} (header timeout {:?})",
            start.elapsed(),
            p.limits.header_timeout
        )
    });
    assert!(
        cut >= p.limits.header_timeout - Duration::from_secs(1),
        "cut after {cut:?}, before the header timeout"
    );
    p.assert_healthz_answers();
}

#[test]
fn a_client_that_pipelines_requests_and_never_reads_is_cut_at_the_connection_lifetime() {
    let p = Port::start();
    let opened = Instant::now();
    let mut s = p.connect();
    // Far more answers than the socket buffers hold: the daemon blocks writing them, busy,
    // never idle, so the header timeout does not apply.
    let req = format!("GET /metrics HTTP/1.1\r\nHost: {}\r\n\r\n", p.addr);
    let burst = req.repeat(100_000);
    s.set_write_timeout(Some(MARGIN)).unwrap();
    let _ = s.write_all(burst.as_bytes());
    let cut_by = opened + p.limits.lifetime + MARGIN;
    std::thread::sleep(cut_by.saturating_duration_since(Instant::now()));
    // Reading now drains what was buffered; a connection still served keeps answering
    // the rest of the burst until the deadline.
    let closed = closed_by(&s, Instant::now() + MARGIN);
    assert!(
        closed,
        "a connection that never read its answers was still served {:?} after it was opened (lifetime {:?})",
        opened.elapsed(),
        p.limits.lifetime
    );
    drop(s);
    p.assert_healthz_answers();
}
