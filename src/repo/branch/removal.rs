//! Removal branches (review mode): one signed commit on the target branch that deletes
//! one file, a federated spoke's old Secret once nothing reads it, and nothing else. Its
//! message ends with a trailer naming the file, so it is never mistaken for a rotation
//! (which writes the file) or an onboarding commit (which adds files).

use std::path::Path;

use super::{BranchState, Repo, RepoError, Untrusted};

/// The last line of a removal commit's message: `Spokekeeper-Removes: <file>`.
pub const REMOVES: &str = "Spokekeeper-Removes: ";

impl Repo {
    /// One signed commit on top of the remote target branch that deletes `rel` and
    /// nothing else, its message ending with the [`REMOVES`] trailer; None when the
    /// target branch does not hold `rel`.
    pub async fn commit_removal(
        &self,
        rel: &Path,
        message: &str,
    ) -> Result<Option<String>, RepoError> {
        self.inside(rel)?;
        let base = self.target_commit().await?;
        if self.show(&base, rel).await?.is_none() {
            return Ok(None);
        }
        let rel_s = rel.to_string_lossy();
        let index = tempfile::Builder::new()
            .prefix("spokekeeper-index")
            .tempfile_in(self.path.join(".git"))
            .map_err(|e| self.io(&self.path, e))?;
        let env = [("GIT_INDEX_FILE", index.path().as_os_str())];
        // git wants an index file it wrote itself, not an empty one.
        let _ = std::fs::remove_file(index.path());
        self.git_with(["read-tree", &base], &env, None).await?;
        let rm = ["rm", "--cached", "--quiet", "--", &rel_s];
        self.git_with(rm, &env, None).await?;
        let tree = self.git_with(["write-tree"], &env, None).await?;
        let raw = self.raw_diff(&base, tree.trim()).await?;
        only_deletes(&raw, &rel_s).map_err(|e| RepoError::NotRemoval {
            file: rel_s.to_string(),
            detail: e.to_string(),
        })?;
        let message = format!("{}\n\n{REMOVES}{rel_s}\n", message.trim_end());
        self.sign_commit(tree.trim(), &base, &message)
            .await
            .map(Some)
    }

    /// Whether `branch` at `head` is spokekeeper's own removal of `rel`: signed with
    /// repo.signing_key, one parent in the remote target branch, deleting `rel` (a
    /// regular file) and nothing else, its message ending with the trailer naming `rel`,
    /// and exactly the commit this clone last pushed to `branch`.
    pub async fn removal_provenance(
        &self,
        branch: &str,
        head: &str,
        rel: &Path,
    ) -> Result<(), Untrusted> {
        let (full, parent) = self.signed_on_target(head).await?;
        let rel_s = rel.to_string_lossy();
        let message = self
            .commit_message(&full)
            .await
            .map_err(|e| Untrusted::Unreadable(e.to_string()))?;
        if !trailer_names(&message, &rel_s) {
            return Err(Untrusted::NoRemovalTrailer {
                trailer: format!("{REMOVES}{rel_s}"),
            });
        }
        let raw = self
            .raw_diff(&parent, &full)
            .await
            .map_err(|e| Untrusted::Unreadable(e.to_string()))?;
        only_deletes(&raw, &rel_s)?;
        self.last_pushed(branch, &full).await
    }

    /// What the removal branch `branch` at `head` is: merged when `head` is in the
    /// target branch, or when it is provably ours and the target no longer holds `rel`
    /// (a squash merge); else open, with its [`Repo::removal_provenance`].
    pub(crate) async fn removal_state(&self, branch: &str, head: &str, rel: &Path) -> BranchState {
        let upstream = self.upstream();
        let ancestor = ["merge-base", "--is-ancestor", head, &upstream];
        if self.git(ancestor).await.is_ok() {
            return BranchState::Merged;
        }
        let proven = self.removal_provenance(branch, head, rel).await;
        if proven.is_ok() && !self.on_target(rel).await {
            return BranchState::Merged;
        }
        BranchState::Open(proven)
    }

    /// The removal this clone last pushed to `branch`, once it has landed: the target
    /// branch no longer holds `rel` (the pull request merged, however), or holds the
    /// commit. Read from the clone's own record, so a branch the forge deleted on merge
    /// still counts. None: nothing recorded, or the target still holds `rel`.
    pub async fn removal_landed(&self, branch: &str, rel: &Path) -> Option<String> {
        let recorded = self.pushed(branch).await?;
        let upstream = self.upstream();
        let ancestor = ["merge-base", "--is-ancestor", &recorded, &upstream];
        let landed = self.git(ancestor).await.is_ok() || !self.on_target(rel).await;
        landed.then_some(recorded)
    }

