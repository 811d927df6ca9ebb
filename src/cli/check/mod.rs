//! `spokekeeper check [SPOKE...] [-o json]`: expiry and health, for people, cron,
//! Nagios-style monitors and CI.
//!
//! Reads the fleet repo clone as it is (no fetch, no SSH, no commits) and TLS-probes
//! each spoke, then grades like the daemon's alerts, including whether a tick would trust
//! the sealing certificate (judged offline, see `untrusted_sealing`). Exit codes (Nagios): 0 ok,
//! 1 warning, 2 critical or expired, 3 unknown. Unknown (could not check: configuration,
//! repo or sealing certificate unreadable, a spoke never rotated, its state unreadable,
//! or unreachable) ranks below critical and above warning: a known critical problem is
//! never hidden, and a warning never hides a spoke that could not be checked.
//!
//! The clone's Flux objects are read too: a HelmRelease that would land on the hub, or
//! on a spoke where no helm-controller runs, is a warning (`traps.rs`), and so is what
//! the hub applies for a spoke unconfined or under another spoke's name (`confine.rs`),
//! and a spoke onboarded with its credential alone, which nothing deploys to (`onboard.rs`).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;
use time::OffsetDateTime;

use super::Format;
use spokekeeper::alerts::{self, Finding, SealingCert, Status};
use spokekeeper::config::{Config, RepoMode, Span};
use spokekeeper::flux;
use spokekeeper::hub::cert::Untrusted;
use spokekeeper::repo::Repo;
use spokekeeper::rotate::state::rfc3339;
use spokekeeper::rotate::{observe, review};
use spokekeeper::seal::SealingKey;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Spokes to check (names from the configuration; default: all).
    pub spokes: Vec<String>,
    /// Bound on each spoke's TLS probe (s, m, h, d).
    #[arg(long, default_value = "10s")]
    pub(crate) probe_timeout: Span,
}

#[derive(Serialize)]
struct Report<'a> {
    status: Status,
    exit_code: u8,
    #[serde(with = "time::serde::rfc3339")]
    checked_at: OffsetDateTime,
    #[serde(skip_serializing_if = "Option::is_none")]
    warn_before: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    critical_before: Option<String>,
    findings: &'a [Finding],
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub(super) fn run(args: &CheckArgs, config_path: &Path, format: Option<Format>) -> ExitCode {
    let format = format.unwrap_or(Format::Table);
    let now = OffsetDateTime::now_utc();
    let config = match Config::load(config_path) {
        Ok(c) => c,
        Err(e) => return cannot_check(format, now, &e.to_string()),
    };
    if let Some(unknown) = args
        .spokes
        .iter()
        .find(|n| !config.spokes.iter().any(|s| &s.name == *n))
    {
        let msg = format!("no spoke named {unknown:?} in {}", config_path.display());
        return cannot_check(format, now, &msg);
    }
    // None without sealing.cert (every spoke is sops): no certificate to grade.
    let sealing = match config
        .sealing_cert
        .as_deref()
        .map(|cert| SealingCert::load(cert, &config.repo.path, now))
        .transpose()
    {
        Ok(s) => s,
        Err(e) => return cannot_check(format, now, &e.to_string()),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => return cannot_check(format, now, &format!("cannot start the runtime: {e}")),
    };
    let seen = runtime.block_on(async {
        let repo = Repo::open(&config.repo)
            .await
            .map_err(|e| format!("repo.path: {e}"))?;
        let seen = observe::fleet(&config, &repo, &args.spokes, args.probe_timeout.0)
            .await
            .map_err(|e| format!("repo.path: {e}"))?;
        let untrusted = untrusted_sealing(&config, &repo, now).await;
        let issuers = issuers(&config, &args.spokes, args.probe_timeout.0).await;
        // Review mode: open pull requests are part of the picture.
        let names: Vec<String> = seen.iter().map(|o| o.spoke.clone()).collect();
        let reviews = reviews(&config, &repo, &names).await;
        Ok::<_, String>((seen, reviews, untrusted, issuers))
    });
    let (seen, (reviews, removals), untrusted, issuers) = match seen {
        Ok(s) => s,
        Err(e) => return cannot_check(format, now, &e),
    };
    let mut findings = alerts::evaluate(
        &config.alerts,
        &seen,
        sealing.as_ref(),
        now,
        reviews.as_ref(),
    );
    findings.extend(federated(&config, &seen, &issuers, now));
    for (spoke, file, pr) in &removals {
        findings.push(alerts::removal_pending(spoke, file, &pr.url));
    }
    if let Some(u) = &untrusted {
        // The table's line is short; the whole story and the fix go to stderr.
        eprintln!("spokekeeper check: CRITICAL: {}", u.error);
        findings.push(alerts::untrusted_sealing(u));
    }
    let sops = config.spokes.iter().filter(|s| {
        s.format == spokekeeper::config::SealingFormat::Sops
            && (args.spokes.is_empty() || args.spokes.contains(&s.name))
    });
    for s in sops {
        if let Err(e) = spokekeeper::seal::recipients(&config, s) {
            eprintln!("spokekeeper check: CRITICAL: {}: {e}", s.name);
            findings.push(alerts::sops_recipients(&s.name, e.to_string()));
        }
    }
    let tree = flux::read_tree(&config.repo.path);
    if tree.unread > 0 {
        eprintln!(
            "spokekeeper check: WARNING: {} YAML files of the fleet repo were not checked for HelmRelease traps: check reads at most {} MiB of it in all; remove what Flux does not need",
            tree.unread,
            flux::MAX_TOTAL_BYTES >> 20
        );
    }
    let layout = flux::layout_traps(&tree, &config.spokes);
    findings.extend(
        layout
            .into_iter()
            .filter(|t| args.spokes.is_empty() || args.spokes.contains(&t.spoke))
            .map(|t| alerts::flux_layout(&t.spoke, t.detail)),
    );
    let status = alerts::overall(&findings);
    let report = Report {
        status,
        exit_code: status.exit_code(),
        checked_at: now,
        warn_before: Some(Span(config.alerts.warn_before).to_string()),
        critical_before: Some(Span(config.alerts.critical_before).to_string()),
        findings: &findings,
        error: None,
    };
    print(format, &report, &table(&report, seen.len()));
    ExitCode::from(status.exit_code())
}

