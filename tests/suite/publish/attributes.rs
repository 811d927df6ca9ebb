//! Git attributes and line-ending config on an output, as a pusher (or the clone's own
//! config) sets them: spokekeeper stages what it wrote without filters, refuses a file any
//! attribute applies to, in both commit paths, and reads back the committed blob.

use crate::support;

use std::path::{Path, PathBuf};

use spokekeeper::config::RepoConfig;
use spokekeeper::repo::{Repo, RepoError};
use support::git::{commit, fleet_remote, git, repo_config};

const REL: &str = "fluxcd/dev-kubeconfig-sealed.yaml";
const SEALED: &[u8] = b"apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata:\n  name: dev-kubeconfig\nspec:\n  encryptedData:\n    value: AgBy3i4OJSWK\n";

/// A fleet whose remote main has `pushed` (path, contents) committed on top of the seed,
/// and a clone where `local` then changes what is not pushed (its config, info/attributes).
/// The clone is opened with a signing key (review commits need one) and synced.
async fn fleet_where(
    d: &Path,
    pushed: &[(&str, &str)],
    local: impl FnOnce(&Path),
) -> (PathBuf, PathBuf, Repo) {
    let (remote, clones) = fleet_remote(d, 1);
    let clone = clones[0].clone();
    if !pushed.is_empty() {
        for (file, text) in pushed {
            let at = clone.join(file);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(&at, text).unwrap();
            git(&clone, &["add", file]);
        }
        commit(&clone, "attributes");
        git(&clone, &["push", "--quiet", "origin", "HEAD:main"]);
    }
    local(&clone);
    let signing = support::git::signing_key(&d.join("signing-key"));
    let repo = Repo::open(&RepoConfig {
        signing_key: Some(signing),
        ..repo_config(&clone, None)
    })
    .await
    .unwrap();
    repo.sync().await.unwrap();
    (remote, clone, repo)
}

/// Both commit paths refuse `REL` naming the file and `attribute`, and leave no commit,
/// nothing staged and the remote as it was.
async fn refused_in_both_paths(
    pushed: &[(&str, &str)],
    local: impl FnOnce(&Path),
    attribute: &str,
) {
    let d = tempfile::tempdir().unwrap();
    let (remote, clone, repo) = fleet_where(d.path(), pushed, local).await;
    let head = git(&clone, &["rev-parse", "HEAD"]);
    let rel = Path::new(REL);
    repo.write_atomic(rel, SEALED).unwrap();
    let e = repo.commit(rel, "dev: rotate").await.unwrap_err();
    assert!(
        matches!(
            e,
            RepoError::Attributes { .. } | RepoError::LineEndings { .. }
        ),
        "{attribute}: {e}"
    );
    let msg = e.to_string();
    assert!(msg.contains(REL) && msg.contains(attribute), "{msg}");
    assert!(msg.contains("nothing was committed"), "{msg}");
    assert_eq!(git(&clone, &["rev-parse", "HEAD"]), head, "{attribute}");
    assert_eq!(git(&clone, &["diff", "--cached", "--name-only"]), "");
    assert_eq!(
        repo.push().await.unwrap(),
        spokekeeper::repo::Pushed::Nothing
    );
    assert_eq!(
        git(
            &remote,
            &["ls-tree", "-r", "--name-only", "main", "fluxcd/"]
        )
        .trim(),
        pushed
            .iter()
            .map(|(f, _)| *f)
            .filter(|f| f.starts_with("fluxcd/"))
            .collect::<Vec<_>>()
            .join("\n"),
        "nothing of ours reached the remote"
    );
    let e = repo
        .commit_on_target(rel, SEALED, "dev: rotate")
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            RepoError::Attributes { .. } | RepoError::LineEndings { .. }
        ),
        "review, {attribute}: {e}"
    );
    assert!(e.to_string().contains(attribute), "{e}");
}

#[tokio::test]
async fn an_ibm037_working_tree_encoding_is_refused() {
    let attrs = "fluxcd/*.yaml working-tree-encoding=IBM037\n";
    refused_in_both_paths(
        &[(".gitattributes", attrs)],
        |_| {},
        "working-tree-encoding=IBM037",
    )
    .await;
}

#[tokio::test]
async fn a_utf16le_working_tree_encoding_is_refused() {
    let attrs = "fluxcd/*.yaml working-tree-encoding=UTF-16LE\n";
    refused_in_both_paths(
        &[(".gitattributes", attrs)],
        |_| {},
        "working-tree-encoding=UTF-16LE",
    )
    .await;
}

#[tokio::test]
async fn a_filter_with_a_clean_command_in_the_clone_is_refused() {
    let attrs = "*.yaml filter=scrub\n";
    refused_in_both_paths(
        &[(".gitattributes", attrs)],
        |clone| {
            git(clone, &["config", "filter.scrub.clean", "tr a-z A-Z"]);
        },
        "filter=scrub",
    )
    .await;
}

#[tokio::test]
async fn ident_is_refused() {
    refused_in_both_paths(&[(".gitattributes", "*.yaml ident\n")], |_| {}, "ident").await;
}

#[tokio::test]
async fn eol_crlf_is_refused() {
    refused_in_both_paths(
        &[(".gitattributes", "*.yaml eol=crlf\n")],
        |_| {},
        "eol=crlf",
    )
    .await;
}

#[tokio::test]
async fn a_nested_gitattributes_in_the_output_directory_is_refused() {
    refused_in_both_paths(
        &[("fluxcd/.gitattributes", "*-sealed.yaml text eol=crlf\n")],
        |_| {},
        "eol=crlf",
    )
    .await;
}

