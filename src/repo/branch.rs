//! Review branches (`repo.mode: pull-request`): commits made with plumbing on a private
//! index, so the clone's checkout never leaves the target branch and its working tree
//! is never touched.

use std::ffi::OsStr;
use std::path::Path;

use super::{Repo, RepoError};

/// The prefix of every review branch: `spokekeeper/<spoke>`.
pub const BRANCH_PREFIX: &str = "spokekeeper/";

impl Repo {
    pub fn target_branch(&self) -> &str {
        &self.branch
    }

    pub fn remote_name(&self) -> &str {
        &self.remote
    }

    /// Fetches every review branch into `refs/remotes/<remote>/spokekeeper/*`, dropping
    /// the tracking refs of branches deleted on the remote (merged and cleaned up).
    pub async fn fetch_review_branches(&self) -> Result<(), RepoError> {
        let spec = format!(
            "+refs/heads/{BRANCH_PREFIX}*:refs/remotes/{}/{BRANCH_PREFIX}*",
            self.remote
        );
        self.git(["fetch", "--quiet", "--prune", "--", &self.remote, &spec])
            .await
            .map(|_| ())
    }

    /// The commit a remote-tracking branch points at, or None when there is none.
    pub async fn remote_branch_head(&self, branch: &str) -> Option<String> {
        let r = format!("refs/remotes/{}/{branch}", self.remote);
        self.git(["rev-parse", "--verify", "--quiet", &r])
            .await
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// `rel` as committed in `commit`, or None when it is not there.
    pub async fn show(&self, commit: &str, rel: &Path) -> Result<Option<Vec<u8>>, RepoError> {
        self.inside(rel)?;
        let spec = format!("{commit}:{}", rel.to_string_lossy());
        match self.git(["cat-file", "-e", &spec]).await {
            Ok(_) => {}
            Err(RepoError::Git { .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
        self.git(["cat-file", "blob", &spec])
            .await
            .map(|s| Some(s.into_bytes()))
    }

    /// The full message of `commit`.
    pub async fn commit_message(&self, commit: &str) -> Result<String, RepoError> {
        self.git(["log", "-1", "--format=%B", commit]).await
    }

    /// Whether the review branch at `commit`, which changes only `rel`, was merged into
    /// the remote target branch: `commit` is in it (a merge commit or a fast-forward), or
    /// the target's `rel` is the branch's (a squash or rebase merge makes new commits
    /// with the same file).
    pub async fn merged(&self, commit: &str, rel: &Path) -> bool {
        let upstream = self.upstream();
        if self
            .git(["merge-base", "--is-ancestor", commit, &upstream])
            .await
            .is_ok()
        {
            return true;
        }
        let rel = rel.to_string_lossy();
        let blob = |rev: String| async move {
            self.git(["rev-parse", "--verify", "--quiet", &rev])
                .await
                .ok()
                .map(|s| s.trim().to_string())
        };
        match (
            blob(format!("{commit}:{rel}")).await,
            blob(format!("{upstream}:{rel}")).await,
        ) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }

    /// One commit on top of the remote target branch that writes `bytes` to `rel`;
    /// nothing else changes. Refuses a change that carries plaintext.
    pub async fn commit_on_target(
        &self,
        rel: &Path,
        bytes: &[u8],
        message: &str,
    ) -> Result<String, RepoError> {
        let rel_s = rel.to_string_lossy().into_owned();
        self.inside(rel)?;
        let base = self
            .git([
                "rev-parse",
                "--verify",
                &format!("{}/{}^{{commit}}", self.remote, self.branch),
            ])
            .await?
            .trim()
            .to_string();
        let index = tempfile::Builder::new()
            .prefix("spokekeeper-index")
            .tempfile_in(self.path.join(".git"))
            .map_err(|e| self.io(&self.path, e))?;
        let env = [("GIT_INDEX_FILE", index.path().as_os_str())];
        let no_env: [(&str, &OsStr); 0] = [];
        // git wants an index file it wrote itself, not an empty one.
        let _ = std::fs::remove_file(index.path());
        self.git_with(["read-tree", &base], &env, None).await?;
        let blob = self
            .git_with(["hash-object", "-w", "--stdin"], &no_env, Some(bytes))
            .await?;
        let info = format!("100644,{},{rel_s}", blob.trim());
        self.git_with(["update-index", "--add", "--cacheinfo", &info], &env, None)
            .await?;
        let tree = self.git_with(["write-tree"], &env, None).await?;
        let tree = tree.trim();
        let changed = self
            .git(["diff-tree", "-r", "--name-only", "-z", &base, tree])
            .await?;
        let changed: Vec<(String, String)> = changed
            .split('\0')
            .filter(|n| !n.is_empty())
            .map(|n| (n.to_string(), format!("{tree}:{n}")))
            .collect();
        self.check_blobs(&changed).await?;
        let sha = self
            .git(["commit-tree", tree, "-p", &base, "-m", message])
            .await?;
        Ok(sha.trim().to_string())
    }

    /// Pushes `commit` to `branch` on the remote, only if the branch is still at
    /// `expected` (None: only if it does not exist yet). Updates the tracking ref.
    pub async fn push_branch(
        &self,
        branch: &str,
        commit: &str,
        expected: Option<&str>,
    ) -> Result<(), RepoError> {
        let dst = format!("refs/heads/{branch}");
        let lease = format!("--force-with-lease={dst}:{}", expected.unwrap_or(""));
        self.git([
            "push",
            "--quiet",
            "--porcelain",
            &lease,
            "--",
            &self.remote,
            &format!("{commit}:{dst}"),
        ])
        .await?;
        let tracking = format!("refs/remotes/{}/{branch}", self.remote);
        let _ = self.git(["update-ref", &tracking, commit]).await;
        Ok(())
    }
}
