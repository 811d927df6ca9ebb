//! [trust] for a federated spoke, with the admin credential just validated: the spoke's
//! trust of the hub written on its node, the hub's controllers bound, and both proven
//! before anything is committed; then the ConfigMap Flux reaches the spoke with.

use std::time::Duration;

use super::context::Spoke;
use super::context::Tick;
use super::error::SpokeError;
use super::output::InvalidKind;
use super::refresh::Fresh;
use super::state::{AnnotationError, Recorded, SealedTo};
use crate::config::{CredentialMode, FederatedPolicy, SpokeConfig};
use crate::federate::{self, FederateError, Reach, Remote, Trust, Version, check};
use crate::fingerprint::{Content, Fingerprint};
use crate::hub::token::TokenError;
use crate::spoke::live;

/// How long a spoke's API server may take to load a rewritten file: it watches the file
/// and polls it every minute (pkg/kubeapiserver/options/authentication.go).
pub(crate) const RELOAD_WAIT: Duration = Duration::from_secs(75);
/// The largest credential.federated.issuer_ca read.
const MAX_ISSUER_CA: u64 = 256 * 1024;

/// What a federated spoke's rotation made: its record and the ConfigMap to commit.
pub(super) struct Trusted {
    pub recorded: Recorded,
    pub remote: Remote,
    /// The user the check's token authenticated as.
    pub user: String,
}

/// trust, from the admin credential `admin` (validated against the live API): written,
/// bound, loaded and proven, then the ConfigMap.
pub(super) async fn trust(
    tick: &Tick<'_>,
    s: &Spoke<'_>,
    admin: &Fresh,
) -> Result<Trusted, SpokeError> {
    let spoke = s.config;
    let policy = spoke
        .credential
        .federated
        .as_ref()
        .ok_or_else(|| fed(FederateError::NotFederated))?;
    let server = admin.kubeconfig.server_string();
    let version = Version::parse(&admin.live.git_version)
        .ok_or_else(|| fed(FederateError::Version(admin.live.git_version.clone())))?;
    let trust = trust_of(policy, &server)?;
    let content =
        federate::authn::render(&trust, spoke.distro, version).map_err(|e| fed(e.into()))?;
    let hub = tick.hub.ok_or_else(|| fed(FederateError::NoHub))?;
    stage(tick, spoke, "trust");
    // The hub's token first: a misconfigured issuer or a refused request touches no node.
    let token = hub_token(hub, policy, &trust).await?;
    crate::spoke::write_authentication_config(&spoke.address, &spoke.ssh, content.as_bytes())
        .await
        .map_err(|e| SpokeError::Extract(e.into()))?;
    let limit = tick.context.live_timeout;
    let (client, _) = live::client(&admin.yaml, limit)
        .await
        .map_err(|e| SpokeError::Live(e.into()))?;
    let users: Vec<String> = policy
        .service_accounts
        .iter()
        .map(|a| trust.username(&a.subject()))
        .collect();
    let grant = federate::binding::ensure(&admin.yaml, spoke, &users, limit)
        .await
        .map_err(|e| SpokeError::Mint(e.into()))?;
    check::wait_loaded(
        &client,
        (&server, &policy.discovery()),
        &content,
        RELOAD_WAIT,
    )
    .await
    .map_err(fed)?;
    let ca_pem = ca_pem(admin);
    let user = trust.username(&policy.check_as.subject());
    check::accepts(
        &server,
        &ca_pem,
        &token,
        (&user, &policy.discovery()),
        limit,
    )
    .await
    .map_err(fed)?;
    drop(token);
    for u in &users {
        check::bound(&client, &server, u, &grant.as_grant(), limit)
            .await
            .map_err(fed)?;
    }
    let reach = reach(server, ca_pem);
    Ok(committing(tick, s, admin, policy, reach, user))
}