#[tokio::test]
async fn git_info_attributes_in_the_clone_are_refused() {
    refused_in_both_paths(
        &[],
        |clone| {
            let info = clone.join(".git/info");
            std::fs::create_dir_all(&info).unwrap();
            std::fs::write(
                info.join("attributes"),
                "/fluxcd/** working-tree-encoding=IBM037\n",
            )
            .unwrap();
        },
        "working-tree-encoding=IBM037",
    )
    .await;
}

#[tokio::test]
async fn the_binary_macro_is_refused() {
    refused_in_both_paths(&[(".gitattributes", "fluxcd/* binary\n")], |_| {}, "binary").await;
}

#[tokio::test]
async fn core_autocrlf_in_the_clone_is_refused() {
    refused_in_both_paths(
        &[],
        |clone| {
            git(clone, &["config", "core.autocrlf", "true"]);
        },
        "core.autocrlf=true",
    )
    .await;
}

/// The guard reads what spokekeeper wrote, not what an encoding would store: a plaintext
/// Secret is refused as plaintext (the worse finding), not only for the attribute.
#[tokio::test]
async fn a_plaintext_secret_hidden_by_an_encoding_attribute_is_still_refused_by_the_guard() {
    let d = tempfile::tempdir().unwrap();
    let attrs = "fluxcd/*.yaml working-tree-encoding=IBM037\n";
    let (_remote, clone, repo) = fleet_where(d.path(), &[(".gitattributes", attrs)], |_| {}).await;
    let head = git(&clone, &["rev-parse", "HEAD"]);
    let secret: &[u8] =
        b"apiVersion: v1\nkind: Secret\nmetadata:\n  name: dev\ndata:\n  value: aGk=\n";
    let rel = Path::new(REL);
    repo.write_atomic(rel, secret).unwrap();
    let e = repo.commit(rel, "leak").await.unwrap_err();
    assert!(matches!(e, RepoError::Plaintext { .. }), "{e}");
    assert_eq!(git(&clone, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&clone, &["diff", "--cached", "--name-only"]), "");
    let e = repo
        .commit_on_target(rel, secret, "leak")
        .await
        .unwrap_err();
    assert!(matches!(e, RepoError::Plaintext { .. }), "{e}");
}

/// The fix the refusal names (unsetting each attribute for the file in the clone's
/// .git/info/attributes) works, and what reaches the remote is byte for byte what
/// spokekeeper wrote, in both paths.
#[tokio::test]
async fn unsetting_the_named_attributes_publishes_the_bytes_written() {
    let d = tempfile::tempdir().unwrap();
    let attrs = "fluxcd/*.yaml working-tree-encoding=IBM037 eol=crlf\n";
    let (remote, clone, repo) = fleet_where(d.path(), &[(".gitattributes", attrs)], |_| {}).await;
    let rel = Path::new(REL);
    repo.write_atomic(rel, SEALED).unwrap();
    let e = repo.commit(rel, "dev: rotate").await.unwrap_err();
    let RepoError::Attributes { unset, .. } = &e else {
        panic!("{e}")
    };
    assert!(e.to_string().contains(&format!("`/{REL} {unset}`")), "{e}");
    std::fs::write(
        clone.join(".git/info/attributes"),
        format!("/{REL} {unset}\n"),
    )
    .unwrap();

    repo.write_atomic(rel, SEALED).unwrap();
    repo.commit(rel, "dev: rotate")
        .await
        .unwrap()
        .expect("a commit");
    repo.push().await.unwrap();
    let stored = std::process::Command::new("git")
        .arg("-C")
        .arg(&remote)
        .args(["cat-file", "blob", &format!("main:{REL}")])
        .output()
        .unwrap()
        .stdout;
    assert_eq!(stored, SEALED, "the remote holds the bytes written");
    assert_eq!(repo.read(rel).await.unwrap().as_deref(), Some(SEALED));

    let v2: &[u8] = b"apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nspec: {}\n";
    let sha = repo.commit_on_target(rel, v2, "dev: review").await.unwrap();
    let stored = std::process::Command::new("git")
        .arg("-C")
        .arg(&clone)
        .args(["cat-file", "blob", &format!("{sha}:{REL}")])
        .output()
        .unwrap()
        .stdout;
    assert_eq!(stored, v2, "the review commit holds the bytes written");
}

/// A pusher commits an output through an encoding (as `git add` did before): the blob
/// Flux reads is mangled while the checked-out file looks right. What spokekeeper reads
/// (for `check` and the observer) is the committed blob.
#[tokio::test]
async fn read_returns_the_committed_blob_not_the_checked_out_file() {
    let d = tempfile::tempdir().unwrap();
    let (_remote, clones) = fleet_remote(d.path(), 1);
    let clone = &clones[0];
    std::fs::write(
        clone.join(".gitattributes"),
        "fluxcd/*.yaml working-tree-encoding=IBM037\n",
    )
    .unwrap();
    std::fs::create_dir_all(clone.join("fluxcd")).unwrap();
    std::fs::write(clone.join(REL), SEALED).unwrap();
    git(clone, &["add", ".gitattributes", REL]);
    commit(clone, "re-encoded");
    git(clone, &["push", "--quiet", "origin", "HEAD:main"]);
    let repo = Repo::open(&repo_config(clone, None)).await.unwrap();
    repo.sync().await.unwrap();
    assert_eq!(std::fs::read(clone.join(REL)).unwrap(), SEALED, "checkout");
    let blob = std::process::Command::new("git")
        .arg("-C")
        .arg(clone)
        .args(["cat-file", "blob", &format!("HEAD:{REL}")])
        .output()
        .unwrap()
        .stdout;
    assert_ne!(blob, SEALED, "the stored blob is re-encoded");
    assert_eq!(repo.read(Path::new(REL)).await.unwrap(), Some(blob));
}
