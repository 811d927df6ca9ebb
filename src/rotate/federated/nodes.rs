//! A federated spoke's server nodes: its `address` and each of its `servers`. Every
//! API server of the control plane reads its own AuthenticationConfiguration, so the
//! file is written on each node and each node's API server is asked by itself (not
//! through a balancer that may pick another) whether it runs the file, takes the hub's
//! token and, after a revoke, refuses the revoked audience.

use futures::future::join_all;

use super::*;

/// One server node of a federated spoke, reached by itself.
pub(super) struct Node {
    /// Its API server's URL: the spoke's server when the spoke has no `servers`.
    pub server: String,
    /// The admin credential, pointed at `server`.
    pub client: kube::Client,
}

/// Writes the spoke's AuthenticationConfiguration `bytes` on every server node at once
/// (each write keeps its SSH timeouts); the first node that fails, in the configured
/// order, is the error, and names itself.
pub(super) async fn write_on_each(spoke: &SpokeConfig, bytes: &[u8]) -> Result<(), SpokeError> {
    let writes =
        hosts(spoke).map(|host| crate::spoke::write_authentication_config(host, &spoke.ssh, bytes));
    for written in join_all(writes).await {
        written.map_err(|e| SpokeError::Extract(e.into()))?;
    }
    Ok(())
}

/// The SSH addresses of the spoke's server nodes: `address` first.
pub(super) fn hosts(spoke: &SpokeConfig) -> impl Iterator<Item = &str> {
    std::iter::once(spoke.address.as_str()).chain(spoke.servers.iter().map(String::as_str))
}

/// The API server URLs of the spoke's nodes, with `server` the spoke's (its
/// `api_server`, or its address with the kubeconfig's port): `server` alone for a spoke
/// without `servers` (proven through it, as it always was); else each node's own,
/// https://NODE:PORT with `server`'s port.
pub(super) fn urls(spoke: &SpokeConfig, server: &str) -> Result<Vec<url::Url>, SpokeError> {
    let unusable = |reason: String| {
        SpokeError::Kubeconfig(
            crate::kubeconfig::KubeconfigError::Invalid {
                field: format!("spokes[{}].servers", spoke.name),
                reason,
                fix: "give each server node as a host name or IP address its API server's certificate names",
            }
            .into(),
        )
    };
    let url = url::Url::parse(server).map_err(|e| unusable(format!("{server:?}: {e}")))?;
    if spoke.servers.is_empty() {
        return Ok(vec![url]);
    }
    let port = url.port_or_known_default().unwrap_or(443);
    hosts(spoke)
        .map(|host| {
            let at = format!("https://{}", crate::spoke::host_port(host, port));
            url::Url::parse(&at).map_err(|e| unusable(format!("{at:?}: {e}")))
        })
        .collect()
}

/// The spoke's nodes, each with the admin credential `admin` pointed at it.
pub(super) async fn each(
    spoke: &SpokeConfig,
    admin: &Fresh,
    limit: Duration,
) -> Result<Vec<Node>, SpokeError> {
    let mut nodes = Vec::new();
    for url in urls(spoke, &admin.kubeconfig.server_string())? {
        // No copy of the credential for a spoke reached through its one server.
        let pointed;
        let yaml = if spoke.servers.is_empty() {
            &admin.yaml
        } else {
            pointed = admin.kubeconfig.at_server(&url).to_yaml();
            &pointed
        };
        let (client, _) = live::client(yaml, limit)
            .await
            .map_err(|e| SpokeError::Live(e.into()))?;
        nodes.push(Node {
            server: crate::kubeconfig::server_string(&url),
            client,
        });
    }
    Ok(nodes)
}

/// Runs `step` on every node at once; the first failure, in node order, is the error.
pub(super) async fn on_each<'n, F, Fut>(nodes: &'n [Node], step: F) -> Result<(), SpokeError>
where
    F: Fn(&'n Node) -> Fut,
    Fut: std::future::Future<Output = Result<(), FederateError>>,
{
    for done in join_all(nodes.iter().map(step)).await {
        done.map_err(fed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spoke(servers: &str) -> SpokeConfig {
        let text = format!(
            "repo: {{path: f}}\nsealing: {{cert: c}}\nhub: {{}}\nspokes:\n- name: dev\n  address: 10.0.0.5\n  servers: {servers}\n  credential: {{mode: federated, federated: {{issuer: \"https://hub\"}}}}\n"
        );
        let config = crate::config::Config::parse(&text, "t.yaml", std::path::Path::new("/x"))
            .expect("the configuration");
        config.spokes.into_iter().next().unwrap()
    }

    #[test]
    fn each_server_node_is_reached_at_its_own_address_with_the_spokes_port() {
        let urls = |s: &SpokeConfig, server| -> Vec<String> {
            urls(s, server)
                .unwrap()
                .iter()
                .map(crate::kubeconfig::server_string)
                .collect()
        };
        let one = spoke("[]");
        assert_eq!(
            urls(&one, "https://lb.example.org:8443/k8s"),
            ["https://lb.example.org:8443/k8s"]
        );
        let three = spoke("[10.0.0.6, \"fd00::7\"]");
        assert_eq!(
            urls(&three, "https://lb.example.org:8443"),
            [
                "https://10.0.0.5:8443",
                "https://10.0.0.6:8443",
                "https://[fd00::7]:8443"
            ]
        );
        assert_eq!(
            hosts(&three).collect::<Vec<_>>(),
            ["10.0.0.5", "10.0.0.6", "fd00::7"]
        );
    }
}
