//! Review branches (`repo.mode: pull-request`): commits made with plumbing on a private
//! index, so the clone's checkout never leaves the target branch and its working tree
//! is never touched.

use std::path::Path;

use super::{Repo, RepoError};

mod diff;
pub(super) mod onboard;
mod removal;

pub use removal::REMOVES;

use onboard::{Beside, Onboarding, OnboardingError};

/// The prefix of every review branch: `spokekeeper/<spoke>`.
pub const BRANCH_PREFIX: &str = "spokekeeper/";

/// Where the clone records the commit spokekeeper last pushed to each review branch
/// (`refs/spokekeeper/pushed/<spoke>`). Only `push_branch` writes it; nothing fetches
/// into it or pushes it, so a pusher cannot.
const PUSHED_PREFIX: &str = "refs/spokekeeper/pushed/";

/// A review branch's head, as [`Repo::branch_state`] finds it.
#[derive(Debug)]
pub enum BranchState {
    /// In the target branch, or spokekeeper's own with the target's file.
    Merged,
    /// Not merged; whether it is provably spokekeeper's.
    Open(Result<(), Untrusted>),
}

/// Why a review branch is not taken as spokekeeper's own.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    #[error("not signed by spokekeeper's key (repo.signing_key is not set)")]
    NoKey,
    #[error("not signed by spokekeeper's key (the commit has no signature)")]
    Unsigned,
    #[error("not signed by spokekeeper's key (its signature is by another key)")]
    ForeignSignature,
    #[error("not one commit on the target branch ({0})")]
    Parents(String),
    #[error("its parent {parent} is not in {upstream}")]
    OffTarget { parent: String, upstream: String },
    #[error("it changes more than {rel}: {detail}")]
    Changes { rel: String, detail: String },
    #[error("it cannot be read: {0}")]
    Unreadable(String),
    #[error(
        "not the commit spokekeeper last pushed to it ({recorded}): an older or altered commit"
    )]
    NotPushed { recorded: String },
    #[error(
        "this clone has no record of spokekeeper pushing it (a new clone, or pushed by someone else)"
    )]
    NoRecord,
    #[error("not an onboarding commit spokekeeper makes: {0}")]
    Onboarding(OnboardingError),
    #[error("not a removal commit spokekeeper makes: its message does not end with {trailer:?}")]
    NoRemovalTrailer { trailer: String },
}

impl Repo {
    pub(crate) fn target_branch(&self) -> &str {
        &self.branch
    }

