//! The federated spoke (`edge`): its node's sshd started, or edge left out and why; what
//! the tour shows once it rotated (the trust on its node, the binding, the committed
//! ConfigMap with nothing secret in it); and a token Flux's controller would present.

use std::time::Duration;

use spokekeeper::secret::SecretBytes;
use spokekeeper_lab::federation::Issuer;

use super::fleet::git;
use super::node::{self, NodeSshd};
use super::sim::SimSpoke;
use super::{DemoError, FEDERATED, output, part};

/// The federated spoke's node sshd, once the hub's key ran the script through it;
/// without one, the spoke is left out (its trust is written over SSH), and the demo says
/// why.
pub(super) fn node(spokes: &mut Vec<SimSpoke>, rt: &tokio::runtime::Runtime) -> Option<NodeSshd> {
    let edge = spokes.get(FEDERATED)?;
    let ready = node::start(&edge.dir, &edge.k3s_yaml()).and_then(|sshd| {
        // A login the node refuses (a user without a shell, a policy) shows here.
        let reached = rt.block_on(spokekeeper::spoke::read_with_script(
            "127.0.0.1",
            &settings(&sshd),
        ));
        reached.map(drop).map_err(node::NodeError::from)?;
        Ok(sshd)
    });
    match ready {
        Ok(sshd) => {
            say!(
                "   {:<5} its node's sshd on 127.0.0.1:{}: the hub's key may run the federated recipe's script, nothing else",
                edge.name,
                sshd.port
            );
            Some(sshd)
        }
        Err(why) => {
            say!(
                "   {} left out: its trust of the hub is written on its node over SSH, and no sshd for its node could be used here ({why})",
                edge.name
            );
            spokes.truncate(FEDERATED);
            None
        }
    }
}

/// How spokekeeper reaches the node (what the demo's spokekeeper.yaml says).
fn settings(sshd: &NodeSshd) -> spokekeeper::spoke::SshSettings {
    spokekeeper::spoke::SshSettings {
        user: sshd.user.clone(),
        port: sshd.port,
        identity: sshd.identity.clone(),
        known_hosts: sshd.known_hosts.clone(),
        ..Default::default()
    }
}

/// Words a committed ConfigMap must not hold: a key, a token, a password.
const SECRET_MARKS: [(&str, &str); 5] = [
    ("PRIVATE KEY", "a private key"),
    ("client-key-data", "a client key"),
    ("token:", "a token"),
    ("password", "a password"),
    ("kind: Secret", "a Secret"),
];

/// What the first tick did for the federated spoke: the file on its node (the hub's
/// issuer, its audience, the accepted accounts), the binding, and the ConfigMap in git.
pub(super) fn show(remote: &std::path::Path, edge: &SimSpoke) -> Result<(), DemoError> {
    let file = node::authentication_config(&edge.dir);
    let trust = std::fs::read_to_string(&file).map_err(super::io(file.display()))?;
    say!(
        "   {} is federated: its node's AuthenticationConfiguration, written over SSH by the recipe's script:",
        edge.name
    );
    for line in trust.lines().filter(|l| !l.starts_with('#')) {
        say!("   | {line}");
    }
    let name = format!("spokekeeper.hub.{}.federated", edge.name);
    let binding = edge
        .objects
        .as_ref()
        .and_then(|o| o.lock().ok()?.binding(&name))
        .ok_or_else(|| DemoError::NoBinding {
            spoke: edge.name.into(),
            name: name.clone(),
        })?;
    let users: Vec<&str> = binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .collect();
    say!(
        "   ClusterRoleBinding {name} binds ClusterRole {} to {}",
        binding["roleRef"]["name"].as_str().unwrap_or("?"),
        users.join(", ")
    );
    let path = output(FEDERATED, edge.name);
    let committed = git(remote, &["show", &format!("main:{path}")])?;
    if let Some(&(_, what)) = SECRET_MARKS.iter().find(|(m, _)| committed.contains(m)) {
        return Err(DemoError::Secret { file: path, what });
    }
    say!(
        "   {path} is a ConfigMap, nothing secret in it (no key, no token): Flux asks the hub for a token for its audience"
    );
    for line in committed.lines() {
        match line.char_indices().nth(100) {
            Some((at, _)) => say!("   | {}...", &line[..at]),
            None => say!("   | {line}"),
        }
    }
    Ok(())
}

/// What the spoke says of a token of Flux's kustomize-controller for its audience, as
/// the hub's TokenRequest issues it (the token in memory only).
pub(super) async fn presented(issuer: &Issuer, edge: &SimSpoke) -> Result<String, DemoError> {
    let server = format!("https://127.0.0.1:{}", edge.port);
    let token = zeroize::Zeroizing::new(issuer.token(
        ("flux-system", "kustomize-controller", "demo"),
        std::slice::from_ref(&server),
        600,
    ));
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(&edge.pki.parts.ca_pem);
    let text = zeroize::Zeroizing::new(format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: edge\nclusters:\n- name: edge\n  cluster:\n    \
         server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: edge\n  context: \
         {{cluster: edge, user: flux}}\nusers:\n- name: flux\n  user:\n    token: {}\n",
        token.as_str()
    ));
    let kubeconfig = SecretBytes::from(text.as_bytes().to_vec());
    let live = spokekeeper::spoke::check_live(&kubeconfig, Duration::from_secs(10))
        .await
        .map_err(part("a hub token presented to the federated spoke"))?;
    Ok(format!(
        "{} (groups {})",
        live.username,
        live.groups.join(",")
    ))
}
