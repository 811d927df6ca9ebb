//! Steps 2 to 8: the ticks, the rebuild, the hub's view, the revocation and the log.

use std::path::Path;
use std::time::Duration;

use tokio::runtime::Runtime;

use super::fleet::git;
use super::hub::{age_identities, controller_keys};
use super::sim::{SimSpoke, refused_now};
use super::{DemoError, FEDERATED, MINTED, REBUILT, SOPS, output, part, step};
use crate::cli::Format;
use crate::cli::rotate::print_report;
use spokekeeper::rotate::{self, Context, Options, TickReport};
use spokekeeper::seal::SealedSecret;
use spokekeeper::seal::sops;
use spokekeeper::secret::SecretBytes;

/// What the steps run against: the runtime, spokekeeper's context, the fleet repo's
/// remote, the hub controller's key and kustomize-controller's age identity.
pub(super) struct Tour<'a> {
    pub(super) hub: &'a Runtime,
    pub(super) ctx: &'a Context,
    pub(super) remote: &'a Path,
    pub(super) key_pem: &'a str,
    pub(super) age_key: &'a age::x25519::Identity,
    /// The hub's ServiceAccount issuer (the federated spoke trusts it).
    pub(super) issuer: &'a spokekeeper_lab::federation::Issuer,
}

