//! The onboarding commit `spokekeeper add` makes in review mode: trusted only as pushed, for its
//! own spoke.

use crate::support;

use std::path::Path;

use super::{DEV_BRANCH, DEV_FILE, commit_as_someone, lib_repo, push_theirs};
use spokekeeper::repo::{Beside, Repo, RepoError, Untrusted};
use support::git::{git, verifies_with};

/// The root kustomization.yaml on main before `add`.
const ROOT: &str = "resources:\n  - flux-system\n";

/// `spokekeeper add` in review mode: the onboarding commit spokekeeper makes (the
/// credential, new Flux objects, lines added to a kustomization.yaml) and pushes is
/// trusted, and its trailer names every file. The same commit with an extra file, an
/// existing file modified, an added file swapped for a symlink, replayed for another
/// spoke, or with a commit appended, is not: each is signed with spokekeeper's own key,
/// so the onboarding rule, not the signature, refuses it.
#[tokio::test]
async fn an_onboarding_commit_is_trusted_only_as_pushed_for_its_own_spoke() {
    let (_dir, repo, clones, key) = lib_repo().await;
    push_theirs(
        &clones[1],
        &[("fluxcd/kustomization.yaml", ROOT)],
        None,
        "refs/heads/main",
    );
    repo.sync().await.unwrap();
    let beside = dev_onboarding();
    let ours = onboard(&repo, &beside).await.unwrap();
    repo.push_branch(DEV_BRANCH, &ours, None).await.unwrap();
    let rel = Path::new(DEV_FILE);
    assert_eq!(repo.provenance(DEV_BRANCH, &ours, rel).await, Ok(()));
    let message = git(&clones[0], &["log", "-1", "--format=%B", &ours]);
    assert!(
        message.trim_end().ends_with(
            "\n\nSpokekeeper-Onboards: dev\n\
             Spokekeeper-Adds: fluxcd/dev-kubeconfig-sealed.yaml\n\
             Spokekeeper-Adds: fluxcd/dev.yaml\n\
             Spokekeeper-Adds: spokes/dev/apps/kustomization.yaml\n\
             Spokekeeper-Lists: fluxcd/kustomization.yaml"
        ),
        "{message}"
    );
    not_committed(&repo, &beside).await;
    git(&clones[1], &["fetch", "--quiet", "origin", DEV_BRANCH]);
    let pusher = Pusher {
        work: &clones[1],
        key: &key,
        ours: &ours,
    };
    variants_are_refused(&repo, &pusher).await;
    replayed_for_another_spoke_is_refused(&repo, &pusher).await;
}

/// What `add` writes beside the credential of the spoke "dev": two new files and two
/// lines added to the root kustomization.yaml.
fn dev_onboarding() -> Vec<Beside> {
    let listed = format!("{ROOT}  - dev-kubeconfig-sealed.yaml\n  - dev.yaml\n");
    vec![
        Beside {
            rel: "fluxcd/dev.yaml".into(),
            bytes: b"kind: Kustomization\n".to_vec(),
            was: None,
        },
        Beside {
            rel: "spokes/dev/apps/kustomization.yaml".into(),
            bytes: b"resources: []\n".to_vec(),
            was: None,
        },
        Beside {
            rel: "fluxcd/kustomization.yaml".into(),
            bytes: listed.into_bytes(),
            was: Some(ROOT.as_bytes().to_vec()),
        },
    ]
}

/// spokekeeper's onboarding commit of "dev" with `beside`.
async fn onboard(repo: &Repo, beside: &[Beside]) -> Result<String, RepoError> {
    let rel = Path::new(DEV_FILE);
    repo.commit_onboarding("dev", rel, b"kind: SealedSecret\n", beside, "dev: add")
        .await
}

/// What spokekeeper itself refuses to commit: a file that moved since add read it, or a
/// change that is not an addition.
async fn not_committed(repo: &Repo, beside: &[Beside]) {
    let mut moved = beside.to_vec();
    moved[2].was = Some(b"resources: []\n".to_vec());
    assert!(matches!(
        onboard(repo, &moved).await,
        Err(RepoError::BesideMoved { .. })
    ));
    let mut readme = beside.to_vec();
    readme.push(Beside {
        rel: "README.md".into(),
        bytes: b"changed\n".to_vec(),
        was: Some(b"fleet\n".to_vec()),
    });
    let e = onboard(repo, &readme).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("README.md is changed, and only a kustomization.yaml may be"),
        "{e}"
    );
    let mut unlisted = beside.to_vec();
    unlisted[2].bytes = b"resources:\n  - dev.yaml\n".to_vec();
    let e = onboard(repo, &unlisted).await.unwrap_err();
    assert!(e.to_string().contains("loses or changes lines"), "{e}");
}

