//! Staging what spokekeeper wrote exactly as written. Flux reads the stored blob, so
//! anything that makes git store or check out other bytes (a clean filter, a
//! `working-tree-encoding`, end-of-line conversion, `ident`) would publish a file nobody
//! checked and hide what the plaintext guard reads: such files are refused.

use std::ffi::OsStr;

use super::{Repo, RepoError};

/// The clone's own index.
const CLONE_INDEX: [(&str, &OsStr); 0] = [];

impl Repo {
    /// Stores `bytes` as a blob without filters and stages it at `rel` in the index
    /// `env` names (the clone's when empty); refuses when the staged blob is not
    /// byte-identical to `bytes`.
    pub(super) async fn stage(
        &self,
        rel: &str,
        bytes: &[u8],
        env: &[(&str, &OsStr)],
    ) -> Result<(), RepoError> {
        let blob = self
            .git_with(
                ["hash-object", "-w", "--no-filters", "--stdin"],
                &CLONE_INDEX,
                Some(bytes),
            )
            .await?;
        let info = format!("100644,{},{rel}", blob.trim());
        self.git_with(["update-index", "--add", "--cacheinfo", &info], env, None)
            .await?;
        let staged = self
            .git_raw(["cat-file", "blob", &format!(":0:{rel}")], env, None)
            .await?;
        if staged != bytes {
            return Err(RepoError::Altered { file: rel.into() });
        }
        Ok(())
    }

    /// Refuses `rel` when any git attribute applies to it (`.gitattributes` in any
    /// directory, `.git/info/attributes`, core.attributesFile, macros such as `binary`),
    /// read from the index `env` names when `cached`, else from the working tree; or
    /// when the clone's config converts line endings on checkout. Any attribute, not a
    /// list of dangerous ones: git grows new ones, and spokekeeper's outputs need none.
    pub(super) async fn no_conversion(
        &self,
        rel: &str,
        env: &[(&str, &OsStr)],
        cached: bool,
    ) -> Result<(), RepoError> {
        let found = self.attributes_of(&[rel], env, cached).await?;
        let endings = self.line_endings().await?;
        refuse_conversion(rel, &found, endings.as_ref())
    }

    /// The attributes that apply to each of `rels` (one `git check-attr` for all):
    /// path -> `(attribute, state)`, only paths with some.
    pub(super) async fn attributes_of(
        &self,
        rels: &[&str],
        env: &[(&str, &OsStr)],
        cached: bool,
    ) -> Result<Attributes, RepoError> {
        let mut args = vec!["check-attr", "-a", "-z", "--stdin"];
        if cached {
            args.push("--cached");
        }
        let mut input = Vec::new();
        for rel in rels {
            input.extend_from_slice(rel.as_bytes());
            input.push(0);
        }
        let out = self.git_with(args, env, Some(&input)).await?;
        let mut found = Attributes::new();
        for (path, attr, state) in attributes(&out) {
            found
                .entry(path.to_owned())
                .or_default()
                .push((attr.to_owned(), state.to_owned()));
        }
        Ok(found)
    }

    /// The clone's setting that rewrites line endings on checkout, if any: `(key=value, key)`.
    pub(super) async fn line_endings(&self) -> Result<Option<(String, String)>, RepoError> {
        let config = match self
            .git(["config", "-z", "--get-regexp", r"^core\.(autocrlf|eol)$"])
            .await
        {
            Ok(c) => c,
            // Exit 1 without a word: neither is set.
            Err(RepoError::Git { stderr, .. }) if stderr.is_empty() => String::new(),
            Err(e) => return Err(e),
        };
        for entry in config.split('\0').filter(|e| !e.is_empty()) {
            let (key, value) = entry.split_once('\n').unwrap_or((entry, "true"));
            if converts(key, value) {
                return Ok(Some((format!("{key}={value}"), key.into())));
            }
        }
        Ok(None)
    }
}

/// Attributes found per path (see [`Repo::attributes_of`]).
pub(super) type Attributes = std::collections::HashMap<String, Vec<(String, String)>>;

/// The refusal for `rel` when attributes apply to it (in `found`) or the clone converts
/// line endings (`endings`, from [`Repo::line_endings`]).
pub(super) fn refuse_conversion(
    rel: &str,
    found: &Attributes,
    endings: Option<&(String, String)>,
) -> Result<(), RepoError> {
    if let Some(found) = found.get(rel).filter(|f| !f.is_empty()) {
        let shown: Vec<String> = found.iter().map(|(a, v)| shown(a, v)).collect();
        let unset: Vec<String> = found.iter().map(|(a, _)| format!("!{a}")).collect();
        return Err(RepoError::Attributes {
            file: rel.into(),
            found: crate::text::one_line(&shown.join(" "), 300),
            unset: crate::text::one_line(&unset.join(" "), 300),
        });
    }
    if let Some((setting, key)) = endings {
        return Err(RepoError::LineEndings {
            file: rel.into(),
            setting: crate::text::one_line(setting, 100),
            key: key.clone(),
        });
    }
    Ok(())
}

/// `(path, attribute, state)` from `git check-attr -a -z` (`path NUL attr NUL state NUL`).
fn attributes(out: &str) -> Vec<(&str, &str, &str)> {
    let fields: Vec<&str> = out.split('\0').collect();
    fields
        .chunks_exact(3)
        .map(|f| (f[0], f[1], f[2]))
        .filter(|(_, _, state)| *state != "unspecified")
        .collect()
}

/// An attribute as a `.gitattributes` line would write it.
fn shown(attr: &str, state: &str) -> String {
    match state {
        "set" => attr.to_string(),
        "unset" => format!("-{attr}"),
        v => format!("{attr}={v}"),
    }
}

/// Whether a core.autocrlf / core.eol value makes checkout rewrite line endings.
/// core.safecrlf only warns or refuses a conversion, and staging converts nothing.
fn converts(key: &str, value: &str) -> bool {
    let value = value.to_ascii_lowercase();
    match key {
        "core.autocrlf" => !matches!(value.as_str(), "false" | "no" | "off" | "0" | ""),
        "core.eol" => value == "crlf",
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_attribute_is_reported_as_gitattributes_writes_it() {
        let out = "f.yaml\0binary\0set\0f.yaml\0diff\0unset\0f.yaml\0eol\0crlf\0";
        let found = attributes(out);
        assert_eq!(
            found,
            [
                ("f.yaml", "binary", "set"),
                ("f.yaml", "diff", "unset"),
                ("f.yaml", "eol", "crlf")
            ]
        );
        let shown: Vec<String> = found.iter().map(|(_, a, v)| shown(a, v)).collect();
        assert_eq!(shown, ["binary", "-diff", "eol=crlf"]);
        assert!(attributes("").is_empty());
    }

    #[test]
    fn only_settings_that_rewrite_line_endings_are_refused() {
        for (key, value) in [
            ("core.autocrlf", "true"),
            ("core.autocrlf", "input"),
            ("core.autocrlf", "Yes"),
            ("core.eol", "CRLF"),
        ] {
            assert!(converts(key, value), "{key}={value}");
        }
        for (key, value) in [
            ("core.autocrlf", "false"),
            ("core.autocrlf", "off"),
            ("core.eol", "lf"),
            ("core.eol", "native"),
        ] {
            assert!(!converts(key, value), "{key}={value}");
        }
    }
}
