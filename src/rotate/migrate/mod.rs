//! A federated spoke's move off its old Secret (docs/federated.md, "Migration"). Switched
//! from extracted or minted, the spoke's ConfigMap is committed beside the SealedSecret
//! (or sops Secret) it had, which stays. Each tick then looks at the hub, without SSH,
//! and says which consumers still read the Secret; once none does and every consumer of
//! the ConfigMap is Ready through it ([`rule`]), the old file is removed in a commit of
//! its own. After the push, with the hub and the fleet repo checked again, a spoke that
//! was minted has its minted bindings deleted, with the admin credential read over SSH.
//! In review mode the removal is a pull request; once it is merged ([`landed`]), a later
//! tick checks again and deletes the bindings the same way.

mod after;
mod rule;

pub(super) use after::after_push;

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::context::Tick;
use super::direct::{Publish, Removal, RemoveError};
use super::observe::{Committed, Output};
use super::state::RecordedCredential;
use super::tick_report::SpokeReport;
use crate::config::{CredentialMode, SpokeConfig};
use crate::flux::remote::Remote;
use crate::hub::{Hub, HubError};
use crate::text::one_line;
use rule::{InRepo, Listed, Seen, Step};

/// Where a federated spoke is in its move off the old Secret (`migration` in -o json).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Migration {
    /// The old Secret's file in the fleet repo.
    pub file: String,
    #[serde(flatten)]
    pub state: MigrationState,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum MigrationState {
    /// The old Secret stays: why, each reason naming the consumer it is about.
    Waits { remaining: Vec<String> },
    /// A dry run: it would be removed, these consumers being Ready through the ConfigMap.
    WouldRemove { ready: Vec<String> },
    /// Review mode: the removal waits for review on `branch` in `pull_request` (its URL
    /// the one to merge); `commit`: pushed this tick (None: the branch held it already).
    Proposed {
        branch: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        commit: Option<String>,
        pull_request: Box<crate::forge::PullRequest>,
        ready: Vec<String>,
    },
    /// Removed in `commit` (review mode: the merged removal), these consumers being Ready
    /// through the ConfigMap. `problem`: what kept the minted bindings after the push
    /// (None: nothing did).
    Removed {
        commit: String,
        ready: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        problem: Option<String>,
    },
    /// The file is not this spoke's old Secret, or could not be removed: left as it is.
    Failed { why: String },
}

/// A federated spoke's old Secret, still committed at its sealed default path.
pub(super) struct Old {
    path: PathBuf,
    /// What it recorded: a minted spoke's bindings go once it is removed.
    credential: RecordedCredential,
    /// Review mode: the removal merged since an earlier tick proposed it, in this
    /// commit; the file is gone from the target branch, its bindings not yet deleted.
    landed: Option<String>,
}

/// The old Secret of a federated spoke in `files` (None: not federated, or none there).
/// The file must be this spoke's SealedSecret or sops Secret ([`judged`]), at a path no
/// spoke of `all` commits to ([`old_path`]): anything else is left alone, and said.
pub(super) async fn old(
    spoke: &SpokeConfig,
    all: &[SpokeConfig],
    files: &crate::repo::Snapshot<'_>,
) -> Option<Result<Old, Migration>> {
    let path = old_path(spoke, all)?;
    match files.read(&path).await {
        Ok(None) => None,
        Ok(Some(bytes)) => Some(judged(spoke, path, &bytes)),
        Err(e) => Some(Err(left(&path, format!("cannot be read: {e}")))),
    }
}

/// Where a federated spoke's old Secret would be: its sealed default path, unless a
/// spoke of `all` commits there (two spokes may share a Secret name in two namespaces).
fn old_path(spoke: &SpokeConfig, all: &[SpokeConfig]) -> Option<PathBuf> {
    if spoke.credential.mode != CredentialMode::Federated {
        return None;
    }
    let path = spoke.secret.sealed_output();
    (!all.iter().any(|s| s.output == path)).then_some(path)
}

