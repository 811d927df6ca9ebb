//! Minted credentials (credential.mode: minted): a fresh key pair, a certificate signed
//! through the spoke's CertificateSigningRequest API for a per-generation user, and a
//! ClusterRoleBinding that authorizes that user, so the hub's credential is short-lived
//! and revoked by deleting its binding. The admin credential that does this stays in
//! memory and is never sealed, committed or logged.

mod api;
mod bindings;
mod csr;
mod error;
mod generation;
mod issuer;
mod lifetime;
mod renew;

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use time::OffsetDateTime;

pub use api::{Answer, Bound, Scope, Spoke};
pub(crate) use bindings::{Revocation, labels, scoped, withdraw};
pub use csr::{MintKey, csr_name, request};
pub use error::{BuildError, KeyError, MintError};
pub(crate) use generation::MAX_GENERATION;
pub use generation::{GenerationError, RecordedCredential};
pub use lifetime::{Limit, Shortfall};
pub(crate) use renew::{Allowed, Check, Held, Renewed, Why, renew};

use crate::certs::{self, CertInfo};
use crate::config::CredentialPolicy;
use crate::kubeconfig::Sanitized;
use crate::secret::SecretBytes;
use crate::spoke::{self, LiveReport};
use api::{CSRS, MANAGED_BY, SIGNER, shown};
use bindings::ensure_binding;
use lifetime::Lifetime;

/// The group no minted credential may be in: it bypasses RBAC.
const MASTERS: &str = "system:masters";
/// Largest `status.certificate` accepted (base64 of a PEM chain).
const MAX_CERTIFICATE: usize = 64 * 1024;
const POLL: Duration = Duration::from_millis(500);

/// The ClusterRoleBinding of one hub's spoke entry's generation. Dots separate the parts:
/// neither a hub_id nor a spoke name holds one, so no two (hub, spoke, generation) share
/// a name (with dashes, hub `a-b` spoke `c` and hub `a` spoke `b-c` would).
pub(crate) fn binding_name(scope: &Scope<'_>, generation: u64) -> String {
    format!("spokekeeper.{}.{}.g{generation}", scope.hub, scope.spoke)
}

/// The user of one mint: the template filled in, then `:` and 8 random hex digits, so
/// that no user name is bound twice, even when the counter starts again.
fn fresh_user(req: &Request<'_>) -> Result<String, MintError> {
    use ring::rand::{SecureRandom, SystemRandom};
    let mut random = [0u8; 4];
    SystemRandom::new()
        .fill(&mut random)
        .map_err(|_| MintError::from(KeyError::Random))?;
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "{}:{hex}",
        req.policy.user_for(req.spoke, req.generation)
    ))
}

/// What to mint for one spoke.
pub struct Request<'a> {
    pub spoke: &'a str,
    pub policy: &'a CredentialPolicy,
    pub generation: u64,
    /// Per API call.
    pub(crate) call_timeout: Duration,
    /// Waiting for the signer (default 30s).
    pub(crate) sign_timeout: Duration,
}

/// A minted credential, validated live; not Debug: it holds the minted key, and nothing
/// prints it.
pub struct Minted {
    pub kubeconfig: Sanitized,
    pub yaml: SecretBytes,
    pub content_sha256: crate::fingerprint::Fingerprint<crate::fingerprint::Content>,
    pub live: LiveReport,
    /// Minted, its user and generation.
    pub credential: RecordedCredential,
    /// The spoke issued less than `credential.ttl` (but more than `renew_before`).
    pub shortened: Option<Shortfall>,
}

