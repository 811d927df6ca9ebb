//! One SSH session to a node: one system `ssh` process, `ssh -F CONFIG -p PORT -l USER --
//! HOST COMMAND` (`cat PATH`, or a verb of the node's script with bytes on its stdin), its
//! stdout read (capped, zeroized) and its stderr classified.
//!
//! One process per session rather than a mux master, a client through it and `-O exit`:
//! the rotation tick is bound by session setup on the hub's cores (docs/benchmarks.md).
//! The generated ssh_config ([`config`]) pins trust as before. The process is ours alone
//! (no ProxyCommand, no master): on a timeout, or when the caller drops the future, it is
//! killed, and reaped.

mod classify;
mod config;
mod stderr;

use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep_until};

use super::error::ExtractError;
use super::read::read_capped;
use super::{MAX_KUBECONFIG_BYTES, host_port};
use crate::config::SshSettings;
use crate::secret::SecretBytes;
use config::{SessionDir, remote_command, short_tmp, validate, validate_path};

/// The ssh client. A bare name: found on PATH, as the openssh crate did.
const SSH: &str = "ssh";
/// ssh's own exit status for its own failures (connection, host key, authentication).
const SSH_FAILED: i32 = 255;

/// One remote command for a session.
pub(crate) struct Remote<'a> {
    /// Its words, each quoted for the remote login shell.
    pub(crate) words: &'a [&'a str],
    /// Written to its stdin, which is then closed; None: stdin is /dev/null.
    pub(crate) stdin: Option<&'a [u8]>,
    /// What messages call its output (`user@host:port:path`).
    pub(crate) origin: String,
}

/// How a remote command ended once the node ran it.
pub(crate) struct Finished {
    /// Its exit status (ssh passes it on).
    pub(crate) code: i32,
    /// Its stdout, capped at [`MAX_KUBECONFIG_BYTES`]; empty unless `code` is 0.
    pub(crate) stdout: SecretBytes,
    /// What it and ssh said on stderr, bounded.
    pub(crate) stderr: String,
}

/// `user@host:port`, as messages name the node.
pub(crate) fn target(address: &str, s: &SshSettings) -> String {
    format!("{}@{}", s.user, host_port(address, s.port))
}

/// Reads `path` on the node at `address`: `cat PATH`, or `sudo -n cat PATH`.
pub(crate) async fn read_file(
    address: &str,
    s: &SshSettings,
    path: &str,
) -> Result<SecretBytes, ExtractError> {
    let target = target(address, s);
    validate_path(path).map_err(|reason| ExtractError::Settings {
        target: target.clone(),
        reason,
    })?;
    let words: &[&str] = if s.sudo {
        &["sudo", "-n", "cat", path]
    } else {
        &["cat", path]
    };
    let origin = format!("{target}:{path}");
    let remote = Remote {
        words,
        stdin: None,
        origin: origin.clone(),
    };
    let done = run(address, s, remote).await?;
    if done.code != 0 {
        return Err(classify::remote_error(
            &target,
            s,
            path,
            &words.join(" "),
            format!("exit code {}", done.code),
            &done.stderr,
        ));
    }
    if done.stdout.is_empty() {
        return Err(ExtractError::Empty { origin });
    }
    Ok(done.stdout)
}

/// Runs `remote` on the node at `address` over one ssh process: ssh's own failures
/// (connection, host key, key refused, timeouts, output over the cap) are errors; how the
/// command ended is the caller's to judge.
pub(crate) async fn run(
    address: &str,
    s: &SshSettings,
    remote: Remote<'_>,
) -> Result<Finished, ExtractError> {
    let target = target(address, s);
    validate(address, s).map_err(|reason| ExtractError::Settings {
        target: target.clone(),
        reason,
    })?;
    let dir = SessionDir::create(s).map_err(|e| ExtractError::Ssh {
        target: target.clone(),
        detail: format!(
            "cannot prepare the session directory under {}: {e}",
            short_tmp().display()
        ),
    })?;
    let mut child = Command::new(SSH)
        .arg("-F")
        .arg(dir.config_file())
        .arg("-p")
        .arg(s.port.to_string())
        .arg("-l")
        .arg(&s.user)
        .arg("--")
        .arg(address)
        .arg(remote_command(remote.words))
        .stdin(if remote.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ExtractError::Ssh {
            target: target.clone(),
            detail: if e.kind() == std::io::ErrorKind::NotFound {
                "the `ssh` client is not installed on this host (install openssh-client)".into()
            } else {
                format!("cannot start ssh: {e}")
            },
        })?;
    let session = Session {
        address,
        s,
        target: &target,
        shown: remote.words.join(" "),
        origin: &remote.origin,
        input: remote.stdin,
    };
    let result = session.run(&mut child).await;
    // Ours alone: nothing else to stop. A no-op when it already exited and was reaped.
    let _ = child.start_kill();
    let _ = child.wait().await;
    result
}