/// The file at `path` as the spoke's old Secret: its SealedSecret or sops Secret, with its
/// Secret's name and namespace and `spokekeeper.io/spoke`; anything else is left alone.
fn judged(spoke: &SpokeConfig, path: PathBuf, bytes: &[u8]) -> Result<Old, Migration> {
    let (ns, name) = (&spoke.secret.namespace, &spoke.secret.name);
    let record = match Committed::parse_at(&path, None, bytes) {
        Committed::Recorded(r) => r,
        other => {
            let why = other.unreadable().unwrap_or_default();
            return Err(left(
                &path,
                format!(
                    "is not a Secret spokekeeper wrote ({why}): left alone; remove it yourself once nothing reads Secret {ns}/{name}"
                ),
            ));
        }
    };
    let ours = matches!(record.sealed, Output::SealedSecret(_) | Output::Sops(_))
        && record.sealed.name() == name
        && record.sealed.namespace() == ns
        && record.recorded.spoke == spoke.name;
    if !ours {
        let why = one_line(
            &format!(
                "holds {} {}/{} of spoke {:?}, not spoke {}'s old Secret {ns}/{name}: left alone",
                kind(&record.sealed),
                record.sealed.namespace(),
                record.sealed.name(),
                record.recorded.spoke,
                spoke.name
            ),
            300,
        );
        return Err(left(&path, why));
    }
    Ok(Old {
        path,
        credential: record.recorded.credential.clone(),
        landed: None,
    })
}

/// Review mode, the old Secret gone from the target branch: the removal an earlier tick
/// proposed, once merged, with what the file held (read from the removal's parent).
/// None: no such removal recorded in this clone, or not landed.
pub(super) async fn landed(
    ctx: &super::Context,
    publish: &impl Publish,
    spoke: &SpokeConfig,
    all: &[SpokeConfig],
) -> Option<Result<Old, Migration>> {
    let path = old_path(spoke, all)?;
    let commit = publish.landed(ctx, spoke, &path).await?;
    let old = match ctx.repo.removed_file(&commit, &path).await {
        Ok(Some(bytes)) => judged(spoke, path, &bytes),
        Ok(None) => Err(left(
            &path,
            format!("the removal {commit} did not remove it"),
        )),
        Err(e) => Err(left(
            &path,
            format!("the removal {commit} cannot be read: {e}"),
        )),
    };
    Some(old.map(|o| Old {
        landed: Some(commit),
        ..o
    }))
}

/// The file at `path` left as it is, and why.
fn left(path: &std::path::Path, why: String) -> Migration {
    Migration {
        file: path.display().to_string(),
        state: MigrationState::Failed { why },
    }
}

fn kind(o: &Output) -> &'static str {
    match o {
        Output::SealedSecret(_) => "SealedSecret",
        Output::Sops(_) => "Secret",
        Output::ConfigMap(_) => "ConfigMap",
    }
}

/// The fleet repo's tree, read once a tick when a removal is near.
pub(super) type RepoTree = Option<crate::flux::Tree>;

/// One tick's step for a spoke with an old Secret: the rule, then (unless it waits, or
/// this is a dry run) the removal committed through `publish`.
pub(super) async fn step(
    tick: &Tick<'_>,
    publish: &impl Publish,
    spoke: &SpokeConfig,
    report: &SpokeReport,
    old: &Old,
    tree: &mut RepoTree,
) -> Migration {
    let file = old.path.display().to_string();
    let done = |state| Migration {
        file: file.clone(),
        state,
    };
    if let Some(commit) = &old.landed {
        // Merged: nothing to remove; after_push checks again and deletes the bindings.
        let problem = tick
            .options
            .dry_run
            .then(|| "a dry run: nothing is deleted on the spoke".to_string());
        return done(MigrationState::Removed {
            commit: commit.clone(),
            ready: Vec::new(),
            problem,
        });
    }
    let Some(hub) = tick.hub else {
        let why =
            "the hub could not be reached this tick (hub:): nothing is known of the consumers";
        return done(MigrationState::Waits {
            remaining: vec![why.into()],
        });
    };
    let listed = listed(hub, spoke).await;
    let unapplied = unapplied(tick, hub, spoke).await;
    let seen = Seen {
        namespace: &spoke.secret.namespace,
        name: &spoke.secret.name,
        healthy: matches!(
            report.outcome,
            super::Outcome::Healthy | super::Outcome::Unchanged
        ),
        dry_run: tick.options.dry_run,
        listed,
        unapplied,
    };
    let step = rule::on_hub(&seen);
    let step = match step {
        Step::Waits(_) => step,
        step => rule::with_repo(step, &spoke.secret.name, in_repo(tick, tree, spoke)),
    };
    let state = match step {
        Step::Waits(remaining) => {
            for why in &remaining {
                tracing::info!(spoke = %spoke.name, %file, "the old Secret stays: {why}");
            }
            MigrationState::Waits { remaining }
        }
        Step::WouldRemove(ready) => MigrationState::WouldRemove {
            ready: names(&ready),
        },
        Step::Remove(ready) => {
            let ready = names(&ready);
            let message = message(spoke, old, &ready);
            match publish.remove(tick, spoke, &old.path, &message).await {
                Ok(Some(Removal::Committed(commit))) => {
                    tracing::info!(spoke = %spoke.name, %file, %commit, "removed the old Secret: every consumer is Ready through the ConfigMap");
                    MigrationState::Removed {
                        commit,
                        ready,
                        problem: None,
                    }
                }
                Ok(Some(Removal::Proposed {
                    branch,
                    commit,
                    pull_request,
                })) => MigrationState::Proposed {
                    branch,
                    commit,
                    pull_request: Box::new(pull_request),
                    ready,
                },
                Ok(None) => MigrationState::Failed {
                    why: "the target branch no longer holds it".into(),
                },
                Err(RemoveError::Refused { why }) => MigrationState::Waits {
                    remaining: vec![why],
                },
                Err(e) => MigrationState::Failed { why: e.to_string() },
            }
        }
    };
    done(state)
}

