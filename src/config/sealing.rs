//! `sealing:`: the output format; for Sealed Secrets the certificate and the
//! fingerprints this host trusts it by, for SOPS the age recipients and their pins.

use std::path::PathBuf;
use std::str::FromStr;

use serde::Deserialize;

use super::{ConfigError, Loading};
use crate::fingerprint::{self, Fingerprint};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSealing {
    /// Needed only when a spoke seals with Sealed Secrets (`check::sealing_cert`).
    cert: Option<PathBuf>,
    sha256: Option<OneOrMany>,
    pub(super) format: Option<SealingFormat>,
    age_recipients: Option<OneOrMany>,
    age_sha256: Option<OneOrMany>,
    sops_config: Option<PathBuf>,
}

/// `sealing.sha256`: one fingerprint, or a list (a planned key rollover).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(v) => vec![v],
            OneOrMany::Many(v) => v,
        }
    }
}

/// `sealing.format` (and `spokes[].sealing.format`): what a spoke's output is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SealingFormat {
    /// A SealedSecret for the hub's Sealed Secrets controller (the default).
    #[default]
    SealedSecrets,
    /// A Secret encrypted with SOPS and age, for Flux's kustomize-controller to decrypt.
    Sops,
}

impl SealingFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            SealingFormat::SealedSecrets => "sealed-secrets",
            SealingFormat::Sops => "sops",
        }
    }
}

impl std::fmt::Display for SealingFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `sealing.age_recipients`: a list of `age1...` in the configuration, or the path of a
/// recipients file (one a line, `#` comments), read at each tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgeRecipientsFrom {
    Inline(Vec<String>),
    File(PathBuf),
}

/// What SOPS outputs are encrypted for (`Config::sops`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SopsSettings {
    pub age_recipients: Option<AgeRecipientsFrom>,
    /// `sealing.age_sha256`: the recipient sets this host trusts, in order: an output
    /// never moves to a set listed after the one it is encrypted for (empty: not set).
    pub age_sha256: Vec<Fingerprint<fingerprint::AgeRecipients>>,
    /// `sealing.sops_config`: the fleet repo's `.sops.yaml`, whose creation rules pick
    /// the recipients for an output path.
    pub sops_config: Option<PathBuf>,
}

/// `sealing:` as loaded (`Config::sealing_cert`, `Config::sealing_sha256`, `Config::sops`).
pub(super) struct Sealing {
    pub cert: Option<PathBuf>,
    pub sha256: Vec<Fingerprint<fingerprint::Sealing>>,
    pub sops: SopsSettings,
}

/// Upper-case hex is accepted here (an operator may paste it); stored values never are.
fn pin<K: fingerprint::Kind>(v: &str) -> Option<Fingerprint<K>> {
    let hex = v.strip_prefix("sha256:")?;
    Fingerprint::parse(&format!("sha256:{}", hex.to_ascii_lowercase())).ok()
}

/// Every pin of `field` checked and lowercased; `what` says what one must be, and how.
pub(super) fn pins<K: fingerprint::Kind>(
    given: Option<OneOrMany>,
    field: &str,
    what: &str,
    l: &Loading,
) -> Result<Vec<Fingerprint<K>>, ConfigError> {
    given
        .map(OneOrMany::into_vec)
        .unwrap_or_default()
        .into_iter()
        .map(|v| {
            pin(&v).ok_or_else(|| {
                l.bad(
                    field,
                    format!("{field} {:?} is not {what}", crate::text::one_line(&v, 80)),
                )
            })
        })
        .collect()
}

/// The certificate's path resolved; every fingerprint checked and lowercased; inline
/// age recipients parsed.
pub(super) fn load(raw: RawSealing, l: &Loading) -> Result<Sealing, ConfigError> {
    let sha256 = pins(
        raw.sha256,
        "sealing.sha256",
        "a certificate fingerprint: write sha256: and 64 hex digits, as `spokekeeper inspect CERT` prints it (a list for a key rollover)",
        l,
    )?;
    let age_sha256 = age_pins(raw.age_sha256, "sealing.age_sha256", l)?;
    let age_recipients = raw.age_recipients.map(|r| recipients(r, l)).transpose()?;
    Ok(Sealing {
        cert: raw.cert.map(|c| l.resolve(&c)),
        sha256,
        sops: SopsSettings {
            age_recipients,
            age_sha256,
            sops_config: raw.sops_config.map(|p| l.resolve(&p)),
        },
    })
}

