//! Secret material in memory: plaintext kubeconfigs, session keys, private keys.
//!
//! `SecretBytes` is zeroized on drop and prints nothing but its length, so a secret
//! that reaches a `{:?}` or a tracing field leaks nothing.

use std::fmt;

use secrecy::ExposeSecret;
use zeroize::Zeroizing;

/// Bytes that must never be printed, logged or written to disk in the clear.
///
/// Build it from a `Vec` whose final size is known: growing a `Vec` reallocates and
/// leaves the old buffer behind unzeroized. `with_capacity` + `extend` into
/// [`SecretBytes::with_capacity`] avoids that.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretBytes(Zeroizing<Vec<u8>>);

impl SecretBytes {
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(Zeroizing::new(bytes))
    }

    /// An empty buffer that will not reallocate before `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Self(Zeroizing::new(Vec::with_capacity(capacity)))
    }

    /// Appends without reallocating; returns false (and appends nothing) when the
    /// bytes do not fit in the reserved capacity.
    pub fn try_extend(&mut self, bytes: &[u8]) -> bool {
        if self.0.capacity() - self.0.len() < bytes.len() {
            return false;
        }
        self.0.extend_from_slice(bytes);
        true
    }

    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    pub(crate) fn expose_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Vec<u8>> for SecretBytes {
    fn from(bytes: Vec<u8>) -> Self {
        Self::new(bytes)
    }
}

impl From<String> for SecretBytes {
    fn from(s: String) -> Self {
        Self::new(s.into_bytes())
    }
}

impl ExposeSecret<[u8]> for SecretBytes {
    fn expose_secret(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretBytes(<redacted, {} bytes>)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_content() {
        let s = SecretBytes::from(b"client-key-data: c2VjcmV0".to_vec());
        let shown = format!("{s:?} {s:#?}");
        assert!(!shown.contains("client-key"), "{shown}");
        assert!(shown.contains("25 bytes"), "{shown}");
    }

    #[test]
    fn try_extend_never_reallocates() {
        let mut s = SecretBytes::with_capacity(4);
        let before = s.expose().as_ptr();
        assert!(s.try_extend(b"ab"));
        assert!(s.try_extend(b"cd"));
        assert!(!s.try_extend(b"e"));
        assert_eq!(s.expose(), b"abcd");
        assert_eq!(before, s.expose().as_ptr());
    }
}
