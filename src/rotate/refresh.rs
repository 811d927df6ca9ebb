//! extract -> validate -> seal: a fresh credential from the node, proven against the
//! live API before anything is written.

use std::time::Duration;

use time::OffsetDateTime;

use super::error::SpokeError;
use super::state::Recorded;
use crate::config::{SourceKind, SpokeConfig};
use crate::fingerprint::{Content, Fingerprint};
use crate::kubeconfig::{self, Sanitized};
use crate::seal::{SealedSecret, SealingKey, SecretInput};
use crate::secret::SecretBytes;
use crate::spoke::{self, LiveReport, Source};

/// A credential that was extracted, sanitized, pointed at the spoke and accepted by it.
pub(crate) struct Fresh {
    pub kubeconfig: Sanitized,
    pub yaml: SecretBytes,
    pub content_sha256: Fingerprint<Content>,
    pub live: LiveReport,
}

pub fn source(spoke: &SpokeConfig) -> Source {
    match spoke.source {
        SourceKind::Ssh => Source::Ssh {
            address: spoke.address.clone(),
            ssh: spoke.ssh.clone(),
            path: spoke.kubeconfig_path.clone(),
        },
        SourceKind::Local => Source::Local {
            path: spoke.kubeconfig_path.clone().into(),
        },
    }
}

/// Reads the node's kubeconfig and proves it works against the spoke API.
pub(crate) async fn extract_and_validate(
    spoke: &SpokeConfig,
    now: OffsetDateTime,
    live_timeout: Duration,
) -> Result<Fresh, SpokeError> {
    let bytes = spoke::extract(&source(spoke))
        .await
        .map_err(|e| SpokeError::Extract(e.into()))?;
    let invalid = |e: kubeconfig::KubeconfigError| SpokeError::Kubeconfig(e.into());
    let parsed = kubeconfig::parse(bytes.expose()).map_err(invalid)?;
    drop(bytes);
    let mut kc = kubeconfig::sanitize(&parsed, &spoke.name).map_err(invalid)?;
    drop(parsed);
    // `api_server` is taken whole: a load balancer on 443 or a proxy's path must survive.
    match &spoke.api_server {
        Some(url) => kc.set_server(url),
        None => kc.rewrite_server(&spoke.address, None, None),
    }
    .map_err(invalid)?;
    if let Some(problem) = kc.validity_problems(now).into_iter().next() {
        return Err(invalid(problem));
    }
    let yaml = kc.to_yaml();
    let live = spoke::check_live(&yaml, live_timeout)
        .await
        .map_err(|e| SpokeError::Live(e.into()))?;
    let content_sha256 = kc.content_sha256();
    Ok(Fresh {
        kubeconfig: kc,
        yaml,
        content_sha256,
        live,
    })
}

/// The recorded state for a credential (`content_sha256`: the kubeconfig's).
pub fn record(
    spoke: &SpokeConfig,
    kc: &Sanitized,
    content_sha256: Fingerprint<Content>,
    sealing: &SealingKey,
    now: OffsetDateTime,
) -> Recorded {
    let ca = &kc.ca_certs()[0];
    let client = kc.client_certs().first();
    Recorded {
        spoke: spoke.name.clone(),
        server: kc.server_string(),
        ca_sha256: ca.fingerprint.as_kind(),
        ca_bundle: kc.ca_certs().iter().map(|c| c.der.clone()).collect(),
        ca_not_after: ca.not_after,
        client_sha256: client.map(|c| c.fingerprint.as_kind()),
        client_not_after: client.map(|c| c.not_after),
        content_sha256,
        sealing_sha256: sealing.fingerprint(),
        rotated_at: now,
        credential: Default::default(),
    }
}

/// The spoke's Secret holding `yaml`.
fn secret(spoke: &SpokeConfig, yaml: &SecretBytes) -> SecretInput {
    let mut input = SecretInput {
        name: spoke.secret.name.clone(),
        namespace: spoke.secret.namespace.clone(),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    input.data.insert(spoke.secret.key.clone(), yaml.clone());
    input
}

/// Whether [`seal`] would refuse the spoke's Secret for `sealing` (its names, scope or the
/// key), tried with a placeholder: a mint is made only when it can be sealed, since each
/// leaves a binding on the spoke.
pub(crate) fn can_seal(spoke: &SpokeConfig, sealing: &SealingKey) -> Result<(), SpokeError> {
    let placeholder = SecretBytes::from(b"placeholder".to_vec());
    let sealed = SealedSecret::seal(&secret(spoke, &placeholder), sealing, spoke.scope)
        .map_err(|e| SpokeError::Seal(e.into()))?;
    SealedSecret::parse(sealed.to_yaml().as_bytes())
        .and_then(|back| back.check_sealed(sealing))
        .map_err(|e| SpokeError::ReadBack {
            spoke: spoke.name.clone(),
            error: e.into(),
        })
}

/// Seals the kubeconfig `yaml` into the spoke's SealedSecret, with the recorded state.
pub fn seal(
    spoke: &SpokeConfig,
    yaml: &SecretBytes,
    sealing: &SealingKey,
    recorded: &Recorded,
) -> Result<String, SpokeError> {
    let mut sealed = SealedSecret::seal(&secret(spoke, yaml), sealing, spoke.scope)
        .map_err(|e| SpokeError::Seal(e.into()))?;
    sealed.annotations.extend(recorded.to_annotations());
    let manifest = sealed.to_yaml();
    // What is written is read back and must be ciphertext for this key: the last guard
    // against a bug putting anything else in the fleet repo (direct and review mode).
    SealedSecret::parse(manifest.as_bytes())
        .and_then(|back| back.check_sealed(sealing))
        .map_err(|e| SpokeError::ReadBack {
            spoke: spoke.name.clone(),
            error: e.into(),
        })?;
    Ok(manifest)
}
