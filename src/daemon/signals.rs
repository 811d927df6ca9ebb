//! SIGTERM and SIGINT stop the daemon; SIGHUP reloads its configuration.

use tokio::signal::unix::{Signal, SignalKind, signal};

pub enum Sig {
    Stop(&'static str),
    Reload,
}

pub struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    /// Install early: until then SIGHUP's default action ends the process.
    pub fn new() -> Result<Signals, String> {
        let install = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| format!("cannot handle {name}: {e}"))
        };
        Ok(Signals {
            term: install(SignalKind::terminate(), "SIGTERM")?,
            int: install(SignalKind::interrupt(), "SIGINT")?,
            hup: install(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// The next signal; cancel-safe.
    pub async fn recv(&mut self) -> Sig {
        tokio::select! {
            _ = self.term.recv() => Sig::Stop("SIGTERM"),
            _ = self.int.recv() => Sig::Stop("SIGINT"),
            _ = self.hup.recv() => Sig::Reload,
        }
    }
}
