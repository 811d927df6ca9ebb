//! Review mode (`repo.mode: pull-request`): a rotation becomes a branch
//! `spokekeeper/<spoke>` and a pull request instead of a commit on the target branch.
//!
//! - **Decide** runs against the target branch's committed state, as in direct mode (the
//!   clone's checkout stays on the target branch; review commits are made with plumbing
//!   on a private index and pushed by commit id).
//! - **Pending**: when the target branch says "rotate", the spoke's review branch is
//!   read (`origin/spokekeeper/<spoke>`, fetched each tick). If the branch is not merged
//!   and its manifest, put through the same decision with the same probe, would be
//!   healthy, the fix is already waiting for review: the spoke is *pending*, nothing is
//!   extracted, and the open pull request is looked up (and opened again when there is
//!   none, e.g. the forge failed on an earlier tick). If the branch's manifest would
//!   itself be rotated (the spoke was rebuilt again, the sealing key changed, its client
//!   certificate is expiring) the spoke is re-extracted and the branch is replaced with
//!   `--force-with-lease` on the head we read; the same pull request is updated. A fresh
//!   credential with the same content hash as the branch's is not pushed again.
//!   `--force` always re-extracts.
//! - **Provenance**: a branch counts only when it is provably spokekeeper's own
//!   ([`crate::repo::Repo::provenance`]: its head is signed with `repo.signing_key`, one
//!   commit on the target branch, changing the spoke's file alone (or, made by
//!   `spokekeeper add`, adding it with the new files its trailer names), and exactly the
//!   commit this clone last pushed there). Any other branch is treated as absent: the spoke is
//!   re-extracted, the branch replaced with a lease on the head we saw, a warning logged,
//!   and the pull request body names the replaced head. A pull request is pending only
//!   while the forge shows that same head; its title and body are spokekeeper's.
//! - **Merged**: the next tick sees a healthy target branch and touches nothing. The
//!   merged branch is left on the remote (the forge can delete it on merge); it is
//!   ignored because its head is in the target branch, and a later rotation replaces it.
//! - **Forge errors**: the branch is always pushed before the forge is called, so a
//!   forge failure loses nothing: the spoke is reported failed at stage `review`, and the
//!   next tick finds the branch pending and opens the pull request then.

use time::OffsetDateTime;

use std::path::Path;
use std::sync::Arc;

use super::decide::{self, Decision, Observed, Policy, Reason};
use super::error::{ForgeFailure, PinError, ReviewError, SpokeError, Unendorsed};
use super::observe::Observation;
use super::publish::{Finished, Landing, Publish};
use super::report::RepoFailure;
use super::sealing::CERT_BRANCH;
use super::state::Recorded;
use super::{Context, Options, Outcome, Proposal, SpokeReport};
use crate::config::{RepoMode, SpokeConfig};
use crate::forge::{self, Forge, ForgeError, PullRequest};
use crate::repo::{BranchState, RepoError, Untrusted};
use crate::seal::SealedSecret;
use crate::spoke::{ProbeError, ProbeReport};
use crate::text;

/// Review mode for one tick: the forge client (or why there is none).
pub struct Review {
    forge: Result<Forge, Arc<ForgeError>>,
    /// Why the gate refused a side effect this tick (the rest waits for a tick that may).
    refused: Option<String>,
}

/// The unmerged review branch of a spoke.
pub struct Branch {
    pub head: String,
    /// Why it is not provably spokekeeper's own (None: its head is signed with
    /// repo.signing_key, on the target branch, and changes only the spoke's file).
    pub untrusted: Option<Untrusted>,
    /// The manifest it holds, when it holds a readable one.
    pub recorded: Option<(SealedSecret, Recorded)>,
}

pub(crate) fn branch_name(spoke: &SpokeConfig) -> String {
    format!("{}{}", crate::repo::BRANCH_PREFIX, spoke.name)
}

