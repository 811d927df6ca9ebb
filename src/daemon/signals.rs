//! SIGTERM and SIGINT stop the daemon; SIGHUP reloads its configuration.

use tokio::signal::unix::{Signal, SignalKind, signal};

pub(crate) enum Sig {
    Stop(&'static str),
    Reload,
}

/// A signal handler that cannot be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot handle {name}: {error}")]
pub struct SignalError {
    name: &'static str,
    error: std::io::Error,
}

pub(crate) struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    /// Install early: until then SIGHUP's default action ends the process.
    pub(super) fn new() -> Result<Signals, SignalError> {
        let install = |kind: SignalKind, name: &'static str| {
            signal(kind).map_err(|source| SignalError {
                name,
                error: source,
            })
        };
        Ok(Signals {
            term: install(SignalKind::terminate(), "SIGTERM")?,
            int: install(SignalKind::interrupt(), "SIGINT")?,
            hup: install(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// The next signal; cancel-safe.
    pub(super) async fn recv(&mut self) -> Sig {
        tokio::select! {
            _ = self.term.recv() => Sig::Stop("SIGTERM"),
            _ = self.int.recv() => Sig::Stop("SIGINT"),
            _ = self.hup.recv() => Sig::Reload,
        }
    }
}
