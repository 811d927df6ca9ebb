//! [trust] for a federated spoke, with the admin credential just validated: the spoke's
//! trust of the hub written on its node, the hub's controllers bound, and both proven
//! before anything is committed; then the ConfigMap Flux reaches the spoke with.

use std::time::Duration;

use super::context::Spoke;
use super::context::Tick;
use super::error::SpokeError;
use super::refresh::Fresh;
use super::state::{Recorded, SealedTo};
use crate::config::{CredentialMode, FederatedPolicy, SpokeConfig};
use crate::federate::{self, FederateError, Reach, Remote, Trust, Version, check};
use crate::fingerprint::{Content, Fingerprint};
use crate::hub::token::TokenError;
use crate::spoke::live;

mod drop;
mod gate;
mod judged;
mod nodes;
mod revoke;

pub(super) use drop::drop_issuer;
pub(super) use judged::{refused, written};
pub(super) use revoke::revoke;

/// How long a spoke's API server may take to load a rewritten file: it watches the file
/// and polls it every minute (pkg/kubeapiserver/options/authentication.go).
pub(crate) const RELOAD_WAIT: Duration = Duration::from_secs(75);

/// What a federated spoke's rotation made: its record and the ConfigMap to commit.
pub(super) struct Trusted {
    pub recorded: Recorded,
    pub remote: Remote,
    /// The user the check's token authenticated as.
    pub user: String,
}

/// trust, from the admin credential `admin` (validated against the live API): written,
/// bound, loaded and proven, then the ConfigMap. The audience generation is the recorded
/// one, or the binding's when a revoke raised it and did not commit.
pub(super) async fn trust(
    tick: &Tick<'_>,
    s: &Spoke<'_>,
    admin: &Fresh,
) -> Result<Trusted, SpokeError> {
    let spoke = s.config;
    let at = Target::of(tick, s, admin)?;
    stage(tick, spoke, "trust");
    let limit = tick.context.live_timeout;
    let found = federate::binding::found(&admin.yaml, spoke, limit)
        .await
        .map_err(|e| SpokeError::Mint(e.into()))?;
    let recorded = recorded_generation(s);
    let generation = spoke_generation(spoke, found.as_ref().map(|f| f.generation), s);
    if generation > recorded {
        tracing::warn!(
            spoke = %spoke.name,
            recorded,
            generation,
            "the spoke's binding is at a later audience generation than the fleet repo records (a revoke that was not committed): going on from it"
        );
    }
    let (trust, content) = at.render(generation)?;
    // A dropped issuer first (a read of the node): its hub may well be unreachable.
    drop::not_dropped(tick, spoke).await?;
    // The hub's token next: a misconfigured issuer or a refused request writes nothing.
    let token = hub_token(at.hub, at.policy, &trust.audience).await?;
    gate::open(at.hub, at.policy).await?;
    nodes::write_on_each(spoke, content.as_bytes()).await?;
    let nodes = nodes::each(spoke, admin, limit).await?;
    let users = at.users(&trust);
    let grant = if generation > recorded {
        // Finishing a revoke: a node may still run the revoked audience.
        at.bind_once_loaded(admin, &nodes, &content, (&users, generation))
            .await?
    } else {
        let grant = at.bind(admin, &users, generation).await?;
        at.wait_loaded(&nodes, &content).await?;
        grant
    };
    let proven = at
        .prove(&nodes, &trust, token, (&users, &grant), limit)
        .await?;
    Ok(committing(tick, s, admin, at.policy, proven, generation))
}

/// What [trust] would commit, with nothing written on the node, bound or asked of the hub
/// (a dry run): the ConfigMap at the recorded audience generation, its file rendered so
/// that a spoke too old for one is refused as it would be.
pub(super) fn planned(
    tick: &Tick<'_>,
    s: &Spoke<'_>,
    admin: &Fresh,
) -> Result<Trusted, SpokeError> {
    let at = Target::of(tick, s, admin)?;
    let generation = recorded_generation(s);
    let (trust, _) = at.render(generation)?;
    let proven = Proven {
        user: trust.username(&at.policy.check_as.subject()),
        reach: judged::reach(
            at.server.clone(),
            at.ca_pem.clone(),
            trust.audience,
            at.policy.own_account.as_ref(),
        ),
    };
    Ok(committing(tick, s, admin, at.policy, proven, generation))
}

/// What a federated rotation works from: the policy, the hub, the spoke's API server URL
/// and its Kubernetes version (the file's apiVersion).
struct Target<'a> {
    spoke: &'a SpokeConfig,
    policy: &'a FederatedPolicy,
    hub: &'a crate::hub::Hub,
    server: String,
    version: Version,
    ca_pem: String,
    /// Per call to the spoke's API.
    limit: Duration,
    /// The tick's issuer CA files.
    cas: &'a federate::IssuerCas,
}