/// Why a federated spoke whose certificate is as recorded (`recorded`, just probed) refuses a hub token of the
/// check account now (None: it accepts it, or this is no such spoke, or the hub or the
/// spoke could not be asked: their own errors are the hub's and the probe's to report).
/// One TokenRequest and one SelfSubjectReview, no SSH: the spoke verifies the token
/// with the keys it fetched from the hub's issuer, so a refusal is a trust that is gone
/// (file reverted, API server restarted without the flag) or broken (keys it cannot
/// fetch).
pub(super) async fn refused(
    tick: &Tick<'_>,
    spoke: &SpokeConfig,
    recorded: &Recorded,
) -> Option<String> {
    let policy = spoke.credential.federated.as_ref()?;
    let hub = tick.hub?;
    if spoke.credential.mode != CredentialMode::Federated
        || recorded.credential.mode != CredentialMode::Federated
    {
        return None;
    }
    let trust = trust_of(policy, &recorded.server).ok()?;
    let token = match hub_token(hub, policy, &trust).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(spoke = %spoke.name, error = %e, "cannot get the hub's token to check the spoke's trust");
            return None;
        }
    };
    let ca_pem = crate::certs::to_pem(&recorded.ca_bundle);
    let user = trust.username(&policy.check_as.subject());
    let limit = tick.context.live_timeout;
    match check::accepts(
        &recorded.server,
        &ca_pem,
        &token,
        (&user, &policy.discovery()),
        limit,
    )
    .await
    {
        Ok(()) => None,
        Err(e @ (FederateError::NotTrusted { .. } | FederateError::WrongUser { .. })) => {
            Some(crate::text::one_line(&e.to_string(), 300))
        }
        Err(e) => {
            tracing::warn!(spoke = %spoke.name, error = %e, "cannot check the spoke's trust of the hub");
            None
        }
    }
}

/// A token of the check account from the hub for the spoke's audience, issued by the
/// configured issuer.
async fn hub_token(
    hub: &crate::hub::Hub,
    policy: &FederatedPolicy,
    trust: &Trust,
) -> Result<crate::secret::SecretBytes, SpokeError> {
    let account = &policy.check_as;
    let token = hub
        .service_account_token(&account.namespace, &account.name, &trust.audience)
        .await
        .map_err(|e| fed(token_refused(account, &e)))?;
    let claims = check::Claims::of(&token).map_err(|why| {
        fed(FederateError::TokenUnreadable {
            account: account.to_string(),
            why,
        })
    })?;
    if claims.issuer != policy.issuer {
        return Err(fed(FederateError::WrongIssuer {
            found: claims.issuer,
            configured: policy.issuer.clone(),
        }));
    }
    Ok(token)
}

/// Every CA of the admin kubeconfig (the spoke's serving CAs), as PEM.
fn ca_pem(admin: &Fresh) -> String {
    let ders: Vec<Vec<u8>> = admin
        .kubeconfig
        .ca_certs()
        .iter()
        .map(|c| c.der.clone())
        .collect();
    crate::certs::to_pem(&ders)
}

/// The record and the ConfigMap of a proven spoke.
fn committing(
    tick: &Tick<'_>,
    s: &Spoke<'_>,
    admin: &Fresh,
    policy: &FederatedPolicy,
    reach: Reach,
    user: String,
) -> Trusted {
    let spoke = s.config;
    let data = reach.data();
    let mut recorded = super::refresh::record(
        spoke,
        &admin.kubeconfig,
        content_of(&data),
        SealedTo::Nothing,
        tick.now,
    );
    recorded.client_sha256 = None;
    recorded.client_not_after = None;
    recorded.credential = crate::mint::RecordedCredential {
        mode: CredentialMode::Federated,
        user: None,
        generation: s
            .seen
            .committed
            .recorded()
            .map_or(0, |r| r.credential.generation),
    };
    recorded.trust_sha256 = Some(federate::trust_fingerprint(policy));
    let watch = crate::seal::WATCH_LABEL;
    let remote = Remote {
        name: spoke.secret.name.clone(),
        namespace: spoke.secret.namespace.clone(),
        labels: [(watch.0.to_string(), watch.1.to_string())].into(),
        annotations: recorded.to_annotations(),
        data,
    };
    Trusted {
        recorded,
        remote,
        user,
    }
}