/// Mints with the (validated, sanitized) admin credential `admin`: key, CSR, approval,
/// certificate, binding; then proves the minted kubeconfig authenticates as the user,
/// outside system:masters, and is authorized by the binding.
pub async fn mint(admin: &Sanitized, req: &Request<'_>) -> Result<Minted, MintError> {
    let user = fresh_user(req)?;
    let scope = Scope {
        hub: &req.policy.hub_id,
        spoke: req.spoke,
    };
    let spoke = Spoke::admin(&admin.to_yaml(), req.call_timeout).await?;
    let key = MintKey::generate()?;
    let pem = request(&key, &user)?;
    let name = csr_name(req.spoke, req.generation)?;
    let chain = signed(&spoke, req, &name, &user, &pem).await;
    // Always removed: a request left behind would only clutter the spoke.
    if let Err(e) = delete_csr(&spoke, &name).await {
        tracing::warn!(spoke = req.spoke, csr = %name, error = %e, "cannot delete the CSR");
    }
    let chain = chain?;
    let (leaf, ca) = check_certificate(&chain, &key, &user, &name, admin.client_certs())?;
    // Judged before anything is bound: a lifetime that would be renewed at once leaves
    // no binding behind, and the committed credential stays.
    let shortened = match lifetime::judge(
        leaf.not_after,
        ca.as_ref().map(|c| c.not_after),
        OffsetDateTime::now_utc(),
        req.policy.ttl,
        req.policy.renew_before,
    ) {
        Lifetime::Full => None,
        Lifetime::Short(short) => {
            tracing::warn!(
                spoke = req.spoke,
                csr = %name,
                renew_before = %crate::config::Span(req.policy.renew_before),
                "{short}: renewed sooner than credential.ttl implies"
            );
            Some(short)
        }
        Lifetime::TooShort(short) => {
            return Err(MintError::TooShort {
                csr: name,
                renew_before: crate::config::Span(req.policy.renew_before),
                short,
            });
        }
    };
    let binding = binding_name(&scope, req.generation);
    ensure_binding(&spoke, &scope, &binding, &user, req.policy, req.generation).await?;

    let private = key.private_key()?;
    drop(key);
    let kubeconfig = admin.with_client(chain, private);
    if let Some(p) = kubeconfig
        .validity_problems(OffsetDateTime::now_utc())
        .into_iter()
        .next()
    {
        return Err(MintError::Validate(p.to_string()));
    }
    let yaml = kubeconfig.to_yaml();
    let live = spoke::check_live(&yaml, req.call_timeout)
        .await
        .map_err(|e| MintError::Validate(e.to_string()))?;
    if live.username != user {
        return Err(MintError::Validate(format!(
            "it authenticated as {:?}, not as the minted user {user:?}",
            live.username
        )));
    }
    if live.groups.iter().any(|g| g == MASTERS) {
        return Err(MintError::Validate(format!(
            "it is in {MASTERS}, which bypasses RBAC and cannot be revoked"
        )));
    }
    authorized(&spoke, &yaml, req, &user, &binding).await?;
    let content_sha256 = kubeconfig.content_sha256();
    Ok(Minted {
        kubeconfig,
        yaml,
        content_sha256,
        live,
        credential: RecordedCredential {
            mode: crate::config::CredentialMode::Minted,
            user: Some(user),
            generation: req.generation,
        },
        shortened,
    })
}

