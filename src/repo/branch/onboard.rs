//! Onboarding branches (`spokekeeper add` in review mode): the new spoke's credential and
//! the Flux objects add writes beside it, in one signed commit whose trailer names each
//! file. Provenance trusts such a commit only when its diff is exactly what the trailer
//! names, for the branch's own spoke: new regular YAML files (never a modification,
//! deletion, symlink or submodule), and at most lines added to a kustomization.yaml
//! that lists them. The trailer narrows, the diff decides: a name in the trailer that the
//! diff does not match is a refusal, never an allowance.

use std::path::Path;

/// The trailer line naming the spoke an onboarding commit is for.
pub(crate) const ONBOARDS: &str = "Spokekeeper-Onboards: ";
/// A new regular file the commit adds (the credential among them).
pub(crate) const ADDS: &str = "Spokekeeper-Adds: ";
/// A kustomization.yaml the commit only adds lines to.
pub(crate) const LISTS: &str = "Spokekeeper-Lists: ";

/// Why a commit is not an onboarding one spokekeeper makes; each names the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OnboardingError {
    #[error("it onboards {onboards:?}, not {spoke:?}")]
    OtherSpoke { onboards: String, spoke: String },
    #[error("it does not add the spoke's credential {0}")]
    NoCredential(String),
    #[error("unreadable diff")]
    UnreadableDiff,
    #[error("{path} is not added as a new regular file (mode {old} -> {new}, status {status})")]
    NotNewFile {
        path: String,
        old: String,
        new: String,
        status: String,
    },
    #[error("{0} is not a YAML file outside dot-directories")]
    NotYaml(String),
    #[error("{path} is not a regular file changed in place (mode {old} -> {new}, status {status})")]
    NotInPlace {
        path: String,
        old: String,
        new: String,
        status: String,
    },
    #[error("{0} is changed, and only a kustomization.yaml may be")]
    NotKustomization(String),
    /// The path made one bounded line: it comes from the branch.
    #[error("it also changes {0}, which its trailer does not name")]
    Unnamed(String),
    #[error("its trailer names {0}, which it does not change")]
    Unchanged(String),
    #[error("{0} loses or changes lines (only lines listing new files may be added)")]
    LinesLost(String),
    /// The diff could not be read: git's error, said.
    #[error("{path}: {error}")]
    Diff { path: String, error: String },
}

/// A file written and committed beside a spoke's credential, only if the target branch
/// still holds what it was computed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Beside {
    /// Relative to the repo root.
    pub rel: std::path::PathBuf,
    pub bytes: Vec<u8>,
    /// What the target branch must hold there now (None: nothing; then it is created,
    /// never overwritten).
    pub was: Option<Vec<u8>>,
}

/// What an onboarding commit's trailer says it carries.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Onboarding {
    pub(crate) spoke: String,
    pub(crate) adds: Vec<String>,
    pub(crate) lists: Vec<String>,
}

impl Onboarding {
    /// The trailer of `message` (its last paragraph), when it names a spoke.
    pub(crate) fn parse(message: &str) -> Option<Onboarding> {
        let last = message.trim_end().rsplit("\n\n").next()?;
        let mut out = Onboarding::default();
        let mut spokes = 0;
        for line in last.lines() {
            if let Some(s) = line.strip_prefix(ONBOARDS) {
                out.spoke = s.to_string();
                spokes += 1;
            } else if let Some(p) = line.strip_prefix(ADDS) {
                out.adds.push(p.to_string());
            } else if let Some(p) = line.strip_prefix(LISTS) {
                out.lists.push(p.to_string());
            }
        }
        // Two spoke lines name no one spoke: such a trailer is an onboarding of nothing.
        match spokes {
            0 => None,
            1 => Some(out),
            _ => Some(Onboarding {
                spoke: String::new(),
                ..out
            }),
        }
    }

    /// The trailer, as the commit's last paragraph.
    pub(crate) fn trailer(&self) -> String {
        let mut t = format!("{ONBOARDS}{}\n", self.spoke);
        for a in &self.adds {
            t.push_str(&format!("{ADDS}{a}\n"));
        }
        for l in &self.lists {
            t.push_str(&format!("{LISTS}{l}\n"));
        }
        t
    }

