//! PEM and base64 decoding into zeroized buffers.
//!
//! Written here rather than borrowed because private keys pass through it: every
//! intermediate buffer is sized up front (no reallocation leaves a copy behind) and
//! zeroized on drop.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use zeroize::Zeroizing;

use super::CertError;
use crate::secret::SecretBytes;

/// One `-----BEGIN LABEL-----` ... `-----END LABEL-----` block, decoded.
pub struct Block {
    pub label: String,
    pub der: SecretBytes,
}

/// True when the data looks like PEM (has a BEGIN line), as opposed to base64 or DER.
pub fn looks_like_pem(data: &[u8]) -> bool {
    data.windows(11).any(|w| w == b"-----BEGIN ")
}

/// At most this many blocks in one input: a CA bundle has a few, never thousands.
pub(crate) const MAX_BLOCKS: usize = 256;

/// Every block in `input`, in order. Text outside blocks is ignored, as OpenSSL and Go do.
pub fn blocks(input: &[u8]) -> Result<Vec<Block>, CertError> {
    let mut out = Vec::new();
    // (label, offset where the body starts)
    let mut open: Option<(String, usize)> = None;
    let mut offset = 0;
    for raw_line in input.split(|&b| b == b'\n') {
        let line_start = offset;
        offset += raw_line.len() + 1;
        let line = raw_line.trim_ascii();
        match open.take() {
            None => {
                if let Some(label) = delimited(line, b"-----BEGIN ") {
                    if out.len() == MAX_BLOCKS {
                        return Err(CertError::Pem(format!(
                            "more than {MAX_BLOCKS} PEM blocks; this is not a certificate bundle"
                        )));
                    }
                    open = Some((label, offset));
                }
            }
            Some((label, body_start)) => {
                if let Some(end) = delimited(line, b"-----END ") {
                    if end != label {
                        return Err(CertError::Pem(format!(
                            "block BEGIN {label} ends with END {end}"
                        )));
                    }
                    let der = decode_base64(&input[body_start.min(line_start)..line_start])
                        .map_err(|e| {
                            CertError::Pem(format!(
                                "the body of the {label} block is not base64 ({e})"
                            ))
                        })?;
                    out.push(Block { label, der });
                } else if line.starts_with(b"-----") {
                    return Err(CertError::Pem(format!(
                        "block BEGIN {label} has no END line"
                    )));
                } else if line.contains(&b':') {
                    return Err(CertError::Pem(format!(
                        "the {label} block has PEM headers (an encrypted key?); only plain blocks are supported"
                    )));
                } else {
                    open = Some((label, body_start));
                }
            }
        }
    }
    if let Some((label, _)) = open {
        return Err(CertError::Pem(format!(
            "block BEGIN {label} has no END line"
        )));
    }
    Ok(out)
}

/// The label between `prefix` and a closing `-----`, when it is a plausible PEM label.
fn delimited(line: &[u8], prefix: &[u8]) -> Option<String> {
    let rest = line.strip_prefix(prefix)?.strip_suffix(b"-----")?;
    let plausible = !rest.is_empty()
        && rest.len() <= 64
        && rest
            .iter()
            .all(|&b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b' ');
    plausible.then(|| String::from_utf8_lossy(rest).into_owned())
}

/// Why base64 did not decode. Carries a position only, never the offending byte: the
/// input may be key material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base64Error(String);

impl std::fmt::Display for Base64Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Base64Error {}

