//! `repo.signing_key`: the OpenSSH key that signs every review commit, and the
//! allowed-signers file (its public half alone) that a review branch's head must verify
//! against before spokekeeper trusts the branch. The private key is read by ssh-keygen
//! only (through git); it never enters this process, a log line or an error.

use std::path::{Path, PathBuf};

pub use crate::config::signing_key::{KEYGEN, SigningKeyError, public_key};

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
            error: source,
        })?;
        let dir = tempfile::Builder::new()
            .prefix("spokekeeper-signers")
            .tempdir()
            .map_err(|source| SigningKeyError::AllowedSigners {
                dir: std::env::temp_dir().display().to_string(),
                error: source,
            })?;
        let allowed = dir.path().join("allowed_signers");
        std::fs::write(&allowed, allowed_signers(&public)).map_err(|source| {
            SigningKeyError::AllowedSigners {
                dir: dir.path().display().to_string(),
                error: source,
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
    pub(crate) fn sign_args(&self) -> [String; 4] {
        [
            "-c".into(),
            "gpg.format=ssh".into(),
            "-c".into(),
            format!("user.signingkey={}", self.key.display()),
        ]
    }

    /// `git -c ...` options under which `verify-commit` succeeds only for a signature
    /// by the key (an unknown key's good signature is not enough).
    pub(crate) fn verify_args(&self) -> [String; 4] {
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
    use crate::config::signing_key::tests::keygen;
    use std::process::Command;

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