impl Review {
    /// None in direct mode. Fetches the review branches; a forge that cannot be set up
    /// (no token) is reported per spoke, after its branch is pushed.
    pub async fn start(ctx: &Context) -> Option<Review> {
        let cfg = ctx.config.repo.forge.as_ref()?;
        if ctx.config.repo.mode != RepoMode::PullRequest {
            return None;
        }
        if let Err(e) = ctx.repo.fetch_review_branches().await {
            tracing::warn!(error = %e, "cannot fetch the review branches; using the last fetched");
        }
        Some(Review {
            forge: Forge::new(cfg).map_err(Arc::new),
            refused: None,
        })
    }

    /// The spoke's review branch, unless there is none or it is merged.
    pub async fn branch(&self, ctx: &Context, spoke: &SpokeConfig) -> Option<Branch> {
        let name = branch_name(spoke);
        let head = ctx.repo.remote_branch_head(&name).await?;
        let untrusted = match ctx.repo.branch_state(&name, &head, &spoke.output).await {
            BranchState::Merged => return None,
            BranchState::Open(proven) => proven.err(),
        };
        let recorded = match ctx.repo.show(&head, &spoke.output).await {
            Ok(Some(bytes)) => SealedSecret::parse(&bytes).ok().and_then(|s| {
                let r = Recorded::from_annotations(&s.annotations).ok()?;
                Some((s, r))
            }),
            _ => None,
        };
        Some(Branch {
            head,
            untrusted,
            recorded,
        })
    }

    /// Whether the spoke's fix already waits on its branch (then the report says
    /// pending). Probes the spoke when the target branch gave nothing to probe with.
    async fn waiting_on_branch(
        &self,
        ctx: &Context,
        spoke: &SpokeConfig,
        seen: &Observation,
        report: &mut SpokeReport,
        policy: &Policy,
    ) -> bool {
        let Some(branch) = self.branch(ctx, spoke).await else {
            return false;
        };
        if let Some(why) = &branch.untrusted {
            tracing::warn!(spoke = %spoke.name, branch = %branch_name(spoke), head = %branch.head, reason = %why, "review branch not trusted: re-extracting; the branch will be replaced");
            return false;
        }
        // The target branch gave nothing to probe with: the branch's record may.
        let own;
        let probe = match &seen.probe {
            Some(p) => Some(p),
            None => {
                own = match &branch.recorded {
                    Some((_, r)) => match decide::expected_server(spoke, Some(r)) {
                        Some(server) => Some(crate::spoke::probe(&server, ctx.probe_timeout).await),
                        None => None,
                    },
                    None => None,
                };
                own.as_ref()
            }
        };
        if !branch_fixes(spoke, &branch, probe, policy) {
            return false;
        }
        report.outcome = Outcome::Pending {
            branch: branch_name(spoke),
            commit: None,
            pull_request: None,
            change: None,
            pending_seconds: None,
        };
        true
    }

