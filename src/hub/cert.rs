//! The controller's sealing certificate as the hub serves it: fetched (bounded in time),
//! the key a process starts with, and the report types a tick fills in. Choosing the
//! tick's key, trusting it and pinning a renewal are the tick's job (rotate/sealing).

use serde::Serialize;
use time::OffsetDateTime;

use super::{CALL_TIMEOUT, Hub};
use crate::seal::SealingKey;

/// The sealing certificate of a tick: what the hub gave (with `hub:`) and whether it is
/// trusted (see [`crate::seal::trust`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CertReport {
    /// With `hub:`: whether the controller's certificate could be fetched (absent without).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reachable: Option<bool>,
    /// The certificate sealed to in this tick (when not trusted: the one refused).
    pub sha256: String,
    /// Set when the fetched certificate differs from the pinned one.
    pub renewed: Option<Renewed>,
    /// Why the pinned copy was used (unreachable, refused) or could not be updated.
    pub error: Option<String>,
    /// Whether anything may be sealed to it this tick.
    pub trusted: bool,
    /// What confirmed it, or why it is not trusted.
    pub trust: String,
    /// When not trusted: the fingerprints and the commit, for the report and the alert.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untrusted: Option<Untrusted>,
    /// The controller's version as its Service's `app.kubernetes.io/version` label says
    /// (the Helm chart sets it); read only when hub.controller.port is unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller_version: Option<String>,
}

/// A sealing certificate nothing outside the fleet repo confirms.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Untrusted {
    /// The certificate refused.
    pub sha256: String,
    /// What the anchor expects (sealing.sha256, what the hub served last, or what the
    /// committed credentials record).
    pub expected: Vec<String>,
    /// `hub` (it serves another), `sealing.sha256`, `last-served` or `committed`.
    pub anchor: &'static str,
    /// The last commit that changed sealing.cert (None: outside the repo, or none found).
    pub commit: Option<String>,
    /// The whole story and the fix: each spoke that would rotate fails with it.
    pub error: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Renewed {
    pub old: String,
    pub new: String,
    /// The commit that pinned it, when sealing.cert is inside the fleet repo.
    pub commit: Option<String>,
}

/// The controller's certificate PEM, and its version when its Service was read; bounded
/// in time.
pub async fn fetch(cfg: &crate::config::HubConfig) -> Result<(String, Option<String>), String> {
    tokio::time::timeout(2 * CALL_TIMEOUT, async {
        let hub = Hub::connect(cfg).await?;
        let pem = hub.fetch_cert().await?;
        Ok((pem, hub.controller_version()))
    })
    .await
    .unwrap_or_else(|_| {
        Err(format!(
            "no answer within {}s",
            (2 * CALL_TIMEOUT).as_secs()
        ))
    })
}

/// The sealing key a process starts with: sealing.cert, or, when that file cannot be used
/// (missing, a link, garbage, expired) and `hub:` is configured, the controller's
/// certificate (the first tick pins it). Without `hub:` a bad sealing.cert is an error that
/// names it.
pub async fn initial(config: &crate::config::Config) -> Result<SealingKey, String> {
    let path = &config.sealing_cert;
    let now = OffsetDateTime::now_utc();
    let pinned = match crate::fsutil::read_under(path, &config.repo.path) {
        Ok(pem) => SealingKey::from_pem(&pem, &path.display().to_string(), now)
            .map_err(|e| format!("sealing.cert: {e}")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "sealing.cert {} does not exist yet",
            path.display()
        )),
        Err(e) => Err(format!("cannot read sealing.cert {}: {e}", path.display())),
    };
    let (pinned_error, cfg) = match (pinned, &config.hub) {
        (Ok(key), _) => return Ok(key),
        (Err(e), None) => return Err(e),
        (Err(e), Some(cfg)) => (e, cfg),
    };
    let source = format!(
        "the controller's certificate ({}/{})",
        cfg.controller.namespace, cfg.controller.name
    );
    let (pem, _) = fetch(cfg).await.map_err(|f| {
        format!(
            "{pinned_error}, and the hub cannot give it: {f} \
             (fix hub:, or pin it by hand: kubeseal --fetch-cert > {})",
            path.display()
        )
    })?;
    let key = SealingKey::from_pem(pem.as_bytes(), &source, now)
        .map_err(|e| format!("{pinned_error}, and {source}: {e}"))?;
    tracing::warn!(sha256 = %key.fingerprint(), path = %path.display(), problem = %pinned_error, "sealing.cert cannot be used: starting with the controller's certificate; the tick pins it");
    Ok(key)
}
