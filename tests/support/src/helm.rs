//! A real helm (scripts/install-helm) on the chart in deploy/helm, with no user or
//! repository state from the machine.

use std::process::Command;

pub const CHART: &str = "deploy/helm/spokekeeper";

/// `helm ARGS` in the crate root, its cache, config and data homes under the temp dir:
/// only the chart on disk counts.
pub fn helm_command(args: &[&str]) -> Command {
    let mut command = Command::new(crate::requires::HELM_BIN.path());
    let homes = std::env::temp_dir().join("spokekeeper-helm");
    command
        .args(args)
        .current_dir(crate::repo_root())
        .env("HELM_CACHE_HOME", homes.join("cache"))
        .env("HELM_CONFIG_HOME", homes.join("config"))
        .env("HELM_DATA_HOME", homes.join("data"));
    command
}

/// `helm ARGS`'s stdout; panics with all it printed when it fails.
pub fn run_helm(args: &[&str]) -> String {
    let out = helm_command(args).output().expect("helm runs");
    assert!(
        out.status.success(),
        "helm {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("helm prints UTF-8")
}