/// `sealing.age_sha256` or `spokes[].sealing.age_sha256` (`field`): recipient set pins,
/// in order (an output never moves to a set listed after the one it is encrypted for).
pub(super) fn age_pins(
    given: Option<OneOrMany>,
    field: &str,
    l: &Loading,
) -> Result<Vec<Fingerprint<fingerprint::AgeRecipients>>, ConfigError> {
    pins(
        given,
        field,
        "a recipients fingerprint: write sha256: and 64 hex digits, as `spokekeeper check` prints it for the recipients (a list to allow several sets, the preferred first)",
        l,
    )
}

/// A list is inline recipients, each parsed now; one string is one recipient when it
/// starts with `age1`, else a recipients file.
fn recipients(raw: OneOrMany, l: &Loading) -> Result<AgeRecipientsFrom, ConfigError> {
    let list = match raw {
        OneOrMany::One(s) if !s.trim().starts_with("age1") => {
            return Ok(AgeRecipientsFrom::File(
                l.resolve(std::path::Path::new(s.trim())),
            ));
        }
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    };
    if list.is_empty() {
        return Err(l.bad(
            "sealing.age_recipients",
            "sealing.age_recipients is empty: list at least one age1... recipient (age-keygen -y KEYFILE prints it), or name a recipients file".into(),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, s) in list.iter().enumerate() {
        let r = age::x25519::Recipient::from_str(s.trim()).map_err(|why| {
            l.bad(
                "sealing.age_recipients",
                format!(
                    "sealing.age_recipients[{i}] {:?} is not an age X25519 recipient ({why}): write the age1... public key that age-keygen -y KEYFILE prints",
                    crate::text::one_line(s, 80)
                ),
            )
        })?;
        out.push(r.to_string());
    }
    Ok(AgeRecipientsFrom::Inline(out))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{MIN, parse, refused};
    use super::SealingFormat;

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

    const AGE: &str = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";

    #[test]
    fn sealing_format_defaults_to_sealed_secrets_and_a_spoke_may_choose_sops() {
        use super::AgeRecipientsFrom;
        let c = parse(MIN).unwrap();
        assert_eq!(c.spokes[0].format, SealingFormat::SealedSecrets);
        assert_eq!(c.sops, Default::default());
        let text = format!(
            "repo: {{path: f}}\nsealing: {{cert: c.pem, age_recipients: [{AGE}]}}\nspokes:\n  - {{name: dev, address: 10.0.0.1, sealing: {{format: sops}}}}\n  - {{name: prod, address: 10.0.0.2}}\n"
        );
        let c = parse(&text).unwrap();
        assert_eq!(c.spokes[0].format, SealingFormat::Sops);
        assert_eq!(c.spokes[1].format, SealingFormat::SealedSecrets);
        assert_eq!(
            c.sops.age_recipients,
            Some(AgeRecipientsFrom::Inline(vec![AGE.to_string()]))
        );
        let all = text.replace("cert: c.pem,", "cert: c.pem, format: sops,");
        let all = all.replace(", sealing: {format: sops}", "");
        assert!(
            parse(&all)
                .unwrap()
                .spokes
                .iter()
                .all(|s| s.format == SealingFormat::Sops)
        );
        let file = MIN.replace(
            "cert: c.pem}",
            "cert: c.pem, format: sops, age_recipients: keys/age.txt, sops_config: f/.sops.yaml}",
        );
        let c = parse(&file).unwrap();
        assert_eq!(
            c.sops.age_recipients,
            Some(AgeRecipientsFrom::File(
                "/etc/spokekeeper/keys/age.txt".into()
            ))
        );
        assert_eq!(
            c.sops.sops_config.as_deref(),
            Some(std::path::Path::new("/etc/spokekeeper/f/.sops.yaml"))
        );
    }

    #[test]
    fn sealing_cert_may_be_left_out_when_every_spoke_is_sops() {
        let global = format!(
            "repo: {{path: f}}\nsealing: {{format: sops, age_recipients: [{AGE}]}}\nspokes:\n  - {{name: dev, address: 10.0.0.1}}\n"
        );
        assert_eq!(parse(&global).unwrap().sealing_cert, None);
        let each = format!(
            "repo: {{path: f}}\nsealing: {{age_recipients: [{AGE}]}}\nspokes:\n  - {{name: dev, address: 10.0.0.1, sealing: {{format: sops}}}}\n  - {{name: prod, address: 10.0.0.2, sealing: {{format: sops}}}}\n"
        );
        let c = parse(&each).unwrap();
        assert_eq!(c.sealing_cert, None);
        assert!(c.spokes.iter().all(|s| s.format == SealingFormat::Sops));
        // Given anyway, it is kept.
        let kept = global.replace("{format: sops,", "{cert: c.pem, format: sops,");
        assert_eq!(
            parse(&kept).unwrap().sealing_cert.as_deref(),
            Some(std::path::Path::new("/etc/spokekeeper/c.pem"))
        );
    }

    #[test]
    fn a_missing_sealing_cert_names_the_line_the_spokes_that_need_it_and_the_fix() {
        refused(
            "repo: {path: f}\nsealing: {}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n",
            &[
                "line 2",
                "sealing.cert is not set",
                "spoke dev seals with Sealed Secrets",
                "kubeseal --fetch-cert",
                "sealing.format: sops",
            ],
        );
        // One spoke overrides the fleet's sops back to sealed-secrets: it alone is named.
        let mixed = format!(
            "repo: {{path: f}}\nsealing:\n  format: sops\n  age_recipients: [{AGE}]\nspokes:\n  - {{name: dev, address: 10.0.0.1}}\n  - {{name: prod, address: 10.0.0.2, sealing: {{format: sealed-secrets}}}}\n  - {{name: edge, address: 10.0.0.3, sealing: {{format: sealed-secrets}}}}\n"
        );
        refused(
            &mixed,
            &["line 3", "spokes prod, edge seal with Sealed Secrets"],
        );
        let e = parse(&mixed).unwrap_err().to_string();
        assert!(!e.contains("dev"), "{e}");
    }

    #[test]
    fn sops_mistakes_name_the_field_the_line_and_the_fix() {
        refused(
            &MIN.replace("cert: c.pem}", "cert: c.pem, format: sops}"),
            &["line 2", "sealing.format is sops", "sealing.age_recipients"],
        );
        refused(
            &format!(
                "{}  - {{name: prod, address: 10.0.0.2}}\n",
                MIN.replace("10.0.0.1}", "10.0.0.1, sealing: {format: sops}}")
            ),
            &[
                "line 4",
                "spokes[0].sealing.format is sops",
                "sealing.sops_config",
            ],
        );
        refused(
            &MIN.replace("cert: c.pem}", "cert: c.pem, format: sealed}"),
            &["sealed"],
        );
        refused(
            &MIN.replace(
                "cert: c.pem}",
                &format!("cert: c.pem, age_recipients: [{AGE}, age1nope]}}"),
            ),
            &[
                "line 2",
                "sealing.age_recipients[1]",
                "age1nope",
                "age-keygen -y",
            ],
        );
        refused(
            &MIN.replace("cert: c.pem}", "cert: c.pem, age_recipients: []}"),
            &["sealing.age_recipients is empty"],
        );
        refused(
            &MIN.replace("cert: c.pem}", "cert: c.pem, age_sha256: abc}"),
            &["line 2", "sealing.age_sha256", "64 hex digits"],
        );
    }

    /// `spokes[].sealing.age_sha256`: the spoke's own pins, in order, beside a format
    /// inherited from `sealing.format`; a malformed one is named with its spoke.
    #[test]
    fn a_spoke_has_its_own_age_pins() {
        let (a, b) = ("sha256:".to_string() + &"a".repeat(64), "b".repeat(64));
        let text = format!(
            "repo: {{path: f}}\nsealing: {{format: sops, age_recipients: [{AGE}]}}\nspokes:\n  - {{name: dev, address: 10.0.0.1, sealing: {{age_sha256: [{a}, 'sha256:{}']}}}}\n  - {{name: prod, address: 10.0.0.2}}\n",
            b.to_ascii_uppercase()
        );
        let c = parse(&text).unwrap();
        let pins: Vec<String> = c.spokes[0]
            .age_sha256
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(pins, [a, format!("sha256:{b}")]);
        assert_eq!(c.spokes[0].format, SealingFormat::Sops);
        assert!(c.spokes[1].age_sha256.is_empty());
        refused(
            &text.replace("[sha256:", "[sha256:zz"),
            &["line 4", "spokes[0].sealing.age_sha256", "64 hex digits"],
        );
    }
}
