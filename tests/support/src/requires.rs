//! What a test needs beyond cargo, declared at its top (cargo's model: `requires` at the
//! test): `requires!(ROOT, REAL_STACK)`. Under `scripts/test --quick` (SPOKEKEEPER_QUICK=1:
//! no root, apt, Go or downloaded tools) a test whose need is missing says on stderr that it
//! is skipped and why, and returns; anywhere else it fails there, naming the need and the
//! fix. The fixtures find their tools through the same [`Tool`]s.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

/// A program or directory a test runs: `$env` when set, else `default` (relative: under
/// the repository root); `marker`, when given, must be inside it.
#[derive(Clone, Copy, Debug)]
pub struct Tool {
    pub env: Option<&'static str>,
    pub default: &'static str,
    pub marker: Option<&'static str>,
    /// What it is and what provides it, for the message when it is missing.
    pub fix: &'static str,
}

impl Tool {
    /// Its path, or what is missing and the fix.
    pub fn find(&self) -> Result<PathBuf, String> {
        let path = self
            .env
            .and_then(std::env::var_os)
            .map_or_else(|| crate::repo_root().join(self.default), PathBuf::from);
        let probe = self.marker.map_or_else(|| path.clone(), |m| path.join(m));
        if probe.exists() {
            Ok(path)
        } else {
            let env = self
                .env
                .map(|e| format!(", or set {e}"))
                .unwrap_or_default();
            Err(format!(
                "{} ({} is missing{env})",
                self.fix,
                probe.display()
            ))
        }
    }

    /// Its path; panics with the fix when it is missing.
    pub fn path(&self) -> PathBuf {
        self.find().unwrap_or_else(|e| panic!("{e}"))
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Need {
    /// Root: the lab's sshd nodes, useradd, sudoers, network namespaces.
    Root,
    Tool(Tool),
}

pub const ROOT: Need = Need::Root;
pub const REAL_STACK: Need = Need::Tool(REAL_STACK_DIR);
pub const HELM: Need = Need::Tool(HELM_BIN);
pub const PYTHON: Need = Need::Tool(PYTHON_BIN);
pub const PROMTOOL: Need = Need::Tool(PROMTOOL_BIN);
pub const PROMETHEUS: Need = Need::Tool(PROMETHEUS_BIN);
pub const ALERTMANAGER: Need = Need::Tool(ALERTMANAGER_BIN);
pub const SCRIPT: Need = apt("/usr/bin/script", "script, from util-linux (apt)");
pub const GNU_TIME: Need = apt("/usr/bin/time", "GNU time (apt: time)");
pub const SYSTEMD_ANALYZE: Need = apt("/usr/bin/systemd-analyze", "systemd-analyze (apt: systemd)");

/// The real components `scripts/build-realstack` builds (Go), with its stamp.
pub const REAL_STACK_DIR: Tool = Tool {
    env: Some("SPOKEKEEPER_REALSTACK"),
    default: ".tools/realstack",
    marker: Some("stamp"),
    fix: "the real-stack components: run scripts/build-realstack (scripts/test does)",
};
pub const HELM_BIN: Tool = Tool {
    env: Some("SPOKEKEEPER_TEST_HELM"),
    default: ".tools/bin/helm",
    marker: None,
    fix: "a real helm: run scripts/test (it calls scripts/install-helm)",
};
pub const PYTHON_BIN: Tool = Tool {
    env: Some("SPOKEKEEPER_TEST_PYTHON"),
    default: ".venv/bin/python",
    marker: None,
    fix: "kubesealpy: run scripts/test, which creates .venv",
};
pub const PROMTOOL_BIN: Tool = debian(
    "SPOKEKEEPER_TEST_PROMTOOL",
    "/usr/bin/promtool",
    "promtool (apt: prometheus)",
);
pub const PROMETHEUS_BIN: Tool = debian(
    "SPOKEKEEPER_TEST_PROMETHEUS",
    "/usr/bin/prometheus",
    "prometheus (apt: prometheus)",
);
pub const ALERTMANAGER_BIN: Tool = debian(
    "SPOKEKEEPER_TEST_ALERTMANAGER",
    "/usr/bin/prometheus-alertmanager",
    "Alertmanager (apt: prometheus-alertmanager)",
);

const fn debian(env: &'static str, default: &'static str, fix: &'static str) -> Tool {
    Tool {
        env: Some(env),
        default,
        marker: None,
        fix,
    }
}

const fn apt(path: &'static str, fix: &'static str) -> Need {
    Need::Tool(Tool {
        env: None,
        default: path,
        marker: None,
        fix,
    })
}

impl Need {
    /// What is missing here and the fix; None when the need is met.
    pub fn missing(&self) -> Option<String> {
        match self {
            Need::Root => (!rustix::process::geteuid().is_root()).then(|| {
                "root (the lab runs sshd, useradd and sudoers): run the tests as root (CI does)"
                    .to_string()
            }),
            Need::Tool(tool) => tool.find().err(),
        }
    }
}

/// Whether the test returns now: under `--quick`, when a need is missing (said on stderr).
/// Anywhere else a missing need fails the test.
pub fn skip(needs: &[Need]) -> bool {
    let missing: Vec<String> = needs.iter().filter_map(Need::missing).collect();
    if missing.is_empty() {
        return false;
    }
    let why = missing.join("; ");
    let quick = std::env::var_os("SPOKEKEEPER_QUICK").is_some_and(|v| v == "1");
    assert!(quick, "this test needs {why}");
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    // Once a test: a property test asks for each case.
    static SAID: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    if SAID
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(test.to_string())
    {
        // Straight to the terminal: libtest keeps what a passing test print!s to itself.
        let _ = writeln!(std::io::stderr(), "skipped {test}: it needs {why}");
    }
    true
}

/// `requires!(ROOT, REAL_STACK, ...)` at the top of a test, `requires!(proptest: ...)` in
/// a property's body (it returns `Ok(())`): see the module.
#[macro_export]
macro_rules! requires {
    (proptest: $($need:ident),+ $(,)?) => {
        if $crate::requires::skip(&[$($crate::requires::$need),+]) {
            return Ok(());
        }
    };
    ($($need:ident),+ $(,)?) => {
        if $crate::requires::skip(&[$($crate::requires::$need),+]) {
            return;
        }
    };
}
