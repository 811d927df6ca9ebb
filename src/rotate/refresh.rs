//! extract -> validate: a fresh credential from the node, proven against the live API
//! before anything is written.

use std::time::Duration;

use time::OffsetDateTime;

use super::error::SpokeError;
use super::state::{Recorded, SealedTo};
use crate::config::{CredentialMode, SourceKind, SpokeConfig};
use crate::fingerprint::{Content, Fingerprint};
use crate::kubeconfig::{self, Sanitized};
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
        // The federated recipe's forced command runs its script: it takes verbs, not paths.
        SourceKind::Ssh if spoke.credential.mode == CredentialMode::Federated => Source::Script {
            address: spoke.address.clone(),
            ssh: spoke.ssh.clone(),
        },
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

/// The credential about to be committed may impersonate every ServiceAccount the spoke's
/// consumers make Flux impersonate (`listed`: the tick's listing of consumers).
pub(crate) async fn may_impersonate(
    fresh: &Fresh,
    needed: &[crate::hub::consumers::Impersonated],
    live_timeout: Duration,
) -> Result<(), SpokeError> {
    for sa in needed {
        let allowed = spoke::may_impersonate(&fresh.yaml, live_timeout, &sa.namespace, &sa.name)
            .await
            .map_err(|e| SpokeError::Live(e.into()))?;
        if !allowed {
            return Err(SpokeError::Impersonate {
                user: fresh.live.username.clone(),
                service_account: format!("{}/{}", sa.namespace, sa.name),
                consumer: sa.consumer.to_string(),
            });
        }
    }
    Ok(())
}

/// The recorded state for a credential (`content_sha256`: the kubeconfig's).
pub fn record(
    spoke: &SpokeConfig,
    kc: &Sanitized,
    content_sha256: Fingerprint<Content>,
    sealed_to: SealedTo,
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
        sealed_to,
        rotated_at: now,
        credential: Default::default(),
        trust_sha256: None,
    }
}
