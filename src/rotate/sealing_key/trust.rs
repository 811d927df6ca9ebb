//! Whether a tick may seal to a sealing certificate: the rule, pure.
//!
//! The pinned sealing.cert lives in the fleet repo, so anyone who can push there could
//! replace it and have every spoke's admin credential re-sealed to their own key. A
//! certificate is confirmed only by something outside the repo: the hub's controller
//! serving it this tick, or `sealing.sha256` in the host's configuration. With `hub:`,
//! a tick that cannot reach the hub trusts only the certificate the hub last served to
//! this clone (recorded under `.git/`, never pushed). With no anchor at all the fleet repo
//! is trusted: the certificate the committed credentials record, or any on a fresh
//! install (no output exists yet).

use std::collections::BTreeSet;

use crate::fingerprint::{Fingerprint, Sealing};

/// What confirmed the certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Anchor {
    /// The hub's controller served it this tick.
    Hub,
    /// It is listed in `sealing.sha256`.
    Configured,
    /// The hub is unreachable; it is the one the hub last served to this clone.
    LastServed,
    /// No anchor configured; every committed credential is sealed to it already.
    Committed,
    /// No anchor configured and no spoke's output exists: a fresh install, first use.
    FirstUse,
}

impl Anchor {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Anchor::Hub => "served by the hub's controller this tick",
            Anchor::Configured => "listed in sealing.sha256",
            Anchor::LastServed => {
                "the one the hub's controller served last (the hub is unreachable this tick)"
            }
            Anchor::Committed => {
                "the one the committed credentials are sealed to (no hub or sealing.sha256 anchors it: set sealing.sha256)"
            }
            Anchor::FirstUse => {
                "first use: no spoke's output exists yet, and no hub or sealing.sha256 anchors it (set sealing.sha256)"
            }
        }
    }
}

/// What the hub's controller said this tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Controller {
    /// It served this very certificate.
    Served,
    /// No `hub:`, unreachable, or what it served was refused (broken, demo key).
    Silent,
    /// It served this other, valid certificate (which could not be pinned).
    Contradicts(Fingerprint<Sealing>),
}

/// What decides when neither the hub (this tick) nor `sealing.sha256` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fallback<'a> {
    /// `hub:` is configured: the certificate it last served to this clone (None: never).
    LastServed(Option<Fingerprint<Sealing>>),
    /// No `hub:`: what the committed outputs record.
    Committed(&'a Committed),
}

/// What the spokes' committed outputs say about the sealing certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Committed {
    /// The valid sealing fingerprints recorded.
    pub recorded: BTreeSet<Fingerprint<Sealing>>,
    /// Spokes whose output exists but records no valid fingerprint (unreadable,
    /// unparsable, unannotated): they may hide what it was sealed to.
    pub unknown: Vec<String>,
}

/// Why a certificate is not confirmed: the anchor that disagrees and what it expects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// The hub's controller serves another certificate.
    HubServes { served: Fingerprint<Sealing> },
    /// `sealing.sha256` lists other fingerprints.
    Configured { expected: Vec<Fingerprint<Sealing>> },
    /// The hub is unreachable and last served another certificate (empty: this clone
    /// never fetched one).
    LastServed { expected: Vec<Fingerprint<Sealing>> },
    /// No anchor configured, and committed credentials are sealed to other certificates.
    Committed { expected: Vec<Fingerprint<Sealing>> },
    /// No anchor configured, no valid record, and these spokes' outputs exist: not a
    /// fresh install, so not first use.
    Unknown { spokes: Vec<String> },
}

impl Mismatch {
    pub(crate) fn expected(&self) -> &[Fingerprint<Sealing>] {
        match self {
            Mismatch::Configured { expected }
            | Mismatch::LastServed { expected }
            | Mismatch::Committed { expected } => expected,
            Mismatch::Unknown { .. } | Mismatch::HubServes { .. } => &[],
        }
    }
}