/// Review mode: the open pull requests of the named spokes' credentials, and those of
/// their old Secrets' removals (spoke, file, pull request).
async fn reviews(
    config: &Config,
    repo: &Repo,
    names: &[String],
) -> (
    Option<spokekeeper::rotate::TickReport>,
    Vec<(String, String, spokekeeper::forge::PullRequest)>,
) {
    match config.repo.mode {
        RepoMode::PullRequest => (
            Some(review::open_reviews(config, repo, names).await),
            review::open_removals(config, repo, names).await,
        ),
        RepoMode::Direct => (None, Vec::new()),
    }
}

/// The issuers the selected federated spokes trust, each fetched once.
async fn issuers(
    config: &Config,
    only: &[String],
    limit: std::time::Duration,
) -> spokekeeper::federate::issuer::Looked {
    let policies = || {
        config
            .spokes
            .iter()
            .filter(|s| only.is_empty() || only.contains(&s.name))
            .filter_map(|s| s.credential.federated.as_ref())
    };
    let cas = spokekeeper::federate::IssuerCas::read(policies());
    let seen = spokekeeper::federate::issuer::look_all(policies(), &cas, limit).await;
    spokekeeper::federate::issuer::Looked { cas, seen }
}

/// The federated spokes' issuer findings, as the daemon grades them; how many spokes
/// trust a next issuer, on stderr.
fn federated(
    config: &Config,
    seen: &[observe::Observation],
    issuers: &spokekeeper::federate::issuer::Looked,
    now: OffsetDateTime,
) -> Vec<Finding> {
    for n in alerts::next_trust(&config.spokes, seen, issuers) {
        eprintln!("spokekeeper check: {}", n.line());
    }
    alerts::issuers(&config.alerts, &config.spokes, seen, issuers, now)
}

/// Whether a tick would refuse to seal to sealing.cert, judged offline by the daemon's
/// rule (the hub is not asked). None when it is trusted, when it cannot be sealed to at
/// all (expired, unreadable: graded or reported elsewhere), and with `hub:` when this
/// clone has no record of what the hub served: only a tick that reaches the hub can tell.
/// None without sealing.cert.
async fn untrusted_sealing(config: &Config, repo: &Repo, now: OffsetDateTime) -> Option<Untrusted> {
    let path = config.sealing_cert.as_deref()?;
    let pem = spokekeeper::fsutil::read_under(path, repo.path()).ok()?;
    let key = SealingKey::from_pem(&pem, &path.display().to_string(), now).ok()?;
    match spokekeeper::rotate::sealing_key::trusted_offline(config, path, repo, key.fingerprint())
        .await
    {
        Ok(_) => None,
        Err(u) if u.anchor == "last-served" && u.expected.is_empty() => None,
        Err(u) => Some(u),
    }
}

/// Exit 3: nothing could be graded. JSON readers still get a report on stdout.
fn cannot_check(format: Format, now: OffsetDateTime, message: &str) -> ExitCode {
    eprintln!("spokekeeper check: UNKNOWN: {message}");
    let report = Report {
        status: Status::Unknown,
        exit_code: Status::Unknown.exit_code(),
        checked_at: now,
        warn_before: None,
        critical_before: None,
        findings: &[],
        error: Some(message.into()),
    };
    if format != Format::Table {
        print(format, &report, "");
    }
    ExitCode::from(Status::Unknown.exit_code())
}

fn print(format: Format, report: &Report<'_>, table: &str) {
    let text = match format {
        Format::Table => table.to_string(),
        Format::Json => serde_json::to_string_pretty(report).unwrap_or_default() + "\n",
        Format::Yaml => serde_saphyr::to_string(report).unwrap_or_default(),
    };
    // A closed pipe (`| head`) is no reason to panic; the exit code still counts.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn table(report: &Report<'_>, spokes: usize) -> String {
    let mut rows = vec![
        [
            "SPOKE",
            "CERT",
            "SEVERITY",
            "NOT AFTER",
            "DAYS LEFT",
            "DETAIL",
        ]
        .map(String::from),
    ];
    for f in report.findings {
        rows.push([
            f.spoke.clone(),
            f.subject.as_str().into(),
            f.status.as_str().into(),
            f.not_after.map_or_else(|| "-".into(), rfc3339),
            f.days_left.map_or_else(|| "-".into(), |d| d.to_string()),
            f.detail.clone(),
        ]);
    }
    let mut out = super::table::render(&rows);
    let count = |s: Status| report.findings.iter().filter(|f| f.status == s).count();
    let counts: Vec<String> = [
        Status::Expired,
        Status::Critical,
        Status::Unknown,
        Status::Warning,
        Status::Ok,
    ]
    .into_iter()
    .filter(|s| count(*s) > 0)
    .map(|s| format!("{} {s}", count(s)))
    .collect();
    out.push_str(&format!(
        "\n{}: {} ({spokes} spoke{})\n",
        report.status.as_str().to_uppercase(),
        counts.join(", "),
        if spokes == 1 { "" } else { "s" }
    ));
    out
}
