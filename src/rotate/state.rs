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
/// The highest generation spokekeeper records or mints (2^32 - 1: one mint a minute for
/// 8000 years). A larger one was written by hand: saturating it would freeze the counter,
/// so every later mint would bind the same user again (docs/minted.md).
pub(crate) const MAX_GENERATION: u64 = u32::MAX as u64;
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
}

pub use crate::seal::SealedTo;

/// How the committed credential was made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordedCredential {
    pub mode: CredentialMode,
    /// Minted: the user the certificate was signed for.
    pub user: Option<String>,
    /// The last generation minted for this spoke (0: none).
    pub generation: u64,
}

impl RecordedCredential {
    /// The generation after the recorded one (a switch back to extracted revokes every
    /// generation below it). Recorded generations are at most [`MAX_GENERATION`].
    pub(crate) fn next_generation(&self) -> u64 {
        self.generation.saturating_add(1)
    }
}

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
                _ => SealedTo::Cert(fingerprint(SEALING_CERT_SHA256, get(SEALING_CERT_SHA256)?)?),
            },
            rotated_at: date(ROTATED_AT, get(ROTATED_AT)?)?,
            credential: credential(
                opt(CREDENTIAL_MODE),
                opt(CREDENTIAL_USER),
                opt(CREDENTIAL_GENERATION),
            )?,
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
        }
        put(ROTATED_AT, rfc3339(self.rotated_at));
        let c = &self.credential;
        if c.mode == CredentialMode::Minted {
            put(CREDENTIAL_MODE, c.mode.as_str().into());
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
        Some(v) => return Err(malformed(CREDENTIAL_MODE, "minted (or absent)", v)),
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
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn sample() -> Recorded {
        let ca = test_ca("sample");
        Recorded {
            spoke: "dev".into(),
            server: "https://10.0.0.1:6443".into(),
            ca_sha256: Fingerprint::of(&ca),
            ca_bundle: vec![ca],
            ca_not_after: OffsetDateTime::from_unix_timestamp(2_000_000_000).unwrap(),
            client_sha256: Some(Fingerprint::parse(&format!("sha256:{HEX}")).unwrap()),
            client_not_after: Some(OffsetDateTime::from_unix_timestamp(1_900_000_000).unwrap()),
            content_sha256: Fingerprint::parse(HEX).unwrap(),
            sealed_to: SealedTo::Cert(Fingerprint::parse(&format!("sha256:{HEX}")).unwrap()),
            rotated_at: OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap(),
            credential: RecordedCredential::default(),
        }
    }

    fn minted(generation: u64) -> Recorded {
        Recorded {
            credential: RecordedCredential {
                mode: CredentialMode::Minted,
                user: Some(format!("spokekeeper:hub:{generation}")),
                generation,
            },
            ..sample()
        }
    }

    #[test]
    fn a_sops_output_records_its_recipients_in_place_of_a_sealing_certificate() {
        let mut r = sample();
        r.sealed_to = SealedTo::Age(Fingerprint::from_digest([9; 32]));
        let a = r.to_annotations();
        assert!(!a.contains_key(SEALING_CERT_SHA256), "{a:?}");
        assert_eq!(
            a[AGE_RECIPIENTS_SHA256],
            Fingerprint::<crate::fingerprint::AgeRecipients>::from_digest([9; 32]).to_string()
        );
        assert_eq!(Recorded::from_annotations(&a).unwrap(), r);
        // Neither: the sealing certificate's annotation is the one named missing.
        let mut none = a.clone();
        none.remove(AGE_RECIPIENTS_SHA256);
        assert_eq!(
            Recorded::from_annotations(&none).unwrap_err().key(),
            SEALING_CERT_SHA256
        );
    }

    #[test]
    fn the_generation_counts_from_the_annotations() {
        // Extracted, as earlier versions wrote it: no credential annotations, generation 0.
        let a = sample().to_annotations();
        assert!(
            !a.keys()
                .any(|k| k.starts_with("spokekeeper.io/credential-"))
        );
        let r = Recorded::from_annotations(&a).unwrap();
        assert_eq!(r.credential, RecordedCredential::default());
        assert_eq!(r.credential.next_generation(), 1);
        // Minted: mode, user and generation round-trip; the next is one more.
        let a = minted(7).to_annotations();
        assert_eq!(a[CREDENTIAL_MODE], "minted");
        assert_eq!(a[CREDENTIAL_USER], "spokekeeper:hub:7");
        assert_eq!(a[CREDENTIAL_GENERATION], "7");
        let m = minted(7);
        let r = Recorded::from_annotations(&m.to_annotations()).unwrap();
        assert_eq!(r, m);
        assert_eq!(r.credential.next_generation(), 8);
        // Back to extracted: the counter is kept, so no user name is ever reused.
        let back = Recorded {
            credential: RecordedCredential {
                mode: CredentialMode::Extracted,
                user: None,
                generation: 7,
            },
            ..sample()
        };
        let r = Recorded::from_annotations(&back.to_annotations()).unwrap();
        assert_eq!(r.credential.next_generation(), 8);
        assert_eq!(
            RecordedCredential {
                generation: u64::MAX,
                ..Default::default()
            }
            .next_generation(),
            u64::MAX
        );
    }

    #[test]
    fn damaged_credential_annotations_are_named() {
        let with = |key: &str, value: &str| {
            let mut a = minted(3).to_annotations();
            a.insert(key.into(), value.into());
            Recorded::from_annotations(&a).unwrap_err()
        };
        for (key, value) in [
            (CREDENTIAL_MODE, "issued"),
            (CREDENTIAL_MODE, "extracted"),
            (CREDENTIAL_GENERATION, "0"),
            (CREDENTIAL_GENERATION, "-1"),
            (CREDENTIAL_GENERATION, "+4"),
            (CREDENTIAL_GENERATION, "99999999999999999999999"),
            // Frozen: every later mint would saturate to the same generation and user.
            (CREDENTIAL_GENERATION, "18446744073709551614"),
            (CREDENTIAL_GENERATION, "4294967296"),
            (CREDENTIAL_USER, ""),
            (CREDENTIAL_USER, "a b"),
            (CREDENTIAL_USER, "a\nSigned-off-by: x"),
        ] {
            let e = with(key, value);
            assert_eq!(e.key(), key, "{key}={value:?}: {e}");
        }
        for key in [CREDENTIAL_USER, CREDENTIAL_GENERATION] {
            let mut a = minted(3).to_annotations();
            a.remove(key);
            assert_eq!(
                Recorded::from_annotations(&a).unwrap_err(),
                AnnotationError::Missing { key }
            );
        }
    }

    fn error_with(key: &str, value: &str) -> AnnotationError {
        let mut a = sample().to_annotations();
        a.insert(key.into(), value.into());
        Recorded::from_annotations(&a).unwrap_err()
    }

    #[test]
    fn annotations_round_trip() {
        let r = sample();
        let a = r.to_annotations();
        assert_eq!(a[CLIENT_CERT_NOT_AFTER], "2030-03-17T17:46:40Z");
        // One CA: the bundle's fingerprint is the CA's, ca-data the earlier format.
        assert_eq!(a[CA_BUNDLE_SHA256], a[CA_SHA256]);
        assert!(!a[CA_DATA].contains(','));
        assert_eq!(Recorded::from_annotations(&a).unwrap(), r);
    }

    #[test]
    fn a_ca_bundle_round_trips_and_earlier_annotations_still_read() {
        let one = sample();
        let mut r = one.clone();
        r.ca_bundle.push(test_ca("new"));
        let a = r.to_annotations();
        assert_eq!(a[CA_DATA].split(',').count(), 2);
        assert_eq!(Recorded::from_annotations(&a).unwrap(), r);
        // Written before bundles: no ca-bundle-sha256, one CA in ca-data.
        let mut old = one.to_annotations();
        old.remove(CA_BUNDLE_SHA256);
        assert_eq!(Recorded::from_annotations(&old).unwrap(), one);
        // Two CAs without the bundle fingerprint is not the earlier format.
        let mut a = r.to_annotations();
        a.remove(CA_BUNDLE_SHA256);
        assert_eq!(Recorded::from_annotations(&a).unwrap_err().key(), CA_DATA);
        // A bundle whose fingerprint does not match is refused.
        let mut a = r.to_annotations();
        a.insert(CA_BUNDLE_SHA256.into(), format!("sha256:{HEX}"));
        assert!(matches!(
            Recorded::from_annotations(&a).unwrap_err(),
            AnnotationError::Disagree {
                other: CA_BUNDLE_SHA256,
                ..
            }
        ));
    }

    #[test]
    fn damaged_annotations_are_named() {
        let mut a = sample().to_annotations();
        a.remove(SERVER);
        assert_eq!(
            Recorded::from_annotations(&a).unwrap_err(),
            AnnotationError::Missing { key: SERVER }
        );
        let e = error_with(ROTATED_AT, "yesterday");
        assert_eq!(e.key(), ROTATED_AT);
        assert!(e.to_string().contains("RFC 3339"), "{e}");
        let e = error_with(CA_SHA256, &format!("sha256:{}", HEX.replace('0', "1")));
        assert!(e.to_string().contains("disagree"), "{e}");
    }

    #[test]
    fn every_annotation_is_validated() {
        let cases = [
            (SEALING_CERT_SHA256, "sha256:aéééééé"),
            (SEALING_CERT_SHA256, "sha256:ss"),
            (
                CLIENT_CERT_SHA256,
                &format!("sha256:{}", HEX.to_uppercase()),
            ),
            (CA_SHA256, HEX),
            (CONTENT_SHA256, "ab"),
            (CONTENT_SHA256, &format!("{HEX}0")),
            (SPOKE, "Dev"),
            (SPOKE, ""),
            (SPOKE, &"a".repeat(64)),
            (SERVER, "http://10.0.0.1:6443"),
            (SERVER, "https://user:pw@10.0.0.1:6443"),
            (SERVER, &format!("https://{}.org", "a".repeat(3000))),
            (SERVER, "https://10.0.0.1:6443/\u{1b}[2J\u{7}"),
            (SERVER, "https://10.0.0.1:6443/a\tb"),
            (SERVER, "https://10.0.0.1:6443\n"),
            (SERVER, "https://10.0.0.1:6443/\u{202e}x"),
            (CA_NOT_AFTER, "2030-13-01T00:00:00Z"),
            (CLIENT_CERT_NOT_AFTER, &"9".repeat(100)),
            (CA_DATA, "not base64!"),
            (CA_DATA, "AAAA"),
            (CA_DATA, &"A".repeat(MAX_CA_DATA + 4)),
        ];
        for (key, value) in cases {
            let e = error_with(key, value);
            assert_eq!(e.key(), key, "{value:?}: {e}");
        }
    }

    #[test]
    fn malformed_values_are_measured_not_quoted() {
        let token = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB";
        for (key, value) in [
            (
                SEALING_CERT_SHA256,
                format!("sha256:\n{}", "é".repeat(10_000)),
            ),
            (SERVER, format!("https://{token}.example.org\n")),
            (ROTATED_AT, format!("AGE-SECRET-KEY-1{}", "Q".repeat(58))),
        ] {
            let text = error_with(key, &value).to_string();
            assert!(!text.contains('\n'), "{text}");
            assert!(text.len() < 200, "{text}");
            assert!(text.contains(&format!("{} bytes", value.len())), "{text}");
            for secret in [token, "AGE-SECRET-KEY", "éé"] {
                assert!(!text.contains(secret), "{secret} in {text}");
            }
        }
    }

    /// A probe report whose serving certificate is issued by `issuer`.
    fn served_by(issuer: &rcgen::Issuer<'_, rcgen::KeyPair>, issuer_der: &[u8]) -> ProbeReport {
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["kubernetes".to_string()])
            .unwrap()
            .signed_by(&key, issuer)
            .unwrap();
        ProbeReport {
            server: "10.0.0.1:6443".into(),
            host: "10.0.0.1".into(),
            chain: vec![leaf.der().to_vec(), issuer_der.to_vec()],
            serving_sha256: Fingerprint::of(leaf.der()),
            not_before: OffsetDateTime::now_utc(),
            not_after: OffsetDateTime::now_utc(),
            dns_names: vec!["kubernetes".into()],
            ip_addresses: vec![],
            address_in_sans: false,
        }
    }

    #[test]
    fn a_serving_certificate_from_any_recorded_ca_verifies() {
        let issuer = |cn: &str| {
            let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap()
        };
        let (old, new, other) = (issuer("old"), issuer("new"), issuer("other"));
        let mut r = sample();
        r.ca_bundle = vec![old.der().to_vec(), new.der().to_vec()];
        assert_eq!(r.check_ca(&served_by(&old, old.der())), CaCheck::Verified);
        assert_eq!(r.check_ca(&served_by(&new, new.der())), CaCheck::Verified);
        assert_eq!(
            r.check_ca(&served_by(&other, other.der())),
            CaCheck::NotSignedByCa
        );
        r.ca_bundle = vec![b"junk".to_vec()];
        assert_eq!(r.check_ca(&served_by(&old, old.der())), CaCheck::UnusableCa);
    }

    /// k3s's rotate-default-ca-certs.sh: a new root, the same root cross-signed by the
    /// old, a new CA under the new root; the server presents all of them and the old
    /// root. Its chain still reaches the old root, but the CA changed (issue 30).
    #[test]
    fn a_new_root_cross_signed_by_the_recorded_one_is_a_changed_ca() {
        let ca = |cn: &str| {
            let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            p
        };
        let old = rcgen::CertifiedIssuer::self_signed(
            ca("k3s-server-ca@1"),
            rcgen::KeyPair::generate().unwrap(),
        )
        .unwrap();
        let root_key = rcgen::KeyPair::generate().unwrap();
        let xsigned = ca("k3s-server-root@2").signed_by(&root_key, &old).unwrap();
        let root = rcgen::CertifiedIssuer::self_signed(ca("k3s-server-root@2"), root_key).unwrap();
        let new = rcgen::CertifiedIssuer::signed_by(
            ca("k3s-server-ca@2"),
            rcgen::KeyPair::generate().unwrap(),
            &root,
        )
        .unwrap();
        let bundle = [new.der(), root.der(), xsigned.der(), old.der()].map(|c| c.to_vec());
        let mut probe = served_by(&new, new.der());
        probe.chain.extend(bundle[1..].iter().cloned());
        let mut r = sample();
        r.ca_bundle = vec![old.der().to_vec()];
        // Signature by signature the chain does reach the recorded CA.
        let old_only = crate::spoke::chain::judge(&probe.chain, &[old.der().to_vec()]);
        assert_eq!(old_only.roots_outside, [Fingerprint::of(root.der())]);
        assert_eq!(r.check_ca(&probe), CaCheck::RootChanged);
        // Committed after the rotation: the new bundle holds every root presented.
        r.ca_bundle = bundle.to_vec();
        assert_eq!(r.check_ca(&probe), CaCheck::Verified);
        // A server presenting its own recorded root alone is the recorded CA.
        r.ca_bundle = vec![old.der().to_vec()];
        assert_eq!(r.check_ca(&served_by(&old, old.der())), CaCheck::Verified);
    }
}
