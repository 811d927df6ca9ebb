//! The binary's own parser on what the deployments run (tests/suite/deploy/ renders and
//! checks the files themselves), and `rotate`'s table on hostile values (the tick report
//! of tests/suite/decide/annotations.rs).

use std::path::Path;

use clap::Parser;
use proptest::prelude::*;
use spokekeeper::fingerprint::Fingerprint;
use spokekeeper::rotate::{Outcome, Reason, SpokeError, SpokeReport, TickReport};

use super::{Cli, Command};

const CONFIG: &str = "/etc/spokekeeper/spokekeeper.yaml";

fn parse(args: &[&str]) -> Cli {
    Cli::try_parse_from(std::iter::once("spokekeeper").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("spokekeeper does not accept {args:?}: {e}"))
}

fn repo_file(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A systemd unit's ExecStart=, without the binary's path.
fn exec_start(unit: &str) -> Cli {
    let text = repo_file(&format!("deploy/systemd/{unit}"));
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ExecStart="))
        .collect();
    assert_eq!(lines.len(), 1, "{unit}: {lines:?}");
    let words: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(words[0], "/usr/local/bin/spokekeeper", "{unit}");
    let cli = parse(&words[1..]);
    assert_eq!(cli.config, Path::new(CONFIG), "{unit}");
    cli
}

#[test]
fn systemd_units_run_the_daemon_and_a_rotation_of_every_spoke() {
    assert!(matches!(
        exec_start("spokekeeper.service").command,
        Command::Run(_)
    ));
    match exec_start("spokekeeper-rotate.service").command {
        Command::Rotate(r) => assert!(r.all && !r.force && !r.dry_run && r.spokes.is_empty()),
        other => panic!("the oneshot runs {other:?}"),
    }
}

#[test]
fn the_images_cmd_runs_the_daemon() {
    let text = repo_file("deploy/Dockerfile");
    let cmd = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("a CMD in deploy/Dockerfile");
    let args: Vec<String> =
        serde_json::from_str(cmd).unwrap_or_else(|e| panic!("CMD is not exec form: {e}"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cli = parse(&args);
    assert_eq!(cli.config, Path::new(CONFIG));
    match cli.command {
        Command::Run(run) => assert!(!run.leader_elect),
        other => panic!("the image runs {other:?}"),
    }
}

/// What the Helm chart's container runs: tests/suite/deploy/ asserts that the chart
/// renders exactly these arguments (`CHART_ARGS_LEADER`, `CHART_ARGS_SINGLE` there).
#[test]
fn the_charts_arguments_run_the_daemon_with_and_without_leader_election() {
    let cli = parse(&[
        "--config",
        CONFIG,
        "run",
        "--leader-elect",
        "--lease-name",
        "spokekeeper",
    ]);
    assert_eq!(cli.config, Path::new(CONFIG));
    match cli.command {
        Command::Run(run) => {
            assert!(run.leader_elect);
            assert_eq!(run.lease_name, "spokekeeper");
        }
        other => panic!("the container runs {other:?}"),
    }
    match parse(&["--config", CONFIG, "run"]).command {
        Command::Run(run) => assert!(!run.leader_elect),
        other => panic!("the container runs {other:?}"),
    }
}

fn values() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        Just(String::new()),
        Just("sha256:aéééééé".to_string()),
        "sha256:[0-9a-fé]{0,70}",
        "[ -~]{0,80}",
        (any::<char>(), 0..300_000usize).prop_map(|(c, n)| c.to_string().repeat(n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A value read back from the fleet repo, in a reason and a failure, through the table.
    /// decide names an unreadable annotation bounded and on one line (annotations.rs).
    #[test]
    fn rotate_table_prints_any_recorded_value(raw in values()) {
        let mut report = SpokeReport::new("dev", Outcome::WouldRotate);
        report.reason = Some(Reason::Unreadable {
            detail: spokekeeper::text::one_line(&raw, 300),
        });
        let raw_ca = Fingerprint::parse(&raw).ok();
        report.ca_sha256 = raw_ca;
        let mut failed = SpokeReport::new(
            "prod",
            Outcome::Failed(SpokeError::Unreachable(
                spokekeeper::spoke::ProbeError::Unreachable {
                    server: raw.clone(),
                    reason: raw.clone(),
                },
            )),
        );
        failed.reason = Some(Reason::CaChanged {
            old: raw_ca.unwrap_or_else(|| Fingerprint::of(b"the recorded CA")),
        });
        let table = super::rotate::table(&TickReport::of(vec![report, failed]));
        prop_assert!(table.starts_with("SPOKE"), "{}", table);
        let rows: Vec<&str> = table.lines().skip(1).collect();
        prop_assert!(rows.iter().any(|r| r.starts_with("dev") && r.contains("would rotate")));
        prop_assert!(rows.iter().any(|r| r.starts_with("prod") && r.contains("FAILED at")));
    }
}
