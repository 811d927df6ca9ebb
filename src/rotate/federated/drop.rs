//! `spokekeeper revoke SPOKE --drop-issuer`: the spoke stops trusting the hub's issuer
//! at all (a compromised hub mints tokens for any audience, which a revoke cannot take
//! away), and stays so: the file on the node says so on its first line, and every later
//! rotation reads that line back before it writes ([`not_dropped`]), refusing to trust
//! the hub again until `spokekeeper rotate SPOKE --force` names the spoke.
//!
//! Nothing is committed: the ConfigMap still says where the spoke is, and Flux keeps
//! failing against it (401), which is the point. The binding binds nobody rather than
//! being deleted: it keeps the audience generation, so a later `rotate --force` never
//! goes back to an audience a revoke moved away from.

use super::*;
use crate::federate::dropped;
use crate::mint::Scope;
use crate::rotate::decide::Reason;
use crate::spoke::Header;

/// What a drop did, whatever its end: once the binding was cut, why (a
/// [`Reason::IssuerDropped`]) and the binding's name.
pub(in crate::rotate) struct Dropping {
    pub cut: Option<(Reason, String)>,
    pub end: Result<(), SpokeError>,
}

/// Cuts the hub off the spoke at once, then writes the file that trusts no issuer,
/// waits until the API server runs it and proves a fresh hub token is refused (401).
pub(in crate::rotate) async fn drop_issuer(
    tick: &Tick<'_>,
    s: &Spoke<'_>,
    admin: &Fresh,
) -> Dropping {
    let mut cut = None;
    let end = dropped(tick, s, admin, &mut cut).await;
    Dropping { cut, end }
}

async fn dropped(
    tick: &Tick<'_>,
    s: &Spoke<'_>,
    admin: &Fresh,
    cut: &mut Option<(Reason, String)>,
) -> Result<(), SpokeError> {
    let spoke = s.config;
    let at = Target::of(tick, s, admin)?;
    let limit = tick.context.live_timeout;
    let binding = federate::binding::name(&Scope::of(spoke));
    stage(tick, spoke, "trust");
    let found = federate::binding::found(&admin.yaml, spoke, limit)
        .await
        .map_err(|e| SpokeError::Mint(e.into()))?;
    let generation = spoke_generation(spoke, found.map(|f| f.generation), s);
    at.bind(admin, &[], generation).await?;
    let when = dropped::Dropped { at: tick.now };
    let audience = federate::audience(&at.server, generation);
    let reason = Reason::IssuerDropped {
        at: when.at_text(),
        generation,
        audience: audience.clone(),
    };
    *cut = Some((reason, binding.clone()));
    // The marker must be readable back, or the next rotation would trust the hub again.
    if let Header::Unsupported(e) = header(spoke).await? {
        return Err(fed(FederateError::DropUnsupported {
            spoke: spoke.name.clone(),
            binding,
            why: crate::text::one_line(&e.to_string(), 400),
        }));
    }
    let content = dropped::render(spoke.distro, at.version, tick.now).map_err(|e| fed(e.into()))?;
    crate::spoke::write_authentication_config(&spoke.address, &spoke.ssh, content.as_bytes())
        .await
        .map_err(|e| SpokeError::Extract(e.into()))?;
    let client = admin_client(admin, limit).await?;
    at.wait_loaded(&client, &content).await?;
    // A token minted now, never presented before (no cached authentication).
    let token = hub_token(at.hub, at.policy, &audience).await?;
    check::refuses(&at.server, &at.ca_pem, &token, &audience, limit)
        .await
        .map_err(|e| match e {
            FederateError::StillAccepted { server, user, .. } => fed(FederateError::StillTrusted {
                server,
                audience: audience.clone(),
                user,
            }),
            other => fed(other),
        })
}

/// Ok unless the spoke's file says the hub's issuer was dropped; a rotation of the
/// spoke with `--force`, naming it, trusts the hub again. A node whose recipe predates
/// the header verb cannot hold a drop (a drop needs the verb): it goes on, with a warning.
pub(super) async fn not_dropped(tick: &Tick<'_>, spoke: &SpokeConfig) -> Result<(), SpokeError> {
    let named = tick.options.only.contains(&spoke.name);
    let restore = tick.options.force && named && !tick.options.revoke;
    let line = match header(spoke).await? {
        Header::Line(line) => line,
        Header::Unsupported(e) => {
            tracing::warn!(
                spoke = %spoke.name,
                error = %e,
                "the node's federated recipe predates read-authentication-config-header: reinstall it (spokekeeper init --credential federated) so that revoke --drop-issuer can be used"
            );
            return Ok(());
        }
    };
    let refused = match dropped::parse(&line) {
        Ok(None) => return Ok(()),
        Ok(Some(d)) => FederateError::IssuerDropped {
            spoke: spoke.name.clone(),
            at: d.at_text(),
        },
        Err(bad) => FederateError::BadMarker {
            spoke: spoke.name.clone(),
            why: bad.why,
        },
    };
    if restore {
        tracing::warn!(spoke = %spoke.name, was = %refused, "rotate --force: trusting the hub again");
        return Ok(());
    }
    Err(fed(refused))
}

async fn header(spoke: &SpokeConfig) -> Result<Header, SpokeError> {
    crate::spoke::read_authentication_config_header(&spoke.address, &spoke.ssh)
        .await
        .map_err(|e| SpokeError::Extract(e.into()))
}
