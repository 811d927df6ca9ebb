//! `spokekeeper rotate [SPOKE...] [--all] [--force] [--dry-run]`: one tick now (with a
//! progress line on stderr when it is a terminal and the output a table).

use std::path::Path;
use std::process::ExitCode;

use super::{Chain, Format, fail, out};
use spokekeeper::config::Config;
use spokekeeper::repo::{Repo, RepoError};
use spokekeeper::rotate::{self, Context, Options, Outcome, TickReport};

#[derive(Debug, clap::Args)]
pub struct RotateArgs {
    /// Spokes to work on (names from the configuration).
    pub spokes: Vec<String>,
    /// Every configured spoke.
    #[arg(long, conflicts_with = "spokes")]
    pub all: bool,
    /// Re-extract and commit even when nothing says so.
    #[arg(long)]
    pub force: bool,
    /// Decide, extract and validate, but write, commit and push nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How many spokes are worked on at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
}

pub(crate) fn run(args: &RotateArgs, config_path: &Path, format: Option<Format>) -> ExitCode {
    let config = match Config::load(config_path) {
        Ok(c) => c,
        Err(e) => return fail("rotate", Chain(&e)),
    };
    if args.spokes.is_empty() && !args.all {
        let names: Vec<&str> = config.spokes.iter().map(|s| s.name.as_str()).collect();
        return fail(
            "rotate",
            format!(
                "name the spokes to rotate ({}), or pass --all",
                names.join(", ")
            ),
        );
    }
    if let Some(unknown) = args
        .spokes
        .iter()
        .find(|n| !config.spokes.iter().any(|s| &s.name == *n))
    {
        return fail(
            "rotate",
            format!("no spoke named {unknown:?} in {}", config_path.display()),
        );
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => return fail("rotate", format!("cannot start the runtime: {e}")),
    };
    let format = format.unwrap_or(Format::Table);
    let shown = super::progress::on_terminal(format == Format::Table);
    let opts = Options {
        force: args.force,
        revoke: false,
        drop_issuer: false,
        dry_run: args.dry_run,
        only: args.spokes.clone(),
        concurrency: args.concurrency,
        progress: shown.as_ref().map(|(p, _)| p.clone()).unwrap_or_default(),
        gate: Default::default(),
        beside: Default::default(),
    };
    let result = runtime.block_on(run_tick(config, &opts));
    if let Some((_, line)) = &shown {
        line.clear();
    }
    let report = match result {
        Ok(r) => r,
        Err(e) => return fail("rotate", Chain(&e)),
    };
    print_report(&report, format);
    if report.ok() && report.hub_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What stops a one-shot tick before it reports.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunTickError {
    #[error(transparent)]
    Sealing(#[from] spokekeeper::hub::cert::StartKeyError),
    #[error("repo.path: {0}")]
    Repo(RepoError),
    /// The tick's context refused the configuration (its message names the setting).
    #[error(transparent)]
    Context(spokekeeper::rotate::DemoKey),
    #[error(transparent)]
    Tick(RepoError),
}

/// Loads the sealing key, opens the repo and runs one tick, then records its Events as
/// the daemon does (unless a dry run), so the hub shows every rotation whoever ran it.
pub(crate) async fn run_tick(config: Config, opts: &Options) -> Result<TickReport, RunTickError> {
    let sealing = spokekeeper::hub::cert::initial(&config).await?;
    let repo = Repo::open(&config.repo).await.map_err(RunTickError::Repo)?;
    let ctx = Context::new(config, sealing, repo).map_err(RunTickError::Context)?;
    let report = rotate::tick(&ctx, opts).await.map_err(RunTickError::Tick)?;
    if !opts.dry_run {
        record_events(&ctx.config, &report).await;
    }
    Ok(report)
}

/// A one-shot run's Events: each is a new one (no series outlives the run); expiry
/// warnings are the daemon's. What is not recorded is said on stderr, the exit code kept.
async fn record_events(config: &Config, report: &TickReport) {
    use spokekeeper::alerts::{Events, NotifyOptions};
    let instance =
        spokekeeper::daemon::lease::default_identity().unwrap_or_else(|_| "spokekeeper".into());
    let window = spokekeeper::hub::recorder::CLIENT_GO_WINDOW;
    let mut events = match Events::new(config, &instance, window, NotifyOptions::default()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("events not recorded: {}", Chain(&e));
            return;
        }
    };
    let now = time::OffsetDateTime::now_utc();
    // A one-shot run holds no Lease: its gate is always open.
    let open = spokekeeper::rotate::Gate::default();
    for e in events.record(config, report, &[], now, &open).await {
        eprintln!("event not recorded: {}", Chain(&e));
    }
}

/// Pretty JSON and a newline, written as it is made: a report over many spokes is never
/// held twice as text.
fn out_json(report: &TickReport) {
    use std::io::Write;
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let _ = serde_json::to_writer_pretty(&mut stdout, report)
        .map_err(std::io::Error::from)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
}

pub(crate) fn print_report(report: &TickReport, format: Format) {
    match format {
        Format::Json => out_json(report),
        Format::Yaml => out(&serde_saphyr::to_string(report).unwrap_or_default()),
        Format::Table => {
            out(&table(report));
            for s in &report.spokes {
                match &s.outcome {
                    Outcome::Failed(error) => {
                        eprintln!("{}: failed at {}: {error}", s.spoke, error.stage())
                    }
                    Outcome::Pending {
                        branch,
                        pull_request,
                        pending_seconds,
                        ..
                    } => match pull_request {
                        Some(pr) => eprintln!(
                            "{}: waiting for review on {branch} for {}: {}",
                            s.spoke,
                            rotate::review::human(pending_seconds.unwrap_or(0)),
                            pr.url
                        ),
                        None => eprintln!("{}: the fix waits on branch {branch}", s.spoke),
                    },
                    Outcome::NotRenewed => eprintln!(
                        "{}: the client certificate expires soon and the node has not renewed it yet \
                         (k3s renews on restart within 120 days of expiry): restart k3s on the node",
                        s.spoke
                    ),
                    _ => {}
                }
            }
            if let Some(e) = &report.repo_error {
                eprintln!("fleet repo: {e}");
            }
            if let Some(c) = &report.sealing {
                if let Some(r) = &c.renewed {
                    eprintln!(
                        "sealing certificate renewed on the hub: {} -> {} (every spoke re-sealed)",
                        r.old.short(),
                        r.new.short()
                    );
                }
                if let Some(e) = &c.error {
                    eprintln!("sealing certificate: {e}");
                }
                if let Some(u) = &c.untrusted {
                    eprintln!("sealing certificate: {}", u.error);
                }
            }
            for s in &report.spokes {
                if let Some(h) = &s.hub {
                    eprintln!("{}: hub: {}", s.spoke, h.summary());
                }
                if let Some(m) = &s.migration {
                    print_migration(&s.spoke, m);
                }
            }
        }
    }
}

/// A federated spoke's old Secret: kept (each reason), removed, or left alone.
fn print_migration(spoke: &str, m: &rotate::Migration) {
    use rotate::MigrationState as S;
    let file = &m.file;
    match &m.state {
        S::Waits { remaining } => {
            for why in remaining {
                eprintln!("{spoke}: old Secret {file} stays: {why}");
            }
        }
        S::WouldRemove { ready } => eprintln!(
            "{spoke}: would remove the old Secret {file}: Ready through the ConfigMap: {}",
            ready.join(", ")
        ),
        S::Proposed {
            branch,
            pull_request,
            ready,
            ..
        } => eprintln!(
            "{spoke}: the removal of the old Secret {file} waits for review on {branch}: {} (Ready through the ConfigMap: {})",
            pull_request.url,
            ready.join(", ")
        ),
        S::Removed {
            commit,
            ready,
            problem,
        } => {
            eprintln!(
                "{spoke}: removed the old Secret {file} in {}: Ready through the ConfigMap: {}",
                commit.chars().take(12).collect::<String>(),
                ready.join(", ")
            );
            if let Some(p) = problem {
                eprintln!("{spoke}: {p}");
            }
        }
        S::Failed { why } => eprintln!("{spoke}: old Secret {file}: {why}"),
    }
}

/// The report's table (stdout of `rotate` without `-o`).
pub fn table(report: &TickReport) -> String {
    let mut rows = vec![
        [
            "SPOKE",
            "ACTION",
            "REASON",
            "CA",
            "CLIENT CERT UNTIL",
            "COMMIT",
        ]
        .map(String::from),
    ];
    for s in &report.spokes {
        let (action, commit) = match &s.outcome {
            Outcome::Healthy => ("healthy".to_string(), String::new()),
            Outcome::Unchanged => ("unchanged".into(), String::new()),
            Outcome::Rotated { commit } => ("rotated".into(), commit.chars().take(12).collect()),
            Outcome::WouldRotate => ("would rotate".into(), "(dry run)".into()),
            Outcome::NotRenewed => ("not renewed".into(), String::new()),
            Outcome::Failed(e) => (format!("FAILED at {}", e.stage()), String::new()),
            Outcome::Pending {
                commit,
                pull_request,
                change,
                ..
            } => {
                let what = match change {
                    Some(spokekeeper::forge::Action::Opened) => "pending (opened)",
                    Some(spokekeeper::forge::Action::Updated) => "pending (updated)",
                    None => "pending",
                };
                let at = commit
                    .as_deref()
                    .map(|c| c.chars().take(12).collect::<String>())
                    .into_iter()
                    .chain(pull_request.as_ref().map(|p| format!("#{}", p.number)));
                (what.into(), at.collect::<Vec<_>>().join(" "))
            }
        };
        rows.push([
            s.spoke.clone(),
            action,
            s.reason.as_ref().map(|r| r.to_string()).unwrap_or_default(),
            s.ca_sha256.map(|f| f.short()).unwrap_or_default(),
            s.client_not_after
                .map(rotate::state::rfc3339)
                .unwrap_or_default(),
            commit,
        ]);
    }
    super::table::render(&rows)
}
