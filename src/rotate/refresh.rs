//! extract -> validate -> seal: a fresh credential from the node, proven against the
//! live API before anything is written.

use std::time::Duration;

use time::OffsetDateTime;

use super::error::SpokeError;
use super::state::{Recorded, SealedTo};
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
    }
}

/// The label Flux's kustomize-controller (v1.7+) and helm-controller watch a Secret for:
/// with it, a change of the kubeconfig Secret that `spec.kubeConfig.secretRef` names
/// reconciles its consumers at once (`--watch-configs-label-selector`'s default).
pub(crate) const WATCH_LABEL: (&str, &str) = ("reconcile.fluxcd.io/watch", "Enabled");

/// The spoke's Secret holding `yaml`; its template carries [`WATCH_LABEL`], so the
/// unsealed Secret does.
pub(crate) fn secret(spoke: &SpokeConfig, yaml: &SecretBytes) -> SecretInput {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seal::RecoveryKey;

    fn vectors() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/sealed-secrets/key")
    }

    #[test]
    fn the_sealed_kubeconfig_carries_fluxs_watch_label_on_its_secret_only() {
        let text = "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";
        let cfg =
            crate::config::Config::parse(text, "spokekeeper.yaml", std::path::Path::new("/x"))
                .unwrap_or_else(|e| panic!("{e}"));
        let spoke = &cfg.spokes[0];
        let pem = std::fs::read(vectors().join("cert.pem")).unwrap();
        let key = SealingKey::from_pem(&pem, "cert.pem", OffsetDateTime::UNIX_EPOCH).unwrap();
        let ca = super::super::state::test_ca("dev");
        let recorded = Recorded {
            spoke: "dev".into(),
            server: "https://10.0.0.1:6443".into(),
            ca_sha256: Fingerprint::of(&ca),
            ca_bundle: vec![ca],
            ca_not_after: OffsetDateTime::UNIX_EPOCH,
            client_sha256: None,
            client_not_after: None,
            content_sha256: Fingerprint::parse(&"ab".repeat(32)).unwrap(),
            sealed_to: SealedTo::Cert(key.fingerprint()),
            rotated_at: OffsetDateTime::UNIX_EPOCH,
            credential: Default::default(),
        };
        let yaml = SecretBytes::new(b"apiVersion: v1\nkind: Config\n".to_vec());
        let manifest = seal(spoke, &yaml, &key, &recorded).unwrap();
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
