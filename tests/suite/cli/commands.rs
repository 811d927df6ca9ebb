//! What operators expect of the command line: completions and a man page generated from
//! the clap definitions, `--version` with the commit and build date, an example in every
//! `--help`, `unseal -o json`, and `rotate`'s progress only on a terminal.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
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

/// The commands `spokekeeper --help` lists (clap's own `help` left out).
fn subcommands() -> Vec<String> {
    let help = stdout(&spokekeeper(&["--help"]));
    let names: Vec<String> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(String::from)
        .collect();
    assert!(names.contains(&"rotate".to_string()), "{help}");
    names
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
fn the_bash_completion_parses_and_completes_subcommands_and_formats() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("spokekeeper.bash");
    std::fs::write(&script, stdout(&spokekeeper(&["completion", "bash"]))).unwrap();
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(syntax.status.success(), "{syntax:?}");
    // What bash does on TAB: call the registered function with COMP_WORDS set.
    let complete = |line: &str| -> Vec<String> {
        let words: Vec<&str> = line.split(' ').collect();
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {}; complete -p spokekeeper; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{line}'; COMP_POINT={}; _spokekeeper spokekeeper '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                script.display(),
                words.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(" "),
                words.len() - 1,
                line.len(),
                words[words.len() - 1],
                words[words.len() - 2],
            ))
            .output()
            .unwrap();
        let text = stdout(&out);
        let mut lines = text.lines();
        let registered = lines.next().unwrap_or("");
        assert!(
            registered.contains("-F _spokekeeper") && registered.ends_with(" spokekeeper"),
            "{registered}"
        );
        lines.map(|l| l.trim().to_string()).collect()
    };
    let mut all = complete("spokekeeper ");
    all.sort();
    for sub in subcommands() {
        assert!(all.contains(&sub), "{sub} not offered: {all:?}");
    }
    assert_eq!(complete("spokekeeper rot"), ["rotate"]);
    let mut formats = complete("spokekeeper -o ");
    formats.sort();
    assert_eq!(formats, ["json", "table", "yaml"]);
}

#[test]
fn zsh_and_fish_completions_and_the_man_page_name_every_command() {
    let zsh = stdout(&spokekeeper(&["completion", "zsh"]));
    assert!(zsh.starts_with("#compdef spokekeeper"), "{zsh}");
    let fish = stdout(&spokekeeper(&["completion", "fish"]));
    let man = stdout(&spokekeeper(&["man"]));
    assert!(man.contains(".TH spokekeeper 1"), "{man}");
    for sub in subcommands() {
        assert!(zsh.contains(&format!("'{sub}:")), "zsh: {sub}");
        assert!(
            fish.contains(&format!("-a \"{sub}\"")),
            "fish: {sub}\n{fish}"
        );
        assert!(
            man.contains(&format!("spokekeeper\\-{sub}(1)")),
            "man: {sub}\n{man}"
        );
    }
    let bad = spokekeeper(&["completion", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("possible values: bash, zsh, fish"), "{err}");
}

#[test]
fn version_names_the_commit_and_the_build_date() {
    let version = stdout(&spokekeeper(&["--version"]));
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let head = String::from_utf8(head.stdout).unwrap().trim().to_string();
    let rest = version
        .trim()
        .strip_prefix(concat!(
            "spokekeeper ",
            env!("CARGO_PKG_VERSION"),
            " (commit "
        ))
        .unwrap_or_else(|| panic!("{version}"));
    let (commit, date) = rest
        .strip_suffix(')')
        .and_then(|r| r.split_once(", built "))
        .unwrap_or_else(|| panic!("{version}"));
    assert_eq!(commit.trim_end_matches("-dirty"), head, "{version}");
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let built = time::Date::parse(date, &format).unwrap_or_else(|e| panic!("{date}: {e}"));
    assert!(built <= time::OffsetDateTime::now_utc().date(), "{version}");
}

#[test]
fn every_commands_help_gives_an_example() {
    for sub in subcommands() {
        let help = stdout(&spokekeeper(&[&sub, "--help"]));
        let examples = help
            .split_once("\nExample")
            .map(|(_, e)| e)
            .unwrap_or_else(|| panic!("{sub} --help has no example:\n{help}"));
        assert!(
            examples.contains(&format!("spokekeeper {sub}"))
                || examples.contains(&format!(" {sub} ")),
            "{sub}'s example does not use it:\n{help}"
        );
    }
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
    crate::support::requires!(ROOT, SCRIPT);
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    support::trust::confirm_sealing_cert(&fleet.config);
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
        "spoke0: commit",
        // spoke1 commits only once it and spoke0 are through.
        "[2/2] spoke1: commit",
        "[2/2] fleet: push",
    ] {
        assert!(shown.contains(step), "{step:?} not in {shown:?}");
    }
    assert!(shown.contains("\r\x1b[2K"), "the line is erased: {shown:?}");
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
