//! Outside Kubernetes: the systemd units (systemd-analyze verify, then run) and the Dockerfile.

use super::*;

/// `Key=Value` lines by section; repeated keys keep every value.
fn ini(text: &str, what: &str) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut section = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.to_string());
            out.entry(name.to_string()).or_default();
            continue;
        }
        let s = section
            .as_ref()
            .unwrap_or_else(|| panic!("{what}:{}: outside a section", n + 1));
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{what}:{}: not Key=Value: {line}", n + 1));
        assert!(
            !k.trim().is_empty() && k.trim().chars().all(|c| c.is_ascii_alphanumeric()),
            "{what}:{}: bad key {k:?}",
            n + 1
        );
        out.get_mut(s)
            .unwrap()
            .entry(k.trim().into())
            .or_default()
            .push(v.trim().into());
    }
    out
}

fn unit(name: &str) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let path = root().join("deploy/systemd").join(name);
    ini(&std::fs::read_to_string(&path).unwrap(), name)
}

/// A unit's ExecStart= after the binary: the arguments and the subcommand they run (the
/// binary's unit tests parse the same lines into what they mean).
fn exec_start(u: &BTreeMap<String, BTreeMap<String, Vec<String>>>) -> (Vec<String>, String) {
    let lines = &u["Service"]["ExecStart"];
    assert_eq!(lines.len(), 1);
    let words: Vec<String> = lines[0].split_whitespace().map(String::from).collect();
    assert_eq!(words[0], "/usr/local/bin/spokekeeper");
    let args = words[1..].to_vec();
    assert_eq!(args[..2], ["--config", "/etc/spokekeeper/spokekeeper.yaml"]);
    let sub = subcommand(&args);
    (args, sub)
}

/// systemd's own check of the units (no running systemd needed), with the binary path
/// pointed at the built spokekeeper, since verify insists that ExecStart= exists.
/// Any warning (an unknown key, a value it cannot parse) fails, not just errors.
fn systemd_analyze_verify(names: &[&str]) {
    let analyze = Path::new("/usr/bin/systemd-analyze");
    assert!(
        analyze.exists(),
        "systemd-analyze is needed at {}: apt-get install systemd (scripts/test does)",
        analyze.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for name in names {
        let text = std::fs::read_to_string(root().join("deploy/systemd").join(name)).unwrap();
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            text.replace(
                "/usr/local/bin/spokekeeper",
                env!("CARGO_BIN_EXE_spokekeeper"),
            ),
        )
        .unwrap();
        paths.push(path);
    }
    let out = Command::new(analyze)
        .args(["verify", "--man=no"])
        .args(&paths)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify {names:?}: {}\n{stderr}",
        out.status
    );
}

#[test]
fn systemd_units_verify_and_run_the_daemon_and_a_timed_rotation() {
    crate::support::requires!(SYSTEMD_ANALYZE);
    systemd_analyze_verify(&[
        "spokekeeper.service",
        "spokekeeper-rotate.service",
        "spokekeeper-rotate.timer",
    ]);
    let daemon = unit("spokekeeper.service");
    assert_eq!(
        daemon.keys().map(String::as_str).collect::<Vec<_>>(),
        ["Install", "Service", "Unit"]
    );
    assert_eq!(exec_start(&daemon).1, "run");
    let svc = &daemon["Service"];
    assert_eq!(svc["User"], ["spokekeeper"]);
    assert_eq!(
        svc["ExecReload"],
        ["/bin/kill -HUP $MAINPID"],
        "SIGHUP reloads the config"
    );
    assert_eq!(svc["NoNewPrivileges"], ["yes"]);
    assert_eq!(svc["ProtectSystem"], ["strict"]);
    assert_eq!(svc["StateDirectory"], ["spokekeeper"]);

    let oneshot = unit("spokekeeper-rotate.service");
    assert_eq!(oneshot["Service"]["Type"], ["oneshot"]);
    let (args, sub) = exec_start(&oneshot);
    assert_eq!(sub, "rotate");
    assert_eq!(
        args[2..],
        ["rotate", "--all"],
        "every spoke, not forced, not a dry run"
    );
    assert!(
        !oneshot.contains_key("Install"),
        "started by the timer only"
    );

    let timer = unit("spokekeeper-rotate.timer");
    assert_eq!(
        timer.keys().map(String::as_str).collect::<Vec<_>>(),
        ["Install", "Timer", "Unit"]
    );
    assert_eq!(timer["Timer"]["Unit"], ["spokekeeper-rotate.service"]);
    assert_eq!(timer["Timer"]["OnCalendar"].len(), 1);
    assert_eq!(timer["Install"]["WantedBy"], ["timers.target"]);
}

