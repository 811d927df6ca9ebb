//! The federated node recipe (`spokekeeper::spoke::federated_recipe`) installed on a lab
//! node as printed: its script, forced command and sudoers rule, with the recipe's node
//! paths moved under the node's directory and its user the lab's.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use spokekeeper::spoke::{Distro, NODE_SCRIPT, authentication_config_path, federated_recipe};

use crate::{LAB_USER, Node};

/// Where the localized recipe put the script and the file it writes.
pub struct Installed {
    pub script: PathBuf,
    pub file: PathBuf,
}

/// `text` with the recipe's node paths moved under `node`'s directory.
pub fn localize(node: &Node, text: &str) -> String {
    let dir = node.dir.display();
    text.replace(NODE_SCRIPT, &format!("{dir}/spokekeeper-node"))
        .replace(
            "/etc/rancher/k3s/spokekeeper",
            &format!("{dir}/spokekeeper"),
        )
        .replace(Distro::K3s.kubeconfig_path(), node.kubeconfig_path_str())
}

/// The recipe's line starting with `start`, localized; the user is the lab's.
pub fn recipe_line(node: &Node, recipe: &str, start: &str) -> String {
    let line = recipe
        .lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("the recipe has no line starting {start:?}"));
    let line = localize(node, line);
    match line.strip_prefix("spokekeeper ALL=") {
        Some(rest) => format!("{LAB_USER} ALL={rest}"),
        None => line,
    }
}

/// The forced command's options (the part before the key), localized.
pub fn forced_options(node: &Node, recipe: &str) -> String {
    let line = recipe_line(node, recipe, "command=");
    line.split(" ssh-ed25519 ").next().unwrap().to_owned()
}

/// Installs the federated recipe (k3s) on `node` as written, for [`LAB_USER`].
pub fn install_federated(node: &mut Node) -> Installed {
    let recipe = federated_recipe(Distro::K3s);
    let body = recipe
        .split_once("<<'EOF'\n")
        .and_then(|(_, rest)| rest.split_once("\nEOF\n"))
        .expect("the recipe writes the script with a here-document")
        .0;
    let script = node.dir.join("spokekeeper-node");
    std::fs::write(&script, format!("{}\n", localize(node, body))).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    node.set_authorized_key_options(LAB_USER, &forced_options(node, &recipe));
    let sudoers = recipe_line(node, &recipe, "spokekeeper ALL=");
    node.set_sudoers(&format!("{sudoers}\n")).unwrap();
    let file = PathBuf::from(localize(node, &authentication_config_path(Distro::K3s)));
    Installed { script, file }
}
