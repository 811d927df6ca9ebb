//! `spokekeeper demo`, the README's main command: the whole loop, no setup.

use std::process::Command;

#[test]
fn demo_runs_the_whole_loop_and_cleans_up() {
    let out = Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
        .arg("demo")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rotated_initial = stdout
        .lines()
        .filter(|l| l.contains("rotated  initial credential"))
        .count();
    assert_eq!(rotated_initial, 3, "{stdout}");
    let log: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("== 7."))
        .skip(1)
        .take(5)
        .collect();
    assert!(
        log[0].ends_with(&log[0][8..])
            && log[0].contains("test: rotate kubeconfig: CA changed sha256:"),
        "{log:?}"
    );
    assert_eq!(
        log.iter()
            .filter(|l| l.contains("initial credential"))
            .count(),
        3,
        "{log:?}"
    );
    assert!(
        stdout.contains("unseals; it authenticates as system:admin"),
        "{stdout}"
    );
    // Every push was verified on the simulated hub: three first credentials, one rebuild.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let verified: Vec<&str> = stderr
        .lines()
        .filter(|l| l.ends_with(": hub: synced, ready"))
        .collect();
    assert_eq!(verified.len(), 4, "{stderr}");
    assert_eq!(verified[3], "test: hub: synced, ready", "{stderr}");
    let dir = stdout.lines().next().unwrap().rsplit(' ').next().unwrap();
    assert!(
        dir.starts_with("/tmp/") || dir.contains("spokekeeper-demo-"),
        "{dir}"
    );
    assert!(
        !std::path::Path::new(dir).exists(),
        "the demo removed {dir}"
    );
}
