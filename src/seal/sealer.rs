//! Where a spoke is sealed (`sealing.format`, per spoke): the Sealed Secrets controller's
//! certificate, or age recipients for sops ([`super::recipients`]: which, and whether
//! they are trusted). The tick's certificate is chosen and trusted by
//! `rotate::sealing_key`.

use std::collections::BTreeMap;

use time::OffsetDateTime;

use super::recipients::{RecipientsError, never_older, recipients};
use super::sops::{self, AgeRecipients, SopsError};
use super::{ManifestError, SealedSecret, SealingKey, SecretInput};
use crate::config::{Config, SealingFormat, SpokeConfig};
use crate::fingerprint::{self, Fingerprint, Sealing};
use crate::secret::SecretBytes;

/// What one spoke's output is encrypted to.
pub enum Sealer<'a> {
    SealedSecrets(&'a SealingKey),
    Sops(AgeRecipients),
    /// A federated spoke: its ConfigMap holds nothing secret, so nothing is sealed.
    Nothing,
}

/// What a credential is encrypted to: a sealing certificate, or a set of age recipients;
/// `Nothing` for a federated spoke's ConfigMap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealedTo {
    Cert(Fingerprint<Sealing>),
    Age(Fingerprint<fingerprint::AgeRecipients>),
    Nothing,
}

impl SealedTo {
    /// The sealing certificate, for a SealedSecret.
    pub fn cert(self) -> Option<Fingerprint<Sealing>> {
        match self {
            SealedTo::Cert(c) => Some(c),
            SealedTo::Age(_) | SealedTo::Nothing => None,
        }
    }
}

/// Why a spoke's output cannot be sealed.
#[derive(Debug, thiserror::Error)]
pub enum SealingError {
    /// A Sealed Secrets spoke in a tick that loaded no sealing certificate (the
    /// configuration check refuses this; here should a context be made otherwise).
    #[error(
        "{spoke}: seals with Sealed Secrets, but no sealing certificate is loaded: set sealing.cert, or sealing.format: sops for it"
    )]
    NoSealingCert { spoke: String },
    /// The age recipients of a sops output could not be read, or are not trusted.
    #[error("{0}")]
    Recipients(RecipientsError),
    #[error("{0}")]
    Seal(ManifestError),
    /// What was sealed did not read back as ciphertext for the key.
    #[error("{spoke}: {error}")]
    ReadBack { spoke: String, error: ManifestError },
    /// A sops output could not be encrypted, or did not read back as encrypted.
    #[error("{spoke}: {error}")]
    Sops { spoke: String, error: SopsError },
    /// A federated spoke's output is a ConfigMap: a credential for it is never sealed.
    #[error("{spoke}: credential.mode is federated: there is no credential to seal")]
    Federated { spoke: String },
}

/// The label Flux's kustomize-controller (v1.7+) and helm-controller watch a Secret for:
/// with it, a change of the kubeconfig Secret that `spec.kubeConfig.secretRef` names
/// reconciles its consumers at once (`--watch-configs-label-selector`'s default).
pub const WATCH_LABEL: (&str, &str) = ("reconcile.fluxcd.io/watch", "Enabled");

/// The spoke's Secret holding `yaml`; its template carries [`WATCH_LABEL`], so the
/// unsealed Secret does.
pub fn secret(spoke: &SpokeConfig, yaml: &SecretBytes) -> SecretInput {
    let mut input = SecretInput {
        name: spoke.secret.name.clone(),
        namespace: spoke.secret.namespace.clone(),
        type_: Some("Opaque".into()),
        labels: [(WATCH_LABEL.0.to_string(), WATCH_LABEL.1.to_string())].into(),
        ..Default::default()
    };
    input.data.insert(spoke.secret.key.clone(), yaml.clone());
    input
}

impl<'a> Sealer<'a> {
    /// The spoke's sealer: the tick's sealing key (None: the fleet has no sealing.cert),
    /// or its age recipients (read now), never moving the committed sops output
    /// (encrypted for `committed`) to a set listed after its own ([`never_older`]).
    pub fn for_spoke(
        config: &Config,
        spoke: &SpokeConfig,
        key: Option<&'a SealingKey>,
        committed: Option<&[String]>,
    ) -> Result<Sealer<'a>, SealingError> {
        if spoke.credential.mode == crate::config::CredentialMode::Federated {
            return Ok(Sealer::Nothing);
        }
        let r = match (spoke.format, key) {
            (SealingFormat::SealedSecrets, Some(key)) => return Ok(Sealer::SealedSecrets(key)),
            (SealingFormat::SealedSecrets, None) => {
                return Err(SealingError::NoSealingCert {
                    spoke: spoke.name.clone(),
                });
            }
            (SealingFormat::Sops, _) => recipients(config, spoke)?,
        };
        if let Some(old) = committed {
            never_older(
                config,
                spoke,
                sops::recipients_fingerprint(old),
                r.fingerprint(),
            )?;
        }
        Ok(Sealer::Sops(r))
    }

    pub fn sealed_to(&self) -> SealedTo {
        match self {
            Sealer::SealedSecrets(key) => SealedTo::Cert(key.fingerprint()),
            Sealer::Sops(r) => SealedTo::Age(r.fingerprint()),
            Sealer::Nothing => SealedTo::Nothing,
        }
    }

    /// Whether [`Sealer::seal`] would refuse the spoke's Secret (its names, scope or the
    /// key), tried with a placeholder: a mint is made only when it can be sealed, since
    /// each leaves a binding on the spoke.
    pub fn can_seal(&self, spoke: &SpokeConfig) -> Result<(), SealingError> {
        let placeholder = SecretBytes::from(b"placeholder".to_vec());
        let none = BTreeMap::new();
        self.seal(spoke, &placeholder, &none, OffsetDateTime::UNIX_EPOCH)
            .map(drop)
    }

    /// The kubeconfig `yaml` encrypted into the spoke's output, with `annotations` (the
    /// recorded state) readable beside it. What is written is read back and must be
    /// encrypted for this key or these recipients: the last guard against a bug putting
    /// plaintext in the fleet repo (direct and review mode).
    pub fn seal(
        &self,
        spoke: &SpokeConfig,
        yaml: &SecretBytes,
        annotations: &BTreeMap<String, String>,
        now: OffsetDateTime,
    ) -> Result<String, SealingError> {
        let mut secret = secret(spoke, yaml);
        match self {
            Sealer::SealedSecrets(key) => {
                let mut sealed =
                    SealedSecret::seal(&secret, key, spoke.scope).map_err(SealingError::Seal)?;
                sealed.annotations.extend(annotations.clone());
                let manifest = sealed.to_yaml();
                SealedSecret::parse(manifest.as_bytes())
                    .and_then(|back| back.check_sealed(key))
                    .map_err(|error| SealingError::ReadBack {
                        spoke: spoke.name.clone(),
                        error,
                    })?;
                Ok(manifest)
            }
            Sealer::Sops(r) => {
                secret.annotations = annotations.clone();
                seal_sops(spoke, &secret, r, now)
            }
            Sealer::Nothing => Err(SealingError::Federated {
                spoke: spoke.name.clone(),
            }),
        }
    }
}

