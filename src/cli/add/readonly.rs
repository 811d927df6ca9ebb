//! `add` where spokekeeper.yaml cannot be written (the Helm chart mounts it from a
//! ConfigMap): add prints the entry to put into the chart's `config.spokes` and commits
//! nothing until the configuration holds it; then it onboards the spoke as configured.

use std::path::Path;

use super::{AddArgs, AddError};
use spokekeeper::config::{Config, SpokeConfig};

/// Whether add can write `path`: its mode has a write bit and it opens for writing (a
/// read-only mount refuses that even to root).
pub(super) fn writable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.permissions().readonly())
        && std::fs::OpenOptions::new().append(true).open(path).is_ok()
}

/// The configuration as it is, once it holds the spoke; until then the entry add would
/// have appended is printed, and nothing is done.
pub(super) fn configured(args: &AddArgs, config_path: &Path) -> Result<Config, AddError> {
    let config = Config::load(config_path)?;
    if let Some(spoke) = config.spokes.iter().find(|s| s.name == args.name) {
        let configured = &spoke.secret.namespace;
        if let Some(given) = args.namespace.as_ref().filter(|n| *n != configured) {
            return Err(AddError::OtherNamespace {
                given: given.clone(),
                configured: configured.clone(),
                file: config_path.to_path_buf(),
            });
        }
        flags_agree(args, spoke, config_path)?;
        super::checked(args, configured)?;
        return Ok(config);
    }
    // The flags checked as for a writable file, against the file as it is.
    super::edit(args, config_path)?;
    let entry = spokekeeper::config::spoke_entry(&super::new_spoke(args));
    eprint!(
        "{} cannot be written: add this entry to the Helm chart's config.spokes (or to the file's spokes:), roll it out, and run add again:\n\n{entry}\n",
        config_path.display()
    );
    Err(AddError::ReadOnly {
        spoke: args.name.clone(),
        file: config_path.to_path_buf(),
    })
}

/// The configuration decides a configured spoke's mode and issuer: a flag naming another
/// is refused, before any rotation.
fn flags_agree(args: &AddArgs, spoke: &SpokeConfig, file: &Path) -> Result<(), AddError> {
    if let Some(given) = args.credential.filter(|m| *m != spoke.credential.mode) {
        return Err(AddError::OtherCredential {
            spoke: spoke.name.clone(),
            given,
            configured: spoke.credential.mode,
            file: file.to_path_buf(),
        });
    }
    let issuer = spoke
        .credential
        .federated
        .as_ref()
        .map(|f| f.issuer.as_str());
    if let (Some(given), Some(set)) = (args.issuer.as_deref(), issuer)
        && given != set
    {
        return Err(AddError::OtherIssuer {
            spoke: spoke.name.clone(),
            given: given.to_string(),
            configured: set.to_string(),
            file: file.to_path_buf(),
        });
    }
    if !args.servers.is_empty() && args.servers != spoke.servers {
        return Err(AddError::OtherServers {
            spoke: spoke.name.clone(),
            given: args.servers.clone(),
            configured: spoke.servers.clone(),
            file: file.to_path_buf(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> AddArgs {
        use clap::Parser;
        let argv = ["spokekeeper", "add", "edge-1", "--address", "10.0.0.9"];
        let argv = argv.into_iter().chain(extra.iter().copied());
        match super::super::super::Cli::parse_from(argv).command {
            super::super::super::Command::Add(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_flag_naming_another_mode_or_issuer_than_the_configured_ones_is_refused() {
        let text = "repo: {path: f}\nsealing: {cert: c.pem}\nhub: {}\ncredential: {federated: {issuer: \"https://hub.example:6443\"}}\nspokes:\n  - {name: edge-1, address: 10.0.0.9, credential: {mode: federated}}\n";
        let config = Config::parse(text, "spokekeeper.yaml", Path::new("/x")).unwrap();
        let spoke = &config.spokes[0];
        let file = Path::new("/x/spokekeeper.yaml");
        let agree = |extra: &[&str]| {
            flags_agree(&args(&[&["--distro", "k3s"], extra].concat()), spoke, file)
                .map_err(|e| e.to_string())
        };
        assert!(agree(&[]).is_ok());
        let same = [
            "--credential",
            "federated",
            "--issuer",
            "https://hub.example:6443",
        ];
        assert!(agree(&same).is_ok());
        let e = agree(&["--credential", "minted"]).unwrap_err();
        assert!(
            e.starts_with("--credential minted is not edge-1's credential.mode federated in /x/spokekeeper.yaml"),
            "{e}"
        );
        let e = agree(&["--issuer", "https://other.example"]).unwrap_err();
        assert!(
            e.starts_with("--issuer \"https://other.example\" is not edge-1's credential.federated.issuer \"https://hub.example:6443\""),
            "{e}"
        );
        let e = agree(&["--server", "10.0.0.10"]).unwrap_err();
        assert!(
            e.starts_with("--server [\"10.0.0.10\"] is not edge-1's servers [] in /x/spokekeeper.yaml, which add cannot write"),
            "{e}"
        );
    }
}
