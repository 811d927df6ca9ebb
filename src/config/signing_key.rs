//! `repo.signing_key`: reading the OpenSSH key that signs every review commit. Checked
//! when the configuration is loaded, and by `repo::signing`, which signs and verifies
//! with it. The private key is read by ssh-keygen only; it never enters this process, a
//! log line or an error.

use std::path::Path;
use std::process::{Command, Stdio};

/// The fix every key error points at.
pub const KEYGEN: &str =
    "ssh-keygen -t ed25519 -N '' -C spokekeeper -f /etc/spokekeeper/signing-key";

#[derive(Debug, thiserror::Error)]
pub enum SigningKeyError {
    #[error(
        "repo.signing_key {path} does not exist: create it ({KEYGEN}) and point repo.signing_key at it"
    )]
    Missing { path: String },
    #[error(
        "repo.signing_key {path} cannot be read: {error} (spokekeeper's user must be able to read it)"
    )]
    Unreadable { path: String, error: std::io::Error },
    #[error(
        "repo.signing_key {path} has a passphrase: spokekeeper signs unattended; remove it (ssh-keygen -p -N '' -f {path}) or create a key without one ({KEYGEN})"
    )]
    Passphrase { path: String },
    #[error("repo.signing_key {path} is readable by other users: chmod 600 {path}")]
    Permissions { path: String },
    #[error(
        "repo.signing_key {path} is not an OpenSSH private key ({detail}): create one with {KEYGEN}"
    )]
    NotAKey { path: String, detail: String },
    #[error(
        "cannot write the allowed-signers file for repo.signing_key in {dir}: {error} (the temporary directory, TMPDIR, must be writable)"
    )]
    AllowedSigners { dir: String, error: std::io::Error },
    #[error("cannot run ssh-keygen to read repo.signing_key: {0} (install openssh-client)")]
    Spawn(std::io::Error),
}

/// The public half of the private key at `path` (`TYPE BASE64`), derived by
/// `ssh-keygen -y`; refuses a key with a passphrase (nothing could type it).
pub fn public_key(path: &Path) -> Result<String, SigningKeyError> {
    let shown = path.display().to_string();
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => {}
        Ok(_) => {
            return Err(SigningKeyError::NotAKey {
                path: shown,
                detail: "not a file".into(),
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SigningKeyError::Missing { path: shown });
        }
        Err(source) => {
            return Err(SigningKeyError::Unreadable {
                path: shown,
                error: source,
            });
        }
    }
    if path.extension().is_some_and(|e| e == "pub") {
        return Err(SigningKeyError::NotAKey {
            path: shown,
            detail: "a .pub file is the public half; name the private key, without .pub".into(),
        });
    }
    let out = Command::new("ssh-keygen")
        .args(["-y", "-P", "", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(SigningKeyError::Spawn)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(if stderr.contains("passphrase") {
            SigningKeyError::Passphrase { path: shown }
        } else if stderr.contains("bad permissions") {
            SigningKeyError::Permissions { path: shown }
        } else {
            let last = stderr.lines().last().unwrap_or("ssh-keygen failed");
            SigningKeyError::NotAKey {
                path: shown,
                detail: crate::text::one_line(last, 200),
            }
        });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.split_whitespace();
    match (fields.next(), fields.next()) {
        (Some(kind), Some(blob)) => Ok(format!("{kind} {blob}")),
        _ => Err(SigningKeyError::NotAKey {
            path: shown,
            detail: "ssh-keygen -y printed no public key".into(),
        }),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh ed25519 key at `dir/name` (and its `.pub`), for tests.
    pub(crate) fn keygen(dir: &Path, name: &str, passphrase: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        let ok = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-C", "t", "-N", passphrase, "-f"])
            .arg(&path)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        path
    }

    #[test]
    fn a_key_without_passphrase_gives_its_public_half() {
        let dir = tempfile::tempdir().unwrap();
        let key = keygen(dir.path(), "k", "");
        let public = std::fs::read_to_string(dir.path().join("k.pub")).unwrap();
        assert_eq!(
            public_key(&key).unwrap(),
            public
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }

    #[test]
    fn unusable_keys_are_refused_with_the_fix() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let err = |p: &Path| public_key(p).unwrap_err().to_string();
        let e = err(&dir.path().join("none"));
        assert!(
            e.contains("repo.signing_key") && e.contains("does not exist") && e.contains(KEYGEN),
            "{e}"
        );
        let e = err(&keygen(dir.path(), "pw", "secret-pass"));
        assert!(
            e.contains("has a passphrase") && e.contains("ssh-keygen -p"),
            "{e}"
        );
        let open = keygen(dir.path(), "open", "");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = err(&open);
        assert!(
            e.contains("readable by other users") && e.contains("chmod 600"),
            "{e}"
        );
        let e = err(&dir.path().join("pw.pub"));
        assert!(e.contains("not an OpenSSH private key"), "{e}");
        let junk = dir.path().join("junk");
        std::fs::write(&junk, "not a key\n").unwrap();
        std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = err(&junk);
        assert!(
            e.contains("not an OpenSSH private key") && e.contains(KEYGEN),
            "{e}"
        );
        assert!(err(dir.path()).contains("not a file"));
    }
}
