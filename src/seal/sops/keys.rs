//! age: the recipients a data key is wrapped for (public, `age1...`) and the identities
//! that unwrap it (private, `AGE-SECRET-KEY-1...`, recovery and tests only). Each
//! recipient gets its own ASCII-armored age file, as sops writes them.

use std::io::{Read, Write};
use std::iter;
use std::str::FromStr;

use age::armor::{ArmoredReader, ArmoredWriter, Format};
use age::x25519;
use zeroize::Zeroizing;

use super::error::SopsError;
use crate::fingerprint::{self, Fingerprint};
use crate::secret::SecretBytes;

/// The fingerprint of a set of recipient strings ([`AgeRecipients::fingerprint`]), also
/// for the strings a committed file names, which need not parse.
pub fn recipients_fingerprint<S: AsRef<str>>(
    given: impl IntoIterator<Item = S>,
) -> Fingerprint<fingerprint::AgeRecipients> {
    let set: std::collections::BTreeSet<String> =
        given.into_iter().map(|s| s.as_ref().to_string()).collect();
    let mut text = String::new();
    for r in set {
        text.push_str(&r);
        text.push('\n');
    }
    Fingerprint::of(text.as_bytes())
}

/// One or more age X25519 recipients, in the order given.
#[derive(Clone)]
pub struct AgeRecipients(Vec<(String, x25519::Recipient)>);

impl AgeRecipients {
    /// Parses `age1...` strings; an empty list is refused.
    pub fn parse<S: AsRef<str>>(given: &[S]) -> Result<Self, SopsError> {
        if given.is_empty() {
            return Err(SopsError::NoRecipients);
        }
        let mut out = Vec::with_capacity(given.len());
        for (index, s) in given.iter().enumerate() {
            let s = s.as_ref().trim();
            let r = x25519::Recipient::from_str(s).map_err(|reason| SopsError::BadRecipient {
                at: format!("#{}", index + 1),
                reason,
            })?;
            out.push((r.to_string(), r));
        }
        Ok(Self(out))
    }

    /// A recipients file (`age -R`'s format): one `age1...` a line, `#` comments and
    /// blank lines skipped. Errors name the line.
    pub fn parse_file(text: &str) -> Result<Self, SopsError> {
        let mut out = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let r =
                x25519::Recipient::from_str(line).map_err(|reason| SopsError::BadRecipient {
                    at: format!("line {}", n + 1),
                    reason,
                })?;
            out.push((r.to_string(), r));
        }
        if out.is_empty() {
            return Err(SopsError::NoRecipients);
        }
        Ok(Self(out))
    }

    /// What the recipients are pinned by: the same set in any order, or repeated, has
    /// the same fingerprint.
    pub fn fingerprint(&self) -> Fingerprint<fingerprint::AgeRecipients> {
        recipients_fingerprint(self.strings())
    }

    /// The recipients as `age1...` strings.
    pub fn strings(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(s, _)| s.as_str())
    }

    /// One armored age file of `data_key` per recipient, with its recipient string.
    pub(super) fn wrap(&self, data_key: &[u8; 32]) -> Result<Vec<(String, String)>, SopsError> {
        self.0
            .iter()
            .map(|(s, r)| {
                let wrap = |source: age::EncryptError| SopsError::Wrap {
                    recipient: s.clone(),
                    source: Box::new(source),
                };
                let enc = age::Encryptor::with_recipients(iter::once(r as &dyn age::Recipient))
                    .map_err(wrap)?;
                let mut out = Vec::new();
                let io = |e: std::io::Error| wrap(age::EncryptError::Io(e));
                let armor = ArmoredWriter::wrap_output(&mut out, Format::AsciiArmor).map_err(io)?;
                let mut w = enc.wrap_output(armor).map_err(io)?;
                w.write_all(data_key).map_err(io)?;
                w.finish().and_then(|a| a.finish()).map_err(io)?;
                let text = String::from_utf8(out).map_err(|_| SopsError::Aes)?;
                Ok((text, s.clone()))
            })
            .collect()
    }
}

/// age identities from a key file (`age-keygen`'s format: `#` comments, one
/// `AGE-SECRET-KEY-1...` a line). Errors name the line, never its content.
pub struct AgeIdentities(Vec<x25519::Identity>);

impl AgeIdentities {
    pub fn parse(file: &SecretBytes) -> Result<Self, SopsError> {
        let text = std::str::from_utf8(file.expose()).map_err(|_| SopsError::BadIdentity {
            line: 0,
            reason: "the file is not UTF-8 text",
        })?;
        let mut out = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let id = x25519::Identity::from_str(line).map_err(|reason| SopsError::BadIdentity {
                line: n + 1,
                reason,
            })?;
            out.push(id);
        }
        if out.is_empty() {
            return Err(SopsError::NoIdentities);
        }
        Ok(Self(out))
    }

    /// The data key from the first armored age file any identity opens.
    pub(super) fn unwrap<'a>(
        &self,
        files: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Result<Zeroizing<[u8; 32]>, SopsError> {
        let mut tried = Vec::new();
        for (enc, recipient) in files {
            tried.push(recipient.to_string());
            let Ok(dec) = age::Decryptor::new_buffered(ArmoredReader::new(enc.as_bytes())) else {
                continue;
            };
            let ids = self.0.iter().map(|i| i as &dyn age::Identity);
            let Ok(mut reader) = dec.decrypt(ids) else {
                continue;
            };
            let mut key = Zeroizing::new([0u8; 32]);
            let mut rest = Zeroizing::new(Vec::new());
            // Exactly 32 bytes: AES-256's key, as sops generates it.
            if reader.read_exact(key.as_mut()).is_ok()
                && reader.read_to_end(&mut rest).is_ok()
                && rest.is_empty()
            {
                return Ok(key);
            }
        }
        Err(SopsError::NoIdentityWorked {
            recipients: if tried.is_empty() {
                "no age recipient (sops.age is empty)".into()
            } else {
                tried.join(", ")
            },
        })
    }
}

impl std::fmt::Debug for AgeRecipients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.strings()).finish()
    }
}

impl std::fmt::Debug for AgeIdentities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AgeIdentities(<redacted, {}>)", self.0.len())
    }
}