    /// After reconcile: push the proposal to the spoke's branch and open or update its
    /// pull request; for a pending spoke, find (or reopen) its pull request. The gate is
    /// asked before the push and again before the forge is written to: a refusal leaves
    /// the rest to the next tick here or the new leader, and is returned.
    async fn settle(
        &self,
        ctx: &Context,
        spoke: &SpokeConfig,
        report: &mut SpokeReport,
        proposal: Option<&Proposal>,
        opts: &Options,
    ) -> Option<String> {
        let (dry_run, gate) = (opts.dry_run, &opts.gate);
        let beside = opts.beside.get(&spoke.name).map_or(&[][..], Vec::as_slice);
        let pending = matches!(report.outcome, Outcome::Pending { .. });
        if proposal.is_none() && !pending {
            return None;
        }
        let name = branch_name(spoke);
        let base = ctx.repo.target_branch().to_string();
        let mut pushed = None;
        let mut replaced = None;
        // The pushed commit carries add's files (its message names them).
        let mut carried = false;
        let head;
        if !dry_run && let Err(why) = gate.check() {
            if proposal.is_some() {
                report.outcome = Outcome::Failed(SpokeError::NotPushed {
                    branch: name.clone(),
                    why: why.to_string(),
                });
            }
            return Some(why.to_string());
        }
        if let Some(p) = proposal {
            match push(ctx, spoke, &name, p, beside).await {
                Ok(done) => {
                    carried = done.onboarding;
                    (pushed, replaced, head) = (done.commit, done.replaced, done.head)
                }
                Err(e) => {
                    report.outcome = Outcome::Failed(SpokeError::BranchPush {
                        branch: name.clone(),
                        error: e.into(),
                    });
                    return None;
                }
            }
        } else {
            // Pending: `waiting` found the branch provably ours this tick; checked again
            // here, as the pull request will be compared with it.
            let trusted = match ctx.repo.remote_branch_head(&name).await {
                Some(h) => ctx
                    .repo
                    .provenance(&name, &h, &spoke.output)
                    .await
                    .map(|()| h)
                    .map_err(|why| why.to_string()),
                None => Err("the branch is gone".to_string()),
            };
            match trusted {
                Ok(h) => head = h,
                Err(why) => {
                    report.outcome = Outcome::Failed(SpokeError::Review(ReviewError::NotOurs {
                        branch: name.clone(),
                        why,
                    }));
                    return None;
                }
            }
        }
        let forge = match &self.forge {
            Ok(f) => f,
            Err(e) => {
                fail(
                    report,
                    &name,
                    pushed.as_deref(),
                    ForgeFailure::Setup(e.clone()),
                );
                return None;
            }
        };
        if !dry_run && let Err(why) = gate.check() {
            if pushed.is_some() {
                fail(
                    report,
                    &name,
                    pushed.as_deref(),
                    ForgeFailure::NotSent(why.to_string()),
                );
            }
            return Some(why.to_string());
        }
        let now = OffsetDateTime::now_utc();
        let result = if dry_run {
            forge
                .find_open(&name, &base)
                .await
                .map(|pr| pr.map(|pr| (pr, None)))
        } else {
            // An onboarding commit's message gains the trailer naming every file.
            let message = match proposal {
                Some(p) if !carried => Some(p.message.clone()),
                _ => ctx.repo.commit_message(&head).await.ok(),
            };
            let (title, body) = match message {
                Some(m) => describe(&m, report.reason.as_ref(), replaced.as_deref(), &head),
                None => (
                    format!("{}: rotate kubeconfig", spoke.name),
                    signed_line(&head),
                ),
            };
            let ask = forge::Proposal {
                branch: &name,
                base: &base,
                title: &title,
                body: &body,
            };
            // An open pull request (ours or adopted) always gets spokekeeper's title and
            // body; one that already has them is not written again.
            match forge.find_open(&name, &base).await {
                Err(e) => Err(e),
                Ok(Some(open)) if proposal.is_none() && same_text(&open, &title, &body) => {
                    Ok(Some((open, None)))
                }
                Ok(open) => forge
                    .open_or_update(&ask, open)
                    .await
                    .map(|(pr, a)| Some((pr, Some(a)))),
            }
        };
        match result {
            Ok(Some((open, _))) if open.head.as_deref() != Some(head.as_str()) => {
                let error = unverified(&open, &head, pushed.is_some());
                tracing::warn!(spoke = %spoke.name, branch = %name, error = %error, "pull request not endorsed");
                report.outcome =
                    Outcome::Failed(SpokeError::Review(ReviewError::Unverified(error)));
            }
            Ok(found) => {
                let (pr, change) = found.map_or((None, None), |(open, a)| (Some(open.pr), a));
                if let Some(pr) = &pr {
                    tracing::info!(spoke = %spoke.name, number = pr.number, url = %pr.url, ?change, "pull request");
                }
                report.outcome = Outcome::Pending {
                    branch: name,
                    commit: pushed,
                    pending_seconds: pr.as_ref().map(|p| age(p, now)),
                    pull_request: pr,
                    change,
                };
            }
            Err(e) => fail(
                report,
                &name,
                pushed.as_deref(),
                ForgeFailure::Forge(e.into()),
            ),
        }
        None
    }
}

impl Publish for Review {
    fn landing(&self) -> Landing {
        Landing::AtMerge
    }

    async fn waiting(
        &self,
        ctx: &Context,
        spoke: &SpokeConfig,
        seen: &Observation,
        report: &mut SpokeReport,
        policy: &Policy,
    ) -> bool {
        self.waiting_on_branch(ctx, spoke, seen, report, policy)
            .await
    }

