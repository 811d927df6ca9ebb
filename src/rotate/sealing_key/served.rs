//! The certificate the hub's controller last served to this clone, kept in
//! `.git/spokekeeper/hub-sealing-sha256`: never pushed, so out of fleet pushers' reach. A
//! tick that cannot reach the hub trusts only that one (see [`super::trust`]).

use std::path::{Path, PathBuf};

use crate::fingerprint::{Fingerprint, Sealing};
use crate::rotate::state;

const FILE: &str = "spokekeeper/hub-sealing-sha256";
/// What the value is called in errors.
const WHAT: &str = ".git/spokekeeper/hub-sealing-sha256";

/// Why the record cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub(super) enum ServedError {
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{0}: it is rewritten when the hub is reachable")]
    Malformed(state::AnnotationError),
    #[error("cannot record the hub's certificate in {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
}

pub(super) fn path(clone: &Path) -> PathBuf {
    clone.join(".git").join(FILE)
}

/// The fingerprint recorded, None when there is none; a malformed record is an error that
/// shows it escaped.
pub(super) fn last(clone: &Path) -> Result<Option<Fingerprint<Sealing>>, ServedError> {
    let path = path(clone);
    let bytes = match crate::fsutil::read_under(&path, clone) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ServedError::Read {
                path,
                error: source,
            });
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    state::fingerprint(WHAT, text.trim_end_matches('\n'))
        .map(Some)
        .map_err(ServedError::Malformed)
}

/// Records `sha256` as the hub's last-served certificate.
pub(super) fn record(clone: &Path, sha256: Fingerprint<Sealing>) -> Result<(), ServedError> {
    // Every tick that reaches the hub calls this; the file changes only on a renewal.
    if last(clone).ok().flatten() == Some(sha256) {
        return Ok(());
    }
    let path = path(clone);
    let dir = path.parent().expect("a file under .git");
    std::fs::create_dir_all(dir)
        .and_then(|()| crate::fsutil::write_atomic(&path, format!("{sha256}\n").as_bytes()))
        .map_err(|source| ServedError::Write {
            path,
            error: source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_reads_back_only_a_valid_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(last(dir.path()).unwrap(), None);
        let fp = Fingerprint::parse(&format!("sha256:{}", "a1".repeat(32))).unwrap();
        record(dir.path(), fp).unwrap();
        assert_eq!(last(dir.path()).unwrap(), Some(fp));
        std::fs::write(path(dir.path()), "sha256:\x1b[31mzz\n").unwrap();
        let err = last(dir.path()).unwrap_err().to_string();
        assert!(err.contains(WHAT) && !err.contains('\x1b'), "{err}");
    }
}
