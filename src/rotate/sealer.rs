//! What a spoke's output is encrypted to this tick (`sealing.format`, per spoke): the
//! Sealed Secrets controller's certificate, or age recipients for sops
//! ([`super::recipients`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use time::OffsetDateTime;

use super::error::SpokeError;
use super::output::Output;
use super::recipients::{RecipientsError, never_older, recipients};
use super::state::{Recorded, SealedTo};
use crate::config::{Config, SealingFormat, SpokeConfig};
use crate::seal::SealingKey;
use crate::seal::sops::{self, AgeRecipients, SopsError};
use crate::secret::SecretBytes;

/// What one spoke's output is encrypted to.
pub(crate) enum Sealer<'a> {
    SealedSecrets(&'a SealingKey),
    Sops(AgeRecipients),
}

impl<'a> Sealer<'a> {
    /// The spoke's sealer: the tick's sealing key (None: the fleet has no sealing.cert),
    /// or its age recipients (read now).
    pub(crate) fn for_spoke(
        config: &Config,
        spoke: &SpokeConfig,
        key: Option<&'a SealingKey>,
    ) -> Result<Sealer<'a>, SpokeError> {
        Ok(match (spoke.format, key) {
            (SealingFormat::SealedSecrets, Some(key)) => Sealer::SealedSecrets(key),
            (SealingFormat::SealedSecrets, None) => {
                return Err(SpokeError::NoSealingCert {
                    spoke: spoke.name.clone(),
                });
            }
            (SealingFormat::Sops, _) => Sealer::Sops(
                recipients(config, spoke)
                    .map_err(|e: RecipientsError| SpokeError::Recipients(Arc::new(e)))?,
            ),
        })
    }

    /// Refuses to move the spoke's committed sops output to a set listed after the one it
    /// is encrypted for ([`never_older`]).
    pub(crate) fn keeping_order(
        self,
        config: &Config,
        spoke: &SpokeConfig,
        committed: Option<&Output>,
    ) -> Result<Sealer<'a>, SpokeError> {
        if let (Sealer::Sops(r), Some(Output::Sops(file))) = (&self, committed) {
            let old = sops::recipients_fingerprint(&file.recipients);
            never_older(config, spoke, old, r.fingerprint())
                .map_err(|e| SpokeError::Recipients(Arc::new(e)))?;
        }
        Ok(self)
    }

    pub(crate) fn sealed_to(&self) -> SealedTo {
        match self {
            Sealer::SealedSecrets(key) => SealedTo::Cert(key.fingerprint()),
            Sealer::Sops(r) => SealedTo::Age(r.fingerprint()),
        }
    }

    /// Whether [`Sealer::seal_recorded`] would refuse the spoke's Secret, tried with a
    /// placeholder: a mint is made only when it can be sealed, since each leaves a
    /// binding on the spoke.
    pub(crate) fn can_seal(&self, spoke: &SpokeConfig) -> Result<(), SpokeError> {
        let placeholder = SecretBytes::from(b"placeholder".to_vec());
        match self {
            Sealer::SealedSecrets(key) => super::refresh::can_seal(spoke, key),
            Sealer::Sops(r) => seal_sops(
                spoke,
                r,
                &placeholder,
                &BTreeMap::new(),
                OffsetDateTime::UNIX_EPOCH,
            )
            .map(drop),
        }
    }

    /// The kubeconfig `yaml` encrypted into the spoke's output, with the recorded state
    /// readable beside it.
    pub(crate) fn seal_recorded(
        &self,
        spoke: &SpokeConfig,
        yaml: &SecretBytes,
        recorded: &Recorded,
        now: OffsetDateTime,
    ) -> Result<String, SpokeError> {
        match self {
            Sealer::SealedSecrets(key) => super::refresh::seal(spoke, yaml, key, recorded),
            Sealer::Sops(r) => seal_sops(spoke, r, yaml, &recorded.to_annotations(), now),
        }
    }
}

/// A sops output: the Secret with `annotations` in its metadata, encrypted; what is
/// written is read back and must be encrypted for these recipients, the last guard
/// against a bug putting plaintext in the fleet repo.
fn seal_sops(
    spoke: &SpokeConfig,
    recipients: &AgeRecipients,
    yaml: &SecretBytes,
    annotations: &BTreeMap<String, String>,
    now: OffsetDateTime,
) -> Result<String, SpokeError> {
    let failed = |error: SopsError| SpokeError::Sops {
        spoke: spoke.name.clone(),
        error: Arc::new(error),
    };
    let mut secret = super::refresh::secret(spoke, yaml);
    secret.annotations = annotations.clone();
    let text = sops::encrypt_at(&secret, recipients, now).map_err(failed)?;
    let back = sops::readable(text.as_bytes()).map_err(failed)?;
    if sops::recipients_fingerprint(&back.recipients) != recipients.fingerprint() {
        return Err(failed(SopsError::Metadata {
            field: "sops.age",
            problem: "does not name exactly the configured recipients".into(),
        }));
    }
    if back.keys != [spoke.secret.key.as_str()] {
        return Err(failed(SopsError::NotEncrypted {
            path: format!("data.{}", spoke.secret.key),
        }));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::Sealer;
    use crate::config::Config;
    use crate::rotate::{SpokeError, Stage};

    /// Defence behind the configuration check: a Sealed Secrets spoke in a tick with no
    /// sealing key fails at `seal`, naming the spoke and the fix; a sops spoke needs none.
    #[test]
    fn a_sealed_secrets_spoke_without_a_sealing_key_fails_at_seal() {
        let text = "repo: {path: f}\nsealing: {cert: c.pem, age_recipients: [age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p]}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n  - {name: prod, address: 10.0.0.2, sealing: {format: sops}}\n";
        let config = Config::parse(text, "spokekeeper.yaml", std::path::Path::new("/")).unwrap();
        let e = match Sealer::for_spoke(&config, &config.spokes[0], None) {
            Err(e) => e,
            Ok(_) => panic!("sealed to no key"),
        };
        assert!(matches!(&e, SpokeError::NoSealingCert { spoke } if spoke == "dev"));
        assert_eq!(e.stage(), Stage::Seal);
        assert!(e.to_string().contains("set sealing.cert"), "{e}");
        assert!(matches!(
            Sealer::for_spoke(&config, &config.spokes[1], None),
            Ok(Sealer::Sops(_))
        ));
    }
}
