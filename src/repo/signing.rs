//! `repo.signing_key`: the OpenSSH key that signs every review commit, and the
//! allowed-signers file (its public half alone) that a review branch's head must verify
//! against before spokekeeper trusts the branch. The private key is read by ssh-keygen
//! only (through git); it never enters this process, a log line or an error.

use std::path::{Path, PathBuf};
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
        "repo.signing_key {path} cannot be read: {source} (spokekeeper's user must be able to read it)"
    )]
    Unreadable {
        path: String,
        source: std::io::Error,
    },
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
        "cannot write the allowed-signers file for repo.signing_key in {dir}: {source} (the temporary directory, TMPDIR, must be writable)"
    )]
    AllowedSigners { dir: String, source: std::io::Error },
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
                source,
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

/// Signs review commits with the key and verifies review branches against it.
pub struct Signer {
    key: PathBuf,
    allowed: PathBuf,
    /// The public half the allowed-signers file holds now, and the key file's stamp
    /// when it was derived: ssh-keygen runs again only when the file changed.
    public: std::sync::Mutex<(String, Option<Stamp>)>,
    _dir: tempfile::TempDir,
}

impl Signer {
    /// Checks the key and writes its public half to a private allowed-signers file.
    pub fn new(key: &Path) -> Result<Signer, SigningKeyError> {
        let public = public_key(key)?;
        // git runs in the clone: a relative path would point inside it. Links are kept:
        // a Kubernetes Secret volume swaps `..data` to a new dated directory and deletes
        // the old one, so a resolved path would stop existing at the next update.
        let key = std::path::absolute(key).map_err(|source| SigningKeyError::Unreadable {
            path: key.display().to_string(),
            source,
        })?;
        let dir = tempfile::Builder::new()
            .prefix("spokekeeper-signers")
            .tempdir()
            .map_err(|source| SigningKeyError::AllowedSigners {
                dir: std::env::temp_dir().display().to_string(),
                source,
            })?;
        let allowed = dir.path().join("allowed_signers");
        std::fs::write(&allowed, allowed_signers(&public)).map_err(|source| {
            SigningKeyError::AllowedSigners {
                dir: dir.path().display().to_string(),
                source,
            }
        })?;
        let stamped = stamp(&key);
        Ok(Signer {
            key,
            allowed,
            public: std::sync::Mutex::new((public, stamped)),
            _dir: dir,
        })
    }

    /// `git -c ...` options that make `commit-tree -S` sign with the key.
    pub fn sign_args(&self) -> [String; 4] {
        [
            "-c".into(),
            "gpg.format=ssh".into(),
            "-c".into(),
            format!("user.signingkey={}", self.key.display()),
        ]
    }

    /// `git -c ...` options under which `verify-commit` succeeds only for a signature
    /// by the key (an unknown key's good signature is not enough).
    pub fn verify_args(&self) -> [String; 4] {
        self.follow_key();
        [
            "-c".into(),
            format!("gpg.ssh.allowedSignersFile={}", self.allowed.display()),
            "-c".into(),
            "gpg.minTrustLevel=fully".into(),
        ]
    }
}

impl Signer {
    /// A key replaced on disk (a rotated Secret) signs from now on: the allowed-signers
    /// file follows it, so spokekeeper's new commits verify. A key that cannot be read
    /// right now (mid-update) leaves the file as it is.
    fn follow_key(&self) {
        let Ok(mut held) = self.public.lock() else {
            return;
        };
        let now = stamp(&self.key);
        if now.is_some() && now == held.1 {
            return;
        }
        let Ok(public) = public_key(&self.key) else {
            return;
        };
        held.1 = now;
        if held.0 == public {
            return;
        }
        let next = self.allowed.with_extension("next");
        let written = std::fs::write(&next, allowed_signers(&public))
            .and_then(|()| std::fs::rename(&next, &self.allowed));
        match written {
            Ok(()) => {
                tracing::info!(key = %self.key.display(), "repo.signing_key changed on disk: verifying against the new key");
                held.0 = public;
            }
            Err(e) => {
                tracing::warn!(key = %self.key.display(), error = %e, "repo.signing_key changed on disk but the allowed-signers file cannot be rewritten")
            }
        }
    }
}

/// What identifies a version of the key file (links followed, as ssh-keygen reads it): a
/// rotated Secret volume points the path at a new file.
type Stamp = (u64, u64, std::time::SystemTime, u64);

fn stamp(key: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(key).ok()?;
    Some((m.dev(), m.ino(), m.modified().ok()?, m.len()))
}

/// One line: the principal, the namespace git signs in, the key.
fn allowed_signers(public: &str) -> String {
    format!("spokekeeper namespaces=\"git\" {public}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keygen(dir: &Path, name: &str, passphrase: &str) -> PathBuf {
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

    /// `git commit-tree -S` of the empty tree in a fresh repository in `dir`, signed
    /// with the signer's key; then whether it verifies against its allowed signers.
    fn signs_and_verifies(signer: &Signer, dir: &Path) -> (bool, bool) {
        let repo = tempfile::tempdir_in(dir).unwrap();
        let git = |args: &[String]| {
            Command::new("git")
                .arg("-C")
                .arg(repo.path())
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .unwrap()
        };
        assert!(git(&["init".into(), "--quiet".into()]).status.success());
        let empty = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
        let mut sign: Vec<String> = signer.sign_args().into();
        sign.extend(["commit-tree", "-S", empty, "-m", "x"].map(String::from));
        let out = git(&sign);
        if !out.status.success() {
            return (false, false);
        }
        let commit = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let mut verify: Vec<String> = signer.verify_args().into();
        verify.extend(["verify-commit".into(), commit]);
        (true, git(&verify).status.success())
    }

    /// A Kubernetes Secret volume: `signing-key -> ..data/signing-key`, `..data ->
    /// ..<dated>`; an update writes a new dated directory, swaps `..data` and deletes
    /// the old one.
    #[test]
    fn a_key_in_a_rotated_secret_volume_still_signs() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("volume");
        std::fs::create_dir(&volume).unwrap();
        std::fs::create_dir(volume.join("..dated1")).unwrap();
        keygen(&volume.join("..dated1"), "signing-key", "");
        symlink("..dated1", volume.join("..data")).unwrap();
        symlink("..data/signing-key", volume.join("signing-key")).unwrap();
        let signer = Signer::new(&volume.join("signing-key")).unwrap();
        assert_eq!(signs_and_verifies(&signer, dir.path()), (true, true));

        std::fs::create_dir(volume.join("..dated2")).unwrap();
        keygen(&volume.join("..dated2"), "signing-key", "");
        symlink("..dated2", volume.join("..data_tmp")).unwrap();
        std::fs::rename(volume.join("..data_tmp"), volume.join("..data")).unwrap();
        std::fs::remove_dir_all(volume.join("..dated1")).unwrap();
        assert_eq!(
            signs_and_verifies(&signer, dir.path()),
            (true, true),
            "signed with the new key, and verified against it"
        );
    }

    #[test]
    fn allowed_signers_names_only_the_git_namespace() {
        assert_eq!(
            allowed_signers("ssh-ed25519 AAAA"),
            "spokekeeper namespaces=\"git\" ssh-ed25519 AAAA\n"
        );
    }
}
