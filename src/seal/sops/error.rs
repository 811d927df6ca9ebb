//! Why a sops file could not be written or read. Messages name the field (`data.x`,
//! `sops.mac`) and never a value: a value may be the secret.

use crate::seal::ManifestError;

#[derive(Debug, thiserror::Error)]
pub enum SopsError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("no age recipient given: set sealing.age_recipients (age1...) or pass --age")]
    NoRecipients,
    /// `at`: the recipient's place in a list (`#2`) or its line in a file (`line 2`).
    /// What is there is not quoted: the file may be a link to a secret's one line.
    #[error("age recipient {at} is not an age X25519 recipient (age1...): {reason}")]
    BadRecipient { at: String, reason: &'static str },
    #[error("age key file line {line} is not an age identity (AGE-SECRET-KEY-1...): {reason}")]
    BadIdentity { line: usize, reason: &'static str },
    #[error("the age key file holds no identity (AGE-SECRET-KEY-1... lines)")]
    NoIdentities,
    #[error("wrapping the data key for age recipient {recipient} failed")]
    Wrap {
        recipient: String,
        #[source]
        source: Box<age::EncryptError>,
    },
    #[error("random number generator failed: {0}")]
    Random(String),
    #[error("AES-GCM failed")]
    Aes,
    #[error(
        "not a sops file: it has no `sops` metadata (encrypt it with sops or spokekeeper seal --format sops)"
    )]
    NotSops,
    #[error("{field} {problem}")]
    Metadata {
        field: &'static str,
        problem: String,
    },
    #[error(
        "{field} is not supported by spokekeeper ({what}): re-encrypt with age recipients and encrypted_regex ^(data|stringData)$"
    )]
    Unsupported { field: &'static str, what: String },
    #[error(".sops.yaml {field} {problem}")]
    SopsConfig { field: String, problem: String },
    #[error("no age identity decrypted the data key; the file is for: {recipients}")]
    NoIdentityWorked { recipients: String },
    #[error("{path} is not a sops value: {fault}")]
    BadValue { path: String, fault: ValueFault },
    #[error(
        "{path} holds both a tab and a line break: the sops CLI writes such a readable value back as null when it decrypts to YAML (as kustomize-controller does), so it is refused; remove the tab or the line break"
    )]
    Unwritable { path: String },
    #[error("{path} is not encrypted: refused, it must never be written")]
    NotEncrypted { path: String },
    #[error("{path} did not authenticate: the value was altered or moved")]
    Altered { path: String },
    #[error("sops.mac did not authenticate: the MAC or sops.lastmodified was altered")]
    MacAltered,
    #[error("MAC mismatch: a value, key or the key order was altered since it was encrypted")]
    MacMismatch,
}

/// What is wrong with the shape of one encrypted value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ValueFault {
    #[error("expected ENC[AES256_GCM,data:...,iv:...,tag:...,type:...]")]
    Shape,
    #[error("its data is not base64")]
    Data,
    #[error("its iv is not 32 bytes of base64")]
    Iv,
    #[error("its tag is not 16 bytes of base64")]
    Tag,
    #[error("its type is not one of str, int, float, bool, bytes")]
    Type,
    #[error("it decrypts to bytes that are not UTF-8 text")]
    NotText,
    #[error("it decrypts to text that is not a {0}")]
    NotTyped(&'static str),
    #[error("it is not a string (an encrypted value is one)")]
    NotString,
}
