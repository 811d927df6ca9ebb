//! The recorded state: `spokekeeper.io/*` annotations on the committed SealedSecret.
//! Public facts only (fingerprints, dates, the server URL, the public CA), so the repo
//! alone says what the hub holds and a fresh daemon needs no database.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::config::CredentialMode;
use crate::fingerprint::{Ca, CaBundle, ClientCert, Content, Fingerprint, Kind};
use crate::mint::MAX_GENERATION;
use crate::spoke::{CaCheck, ProbeReport};

pub const SPOKE: &str = "spokekeeper.io/spoke";
pub const SERVER: &str = "spokekeeper.io/server";
/// The first CA of the kubeconfig's bundle (what earlier versions recorded).
pub const CA_SHA256: &str = "spokekeeper.io/ca-sha256";
pub const CA_NOT_AFTER: &str = "spokekeeper.io/ca-not-after";
/// Extension to the design's list: every CA certificate of the kubeconfig (public),
/// base64 DER, comma-separated, in the kubeconfig's order, so a probe can check the
/// serving certificate's signature without SSH. One CA: exactly the earlier format.
pub const CA_DATA: &str = "spokekeeper.io/ca-data";
/// `sha256:` of the bundle's DER concatenated in order; absent in earlier versions (then
/// `ca-data` holds one CA).
pub const CA_BUNDLE_SHA256: &str = "spokekeeper.io/ca-bundle-sha256";
pub const CLIENT_CERT_SHA256: &str = "spokekeeper.io/client-cert-sha256";
pub const CLIENT_CERT_NOT_AFTER: &str = "spokekeeper.io/client-cert-not-after";
pub const CONTENT_SHA256: &str = "spokekeeper.io/content-sha256";
pub const SEALING_CERT_SHA256: &str = "spokekeeper.io/sealing-cert-sha256";
/// A sops output: the set of age recipients it was encrypted for (in place of
/// `sealing-cert-sha256`).
pub const AGE_RECIPIENTS_SHA256: &str = "spokekeeper.io/age-recipients-sha256";
pub const ROTATED_AT: &str = "spokekeeper.io/rotated-at";
/// `minted` when the credential was minted; absent: extracted (and earlier versions).
pub(crate) const CREDENTIAL_MODE: &str = "spokekeeper.io/credential-mode";
/// Minted: the user the certificate was signed for.
pub(crate) const CREDENTIAL_USER: &str = "spokekeeper.io/credential-user";
/// The last minted generation (kept after a switch back to extracted, so a user name is
/// never reused); absent: 0, none minted yet.
pub(crate) const CREDENTIAL_GENERATION: &str = "spokekeeper.io/credential-generation";
/// Federated: what the spoke's authentication configuration says of the hub (issuer,
/// accounts, prefix), fingerprinted, so a change of it rewrites the file.
pub(crate) const TRUST_SHA256: &str = "spokekeeper.io/trust-sha256";
const MAX_USER: usize = 200;

/// Longest accepted `ca-data` (base64): a few CAs are a few KiB; Kubernetes caps all of
/// an object's annotations at 256 KiB.
const MAX_CA_DATA: usize = 256 * 1024;
const MAX_SERVER: usize = 2048;
const MAX_DATE: usize = 64;

/// What the committed SealedSecret says the hub holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub spoke: String,
    pub server: String,
    /// Fingerprint of the first CA of the bundle.
    pub ca_sha256: Fingerprint<Ca>,
    /// Every CA the kubeconfig trusts, DER, in its order; never empty.
    pub ca_bundle: Vec<Vec<u8>>,
    /// notAfter of the first CA.
    pub ca_not_after: OffsetDateTime,
    /// None for token-only kubeconfigs.
    pub client_sha256: Option<Fingerprint<ClientCert>>,
    pub client_not_after: Option<OffsetDateTime>,
    pub content_sha256: Fingerprint<Content>,
    pub sealed_to: SealedTo,
    pub rotated_at: OffsetDateTime,
    pub credential: RecordedCredential,
    /// Federated only: [`TRUST_SHA256`].
    pub trust_sha256: Option<Fingerprint<Content>>,
}