    async fn spoke(
        &mut self,
        ctx: &Context,
        spoke: &SpokeConfig,
        report: &mut SpokeReport,
        proposal: Option<&Proposal>,
        opts: &Options,
    ) {
        if let Some(why) = self.settle(ctx, spoke, report, proposal, opts).await {
            self.refused = Some(why);
        }
    }

    /// The target branch is never pushed to, so the renewed certificate goes on its own
    /// branch and pull request, like a rotation. The clone's checkout is left as it is;
    /// until the pull request is merged the pinned copy there stays the old one.
    async fn certificate(
        &self,
        ctx: &Context,
        rel: &Path,
        pem: &[u8],
        message: &str,
    ) -> Result<Option<String>, PinError> {
        let branch = |source| PinError::Branch {
            branch: CERT_BRANCH,
            error: source,
        };
        let kept = |error| ReviewError::Forge {
            kept: format!("branch {CERT_BRANCH} pushed"),
            error,
        };
        let repo = &ctx.repo;
        let head = repo.remote_branch_head(CERT_BRANCH).await;
        let waiting = match &head {
            Some(h) => match repo.branch_state(CERT_BRANCH, h, rel).await {
                BranchState::Merged => false,
                BranchState::Open(proven) => match proven {
                    // Only spokekeeper's own signed commit is left waiting; another is replaced.
                    Ok(()) => repo.show(h, rel).await.ok().flatten().as_deref() == Some(pem),
                    Err(why) => {
                        tracing::warn!(branch = CERT_BRANCH, head = %h, reason = %why, "replacing a review branch spokekeeper cannot prove its own");
                        false
                    }
                },
            },
            None => false,
        };
        let (pushed, trusted) = if let (true, Some(h)) = (waiting, &head) {
            (None, h.clone())
        } else {
            let sha = repo
                .commit_on_target(rel, pem, message)
                .await
                .map_err(branch)?;
            repo.push_branch(CERT_BRANCH, &sha, head.as_deref())
                .await
                .map_err(branch)?;
            (Some(sha.clone()), sha)
        };
        let forge = self
            .forge
            .as_ref()
            .map_err(|e| kept(ForgeFailure::Setup(e.clone())))?;
        let base = repo.target_branch();
        let open = forge
            .find_open(CERT_BRANCH, base)
            .await
            .map_err(|e| kept(ForgeFailure::Forge(Arc::new(e))))?;
        let (title, body) = message.split_once("\n\n").unwrap_or((message, ""));
        // The head line lets a reviewer compare with the commit the forge shows.
        let body = format!("{body}\n\n{}", signed_line(&trusted));
        let shown = match open {
            // An open pull request (ours or adopted) always gets spokekeeper's text.
            Some(o) if pushed.is_none() && same_text(&o, title, &body) => o,
            open => {
                let ask = crate::forge::Proposal {
                    branch: CERT_BRANCH,
                    base,
                    title,
                    body: &body,
                };
                let (pr, action) = forge
                    .open_or_update(&ask, open)
                    .await
                    .map_err(|e| kept(ForgeFailure::Forge(Arc::new(e))))?;
                tracing::info!(number = pr.pr.number, url = %pr.pr.url, ?action, "sealing certificate pull request");
                pr
            }
        };
        if shown.head.as_deref() != Some(trusted.as_str()) {
            let why = unverified(&shown, &trusted, pushed.is_some());
            return Err(ReviewError::Unverified(why).into());
        }
        Ok(pushed)
    }

    async fn finish(&mut self, ctx: &Context, _: &Options) -> Finished {
        let mut out = Finished::default();
        // Review mode never pushes the target branch; say so if the clone holds commits
        // (left by an earlier direct-mode run) that only a push would publish.
        match ctx.repo.unpushed().await {
            Ok(0) | Err(_) => {}
            Ok(n) => {
                out.repo_error = Some(RepoFailure::Unpushed {
                    commits: n,
                    remote: ctx.config.repo.remote.clone(),
                    branch: ctx.config.repo.branch.clone(),
                    clone: ctx.config.repo.path.clone(),
                })
            }
        }
        // Reported as in direct mode: the branches and pull requests wait for a tick
        // that may act.
        if let Some(why) = &self.refused {
            out.repo_error = Some(RepoFailure::NotPushed { why: why.clone() });
        }
        out
    }
}

