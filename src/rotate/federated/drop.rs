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
    // The marker must be readable back on every node, or the next rotation would trust
    // the hub again there.
    for (host, read) in headers(spoke).await? {
        if let Header::Unsupported(e) = read {
            return Err(fed(FederateError::DropUnsupported {
                spoke: on_node(spoke, host),
                binding,
                why: crate::text::one_line(&e.to_string(), 400),
            }));
        }
    }
    let content = dropped::render(spoke.distro, at.version, tick.now).map_err(|e| fed(e.into()))?;
    nodes::write_on_each(spoke, content.as_bytes()).await?;
    let nodes = nodes::each(spoke, admin, limit).await?;
    at.wait_loaded(&nodes, &content).await?;
    // A token minted now, never presented before (no cached authentication), to each
    // node's API server by itself.
    let token = hub_token(at.hub, at.policy, &audience).await?;
    nodes::on_each(&nodes, |node| {
        let audience = audience.clone();
        let token = &token;
        let ca = &at.ca_pem;
        async move {
            check::refuses(&node.server, ca, token, &audience, limit)
                .await
                .map_err(|e| match e {
                    FederateError::StillAccepted { server, user, .. } => {
                        FederateError::StillTrusted {
                            server,
                            audience,
                            user,
                        }
                    }
                    other => other,
                })
        }
    })
    .await
}

/// Ok unless the spoke's file says the hub's issuer was dropped; a rotation of the
/// spoke with `--force`, naming it, trusts the hub again. A node whose recipe predates
/// the header verb cannot hold a drop (a drop needs the verb): it goes on, with a warning.
pub(super) async fn not_dropped(tick: &Tick<'_>, spoke: &SpokeConfig) -> Result<(), SpokeError> {
    let named = tick.options.only.contains(&spoke.name);
    let restore = tick.options.force && named && !tick.options.revoke;
    // A drop on any node holds the spoke: its file there trusts no issuer.
    for (host, read) in headers(spoke).await? {
        let line = match read {
            Header::Line(line) => line,
            Header::Unsupported(e) => {
                tracing::warn!(
                    spoke = %spoke.name,
                    node = %host,
                    error = %e,
                    "the node's federated recipe predates read-authentication-config-header: reinstall it (spokekeeper init --credential federated) so that revoke --drop-issuer can be used"
                );
                continue;
            }
        };
        let refused = match dropped::parse(&line) {
            Ok(None) => continue,
            Ok(Some(d)) => FederateError::IssuerDropped {
                spoke: on_node(spoke, host),
                at: d.at_text(),
            },
            Err(bad) => FederateError::BadMarker {
                spoke: on_node(spoke, host),
                why: bad.why,
            },
        };
        if restore {
            tracing::warn!(spoke = %spoke.name, node = %host, was = %refused, "rotate --force: trusting the hub again");
            continue;
        }
        return Err(fed(refused));
    }
    Ok(())
}

/// The spoke's name, with the node's when the spoke has several.
fn on_node(spoke: &SpokeConfig, host: &str) -> String {
    if spoke.servers.is_empty() {
        spoke.name.clone()
    } else {
        format!("{} (node {host})", spoke.name)
    }
}

/// The first line of every server node's file, in node order.
async fn headers(spoke: &SpokeConfig) -> Result<Vec<(&str, Header)>, SpokeError> {
    let reads = nodes::hosts(spoke).map(|host| async move {
        let read = crate::spoke::read_authentication_config_header(host, &spoke.ssh).await;
        (host, read)
    });
    let mut headers = Vec::new();
    for (host, read) in futures::future::join_all(reads).await {
        headers.push((host, read.map_err(|e| SpokeError::Extract(e.into()))?));
    }
    Ok(headers)
}