    /// What `git diff-tree -r --no-renames --raw -z` output says the commit carries, as
    /// a trailer for `spoke`: additions and modifications (checked by [`check`]).
    pub(crate) fn of_diff(spoke: &str, raw: &str) -> Result<Onboarding, OnboardingError> {
        let mut out = Onboarding {
            spoke: spoke.to_string(),
            ..Onboarding::default()
        };
        for (meta, path) in entries(raw)? {
            match meta.as_slice() {
                [_, _, _, _, "M"] => out.lists.push(path.to_string()),
                _ => out.adds.push(path.to_string()),
            }
        }
        Ok(out)
    }
}

/// Whether `raw` (`git diff-tree -r --no-renames --raw -z` of the commit) carries
/// exactly what `o` names, for the spoke `spoke` whose credential is `rel`; else why not.
/// The lines-only rule for a listed kustomization.yaml is checked by the caller (it
/// needs the blobs).
pub(crate) fn check(
    raw: &str,
    rel: &str,
    spoke: &str,
    o: &Onboarding,
) -> Result<(), OnboardingError> {
    if o.spoke != spoke {
        return Err(OnboardingError::OtherSpoke {
            onboards: o.spoke.clone(),
            spoke: spoke.to_string(),
        });
    }
    if !o.adds.iter().any(|a| a == rel) {
        return Err(OnboardingError::NoCredential(rel.to_string()));
    }
    let mut seen = Vec::new();
    for (meta, path) in entries(raw)? {
        let (old, new, status) = match meta.as_slice() {
            [old, new, _, _, status] => (*old, *new, *status),
            _ => return Err(OnboardingError::UnreadableDiff),
        };
        if o.adds.iter().any(|a| a == path) {
            if (old, new, status) != ("000000", "100644", "A") {
                return Err(OnboardingError::NotNewFile {
                    path: path.to_string(),
                    old: old.to_string(),
                    new: new.to_string(),
                    status: status.to_string(),
                });
            }
            if !plain_yaml(path) {
                return Err(OnboardingError::NotYaml(path.to_string()));
            }
        } else if o.lists.iter().any(|l| l == path) {
            if (old, new, status) != ("100644", "100644", "M") {
                return Err(OnboardingError::NotInPlace {
                    path: path.to_string(),
                    old: old.to_string(),
                    new: new.to_string(),
                    status: status.to_string(),
                });
            }
            let name = Path::new(path).file_name().and_then(|n| n.to_str());
            if name != Some("kustomization.yaml") || !plain_yaml(path) {
                return Err(OnboardingError::NotKustomization(path.to_string()));
            }
        } else {
            return Err(OnboardingError::Unnamed(crate::text::one_line(path, 300)));
        }
        seen.push(path);
    }
    if let Some(missing) = o
        .adds
        .iter()
        .chain(&o.lists)
        .find(|n| !seen.contains(&n.as_str()))
    {
        return Err(OnboardingError::Unchanged(missing.clone()));
    }
    Ok(())
}

/// A `.yaml` path whose no component starts with a dot (.github/, .gitattributes, ...).
fn plain_yaml(path: &str) -> bool {
    path.ends_with(".yaml")
        && path
            .split('/')
            .all(|c| !c.is_empty() && !c.starts_with('.'))
}

