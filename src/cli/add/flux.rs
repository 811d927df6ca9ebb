//! What `add` commits beside the credential: the Kustomizations, an empty
//! kustomization for each spoke directory that does not exist, and the root
//! kustomization.yaml's listing (when the root has one).

use std::path::Path;

use super::layout::{self, EMPTY_KUSTOMIZATION, Layout, Source, slash_path};
use super::{AddArgs, AddError};
use spokekeeper::config::{Config, RepoMode, SpokeConfig};
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
    let layout = layout_of(spoke, args)?;
    let mut beside = new_files(&repo, &layout, spoke).await?;
    if let Some(listing) = root_listing(&repo, &layout, config, spoke).await? {
        beside.push(listing);
    }
    let pushed = repo
        .pushed(&spokekeeper::rotate::review::branch_name(spoke))
        .await;
    Ok((beside, pushed))
}

/// Where the files go, from the flags: each a directory inside the fleet repo.
fn layout_of(spoke: &SpokeConfig, args: &AddArgs) -> Result<Layout, AddError> {
    let layout = Layout {
        root: match &args.root {
            Some(r) => r.clone(),
            None => spoke
                .output
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        },
        dir: args
            .dir
            .clone()
            .unwrap_or_else(|| Path::new("spokes").join(&spoke.name)),
        source: Source::parse(&args.source).ok_or_else(|| AddError::Source(args.source.clone()))?,
        spoke_account: args.service_account.clone(),
    };
    for (flag, p) in [("--root", &layout.root), ("--dir", &layout.dir)] {
        let inside = p
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
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