/// Standard base64 with padding (what Go writes for `[]byte` fields); ASCII whitespace
/// (line breaks in wrapped data) is skipped.
pub(crate) fn decode_base64(input: &[u8]) -> Result<SecretBytes, Base64Error> {
    let mut compact = Zeroizing::new(Vec::with_capacity(input.len()));
    compact.extend(input.iter().copied().filter(|b| !b.is_ascii_whitespace()));
    if compact.is_empty() {
        return Err(Base64Error("it is empty".into()));
    }
    let mut decoded = Zeroizing::new(vec![0u8; base64::decoded_len_estimate(compact.len())]);
    let n = STANDARD
        .decode_slice(&compact, &mut decoded[..])
        .map_err(|e| {
            Base64Error(match e {
                base64::DecodeSliceError::DecodeError(base64::DecodeError::InvalidByte(at, _)) => {
                    format!("invalid character at position {at}")
                }
                base64::DecodeSliceError::DecodeError(base64::DecodeError::InvalidLastSymbol(
                    at,
                    _,
                )) => {
                    format!("invalid final character at position {at}")
                }
                base64::DecodeSliceError::DecodeError(base64::DecodeError::InvalidLength(_)) => {
                    "its length is not valid for base64 (truncated?)".into()
                }
                base64::DecodeSliceError::DecodeError(base64::DecodeError::InvalidPadding) => {
                    "its padding is wrong".into()
                }
                base64::DecodeSliceError::OutputSliceTooSmall => {
                    "it does not fit its own estimate".into()
                }
            })
        })?;
    decoded.truncate(n);
    Ok(SecretBytes::new(std::mem::take(&mut *decoded)))
}

/// Standard base64 with padding, into a buffer of exactly the right size.
pub(crate) fn encode_base64(input: &[u8]) -> SecretBytes {
    let len = base64::encoded_len(input.len(), true).expect("input is at most a few MiB");
    let mut out = vec![0u8; len];
    let written = STANDARD
        .encode_slice(input, &mut out)
        .expect("buffer sized by encoded_len");
    debug_assert_eq!(written, len);
    SecretBytes::new(out)
}

/// A PEM block with 64-character lines, as OpenSSL and Go write it.
pub(crate) fn encode_block(label: &str, der: &[u8]) -> SecretBytes {
    let body = encode_base64(der);
    let lines = body.len().div_ceil(64);
    let begin = format!("-----BEGIN {label}-----\n");
    let end = format!("-----END {label}-----\n");
    let mut out = SecretBytes::with_capacity(begin.len() + body.len() + lines + end.len());
    let mut fits = out.try_extend(begin.as_bytes());
    for chunk in body.expose().chunks(64) {
        fits &= out.try_extend(chunk) && out.try_extend(b"\n");
    }
    fits &= out.try_extend(end.as_bytes());
    debug_assert!(fits, "PEM buffer sized exactly");
    out
}

/// Concatenates buffers into one of exactly the combined size.
pub(crate) fn concat(parts: &[&[u8]]) -> SecretBytes {
    let mut out = SecretBytes::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        let fits = out.try_extend(part);
        debug_assert!(fits, "sized exactly");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_junk_around_blocks() {
        let block = encode_block("CERTIFICATE", b"\x30\x03\x02\x01\x05");
        let mut input = b"Certificate:\n  text openssl prints\n".to_vec();
        input.extend_from_slice(block.expose());
        input.extend_from_slice(b"trailing words\r\n");
        let parsed = blocks(&input).unwrap();
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].label, "CERTIFICATE");
        assert_eq!(parsed[0].der.expose(), b"\x30\x03\x02\x01\x05");
    }

    #[test]
    fn mismatched_and_unterminated_blocks_are_errors() {
        let e = blocks(b"-----BEGIN A-----\nAAAA\n-----END B-----\n")
            .err()
            .unwrap();
        assert!(e.to_string().contains("END B"), "{e}");
        let e = blocks(b"-----BEGIN A-----\nAAAA\n").err().unwrap();
        assert!(e.to_string().contains("no END"), "{e}");
        let e = blocks(b"-----BEGIN A-----\nProc-Type: 4,ENCRYPTED\nAAAA\n-----END A-----\n")
            .err()
            .unwrap();
        assert!(e.to_string().contains("encrypted"), "{e}");
    }

    #[test]
    fn base64_errors_never_show_the_input() {
        let e = decode_base64(b"c2VjcmV0$$$").unwrap_err();
        assert!(!e.to_string().contains('$'), "{e}");
        assert!(e.to_string().contains("position 8"), "{e}");
        assert_eq!(decode_base64(b"c2Vj\ncmV0\n").unwrap().expose(), b"secret");
        assert!(decode_base64(b" \n").is_err());
    }
}