/// The spoke's `secret` encrypted for `recipients`, read back.
fn seal_sops(
    spoke: &SpokeConfig,
    secret: &SecretInput,
    recipients: &AgeRecipients,
    now: OffsetDateTime,
) -> Result<String, SealingError> {
    let failed = |error: SopsError| SealingError::Sops {
        spoke: spoke.name.clone(),
        error,
    };
    let text = sops::encrypt_at(secret, recipients, now).map_err(failed)?;
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

impl From<RecipientsError> for SealingError {
    fn from(e: RecipientsError) -> SealingError {
        SealingError::Recipients(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seal::RecoveryKey;

    /// Defence behind the configuration check: a Sealed Secrets spoke in a tick with no
    /// sealing key cannot be sealed, naming the spoke and the fix; a sops spoke needs none.
    #[test]
    fn a_sealed_secrets_spoke_without_a_sealing_key_is_refused() {
        let text = "repo: {path: f}\nsealing: {cert: c.pem, age_recipients: [age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p]}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n  - {name: prod, address: 10.0.0.2, sealing: {format: sops}}\n";
        let config = Config::parse(text, "spokekeeper.yaml", std::path::Path::new("/")).unwrap();
        let e = match Sealer::for_spoke(&config, &config.spokes[0], None, None) {
            Err(e) => e,
            Ok(_) => panic!("sealed to no key"),
        };
        assert!(matches!(&e, SealingError::NoSealingCert { spoke } if spoke == "dev"));
        assert!(e.to_string().contains("set sealing.cert"), "{e}");
        assert!(matches!(
            Sealer::for_spoke(&config, &config.spokes[1], None, None),
            Ok(Sealer::Sops(_))
        ));
    }

    fn vectors() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/sealed-secrets/key")
    }

    #[test]
    fn the_sealed_kubeconfig_carries_fluxs_watch_label_on_its_secret_only() {
        let text = "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";
        let cfg = Config::parse(text, "spokekeeper.yaml", std::path::Path::new("/x"))
            .unwrap_or_else(|e| panic!("{e}"));
        let spoke = &cfg.spokes[0];
        let pem = std::fs::read(vectors().join("cert.pem")).unwrap();
        let key = SealingKey::from_pem(&pem, "cert.pem", OffsetDateTime::UNIX_EPOCH).unwrap();
        let annotations = [("spokekeeper.io/spoke".to_string(), "dev".to_string())].into();
        let yaml = SecretBytes::new(b"apiVersion: v1\nkind: Config\n".to_vec());
        let manifest = Sealer::SealedSecrets(&key)
            .seal(spoke, &yaml, &annotations, OffsetDateTime::UNIX_EPOCH)
            .unwrap();
        let sealed = SealedSecret::parse(manifest.as_bytes()).unwrap();
        assert_eq!(
            sealed
                .template
                .labels
                .get("reconcile.fluxcd.io/watch")
                .map(String::as_str),
            Some("Enabled"),
            "{manifest}"
        );
        // On the Secret the controller writes, not on the SealedSecret itself.
        assert!(sealed.labels.is_empty(), "{manifest}");
        assert!(
            !sealed
                .template
                .annotations
                .contains_key("reconcile.fluxcd.io/watch")
        );
        assert_eq!(sealed.annotations["spokekeeper.io/spoke"], "dev");
        // What the controller unseals is a Secret with that label and the kubeconfig.
        let tls = std::fs::read(vectors().join("tls.key")).unwrap();
        let keys = RecoveryKey::load_all(&tls, "key").unwrap();
        let secret = sealed.unseal(&keys).unwrap();
        assert_eq!(
            secret.labels,
            [(WATCH_LABEL.0.to_string(), WATCH_LABEL.1.to_string())].into()
        );
        assert_eq!(secret.data[&spoke.secret.key].expose(), yaml.expose());
    }
}