pub use crate::mint::RecordedCredential;
pub use crate::seal::SealedTo;

/// A recorded annotation that is missing or malformed. Read back from the fleet repo it
/// is untrusted input: the value is not shown, only its length.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    #[error("annotation {key} is missing")]
    Missing { key: &'static str },
    #[error("annotation {key} is not {want}: {found}")]
    Malformed {
        key: &'static str,
        want: &'static str,
        found: String,
    },
    #[error("annotations {key} and {other} disagree")]
    Disagree {
        key: &'static str,
        other: &'static str,
    },
}

impl AnnotationError {
    /// The annotation at fault.
    pub fn key(&self) -> &'static str {
        match self {
            Self::Missing { key } | Self::Malformed { key, .. } | Self::Disagree { key, .. } => key,
        }
    }
}

impl Recorded {
    /// Reads and validates the annotations; the error names the first one missing or
    /// malformed.
    pub fn from_annotations(a: &BTreeMap<String, String>) -> Result<Recorded, AnnotationError> {
        let get = |key: &'static str| {
            a.get(key)
                .map(String::as_str)
                .ok_or(AnnotationError::Missing { key })
        };
        let opt = |key: &'static str| a.get(key).map(String::as_str);
        let spoke = spoke_name(SPOKE, get(SPOKE)?)?;
        let server = server(SERVER, get(SERVER)?)?;
        let ca_sha256 = fingerprint::<Ca>(CA_SHA256, get(CA_SHA256)?)?;
        let bundle_sha256 = opt(CA_BUNDLE_SHA256)
            .map(|v| fingerprint::<CaBundle>(CA_BUNDLE_SHA256, v))
            .transpose()?;
        let ca_bundle = ca_data(get(CA_DATA)?, bundle_sha256.is_some())?;
        if Fingerprint::<Ca>::of(&ca_bundle[0]) != ca_sha256 {
            return Err(AnnotationError::Disagree {
                key: CA_DATA,
                other: CA_SHA256,
            });
        }
        if let Some(b) = bundle_sha256
            && bundle_fingerprint(&ca_bundle) != b
        {
            return Err(AnnotationError::Disagree {
                key: CA_DATA,
                other: CA_BUNDLE_SHA256,
            });
        }
        Ok(Recorded {
            spoke,
            server,
            ca_sha256,
            ca_bundle,
            ca_not_after: date(CA_NOT_AFTER, get(CA_NOT_AFTER)?)?,
            client_sha256: opt(CLIENT_CERT_SHA256)
                .map(|v| fingerprint(CLIENT_CERT_SHA256, v))
                .transpose()?,
            client_not_after: opt(CLIENT_CERT_NOT_AFTER)
                .map(|v| date(CLIENT_CERT_NOT_AFTER, v))
                .transpose()?,
            content_sha256: fingerprint(CONTENT_SHA256, get(CONTENT_SHA256)?)?,
            sealed_to: match (opt(SEALING_CERT_SHA256), opt(AGE_RECIPIENTS_SHA256)) {
                (None, Some(v)) => SealedTo::Age(fingerprint(AGE_RECIPIENTS_SHA256, v)?),
                (None, None) if opt(CREDENTIAL_MODE) == Some("federated") => SealedTo::Nothing,
                _ => SealedTo::Cert(fingerprint(SEALING_CERT_SHA256, get(SEALING_CERT_SHA256)?)?),
            },
            rotated_at: date(ROTATED_AT, get(ROTATED_AT)?)?,
            credential: credential(
                opt(CREDENTIAL_MODE),
                opt(CREDENTIAL_USER),
                opt(CREDENTIAL_GENERATION),
            )?,
            trust_sha256: opt(TRUST_SHA256)
                .map(|v| fingerprint(TRUST_SHA256, v))
                .transpose()?,
        })
    }

    pub fn to_annotations(&self) -> BTreeMap<String, String> {
        let mut a = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            a.insert(k.to_string(), v);
        };
        put(SPOKE, self.spoke.clone());
        put(SERVER, self.server.clone());
        put(CA_SHA256, self.ca_sha256.to_string());
        put(
            CA_BUNDLE_SHA256,
            bundle_fingerprint(&self.ca_bundle).to_string(),
        );
        let data: Vec<String> = self.ca_bundle.iter().map(|d| B64.encode(d)).collect();
        put(CA_DATA, data.join(","));
        put(CA_NOT_AFTER, rfc3339(self.ca_not_after));
        if let Some(c) = &self.client_sha256 {
            put(CLIENT_CERT_SHA256, c.to_string());
        }
        if let Some(d) = self.client_not_after {
            put(CLIENT_CERT_NOT_AFTER, rfc3339(d));
        }
        put(CONTENT_SHA256, self.content_sha256.to_string());
        match self.sealed_to {
            SealedTo::Cert(c) => put(SEALING_CERT_SHA256, c.to_string()),
            SealedTo::Age(a) => put(AGE_RECIPIENTS_SHA256, a.to_string()),
            SealedTo::Nothing => {}
        }
        put(ROTATED_AT, rfc3339(self.rotated_at));
        let c = &self.credential;
        if c.mode != CredentialMode::Extracted {
            put(CREDENTIAL_MODE, c.mode.as_str().into());
        }
        if let Some(t) = &self.trust_sha256 {
            put(TRUST_SHA256, t.to_string());
        }
        if let Some(u) = &c.user {
            put(CREDENTIAL_USER, u.clone());
        }
        if c.generation > 0 {
            put(CREDENTIAL_GENERATION, c.generation.to_string());
        }
        a
    }

    /// Whether the probed serving chain is signed by any recorded CA: during a CA
    /// rotation the kubeconfig trusts the old and the new one, and either may serve.
    /// A chain that reaches a recorded CA while presenting a root the bundle does not
    /// hold is [`CaCheck::RootChanged`] (`spoke::chain` judges it).
    pub fn judge(&self, probe: &ProbeReport) -> crate::spoke::Judged {
        crate::spoke::chain::judge(&probe.chain, &self.ca_bundle)
    }

    pub fn check_ca(&self, probe: &ProbeReport) -> CaCheck {
        self.judge(probe).check
    }
}