impl<'a> Target<'a> {
    fn of(tick: &Tick<'a>, s: &Spoke<'a>, admin: &Fresh) -> Result<Target<'a>, SpokeError> {
        let spoke = s.config;
        let policy = spoke
            .credential
            .federated
            .as_ref()
            .ok_or_else(|| fed(FederateError::NotFederated))?;
        let version = Version::parse(&admin.live.git_version)
            .ok_or_else(|| fed(FederateError::Version(admin.live.git_version.clone())))?;
        let hub = tick.hub.ok_or_else(|| fed(FederateError::NoHub))?;
        Ok(Target {
            spoke,
            policy,
            hub,
            server: admin.kubeconfig.server_string(),
            version,
            ca_pem: ca_pem(admin),
            limit: tick.context.live_timeout,
            cas: tick.issuer_cas,
        })
    }

    /// The spoke's trust at audience `generation`, and the file that says it.
    fn render(&self, generation: u64) -> Result<(Trust, String), SpokeError> {
        let trust = trust_of(self.policy, self.cas, &self.server, generation)?;
        let content = federate::authn::render(&trust, self.spoke.distro, self.version)
            .map_err(|e| fed(e.into()))?;
        Ok((trust, content))
    }

    /// The spoke's users of the configured hub ServiceAccounts.
    fn users(&self, trust: &Trust) -> Vec<String> {
        self.policy
            .service_accounts
            .iter()
            .map(|a| trust.username(&a.subject()))
            .collect()
    }

    /// Waits until every node's API server runs on `content`.
    async fn wait_loaded(&self, nodes: &[nodes::Node], content: &str) -> Result<(), SpokeError> {
        let mut discovery = self.policy.discovery();
        if let Some(n) = &self.policy.next {
            // The file loads only once both answer: either may be the one that does not.
            discovery = format!("{discovery} and {}", n.discovery());
        }
        nodes::on_each(nodes, |node| {
            check::wait_loaded(
                &node.client,
                (&node.server, &discovery),
                content,
                RELOAD_WAIT,
            )
        })
        .await
    }

    /// Makes the spoke's binding bind `users` at audience `generation`.
    async fn bind(
        &self,
        admin: &Fresh,
        users: &[String],
        generation: u64,
    ) -> Result<federate::binding::Granted, SpokeError> {
        federate::binding::ensure(&admin.yaml, self.spoke, users, generation, self.limit)
            .await
            .map_err(|e| SpokeError::Mint(e.into()))
    }

    /// [`Target::bind`] once every node's API server runs on `content` and its cache of
    /// tokens authenticated under the previous file expired ([`revoke::TOKEN_CACHE`]): a
    /// token for an audience it no longer trusts is never let through by the new binding,
    /// whichever server it is presented to.
    async fn bind_once_loaded(
        &self,
        admin: &Fresh,
        nodes: &[nodes::Node],
        content: &str,
        (users, generation): (&[String], u64),
    ) -> Result<federate::binding::Granted, SpokeError> {
        self.wait_loaded(nodes, content).await?;
        tokio::time::sleep(revoke::TOKEN_CACHE).await;
        self.bind(admin, users, generation).await
    }

    /// On every node, the hub's token is accepted as the check account and each bound
    /// user may do what the cluster role grants first: the ConfigMap to commit says how to
    /// reach the spoke.
    async fn prove(
        &self,
        nodes: &[nodes::Node],
        trust: &Trust,
        token: crate::secret::SecretBytes,
        (users, grant): (&[String], &federate::binding::Granted),
        limit: Duration,
    ) -> Result<Proven, SpokeError> {
        let user = trust.username(&self.policy.check_as.subject());
        let discovery = self.policy.discovery();
        let (ca_pem, hub, who) = (&self.ca_pem, &token, (user.as_str(), discovery.as_str()));
        nodes::on_each(nodes, |node| async move {
            check::accepts(&node.server, ca_pem, hub, who, limit).await?;
            for u in users {
                check::bound(&node.client, &node.server, u, &grant.as_grant(), limit).await?;
            }
            Ok(())
        })
        .await?;
        drop(token);
        let reach = judged::reach(
            self.server.clone(),
            self.ca_pem.clone(),
            trust.audience.clone(),
            self.policy.own_account.as_ref(),
        );
        Ok(Proven { reach, user })
    }
}

/// A spoke whose trust was proven: how Flux reaches it, and who the check's token was.
struct Proven {
    reach: Reach,
    user: String,
}

