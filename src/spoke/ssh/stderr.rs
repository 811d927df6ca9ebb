//! What the `ssh` process writes on stderr: its own messages (at LogLevel VERBOSE) and,
//! once authenticated, the remote command's. Read line by line: the line that ends the
//! connect phase is signalled, ssh's transfer totals dropped, the rest kept (bounded) for
//! classifying a failure.

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::oneshot;
use zeroize::Zeroizing;

/// Kept from stderr for error messages; the rest is drained and dropped.
const STDERR_KEEP: usize = 4096;
/// Longest line looked at for the marker; longer lines are kept as read.
const LINE_MAX: usize = 512;

/// ssh's VERBOSE line once the node accepted our key: the connect phase is over. (A
/// node's pre-auth banner could imitate it; that only moves the node to the command
/// timeout, which bounds it as well.)
pub(super) const AUTHENTICATED: &str = "Authenticated to ";

/// ssh's VERBOSE lines at exit, noise in an error message.
const DROPPED: [&str; 2] = ["Transferred: sent ", "Bytes per second: "];

/// What stderr said, once read to its end.
#[derive(Debug, Default)]
pub(super) struct Said {
    /// ssh's and the remote command's messages, bounded.
    pub(super) log: String,
    /// ssh logged that the node accepted our key.
    pub(super) authenticated: bool,
}

/// Reads `stderr` to its end; sends on `authenticated` at the marker line.
pub(super) async fn read<R: AsyncRead + Unpin>(
    mut stderr: R,
    authenticated: oneshot::Sender<()>,
) -> Said {
    let mut log = Log::new(Some(authenticated));
    let mut buf = Zeroizing::new([0u8; 1024]);
    while let Ok(n) = stderr.read(&mut buf[..]).await {
        if n == 0 {
            break;
        }
        log.push(&buf[..n]);
    }
    log.finish()
}

struct Log {
    kept: Vec<u8>,
    line: Zeroizing<Vec<u8>>,
    authenticated: Option<oneshot::Sender<()>>,
    seen: bool,
}

impl Log {
    fn new(authenticated: Option<oneshot::Sender<()>>) -> Self {
        Self {
            kept: Vec::with_capacity(STDERR_KEEP),
            line: Zeroizing::new(Vec::with_capacity(LINE_MAX)),
            authenticated,
            seen: false,
        }
    }

    fn push(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let (part, rest, ends) = match data.iter().position(|&b| b == b'\n') {
                Some(i) => (&data[..=i], &data[i + 1..], true),
                None => (data, &data[data.len()..], false),
            };
            data = rest;
            let room = LINE_MAX - self.line.len();
            if part.len() > room {
                // Too long for a line of ssh's own: keep it as it comes.
                self.flush_line();
                self.keep(part);
                continue;
            }
            self.line.extend_from_slice(part);
            if ends {
                self.end_line();
            }
        }
    }

    fn end_line(&mut self) {
        let text = String::from_utf8_lossy(&self.line);
        if !self.seen && text.starts_with(AUTHENTICATED) {
            self.seen = true;
            if let Some(tx) = self.authenticated.take() {
                let _ = tx.send(());
            }
            self.line.clear();
            return;
        }
        if DROPPED.iter().any(|d| text.starts_with(d)) {
            self.line.clear();
            return;
        }
        self.flush_line();
    }

    fn flush_line(&mut self) {
        let line = std::mem::take(&mut *self.line);
        self.keep(&line);
        let mut line = Zeroizing::new(line);
        line.clear();
        self.line = line;
    }

    fn keep(&mut self, data: &[u8]) {
        let room = STDERR_KEEP - self.kept.len();
        self.kept.extend_from_slice(&data[..data.len().min(room)]);
    }

    fn finish(mut self) -> Said {
        self.flush_line();
        Said {
            log: String::from_utf8_lossy(&self.kept).into_owned(),
            authenticated: self.seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_marker_is_signalled_and_the_totals_dropped_however_split() {
        let text = b"Authenticated to 127.0.0.5 ([127.0.0.5]:2222) using \"publickey\".\r\n\
            cat: /x: No such file or directory\n\
            Transferred: sent 2345, received 3456 bytes, in 0.1 seconds\r\n\
            Bytes per second: sent 9127.3, received 8939.3\r\n";
        for split in [1, 7, 64, text.len()] {
            let (tx, rx) = oneshot::channel();
            let chunks: Vec<&[u8]> = text.chunks(split).collect();
            let reader = tokio_test_reader(&chunks);
            let said = read(reader, tx).await;
            assert_eq!(
                said.log, "cat: /x: No such file or directory\n",
                "split {split}"
            );
            assert!(said.authenticated, "split {split}");
            assert!(rx.await.is_ok(), "split {split}");
        }
    }

    #[tokio::test]
    async fn without_the_marker_nothing_is_signalled_and_the_log_is_bounded() {
        let (tx, rx) = oneshot::channel();
        let long = vec![b'x'; 3 * STDERR_KEEP];
        let said = read(&long[..], tx).await;
        assert_eq!(said.log.len(), STDERR_KEEP);
        assert!(!said.authenticated);
        assert!(rx.await.is_err(), "no marker, sender dropped unsent");

        let (tx, rx) = oneshot::channel();
        let said = read(&b"Host key verification failed.\r\n"[..], tx).await;
        assert_eq!(said.log, "Host key verification failed.\r\n");
        assert!(rx.await.is_err());
    }

    /// A reader yielding `chunks` one per read.
    fn tokio_test_reader(chunks: &[&[u8]]) -> impl AsyncRead + Unpin {
        let joined: Vec<u8> = chunks.concat();
        let sizes: Vec<usize> = chunks.iter().map(|c| c.len()).collect();
        Chunked {
            data: joined,
            sizes,
            at: 0,
            next: 0,
        }
    }

    struct Chunked {
        data: Vec<u8>,
        sizes: Vec<usize>,
        at: usize,
        next: usize,
    }

    impl AsyncRead for Chunked {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if let Some(&n) = self.sizes.get(self.next) {
                let n = n.min(buf.remaining());
                let at = self.at;
                buf.put_slice(&self.data[at..at + n]);
                self.at += n;
                self.next += 1;
            }
            std::task::Poll::Ready(Ok(()))
        }
    }
}
