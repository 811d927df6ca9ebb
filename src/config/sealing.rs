//! `sealing:`: the sealing certificate, and the fingerprints this host trusts it by.

use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, Loading};
use crate::fingerprint::{self, Fingerprint};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSealing {
    cert: PathBuf,
    #[serde(default)]
    sha256: Option<OneOrMany>,
}

/// `sealing.sha256`: one fingerprint, or a list (a planned key rollover).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// `sealing:` as loaded (`Config::sealing_cert`, `Config::sealing_sha256`).
pub(super) struct Sealing {
    pub cert: PathBuf,
    pub sha256: Vec<Fingerprint<fingerprint::Sealing>>,
}

/// The certificate's path resolved; every fingerprint checked and lowercased.
pub(super) fn load(raw: RawSealing, l: &Loading) -> Result<Sealing, ConfigError> {
    let sha256 = match raw.sha256 {
        None => Vec::new(),
        Some(OneOrMany::One(v)) => vec![v],
        Some(OneOrMany::Many(v)) => v,
    };
    let sha256 = sha256
        .into_iter()
        .map(|v| {
            // Upper-case hex is accepted here (an operator may paste it); stored values
            // never are.
            let lower = match v.strip_prefix("sha256:") {
                Some(hex) => format!("sha256:{}", hex.to_ascii_lowercase()),
                None => String::new(),
            };
            Fingerprint::parse(&lower).map_err(|_| {
                l.bad(
                    "sealing.sha256",
                    format!(
                        "sealing.sha256 {:?} is not a certificate fingerprint: write sha256: and 64 hex digits, as `spokekeeper inspect CERT` prints it (a list for a key rollover)",
                        crate::text::one_line(&v, 80)
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Sealing {
        cert: l.resolve(&raw.cert),
        sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{MIN, parse, refused};

    #[test]
    fn sealing_sha256_takes_one_or_a_list_and_names_a_bad_one() {
        let fp = format!("sha256:{}", "AB".repeat(32));
        let one = MIN.replace("cert: c.pem}", &format!("cert: c.pem, sha256: \"{fp}\"}}"));
        let c = parse(&one).unwrap();
        assert_eq!(c.sealing_sha256[0].to_string(), fp.to_lowercase());
        let two = format!("sha256:{}", "0".repeat(64));
        let list = MIN.replace(
            "cert: c.pem}",
            &format!("cert: c.pem, sha256: [\"{fp}\", \"{two}\"]}}"),
        );
        assert_eq!(parse(&list).unwrap().sealing_sha256.len(), 2);
        assert!(parse(MIN).unwrap().sealing_sha256.is_empty());
        for bad in ["abcd", "sha256:abcd", "sha1:0000"] {
            refused(
                &MIN.replace("cert: c.pem}", &format!("cert: c.pem, sha256: \"{bad}\"}}")),
                &["sealing.sha256", bad, "64 hex digits"],
            );
        }
    }
}