/// For `check`: the open pull request of each named spoke, as a tick report that holds
/// only pending spokes (and those whose look-up failed). A pull request counts as
/// pending only when the forge shows the commit this clone last pushed to the branch
/// and that commit passes [`crate::repo::Repo::provenance`]; any other is reported as an
/// unverified pull request (failed at `review`), never as a validated fix. Reads the
/// forge and the clone; fetches nothing.
pub(crate) async fn open_reviews(
    config: &crate::config::Config,
    repo: &crate::repo::Repo,
    spokes: &[String],
) -> super::TickReport {
    let mut out = Vec::new();
    let forge = config
        .repo
        .forge
        .as_ref()
        .map(|f| Forge::new(f).map_err(Arc::new));
    let Some(forge) = forge else {
        return super::TickReport::of(out);
    };
    let now = OffsetDateTime::now_utc();
    for spoke in config.spokes.iter().filter(|s| spokes.contains(&s.name)) {
        let branch = branch_name(spoke);
        let mut report = SpokeReport::new(&spoke.name, Outcome::Healthy);
        let found = match &forge {
            Ok(f) => f
                .find_open(&branch, &config.repo.branch)
                .await
                .map_err(|e| ForgeFailure::Forge(e.into())),
            Err(e) => Err(ForgeFailure::Setup(e.clone())),
        };
        match found {
            Ok(None) => continue,
            Ok(Some(open)) => {
                report.outcome = match endorsed(repo, spoke, &branch, &open).await {
                    Ok(()) => Outcome::Pending {
                        branch,
                        commit: None,
                        pending_seconds: Some(age(&open.pr, now)),
                        pull_request: Some(open.pr),
                        change: None,
                    },
                    Err(why) => Outcome::Failed(SpokeError::Review(ReviewError::NotEndorsed {
                        url: open.pr.url.clone(),
                        why,
                        spoke: spoke.name.clone(),
                    })),
                }
            }
            Err(e) => {
                report.outcome =
                    Outcome::Failed(SpokeError::Review(ReviewError::Lookup { branch, error: e }))
            }
        }
        out.push(report);
    }
    super::TickReport::of(out)
}

/// Whether the forge's pull request shows the commit this clone last pushed to
/// `branch`, and that commit is provably spokekeeper's; else why not.
async fn endorsed(
    repo: &crate::repo::Repo,
    spoke: &SpokeConfig,
    branch: &str,
    open: &forge::Open,
) -> Result<(), Unendorsed> {
    let Some(recorded) = repo.pushed(branch).await else {
        return Err(Unendorsed::NoRecord {
            branch: branch.into(),
        });
    };
    match open.head.as_deref() {
        None => return Err(Unendorsed::NoHead),
        Some(h) if h != recorded => {
            return Err(Unendorsed::OtherHead {
                shown: h.into(),
                pushed: recorded,
            });
        }
        Some(_) => {}
    }
    repo.provenance(branch, &recorded, &spoke.output)
        .await
        .map_err(|why| Unendorsed::Untrusted {
            head: recorded,
            why: Box::new(why),
        })
}

/// The error for a pull request whose head is not the commit spokekeeper verified.
pub(crate) fn unverified(open: &forge::Open, head: &str, just_pushed: bool) -> String {
    let shows = match &open.head {
        Some(h) => format!("the forge shows head {h}"),
        None => "the forge does not say which commit it shows".into(),
    };
    let lag = if just_pushed {
        " (the forge may not have seen the push yet)"
    } else {
        ""
    };
    format!(
        "unverified pull request {}: {shows}, not {head} which spokekeeper pushed and verified{lag}; it is not endorsed, the next tick checks again",
        open.pr.url
    )
}

/// Whether the open pull request already carries `title` and `body` (the note about a
/// replaced head, written when the branch was replaced, may stay in front).
pub(crate) fn same_text(open: &forge::Open, title: &str, body: &str) -> bool {
    let note = text::markdown("replaced branch head ");
    open.title == title
        && (open.body == body
            || open.body.strip_suffix(body).is_some_and(|before| {
                before.starts_with(&note)
                    && before.ends_with("\n\n")
                    && before.trim_end().lines().count() == 1
            }))
}

