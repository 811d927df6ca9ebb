//! `spokekeeper revoke SPOKE`: delete the committed minted generation's binding at once,
//! then mint, validate, seal, commit and push the next one through the normal pipeline.
//! A federated spoke's binding binds nobody at once, then its trust moves to the next
//! audience generation and the ConfigMap that names it is committed (docs/federated.md).
//! With `--drop-issuer` the federated spoke's file trusts no issuer at all, and stays so
//! until `rotate SPOKE --force`; nothing is committed.

use std::path::Path;
use std::process::ExitCode;

use super::rotate::{print_report, run_tick};
use super::{Chain, Format, fail};
use spokekeeper::config::{Config, CredentialMode};
use spokekeeper::rotate::{Options, Outcome, Reason, SpokeReport, TickReport};

#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    /// The spoke whose hub credential is revoked (credential.mode: minted or federated).
    pub spoke: String,
    /// Federated spokes: drop the hub's issuer from the spoke's AuthenticationConfiguration
    /// (a compromised hub can mint tokens for any audience). The spoke refuses every hub
    /// token and Flux fails against it until `spokekeeper rotate SPOKE --force`; no tick
    /// trusts the hub again by itself, and nothing is committed.
    #[arg(long)]
    pub drop_issuer: bool,
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
    if args.drop_issuer && spoke.credential.mode != CredentialMode::Federated {
        return fail(
            "revoke",
            format!(
                "--drop-issuer is for federated spokes (credential.mode: federated), and {} uses credential.mode: {}: it trusts no hub issuer to drop (revoke it without --drop-issuer)",
                spoke.name, spoke.credential.mode
            ),
        );
    }
    if spoke.credential.mode == CredentialMode::Extracted {
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
        drop_issuer: args.drop_issuer,
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
        if let Some(Reason::IssuerDropped {
            ref at,
            ref audience,
            ..
        }) = s.reason
        {
            text.push_str(&dropped(s, at, audience, policy));
            continue;
        }
        let Some(Reason::Revoked {
            generation,
            ref found,
            ref users,
        }) = s.reason
        else {
            continue;
        };
        let name = &s.spoke;
        if policy.mode == CredentialMode::Federated {
            text.push_str(&federated(report, s, generation, policy));
            continue;
        }
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

/// What a federated revoke did, and the commands that show a token for the revoked
/// audience is refused while one for the new audience works.
fn federated(
    report: &TickReport,
    s: &SpokeReport,
    revoked: u64,
    policy: &spokekeeper::config::CredentialPolicy,
) -> String {
    let name = &s.spoke;
    let mut text = String::new();
    for binding in &s.revoked {
        text.push_str(&format!(
            "{name}: ClusterRoleBinding {binding} bound nobody at once: every hub token was refused (403) until the spoke trusted the new audience\n"
        ));
    }
    let Some(audience) = s.credential.as_ref().and_then(|c| c.audience.clone()) else {
        return text;
    };
    let old = spokekeeper::federate::audience_at(&audience, revoked);
    match &s.outcome {
        Outcome::Rotated { commit } => text.push_str(&format!(
            "{name}: the spoke trusts hub tokens for audience {audience} only; a token for {old} is refused (401); ConfigMap with the new audiences committed ({}{})\n",
            commit.chars().take(12).collect::<String>(),
            if report.pushed { ", pushed" } else { ", not pushed" }
        )),
        Outcome::Failed(_) => text.push_str(&format!(
            "{name}: no new ConfigMap was committed: the hub cannot reach {name} until a rotation succeeds \
             (fix the error above, then spokekeeper rotate {name} --force: it goes on at the binding's audience generation, never back to {old})\n"
        )),
        _ => {}
    }
    text.push_str(&curl(
        policy,
        &audience,
        &old,
        &format!("401 Unauthorized; with --audience '{audience}' it answers"),
    ));
    text
}

/// The command that shows, from the hub, what the spoke says of a token of the first
/// accepted account for `refused` (`server_of`: an audience of the spoke, generation 0 is
/// its API server URL).
fn curl(
    policy: &spokekeeper::config::CredentialPolicy,
    server_of: &str,
    refused: &str,
    says: &str,
) -> String {
    let account = policy
        .federated
        .as_ref()
        .and_then(|f| f.service_accounts.first())
        .map_or(
            "flux-system/kustomize-controller".to_string(),
            ToString::to_string,
        );
    let (namespace, sa) = account.split_once('/').unwrap_or(("flux-system", &account));
    let server = spokekeeper::federate::audience_at(server_of, 0);
    format!(
        "check from the hub (SPOKE_CA: the ConfigMap's ca.crt): curl --cacert SPOKE_CA -H \"Authorization: Bearer $(kubectl create token {sa} -n {namespace} --audience '{refused}')\" {server}/version ({says})\n"
    )
}

/// What `--drop-issuer` did, and the commands that show a hub token is refused and how
/// to trust the hub again.
fn dropped(
    s: &SpokeReport,
    at: &str,
    audience: &str,
    policy: &spokekeeper::config::CredentialPolicy,
) -> String {
    let name = &s.spoke;
    let mut text = String::new();
    for binding in &s.revoked {
        text.push_str(&format!(
            "{name}: ClusterRoleBinding {binding} binds nobody: every hub token was refused (403) at once\n"
        ));
    }
    match &s.outcome {
        Outcome::Failed(_) => text.push_str(&format!(
            "{name}: the drop did not finish (the error above); fix it and run spokekeeper revoke {name} --drop-issuer again\n"
        )),
        _ => text.push_str(&format!(
            "{name}: the spoke's AuthenticationConfiguration trusts no issuer since {at} (its first line says so); \
             a fresh hub token for {audience} was refused (401). Nothing was committed: Flux fails against {name} \
             until it trusts the hub again. No tick writes the trust back by itself (each fails naming the drop); \
             once the hub is safe (its service-account signing key rotated): spokekeeper rotate {name} --force\n"
        )),
    }
    text.push_str(&curl(policy, audience, audience, "401 Unauthorized"));
    text
}
