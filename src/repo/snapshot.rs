//! HEAD's files listed once (`git ls-tree -r -t`) and read through one `git cat-file
//! --batch`: a tick reads every spoke's committed file with two git processes in all, not
//! two per spoke. Reads answer exactly as [`Repo::read`] does.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::Mutex;

use super::{GIT_TIMEOUT, Repo, RepoError};

/// HEAD's tree at one moment, and a reader of its blobs.
pub struct Snapshot<'r> {
    repo: &'r Repo,
    /// Path -> `mode type id`, as ls-tree prints it.
    entries: HashMap<String, String>,
    batch: Mutex<Option<Batch>>,
}

struct Batch {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Repo {
    /// Lists HEAD's tree; its files are then read with [`Snapshot::read`].
    pub async fn snapshot(&self) -> Result<Snapshot<'_>, RepoError> {
        let listing = self
            .git(["ls-tree", "-r", "-t", "-z", "--full-tree", "HEAD"])
            .await?;
        let entries = listing
            .split('\0')
            .filter_map(|e| e.split_once('\t'))
            .map(|(meta, path)| (path.to_owned(), meta.to_owned()))
            .collect();
        Ok(Snapshot {
            repo: self,
            entries,
            batch: Mutex::new(None),
        })
    }
}

impl Snapshot<'_> {
    /// The contents of `rel` as HEAD held it when listed, or None when it was not there.
    pub async fn read(&self, rel: &Path) -> Result<Option<Vec<u8>>, RepoError> {
        let path = self.repo.no_links(rel)?;
        let rel_s = rel.to_string_lossy();
        let Some(meta) = self.entries.get(rel_s.as_ref()) else {
            return Ok(None);
        };
        match meta.split(' ').collect::<Vec<_>>().as_slice() {
            ["100644" | "100755", "blob", id] => self.blob(id).await.map(Some),
            ["120000", ..] => Err(RepoError::Symlink(crate::fsutil::SymlinkError { path })),
            _ => Err(self.repo.io(
                &path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "committed as something other than a regular file",
                ),
            )),
        }
    }

    /// One blob through the batch process (started on first use, dropped on any error).
    async fn blob(&self, id: &str) -> Result<Vec<u8>, RepoError> {
        let shown = "cat-file --batch";
        let mut guard = self.batch.lock().await;
        if guard.is_none() {
            *guard = Some(self.start()?);
        }
        let batch = guard.as_mut().expect("started above");
        let answer = tokio::time::timeout(GIT_TIMEOUT, batch.ask(id)).await;
        match answer {
            Ok(Ok(Some(bytes))) => Ok(bytes),
            Ok(Ok(None)) => {
                *guard = None;
                Err(RepoError::Git {
                    args: shown.into(),
                    stderr: format!("{id} missing"),
                })
            }
            Ok(Err(e)) => {
                *guard = None;
                Err(RepoError::Git {
                    args: shown.into(),
                    stderr: e.to_string(),
                })
            }
            Err(_) => {
                *guard = None;
                Err(RepoError::Timeout {
                    args: shown.into(),
                    secs: GIT_TIMEOUT.as_secs(),
                })
            }
        }
    }

    fn start(&self) -> Result<Batch, RepoError> {
        let args: [OsString; 2] = ["cat-file".into(), "--batch".into()];
        let mut cmd = self.repo.git_command(&args);
        cmd.stdin(Stdio::piped()).stderr(Stdio::null());
        let mut child = cmd.spawn().map_err(RepoError::Spawn)?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(RepoError::Spawn(std::io::Error::other(
                "git cat-file --batch without pipes",
            )));
        };
        Ok(Batch {
            _child: child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }
}

impl Batch {
    /// `ID\n` in; `ID blob SIZE\n`, the bytes and `\n` out (None: `ID missing`).
    async fn ask(&mut self, id: &str) -> std::io::Result<Option<Vec<u8>>> {
        self.stdin.write_all(format!("{id}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        let mut header = String::new();
        self.stdout.read_line(&mut header).await?;
        let mut words = header.split_whitespace();
        let (Some(got), Some(kind)) = (words.next(), words.next()) else {
            return Err(std::io::Error::other(format!(
                "unexpected answer {header:?}"
            )));
        };
        if kind == "missing" {
            return Ok(None);
        }
        if got != id {
            return Err(std::io::Error::other(format!("asked for {id}, got {got}")));
        }
        let size: usize = match (kind, words.next().map(str::parse)) {
            ("blob", Some(Ok(size))) => size,
            _ => {
                return Err(std::io::Error::other(format!(
                    "unexpected answer {:?}",
                    header.trim_end()
                )));
            }
        };
        let mut bytes = vec![0; size];
        self.stdout.read_exact(&mut bytes).await?;
        let mut newline = [0u8; 1];
        self.stdout.read_exact(&mut newline).await?;
        Ok(Some(bytes))
    }
}