fn fail(report: &mut SpokeReport, branch: &str, pushed: Option<&str>, error: ForgeFailure) {
    let kept = match pushed {
        Some(sha) => format!(
            "branch {branch} pushed at {}",
            sha.chars().take(12).collect::<String>()
        ),
        None => format!("branch {branch} kept"),
    };
    report.outcome = Outcome::Failed(SpokeError::Review(ReviewError::Forge { kept, error }));
}

fn age(pr: &PullRequest, now: OffsetDateTime) -> u64 {
    (now - pr.created_at).whole_seconds().max(0) as u64
}

/// What [`push`] did.
struct Pushed {
    /// None: the branch already carried the same content (nothing pushed).
    commit: Option<String>,
    /// The branch's head now: pushed, or kept because it is provably ours.
    head: String,
    /// For the pull request body: the head replaced because it was not trusted.
    replaced: Option<String>,
    /// The pushed commit is an onboarding one (carrying add's files).
    onboarding: bool,
}

/// Commits the proposal on the target branch's head and pushes it to the spoke's
/// branch, replacing what is there only if it is still what we read. A branch that
/// already carries the same content is kept only when it is provably ours. With
/// `beside` (`spokekeeper add`) the commit is an onboarding one, carrying those files.
async fn push(
    ctx: &Context,
    spoke: &SpokeConfig,
    branch: &str,
    p: &Proposal,
    beside: &[super::Beside],
) -> Result<Pushed, RepoError> {
    let head = ctx.repo.remote_branch_head(branch).await;
    let mut replaced = None;
    let mut carried = Vec::new();
    if let Some(h) = &head
        && let BranchState::Open(proven) = ctx.repo.branch_state(branch, h, &spoke.output).await
    {
        // A new credential for a spoke whose onboarding waits for review keeps the
        // Flux objects `add` put beside it.
        if proven.is_ok() && beside.is_empty() {
            carried = ctx.repo.onboarding_files(h, &spoke.output).await?;
        }
        match proven {
            Err(why) => {
                tracing::warn!(spoke = %spoke.name, %branch, head = %h, reason = %why, "replacing a review branch spokekeeper cannot prove its own");
                replaced = Some(format!("replaced branch head {h}: {why}"));
            }
            Ok(()) if beside.is_empty() && same_content(ctx, spoke, h, p).await => {
                return Ok(Pushed {
                    commit: None,
                    head: h.clone(),
                    replaced: None,
                    onboarding: !carried.is_empty(),
                });
            }
            Ok(()) => {}
        }
    }
    let bytes = p.manifest.as_bytes();
    let onboard = |files| async move {
        ctx.repo
            .commit_onboarding(&spoke.name, &spoke.output, bytes, files, &p.message)
            .await
    };
    let mut onboarding = true;
    let sha = if !beside.is_empty() {
        onboard(beside).await?
    } else {
        let kept = match carried.is_empty() {
            true => None,
            false => match onboard(&carried).await {
                Ok(sha) => Some(sha),
                // The target branch moved under them: the credential goes alone.
                Err(e @ RepoError::BesideMoved { .. }) => {
                    tracing::warn!(spoke = %spoke.name, %branch, error = %e, "the onboarding files no longer fit the target branch; proposing the credential alone");
                    None
                }
                Err(e) => return Err(e),
            },
        };
        match kept {
            Some(sha) => sha,
            None => {
                onboarding = false;
                ctx.repo
                    .commit_on_target(&spoke.output, bytes, &p.message)
                    .await?
            }
        }
    };
    ctx.repo.push_branch(branch, &sha, head.as_deref()).await?;
    Ok(Pushed {
        head: sha.clone(),
        commit: Some(sha),
        replaced,
        onboarding,
    })
}

/// Whether the branch at `head` holds a credential with the proposal's content, sealed
/// to the same key.
async fn same_content(ctx: &Context, spoke: &SpokeConfig, head: &str, p: &Proposal) -> bool {
    let Ok(Some(bytes)) = ctx.repo.show(head, &spoke.output).await else {
        return false;
    };
    SealedSecret::parse(&bytes)
        .ok()
        .and_then(|s| Recorded::from_annotations(&s.annotations).ok())
        .is_some_and(|r| {
            r.content_sha256 == p.content_sha256 && r.sealing_sha256 == p.sealing_sha256
        })
}