/// The consumers in the spoke's namespace that name its credential, listed now; those on
/// the ConfigMap each read again as the hub has them.
async fn listed(hub: &Hub, spoke: &SpokeConfig) -> Result<Listed, HubError> {
    let (ns, name) = (&spoke.secret.namespace, &spoke.secret.name);
    let wanted = BTreeSet::from([name.clone()]);
    let all = hub.consumers(ns, &wanted).await?;
    let mut out = Listed::default();
    for l in all.into_iter().filter(|l| &l.secret == name) {
        if l.config_map {
            let obj = hub.consumer(&l.consumer).await?;
            out.on_config_map.push((l.consumer, obj));
        } else {
            out.on_secret.push(l.consumer);
        }
    }
    Ok(out)
}

/// Why the hub's ConfigMap does not hold what the fleet repo commits for the spoke
/// (None: it does).
async fn unapplied(tick: &Tick<'_>, hub: &Hub, spoke: &SpokeConfig) -> Option<String> {
    let file = spoke.output.display();
    let want = match tick.context.repo.read(&spoke.output).await {
        Ok(Some(bytes)) => match Remote::parse(&bytes) {
            Ok(r) => r.data,
            Err(e) => return Some(format!("the committed {file} does not read back: {e}")),
        },
        Ok(None) => return Some(format!("{file} is not committed")),
        Err(e) => return Some(format!("{file}: {e}")),
    };
    let (ns, name) = (&spoke.secret.namespace, &spoke.secret.name);
    match hub.config_map(ns, name).await {
        Ok(Some(have)) if have.data == want => None,
        Ok(Some(_)) => Some("it holds another commit's data (not applied yet?)".into()),
        Ok(None) => Some("it does not exist (not applied yet?)".into()),
        Err(e) => Some(e.to_string()),
    }
}

/// The fleet repo's consumers on `secretRef` to the spoke's Secret, from the tree read
/// once into `tree`.
fn in_repo(tick: &Tick<'_>, tree: &mut RepoTree, spoke: &SpokeConfig) -> InRepo {
    let t = tree.get_or_insert_with(|| crate::flux::read_tree(&tick.context.config.repo.path));
    match t.unread {
        0 => InRepo::Found(crate::flux::on_secret_ref(t, spoke)),
        n => InRepo::Unread(n),
    }
}

fn names(consumers: &[crate::hub::Consumer]) -> Vec<String> {
    consumers.iter().map(ToString::to_string).collect()
}

/// The removal's commit message: what goes, and why that is safe now.
fn message(spoke: &SpokeConfig, old: &Old, ready: &[String]) -> String {
    let (ns, name) = (&spoke.secret.namespace, &spoke.secret.name);
    let mut msg = one_line(
        &format!(
            "{}: remove the old Secret {ns}/{name}: migrated to federated",
            spoke.name
        ),
        200,
    );
    msg.push_str("\n\n");
    msg.push_str(&format!(
        "{} held the spoke's {} credential. Flux reaches the spoke through ConfigMap {ns}/{name} (spec.kubeConfig.configMapRef) now, and each of its consumers is Ready through it: {}.\n",
        old.path.display(),
        old.credential.mode,
        ready.join(", ")
    ));
    msg.push_str("No Kustomization or HelmRelease reads the Secret (spec.kubeConfig.secretRef) on the hub or in the fleet repo.\n");
    if old.credential.mode == CredentialMode::Minted {
        msg.push_str("The minted credential's bindings on the spoke are deleted once the hub is checked again after this push.\n");
    }
    msg
}

#[cfg(test)]
mod tests;
