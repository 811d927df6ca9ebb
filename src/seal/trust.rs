//! Whether a tick may seal to a sealing certificate: the rule, pure.
//!
//! The pinned sealing.cert lives in the fleet repo, so anyone who can push there could
//! replace it and have every spoke's admin credential re-sealed to their own key. A
//! certificate is confirmed only by something outside the repo: the hub's controller
//! serving it this tick, or `sealing.sha256` in the host's configuration. Without either,
//! the certificate the committed credentials record is trusted on first use, and a
//! different one is not.

use std::collections::BTreeSet;

/// What confirmed the certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    /// The hub's controller served it this tick.
    Hub,
    /// It is listed in `sealing.sha256`.
    Configured,
    /// No anchor configured; every committed credential is sealed to it already.
    Committed,
    /// No anchor configured and nothing committed: a fresh install, first use.
    FirstUse,
}

impl Anchor {
    pub fn describe(self) -> &'static str {
        match self {
            Anchor::Hub => "served by the hub's controller this tick",
            Anchor::Configured => "listed in sealing.sha256",
            Anchor::Committed => {
                "the one the committed credentials are sealed to (no hub or sealing.sha256 anchors it: set sealing.sha256)"
            }
            Anchor::FirstUse => {
                "first use: nothing committed yet, and no hub or sealing.sha256 anchors it (set sealing.sha256)"
            }
        }
    }
}

/// Why a certificate is not confirmed: the anchor that disagrees and what it expects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// `sealing.sha256` lists other fingerprints.
    Configured { expected: Vec<String> },
    /// No anchor configured, and committed credentials are sealed to other certificates.
    Committed { expected: Vec<String> },
}

impl Mismatch {
    pub fn expected(&self) -> &[String] {
        match self {
            Mismatch::Configured { expected } | Mismatch::Committed { expected } => expected,
        }
    }
}

/// The rule. `sha256` is the certificate the tick would seal to; `served`: the hub's
/// controller returned that same certificate this tick; `configured`: `sealing.sha256`;
/// `recorded`: the sealing fingerprints the committed credentials record.
pub fn confirm(
    sha256: &str,
    served: bool,
    configured: &[String],
    recorded: &BTreeSet<String>,
) -> Result<Anchor, Mismatch> {
    if served {
        return Ok(Anchor::Hub);
    }
    if !configured.is_empty() {
        return if configured.iter().any(|c| c == sha256) {
            Ok(Anchor::Configured)
        } else {
            Err(Mismatch::Configured {
                expected: configured.to_vec(),
            })
        };
    }
    let others: Vec<String> = recorded.iter().filter(|r| *r != sha256).cloned().collect();
    match (others.is_empty(), recorded.is_empty()) {
        (false, _) => Err(Mismatch::Committed { expected: others }),
        (true, true) => Ok(Anchor::FirstUse),
        (true, false) => Ok(Anchor::Committed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_hub_confirms_whatever_else_says() {
        let configured = vec!["sha256:old".to_string()];
        assert_eq!(
            confirm("sha256:new", true, &configured, &set(&["sha256:old"])),
            Ok(Anchor::Hub)
        );
    }

    #[test]
    fn sealing_sha256_decides_when_set_even_with_nothing_committed() {
        let configured = vec!["sha256:a".to_string(), "sha256:b".to_string()];
        assert_eq!(
            confirm("sha256:b", false, &configured, &set(&["sha256:a"])),
            Ok(Anchor::Configured)
        );
        assert_eq!(
            confirm("sha256:c", false, &configured, &set(&[])),
            Err(Mismatch::Configured {
                expected: configured.clone()
            })
        );
        // Matching the committed credentials does not override it.
        assert_eq!(
            confirm("sha256:c", false, &configured, &set(&["sha256:c"])),
            Err(Mismatch::Configured {
                expected: configured
            })
        );
    }

    #[test]
    fn without_anchors_a_certificate_other_than_the_committed_one_is_refused() {
        assert_eq!(
            confirm("sha256:new", false, &[], &set(&[])),
            Ok(Anchor::FirstUse)
        );
        assert_eq!(
            confirm("sha256:a", false, &[], &set(&["sha256:a"])),
            Ok(Anchor::Committed)
        );
        assert_eq!(
            confirm("sha256:new", false, &[], &set(&["sha256:a"])),
            Err(Mismatch::Committed {
                expected: vec!["sha256:a".into()]
            })
        );
        // Half re-sealed: the rest still records the other one.
        assert_eq!(
            confirm("sha256:new", false, &[], &set(&["sha256:a", "sha256:new"])),
            Err(Mismatch::Committed {
                expected: vec!["sha256:a".into()]
            })
        );
    }
}
