//! What `add` commits beside the credential: the Kustomizations, an empty
//! kustomization for each spoke directory that does not exist, and the root
//! kustomization.yaml's listing (when the root has one).

use std::path::{Component, Path, PathBuf};

use super::{AddArgs, AddError};
use spokekeeper::config::{Config, RepoMode, SpokeConfig};
use spokekeeper::flux::layout::{self, EMPTY_KUSTOMIZATION, Layout, Source, in_repo, slash_path};
use spokekeeper::hub::{Hub, root};
use spokekeeper::repo::Repo;
use spokekeeper::rotate::Beside;

/// The files, read from the target branch as the remote has it now; the commit checks
/// each file is still as read. Nothing that exists is overwritten. With them, the
/// commit this clone last pushed to the spoke's review branch.
pub(super) async fn flux_files(
    config: &Config,
    spoke: &SpokeConfig,
    args: &AddArgs,
) -> Result<(Vec<Beside>, Option<String>), AddError> {
    let repo = Repo::open(&config.repo)
        .await
        .map_err(|e| AddError::Repo(Box::new(e)))?;
    {
        let _lock = repo.lock().map_err(|e| AddError::Lock(Box::new(e)))?;
        repo.sync().await.map_err(|e| AddError::Repo(Box::new(e)))?;
    }
    let root = match &args.root {
        Some(r) => r.clone(),
        None => root_dir(config, spoke).await?,
    };
    let layout = layout_of(spoke, args, root)?;
    let mut beside = new_files(&repo, &layout, spoke).await?;
    if let Some(listing) = root_listing(&repo, &layout, config, spoke).await? {
        beside.push(listing);
    }
    let pushed = repo
        .pushed(&spokekeeper::rotate::review::branch_name(spoke))
        .await;
    Ok((beside, pushed))
}

/// How long add waits for the hub to name the root.
const HUB_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// ROOT without --root: with `hub:`, the directory of the Kustomization that applies the
/// configured spokes' credentials (kustomize-controller's labels on them name it), as
/// the hub verification finds it; else, or when the hub shows none, the credential's.
async fn root_dir(config: &Config, spoke: &SpokeConfig) -> Result<PathBuf, AddError> {
    let credential_dir = || spoke.output.parent().map(Path::to_path_buf);
    let Some(hub_config) = &config.hub else {
        return Ok(credential_dir().unwrap_or_default());
    };
    let others = config.spokes.iter().filter(|s| s.name != spoke.name);
    let found = tokio::time::timeout(HUB_WAIT, async {
        let hub = Hub::connect(hub_config).await.ok()?;
        root::applying(&hub, others).await
    })
    .await
    .ok()
    .flatten();
    let Some((kustomization, path)) = found else {
        let dir = credential_dir().unwrap_or_default();
        eprintln!(
            "no Kustomization on the hub applies a configured spoke's credential: ROOT is the credential's directory ./{} (pass --root to name the root Kustomization's path)",
            slash_path(&dir)
        );
        return Ok(dir);
    };
    let dir = in_repo(&path).ok_or_else(|| AddError::HubRoot {
        kustomization: kustomization.to_string(),
        path: spokekeeper::text::one_line(&path, 200),
    })?;
    eprintln!(
        "ROOT is ./{}, the path of {kustomization}, which applies the configured spokes' credentials on the hub (--root overrides)",
        slash_path(&dir)
    );
    Ok(dir)
}

/// Where the files go, from the flags and ROOT: each a directory inside the fleet repo.
fn layout_of(spoke: &SpokeConfig, args: &AddArgs, root: PathBuf) -> Result<Layout, AddError> {
    let layout = Layout {
        root,
        dir: args
            .dir
            .clone()
            .unwrap_or_else(|| Path::new("spokes").join(&spoke.name)),
        source: Source::parse(&args.source).ok_or_else(|| AddError::Source(args.source.clone()))?,
        spoke_account: args.service_account.clone(),
    };
    for (flag, p) in [("--root", &layout.root), ("--dir", &layout.dir)] {
        let inside = p.components().all(|c| matches!(c, Component::Normal(_)));
        if !inside {
            return Err(AddError::Outside {
                flag,
                path: p.clone(),
            });
        }
    }
    Ok(layout)
}

async fn read(repo: &Repo, rel: &Path) -> Result<Option<Vec<u8>>, AddError> {
    repo.read(rel).await.map_err(|error| AddError::Read {
        rel: rel.to_path_buf(),
        error: Box::new(error),
    })
}

/// The spoke's Kustomizations and an empty kustomization per missing directory;
/// refused when the credential or the Kustomizations' file already exists.
async fn new_files(
    repo: &Repo,
    layout: &Layout,
    spoke: &SpokeConfig,
) -> Result<Vec<Beside>, AddError> {
    let objects = layout.objects_file(spoke);
    for rel in [&spoke.output, &objects] {
        if read(repo, rel).await?.is_some() {
            return Err(AddError::Exists(rel.clone()));
        }
    }
    let mut beside = vec![Beside {
        rel: objects,
        bytes: layout.objects(spoke).into_bytes(),
        was: None,
    }];
    for dir in [layout.apps(), layout.helm_releases()] {
        if !repo.path().join(&dir).exists() {
            beside.push(Beside {
                rel: dir.join("kustomization.yaml"),
                bytes: EMPTY_KUSTOMIZATION.as_bytes().to_vec(),
                was: None,
            });
        }
    }
    Ok(beside)
}

/// The root kustomization.yaml with the credential and the Kustomizations listed; None
/// when the root has none or already lists them.
async fn root_listing(
    repo: &Repo,
    layout: &Layout,
    config: &Config,
    spoke: &SpokeConfig,
) -> Result<Option<Beside>, AddError> {
    let root_file = layout.root.join("kustomization.yaml");
    let Some(was) = read(repo, &root_file).await? else {
        return Ok(None);
    };
    let Ok(output) = spoke.output.strip_prefix(&layout.root) else {
        return Err(AddError::CredentialOutside {
            file: root_file,
            output: spoke.output.clone(),
            root: layout.root.clone(),
        });
    };
    let Ok(text) = String::from_utf8(was.clone()) else {
        return Err(AddError::NotText(root_file));
    };
    // A review branch may only add lines to it (docs/operations.md, onboarding).
    if config.repo.mode == RepoMode::PullRequest && !text.is_empty() && !text.ends_with('\n') {
        return Err(AddError::NoLineBreak {
            file: root_file,
            branch: config.repo.branch.clone(),
        });
    }
    let entries = [slash_path(output), format!("{}.yaml", spoke.name)];
    let edited = layout::list_resources(&text, &entries).map_err(|error| AddError::Listing {
        file: root_file.clone(),
        error,
    })?;
    Ok(edited.map(|edited| Beside {
        rel: root_file,
        bytes: edited.into_bytes(),
        was: Some(was),
    }))
}