/// `(metadata fields, path)` of each `diff-tree --raw -z` entry.
fn entries(raw: &str) -> Result<Vec<(Vec<&str>, &str)>, OnboardingError> {
    let fields: Vec<&str> = raw.split('\0').filter(|f| !f.is_empty()).collect();
    fields
        .chunks(2)
        .map(|pair| match pair {
            [meta, path] => Ok((meta.trim_start_matches(':').split(' ').collect(), *path)),
            _ => Err(OnboardingError::UnreadableDiff),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const REL: &str = "fluxcd/dev-kubeconfig-sealed.yaml";
    const OBJECTS: &str = "fluxcd/dev.yaml";
    const ROOT: &str = "fluxcd/kustomization.yaml";

    fn raw(entries: &[(&str, &str, &str, &str)]) -> String {
        entries
            .iter()
            .map(|(old, new, status, path)| {
                format!(
                    ":{old} {new} {} {} {status}\0{path}\0",
                    "a".repeat(40),
                    "b".repeat(40)
                )
            })
            .collect()
    }

    fn added(path: &str) -> (&str, &str, &str, &str) {
        ("000000", "100644", "A", path)
    }

    fn dev() -> Onboarding {
        Onboarding {
            spoke: "dev".into(),
            adds: vec![REL.into(), OBJECTS.into()],
            lists: vec![ROOT.into()],
        }
    }

    fn listed() -> (&'static str, &'static str, &'static str, &'static str) {
        ("100644", "100644", "M", ROOT)
    }

    #[test]
    fn the_trailer_reads_back_and_matches_the_diff_it_came_from() {
        let diff = raw(&[added(REL), added(OBJECTS), listed()]);
        let o = Onboarding::of_diff("dev", &diff).unwrap();
        assert_eq!(o, dev());
        let message = format!("dev: rotate kubeconfig\n\nfacts\n\n{}", o.trailer());
        assert_eq!(Onboarding::parse(&message), Some(dev()));
        assert_eq!(check(&diff, REL, "dev", &o), Ok(()));
        assert_eq!(Onboarding::parse("dev: rotate kubeconfig\n\nfacts\n"), None);
    }

    #[test]
    fn an_onboarding_for_another_spoke_is_not_this_ones() {
        let diff = raw(&[added(REL), added(OBJECTS), listed()]);
        let e = check(&diff, "fluxcd/prod-kubeconfig-sealed.yaml", "prod", &dev())
            .unwrap_err()
            .to_string();
        assert!(e.contains("onboards \"dev\", not \"prod\""), "{e}");
        let two = format!("x\n\n{ONBOARDS}dev\n{ONBOARDS}prod\n{ADDS}{REL}\n");
        let e = check(&diff, REL, "dev", &Onboarding::parse(&two).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("onboards \"\""), "{e}");
    }

    #[test]
    fn a_file_the_trailer_does_not_name_is_refused() {
        let diff = raw(&[
            added(REL),
            added(OBJECTS),
            listed(),
            added("fluxcd/extra.yaml"),
        ]);
        let e = check(&diff, REL, "dev", &dev()).unwrap_err().to_string();
        assert!(e.contains("also changes fluxcd/extra.yaml"), "{e}");
    }

    #[test]
    fn a_modified_deleted_symlinked_or_submodule_file_is_refused() {
        for (old, new, status) in [
            ("100644", "100644", "M"),
            ("100644", "000000", "D"),
            ("000000", "120000", "A"),
            ("000000", "160000", "A"),
            ("000000", "100755", "A"),
            ("100644", "120000", "T"),
        ] {
            let diff = raw(&[added(REL), (old, new, status, OBJECTS), listed()]);
            let e = check(&diff, REL, "dev", &dev()).unwrap_err().to_string();
            assert!(e.contains("is not added as a new regular file"), "{e}");
        }
        // A listed kustomization.yaml turned into a symlink or deleted is refused too.
        for (old, new, status) in [("100644", "120000", "T"), ("100644", "000000", "D")] {
            let diff = raw(&[added(REL), added(OBJECTS), (old, new, status, ROOT)]);
            let e = check(&diff, REL, "dev", &dev()).unwrap_err().to_string();
            assert!(e.contains("not a regular file changed in place"), "{e}");
        }
    }

    #[test]
    fn only_a_kustomization_yaml_may_change_and_only_yaml_outside_dot_dirs_be_added() {
        let mut o = dev();
        o.lists = vec!["README.md".into()];
        let diff = raw(&[
            added(REL),
            added(OBJECTS),
            ("100644", "100644", "M", "README.md"),
        ]);
        let e = check(&diff, REL, "dev", &o).unwrap_err().to_string();
        assert!(e.contains("only a kustomization.yaml may be"), "{e}");
        for path in [
            ".github/workflows/x.yaml",
            "fluxcd/.gitattributes",
            "hook.sh",
        ] {
            let mut o = dev();
            o.adds.push(path.into());
            let diff = raw(&[added(REL), added(OBJECTS), listed(), added(path)]);
            let e = check(&diff, REL, "dev", &o).unwrap_err().to_string();
            assert!(e.contains("not a YAML file outside dot-directories"), "{e}");
        }
    }

    #[test]
    fn a_named_file_the_commit_does_not_change_is_refused() {
        let diff = raw(&[added(REL), added(OBJECTS)]);
        let e = check(&diff, REL, "dev", &dev()).unwrap_err().to_string();
        assert!(
            e.contains("names fluxcd/kustomization.yaml, which it does not change"),
            "{e}"
        );
        let mut o = dev();
        o.adds.retain(|a| a != REL);
        let e = check(&raw(&[added(OBJECTS), listed()]), REL, "dev", &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not add the spoke's credential"), "{e}");
    }
}