/// Title (the commit's subject) and body (its facts, the full fingerprints, what to do,
/// the verified head commit; and, when an untrusted branch head was replaced, which and
/// why). The message's text carries values a spoke reported: the body quotes it
/// escaped, as literal Markdown.
pub(crate) fn describe(
    message: &str,
    reason: Option<&Reason>,
    replaced: Option<&str>,
    head: &str,
) -> (String, String) {
    let (title, rest) = message.split_once('\n').unwrap_or((message, ""));
    let mut body = String::new();
    if let Some(why) = replaced {
        body.push_str(&text::markdown(&text::one_line(why, 400)));
        body.push_str("\n\n");
    }
    if let Some(Reason::CaChanged { old }) = reason {
        body.push_str(&format!("previous CA: {old}\n"));
    }
    for line in rest.trim().lines() {
        body.push_str(&text::markdown(&text::one_line(line, 1000)));
        body.push('\n');
    }
    body.push_str(
        "\nOpened by spokekeeper after validating the new credential against the live API. \
         Merging makes the hub use it; if the spoke changes again first, spokekeeper replaces \
         this branch and updates this pull request.\n",
    );
    body.push('\n');
    body.push_str(&signed_line(head));
    (text::one_line(title, 200), body)
}

/// The line a reviewer compares with the head commit the forge shows.
pub(crate) fn signed_line(head: &str) -> String {
    format!("head {}, signed by spokekeeper\n", text::markdown(head))
}

/// Whether the branch's manifest would be healthy: the fix is waiting for review.
pub(crate) fn branch_fixes(
    spoke: &SpokeConfig,
    branch: &Branch,
    probe: Option<&Result<ProbeReport, ProbeError>>,
    policy: &Policy,
) -> bool {
    if branch.untrusted.is_some() {
        return false;
    }
    let Some((sealed, recorded)) = &branch.recorded else {
        return false;
    };
    let seen = Observed {
        committed: Some(Ok((sealed, recorded))),
        probe,
    };
    let policy = Policy {
        now: policy.now,
        renew_before: policy.renew_before,
        sealing_sha256: policy.sealing_sha256,
        force: false,
        verify_due: false,
    };
    decide::decide(spoke, &seen, &policy) == Decision::Healthy
}

/// An age for people: `45s`, `12m`, `3h 27m`, `2d 4h`.
pub(crate) fn human(secs: u64) -> String {
    let (d, h, m) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{secs}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, m) => format!("{h}h {m}m"),
        (d, h, _) => format!("{d}d {h}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_plainly() {
        assert_eq!(human(45), "45s");
        assert_eq!(human(12 * 60 + 5), "12m");
        assert_eq!(human(3 * 3600 + 27 * 60), "3h 27m");
        assert_eq!(human(2 * 86_400 + 4 * 3600 + 59), "2d 4h");
    }

    #[test]
    fn description_carries_both_fingerprints() {
        let old = crate::fingerprint::Fingerprint::from_digest([0xaa; 32]);
        let msg = "dev: rotate kubeconfig: CA changed sha256:aaaa.. -> sha256:bbbb..\n\nCA: sha256:bbbbfull (valid until 2036-01-01T00:00:00Z)\nvalidated: authenticated as system:admin\n";
        let (title, body) = describe(msg, Some(&Reason::CaChanged { old }), None, "0123abcd");
        assert_eq!(
            title,
            "dev: rotate kubeconfig: CA changed sha256:aaaa.. -> sha256:bbbb.."
        );
        assert!(
            body.starts_with(&format!("previous CA: {old}\nCA: sha256:bbbbfull")),
            "{body}"
        );
        assert!(
            body.contains("validated: authenticated as system:admin"),
            "{body}"
        );
        assert!(
            body.ends_with("\nhead 0123abcd, signed by spokekeeper\n"),
            "the head a reviewer compares with the forge's: {body}"
        );
    }
}