/// Of the CAs' DER, concatenated in order (one CA: the same digest as its fingerprint).
pub(crate) fn bundle_fingerprint(cas: &[Vec<u8>]) -> Fingerprint<CaBundle> {
    Fingerprint::of(&cas.concat())
}

/// The value for an error message: its length only. It is fleet-repo text that did not
/// parse, and what a parse error shows reaches logs, alerts and hub Events.
fn shown(v: &str) -> String {
    format!("{} bytes", v.len())
}

fn malformed(key: &'static str, want: &'static str, v: &str) -> AnnotationError {
    AnnotationError::Malformed {
        key,
        want,
        found: shown(v),
    }
}

/// A fingerprint read back from outside (annotations, local state, flags), or an error
/// that names `key` and the value's length.
pub fn fingerprint<K: Kind>(key: &'static str, v: &str) -> Result<Fingerprint<K>, AnnotationError> {
    Fingerprint::parse(v).map_err(|e| malformed(key, e.want, v))
}

/// The credential annotations: a minted credential names its user and generation.
fn credential(
    mode: Option<&str>,
    user: Option<&str>,
    generation: Option<&str>,
) -> Result<RecordedCredential, AnnotationError> {
    let mode = match mode {
        None => CredentialMode::Extracted,
        Some("minted") => CredentialMode::Minted,
        Some("federated") => CredentialMode::Federated,
        Some(v) => {
            return Err(malformed(
                CREDENTIAL_MODE,
                "minted or federated (or absent)",
                v,
            ));
        }
    };
    let generation = match generation {
        None => 0,
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|&g| {
                (1..=MAX_GENERATION).contains(&g)
                    && v.len() <= 20
                    && v.bytes().all(|b| b.is_ascii_digit())
            })
            .ok_or_else(|| {
                malformed(
                    CREDENTIAL_GENERATION,
                    "a generation number from 1 to 4294967295",
                    v,
                )
            })?,
    };
    let user = user
        .map(|v| {
            let ok = (1..=MAX_USER).contains(&v.len())
                && v.bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
            if ok {
                Ok(v.to_string())
            } else {
                Err(malformed(
                    CREDENTIAL_USER,
                    "a user name (printable ASCII, at most 200)",
                    v,
                ))
            }
        })
        .transpose()?;
    if mode == CredentialMode::Minted {
        if user.is_none() {
            return Err(AnnotationError::Missing {
                key: CREDENTIAL_USER,
            });
        }
        if generation == 0 {
            return Err(AnnotationError::Missing {
                key: CREDENTIAL_GENERATION,
            });
        }
    }
    Ok(RecordedCredential {
        mode,
        user,
        generation,
    })
}

