//! `add` where spokekeeper.yaml cannot be written (the Helm chart mounts it from a
//! ConfigMap): add prints the entry to put into the chart's `config.spokes` and commits
//! nothing until the configuration holds it; then it onboards the spoke as configured.

use std::path::Path;

use super::{AddArgs, AddError};
use spokekeeper::config::Config;

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
        if let Some(given) = args.credential.filter(|m| *m != spoke.credential.mode) {
            return Err(AddError::OtherCredential {
                spoke: spoke.name.clone(),
                given,
                configured: spoke.credential.mode,
                file: config_path.to_path_buf(),
            });
        }
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
