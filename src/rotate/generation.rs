//! The next minted generation: strictly above the recorded one (from the fleet repo) and
//! every one bound on the spoke, and never above [`MAX_GENERATION`]. Both sources are
//! hostile, so nothing saturates: a counter that cannot go up refuses the mint rather
//! than bind a user again whose certificate may have leaked.

use super::state::MAX_GENERATION;

/// A binding of this hub's for the spoke entry: its name and its generation label.
pub(crate) type Bound = (String, Option<u64>);

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

/// The generation after `recorded` and every generation in `bound`.
pub(crate) fn next(
    spoke: &str,
    file: &str,
    recorded: u64,
    bound: &[Bound],
) -> Result<u64, GenerationError> {
    let top = bound
        .iter()
        .filter_map(|(name, g)| g.map(|g| (g, name)))
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

    fn bound(gs: &[u64]) -> Vec<Bound> {
        gs.iter()
            .map(|g| (format!("spokekeeper-hub-g{g}"), Some(*g)))
            .collect()
    }

    #[test]
    fn the_next_generation_is_above_the_recorded_and_every_bound_one() {
        assert_eq!(next("s", "f", 0, &[]), Ok(1));
        assert_eq!(next("s", "f", 7, &bound(&[3, 7])), Ok(8));
        // Wound back in the fleet repo: still above what the spoke binds.
        assert_eq!(next("s", "f", 2, &bound(&[5, 4])), Ok(6));
        // A binding without a readable label says nothing about the counter.
        assert_eq!(next("s", "f", 2, &[("x".into(), None)]), Ok(3));
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
        let e = next(
            "edge",
            "f",
            3,
            &[("spokekeeper-hub-g9".into(), Some(u64::MAX))],
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("is 18446744073709551615 (ClusterRoleBinding spokekeeper-hub-g9)"),
            "{e}"
        );
        assert!(next("edge", "f", 3, &bound(&[MAX_GENERATION])).is_err());
    }
}
