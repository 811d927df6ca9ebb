//! `repo:`: the fleet repository, and how a rotation reaches its branch: committed and
//! pushed directly, or through a signed review branch and a pull request
//! (`repo.forge`, `repo.signing_key`).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Loading, Span, signing_key};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRepo {
    path: PathBuf,
    remote: Option<String>,
    branch: Option<String>,
    author: Option<String>,
    push: Option<bool>,
    mode: Option<RepoMode>,
    forge: Option<RawForge>,
    signing_key: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawForge {
    kind: ForgeKind,
    url: String,
    repository: String,
    token_file: Option<PathBuf>,
    token_env: Option<String>,
    /// Present only to be refused with the fix: a token never lives in the config.
    token: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    reviewers: Vec<String>,
    timeout: Option<Span>,
    rate_limit_wait: Option<Span>,
}

/// How a rotation reaches the target branch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RepoMode {
    /// Commit on the target branch and push (the default).
    #[default]
    Direct,
    /// One branch `spokekeeper/<spoke>` and one pull request per rotated spoke.
    PullRequest,
}

/// Which forge API opens the pull requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForgeKind {
    Github,
    Gitlab,
    /// Gitea and Forgejo (the same API).
    #[serde(alias = "forgejo")]
    Gitea,
}

/// Where the forge token is read from at each use (never from the config itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    File(PathBuf),
    Env(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForgeConfig {
    pub kind: ForgeKind,
    /// The API base as written (GitLab gets /api/v4, Gitea /api/v1 appended).
    pub url: url::Url,
    /// owner/name; for GitLab a numeric project id or group/project.
    pub repository: String,
    pub token: TokenSource,
    pub labels: Vec<String>,
    /// Usernames (GitHub, Gitea); GitLab: numeric user ids.
    pub reviewers: Vec<String>,
    /// Per request (default 20s).
    pub timeout: Duration,
    /// The longest rate-limit wait honoured before giving up until the next tick (60s).
    pub rate_limit_wait: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoConfig {
    pub path: PathBuf,
    pub remote: String,
    pub branch: String,
    pub author: Option<String>,
    pub push: bool,
    pub mode: RepoMode,
    /// Set exactly when `mode` is pull-request.
    pub forge: Option<ForgeConfig>,
    /// The OpenSSH private key that signs review commits; set exactly when `mode` is
    /// pull-request (a review branch is trusted only when its head verifies against it).
    pub signing_key: Option<PathBuf>,
}

/// Defaults filled in; `forge` and `signing_key` are required with pull-request mode
/// and refused without it. The key itself is read by `Config::load`.
pub(super) fn load(raw: RawRepo, l: &Loading) -> Result<RepoConfig, ConfigError> {
    let mode = raw.mode.unwrap_or_default();
    let forge = match (mode, raw.forge) {
        (RepoMode::Direct, None) => None,
        (RepoMode::Direct, Some(_)) => {
            return Err(l.err(
                "repo.forge is set but repo.mode is direct: set repo.mode: pull-request, or remove repo.forge".into(),
            ));
        }
        (RepoMode::PullRequest, None) => {
            return Err(l.err(
                "repo.mode pull-request needs repo.forge (kind, url, repository, token_file or token_env)".into(),
            ));
        }
        (RepoMode::PullRequest, Some(f)) => {
            Some(forge(f, l).map_err(|e| l.bad("repo.forge", e.to_string()))?)
        }
    };
    let signing_key = match (mode, raw.signing_key) {
        (RepoMode::PullRequest, Some(k)) => Some(l.resolve(&k)),
        (RepoMode::PullRequest, None) => {
            return Err(l.bad(
                "repo.mode",
                format!(
                    "repo.signing_key is required with repo.mode: pull-request: spokekeeper signs every review commit with it and trusts a review branch only when its signature verifies. Create one ({}) and set repo.signing_key: /etc/spokekeeper/signing-key",
                    signing_key::KEYGEN
                ),
            ));
        }
        (RepoMode::Direct, Some(_)) => {
            return Err(l.bad(
                "repo.signing_key",
                "repo.signing_key is set but repo.mode is direct: it signs review commits only; set repo.mode: pull-request, or remove repo.signing_key".into(),
            ));
        }
        (RepoMode::Direct, None) => None,
    };
    if mode == RepoMode::PullRequest && raw.push == Some(false) {
        return Err(l.err(
            "repo.push: false cannot work with repo.mode pull-request (the branch must be pushed to open a pull request): remove one".into(),
        ));
    }
    Ok(RepoConfig {
        path: l.resolve(&raw.path),
        remote: raw.remote.unwrap_or_else(|| "origin".into()),
        branch: raw.branch.unwrap_or_else(|| "main".into()),
        author: raw.author,
        push: raw.push.unwrap_or(true),
        mode,
        forge,
        signing_key,
    })
}

/// A `repo.forge` that cannot be used: names the key and the fix (never the token).
#[derive(Debug, thiserror::Error)]
enum BadForge {
    #[error(
        "repo.forge.token is not allowed: a token never goes in the configuration file. \
         Put it in a file (repo.forge.token_file: /etc/spokekeeper/forge-token, mode 600) \
         or an environment variable (repo.forge.token_env: SPOKEKEEPER_FORGE_TOKEN)"
    )]
    InlineToken,
    #[error(
        "repo.forge needs token_file (a file holding the token) or token_env (the variable's name)"
    )]
    NoToken,
    #[error("repo.forge has both token_file and token_env: keep exactly one")]
    BothTokens,
    #[error(
        "repo.forge.url {0:?} is not an http(s) URL: e.g. https://api.github.com, https://gitlab.example.org"
    )]
    NotHttp(String),
    #[error(
        "repo.forge.url {0:?} is plain http: the token would cross the network in clear; use https"
    )]
    PlainHttp(String),
    #[error(
        "repo.forge.repository {0:?} must be owner/name (GitLab: a numeric project id or group/project)"
    )]
    Repository(String),
    #[error(
        "repo.forge.reviewers {0:?}: GitLab takes reviewer user ids (numbers, from /api/v4/users?username=NAME)"
    )]
    Reviewer(String),
}

