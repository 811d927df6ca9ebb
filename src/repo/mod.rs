//! The fleet repo, through the git CLI: it honours the operator's SSH config, agent,
//! credential helpers and commit signing. No shell, no prompts, every call timed out.
//!
//! One clone is owned by spokekeeper. A tick: [`Repo::lock`], [`Repo::sync`] (fetch and
//! rebase, keeping local commits not yet pushed), [`Repo::write_atomic`] per rotated
//! spoke and its commit in one [`Commits`] stream (one git process for the tick's
//! commits), one [`Repo::push`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::RepoConfig;

mod branch;
mod git;
mod plaintext;
pub mod signing;
mod snapshot;
mod stage;
mod stream;
pub use branch::onboard::{Beside, OnboardingError};
pub use branch::{BRANCH_PREFIX, BranchState, REMOVES, Untrusted};
pub use snapshot::Snapshot;
pub use stream::Commits;

/// A git call that takes longer than this is killed: a hung remote must not hang a tick.
pub(crate) const GIT_TIMEOUT: Duration = Duration::from_secs(120);
/// Push attempts when the remote moved under us (non-fast-forward).
pub(crate) const PUSH_ATTEMPTS: usize = 4;
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_millis(500);
const LOCK_FILE: &str = "spokekeeper.lock";
/// The largest staged file the plaintext guard reads; a larger one is refused unread
/// (a sealed kubeconfig is a few KiB).
pub const MAX_CHECKED_BLOB: u64 = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("{path} is not a git clone: clone the fleet repo there first (git clone URL {path})")]
    NotAClone { path: String },
    #[error("git {args} failed: {stderr}")]
    Git { args: String, stderr: String },
    #[error(
        "git {args} did not finish within {secs}s and was stopped: check the remote and the network"
    )]
    Timeout { args: String, secs: u64 },
    #[error("cannot run git: {0} (install git)")]
    Spawn(std::io::Error),
    #[error("another spokekeeper run holds {0}: wait for it to finish")]
    Locked(String),
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("refusing to commit {file}: the staged change contains {what}; nothing was committed")]
    Plaintext { file: String, what: &'static str },
    #[error(
        "the push was rejected {attempts} times because the remote kept moving; the commits stay local and the next run pushes them"
    )]
    PushRaced { attempts: usize },
    #[error("{file} is outside the repo")]
    OutsideRepo { file: String },
    #[error(transparent)]
    SigningKey(#[from] signing::SigningKeyError),
    #[error(
        "review commits are signed and repo.signing_key is not set: {}",
        signing::KEYGEN
    )]
    NoSigningKey,
    #[error(transparent)]
    Symlink(crate::fsutil::SymlinkError),
    #[error(
        "refusing to commit {file}: git attributes apply to it ({found}), so what git stores or checks out could differ from what spokekeeper wrote; remove them from .gitattributes (in any directory) or core.attributesFile, or unset them for this file with a line `/{file} {unset}` in the clone's .git/info/attributes; nothing was committed"
    )]
    Attributes {
        file: String,
        found: String,
        unset: String,
    },
    #[error(
        "refusing to commit {file}: the clone's git config sets {setting}, which rewrites line endings on checkout; unset it (git -C CLONE config --unset {key}); nothing was committed"
    )]
    LineEndings {
        file: String,
        setting: String,
        key: String,
    },
    #[error(
        "refusing to commit {file}: git staged other bytes than spokekeeper wrote; nothing was committed"
    )]
    Altered { file: String },
    #[error(
        "refusing to commit {file} beside the credential: the target branch {why} since add read it; run add again"
    )]
    BesideMoved { file: String, why: &'static str },
    #[error(
        "nothing was committed: HEAD in the clone is detached at {head}, not on a branch; switch to the target branch (git -C CLONE switch BRANCH)"
    )]
    Detached { head: String },
    #[error(
        "refusing to commit the onboarding branch: {0}; a review branch may add new regular YAML files and list them in a kustomization.yaml, nothing else"
    )]
    NotOnboarding(OnboardingError),
    #[error(
        "refusing to commit the removal of {file}: {detail}; a removal branch deletes that one file, nothing else"
    )]
    NotRemoval { file: String, detail: String },
}

