//! The recorded state: `spokekeeper.io/*` annotations on the committed SealedSecret.
//! Public facts only (fingerprints, dates, the server URL, the public CA), so the repo
//! alone says what the hub holds and a fresh daemon needs no database.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

pub const SPOKE: &str = "spokekeeper.io/spoke";
pub const SERVER: &str = "spokekeeper.io/server";
pub const CA_SHA256: &str = "spokekeeper.io/ca-sha256";
pub const CA_NOT_AFTER: &str = "spokekeeper.io/ca-not-after";
/// Extension to the design's list: the CA certificate itself (public), base64 DER, so a
/// probe can check the serving certificate's signature without SSH.
pub const CA_DATA: &str = "spokekeeper.io/ca-data";
pub const CLIENT_CERT_SHA256: &str = "spokekeeper.io/client-cert-sha256";
pub const CLIENT_CERT_NOT_AFTER: &str = "spokekeeper.io/client-cert-not-after";
pub const CONTENT_SHA256: &str = "spokekeeper.io/content-sha256";
pub const SEALING_CERT_SHA256: &str = "spokekeeper.io/sealing-cert-sha256";
pub const ROTATED_AT: &str = "spokekeeper.io/rotated-at";

/// What the committed SealedSecret says the hub holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub spoke: String,
    pub server: String,
    pub ca_sha256: String,
    pub ca_der: Vec<u8>,
    pub ca_not_after: OffsetDateTime,
    /// None for token-only kubeconfigs.
    pub client_sha256: Option<String>,
    pub client_not_after: Option<OffsetDateTime>,
    pub content_sha256: String,
    pub sealing_sha256: String,
    pub rotated_at: OffsetDateTime,
}

impl Recorded {
    /// Reads the annotations; the error names the first one missing or malformed.
    pub fn from_annotations(a: &BTreeMap<String, String>) -> Result<Recorded, String> {
        let get = |k: &str| {
            a.get(k)
                .map(String::as_str)
                .ok_or_else(|| format!("annotation {k} is missing"))
        };
        let date = |k: &str| {
            get(k).and_then(|v| {
                OffsetDateTime::parse(v, &Rfc3339)
                    .map_err(|_| format!("annotation {k} is not an RFC 3339 date: {v:?}"))
            })
        };
        let opt_date = |k: &str| a.get(k).map(|_| date(k)).transpose();
        let ca_der = B64
            .decode(get(CA_DATA)?)
            .map_err(|_| format!("annotation {CA_DATA} is not base64"))?;
        let ca_sha256 = get(CA_SHA256)?.to_string();
        if crate::certs::fingerprint(&ca_der) != ca_sha256 {
            return Err(format!("annotations {CA_DATA} and {CA_SHA256} disagree"));
        }
        Ok(Recorded {
            spoke: get(SPOKE)?.into(),
            server: get(SERVER)?.into(),
            ca_sha256,
            ca_der,
            ca_not_after: date(CA_NOT_AFTER)?,
            client_sha256: a.get(CLIENT_CERT_SHA256).cloned(),
            client_not_after: opt_date(CLIENT_CERT_NOT_AFTER)?,
            content_sha256: get(CONTENT_SHA256)?.into(),
            sealing_sha256: get(SEALING_CERT_SHA256)?.into(),
            rotated_at: date(ROTATED_AT)?,
        })
    }

    pub fn to_annotations(&self) -> BTreeMap<String, String> {
        let mut a = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            a.insert(k.to_string(), v);
        };
        put(SPOKE, self.spoke.clone());
        put(SERVER, self.server.clone());
        put(CA_SHA256, self.ca_sha256.clone());
        put(CA_DATA, B64.encode(&self.ca_der));
        put(CA_NOT_AFTER, rfc3339(self.ca_not_after));
        if let Some(c) = &self.client_sha256 {
            put(CLIENT_CERT_SHA256, c.clone());
        }
        if let Some(d) = self.client_not_after {
            put(CLIENT_CERT_NOT_AFTER, rfc3339(d));
        }
        put(CONTENT_SHA256, self.content_sha256.clone());
        put(SEALING_CERT_SHA256, self.sealing_sha256.clone());
        put(ROTATED_AT, rfc3339(self.rotated_at));
        a
    }
}

/// RFC 3339 in UTC, whole seconds: stable text for annotations and messages.
pub fn rfc3339(t: OffsetDateTime) -> String {
    let t = t
        .to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .unwrap_or(t);
    t.format(&Rfc3339).unwrap_or_default()
}

/// `sha256:ab12cd34..` for messages: enough to tell two apart at a glance.
pub fn short(fp: &str) -> String {
    let hex = fp.strip_prefix("sha256:").unwrap_or(fp);
    format!("sha256:{}..", &hex[..hex.len().min(8)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Recorded {
        let ca = b"not really DER but any bytes".to_vec();
        Recorded {
            spoke: "dev".into(),
            server: "https://10.0.0.1:6443".into(),
            ca_sha256: crate::certs::fingerprint(&ca),
            ca_der: ca,
            ca_not_after: OffsetDateTime::from_unix_timestamp(2_000_000_000).unwrap(),
            client_sha256: Some("sha256:cc".into()),
            client_not_after: Some(OffsetDateTime::from_unix_timestamp(1_900_000_000).unwrap()),
            content_sha256: "ab".into(),
            sealing_sha256: "sha256:ss".into(),
            rotated_at: OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap(),
        }
    }

    #[test]
    fn annotations_round_trip() {
        let r = sample();
        let a = r.to_annotations();
        assert_eq!(a[CLIENT_CERT_NOT_AFTER], "2030-03-17T17:46:40Z");
        assert_eq!(Recorded::from_annotations(&a).unwrap(), r);
    }

    #[test]
    fn damaged_annotations_are_named() {
        let mut a = sample().to_annotations();
        a.remove(SERVER);
        assert!(Recorded::from_annotations(&a).unwrap_err().contains(SERVER));
        let mut a = sample().to_annotations();
        a.insert(ROTATED_AT.into(), "yesterday".into());
        assert!(
            Recorded::from_annotations(&a)
                .unwrap_err()
                .contains(ROTATED_AT)
        );
        let mut a = sample().to_annotations();
        a.insert(CA_SHA256.into(), "sha256:00".into());
        assert!(
            Recorded::from_annotations(&a)
                .unwrap_err()
                .contains("disagree")
        );
    }

    #[test]
    fn short_fingerprints() {
        assert_eq!(short("sha256:ab12cd34ef56"), "sha256:ab12cd34..");
    }
}