/// The spoke's trust of the hub for this spoke: its audience is its own API server URL
/// (what Flux's generic provider asks for when `audiences` is absent).
fn trust_of(policy: &FederatedPolicy, server: &str) -> Result<Trust, SpokeError> {
    let issuer_ca = match &policy.issuer_ca {
        None => None,
        Some(path) => Some(read_issuer_ca(path).map_err(fed)?),
    };
    let mut subjects: Vec<String> = policy
        .service_accounts
        .iter()
        .map(|a| a.subject())
        .collect();
    subjects.push(policy.check_as.subject());
    Ok(Trust {
        issuer: policy.issuer.clone(),
        discovery_url: policy.discovery_url.clone(),
        issuer_ca,
        audience: server.to_string(),
        subjects,
        username_prefix: policy.username_prefix.clone(),
    })
}

/// credential.federated.issuer_ca: a file of the host's, beside spokekeeper.yaml.
fn read_issuer_ca(path: &std::path::Path) -> Result<String, FederateError> {
    let bad = |why: String| FederateError::IssuerCa {
        path: path.display().to_string(),
        why,
    };
    let size = std::fs::metadata(path)
        .map_err(|e| bad(e.to_string()))?
        .len();
    if size > MAX_ISSUER_CA {
        return Err(bad(format!(
            "is {size} bytes, more than a CA bundle ({MAX_ISSUER_CA})"
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let ders = crate::certs::certificates_der(&bytes).map_err(|e| bad(e.to_string()))?;
    if ders.is_empty() {
        return Err(bad("holds no certificate".into()));
    }
    Ok(crate::certs::to_pem(&ders))
}

/// What the ConfigMap tells Flux for the spoke at `server`: the spoke's audience is its
/// URL, as [trust_of] writes it on the node.
fn reach(server: String, ca_pem: String) -> Reach {
    Reach {
        audiences: vec![server.clone()],
        address: server,
        ca_pem,
        service_account: None,
    }
}

/// Whether a committed ConfigMap says what spokekeeper wrote with the record beside it.
/// Anyone who can push can edit both; this catches an edit of the data alone (an
/// address or audience of someone else's), and the record's own fields are judged as
/// every spoke's are (the server against the configuration, the CAs against the probe).
pub(super) fn written(remote: &Remote, recorded: &Recorded) -> Result<(), InvalidKind> {
    let want = reach(
        recorded.server.clone(),
        crate::certs::to_pem(&recorded.ca_bundle),
    );
    remote.holds(&want).map_err(InvalidKind::ConfigMap)?;
    if content_of(&remote.data) != recorded.content_sha256 {
        return Err(InvalidKind::Annotations(AnnotationError::Disagree {
            key: super::state::CONTENT_SHA256,
            other: "data",
        }));
    }
    Ok(())
}

/// What the ConfigMap says, fingerprinted: a periodic check commits only a change.
fn content_of(data: &std::collections::BTreeMap<String, String>) -> Fingerprint<Content> {
    let canonical = serde_json::to_vec(data).unwrap_or_default();
    Fingerprint::of(&canonical)
}

/// The hub's refusal of a TokenRequest for `account`.
fn token_refused(account: &crate::config::ServiceAccount, e: &TokenError) -> FederateError {
    let (code, message) = match e {
        TokenError::Refused { code, message } => (*code, message.clone()),
        other => (0, other.to_string()),
    };
    FederateError::Token {
        account: account.to_string(),
        code,
        message,
        fix: e.fix(),
    }
}

fn fed(e: FederateError) -> SpokeError {
    SpokeError::Federate(std::sync::Arc::new(e))
}

fn stage(tick: &Tick<'_>, spoke: &SpokeConfig, stage: &'static str) {
    tick.options.progress.emit(super::progress::Step::Stage {
        spoke: &spoke.name,
        stage,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A federated spoke's record and the ConfigMap a tick commits with it.
    fn committed() -> (Recorded, Remote) {
        let now = time::OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let ca = params.self_signed(&key).unwrap().der().to_vec();
        let server = "https://10.0.0.1:6443".to_string();
        let data = reach(
            server.clone(),
            crate::certs::to_pem(std::slice::from_ref(&ca)),
        )
        .data();
        let recorded = Recorded {
            spoke: "dev".into(),
            server,
            ca_sha256: Fingerprint::of(&ca),
            ca_bundle: vec![ca],
            ca_not_after: now + time::Duration::days(3000),
            client_sha256: None,
            client_not_after: None,
            content_sha256: content_of(&data),
            sealed_to: SealedTo::Nothing,
            rotated_at: now,
            credential: crate::mint::RecordedCredential {
                mode: CredentialMode::Federated,
                user: None,
                generation: 0,
            },
            trust_sha256: Some(Fingerprint::from_digest([7; 32])),
        };
        let remote = Remote {
            name: "dev-kubeconfig".into(),
            namespace: "dev".into(),
            labels: Default::default(),
            annotations: recorded.to_annotations(),
            data,
        };
        (recorded, remote)
    }

    /// What observe reads of the committed file (its own test is the real-stack one).
    fn read(remote: &Remote) -> Result<Recorded, String> {
        let back = Remote::parse(remote.to_yaml().as_bytes()).map_err(|e| e.to_string())?;
        let recorded = Recorded::from_annotations(&back.annotations).map_err(|e| e.to_string())?;
        written(&back, &recorded).map_err(|e| e.to_string())?;
        Ok(recorded)
    }

    #[test]
    fn a_configmap_as_written_reads_back_as_its_record() {
        let (recorded, remote) = committed();
        assert_eq!(read(&remote), Ok(recorded));
    }

    #[test]
    fn a_configmap_whose_data_was_edited_is_unreadable_naming_the_key() {
        let (_, remote) = committed();
        let edits: [(&str, Option<&str>); 5] = [
            // The hub's own audience: its token for this spoke would work on the hub.
            (
                "audiences",
                Some("https://kubernetes.default.svc.cluster.local"),
            ),
            // The spoke's audience and another server's: Flux asks for both.
            (
                "audiences",
                Some("https://10.0.0.1:6443\nhttps://evil.example"),
            ),
            ("address", Some("https://evil.example:6443")),
            ("ca.crt", None),
            // Object-level identity: a token of another hub ServiceAccount.
            ("serviceAccountName", Some("default")),
        ];
        for (key, value) in edits {
            let mut edited = remote.clone();
            match value {
                Some(v) => edited.data.insert(key.into(), v.into()),
                None => edited.data.remove(key),
            };
            // The attacker recomputes the fingerprint too: the data is still judged.
            let mut record = Recorded::from_annotations(&edited.annotations).unwrap();
            record.content_sha256 = content_of(&edited.data);
            edited.annotations = record.to_annotations();
            let e = read(&edited).unwrap_err();
            assert!(
                e.contains(&format!("data.{key} is not what spokekeeper wrote")),
                "{key}: {e}"
            );
        }
    }

    #[test]
    fn a_configmap_whose_content_fingerprint_was_edited_is_unreadable() {
        let (_, mut remote) = committed();
        let mut record = Recorded::from_annotations(&remote.annotations).unwrap();
        record.content_sha256 = Fingerprint::from_digest([1; 32]);
        remote.annotations = record.to_annotations();
        let e = read(&remote).unwrap_err();
        assert!(
            e.contains("spokekeeper.io/content-sha256 and data disagree"),
            "{e}"
        );
    }
}
