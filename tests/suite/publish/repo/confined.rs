//! What the clone will not read or write through: diff attributes, binary and oversized files, symbolic links, blobs over the cap, a remote or path taken as a git option.

use super::*;

/// Attributes change what `git diff` shows ("Binary files differ", a textconv's output),
/// never what is staged: the guard reads the staged blobs, in both commit paths.
#[tokio::test]
async fn plaintext_guard_ignores_diff_attributes() {
    let key: &[u8] = b"users:\n- user:\n    client-key-data: LS0t\n";
    for attrs in [
        "*.yaml -diff\n",
        "*.yaml binary\n",
        "*.yaml diff=hide\n",
        "*.yaml -text -diff merge=binary\n",
    ] {
        let (_d, _remote, clones) = fleet(1);
        let clone = &clones[0];
        std::fs::write(clone.join(".gitattributes"), attrs).unwrap();
        git(clone, &["add", ".gitattributes"]);
        commit(clone, "attributes");
        git(clone, &["push", "--quiet", "origin", "HEAD:main"]);
        // A textconv that shows nothing, and an external diff that prints nothing.
        git(clone, &["config", "diff.hide.textconv", "true"]);
        git(clone, &["config", "diff.external", "true"]);
        // Review commits are signed: the last one needs repo.signing_key.
        let signing = support::git::signing_key(&_d.path().join("signing-key"));
        let repo = Repo::open(&RepoConfig {
            signing_key: Some(signing),
            ..config(clone)
        })
        .await
        .unwrap();
        repo.sync().await.unwrap();
        let head = git(clone, &["rev-parse", "HEAD"]);
        let rel = Path::new("fluxcd/dev.yaml");
        repo.write_atomic(rel, key).unwrap();
        let e = repo.commit(rel, "leak").await.unwrap_err();
        assert!(matches!(e, RepoError::Plaintext { .. }), "{attrs}: {e}");
        assert_eq!(git(clone, &["rev-parse", "HEAD"]), head, "{attrs}");
        let e = repo.commit_on_target(rel, key, "leak").await.unwrap_err();
        assert!(matches!(e, RepoError::Plaintext { .. }), "{attrs}: {e}");
        // A sealed file is refused too: any attribute on an output is (see attributes.rs).
        repo.write_atomic(rel, b"kind: SealedSecret\n").unwrap();
        let e = repo.commit(rel, "sealed").await.unwrap_err();
        assert!(matches!(e, RepoError::Attributes { .. }), "{attrs}: {e}");
        let e = repo
            .commit_on_target(rel, b"kind: SealedSecret\nv: 2\n", "sealed")
            .await
            .unwrap_err();
        assert!(matches!(e, RepoError::Attributes { .. }), "{attrs}: {e}");
    }
}

#[tokio::test]
async fn binary_and_oversized_files_are_refused_unread() {
    let (_d, _remote, clones) = fleet(1);
    let repo = open(&clones[0]).await;
    let rel = Path::new("b.yaml");
    repo.write_atomic(rel, b"kind: SealedSecret\n\0\xff")
        .unwrap();
    let e = repo.commit(rel, "binary").await.unwrap_err();
    assert!(e.to_string().contains("binary"), "{e}");
    let big = vec![b'a'; spokekeeper::repo::MAX_CHECKED_BLOB as usize + 1];
    repo.write_atomic(rel, &big).unwrap();
    // Read from the clone through the one capped reader: refused before it is judged.
    let e = repo.commit(rel, "big").await.unwrap_err();
    assert!(e.to_string().contains("is larger than"), "{e}");
    let e = repo.commit_on_target(rel, &big, "big").await.unwrap_err();
    assert!(e.to_string().contains("too large"), "{e}");
}

