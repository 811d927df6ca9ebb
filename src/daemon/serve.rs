//! The HTTP port's accept loop. axum::serve sets no timeout and no limit, so a client that
//! sends a head slowly, sends a huge one, never reads, or opens many connections could hold
//! memory and the port (issue 28): each connection here is served by hyper with a header
//! timeout and a small head buffer, lives a bounded time, and only so many are served at once.

use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::task::JoinSet;

/// A request's head (request line and headers) must arrive within this long, counted from
/// when the server starts waiting for it (an idle keep-alive connection too).
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection is closed this long after it was accepted, whatever it is doing: a client
/// that sends requests but never reads the answers cannot hold it longer.
pub(crate) const CONNECTION_LIFETIME: Duration = Duration::from_secs(20);
/// Connections served at once. Past it a new connection is closed at once rather than left
/// waiting: one left in the kernel's backlog still holds the bytes it sends (charged to the
/// pod's memory), and a probe that waited would fail on its own timeout anyway.
pub(crate) const MAX_CONNECTIONS: usize = 32;
/// The read buffer, so the largest head accepted (hyper's minimum; a larger head gets 431).
/// A scrape or a probe sends a few hundred bytes.
pub(crate) const MAX_HEAD_BYTES: usize = 8192;
/// Headers per request (a larger count gets 431); Prometheus sends about six.
const MAX_HEADERS: usize = 32;
/// At most one warning per this long while connections are refused.
const REFUSED_WARN_EVERY: Duration = Duration::from_secs(60);

/// Serves `app` on `listener` until `stop` fires (or its sender is dropped), then lets each
/// connection finish its request.
pub(crate) async fn serve(listener: TcpListener, app: Router, stop: oneshot::Receiver<()>) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    let builder = Arc::new(builder);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let (closing, closed) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut refused = Refused::default();
    let mut stop = pin!(stop);
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => break,
            a = listener.accept() => a,
        };
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: do not spin.
                tracing::warn!(error = %e, "the HTTP port cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refused.one();
            drop(stream);
            continue;
        };
        let (builder, app, closed) = (builder.clone(), app.clone(), closed.clone());
        connections.spawn(async move {
            connection(&builder, stream, app, closed).await;
            drop(slot);
        });
    }
    let _ = closing.send(true);
    while connections.join_next().await.is_some() {}
}

async fn connection(
    builder: &http1::Builder,
    stream: TcpStream,
    app: Router,
    mut closing: watch::Receiver<bool>,
) {
    let service = TowerToHyperService::new(app);
    let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
    let mut deadline = pin!(tokio::time::sleep(CONNECTION_LIFETIME));
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "an HTTP connection ended in error");
            }
            return;
        }
        // Dropping the connection closes it.
        _ = &mut deadline => return,
        _ = closing.wait_for(|c| *c) => {}
    }
    // Shutting down: an idle connection closes at once, a request in flight is answered.
    conn.as_mut().graceful_shutdown();
    tokio::select! {
        _ = conn => {}
        _ = deadline => {}
    }
}

/// Warns about refused connections, at most once per REFUSED_WARN_EVERY.
#[derive(Default)]
struct Refused {
    count: u64,
    warned: Option<Instant>,
}

impl Refused {
    fn one(&mut self) {
        self.count += 1;
        if self
            .warned
            .is_none_or(|at| at.elapsed() >= REFUSED_WARN_EVERY)
        {
            tracing::warn!(
                refused = self.count,
                max_connections = MAX_CONNECTIONS,
                "the HTTP port is at its connection limit: closing new connections at once (many clients, or one holding many connections open)"
            );
            self.warned = Some(Instant::now());
            self.count = 0;
        }
    }
}
