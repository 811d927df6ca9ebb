//! Reading a node's kubeconfig into memory: over SSH, or from a local file.
//!
//! The bytes are gathered in fixed-size zeroized chunks and copied once into a
//! [`SecretBytes`] of the exact size: no buffer is ever reallocated (which would leave
//! an unzeroized copy behind), and memory follows the file's size, not the cap. They
//! are never written to disk or logged.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use super::error::ExtractError;
use super::read::Chunks;
use super::{MAX_KUBECONFIG_BYTES, SshSettings, ssh};
use crate::secret::SecretBytes;

/// Where a spoke's kubeconfig comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `cat PATH` (or `sudo -n cat PATH`) on the node at `address`.
    Ssh {
        address: String,
        ssh: SshSettings,
        path: String,
    },
    /// A file on this host: running on the node itself, and the demo.
    Local { path: PathBuf },
    /// `read` through the federated node recipe's script, which knows its kubeconfig.
    Script { address: String, ssh: SshSettings },
}

/// Reads the kubeconfig from `source`, into memory only.
pub async fn extract(source: &Source) -> Result<SecretBytes, ExtractError> {
    match source {
        Source::Ssh { address, ssh, path } => read_over_ssh(address, ssh, path).await,
        Source::Local { path } => read_local(path).await,
        Source::Script { address, ssh } => super::node::read_with_script(address, ssh).await,
    }
}

/// `cat PATH` on the node (with `sudo -n` when `ssh.sudo`), host key checked strictly.
pub async fn read_over_ssh(
    address: &str,
    ssh: &SshSettings,
    path: &str,
) -> Result<SecretBytes, ExtractError> {
    ssh::read_file(address, ssh, path).await
}

/// Reads a regular file on this host, refusing anything over the cap.
pub async fn read_local(path: &Path) -> Result<SecretBytes, ExtractError> {
    let owned = path.to_owned();
    tokio::task::spawn_blocking(move || read_local_blocking(&owned))
        .await
        .unwrap_or_else(|e| {
            Err(ExtractError::Local {
                path: path.display().to_string(),
                reason: format!("reader task failed: {e}"),
            })
        })
}

fn read_local_blocking(path: &Path) -> Result<SecretBytes, ExtractError> {
    let shown = path.display().to_string();
    let fail = |reason: String| ExtractError::Local {
        path: shown.clone(),
        reason,
    };
    let mut file = File::open(path).map_err(|e| fail(e.to_string()))?;
    let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
    // A FIFO or a device could block forever or never end.
    if !meta.is_file() {
        return Err(fail("not a regular file".into()));
    }
    let too_large = || ExtractError::TooLarge {
        origin: shown.clone(),
        limit: MAX_KUBECONFIG_BYTES,
    };
    if meta.len() > MAX_KUBECONFIG_BYTES as u64 {
        return Err(too_large());
    }
    let mut out = Chunks::new(MAX_KUBECONFIG_BYTES);
    let mut buf = Zeroizing::new([0u8; 8192]);
    loop {
        let n = match file.read(&mut buf[..]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(fail(e.to_string())),
        };
        // The file may have grown since the size check.
        if !out.push(&buf[..n]) {
            return Err(too_large());
        }
    }
    if out.is_empty() {
        return Err(ExtractError::Empty { origin: shown });
    }
    Ok(out.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[tokio::test]
    async fn local_reads_a_file_and_refuses_big_empty_and_special_files() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("k3s.yaml");
        std::fs::write(&good, b"apiVersion: v1\nkind: Config\n").unwrap();
        let got = extract(&Source::Local { path: good }).await.unwrap();
        assert_eq!(got.expose(), b"apiVersion: v1\nkind: Config\n");

        let big = dir.path().join("big.yaml");
        let mut f = File::create(&big).unwrap();
        f.write_all(&vec![b'#'; MAX_KUBECONFIG_BYTES + 1]).unwrap();
        let err = read_local(&big).await.unwrap_err();
        assert!(err.to_string().contains("refused, not truncated"), "{err}");

        let empty = dir.path().join("empty.yaml");
        File::create(&empty).unwrap();
        assert!(matches!(
            read_local(&empty).await.unwrap_err(),
            ExtractError::Empty { .. }
        ));

        let err = read_local(Path::new("/dev/zero")).await.unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let err = read_local(&dir.path().join("missing")).await.unwrap_err();
        assert!(err.to_string().contains("No such file"), "{err}");
    }
}