#[tokio::test]
async fn a_committed_symlink_at_the_output_is_neither_read_nor_written_through() {
    let (d, _remote, clones) = fleet(1);
    let outside = d.path().join("outside.yaml");
    std::fs::write(&outside, "kind: Secret\nhost-only: 1\n").unwrap();
    let rel = Path::new("fluxcd/dev-kubeconfig-sealed.yaml");
    let repo = with_committed_links(&clones[0], &[(rel.to_str().unwrap(), &outside)]).await;
    let e = repo.read(rel).await.unwrap_err();
    assert!(matches!(e, RepoError::Symlink(_)), "{e}");
    assert!(
        e.to_string().contains("fluxcd/dev-kubeconfig-sealed.yaml")
            && e.to_string().contains("symbolic link"),
        "{e}"
    );
    let e = repo.write_atomic(rel, b"kind: SealedSecret\n").unwrap_err();
    assert!(matches!(e, RepoError::Symlink(_)), "{e}");
    assert!(matches!(
        repo.commit(rel, "x").await,
        Err(RepoError::Symlink(_))
    ));
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "kind: Secret\nhost-only: 1\n",
        "the file outside is untouched"
    );
    assert!(
        std::fs::symlink_metadata(clones[0].join(rel))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link itself is left alone"
    );
}

/// A committed output over `fsutil::MAX_FILE_BYTES` (a few KiB pushed: git compresses
/// it) is refused by the size the tree records, never read into memory; at the cap it is.
#[tokio::test]
async fn a_committed_blob_over_the_cap_is_refused_by_its_size() {
    let (_d, _remote, clones) = fleet(1);
    let clone = &clones[0];
    let rel = Path::new("fluxcd/dev-kubeconfig-sealed.yaml");
    let max = usize::try_from(spokekeeper::fsutil::MAX_FILE_BYTES).unwrap();
    let push = |len: usize| {
        std::fs::create_dir_all(clone.join("fluxcd")).unwrap();
        std::fs::write(clone.join(rel), vec![b'a'; len]).unwrap();
        git(clone, &["add", "-A"]);
        commit(clone, "a large output");
        git(clone, &["push", "--quiet", "origin", "HEAD:main"]);
    };
    push(max + 1);
    let repo = open(clone).await;
    repo.sync().await.unwrap();
    let e = repo.read(rel).await.unwrap_err().to_string();
    assert!(
        e.contains("dev-kubeconfig-sealed.yaml is larger than"),
        "{e}"
    );
    push(max);
    repo.sync().await.unwrap();
    assert_eq!(repo.read(rel).await.unwrap().map(|b| b.len()), Some(max));
}

/// A review branch's or an older commit's blob over the cap is refused by its size by
/// `Repo::show` too (it reads what a pusher to a `spokekeeper/*` branch committed); at
/// the cap it is read, and a path the commit lacks is None.
#[tokio::test]
async fn a_blob_shown_from_a_branch_over_the_cap_is_refused_by_its_size() {
    let (_d, _remote, clones) = fleet(1);
    let clone = &clones[0];
    let rel = Path::new("fluxcd/dev-kubeconfig-sealed.yaml");
    let max = usize::try_from(spokekeeper::fsutil::MAX_FILE_BYTES).unwrap();
    let push = |len: usize, branch: &str| {
        std::fs::create_dir_all(clone.join("fluxcd")).unwrap();
        std::fs::write(clone.join(rel), vec![b'a'; len]).unwrap();
        git(clone, &["add", "-A"]);
        commit(clone, "a large output");
        git(
            clone,
            &["push", "--quiet", "origin", &format!("HEAD:{branch}")],
        );
        git(clone, &["rev-parse", "HEAD"]).trim().to_string()
    };
    let over = push(max + 1, "spokekeeper/dev");
    let at = push(max, "spokekeeper/prod");
    let repo = open(clone).await;
    let e = repo.show(&over, rel).await.unwrap_err().to_string();
    assert!(
        e.contains("dev-kubeconfig-sealed.yaml is larger than"),
        "{e}"
    );
    assert_eq!(
        repo.show(&at, rel).await.unwrap().map(|b| b.len()),
        Some(max)
    );
    assert_eq!(
        repo.show(&at, Path::new("fluxcd/none.yaml")).await.unwrap(),
        None
    );
}