    /// Every file that differs between two trees (or commits), as `git diff-tree --raw
    /// -z` lists it: recursive, renames as a deletion and an addition.
    async fn raw_diff(&self, from: &str, to: &str) -> Result<String, RepoError> {
        let args = ["diff-tree", "-r", "--no-renames", "--raw", "-z", from, to];
        self.git(args).await
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
        let size = match self.git(["cat-file", "-s", &spec]).await {
            Ok(size) => size,
            Err(RepoError::Git { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        // A pushed branch's blob costs its pusher little (git compresses it): not read
        // over the cap every file read from the clone has, as `Repo::read` does.
        if size
            .trim()
            .parse::<u64>()
            .is_ok_and(|n| n > crate::fsutil::MAX_FILE_BYTES)
        {
            let path = self.path.join(rel);
            let too_large = crate::fsutil::UnboundedError::TooLarge { path: path.clone() };
            return Err(self.io(&path, std::io::Error::other(too_large)));
        }
        self.git(["cat-file", "blob", &spec])
            .await
            .map(|s| Some(s.into_bytes()))
    }

    /// The full message of `commit`.
    pub(crate) async fn commit_message(&self, commit: &str) -> Result<String, RepoError> {
        self.git(["log", "-1", "--format=%B", commit]).await
    }

    /// What `branch` at `commit` is: merged into the remote target branch (`commit` is
    /// in it, by a merge commit or a fast-forward; or the branch is provably
    /// spokekeeper's and the target's `rel` is the branch's, as a squash or rebase merge
    /// leaves it), or open with its [`Repo::provenance`]. Anyone else's branch that
    /// leaves `rel` as on target is open, not merged: it may add other files. Provenance
    /// is checked once here, so callers get it with the answer.
    pub(crate) async fn branch_state(&self, branch: &str, commit: &str, rel: &Path) -> BranchState {
        let upstream = self.upstream();
        if self
            .git(["merge-base", "--is-ancestor", commit, &upstream])
            .await
            .is_ok()
        {
            return BranchState::Merged;
        }
        let proven = self.provenance(branch, commit, rel).await;
        if proven.is_err() {
            return BranchState::Open(proven);
        }
        let rel_s = rel.to_string_lossy();
        let blob = |rev: String| async move {
            self.git(["rev-parse", "--verify", "--quiet", &rev])
                .await
                .ok()
                .map(|s| s.trim().to_string())
        };
        match (
            blob(format!("{commit}:{rel_s}")).await,
            blob(format!("{upstream}:{rel_s}")).await,
        ) {
            (Some(a), Some(b)) if a == b => BranchState::Merged,
            _ => BranchState::Open(proven),
        }
    }

    /// Whether `branch` at `commit` is merged (see [`Repo::branch_state`]).
    pub async fn merged(&self, branch: &str, commit: &str, rel: &Path) -> bool {
        matches!(
            self.branch_state(branch, commit, rel).await,
            BranchState::Merged
        )
    }

    /// One commit on top of the remote target branch that writes `bytes` to `rel`;
    /// nothing else changes. Refuses a change that carries plaintext.
    pub async fn commit_on_target(
        &self,
        rel: &Path,
        bytes: &[u8],
        message: &str,
    ) -> Result<String, RepoError> {
        let base = self.target_commit().await?;
        let files = [(rel.to_string_lossy().into_owned(), bytes)];
        let (tree, _) = self.tree_on(&base, &files).await?;
        self.sign_commit(&tree, &base, message).await
    }

    /// `spokekeeper add` in review mode: one commit on top of the remote target branch
    /// that adds the spoke `spoke`'s credential `rel` and `beside` it the files add
    /// writes, each only if the target branch still holds what it was computed from.
    /// Its trailer names each file; a commit [`Repo::provenance`] would not trust (any
    /// change but new YAML files and lines added to a kustomization.yaml) is refused.
    pub async fn commit_onboarding(
        &self,
        spoke: &str,
        rel: &Path,
        bytes: &[u8],
        beside: &[Beside],
        message: &str,
    ) -> Result<String, RepoError> {
        let base = self.target_commit().await?;
        for b in beside {
            let now = self.show(&base, &b.rel).await?;
            if now != b.was {
                let why = match (&now, &b.was) {
                    (Some(_), None) => "holds it now",
                    (None, Some(_)) => "no longer holds it",
                    _ => "changed it",
                };
                let file = b.rel.display().to_string();
                return Err(RepoError::BesideMoved { file, why });
            }
        }
        let mut files = vec![(rel.to_string_lossy().into_owned(), bytes)];
        for b in beside {
            self.inside(&b.rel)?;
            files.push((b.rel.to_string_lossy().into_owned(), b.bytes.as_slice()));
        }
        let (tree, raw) = self.tree_on(&base, &files).await?;
        let onboarding = Onboarding::of_diff(spoke, &raw).map_err(RepoError::NotOnboarding)?;
        onboard::check(&raw, &files[0].0, spoke, &onboarding).map_err(RepoError::NotOnboarding)?;
        self.lines_added(&base, &tree, &onboarding.lists)
            .await
            .map_err(RepoError::NotOnboarding)?;
        let message = format!("{}\n\n{}", message.trim_end(), onboarding.trailer());
        self.sign_commit(&tree, &base, &message).await
    }

    /// The files besides `rel` that the onboarding commit `head` (trusted by the caller)
    /// carries, as [`Repo::commit_onboarding`] takes them, so a new credential for a
    /// spoke still waiting for review keeps them; empty for any other commit.
    pub async fn onboarding_files(&self, head: &str, rel: &Path) -> Result<Vec<Beside>, RepoError> {
        let Some(o) = Onboarding::parse(&self.commit_message(head).await?) else {
            return Ok(Vec::new());
        };
        let parent = format!("{head}^");
        let mut out = Vec::new();
        let listed = o.lists.iter().map(|l| (l, true));
        for (path, was) in o.adds.iter().map(|a| (a, false)).chain(listed) {
            let path = Path::new(path);
            if path == rel {
                continue;
            }
            let bytes = self.show(head, path).await?.unwrap_or_default();
            let was = match was {
                true => self.show(&parent, path).await?,
                false => None,
            };
            out.push(Beside {
                rel: path.to_path_buf(),
                bytes,
                was,
            });
        }
        Ok(out)
    }

    /// The remote target branch's commit.
    async fn target_commit(&self) -> Result<String, RepoError> {
        let spec = format!("{}/{}^{{commit}}", self.remote, self.branch);
        Ok(self
            .git(["rev-parse", "--verify", &spec])
            .await?
            .trim()
            .to_string())
    }

    /// The tree of `base` with `files` written (as regular files, each checked for
    /// plaintext and git attributes), and its `diff-tree --raw -z` from `base`.
    async fn tree_on(
        &self,
        base: &str,
        files: &[(String, &[u8])],
    ) -> Result<(String, String), RepoError> {
        let index = tempfile::Builder::new()
            .prefix("spokekeeper-index")
            .tempfile_in(self.path.join(".git"))
            .map_err(|e| self.io(&self.path, e))?;
        let env = [("GIT_INDEX_FILE", index.path().as_os_str())];
        // git wants an index file it wrote itself, not an empty one.
        let _ = std::fs::remove_file(index.path());
        self.git_with(["read-tree", base], &env, None).await?;
        for (rel, bytes) in files {
            self.inside(Path::new(rel))?;
            self.stage(rel, bytes, &env).await?;
        }
        let tree = self.git_with(["write-tree"], &env, None).await?;
        let tree = tree.trim().to_string();
        let raw = self.raw_diff(base, &tree).await?;
        let changed: Vec<(String, String)> = raw
            .split('\0')
            .filter(|f| !f.is_empty() && !f.starts_with(':'))
            .map(|n| (n.to_string(), format!("{tree}:{n}")))
            .collect();
        self.check_blobs(&changed).await?;
        // The attributes the target branch's tree (and the clone) applies to each file.
        for (rel, _) in files {
            self.no_conversion(rel, &env, true).await?;
        }
        Ok((tree, raw))
    }

    /// Signed by git itself (ssh-keygen -Y sign with repo.signing_key): a review branch
    /// is trusted only when its head verifies against that key.
    async fn sign_commit(
        &self,
        tree: &str,
        base: &str,
        message: &str,
    ) -> Result<String, RepoError> {
        let signer = self.signer.as_ref().ok_or(RepoError::NoSigningKey)?;
        let mut args: Vec<String> = signer.sign_args().into();
        args.extend(["commit-tree", "-S", tree, "-p", base, "-m", message].map(String::from));
        let sha = self.git(args).await?;
        Ok(sha.trim().to_string())
    }

    /// Whether each of `paths` only gains lines from `from` to `to` (no line removed or
    /// changed); else which does not.
    async fn lines_added(
        &self,
        from: &str,
        to: &str,
        paths: &[String],
    ) -> Result<(), OnboardingError> {
        for path in paths {
            let stat = self
                .git(["diff", "--numstat", "--no-renames", from, to, "--", path])
                .await
                .map_err(|e| OnboardingError::Diff {
                    path: path.clone(),
                    error: e.to_string(),
                })?;
            // `ADDED\tDELETED\tPATH`; binary files show `-`.
            let deleted = stat.split('\t').nth(1).map(str::trim);
            if deleted != Some("0") {
                return Err(OnboardingError::LinesLost(path.clone()));
            }
        }
        Ok(())
    }

    /// Whether `branch` at `head` is spokekeeper's own for `rel`: `head` verifies against
    /// repo.signing_key, its only parent is in the remote target branch, it changes `rel`
    /// (a regular file) and nothing else, and it is exactly the commit this clone last
    /// pushed to `branch` (an older signed commit replayed, or one re-encoded with an
    /// extra header, has another id). Anything a pusher could copy (annotations,
    /// fingerprints, names, signatures) is not evidence.
    pub async fn provenance(&self, branch: &str, head: &str, rel: &Path) -> Result<(), Untrusted> {
        let (full, parent) = self.signed_on_target(head).await?;
        let raw = self
            .raw_diff(&parent, head)
            .await
            .map_err(|e| Untrusted::Unreadable(e.to_string()))?;
        let rel_s = rel.to_string_lossy();
        let message = self
            .commit_message(&full)
            .await
            .map_err(|e| Untrusted::Unreadable(e.to_string()))?;
        match Onboarding::parse(&message) {
            // `add` in review mode: new files beside the credential, as the trailer says.
            Some(o) => {
                let spoke = branch.strip_prefix(BRANCH_PREFIX).unwrap_or(branch);
                onboard::check(&raw, &rel_s, spoke, &o).map_err(Untrusted::Onboarding)?;
                self.lines_added(&parent, &full, &o.lists)
                    .await
                    .map_err(Untrusted::Onboarding)?;
            }
            None => only_writes(&raw, &rel_s)?,
        }
        self.last_pushed(branch, &full).await
    }

    /// `head` verified against repo.signing_key, with one parent, in the remote target
    /// branch: (its full id, that parent).
    async fn signed_on_target(&self, head: &str) -> Result<(String, String), Untrusted> {
        let signer = self.signer.as_ref().ok_or(Untrusted::NoKey)?;
        let args = signer.verify_args();
        let mut verify: Vec<String> = args.clone().into();
        verify.extend(["verify-commit", head].map(String::from));
        if self.git(verify).await.is_err() {
            let mut status: Vec<String> = args.into();
            status.extend(["log", "-1", "--format=%G?", head].map(String::from));
            let signed = self.git(status).await.is_ok_and(|s| s.trim() != "N");
            return Err(if signed {
                Untrusted::ForeignSignature
            } else {
                Untrusted::Unsigned
            });
        }
        let parents = self
            .git(["rev-list", "--parents", "-n", "1", head])
            .await
            .map_err(|e| Untrusted::Unreadable(e.to_string()))?;
        let (full, parent) = single_parent(&parents)?;
        let upstream = self.upstream();
        if self
            .git(["merge-base", "--is-ancestor", &parent, &upstream])
            .await
            .is_err()
        {
            return Err(Untrusted::OffTarget { parent, upstream });
        }
        Ok((full, parent))
    }

    /// Whether `full` is exactly the commit this clone last pushed to `branch`.
    async fn last_pushed(&self, branch: &str, full: &str) -> Result<(), Untrusted> {
        match self.pushed(branch).await {
            Some(recorded) if recorded == full => Ok(()),
            Some(recorded) => Err(Untrusted::NotPushed { recorded }),
            None => Err(Untrusted::NoRecord),
        }
    }

    /// The commit this clone last pushed to `branch`, if it recorded one.
    pub async fn pushed(&self, branch: &str) -> Option<String> {
        self.git(["rev-parse", "--verify", "--quiet", &pushed_ref(branch)])
            .await
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
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
        // Without the record the next check replaces the branch once: an error says so.
        self.git(["update-ref", &pushed_ref(branch), commit])
            .await
            .map(|_| ())
    }
}

/// `refs/spokekeeper/pushed/<spoke>` for `spokekeeper/<spoke>`.
fn pushed_ref(branch: &str) -> String {
    format!(
        "{PUSHED_PREFIX}{}",
        branch.strip_prefix(BRANCH_PREFIX).unwrap_or(branch)
    )
}

/// The one parent in `git rev-list --parents -n 1` output (`HEAD PARENT...`).
fn single_parent(line: &str) -> Result<(String, String), Untrusted> {
    let ids: Vec<&str> = line.split_whitespace().collect();
    match ids.as_slice() {
        [commit, parent] => Ok((commit.to_string(), parent.to_string())),
        [_] => Err(Untrusted::Parents("it has no parent".into())),
        _ => Err(Untrusted::Parents(format!(
            "it has {} parents",
            ids.len().saturating_sub(1)
        ))),
    }
}

/// Whether `git diff-tree -r --no-renames --raw -z` output adds or modifies exactly
/// `rel`, as a regular file, and nothing else.
fn only_writes(raw: &str, rel: &str) -> Result<(), Untrusted> {
    diff::only_changes(raw, rel, "written as a regular file", |meta| {
        matches!(meta, [_, "100644", _, _, "A" | "M"])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REL: &str = "fluxcd/dev-kubeconfig-sealed.yaml";

    fn raw(entries: &[(&str, &str, &str)]) -> String {
        entries
            .iter()
            .map(|(mode, status, path)| {
                format!(
                    ":100644 {mode} {} {} {status}\0{path}\0",
                    "a".repeat(40),
                    "b".repeat(40)
                )
            })
            .collect()
    }

    #[test]
    fn one_regular_file_at_the_spokes_path_is_ours() {
        assert_eq!(only_writes(&raw(&[("100644", "M", REL)]), REL), Ok(()));
        assert_eq!(only_writes(&raw(&[("100644", "A", REL)]), REL), Ok(()));
    }

    #[test]
    fn another_spokes_path_is_not() {
        let e = only_writes(
            &raw(&[("100644", "A", "fluxcd/prod-kubeconfig-sealed.yaml")]),
            REL,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("also fluxcd/prod-kubeconfig-sealed.yaml"),
            "{e}"
        );
    }

    #[test]
    fn an_extra_file_is_not() {
        let e = only_writes(
            &raw(&[("100644", "M", REL), ("100755", "A", "hook.sh")]),
            REL,
        )
        .unwrap_err();
        assert!(e.to_string().contains("also hook.sh"), "{e}");
    }

    #[test]
    fn a_symlink_a_deletion_or_nothing_is_not() {
        for (mode, status) in [("120000", "M"), ("000000", "D"), ("100755", "M")] {
            let e = only_writes(&raw(&[(mode, status, REL)]), REL).unwrap_err();
            assert!(
                e.to_string().contains("not written as a regular file"),
                "{e}"
            );
        }
        let e = only_writes("", REL).unwrap_err();
        assert!(e.to_string().contains("is not changed"), "{e}");
    }

    #[test]
    fn the_push_record_lives_outside_what_fetch_and_push_write() {
        assert_eq!(pushed_ref("spokekeeper/dev"), "refs/spokekeeper/pushed/dev");
        assert_eq!(
            pushed_ref("spokekeeper/sealing.cert"),
            "refs/spokekeeper/pushed/sealing.cert"
        );
        for fetched in [
            "refs/heads/",
            "refs/remotes/",
            "refs/tags/",
            "refs/replace/",
        ] {
            assert!(!pushed_ref("spokekeeper/dev").starts_with(fetched));
        }
    }

    #[test]
    fn exactly_one_parent() {
        let (h, p) = ("a".repeat(40), "b".repeat(40));
        assert_eq!(
            single_parent(&format!("{h} {p}\n")),
            Ok((h.clone(), p.clone()))
        );
        assert!(single_parent(&format!("{h}\n")).is_err(), "a root commit");
        let merge = single_parent(&format!("{h} {p} {p}\n")).unwrap_err();
        assert!(merge.to_string().contains("2 parents"), "{merge}");
    }
}
