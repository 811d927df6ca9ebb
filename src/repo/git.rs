//! Running git in the clone: no shell, no prompts, every call timed out, and its whole
//! process group killed when the call is dropped.

use std::ffi::OsStr;
use std::process::Stdio;

use tokio::process::Command;

use super::{GIT_TIMEOUT, Repo, RepoError};

impl Repo {
    /// `git -C CLONE ARGS` with the environment every git run here gets (stdin: none).
    pub(super) fn git_command(&self, args: &[std::ffi::OsString]) -> Command {
        let mut cmd = Command::new("git");
        cmd.arg("-C")
            .arg(&self.path)
            .args(args)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_LITERAL_PATHSPECS", "1")
            .env("GIT_SSH_VARIANT", "ssh")
            .env("LC_ALL", "C")
            // refs/replace/* could make verify-commit and cat-file see another object
            // than the id names.
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a cancelled tick ends git and what git started
            // (ssh, remote helpers, pack-objects), so no push finishes afterwards.
            .process_group(0)
            .kill_on_drop(true);
        // Batch mode: an ssh remote must never wait for a password or a host-key answer.
        if std::env::var_os("GIT_SSH_COMMAND").is_none() {
            cmd.env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes");
        }
        if let Some((name, email)) = &self.author {
            for (k, v) in [
                ("GIT_AUTHOR_NAME", name),
                ("GIT_AUTHOR_EMAIL", email),
                ("GIT_COMMITTER_NAME", name),
                ("GIT_COMMITTER_EMAIL", email),
            ] {
                cmd.env(k, v);
            }
        }
        cmd
    }

    /// Runs git in the clone; stdout on success.
    pub(super) async fn git<I, S>(&self, args: I) -> Result<String, RepoError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.git_with(args, &[], None).await
    }

    /// [`Repo::git`] with extra environment and, optionally, bytes on stdin.
    pub(super) async fn git_with<I, S>(
        &self,
        args: I,
        env: &[(&str, &OsStr)],
        input: Option<&[u8]>,
    ) -> Result<String, RepoError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let out = self.git_raw(args, env, input).await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// [`Repo::git_with`], stdout as bytes (blobs need not be text).
    pub(super) async fn git_raw<I, S>(
        &self,
        args: I,
        env: &[(&str, &OsStr)],
        input: Option<&[u8]>,
    ) -> Result<Vec<u8>, RepoError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let shown = args
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let mut cmd = self.git_command(&args);
        cmd.envs(env.iter().copied()).stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = cmd.spawn().map_err(RepoError::Spawn)?;
        let mut group = GroupGuard(child.id());
        if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            stdin.write_all(bytes).await.map_err(RepoError::Spawn)?;
            // Closed here: `cat-file --batch` answers until its input ends.
            drop(stdin);
        }
        let out = tokio::time::timeout(GIT_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| RepoError::Timeout {
                args: shown.clone(),
                secs: GIT_TIMEOUT.as_secs(),
            })?
            .map_err(RepoError::Spawn)?;
        // Reaped: its id may be reused, so the group is no longer ours to signal.
        group.0 = None;
        if !out.status.success() {
            // push --porcelain reports rejections on stdout: keep both.
            let stderr = format!(
                "{} {}",
                String::from_utf8_lossy(&out.stderr).trim(),
                String::from_utf8_lossy(&out.stdout).trim()
            );
            return Err(RepoError::Git {
                args: shown,
                stderr: stderr.trim().to_string(),
            });
        }
        Ok(out.stdout)
    }
}

/// Kills a git's whole process group when the git call is dropped (a cancelled tick)
/// or times out before git was reaped; cleared once it was.
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take()
            && let Some(pgid) = i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
}