impl Tour<'_> {
    pub(super) fn run(
        &self,
        spokes: &mut [SimSpoke],
        sim: &tokio::runtime::Handle,
    ) -> Result<(), DemoError> {
        step(
            2,
            "first tick: every spoke's kubeconfig extracted, validated live, sealed, committed, pushed, then verified on the hub (SealedSecret Synced, or dev's sops file decrypted by its Kustomization, a reconcile requested of every Kustomization and HelmRelease using it, each Ready)",
        );
        self.tick("first tick")?;
        self.sops_file(spokes[SOPS].name)?;
        if let Some(edge) = spokes.get(FEDERATED) {
            super::federated::show(self.remote, edge)?;
        }
        step(
            3,
            "second tick: nothing changed, so nothing is committed (and no extraction happens)",
        );
        let report = self.tick("second tick")?;
        if report
            .spokes
            .iter()
            .any(|s| s.outcome != rotate::Outcome::Healthy)
        {
            return Err(DemoError::NotHealthy);
        }
        self.rebuild(&mut spokes[REBUILT], sim)?;
        step(
            5,
            "third tick: the probe sees the serving certificate no longer chains to the recorded CA",
        );
        self.tick("third tick")?;
        step(
            6,
            "the hub's view: unseal the rebuilt spoke's new commit and prod's minted one with the controller's key, and call each spoke with it; present a hub token to the federated one",
        );
        self.hubs_view(spokes[REBUILT].name)?;
        if let Some(edge) = spokes.get(FEDERATED) {
            let who = self
                .hub
                .block_on(super::federated::presented(self.issuer, edge))?;
            say!(
                "   {}: the hub stores no credential; a token of Flux's kustomize-controller for its audience, as the hub issues it, authenticates as {who}",
                edge.name
            );
        }
        let minted = spokes[MINTED].name;
        let old_minted = self.hubs_view(minted)?;
        self.revoke(minted, &old_minted)?;
        step(
            8,
            "the fleet repo's log: one commit per rotation, each saying why",
        );
        crate::cli::out(&git(self.remote, &["log", "--format=%h %s", "main"])?);
        Ok(())
    }

    /// A tick over every spoke, its report printed; a failure or a credential the hub
    /// did not take stops the demo.
    fn tick(&self, label: &str) -> Result<TickReport, DemoError> {
        let all = Options {
            concurrency: 8,
            ..Options::default()
        };
        let report = self
            .hub
            .block_on(rotate::tick(self.ctx, &all))
            .map_err(part(format!("{label}: the fleet repo")))?;
        print_report(&report, Format::Table);
        if !report.ok() {
            return Err(DemoError::TickFailed {
                label: label.to_string(),
            });
        }
        if !report.hub_ok() {
            return Err(DemoError::HubRefused {
                label: label.to_string(),
            });
        }
        Ok(report)
    }

    /// The sops spoke's committed file: a Secret whose values are ENC[...] for the demo's
    /// age recipient, spokekeeper's annotations readable; it decrypts with the hub's
    /// identity (the plaintext dropped at once).
    fn sops_file(&self, name: &str) -> Result<(), DemoError> {
        let file = output(SOPS, name);
        let committed = git(self.remote, &["show", &format!("main:{file}")])?;
        let meta = sops::metadata(committed.as_bytes()).map_err(part(&file))?;
        let identities = age_identities(self.age_key)?;
        sops::decrypt(committed.as_bytes(), &identities)
            .map(drop)
            .map_err(part(&file))?;
        say!(
            "   {name} is sops: {file} is a Secret encrypted for age recipient {} (the hub's identity decrypts it), its annotations readable:",
            meta.recipients.join(", ")
        );
        for line in excerpt(&committed) {
            say!("   | {line}");
        }
        Ok(())
    }

    /// Step 4: a spoke reinstalled, its CA change printed.
    fn rebuild(
        &self,
        rebuilt: &mut SimSpoke,
        sim: &tokio::runtime::Handle,
    ) -> Result<(), DemoError> {
        step(
            4,
            &format!(
                "rebuild `{}`: new CAs and certificates, its API restarted",
                rebuilt.name
            ),
        );
        let old_ca = spokekeeper::certs::fingerprint(&rebuilt.pki.server_ca_der);
        rebuilt.rebuild(sim)?;
        say!(
            "   CA {} -> {}",
            old_ca,
            spokekeeper::certs::fingerprint(&rebuilt.pki.server_ca_der)
        );
        Ok(())
    }

    /// What the hub holds for `name`: the committed file unsealed with the controller's
    /// key, proven live against the spoke.
    fn hubs_view(&self, name: &str) -> Result<SecretBytes, DemoError> {
        let file = format!("fluxcd/{name}-kubeconfig-sealed.yaml");
        let committed = git(self.remote, &["show", &format!("main:{file}")])?;
        let keys = controller_keys(self.key_pem)?;
        let sealed = SealedSecret::parse(committed.as_bytes()).map_err(part(&file))?;
        let mut secret = sealed.unseal(&keys).map_err(part(&file))?;
        let kubeconfig = secret
            .data
            .remove("value")
            .ok_or_else(|| DemoError::NoValue { file: file.clone() })?;
        let live = self
            .hub
            .block_on(spokekeeper::spoke::check_live(
                &kubeconfig,
                Duration::from_secs(10),
            ))
            .map_err(part("the committed credential does not work"))?;
        say!(
            "   {file} unseals; it authenticates as {} (groups {}) against {} ({})",
            live.username,
            live.groups.join(","),
            live.server,
            live.git_version
        );
        Ok(kubeconfig)
    }

    /// Step 7: `spokekeeper revoke`, then the previous generation refused.
    fn revoke(&self, minted: &str, old_minted: &SecretBytes) -> Result<(), DemoError> {
        step(
            7,
            &format!(
                "`spokekeeper revoke {minted}`: the minted generation's ClusterRoleBinding deleted, the next generation minted, validated, sealed, pushed and verified"
            ),
        );
        let revoke = Options {
            revoke: true,
            only: vec![minted.to_string()],
            ..Options::default()
        };
        let report = self
            .hub
            .block_on(rotate::tick(self.ctx, &revoke))
            .map_err(part(format!("revoking {minted}: the fleet repo")))?;
        print_report(&report, Format::Table);
        if !report.ok() || !report.hub_ok() {
            return Err(DemoError::RevokeFailed {
                spoke: minted.to_string(),
            });
        }
        let refused = self.hub.block_on(refused_now(old_minted))?;
        say!("   the previous generation's credential, still valid as a certificate: {refused}");
        Ok(())
    }
}

/// A sops file's lines for the eye: each wrapped data key (an armored age file) folded
/// to one line, long lines cut.
fn excerpt(text: &str) -> Vec<String> {
    const WIDTH: usize = 100;
    let mut out = Vec::new();
    let mut armored = false;
    for line in text.lines() {
        if armored {
            armored = !line.contains("-----END AGE ENCRYPTED FILE-----");
            continue;
        }
        if let Some(key) = line.strip_suffix("enc: |") {
            armored = true;
            out.push(format!(
                "{key}enc: (the data key: an armored age file for the recipient below)"
            ));
            continue;
        }
        match line.char_indices().nth(WIDTH) {
            Some((at, _)) => out.push(format!("{}...", &line[..at])),
            None => out.push(line.to_string()),
        }
    }
    out
}