fn date(key: &'static str, v: &str) -> Result<OffsetDateTime, AnnotationError> {
    let want = "an RFC 3339 date";
    if v.len() > MAX_DATE {
        return Err(malformed(key, want, v));
    }
    OffsetDateTime::parse(v, &Rfc3339).map_err(|_| malformed(key, want, v))
}

fn spoke_name(key: &'static str, v: &str) -> Result<String, AnnotationError> {
    let ok = (1..=63).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !v.starts_with('-')
        && !v.ends_with('-');
    if ok {
        Ok(v.to_string())
    } else {
        Err(malformed(
            key,
            "a spoke name (lowercase letters, digits and '-', at most 63)",
            v,
        ))
    }
}

fn server(key: &'static str, v: &str) -> Result<String, AnnotationError> {
    let want = "an https:// URL with a host (no credentials, query or fragment)";
    // The URL parser drops tabs and newlines and keeps other controls; the raw string
    // reaches the table and alerts, so it must be plain printable text.
    let unprintable = |c: char| {
        c.is_control()
            || c.is_whitespace()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
    };
    if v.len() > MAX_SERVER || v.chars().any(unprintable) {
        return Err(malformed(key, want, v));
    }
    crate::kubeconfig::parse_server(v).map_err(|_| malformed(key, want, v))?;
    Ok(v.to_string())
}

/// `ca-data`: comma-separated base64 DER certificates; just one without a bundle
/// fingerprint (the earlier format).
fn ca_data(v: &str, bundle: bool) -> Result<Vec<Vec<u8>>, AnnotationError> {
    let want = if bundle {
        "base64 DER certificates separated by commas"
    } else {
        "one base64 DER certificate"
    };
    if v.len() > MAX_CA_DATA {
        return Err(malformed(CA_DATA, want, v));
    }
    let parts: Vec<&str> = if bundle {
        v.split(',').collect()
    } else {
        vec![v]
    };
    if parts.len() > crate::certs::MAX_CA_BUNDLE {
        return Err(malformed(CA_DATA, want, v));
    }
    parts
        .into_iter()
        .map(|p| {
            B64.decode(p)
                .ok()
                .filter(|der| X509Certificate::from_der(der).is_ok_and(|(rest, _)| rest.is_empty()))
                .ok_or_else(|| malformed(CA_DATA, want, v))
        })
        .collect()
}

/// RFC 3339 in UTC, whole seconds: stable text for annotations and messages.
pub fn rfc3339(t: OffsetDateTime) -> String {
    let t = t
        .to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .unwrap_or(t);
    t.format(&Rfc3339).unwrap_or_default()
}

/// A self-signed CA certificate, DER, for tests of the recorded state.
#[cfg(test)]
pub(crate) fn test_ca(cn: &str) -> Vec<u8> {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = rcgen::KeyPair::generate().expect("keygen");
    p.self_signed(&key).expect("self-signed").der().to_vec()
}

#[cfg(test)]
mod tests;