/// Someone with a clone (`work`) and spokekeeper's signing key, and the onboarding commit
/// spokekeeper pushed.
struct Pusher<'a> {
    work: &'a Path,
    key: &'a Path,
    ours: &'a str,
}

impl Pusher<'_> {
    /// The pushed onboarding commit edited by `edit`, amended (the same message, so the
    /// same trailer) or with a commit appended, signed with spokekeeper's key and
    /// force-pushed to the branch `to`; the new head.
    fn variant(&self, edit: &dyn Fn(&Path), amend: bool, to: &str) -> String {
        let work = self.work;
        git(work, &["checkout", "--quiet", "--detach", self.ours]);
        edit(work);
        git(work, &["add", "-A"]);
        let tail: &[&str] = if amend {
            &["--amend", "--no-edit"]
        } else {
            &["-m", "later"]
        };
        commit_as_someone(work, Some(self.key), tail);
        let head = git(work, &["rev-parse", "HEAD"]).trim().to_string();
        let spec = format!("+{head}:refs/heads/{to}");
        git(work, &["push", "--quiet", "origin", &spec]);
        git(work, &["checkout", "--quiet", "main"]);
        git(work, &["reset", "--quiet", "--hard", "origin/main"]);
        assert!(verifies_with(work, self.key, &head));
        head
    }
}

/// The clone's verdict on `head`, fetched as the head of `branch`, which writes `rel`.
async fn judge(repo: &Repo, head: &str, branch: &str, rel: &str) -> Result<(), Untrusted> {
    repo.fetch_review_branches().await.unwrap();
    assert_eq!(repo.remote_branch_head(branch).await.as_deref(), Some(head));
    repo.provenance(branch, head, Path::new(rel)).await
}

/// `verdict` refuses the commit by the onboarding rule, saying `want`.
fn refused_as_onboarding(verdict: Result<(), Untrusted>, want: &str) {
    match verdict {
        Err(Untrusted::Onboarding(why)) => assert!(why.to_string().contains(want), "{why}"),
        other => panic!("{other:?}, not {want}"),
    }
}

/// An edit writing `text` to `rel` in a checkout.
fn write(rel: &'static str, text: &'static str) -> impl Fn(&Path) {
    move |w: &Path| {
        let f = w.join(rel);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    }
}

/// A pusher's variants of the trusted commit on its own branch, signed with
/// spokekeeper's key: an extra file, a modified file, a list with lines lost, an added
/// file made a symlink, a commit appended.
async fn variants_are_refused(repo: &Repo, p: &Pusher<'_>) {
    let on_dev = |head: String| async move { judge(repo, &head, DEV_BRANCH, DEV_FILE).await };
    let extra = p.variant(&write("fluxcd/extra.yaml", "kind: Job\n"), true, DEV_BRANCH);
    refused_as_onboarding(
        on_dev(extra).await,
        "also changes fluxcd/extra.yaml, which its trailer does not name",
    );
    let modified = p.variant(&write("README.md", "changed\n"), true, DEV_BRANCH);
    refused_as_onboarding(on_dev(modified).await, "also changes README.md");
    let relisted = p.variant(
        &write("fluxcd/kustomization.yaml", "resources:\n  - dev.yaml\n"),
        true,
        DEV_BRANCH,
    );
    refused_as_onboarding(
        on_dev(relisted).await,
        "fluxcd/kustomization.yaml loses or changes lines",
    );
    let symlink = |w: &Path| {
        let f = w.join("fluxcd/dev.yaml");
        std::fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink("../README.md", f).unwrap();
    };
    let linked = p.variant(&symlink, true, DEV_BRANCH);
    refused_as_onboarding(
        on_dev(linked).await,
        "fluxcd/dev.yaml is not added as a new regular file (mode 000000 -> 120000",
    );
    let appended = p.variant(
        &write("fluxcd/later.yaml", "kind: Job\n"),
        false,
        DEV_BRANCH,
    );
    assert!(matches!(
        on_dev(appended).await,
        Err(Untrusted::OffTarget { .. })
    ));
}

/// The onboarding commit itself, pushed to another spoke's branch, is refused; pushed
/// back as it was, the original is still the one this clone recorded.
async fn replayed_for_another_spoke_is_refused(repo: &Repo, p: &Pusher<'_>) {
    let ours = p.ours;
    let spec = format!("+{ours}:refs/heads/spokekeeper/prod");
    git(p.work, &["push", "--quiet", "origin", &spec]);
    let prod = "fluxcd/prod-kubeconfig-sealed.yaml";
    refused_as_onboarding(
        judge(repo, ours, "spokekeeper/prod", prod).await,
        "it onboards \"dev\", not \"prod\"",
    );
    let back = format!("+{ours}:refs/heads/{DEV_BRANCH}");
    git(p.work, &["push", "--quiet", "origin", &back]);
    assert_eq!(judge(repo, ours, DEV_BRANCH, DEV_FILE).await, Ok(()));
}