/// What `push` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// Nothing was ahead of the remote.
    Nothing,
    /// Pushed, after this many rebases onto a remote that had moved.
    Done { rebases: usize },
}

pub struct Repo {
    path: PathBuf,
    remote: String,
    branch: String,
    author: Option<(String, String)>,
    /// repo.signing_key: signs review commits and verifies review branches.
    signer: Option<signing::Signer>,
}

/// Holds the repo lock until dropped.
pub struct RepoLock {
    _file: std::fs::File,
}

impl Repo {
    pub async fn open(config: &RepoConfig) -> Result<Repo, RepoError> {
        let repo = Repo {
            path: config.path.clone(),
            remote: config.remote.clone(),
            branch: config.branch.clone(),
            author: config.author.as_deref().and_then(parse_author),
            signer: config
                .signing_key
                .as_deref()
                .map(signing::Signer::new)
                .transpose()?,
        };
        let top = repo
            .git(["rev-parse", "--show-toplevel"])
            .await
            .map_err(|_| RepoError::NotAClone {
                path: repo.path.display().to_string(),
            })?;
        let top = PathBuf::from(top.trim());
        let here = std::fs::canonicalize(&repo.path).map_err(|e| repo.io(&repo.path, e))?;
        if std::fs::canonicalize(&top).ok().as_deref() != Some(here.as_path()) {
            return Err(RepoError::NotAClone {
                path: repo.path.display().to_string(),
            });
        }
        Ok(repo)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An exclusive lock on the clone, so two runs never interleave their git calls.
    pub fn lock(&self) -> Result<RepoLock, RepoError> {
        let path = self.path.join(".git").join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| self.io(&path, e))?;
        // A child that another thread is forking holds a copy of the descriptor until
        // its exec closes it, so a lock just dropped can read as held for a moment:
        // only a holder that stays past a short grace is another run.
        let grace = std::time::Instant::now() + LOCK_GRACE;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(RepoLock { _file: file }),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < grace => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(RepoError::Locked(path.display().to_string()));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(self.io(&path, e)),
            }
        }
    }

    /// Brings the clone to the remote branch: discards uncommitted changes (a crash
    /// between write and commit), fetches, and rebases local commits that were not pushed.
    pub async fn sync(&self) -> Result<(), RepoError> {
        self.remove_stale_index_lock();
        let status = self
            .git(["status", "--porcelain", "--untracked-files=no"])
            .await?;
        if !status.trim().is_empty() {
            tracing::warn!(repo = %self.path.display(), "discarding uncommitted changes left by an interrupted run");
            self.git(["reset", "--hard", "--quiet", "HEAD"]).await?;
        }
        self.abort_stale_rebase().await;
        self.remove_stale_temp_files().await;
        // `--` and full ref names: no configured value is ever read as an option.
        self.git(["fetch", "--quiet", "--", &self.remote, &self.branch])
            .await?;
        self.git(["switch", "--quiet", "--", &self.branch]).await?;
        let upstream = self.upstream();
        if let Err(e) = self.git(["rebase", "--quiet", &upstream]).await {
            // Local commits that conflict with the remote are dropped, not kept forever:
            // the state they recorded is re-derived from the spokes on this tick.
            let _ = self.git(["rebase", "--abort"]).await;
            tracing::warn!(error = %e, "local commits conflict with the remote; resetting to it");
            self.git(["reset", "--hard", "--quiet", &upstream]).await?;
        }
        Ok(())
    }

    /// A git killed mid-commit (a cancelled tick, SIGKILL) leaves `index.lock`, and every
    /// later git call fails on it. Holding the repo lock, no git of ours is running: it
    /// is stale. Call only under [`Repo::lock`].
    fn remove_stale_index_lock(&self) {
        let lock = self.path.join(".git").join("index.lock");
        if lock.exists() {
            tracing::warn!(path = %lock.display(), "removing a stale git index lock left by an interrupted run");
            let _ = std::fs::remove_file(&lock);
        }
    }

    /// A run killed while writing leaves its temporary file beside the output (never
    /// committed, but it would stay forever). Call only under [`Repo::lock`].
    async fn remove_stale_temp_files(&self) {
        let Ok(untracked) = self.git(["ls-files", "--others", "-z"]).await else {
            return;
        };
        for rel in untracked.split('\0') {
            let stale = Path::new(rel)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(crate::fsutil::TEMP_PREFIX));
            if stale && let Ok(path) = self.no_links(Path::new(rel)) {
                tracing::warn!(
                    file = rel,
                    "removing a temporary file left by an interrupted run"
                );
                let _ = std::fs::remove_file(path);
            }
        }
    }

    async fn abort_stale_rebase(&self) {
        let git_dir = self.path.join(".git");
        if git_dir.join("rebase-merge").exists() || git_dir.join("rebase-apply").exists() {
            tracing::warn!("aborting a rebase left by an interrupted run");
            let _ = self.git(["rebase", "--abort"]).await;
        }
    }

    /// The contents of `rel` as HEAD holds it (after [`Repo::sync`], the remote branch),
    /// or None when it is not there. The committed blob, not the working tree: that is
    /// what Flux reads, and attributes could make checkout write other bytes.
    pub async fn read(&self, rel: &Path) -> Result<Option<Vec<u8>>, RepoError> {
        let path = self.no_links(rel)?;
        let rel_s = rel.to_string_lossy().into_owned();
        let entry = self
            .git(["ls-tree", "-z", "-l", "--full-tree", "HEAD", "--", &rel_s])
            .await?;
        let Some((meta, _)) = entry.split_once('\t') else {
            return Ok(None);
        };
        match meta.split_whitespace().collect::<Vec<_>>().as_slice() {
            // A blob of any size costs a pusher little (git compresses it): not read over
            // the cap every file read from the clone has.
            ["100644" | "100755", "blob", _, size]
                if size
                    .parse::<u64>()
                    .is_ok_and(|n| n > crate::fsutil::MAX_FILE_BYTES) =>
            {
                Err(self.io(
                    &path,
                    std::io::Error::other(crate::fsutil::UnboundedError::TooLarge {
                        path: path.clone(),
                    }),
                ))
            }
            ["100644" | "100755", "blob", id, _] => self
                .git_raw(["cat-file", "blob", id], &[], None)
                .await
                .map(Some),
            ["120000", ..] => Err(RepoError::Symlink(crate::fsutil::SymlinkError { path })),
            _ => Err(self.io(
                &path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "committed as something other than a regular file",
                ),
            )),
        }
    }

    /// Writes `rel` atomically (temp file, fsync, rename), creating directories.
    pub fn write_atomic(&self, rel: &Path, bytes: &[u8]) -> Result<(), RepoError> {
        let path = self.no_links(rel)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| self.io(dir, e))?;
        }
        crate::fsutil::write_atomic(&path, bytes).map_err(|e| self.io(&path, e))
    }

    /// Commits `rel` alone with `message`; returns the new commit, or None when the file
    /// did not change. The file is staged as written, without filters, and refused
    /// (and unstaged) when it carries plaintext or git attributes apply to it.
    pub async fn commit(&self, rel: &Path, message: &str) -> Result<Option<String>, RepoError> {
        self.commit_all(&[rel], message).await
    }

    /// [`Repo::commit`] for several files in one commit (`spokekeeper add`: a credential
    /// and the Flux objects that deploy with it): each is checked as `commit` checks one.
    /// A stream of its own ([`Repo::commits`] for many commits in one git process).
    pub async fn commit_all(
        &self,
        rels: &[&Path],
        message: &str,
    ) -> Result<Option<String>, RepoError> {
        let mut commits = self.commits(rels).await?;
        let made = commits.commit(self, rels, message).await;
        let ended = commits.finish(self).await;
        let made = made?;
        ended.map(|()| made)
    }

    /// Puts `rel` back as HEAD has it (removed when HEAD has none): a change that could
    /// not be committed does not stay in the clone looking like the committed state.
    pub async fn discard(&self, rel: &Path) {
        let rel_s = rel.to_string_lossy().into_owned();
        let _ = self.git(["reset", "--quiet", "--", &rel_s]).await;
        if self
            .git(["cat-file", "-e", &format!("HEAD:{rel_s}")])
            .await
            .is_ok()
        {
            let _ = self.git(["checkout", "--quiet", "--", &rel_s]).await;
        } else if let Ok(path) = self.no_links(rel) {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Puts each of `rels` that differs from HEAD back as HEAD has it: a tick's commits
    /// reach the branch only when its stream ends, so a cancelled tick leaves the outputs
    /// it wrote behind. Nothing else in the clone is touched.
    pub async fn discard_uncommitted(&self, rels: &[&Path]) {
        let Ok(status) = self
            .git(["status", "--porcelain", "-z", "--untracked-files=all"])
            .await
        else {
            return;
        };
        for changed in status.split('\0').filter_map(|e| e.get(3..)) {
            if let Some(rel) = rels.iter().find(|r| r.to_string_lossy() == changed) {
                self.discard(rel).await;
            }
        }
    }

    /// Pushes local commits; when the remote moved, fetches, rebases and tries again.
    pub async fn push(&self) -> Result<Pushed, RepoError> {
        let upstream = self.upstream();
        let refspec = format!("HEAD:refs/heads/{}", self.branch);
        for attempt in 0..PUSH_ATTEMPTS {
            let ahead = self
                .git(["rev-list", "--count", &format!("{upstream}..HEAD")])
                .await?;
            if ahead.trim() == "0" {
                return Ok(Pushed::Nothing);
            }
            match self
                .git([
                    "push",
                    "--quiet",
                    "--porcelain",
                    "--",
                    &self.remote,
                    &refspec,
                ])
                .await
            {
                Ok(_) => {
                    // Keep the remote-tracking ref current without another fetch.
                    let _ = self.git(["update-ref", &upstream, "HEAD"]).await;
                    return Ok(Pushed::Done { rebases: attempt });
                }
                Err(RepoError::Git { stderr, .. }) if is_non_fast_forward(&stderr) => {
                    tracing::info!(attempt, "push rejected: the remote moved; rebasing");
                    self.git(["fetch", "--quiet", "--", &self.remote, &self.branch])
                        .await?;
                    if let Err(e) = self.git(["rebase", "--quiet", &upstream]).await {
                        let _ = self.git(["rebase", "--abort"]).await;
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(RepoError::PushRaced {
            attempts: PUSH_ATTEMPTS,
        })
    }

    /// The last commit on HEAD that changed `rel` (None: none did).
    pub(crate) async fn last_commit(&self, rel: &Path) -> Result<Option<String>, RepoError> {
        let rel_s = rel.to_string_lossy().into_owned();
        self.inside(rel)?;
        let sha = self.git(["log", "-1", "--format=%H", "--", &rel_s]).await?;
        Ok(Some(sha.trim().to_string()).filter(|s| !s.is_empty()))
    }

    /// Commits on HEAD not yet on the remote branch (by the remote-tracking ref).
    pub async fn unpushed(&self) -> Result<usize, RepoError> {
        let n = self
            .git(["rev-list", "--count", &format!("{}..HEAD", self.upstream())])
            .await?;
        Ok(n.trim().parse().unwrap_or(0))
    }

    /// The plaintext guard on what would be committed: each `(file, object)` is read
    /// as git stores it (`:0:path` in the index, `TREE:path`), at most
    /// [`MAX_CHECKED_BLOB`] bytes, and refused when it holds plaintext or is binary.
    async fn check_blobs(&self, objects: &[(String, String)]) -> Result<(), RepoError> {
        let mut input = Vec::new();
        for (file, object) in objects {
            if object.contains(['\n', '\r']) {
                return Err(RepoError::Plaintext {
                    file: file.clone(),
                    what: "a line break in the file name, which cannot be checked",
                });
            }
            input.extend_from_slice(object.as_bytes());
            input.push(b'\n');
        }
        let sizes = self
            .git_raw(
                ["cat-file", "--batch-check=%(objecttype) %(objectsize)"],
                &[],
                Some(&input),
            )
            .await?;
        let sizes = String::from_utf8_lossy(&sizes);
        for ((file, _), line) in objects.iter().zip(sizes.lines()) {
            let fits = match line.split_once(' ') {
                Some(("blob", n)) => n.parse::<u64>().is_ok_and(|n| n <= MAX_CHECKED_BLOB),
                // A deletion or a submodule has no blob content to leak.
                _ => line.ends_with(" missing") || line.starts_with("commit "),
            };
            if !fits {
                return Err(RepoError::Plaintext {
                    file: file.clone(),
                    what: "a file too large to check for plaintext",
                });
            }
        }
        let out = self
            .git_raw(["cat-file", "--batch"], &[], Some(&input))
            .await?;
        let mut rest = out.as_slice();
        for (file, _) in objects {
            let Some(end) = rest.iter().position(|&b| b == b'\n') else {
                break;
            };
            let header = String::from_utf8_lossy(&rest[..end]).into_owned();
            rest = &rest[end + 1..];
            let mut parts = header.rsplitn(3, ' ');
            let (Some(size), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Ok(size) = size.parse::<usize>() else {
                continue; // "<object> missing": a deletion
            };
            let body = rest.get(..size).unwrap_or(rest);
            rest = rest.get(size + 1..).unwrap_or_default();
            if kind != "blob" {
                continue;
            }
            if let Some(what) = plaintext::refused_in(body) {
                return Err(RepoError::Plaintext {
                    file: file.clone(),
                    what,
                });
            }
        }
        Ok(())
    }

    /// The remote-tracking ref of the target branch, in full (never read as an option).
    fn upstream(&self) -> String {
        format!("refs/remotes/{}/{}", self.remote, self.branch)
    }

    fn inside(&self, rel: &Path) -> Result<PathBuf, RepoError> {
        let ok = rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !ok || rel.as_os_str().is_empty() {
            return Err(RepoError::OutsideRepo {
                file: rel.display().to_string(),
            });
        }
        Ok(self.path.join(rel))
    }

    /// [`Repo::inside`], refusing a symbolic link on any component below the clone root:
    /// one committed in the fleet repo could point anywhere.
    fn no_links(&self, rel: &Path) -> Result<PathBuf, RepoError> {
        let path = self.inside(rel)?;
        match crate::fsutil::symlink_in(&self.path, rel) {
            Ok(None) => Ok(path),
            Ok(Some(link)) => Err(RepoError::Symlink(crate::fsutil::SymlinkError {
                path: link,
            })),
            Err(e) => Err(self.io(&path, e)),
        }
    }

    fn io(&self, path: &Path, source: std::io::Error) -> RepoError {
        RepoError::Io {
            path: path.display().to_string(),
            error: source,
        }
    }
}

/// `Name <email>` into its parts.
fn parse_author(s: &str) -> Option<(String, String)> {
    let (name, rest) = s.split_once('<')?;
    let email = rest.strip_suffix('>')?;
    Some((name.trim().to_string(), email.trim().to_string()))
}

/// The remote moved (retry after a rebase), as opposed to a hook or permission refusal
/// ("[remote rejected] ... hook declined"), which no retry fixes. A ref that moved
/// between our view and the remote's update is reported as "cannot lock ref ... but
/// expected": a race too.
fn is_non_fast_forward(output: &str) -> bool {
    [
        "non-fast-forward",
        "fetch first",
        "remote contains work",
        "stale info",
        "but expected",
    ]
    .iter()
    .any(|m| output.contains(m))
}