#[tokio::test]
async fn a_committed_symlinked_directory_is_neither_read_nor_written_through() {
    let (d, _remote, clones) = fleet(1);
    let outside = d.path().join("elsewhere");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("dev.yaml"), "outside\n").unwrap();
    let repo = with_committed_links(&clones[0], &[("fluxcd", &outside)]).await;
    for rel in ["fluxcd/dev.yaml", "fluxcd/new/dev.yaml"] {
        let rel = Path::new(rel);
        let e = repo.read(rel).await.unwrap_err();
        assert!(matches!(e, RepoError::Symlink(_)), "{e}");
        assert!(e.to_string().contains("fluxcd is a symbolic link"), "{e}");
        let e = repo.write_atomic(rel, b"kind: SealedSecret\n").unwrap_err();
        assert!(matches!(e, RepoError::Symlink(_)), "{e}");
        repo.discard(rel).await;
    }
    let left: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["dev.yaml"], "nothing written or removed outside");
    assert_eq!(
        std::fs::read_to_string(outside.join("dev.yaml")).unwrap(),
        "outside\n"
    );
}

#[tokio::test]
async fn a_pinned_sealing_cert_inside_the_clone_is_not_read_through_a_symlink() {
    let (d, _remote, clones) = fleet(1);
    let outside = d.path().join("cert.pem");
    std::fs::write(&outside, "not a certificate\n").unwrap();
    let _repo = with_committed_links(&clones[0], &[("keys/sealing.pem", &outside)]).await;
    let text = ConfigBuilder::new(&clones[0], clones[0].join("keys/sealing.pem"))
        .spoke(Spoke::new("dev", "10.0.0.1"))
        .yaml();
    let config = spokekeeper::config::Config::parse(&text, "spokekeeper.yaml", d.path()).unwrap();
    let e = spokekeeper::hub::cert::initial(&config)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("keys/sealing.pem is a symbolic link"), "{e}");
}

/// Defence in depth behind config validation: a remote that looks like an option reaches
/// git after `--`, so git never runs it as `--upload-pack`.
#[tokio::test]
async fn a_configured_remote_is_never_read_as_a_git_option() {
    let (d, _remote, clones) = fleet(1);
    let marker = d.path().join("ran");
    let mut c = config(&clones[0]);
    c.remote = format!("--upload-pack=touch {}; git-upload-pack", marker.display());
    c.branch = "origin".into();
    let repo = Repo::open(&c).await.unwrap();
    assert!(repo.sync().await.is_err());
    assert!(repo.fetch_review_branches().await.is_err());
    assert!(
        !marker.exists(),
        "git ran the configured value as a command"
    );
}

/// An output path git could read as pathspec magic (`:!a.yaml`: every file but a.yaml)
/// commits that one file and nothing else (GIT_LITERAL_PATHSPECS).
#[tokio::test]
async fn a_path_starting_with_a_colon_is_literal_not_pathspec_magic() {
    let (_d, _remote, clones) = fleet(1);
    let repo = open(&clones[0]).await;
    repo.sync().await.unwrap();
    std::fs::write(clones[0].join("b.yaml"), "kind: SealedSecret\n").unwrap();
    let rel = Path::new(":!a.yaml");
    repo.write_atomic(rel, b"kind: SealedSecret\n").unwrap();
    repo.commit(rel, "one file")
        .await
        .unwrap()
        .expect("a commit");
    let files = git(&clones[0], &["show", "--name-only", "--format=", "HEAD"]);
    assert_eq!(files.trim(), ":!a.yaml");
    let status = git(&clones[0], &["status", "--porcelain"]);
    assert_eq!(status.trim(), "?? b.yaml");
}