/// create -> approve -> wait for the certificate: the PEM chain, parsed.
async fn signed(
    spoke: &Spoke,
    req: &Request<'_>,
    name: &str,
    user: &str,
    pem: &str,
) -> Result<Vec<CertInfo>, MintError> {
    let body = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "labels": {MANAGED_BY: "spokekeeper"}},
        "spec": {
            "request": B64.encode(pem),
            "signerName": SIGNER,
            "expirationSeconds": req.policy.ttl.as_secs(),
            "usages": ["client auth"],
        },
    });
    let mut created = spoke
        .call_ok(
            "create CSR",
            ("create", "certificatesigningrequests"),
            "POST",
            CSRS,
            Some(&body),
        )
        .await?;
    let mut conditions = created["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.push(json!({
        "type": "Approved",
        "status": "True",
        "reason": "SpokekeeperMint",
        "message": format!("spokekeeper minted the hub's credential for spoke {} (user {user})", req.spoke),
    }));
    created["status"]["conditions"] = Value::Array(conditions);
    spoke
        .call_ok(
            "approve CSR",
            (
                "update certificatesigningrequests/approval and approve on signers",
                "kubernetes.io/kube-apiserver-client",
            ),
            "PUT",
            &format!("{CSRS}/{name}/approval"),
            Some(&created),
        )
        .await?;
    let deadline = tokio::time::Instant::now() + req.sign_timeout;
    loop {
        let csr = spoke
            .call_ok(
                "wait for the certificate",
                ("get", "certificatesigningrequests"),
                "GET",
                &format!("{CSRS}/{name}"),
                None,
            )
            .await?;
        if let Some(refused) = refused(&csr, name, user) {
            return Err(refused);
        }
        if let Some(cert) = csr["status"]["certificate"]
            .as_str()
            .filter(|c| !c.is_empty())
        {
            return chain(cert, name);
        }
        if tokio::time::Instant::now() + POLL > deadline {
            return Err(MintError::SignerMissing {
                csr: name.to_string(),
                secs: req.sign_timeout.as_secs(),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A Denied or Failed condition that is True.
fn refused(csr: &Value, name: &str, user: &str) -> Option<MintError> {
    let conditions = csr["status"]["conditions"].as_array()?;
    conditions.iter().take(64).find_map(|c| {
        let kind = c["type"].as_str()?;
        (matches!(kind, "Denied" | "Failed") && c["status"] == "True").then(|| MintError::Denied {
            csr: name.to_string(),
            user: user.to_string(),
            condition: kind.to_string(),
            reason: shown(c["reason"].as_str().unwrap_or("no reason")),
            message: shown(c["message"].as_str().unwrap_or("no message")),
        })
    })
}

fn chain(cert: &str, name: &str) -> Result<Vec<CertInfo>, MintError> {
    let bad = |why: String| MintError::BadCertificate {
        csr: name.to_string(),
        why,
    };
    if cert.len() > MAX_CERTIFICATE {
        return Err(bad(format!("status.certificate is {} bytes", cert.len())));
    }
    let pem = B64
        .decode(cert)
        .map_err(|_| bad("status.certificate is not base64".into()))?;
    let chain = certs::parse_pem_certificates(&pem).map_err(|e| bad(e.to_string()))?;
    if chain.is_empty() {
        return Err(bad("status.certificate holds no certificate".into()));
    }
    Ok(chain)
}

/// The leaf must carry our key, name our user alone, in no group, be a client
/// certificate, and be issued by the client CA the admin credential's issuer is (see
/// issuer.rs); returns it and its issuing CA, when at hand.
fn check_certificate(
    chain: &[CertInfo],
    key: &MintKey,
    user: &str,
    name: &str,
    admin: &[CertInfo],
) -> Result<(CertInfo, Option<CertInfo>), MintError> {
    let bad = |why: String| MintError::BadCertificate {
        csr: name.to_string(),
        why,
    };
    let leaf = &chain[0];
    let private = key.private_key()?;
    certs::key_matches_cert(&private, &leaf.der)
        .map_err(|_| bad("it is not for the key that was sent".into()))?;
    issuer::check_subject(&leaf.der, user).map_err(bad)?;
    let ca = issuer::check(leaf, admin, &chain[1..]).map_err(bad)?;
    Ok((leaf.clone(), ca))
}

async fn delete_csr(spoke: &Spoke, name: &str) -> Result<(), MintError> {
    match spoke
        .call("delete CSR", "DELETE", &format!("{CSRS}/{name}"), None)
        .await?
    {
        Answer::Ok(_) | Answer::Status { code: 404, .. } => Ok(()),
        Answer::Status { code, message } => Err(spoke.api("delete CSR", code, message)),
    }
}

/// A SelfSubjectReview is allowed to anyone: the binding is proven by an access review,
/// asked again briefly while the API server's RBAC cache catches up.
async fn authorized(
    admin: &Spoke,
    minted: &SecretBytes,
    req: &Request<'_>,
    user: &str,
    binding: &str,
) -> Result<(), MintError> {
    let role = &req.policy.cluster_role;
    let (verb, group, resource) = if role == "cluster-admin" {
        ("*".to_string(), "*".to_string(), "*".to_string())
    } else {
        admin
            .first_rule(role)
            .await?
            .unwrap_or_else(|| ("get".into(), "".into(), "namespaces".into()))
    };
    let own = Spoke::connect(minted, req.call_timeout)
        .await
        .map_err(|e| MintError::Validate(e.to_string()))?;
    let deadline = tokio::time::Instant::now() + req.sign_timeout.min(Duration::from_secs(15));
    loop {
        if own.may(&verb, &group, &resource).await? {
            return Ok(());
        }
        if tokio::time::Instant::now() + POLL > deadline {
            return Err(MintError::NotAuthorized {
                user: user.to_string(),
                binding: binding.to_string(),
                role: role.clone(),
                what: format!("{verb} on {resource} (group {group:?})"),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests;
