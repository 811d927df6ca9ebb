//! Reading a node's kubeconfig into memory: over SSH, or from a local file.
//!
//! The bytes are gathered in fixed-size zeroized chunks and copied once into a
//! [`SecretBytes`] of the exact size: no buffer is ever reallocated (which would leave
//! an unzeroized copy behind), and memory follows the file's size, not the cap. They
//! are never written to disk or logged.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use tokio::io::{AsyncRead, AsyncReadExt};
use zeroize::Zeroizing;

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
}

#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error("invalid SSH settings for {target}: {reason}")]
    Settings { target: String, reason: String },
    #[error(
        "host key for {host} is not in {known_hosts}: refusing to trust it on first use. Check the node's \
         fingerprint out of band (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the node), then add \
         it with `ssh-keyscan -p {port} {address} >> {known_hosts}`"
    )]
    HostKeyUnknown {
        host: String,
        address: String,
        port: u16,
        known_hosts: String,
    },
    #[error(
        "host key for {host} has CHANGED: the node presents {presented}, which does not match {known_hosts}. \
         Either the node was reinstalled or the connection is being intercepted. Check the new fingerprint \
         on the node, then replace the entry: `ssh-keygen -R '{host}' -f {known_hosts}` and \
         `ssh-keyscan -p {port} {address} >> {known_hosts}`"
    )]
    HostKeyChanged {
        host: String,
        address: String,
        port: u16,
        known_hosts: String,
        presented: String,
    },
    #[error(
        "{target}: the node refused the key {identity} (publickey): add {identity}.pub to the authorized_keys \
         of user {user} on the node"
    )]
    AuthRefused {
        target: String,
        user: String,
        identity: String,
    },
    #[error("cannot reach {target}: {reason}")]
    Unreachable { target: String, reason: String },
    #[error(
        "{target}: no SSH session within {secs}s (the TCP connection may open, but sshd did not complete \
         the handshake): is the node overloaded, or sshd stopped?"
    )]
    ConnectTimeout { target: String, secs: f64 },
    #[error("{target}: reading {path} did not finish within {secs}s; the session was cut off")]
    CommandTimeout {
        target: String,
        path: String,
        secs: f64,
    },
    #[error(
        "{target}: sudo -n refused to run `cat {path}` as root for user {user}: add a NOPASSWD sudoers rule \
         for exactly that command (see `spokekeeper init`)"
    )]
    SudoRefused {
        target: String,
        user: String,
        path: String,
    },
    #[error(
        "{target}: {path} does not exist on the node: check the spoke's distro (k3s, rke2, kubeadm) or set \
         kubeconfig_path"
    )]
    NotFound { target: String, path: String },
    #[error(
        "{target}: user {user} may not read {path}: set `ssh.sudo: true` and add the sudoers rule from \
         `spokekeeper init`, or connect as root"
    )]
    PermissionDenied {
        target: String,
        user: String,
        path: String,
    },
    #[error("{target}: `{command}` failed ({status}): {detail}")]
    RemoteFailed {
        target: String,
        command: String,
        status: String,
        detail: String,
    },
    #[error(
        "{origin}: larger than the {limit}-byte limit for a kubeconfig; refused, not truncated (is the path \
         right?)"
    )]
    TooLarge { origin: String, limit: usize },
    #[error("{origin}: the kubeconfig is empty")]
    Empty { origin: String },
    #[error("ssh to {target} failed: {detail}")]
    Ssh { target: String, detail: String },
    #[error("cannot read {path}: {reason}")]
    Local { path: String, reason: String },
}

/// Reads the kubeconfig from `source`, into memory only.
pub async fn extract(source: &Source) -> Result<SecretBytes, ExtractError> {
    match source {
        Source::Ssh { address, ssh, path } => read_over_ssh(address, ssh, path).await,
        Source::Local { path } => read_local(path).await,
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
    if out.len == 0 {
        return Err(ExtractError::Empty { origin: shown });
    }
    Ok(out.finish())
}

/// Reads a stream to its end into a buffer reserved at `limit`; more is an error.
pub(crate) async fn read_capped<R: AsyncRead + Unpin>(
    reader: &mut R,
    limit: usize,
    origin: &str,
) -> Result<SecretBytes, ExtractError> {
    let mut out = Chunks::new(limit);
    let mut buf = Zeroizing::new([0u8; 8192]);
    loop {
        let n = reader
            .read(&mut buf[..])
            .await
            .map_err(|e| ExtractError::Ssh {
                target: origin.to_owned(),
                detail: format!("reading the output failed: {e}"),
            })?;
        if n == 0 {
            return Ok(out.finish());
        }
        if !out.push(&buf[..n]) {
            return Err(ExtractError::TooLarge {
                origin: origin.to_owned(),
                limit,
            });
        }
    }
}

/// Bytes gathered in chunks that never grow, up to `limit` in all.
struct Chunks {
    chunks: Vec<Zeroizing<Vec<u8>>>,
    len: usize,
    limit: usize,
}

impl Chunks {
    const CHUNK: usize = 16 * 1024;

    fn new(limit: usize) -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
            limit,
        }
    }

    /// False (and nothing kept) when `data` would go over the limit.
    fn push(&mut self, mut data: &[u8]) -> bool {
        if self.limit - self.len < data.len() {
            return false;
        }
        self.len += data.len();
        while !data.is_empty() {
            let room = self.chunks.last().map_or(0, |c| c.capacity() - c.len());
            if room == 0 {
                self.chunks
                    .push(Zeroizing::new(Vec::with_capacity(Self::CHUNK)));
                continue;
            }
            let (now, rest) = data.split_at(room.min(data.len()));
            self.chunks
                .last_mut()
                .expect("a chunk with room")
                .extend_from_slice(now);
            data = rest;
        }
        true
    }

    fn finish(self) -> SecretBytes {
        let mut out = SecretBytes::with_capacity(self.len);
        for chunk in &self.chunks {
            let fits = out.try_extend(chunk);
            debug_assert!(fits, "reserved exactly the gathered length");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn chunks_keep_order_and_size_exactly() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut c = Chunks::new(100_000);
        for piece in data.chunks(7000) {
            assert!(c.push(piece));
        }
        assert!(!c.push(b"x"));
        let out = c.finish();
        assert_eq!(out.expose(), &data[..]);
        assert_eq!(out.len(), 100_000);
    }

    #[tokio::test]
    async fn read_capped_accepts_exactly_the_limit_and_refuses_one_more() {
        let data = vec![b'a'; 20_000];
        let ok = read_capped(&mut &data[..], 20_000, "t").await.unwrap();
        assert_eq!(ok.expose(), &data[..]);
        let err = read_capped(&mut &data[..], 19_999, "t").await.unwrap_err();
        assert!(
            matches!(err, ExtractError::TooLarge { limit: 19_999, .. }),
            "{err}"
        );
    }

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