    /// `rel` as the removed commit's parent held it: the file the removal took away.
    pub async fn removed_file(
        &self,
        commit: &str,
        rel: &Path,
    ) -> Result<Option<Vec<u8>>, RepoError> {
        self.show(&format!("{commit}^"), rel).await
    }

    /// Every branch this clone holds a push record for, named as pushed (one git
    /// process, however many spokes).
    pub async fn pushed_branches(&self) -> Result<Vec<String>, RepoError> {
        let prefix = super::PUSHED_PREFIX;
        let out = self
            .git([
                "for-each-ref",
                "--format=%(refname)",
                prefix.trim_end_matches('/'),
            ])
            .await?;
        Ok(out
            .lines()
            .filter_map(|r| r.strip_prefix(prefix))
            .map(|tail| format!("{}{tail}", super::BRANCH_PREFIX))
            .collect())
    }

    /// Drops the clone's record of what it pushed to `branch`: the work it stood for is
    /// done (a landed removal's bindings deleted), so no later tick does it again.
    pub async fn forget_pushed(&self, branch: &str) -> Result<(), RepoError> {
        let r = super::pushed_ref(branch);
        self.git(["update-ref", "-d", &r]).await.map(|_| ())
    }

    /// Whether the remote target branch holds `rel`.
    async fn on_target(&self, rel: &Path) -> bool {
        let spec = format!("{}:{}", self.upstream(), rel.to_string_lossy());
        self.git(["cat-file", "-e", &spec]).await.is_ok()
    }
}

/// Whether the message's last line is the trailer naming `rel`.
fn trailer_names(message: &str, rel: &str) -> bool {
    message.trim_end().lines().last() == Some(&format!("{REMOVES}{rel}"))
}

/// Whether `git diff-tree -r --no-renames --raw -z` output deletes exactly `rel`, a
/// regular file, and changes nothing else.
fn only_deletes(raw: &str, rel: &str) -> Result<(), Untrusted> {
    super::diff::only_changes(raw, rel, "deleted as a regular file", |meta| {
        matches!(meta, ["100644", "000000", _, _, "D"])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REL: &str = "fluxcd/edge-kubeconfig-sealed.yaml";

    fn raw(entries: &[(&str, &str, &str, &str)]) -> String {
        entries
            .iter()
            .map(|(from, to, status, path)| {
                format!(
                    ":{from} {to} {} {} {status}\0{path}\0",
                    "a".repeat(40),
                    "0".repeat(40)
                )
            })
            .collect()
    }

    #[test]
    fn the_one_regular_file_deleted_is_a_removal() {
        let ok = raw(&[("100644", "000000", "D", REL)]);
        assert_eq!(only_deletes(&ok, REL), Ok(()));
    }

    #[test]
    fn another_file_deleted_or_changed_beside_it_is_not() {
        let extra = raw(&[
            ("100644", "000000", "D", REL),
            ("100644", "100644", "M", "fluxcd/edge-kubeconfig.yaml"),
        ]);
        let e = only_deletes(&extra, REL).unwrap_err();
        assert!(
            e.to_string().contains("also fluxcd/edge-kubeconfig.yaml"),
            "{e}"
        );
        let other = raw(&[(
            "100644",
            "000000",
            "D",
            "fluxcd/prod-kubeconfig-sealed.yaml",
        )]);
        let e = only_deletes(&other, REL).unwrap_err();
        assert!(e.to_string().contains("also fluxcd/prod-"), "{e}");
    }

    #[test]
    fn a_write_a_symlink_or_nothing_is_not_a_removal() {
        for (from, to, status) in [
            ("100644", "100644", "M"),
            ("000000", "100644", "A"),
            ("120000", "000000", "D"),
        ] {
            let e = only_deletes(&raw(&[(from, to, status, REL)]), REL).unwrap_err();
            assert!(
                e.to_string().contains("not deleted as a regular file"),
                "{e}"
            );
        }
        let e = only_deletes("", REL).unwrap_err();
        assert!(e.to_string().contains("is not changed"), "{e}");
    }

    #[test]
    fn only_a_last_line_naming_the_file_is_the_trailer() {
        let msg = format!("edge: remove\n\nwhy\n\n{REMOVES}{REL}\n");
        assert!(trailer_names(&msg, REL));
        assert!(!trailer_names(&msg, "fluxcd/other.yaml"));
        let moved = format!("edge: remove\n\n{REMOVES}{REL}\nmore\n");
        assert!(!trailer_names(&moved, REL), "not the last line");
        assert!(!trailer_names("edge: remove\n", REL));
    }
}