/// The audience generation the spoke is at: its binding's (every rotation labels it, and
/// a revoke raises it first), else the fleet repo's record (a rebuilt spoke, or one moved
/// from another mode). A record above the binding's is an edit of the fleet repo, not a
/// revoke (one at the last generation would leave revoke nothing to move to): ignored.
fn spoke_generation(spoke: &SpokeConfig, bound: Option<u64>, s: &Spoke<'_>) -> u64 {
    let recorded = recorded_generation(s);
    match bound {
        Some(bound) if recorded > bound => {
            tracing::warn!(
                spoke = %spoke.name,
                recorded,
                bound,
                "the fleet repo records a later audience generation than the spoke's binding carries (edited?): going on from the binding's"
            );
            bound
        }
        Some(bound) => bound,
        None => recorded,
    }
}

/// The audience generation the fleet repo records for the spoke (0: none).
fn recorded_generation(s: &Spoke<'_>) -> u64 {
    s.seen
        .committed
        .recorded()
        .map_or(0, |r| r.credential.generation)
}

/// A token of the check account from the hub for `audience`, issued by the configured
/// issuer or the next one (the hub may have switched to it already).
async fn hub_token(
    hub: &crate::hub::Hub,
    policy: &FederatedPolicy,
    audience: &str,
) -> Result<crate::secret::SecretBytes, SpokeError> {
    let account = &policy.check_as;
    let token = hub
        .service_account_token(&account.namespace, &account.name, audience)
        .await
        .map_err(|e| fed(token_refused(account, &e)))?;
    let claims = check::Claims::of(&token).map_err(|why| {
        fed(FederateError::TokenUnreadable {
            account: account.to_string(),
            why,
        })
    })?;
    if !policy.issuers().contains(&claims.issuer.as_str()) {
        let configured = match &policy.next {
            None => policy.issuer.clone(),
            Some(n) => format!("{} and next.issuer {}", policy.issuer, n.issuer),
        };
        return Err(fed(FederateError::WrongIssuer {
            found: claims.issuer,
            configured,
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
    proven: Proven,
    generation: u64,
) -> Trusted {
    let spoke = s.config;
    let data = proven.reach.data();
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
        generation,
    };
    recorded.trust_sha256 = Some(federate::trust_fingerprint(policy, tick.issuer_cas));
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
        user: proven.user,
    }
}

/// The spoke's trust of the hub for this spoke: its audience is its own API server URL at
/// audience `generation` ([`federate::audience`]); its issuer CAs as the tick read them.
fn trust_of(
    policy: &FederatedPolicy,
    cas: &federate::IssuerCas,
    server: &str,
    generation: u64,
) -> Result<Trust, SpokeError> {
    let pem = |path: &Option<std::path::PathBuf>| {
        path.as_deref().map(|p| cas.pem(p)).transpose().map_err(fed)
    };
    let mut subjects: Vec<String> = policy
        .service_accounts
        .iter()
        .map(|a| a.subject())
        .collect();
    subjects.push(policy.check_as.subject());
    let next = match &policy.next {
        Some(n) => Some(federate::authn::Issuer {
            issuer: n.issuer.clone(),
            discovery_url: n.discovery_url.clone(),
            issuer_ca: pem(&n.issuer_ca)?,
        }),
        None => None,
    };
    Ok(Trust {
        issuer: policy.issuer.clone(),
        discovery_url: policy.discovery_url.clone(),
        issuer_ca: pem(&policy.issuer_ca)?,
        audience: federate::audience(server, generation),
        subjects,
        username_prefix: policy.username_prefix.clone(),
        next,
    })
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
    use crate::federate::{Version, authn};

    #[test]
    fn a_spoke_with_its_own_hub_account_trusts_it_and_the_check_account_alone() {
        let text = "repo: {path: f}\nsealing: {cert: c}\nhub: {}\nspokes:\n- name: dev\n  address: 10.0.0.5\n  secret: {namespace: dev}\n  credential: {mode: federated, federated: {issuer: \"https://hub\", service_account_name: \"{spoke}-flux\"}}\n";
        let config = crate::config::Config::parse(text, "t.yaml", std::path::Path::new("/x"))
            .expect("the configuration");
        let policy = config.spokes[0].credential.federated.as_ref().unwrap();
        let cas = crate::federate::IssuerCas::read([policy]);
        let trust = super::trust_of(policy, &cas, "https://10.0.0.5:6443", 0).unwrap();
        let (own, check) = (
            "system:serviceaccount:dev:dev-flux",
            "system:serviceaccount:spokekeeper:spokekeeper",
        );
        assert_eq!(trust.subjects, [own, check]);
        let version = Version {
            major: 1,
            minor: 34,
        };
        let file = authn::render(&trust, crate::config::Distro::K3s, version).unwrap();
        let rule = format!("expression: \"claims.sub in [\\\"{own}\\\", \\\"{check}\\\"]\"");
        assert!(file.contains(&rule), "{file}");
        assert!(!file.contains("kustomize-controller"), "{file}");
    }
}
