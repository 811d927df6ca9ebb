//! Records what `spokekeeper --version` prints besides the package version: the git
//! commit (`-dirty` when the tree had changes; $SPOKEKEEPER_GIT_COMMIT when set, e.g. by
//! the Dockerfile; "unknown" outside git, e.g. a source tarball) and the build date (UTC, date only; SOURCE_DATE_EPOCH for reproducible builds).

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rustc-env=SPOKEKEEPER_GIT_COMMIT={}", commit());
    println!("cargo:rustc-env=SPOKEKEEPER_BUILD_DATE={}", build_date());
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}

fn commit() -> String {
    // Given by the builder (the Dockerfile's build argument): no .git there.
    println!("cargo:rerun-if-env-changed=SPOKEKEEPER_GIT_COMMIT");
    if let Ok(given) = std::env::var("SPOKEKEEPER_GIT_COMMIT")
        && !given.trim().is_empty()
    {
        return given.trim().to_string();
    }
    let Some(sha) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    // Rerun when HEAD moves (a commit, a checkout) without rebuilding on every edit.
    // `--git-path` resolves worktrees and the common directory for us.
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(p) = git(&["rev-parse", "--git-path", &head])
    {
        println!("cargo:rerun-if-changed={p}");
    }
    // The index changes on `git add` and `git commit`: the dirty mark follows them.
    if let Some(p) = git(&["rev-parse", "--git-path", "index"]) {
        println!("cargo:rerun-if-changed={p}");
    }
    // No optional locks: a status that refreshed the index would rerun this script.
    let dirty = git(&[
        "--no-optional-locks",
        "status",
        "--porcelain",
        "--untracked-files=no",
    ])
    .is_some_and(|s| !s.is_empty());
    if dirty { format!("{sha}-dirty") } else { sha }
}

fn build_date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
