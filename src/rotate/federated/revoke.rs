//! `spokekeeper revoke` for a federated spoke: a leaked hub token (of a hub
//! ServiceAccount, for this spoke's audience) stops working at once, and Flux works again
//! once the commit lands, without a restart of its controllers.
//!
//! Flux's controllers cache a token per audience for up to 80% of its life (fluxcd/pkg
//! cache), so refusing tokens issued before now would break them for up to 48 minutes.
//! The spoke's trust moves to the next audience generation instead
//! ([`federate::audience`]): the binding binds nobody at once (every hub token gets 403),
//! the file names only the new audience, then the binding is made again, and the
//! committed ConfigMap's `audiences` makes the controllers ask for tokens of the new one
//! (a new cache key). The binding carries the new generation from the first step on, so
//! a revoke that fails before its commit is finished by the next rotation rather than
//! trusting the revoked audience again.

use super::*;
use crate::mint::Scope;
use crate::rotate::decide::Reason;
use crate::rotate::observe::Committed;

/// How long a spoke's API server keeps a token it authenticated: kube-apiserver caches
/// every successful bearer-token authentication, the JWT authenticators' included, for
/// 10 s, with no flag to change it (k8s.io/kubernetes v1.37.2
/// pkg/kubeapiserver/options/authentication.go `TokenSuccessCacheTTL: 10 * time.Second`,
/// pkg/kubeapiserver/authenticator/config.go `tokencache.New`). A leaked token presented
/// during the cut is authenticated (then refused by RBAC); binding again sooner than this
/// after the new file loaded would let its cached authentication through.
pub(super) const TOKEN_CACHE: Duration = Duration::from_secs(11);

/// What a revoke did, whatever its end: once the binding was cut, why (a
/// [`Reason::Revoked`]) and the binding's name.
pub(in crate::rotate) struct Revoking {
    pub cut: Option<(Reason, String)>,
    pub end: Result<Trusted, SpokeError>,
}

/// Cuts the hub off the spoke at once, then moves its trust to the next audience
/// generation and proves it, with the admin credential `admin` (validated against the
/// live API).
pub(in crate::rotate) async fn revoke(tick: &Tick<'_>, s: &Spoke<'_>, admin: &Fresh) -> Revoking {
    let mut cut = None;
    let end = revoked(tick, s, admin, &mut cut).await;
    Revoking { cut, end }
}

async fn revoked(
    tick: &Tick<'_>,
    s: &Spoke<'_>,
    admin: &Fresh,
    cut: &mut Option<(Reason, String)>,
) -> Result<Trusted, SpokeError> {
    let spoke = s.config;
    let at = Target::of(tick, s, admin)?;
    let limit = tick.context.live_timeout;
    let binding = federate::binding::name(&Scope::of(spoke));
    stage(tick, spoke, "trust");
    let mint = |e: crate::mint::MintError| SpokeError::Mint(e.into());
    let found = federate::binding::found(&admin.yaml, spoke, limit)
        .await
        .map_err(mint)?;
    // The spoke's binding decides, not the fleet repo: a pusher who deletes the
    // ConfigMap, strips its mode or makes it unreadable must not keep a leaked token
    // working. Only a spoke with neither a binding nor a federated commit has nothing
    // to revoke.
    let had = s.seen.committed.recorded().map(|r| r.credential.mode);
    let unreadable = matches!(
        s.seen.committed,
        Committed::Invalid(_) | Committed::Unreadable(_)
    );
    if found.is_none() && had != Some(CredentialMode::Federated) && !unreadable {
        return Err(SpokeError::RevokeFederated {
            spoke: spoke.name.clone(),
            had,
        });
    }
    let old = spoke_generation(spoke, found.as_ref().map(|f| f.generation), s);
    if had != Some(CredentialMode::Federated) {
        tracing::warn!(
            spoke = %spoke.name,
            generation = old,
            "the committed ConfigMap cannot be read as federated: revoking the audience generation the spoke's binding carries"
        );
    }
    // At once: the binding binds nobody (every hub token gets 403) and says the new
    // generation, before anything else can fail. With no generation left it still binds
    // nobody, at the old one, and the revoke fails naming the counter.
    let new = next_generation(spoke, old, &binding);
    at.bind(admin, &[], *new.as_ref().unwrap_or(&old)).await?;
    let reason = Reason::Revoked {
        generation: old,
        found: found.iter().map(|f| f.generation).collect(),
        users: found.map(|f| f.users).unwrap_or_default(),
    };
    *cut = Some((reason, binding));
    let new = new?;
    super::drop::not_dropped(tick, spoke).await?;
    let (trust, content) = at.render(new)?;
    let old_audience = federate::audience(&at.server, old);
    let token = hub_token(at.hub, at.policy, &trust.audience).await?;
    let old_token = hub_token(at.hub, at.policy, &old_audience).await?;
    super::gate::open(at.hub, at.policy).await?;
    nodes::write_on_each(spoke, content.as_bytes()).await?;
    let nodes = nodes::each(spoke, admin, limit).await?;
    let users = at.users(&trust);
    let grant = at
        .bind_once_loaded(admin, &nodes, &content, (&users, new))
        .await?;
    let proven = at
        .prove(&nodes, &trust, token, (&users, &grant), limit)
        .await?;
    // Every server refuses the revoked audience: a leaked token works on none of them.
    let ca_pem = &at.ca_pem;
    nodes::on_each(&nodes, |node| {
        check::refuses(&node.server, ca_pem, &old_token, &old_audience, limit)
    })
    .await?;
    Ok(committing(tick, s, admin, at.policy, proven, new))
}

/// The audience generation after `old`; the recorded counter is shared with minted
/// generations and capped alike.
fn next_generation(spoke: &SpokeConfig, old: u64, binding: &str) -> Result<u64, SpokeError> {
    old.checked_add(1)
        .filter(|&g| g <= crate::mint::MAX_GENERATION)
        .ok_or_else(|| {
            fed(FederateError::Exhausted {
                spoke: spoke.name.clone(),
                generation: old,
                binding: binding.to_string(),
            })
        })
}
