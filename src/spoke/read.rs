//! Reading a stream or file from a node into memory: fixed-size zeroized chunks copied once
//! into a [`SecretBytes`] of the exact size, never over a limit.

use tokio::io::{AsyncRead, AsyncReadExt};
use zeroize::Zeroizing;

use super::error::ExtractError;
use crate::secret::SecretBytes;

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
pub(super) struct Chunks {
    chunks: Vec<Zeroizing<Vec<u8>>>,
    len: usize,
    limit: usize,
}

impl Chunks {
    const CHUNK: usize = 16 * 1024;

    /// Nothing gathered yet.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn new(limit: usize) -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
            limit,
        }
    }

    /// False (and nothing kept) when `data` would go over the limit.
    pub(super) fn push(&mut self, mut data: &[u8]) -> bool {
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

    pub(super) fn finish(self) -> SecretBytes {
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
}
