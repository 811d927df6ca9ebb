//! A federated spoke of two real kube-apiservers over one etcd (`spokes[].servers`): each
//! node its own sshd, forced command and AuthenticationConfiguration file, each API
//! server reading its own; the hub's real kube-apiserver issues the tokens and Flux's
//! real controllers deploy through the ConfigMap.

use std::path::PathBuf;

use super::*;

use support::realstack::bearer::Bearer;
use support::realstack::federated::{NO_ISSUERS, hub_token, write_config};
use support::realstack::kube::KubeApi;
use support::realstack::spoke::authentication_config_path;
use support::{Node, NodeOptions};

/// Node `b`'s own kube-apiserver (generation `generation`), as a second server of spoke
/// 0: spoke 0's etcd prefix and CAs, its serving certificate naming `b`, `b`'s file.
fn peer_api(stack: &RealFlux, b: &Node, generation: u32) -> KubeApi {
    let a = &stack.spoke_apis[0];
    KubeApi::start(
        &format!("peer-{}-{generation}", b.address),
        stack.hub.dir(),
        &stack.hub.etcd,
        b.address,
        a.port,
        stack.fleet.nodes[0].pki(),
        &[
            format!("--etcd-prefix=/{}", a.name),
            format!(
                "--authentication-config={}",
                authentication_config_path(b).display()
            ),
        ],
    )
}

/// A second server node for spoke 0: reached with its SSH settings (identity,
/// known_hosts, port), the federated recipe installed, its API server started on a file
/// trusting no issuer, and `servers:` in spokekeeper.yaml.
fn second_server(stack: &mut RealFlux) -> (Node, KubeApi) {
    let a = &stack.fleet.nodes[0];
    let mut b = stack.fleet.lab().add_node(NodeOptions {
        api: false,
        api_port: stack.spoke_apis[0].port,
        ssh_port: a.ssh_port,
        ..NodeOptions::default()
    });
    for ext in ["", ".pub"] {
        let from = PathBuf::from(format!("{}{ext}", a.identity_path.display()));
        let to = PathBuf::from(format!("{}{ext}", b.identity_path.display()));
        std::fs::copy(from, to).unwrap();
    }
    support::recipe::install_federated(&mut b);
    let mut known = std::fs::read_to_string(&a.known_hosts_path).unwrap();
    known.push_str(&format!("{}\n", b.host_key_line()));
    std::fs::write(&a.known_hosts_path, known).unwrap();
    let line = format!("    address: {}\n", a.address);
    let config = std::fs::read_to_string(&stack.fleet.config).unwrap();
    assert!(config.contains(&line), "{config}");
    let servers = format!("{line}    servers: [\"{}\"]\n", b.address);
    std::fs::write(&stack.fleet.config, config.replacen(&line, &servers, 1)).unwrap();
    write_config(&authentication_config_path(&b), NO_ISSUERS);
    stack.fleet.nodes[0].serve_at_too(b.address);
    let api = peer_api(stack, &b, 0);
    (b, api)
}

/// Spoke 0 on two real API servers: the first tick writes the same file on both nodes,
/// proves each and Flux deploys; the second node rebuilt (its file gone, its API server
/// started again on an empty one) is found and written again by the next tick; a revoke
/// makes a leaked kustomize-controller token refused by each API server, presented to
/// each directly.
#[test]
fn a_federated_spoke_on_two_real_api_servers_is_written_repaired_and_revoked_on_each() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = RealFlux::start_format(1, false, "", Format::Federated);
    let (b, mut peer) = second_server(&mut stack);
    let a = &stack.fleet.nodes[0];
    let read = |n: &Node| std::fs::read_to_string(authentication_config_path(n)).unwrap();
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    stack.assert_consumers_ready(&report, 0);
    stack.assert_deployed(0);
    let file = read(a);
    assert_eq!(read(&b), file);

    // The second node rebuilt: its file gone, its API server started on an empty one.
    peer.stop();
    std::fs::remove_file(authentication_config_path(&b)).unwrap();
    write_config(&authentication_config_path(&b), NO_ISSUERS);
    peer = peer_api(&stack, &b, 1);
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(report["spokes"][0]["action"], "rotated", "{report:#}");
    assert_eq!(read(&b), file);

    let ca = a.pki().parts.ca_pem.clone();
    let url = stack.spoke_apis[0].url.clone();
    let leaked = hub_token(&stack.hub.api, flux::NS, "kustomize-controller", &url);
    let servers = [stack.spoke_apis[0].url.clone(), peer.url.clone()];
    for server in &servers {
        let who = Bearer::new(server, &ca, &leaked).whoami();
        assert!(who.is_ok(), "{server}: {who:?}");
    }
    let (code, out, err) = stack.fleet.run(&["revoke", "spoke0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    for server in &servers {
        let refused = Bearer::new(server, &ca, &leaked).whoami();
        assert!(matches!(refused, Err(401 | 403)), "{server}: {refused:?}");
    }
    assert_eq!(read(&b), read(a));
    assert!(read(&b).contains("#generation-1"), "{}", read(&b));
}
