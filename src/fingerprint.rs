//! SHA-256 fingerprints, one type per kind of thing hashed. A CA's fingerprint, a sealing
//! certificate's and a kubeconfig's content hash are different types, so one can never be
//! compared with, stored as or recorded in place of another; and every value is a whole
//! digest, so text from a hand-edited annotation is checked once, where it is read.

use std::fmt;
use std::marker::PhantomData;

use sha2::{Digest, Sha256};

/// What was hashed, and how its fingerprint is written.
pub trait Kind {
    /// Written before the hex digits: `sha256:` for certificates and keys.
    const PREFIX: &'static str;
}

/// A kind whose fingerprint is the SHA-256 of one certificate's DER.
pub trait CertKind: Kind {}

macro_rules! kinds {
    ($($(#[$doc:meta])* $name:ident = $prefix:literal $(, $cert:ident)?;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {}
        impl Kind for $name {
            const PREFIX: &'static str = $prefix;
        }
        $(impl $cert for $name {})?
    )*};
}

kinds! {
    /// Any certificate, in no particular role (`inspect`, error messages).
    Cert = "sha256:", CertKind;
    /// A CA certificate a kubeconfig trusts (`spokekeeper.io/ca-sha256`).
    Ca = "sha256:", CertKind;
    /// A kubeconfig's client certificate (`spokekeeper.io/client-cert-sha256`).
    ClientCert = "sha256:", CertKind;
    /// The certificate a spoke's API server serves.
    Serving = "sha256:", CertKind;
    /// The Sealed Secrets controller's certificate, or its bare public key when only that
    /// is given (`sealing.sha256`, `spokekeeper.io/sealing-cert-sha256`).
    Sealing = "sha256:", CertKind;
    /// A sops output's age recipients: the distinct `age1...` strings sorted, each ended
    /// by a newline (`seal --age-sha256`).
    AgeRecipients = "sha256:";
    /// Every CA of a bundle, DER concatenated in order (`spokekeeper.io/ca-bundle-sha256`).
    CaBundle = "sha256:";
    /// A public key's SPKI DER.
    PublicKey = "sha256:";
    /// An RSA modulus, big-endian without leading zeros: how the demo key is recognised
    /// in any wrapping.
    RsaModulus = "";
    /// The sanitized kubeconfig's YAML (`spokekeeper.io/content-sha256`): bare hex, as
    /// earlier versions recorded it.
    Content = "";
}

/// The SHA-256 of something of kind `K`.
pub struct Fingerprint<K> {
    digest: [u8; 32],
    kind: PhantomData<fn() -> K>,
}

/// Text that is not a fingerprint of the expected form.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected {want}")]
pub struct ParseError {
    /// What a valid value looks like, for the message.
    pub want: &'static str,
}

impl<K: Kind> Fingerprint<K> {
    /// The fingerprint of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self::from_digest(Sha256::digest(bytes).into())
    }

    /// From the digest itself.
    pub(crate) const fn from_digest(digest: [u8; 32]) -> Self {
        Self {
            digest,
            kind: PhantomData,
        }
    }

    /// Strict: the kind's prefix and 64 lowercase hex digits, as [`fmt::Display`] writes it.
    /// For values read back from outside (annotations, local state, flags).
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let err = ParseError {
            want: if K::PREFIX.is_empty() {
                "64 lowercase hex digits"
            } else {
                "\"sha256:\" and 64 lowercase hex digits"
            },
        };
        let hex = text.strip_prefix(K::PREFIX).ok_or(err.clone())?;
        let bytes = hex.as_bytes();
        if bytes.len() != 64 {
            return Err(err);
        }
        let mut digest = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            match (nibble(pair[0]), nibble(pair[1])) {
                (Some(h), Some(l)) => digest[i] = h << 4 | l,
                _ => return Err(err),
            }
        }
        Ok(Self::from_digest(digest))
    }

    /// The 64 lowercase hex digits, without the prefix.
    pub fn hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(64);
        for b in self.digest {
            s.push(HEX[usize::from(b >> 4)] as char);
            s.push(HEX[usize::from(b & 15)] as char);
        }
        s
    }

    /// `sha256:ab12cd34..` for messages: enough to tell two apart at a glance.
    pub fn short(&self) -> String {
        format!("{}{}..", K::PREFIX, &self.hex()[..8])
    }
}

