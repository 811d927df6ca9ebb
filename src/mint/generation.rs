//! The next minted generation: strictly above the recorded one (from the fleet repo) and
//! every one bound on the spoke, and never above [`MAX_GENERATION`]. Both sources are
//! hostile, so nothing saturates: a counter that cannot go up refuses the mint rather
//! than bind a user again whose certificate may have leaked.

use super::Bound;
use crate::config::CredentialMode;

/// The highest generation spokekeeper records or mints (2^32 - 1: one mint a minute for
/// 8000 years). A larger one was written by hand: saturating it would freeze the counter,
/// so every later mint would bind the same user again (docs/minted.md).
pub(crate) const MAX_GENERATION: u64 = u32::MAX as u64;

/// How the committed credential was made, as its annotations record it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordedCredential {
    pub mode: CredentialMode,
    /// Minted: the user the certificate was signed for.
    pub user: Option<String>,
    /// The last generation minted for this spoke (0: none).
    pub generation: u64,
}

impl RecordedCredential {
    /// The generation after the recorded one (a switch back to extracted revokes every
    /// generation below it). Recorded generations are at most [`MAX_GENERATION`].
    pub(crate) fn next_generation(&self) -> u64 {
        self.generation.saturating_add(1)
    }
}

/// Why no generation may be minted for a spoke; each names what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GenerationError {
    /// The committed file's credential annotations cannot be read: the recorded counter is
    /// unknown, and minting from a guess could bind a revoked user again.
    #[error(
        "refusing to mint for {spoke}: {file}: {detail}: spokekeeper cannot tell which generations \
         were minted, so it binds none; restore the value spokekeeper wrote (git log -p -- {file}; at \
         most 4294967295), commit and push (the spoke's generations: kubectl get clusterrolebinding -l \
         app.kubernetes.io/managed-by=spokekeeper -L spokekeeper.io/generation)"
    )]
    Annotation {
        spoke: String,
        file: String,
        detail: String,
    },
    /// The counter cannot go above both the recorded and the bound generations.
    #[error(
        "refusing to mint for {spoke}: the next generation would be above {MAX_GENERATION} (annotation \
         spokekeeper.io/credential-generation in {file} is {recorded}; the highest generation bound on \
         the spoke is {bound}{by}): one of them was set by hand; restore the annotation spokekeeper \
         wrote (git log -p -- {file}) and delete any ClusterRoleBinding labelled with a generation that \
         high on the spoke"
    )]
    Exhausted {
        spoke: String,
        file: String,
        recorded: u64,
        bound: u64,
        /// ` (ClusterRoleBinding NAME)`, or empty.
        by: String,
    },
}

/// The generation after `recorded` and every generation in `bound` (this hub's bindings
/// for the spoke entry).
pub(crate) fn next<'a>(
    spoke: &str,
    file: &str,
    recorded: u64,
    bound: impl IntoIterator<Item = &'a Bound>,
) -> Result<u64, GenerationError> {
    let top = bound
        .into_iter()
        .filter_map(|b| b.generation.map(|g| (g, &b.name)))
        .max_by_key(|(g, _)| *g);
    let highest = top.map_or(0, |(g, _)| g);
    recorded
        .max(highest)
        .checked_add(1)
        .filter(|&g| g <= MAX_GENERATION)
        .ok_or_else(|| GenerationError::Exhausted {
            spoke: spoke.to_string(),
            file: file.to_string(),
            recorded,
            bound: highest,
            by: top
                .map(|(_, n)| format!(" (ClusterRoleBinding {})", crate::text::one_line(n, 80)))
                .unwrap_or_default(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(name: &str, generation: Option<u64>) -> Bound {
        Bound {
            name: name.into(),
            generation,
            user: None,
            labels: Default::default(),
        }
    }

    fn bound(gs: &[u64]) -> Vec<Bound> {
        gs.iter()
            .map(|g| one(&format!("spokekeeper-hub-g{g}"), Some(*g)))
            .collect()
    }

    #[test]
    fn the_next_generation_is_above_the_recorded_and_every_bound_one() {
        assert_eq!(next("s", "f", 0, &[]), Ok(1));
        assert_eq!(next("s", "f", 7, &bound(&[3, 7])), Ok(8));
        // Wound back in the fleet repo: still above what the spoke binds.
        assert_eq!(next("s", "f", 2, &bound(&[5, 4])), Ok(6));
        // A binding without a readable label says nothing about the counter.
        assert_eq!(next("s", "f", 2, &[one("x", None)]), Ok(3));
        assert_eq!(next("s", "f", MAX_GENERATION - 1, &[]), Ok(MAX_GENERATION));
    }

    #[test]
    fn a_counter_that_cannot_go_up_refuses_instead_of_saturating() {
        // What the frozen annotation did: every mint the same generation and user.
        let e = next("edge", "clusters/edge.yaml", MAX_GENERATION, &bound(&[2])).unwrap_err();
        let text = e.to_string();
        for needle in [
            "refusing to mint for edge",
            "spokekeeper.io/credential-generation in clusters/edge.yaml is 4294967295",
            "git log -p -- clusters/edge.yaml",
        ] {
            assert!(text.contains(needle), "{needle:?} not in {text}");
        }
        let e = next("edge", "f", 3, &[one("spokekeeper-hub-g9", Some(u64::MAX))]).unwrap_err();
        assert!(
            e.to_string()
                .contains("is 18446744073709551615 (ClusterRoleBinding spokekeeper-hub-g9)"),
            "{e}"
        );
        assert!(next("edge", "f", 3, &bound(&[MAX_GENERATION])).is_err());
    }
}