/// `repo.forge`: the token source (never the token), the API URL and the repository.
fn forge(f: RawForge, l: &Loading) -> Result<ForgeConfig, BadForge> {
    if f.token.is_some() {
        return Err(BadForge::InlineToken);
    }
    let token = match (f.token_file, f.token_env) {
        (Some(p), None) => TokenSource::File(l.resolve(&p)),
        (None, Some(v)) if !v.trim().is_empty() => TokenSource::Env(v),
        (None, None) | (None, Some(_)) => {
            return Err(BadForge::NoToken);
        }
        (Some(_), Some(_)) => {
            return Err(BadForge::BothTokens);
        }
    };
    let url = url::Url::parse(&f.url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| BadForge::NotHttp(f.url.clone()))?;
    // The token travels in a header: plain HTTP only to this machine.
    let loopback = match url.host() {
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    };
    if url.scheme() == "http" && !loopback {
        return Err(BadForge::PlainHttp(f.url));
    }
    let repo = f.repository.trim();
    let ok = match f.kind {
        ForgeKind::Gitlab => {
            repo.bytes().all(|b| b.is_ascii_digit()) && !repo.is_empty()
                || repo.split('/').count() >= 2 && repo.split('/').all(|p| !p.is_empty())
        }
        _ => repo.split('/').count() == 2 && repo.split('/').all(|p| !p.is_empty()),
    };
    if !ok {
        return Err(BadForge::Repository(f.repository));
    }
    if f.kind == ForgeKind::Gitlab
        && let Some(r) = f.reviewers.iter().find(|r| r.parse::<u64>().is_err())
    {
        return Err(BadForge::Reviewer(r.clone()));
    }
    Ok(ForgeConfig {
        kind: f.kind,
        url,
        repository: repo.to_string(),
        token,
        labels: f.labels,
        reviewers: f.reviewers,
        timeout: f.timeout.map_or(Duration::from_secs(20), |s| s.0),
        rate_limit_wait: f.rate_limit_wait.map_or(Duration::from_secs(60), |s| s.0),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::super::tests::{MIN, parse, refused};
    use super::*;

    const REVIEW: &str = "repo:\n  path: f\n  mode: pull-request\n  signing_key: signing-key\n  forge:\n    kind: gitlab\n    url: https://gitlab.example.org\n    repository: infra/fleet\n    token_env: FORGE_TOKEN\n    labels: [spokekeeper]\n    reviewers: [\"42\"]\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";

    #[test]
    fn review_mode_needs_a_signing_key() {
        let c = parse(REVIEW).unwrap();
        assert_eq!(
            c.repo.signing_key.as_deref(),
            Some(Path::new("/etc/spokekeeper/signing-key")),
            "relative to the configuration"
        );
        refused(
            &REVIEW.replace("  signing_key: signing-key\n", ""),
            &[
                "repo.signing_key",
                "line 3",
                "ssh-keygen -t ed25519 -N '' -C spokekeeper -f /etc/spokekeeper/signing-key",
            ],
        );
        refused(
            &MIN.replace("path: f", "path: f, signing_key: k"),
            &["repo.signing_key", "line 1", "repo.mode is direct"],
        );
    }

    #[test]
    fn review_mode_reads_the_forge() {
        let c = parse(REVIEW).unwrap();
        assert_eq!(c.repo.mode, RepoMode::PullRequest);
        let f = c.repo.forge.unwrap();
        assert_eq!(f.kind, ForgeKind::Gitlab);
        assert_eq!(f.repository, "infra/fleet");
        assert_eq!(f.token, TokenSource::Env("FORGE_TOKEN".into()));
        assert_eq!((f.labels.len(), f.reviewers.len()), (1, 1));
        assert_eq!(f.timeout, Duration::from_secs(20));
        assert_eq!(c.alerts.pending_review_after, Duration::from_secs(4 * 3600));
        let c = parse(&REVIEW.replace("token_env: FORGE_TOKEN", "token_file: tok")).unwrap();
        assert_eq!(
            c.repo.forge.unwrap().token,
            TokenSource::File("/etc/spokekeeper/tok".into()),
            "relative to the configuration"
        );
        assert_eq!(parse(MIN).unwrap().repo.mode, RepoMode::Direct);
    }

    #[test]
    fn review_mode_mistakes_name_the_field_and_the_fix() {
        refused(
            &REVIEW.replace("token_env: FORGE_TOKEN", "token: ghp_abc"),
            &["repo.forge.token", "token_file", "token_env"],
        );
        refused(
            &REVIEW.replace("    token_env: FORGE_TOKEN\n", ""),
            &["token_file", "token_env"],
        );
        refused(
            &REVIEW.replace("token_env: FORGE_TOKEN", "token_env: A\n    token_file: b"),
            &["exactly one"],
        );
        refused(
            &REVIEW.replace("[\"42\"]", "[alice]"),
            &["reviewers", "user ids"],
        );
        refused(
            &REVIEW.replace("kind: gitlab", "kind: bitbucket"),
            &["bitbucket"],
        );
        refused(
            &REVIEW
                .replace("kind: gitlab", "kind: github")
                .replace("infra/fleet", "fleet"),
            &["repo.forge.repository", "owner/name"],
        );
        refused(
            &REVIEW.replace("https://gitlab.example.org", "gitlab"),
            &["repo.forge.url"],
        );
        refused(
            &REVIEW.replace("https://gitlab.example.org", "http://gitlab.example.org"),
            &["repo.forge.url", "https"],
        );
        assert!(
            parse(&REVIEW.replace("https://gitlab.example.org", "http://127.0.0.1:8080")).is_ok(),
            "loopback may be plain http"
        );
        refused(
            &REVIEW.replace("  mode: pull-request\n", ""),
            &["repo.mode: pull-request"],
        );
        refused(
            &REVIEW.replace("  forge:", "  push: false\n  forge:"),
            &["repo.push"],
        );
        let no_forge = "repo: {path: f, mode: pull-request}\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";
        refused(no_forge, &["repo.forge"]);
        assert_eq!(
            parse(&REVIEW.replace("kind: gitlab", "kind: forgejo"))
                .unwrap()
                .repo
                .forge
                .unwrap()
                .kind,
            ForgeKind::Gitea
        );
    }
}