impl<K: CertKind> Fingerprint<K> {
    /// The same certificate's fingerprint in another role: where a certificate seen in
    /// one place is recorded as another (a kubeconfig's first CA as `ca-sha256`).
    pub(crate) fn as_kind<J: CertKind>(self) -> Fingerprint<J> {
        Fingerprint::from_digest(self.digest)
    }
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

// By hand, not derived: a derive would ask `K` for the trait, and the kinds are never
// values.
impl<K> Clone for Fingerprint<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for Fingerprint<K> {}
impl<K> PartialEq for Fingerprint<K> {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}
impl<K> Eq for Fingerprint<K> {}
impl<K> PartialOrd for Fingerprint<K> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> Ord for Fingerprint<K> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.digest.cmp(&other.digest)
    }
}
impl<K> std::hash::Hash for Fingerprint<K> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.digest.hash(state);
    }
}

impl<K: Kind> fmt::Display for Fingerprint<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", K::PREFIX, self.hex())
    }
}

impl<K: Kind> fmt::Debug for Fingerprint<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// As its text: the JSON and YAML outputs keep the strings they always had.
impl<K: Kind> serde::Serialize for Fingerprint<K> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de, K: Kind> serde::Deserialize<'de> for Fingerprint<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_what_sha256sum_computes() {
        // printf abc | sha256sum
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(
            Fingerprint::<Ca>::of(b"abc").to_string(),
            format!("sha256:{abc}")
        );
        assert_eq!(Fingerprint::<Content>::of(b"abc").to_string(), abc);
        assert_eq!(
            Fingerprint::<Sealing>::of(b"abc").short(),
            "sha256:ba7816bf.."
        );
        assert_eq!(Fingerprint::<Content>::of(b"abc").short(), "ba7816bf..");
    }

    #[test]
    fn parse_reads_back_exactly_what_display_writes() {
        let fp = Fingerprint::<Sealing>::of(b"x");
        assert_eq!(Fingerprint::<Sealing>::parse(&fp.to_string()), Ok(fp));
        let content = Fingerprint::<Content>::of(b"x");
        assert_eq!(Fingerprint::<Content>::parse(&content.hex()), Ok(content));
        let hex = fp.hex();
        for bad in [
            hex.clone(),                              // no prefix
            format!("sha256:{}", hex.to_uppercase()), // upper case
            format!("sha256:{}", &hex[..63]),         // short
            format!("sha256:{hex}0"),                 // long
            format!("sha256:sha256:{hex}"),           // doubled prefix
            format!("sha256:{}g", &hex[..63]),        // not hex
            format!("sha256:{}é", &hex[..62]),        // multi-byte
            String::new(),
        ] {
            assert!(Fingerprint::<Sealing>::parse(&bad).is_err(), "{bad:?}");
        }
        assert!(Fingerprint::<Content>::parse(&fp.to_string()).is_err());
    }

    #[test]
    fn serde_uses_the_text_and_refuses_a_bad_one() {
        let fp = Fingerprint::<Ca>::of(b"ca");
        let json = serde_json::to_string(&fp).unwrap();
        assert_eq!(json, format!("\"{fp}\""));
        assert_eq!(serde_json::from_str::<Fingerprint<Ca>>(&json).unwrap(), fp);
        assert!(serde_json::from_str::<Fingerprint<Ca>>("\"sha256:00\"").is_err());
    }

    #[test]
    fn as_kind_keeps_the_digest() {
        let cert = Fingerprint::<Cert>::of(b"der");
        assert_eq!(cert.as_kind::<Ca>(), Fingerprint::<Ca>::of(b"der"));
    }
}