/// The rule. `sha256` is the certificate the tick would seal to; `hub`: what the hub's
/// controller served this tick; `configured`: `sealing.sha256`.
pub(crate) fn confirm(
    sha256: Fingerprint<Sealing>,
    hub: Controller,
    configured: &[Fingerprint<Sealing>],
    fallback: Fallback<'_>,
) -> Result<Anchor, Mismatch> {
    match hub {
        Controller::Served => return Ok(Anchor::Hub),
        Controller::Contradicts(served) => {
            return Err(Mismatch::HubServes { served });
        }
        Controller::Silent => {}
    }
    if !configured.is_empty() {
        return if configured.contains(&sha256) {
            Ok(Anchor::Configured)
        } else {
            Err(Mismatch::Configured {
                expected: configured.to_vec(),
            })
        };
    }
    let committed = match fallback {
        Fallback::LastServed(Some(last)) if last == sha256 => return Ok(Anchor::LastServed),
        Fallback::LastServed(last) => {
            return Err(Mismatch::LastServed {
                expected: last.into_iter().collect(),
            });
        }
        Fallback::Committed(c) => c,
    };
    let others: Vec<Fingerprint<Sealing>> = committed
        .recorded
        .iter()
        .filter(|r| **r != sha256)
        .copied()
        .collect();
    if !others.is_empty() {
        Err(Mismatch::Committed { expected: others })
    } else if !committed.recorded.is_empty() {
        Ok(Anchor::Committed)
    } else if !committed.unknown.is_empty() {
        Err(Mismatch::Unknown {
            spokes: committed.unknown.clone(),
        })
    } else {
        Ok(Anchor::FirstUse)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(name: &str) -> Fingerprint<Sealing> {
        Fingerprint::of(name.as_bytes())
    }

    fn committed(v: &[Fingerprint<Sealing>], unknown: &[&str]) -> Committed {
        Committed {
            recorded: v.iter().copied().collect(),
            unknown: unknown.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn the_hub_confirms_whatever_else_says() {
        let configured = vec![fp("old")];
        let c = committed(&[fp("old")], &[]);
        assert_eq!(
            confirm(
                fp("new"),
                Controller::Served,
                &configured,
                Fallback::Committed(&c)
            ),
            Ok(Anchor::Hub)
        );
        assert_eq!(
            confirm(
                fp("new"),
                Controller::Served,
                &[],
                Fallback::LastServed(None)
            ),
            Ok(Anchor::Hub)
        );
    }

    #[test]
    fn sealing_sha256_decides_when_set_even_with_nothing_committed() {
        let configured = vec![fp("a"), fp("b")];
        let a = committed(&[fp("a")], &[]);
        assert_eq!(
            confirm(
                fp("b"),
                Controller::Silent,
                &configured,
                Fallback::Committed(&a)
            ),
            Ok(Anchor::Configured)
        );
        assert_eq!(
            confirm(
                fp("c"),
                Controller::Silent,
                &configured,
                Fallback::Committed(&committed(&[], &[]))
            ),
            Err(Mismatch::Configured {
                expected: configured.clone()
            })
        );
        // Matching the committed credentials, or what the hub served last, does not override it.
        let c = committed(&[fp("c")], &[]);
        assert_eq!(
            confirm(
                fp("c"),
                Controller::Silent,
                &configured,
                Fallback::Committed(&c)
            ),
            Err(Mismatch::Configured {
                expected: configured.clone()
            })
        );
        assert_eq!(
            confirm(
                fp("c"),
                Controller::Silent,
                &configured,
                Fallback::LastServed(Some(fp("c")))
            ),
            Err(Mismatch::Configured {
                expected: configured
            })
        );
    }

    #[test]
    fn without_anchors_a_certificate_other_than_the_committed_one_is_refused() {
        let none = committed(&[], &[]);
        assert_eq!(
            confirm(
                fp("new"),
                Controller::Silent,
                &[],
                Fallback::Committed(&none)
            ),
            Ok(Anchor::FirstUse)
        );
        let a = committed(&[fp("a")], &[]);
        assert_eq!(
            confirm(fp("a"), Controller::Silent, &[], Fallback::Committed(&a)),
            Ok(Anchor::Committed)
        );
        assert_eq!(
            confirm(fp("new"), Controller::Silent, &[], Fallback::Committed(&a)),
            Err(Mismatch::Committed {
                expected: vec![fp("a")]
            })
        );
        // Half re-sealed: the rest still records the other one.
        let half = committed(&[fp("a"), fp("new")], &[]);
        assert_eq!(
            confirm(
                fp("new"),
                Controller::Silent,
                &[],
                Fallback::Committed(&half)
            ),
            Err(Mismatch::Committed {
                expected: vec![fp("a")]
            })
        );
    }

    #[test]
    fn outputs_without_a_valid_record_are_not_a_fresh_install() {
        // Every output corrupted or unannotated: not first use.
        let unknown = committed(&[], &["dev", "test"]);
        assert_eq!(
            confirm(
                fp("new"),
                Controller::Silent,
                &[],
                Fallback::Committed(&unknown)
            ),
            Err(Mismatch::Unknown {
                spokes: vec!["dev".into(), "test".into()]
            })
        );
        // One valid record left decides; the unknown ones cannot widen it.
        let some = committed(&[fp("a")], &["test"]);
        assert_eq!(
            confirm(fp("a"), Controller::Silent, &[], Fallback::Committed(&some)),
            Ok(Anchor::Committed)
        );
        assert_eq!(
            confirm(
                fp("new"),
                Controller::Silent,
                &[],
                Fallback::Committed(&some)
            ),
            Err(Mismatch::Committed {
                expected: vec![fp("a")]
            })
        );
    }

    #[test]
    fn a_hub_serving_another_certificate_contradicts_every_other_anchor() {
        let configured = vec![fp("old")];
        let old = committed(&[fp("old")], &[]);
        let want = Err(Mismatch::HubServes { served: fp("new") });
        let hub = Controller::Contradicts(fp("new"));
        assert_eq!(
            confirm(fp("old"), hub, &configured, Fallback::Committed(&old)),
            want
        );
        assert_eq!(
            confirm(fp("old"), hub, &[], Fallback::Committed(&old)),
            want
        );
        assert_eq!(
            confirm(fp("old"), hub, &[], Fallback::LastServed(Some(fp("old")))),
            want
        );
    }

    #[test]
    fn with_a_hub_only_what_it_served_last_is_trusted_while_it_is_unreachable() {
        assert_eq!(
            confirm(
                fp("a"),
                Controller::Silent,
                &[],
                Fallback::LastServed(Some(fp("a")))
            ),
            Ok(Anchor::LastServed)
        );
        assert_eq!(
            confirm(
                fp("new"),
                Controller::Silent,
                &[],
                Fallback::LastServed(Some(fp("a")))
            ),
            Err(Mismatch::LastServed {
                expected: vec![fp("a")]
            })
        );
        // A clone that never reached the hub: nothing, not first use.
        assert_eq!(
            confirm(
                fp("new"),
                Controller::Silent,
                &[],
                Fallback::LastServed(None)
            ),
            Err(Mismatch::LastServed { expected: vec![] })
        );
    }
}
