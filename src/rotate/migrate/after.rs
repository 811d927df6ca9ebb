//! After the old Secret's removal reached the target branch (direct mode: the tick's
//! push; review mode: its pull request merged), the hub and the fleet repo are checked
//! again, then a spoke that was minted has its minted bindings deleted.

use super::rule::{self, Seen, Step};
use super::{MigrationState, Old, in_repo, listed};
use crate::config::{CredentialMode, SpokeConfig};
use crate::rotate::context::Tick;
use crate::rotate::direct::Publish;
use crate::rotate::error::SpokeError;
use crate::rotate::tick_report::SpokeReport;

/// After the push that carried a removal (`pushed`: the tick pushed), or the tick that
/// found a proposed removal merged: the hub and the fleet repo asked again (a consumer on
/// the old Secret pushed meanwhile keeps the bindings), then a spoke that was minted has
/// every minted generation's binding deleted (the federated binding stays). Not pushed,
/// nothing is deleted, and that is said. A merged removal is forgotten once nothing is
/// left to do; until then each tick tries again.
pub(in crate::rotate) async fn after_push(
    tick: &Tick<'_>,
    publish: &impl Publish,
    spoke: &SpokeConfig,
    old: &Old,
    pushed: bool,
    report: &mut SpokeReport,
) {
    let Some(MigrationState::Removed { problem, ready, .. }) =
        report.migration.as_deref_mut().map(|m| &mut m.state)
    else {
        return;
    };
    let landed = old.landed.is_some();
    if tick.options.dry_run {
        return;
    }
    if landed && let Err(why) = tick.options.gate.check() {
        *problem = Some(format!(
            "{why}: the minted bindings wait for a tick that may act"
        ));
        return;
    }
    if !pushed && !landed {
        let why = "the removal was not pushed this tick (the fleet repo's error says why): nothing is deleted on the spoke";
        *problem = Some(match old.credential.mode {
            CredentialMode::Minted => format!(
                "{why}; once it is, delete the minted bindings ({})",
                delete_bindings(spoke)
            ),
            _ => why.to_string(),
        });
        return;
    }
    let still = checked_again(tick, spoke).await;
    let moved = match still {
        Step::Waits(why) => {
            let when = if landed {
                "after the merge"
            } else {
                "after the push"
            };
            let why = format!(
                "{when}: {}; nothing is deleted on the spoke",
                why.join("; ")
            );
            tracing::warn!(spoke = %spoke.name, "the old Secret was removed, but {why}");
            *problem = Some(why);
            return;
        }
        Step::Remove(moved) | Step::WouldRemove(moved) => moved,
    };
    if ready.is_empty() {
        *ready = moved.iter().map(ToString::to_string).collect();
    }
    if old.credential.mode == CredentialMode::Minted {
        match minted_gone(tick, spoke, old).await {
            Ok(names) => report.revoked.extend(names),
            Err(e) => {
                let why = format!(
                    "the minted bindings could not be deleted ({e}): delete them ({})",
                    delete_bindings(spoke)
                );
                tracing::warn!(spoke = %spoke.name, "the old Secret was removed, but {why}");
                *problem = Some(why);
                return;
            }
        }
    }
    if landed && let Err(e) = publish.forget(tick.context, spoke).await {
        tracing::warn!(spoke = %spoke.name, error = %e, "cannot drop the record of the merged removal: the next tick checks again");
    }
}

/// The rule again, on the hub and the fleet repo as they are now.
async fn checked_again(tick: &Tick<'_>, spoke: &SpokeConfig) -> Step {
    let Some(hub) = tick.hub else {
        return Step::Waits(vec!["the hub could not be reached".into()]);
    };
    let seen = Seen {
        namespace: &spoke.secret.namespace,
        name: &spoke.secret.name,
        healthy: true,
        dry_run: false,
        listed: listed(hub, spoke).await,
        unapplied: None,
    };
    let mut fresh = None;
    let on_hub = rule::on_hub(&seen);
    rule::with_repo(on_hub, &spoke.secret.name, in_repo(tick, &mut fresh, spoke))
}

/// The command that deletes this hub's minted bindings for the spoke entry (each
/// carries a generation label; the federated binding carries none).
fn delete_bindings(spoke: &SpokeConfig) -> String {
    format!(
        "kubectl delete clusterrolebinding -l spokekeeper.io/hub={},spokekeeper.io/spoke={},spokekeeper.io/generation",
        spoke.credential.hub_id, spoke.name
    )
}

/// Every minted generation's binding of this hub's spoke entry (and an earlier version's
/// binding of the recorded user), with the admin credential read over SSH.
async fn minted_gone(
    tick: &Tick<'_>,
    spoke: &SpokeConfig,
    old: &Old,
) -> Result<Vec<String>, SpokeError> {
    let limit = tick.context.live_timeout;
    let admin = crate::rotate::refresh::extract_and_validate(spoke, tick.now, limit).await?;
    let revocation = crate::mint::Revocation {
        admin: admin.yaml,
        // Every generation: the federated binding carries none, so it stays.
        below: crate::mint::MAX_GENERATION + 1,
        legacy_user: old.credential.user.clone(),
        hub: spoke.credential.hub_id.clone(),
        spoke: spoke.name.clone(),
    };
    Ok(revocation.revoke(limit).await?)
}
