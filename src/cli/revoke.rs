//! `spokekeeper revoke SPOKE`: delete the committed minted generation's binding at once,
//! then mint, validate, seal, commit and push the next one through the normal pipeline.

use std::path::Path;
use std::process::ExitCode;

use super::rotate::{print_report, run_tick};
use super::{Chain, Format, fail};
use spokekeeper::config::{Config, CredentialMode};
use spokekeeper::rotate::{Options, Outcome, Reason, TickReport};

#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    /// The spoke whose hub credential is revoked (credential.mode: minted).
    pub spoke: String,
}

pub(super) fn run(args: &RevokeArgs, config_path: &Path, format: Option<Format>) -> ExitCode {
    let config = match Config::load(config_path) {
        Ok(c) => c,
        Err(e) => return fail("revoke", Chain(&e)),
    };
    let Some(spoke) = config.spokes.iter().find(|s| s.name == args.spoke) else {
        return fail(
            "revoke",
            format!(
                "no spoke named {:?} in {}",
                args.spoke,
                config_path.display()
            ),
        );
    };
    if spoke.credential.mode != CredentialMode::Minted {
        return fail(
            "revoke",
            format!(
                "{} uses credential.mode: extracted (the node's admin kubeconfig, which cannot be revoked): set credential.mode: minted and rotate",
                spoke.name
            ),
        );
    }
    let policy = spoke.credential.clone();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => return fail("revoke", format!("cannot start the runtime: {e}")),
    };
    let opts = Options {
        revoke: true,
        only: vec![args.spoke.clone()],
        concurrency: 1,
        ..Options::default()
    };
    let report = match runtime.block_on(run_tick(config, &opts)) {
        Ok(r) => r,
        Err(e) => return fail("revoke", Chain(&e)),
    };
    let format = format.unwrap_or(Format::Table);
    print_report(&report, format);
    if format == Format::Table {
        eprint!("{}", summary(&report, &policy));
    }
    if report.ok() && report.hub_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What was done, and the command that shows the revoked user is refused.
fn summary(report: &TickReport, policy: &spokekeeper::config::CredentialPolicy) -> String {
    let mut text = String::new();
    for s in &report.spokes {
        let Some(Reason::Revoked {
            generation,
            ref found,
            ref users,
        }) = s.reason
        else {
            continue;
        };
        let name = &s.spoke;
        if s.revoked.is_empty() {
            text.push_str(&format!(
                "{name}: no ClusterRoleBinding of spokekeeper's was on the spoke: generation {generation} had no access\n"
            ));
        }
        for binding in &s.revoked {
            text.push_str(&format!(
                "{name}: deleted ClusterRoleBinding {binding}: its user is refused from now on\n"
            ));
        }
        if generation > 0 && found.as_slice() != [generation] {
            text.push_str(&format!(
                "{name}: warning: the fleet repo's annotation spokekeeper.io/credential-generation says {generation}, \
                 but the spoke bound generations {found:?}: was the annotation changed? All were deleted\n"
            ));
        }
        match (&s.outcome, &s.credential) {
            (Outcome::Rotated { commit }, Some(c)) => text.push_str(&format!(
                "{name}: minted generation {} for {} (commit {}{})\n",
                c.generation.unwrap_or_default(),
                c.user.as_deref().unwrap_or_default(),
                commit.chars().take(12).collect::<String>(),
                if report.pushed { ", pushed" } else { ", not pushed" }
            )),
            (Outcome::Failed(_), _) => text.push_str(&format!(
                "{name}: no new credential was committed: the hub cannot reach {name} until a rotation succeeds \
                 (fix the error above, then spokekeeper rotate {name} --force)\n"
            )),
            _ => {}
        }
        let bindings = if s.revoked.is_empty() {
            format!(
                "-l app.kubernetes.io/managed-by=spokekeeper,spokekeeper.io/hub={},spokekeeper.io/spoke={name}",
                policy.hub_id
            )
        } else {
            s.revoked.join(" ")
        };
        text.push_str(&format!(
            "check on the spoke with its admin kubeconfig: kubectl get clusterrolebinding {bindings} (NotFound){}\n",
            users
                .iter()
                .map(|u| format!(", kubectl auth can-i '*' '*' --as {u} (no)"))
                .collect::<String>()
        ));
    }
    text
}
