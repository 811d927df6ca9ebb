//! What operators expect of the command line: completions and a man page generated from
//! the clap definitions, `--version` with the commit and build date, an example in every
//! `--help`, `unseal -o json`, and `rotate`'s progress only on a terminal.

mod support;

use std::path::Path;
use std::process::{Command, Output};

use clap::CommandFactory;
use serde_json::Value;
use spokekeeper::cli::Cli;
use support::NodeOptions;
use support::fleet::{Fleet, vectors};

fn spokekeeper(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn subcommands() -> Vec<String> {
    Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs `spokekeeper ARGS` under `script`, on a pseudo-terminal: what the terminal showed.
fn on_a_terminal(config: &Path, args: &str) -> String {
    let cmd = format!(
        "{} --config {} {args}",
        env!("CARGO_BIN_EXE_spokekeeper"),
        config.display()
    );
    let out = Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script (util-linux) runs");
    String::from_utf8(out.stdout).unwrap().replace("\r\n", "\n")
}

#[test]
fn unseal_prints_json_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app\n  namespace: ns\n  labels: {team: a}\ndata:\n  token: c2VjcmV0\n";
    let sealed = dir.path().join("sealed.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
        .args(["seal", "--cert"])
        .arg(vectors().join("key/cert.pem"))
        .stdin(std::fs::File::open(write(dir.path(), "s.yaml", secret)).unwrap())
        .output()
        .unwrap();
    std::fs::write(&sealed, stdout(&out)).unwrap();
    let key = vectors().join("key/sealed-secrets-key.yaml");
    let unseal = |format: &str| {
        spokekeeper(&[
            "-o",
            format,
            "unseal",
            "--recovery-key",
            key.to_str().unwrap(),
            sealed.to_str().unwrap(),
        ])
    };
    let json: Value = serde_json::from_str(&stdout(&unseal("json"))).unwrap();
    let yaml: Value = serde_saphyr::from_str(&stdout(&unseal("yaml"))).unwrap();
    assert_eq!(json, yaml);
    assert_eq!(json["data"]["token"], "c2VjcmV0");
    assert_eq!(json["metadata"]["labels"]["team"], "a");
    let table = unseal("table");
    assert!(!table.status.success());
    assert!(
        String::from_utf8_lossy(&table.stderr).contains("use -o yaml or -o json"),
        "{table:?}"
    );
}

#[test]
fn rotate_shows_progress_on_a_terminal_and_nothing_extra_elsewhere() {
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    // Not a terminal: the table on stdout, nothing on stderr.
    let (code, out, err) = fleet.rotate(&["--all"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(err, "");
    assert!(out.starts_with("SPOKE"), "{out}");

    // A terminal: the progress line, redrawn in place and cleared, then the table.
    let shown = on_a_terminal(&fleet.config, "rotate --all --force");
    for step in [
        "[0/2] starting",
        "spoke0: extract and validate",
        "spoke1: seal",
        "[2/2] fleet: commit",
        "[2/2] fleet: push",
    ] {
        assert!(shown.contains(step), "{step:?} not in {shown:?}");
    }
    let table = shown
        .rsplit("\r\x1b[2K")
        .next()
        .expect("the line is erased before the table");
    assert!(table.starts_with("SPOKE"), "{shown:?}");
    assert!(table.contains("rotated"), "{table}");

    // A terminal with -o json: nothing but the result.
    let json = on_a_terminal(&fleet.config, "-o json rotate --all");
    let report: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json:?}"));
    assert_eq!(report["spokes"].as_array().unwrap().len(), 2);
}