struct Session<'a> {
    address: &'a str,
    s: &'a SshSettings,
    target: &'a str,
    /// The remote command as messages show it.
    shown: String,
    origin: &'a str,
    input: Option<&'a [u8]>,
}

/// What ended a session that did not finish.
enum Cut {
    Connect,
    Command,
}

impl Session<'_> {
    /// The connect phase (until ssh logs that the node accepted our key) is bounded by
    /// `connect_timeout`, the rest by `command_timeout`.
    async fn run(&self, child: &mut Child) -> Result<Finished, ExtractError> {
        let (authenticated, mut connected) = oneshot::channel();
        let mut deadline = Instant::now() + self.s.connect_timeout;
        let mut phase = Cut::Connect;
        let mut marker_open = true;
        let outcome = {
            let work = self.collect(child, authenticated);
            tokio::pin!(work);
            loop {
                tokio::select! {
                    r = &mut work => break Ok(r),
                    got = &mut connected, if marker_open => {
                        marker_open = false;
                        if got.is_ok() {
                            phase = Cut::Command;
                            deadline = Instant::now() + self.s.command_timeout;
                        }
                    }
                    () = sleep_until(deadline) => break Err(phase),
                }
            }
        };
        match outcome {
            Ok(r) => r,
            Err(Cut::Connect) => Err(ExtractError::ConnectTimeout {
                target: self.target.to_owned(),
                secs: self.s.connect_timeout.as_secs_f64(),
            }),
            Err(Cut::Command) => Err(ExtractError::CommandTimeout {
                target: self.target.to_owned(),
                command: self.shown.clone(),
                secs: self.s.command_timeout.as_secs_f64(),
            }),
        }
    }

    /// Writes stdin, reads both streams to their end, then the exit status, and judges them.
    async fn collect(
        &self,
        child: &mut Child,
        authenticated: oneshot::Sender<()>,
    ) -> Result<Finished, ExtractError> {
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        // Over the cap ends it at once, whatever ssh does next (the caller kills it);
        // any other outcome of stdout is judged after the exit status.
        let (out, err, ()) = tokio::try_join!(
            async {
                // Moved in: closed as soon as the read ends.
                let out = match stdout {
                    Some(mut o) => read_capped(&mut o, MAX_KUBECONFIG_BYTES, self.origin).await,
                    None => Ok(SecretBytes::default()),
                };
                match out {
                    Err(e @ ExtractError::TooLarge { .. }) => Err(e),
                    other => Ok(other),
                }
            },
            async {
                Ok(match stderr {
                    Some(e) => stderr::read(e, authenticated).await,
                    None => stderr::Said::default(),
                })
            },
            async {
                if let (Some(mut pipe), Some(bytes)) = (stdin, self.input) {
                    // The node may stop reading (a refusal): the exit status says what
                    // happened, not this write. Dropping the pipe closes it: end of input.
                    let _ = pipe.write_all(bytes).await;
                }
                Ok(())
            }
        )?;
        let status = child.wait().await.map_err(|e| ExtractError::Ssh {
            target: self.target.to_owned(),
            detail: format!("waiting for ssh: {e}"),
        })?;
        let code = match status.code() {
            Some(SSH_FAILED) if !err.authenticated => {
                return Err(classify::connect_error(
                    &err.log,
                    self.address,
                    self.s,
                    self.target,
                ));
            }
            Some(code) => code,
            None => {
                return Err(classify::remote_failed(
                    self.target,
                    &self.shown,
                    "killed by a signal".into(),
                    &err.log,
                ));
            }
        };
        let stdout = if code == 0 {
            out?
        } else {
            SecretBytes::default()
        };
        Ok(Finished {
            code,
            stdout,
            stderr: err.log,
        })
    }
}
