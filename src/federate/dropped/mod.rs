//! A spoke whose file trusts no issuer (`spokekeeper revoke --drop-issuer`): the file
//! that says so, and the marker on its first line that every later rotation reads back
//! from the node before it writes, so that only `rotate SPOKE --force` trusts the hub
//! again. The node keeps the marker because the file is where the trust is: a pusher of
//! the fleet repo cannot undo the drop, and whoever rewrites the file changed the trust
//! anyway.
//!
//! k8s.io/apiserver v0.37.2 pkg/apis/apiserver/validation: "We allow 0 authenticators
//! in the authentication configuration" (so since 1.30), and the `anonymous` block is
//! validated on its own: the API server loads a file with no `jwt` entry and its probes
//! keep working.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::authn::{self, TooOld, Version};
use crate::config::Distro;

/// The first line of a dropped file, before the time of the drop.
pub const MARKER: &str = "# spokekeeper-issuer-dropped: ";
/// The most the node's script prints of the file's first line; more is not its answer.
pub const MAX_HEADER: usize = crate::spoke::recipe::MAX_AUTHENTICATION_CONFIG_HEADER_BYTES;

/// When the hub's issuer was dropped, as the marker says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dropped {
    pub at: OffsetDateTime,
}

impl Dropped {
    /// The drop's time, RFC 3339 in UTC to the second (as the marker writes it).
    pub fn at_text(&self) -> String {
        format_at(self.at)
    }
}

fn format_at(at: OffsetDateTime) -> String {
    let at = at
        .to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .unwrap_or(at);
    at.format(&Rfc3339).unwrap_or_default()
}

/// A first line that says a drop but cannot be read as one.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct BadMarker {
    pub why: String,
}

/// The file for a spoke of `distro` running `version` that trusts no issuer, dropped at
/// `at`: the marker, `jwt: []`, and the distribution's `anonymous` block.
pub fn render(distro: Distro, version: Version, at: OffsetDateTime) -> Result<String, TooOld> {
    let api = authn::api_version(version)?;
    let mut out = format!(
        "{MARKER}{}\n\
         # Written by `spokekeeper revoke --drop-issuer`: this API server trusts no hub token.\n\
         # spokekeeper does not write the hub's trust back until `spokekeeper rotate SPOKE --force`.\n\
         apiVersion: apiserver.config.k8s.io/{api}\n\
         kind: AuthenticationConfiguration\n\
         jwt: []\n",
        format_at(at)
    );
    out.push_str(&authn::anonymous_block(distro, version));
    Ok(out)
}

/// What the node's script printed of the file's first line (`bytes`, hostile): a drop,
/// no drop (any other line, or no file), or a line that starts as the marker and is not
/// one (refused rather than guessed).
pub fn parse(bytes: &[u8]) -> Result<Option<Dropped>, BadMarker> {
    let bad = |why: String| BadMarker { why };
    if bytes.len() > MAX_HEADER {
        return Err(bad(format!(
            "the node printed {} bytes for the file's first line, more than the script's {MAX_HEADER}",
            bytes.len()
        )));
    }
    let line = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    if !line.starts_with(MARKER.as_bytes()) {
        return Ok(None);
    }
    let rest = &line[MARKER.len()..];
    let shown = || crate::text::one_line(&String::from_utf8_lossy(rest), 40);
    let text = std::str::from_utf8(rest)
        .map_err(|_| bad(format!("the drop marker's time {:?} is not UTF-8", shown())))?;
    // Exactly YYYY-MM-DDTHH:MM:SSZ, as written: nothing before, after or between.
    let at = OffsetDateTime::parse(text, &Rfc3339)
        .ok()
        .filter(|at| text.len() == 20 && format_at(*at) == text)
        .ok_or_else(|| {
            bad(format!(
                "the drop marker's time {:?} is not YYYY-MM-DDTHH:MM:SSZ",
                shown()
            ))
        })?;
    Ok(Some(Dropped { at }))
}

#[cfg(test)]
mod tests;