/// Dockerfile instructions with their arguments, continuation lines joined.
fn dockerfile() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if current.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(part) = t.strip_suffix('\\') {
            current.push_str(part);
            current.push(' ');
            continue;
        }
        current.push_str(t);
        let (op, args) = current.split_once(' ').unwrap();
        out.push((op.to_uppercase(), args.trim().to_string()));
        current.clear();
    }
    out
}

/// The Dockerfile's text only: building the image needs a Docker daemon and the base
/// images from a registry, and the test machine has neither.
#[test]
fn dockerfile_text_has_build_stages_and_a_non_root_runtime_with_ssh_and_git() {
    let steps = dockerfile();
    let stages: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, (op, _))| op == "FROM")
        .map(|(i, _)| i)
        .collect();
    assert!(stages.len() >= 2, "multi-stage");
    let build_name = steps[stages[0]]
        .1
        .split_whitespace()
        .last()
        .unwrap()
        .to_string();
    // The build toolchain is the one Cargo.toml promises to support.
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let rust_version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"');
    let image = steps[stages[0]].1.split_whitespace().next().unwrap();
    assert!(
        image.starts_with(&format!("rust:{rust_version}-")),
        "build image {image}: use rust:{rust_version} (Cargo.toml's rust-version)"
    );
    let runtime = &steps[*stages.last().unwrap()..];
    // The build stage copies build.rs: cargo needs it for --version's commit and date.
    assert!(
        steps[..*stages.last().unwrap()]
            .iter()
            .any(|(op, a)| op == "COPY" && a.split_whitespace().any(|w| w == "build.rs")),
        "the build stage does not COPY build.rs"
    );
    // The build stage copies only what exists here.
    for (op, args) in &steps[..*stages.last().unwrap()] {
        if op == "COPY" {
            let words: Vec<&str> = args.split_whitespace().collect();
            for src in &words[..words.len() - 1] {
                assert!(
                    root().join(src).exists(),
                    "COPY {src}: not in the repository"
                );
            }
        }
    }
    let run: String = runtime
        .iter()
        .filter(|(op, _)| op == "RUN")
        .map(|(_, a)| a.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    for pkg in ["openssh-client", "git", "ca-certificates"] {
        assert!(
            run.split_whitespace().any(|w| w == pkg),
            "the runtime installs {pkg}"
        );
    }
    assert!(
        runtime.iter().any(|(op, a)| op == "COPY"
            && a.starts_with(&format!("--from={build_name} "))
            && a.ends_with("/usr/local/bin/spokekeeper")),
        "the binary comes from the build stage"
    );
    let user = runtime
        .iter()
        .rev()
        .find(|(op, _)| op == "USER")
        .map(|(_, a)| a.as_str())
        .expect("a USER in the runtime stage");
    let uid = user.split(':').next().unwrap();
    assert!(!matches!(uid, "root" | "0"), "USER {user}");
    assert_eq!(uid, "65532", "the uid the chart runs as");
    assert!(
        run.contains("--uid 65532"),
        "a passwd entry for the uid (ssh needs one)"
    );
    let json = |op: &str| -> Vec<String> {
        let (_, a) = runtime.iter().rev().find(|(o, _)| o == op).unwrap();
        serde_json::from_str(a).unwrap_or_else(|e| panic!("{op} is not exec form: {e}"))
    };
    let entry = json("ENTRYPOINT");
    assert_eq!(
        entry.last().map(String::as_str),
        Some("/usr/local/bin/spokekeeper")
    );
    assert_eq!(subcommand(&json("CMD")), "run");
}
