//! A federated spoke of two server nodes (`spokes[].servers`) on the lab: each node its
//! own sshd with the federated recipe and its own AuthenticationConfiguration file, each
//! API server reading its own file over one shared store (one etcd) and one CA. The
//! rotation writes and proves both, a rebuilt node is repaired in one tick, a revoke
//! refuses a leaked token on both, and a node that is down fails the spoke with nothing
//! committed.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;

use crate::support;

use spokekeeper::secret::SecretBytes;
use spokekeeper::spoke::LiveError;
use support::federation::LabHub;
use support::fleet::{action, spokekeeper, vectors};
use support::realstack::spoke::authentication_config_path;
use support::{Lab, Node, NodeOptions};

/// Whether the API server at `server` (CA `ca_pem`) authenticates `token`: a hub token
/// presented to that server alone, not through the spoke's server.
fn accepted(server: &str, ca_pem: &str, token: &str) -> bool {
    support::install_crypto_provider();
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let yaml = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\nusers:\n- name: u\n  user:\n    token: {token}\n"
    );
    let kubeconfig = SecretBytes::from(yaml.into_bytes());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let live = spokekeeper::spoke::check_live(&kubeconfig, Duration::from_secs(10));
    match rt.block_on(live) {
        Ok(_) => true,
        Err(LiveError::Unauthorized { .. }) => false,
        Err(e) => panic!("{server}: {e}"),
    }
}

/// The two nodes' files, each as written there.
fn files(a: &Node, b: &Node) -> (String, String) {
    let read = |n: &Node| std::fs::read_to_string(authentication_config_path(n)).unwrap();
    (read(a), read(b))
}

/// Node `b` as another server of `a`'s control plane: reached with `a`'s SSH settings
/// (its identity, its known_hosts, the same port), the federated recipe installed.
fn second_server(a: &Node, b: &mut Node) {
    for ext in ["", ".pub"] {
        let from = PathBuf::from(format!("{}{ext}", a.identity_path.display()));
        let to = PathBuf::from(format!("{}{ext}", b.identity_path.display()));
        std::fs::copy(from, to).unwrap();
    }
    support::recipe::install_federated(b);
    let mut known = std::fs::read_to_string(&a.known_hosts_path).unwrap();
    known.push_str(&format!("{}\n", b.host_key_line()));
    std::fs::write(&a.known_hosts_path, known).unwrap();
}

/// Every server node of a federated spoke is written and proven by itself: the first
/// tick writes the same file on both nodes and commits; with one node rebuilt (its file
/// gone, its API server restarted) the next tick finds it refusing the hub and writes
/// it again; a revoke makes a leaked token of the old audience refused on each node,
/// presented to each directly; a node that is down fails the spoke, naming it, with
/// nothing committed.
/// A federated spoke `spoke0` of two lab server nodes, `a` (its `address`) and `b` (its
/// `servers`), configured and not yet rotated.
struct TwoServers {
    lab: Lab,
    dir: tempfile::TempDir,
    remote: PathBuf,
    hub: LabHub,
    a: Node,
    b: Node,
    /// `b`'s API server: dropped, the node is down.
    peer: spokekeeper_lab::ApiServer,
    config: PathBuf,
}

fn two_servers() -> TwoServers {
    let lab = Lab::new();
    let dir = support::scratch_dir();
    let (remote, mut clones) = support::git::fleet_remote(dir.path(), 1);
    let hub = LabHub::start(dir.path(), &remote);
    let mut a = lab.add_node(hub.node_options());
    let mut b = lab.add_node(NodeOptions {
        api: false,
        ssh_port: a.ssh_port,
        ..hub.node_options()
    });
    second_server(&a, &mut b);
    let spoke = hub
        .add_federated(&mut a, "spoke0")
        .field("servers", &format!("[{:?}]", b.address.to_string()));
    let peer = a.serve_peer(&b);
    let config = dir.path().join("spokekeeper.yaml");
    let yaml = spokekeeper_lab::config::ConfigBuilder::new(
        clones.remove(0),
        vectors().join("key/cert.pem"),
    )
    .top(&hub.top())
    .spokes([spoke])
    .yaml();
    std::fs::write(&config, yaml).unwrap();
    TwoServers {
        lab,
        dir,
        remote,
        hub,
        a,
        b,
        peer,
        config,
    }
}

/// `rotate --all` with `extra`, its exit code, JSON report and stderr.
fn rotate(config: &std::path::Path, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let mut args = vec!["-o", "json", "rotate", "--all"];
    args.extend_from_slice(extra);
    let (code, out, err) = spokekeeper(config, &args);
    let json: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, json, err)
}

#[test]
fn a_federated_spoke_with_two_servers_is_written_proven_repaired_and_revoked_on_each() {
    crate::support::requires!(ROOT);
    let TwoServers {
        lab: _lab,
        dir: _dir,
        remote,
        hub,
        mut a,
        b,
        mut peer,
        config,
    } = two_servers();
    let rotate = |extra: &[&str]| rotate(&config, extra);
    let commits = || support::git::git(&remote, &["rev-list", "--count", "main"]);
    let (code, report, err) = rotate(&[]);
    assert_eq!(
        (code, action(&report, 0)),
        (0, "rotated".into()),
        "{report:#}\n{err}"
    );
    let (file_a, file_b) = files(&a, &b);
    assert_eq!(file_a, file_b);
    assert!(file_a.contains(support::federation::ISSUER), "{file_a}");

    // A rebuilt second node: its file gone, its API server started again without it.
    drop(peer);
    std::fs::remove_file(authentication_config_path(&b)).unwrap();
    peer = a.serve_peer(&b);
    let (code, report, err) = rotate(&[]);
    assert_eq!(
        (code, action(&report, 0)),
        (0, "rotated".into()),
        "{report:#}\n{err}"
    );
    assert_eq!(
        files(&a, &b).1,
        file_a,
        "the rebuilt node's file, written again"
    );
    let (_, report, _) = rotate(&[]);
    assert_eq!(action(&report, 0), "healthy", "{report:#}");

    // A leaked controller token of the spoke's audience, presented to each node.
    let port = a.api_port;
    let servers = [a.address, b.address].map(|ip| format!("https://{ip}:{port}"));
    let ca = a.pki().parts.ca_pem.clone();
    let account = ("flux-system", "kustomize-controller", "uid-1");
    let leaked = hub.issuer.token(account, &[servers[0].clone()], 3600);
    for server in &servers {
        assert!(accepted(server, &ca, &leaked), "{server} before the revoke");
    }
    let (code, out, err) = spokekeeper(&config, &["revoke", "spoke0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    for server in &servers {
        assert!(!accepted(server, &ca, &leaked), "{server} after the revoke");
    }
    let (file_a, file_b) = files(&a, &b);
    assert_eq!(file_a, file_b);
    assert!(file_a.contains("#generation-1"), "{file_a}");

    // The second node down: the spoke fails naming it, and nothing is committed.
    drop(peer);
    let before = commits();
    let (code, report, err) = rotate(&["--force"]);
    assert_ne!(code, 0, "{report:#}\n{err}");
    let error = report["spokes"][0]["error"].to_string();
    assert!(error.contains(&b.address.to_string()), "{report:#}");
    assert_eq!(commits(), before);
}

/// `revoke --drop-issuer` on a spoke of two servers writes the file that trusts no issuer
/// on both, and a fresh hub token is refused by each node's API server; once trust is
/// back (`rotate spoke0 --force`), a drop marker on the second node alone holds the spoke,
/// naming that node, and its file is left as it is.
#[test]
fn a_dropped_issuer_is_written_on_each_server_and_a_drop_on_either_holds_the_spoke() {
    crate::support::requires!(ROOT);
    let TwoServers {
        lab: _lab,
        dir: _dir,
        hub,
        a,
        b,
        peer: _peer,
        config,
        ..
    } = two_servers();
    let (code, report, err) = rotate(&config, &[]);
    assert_eq!(code, 0, "{report:#}\n{err}");

    let (code, out, err) = spokekeeper(&config, &["revoke", "spoke0", "--drop-issuer"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let (dropped_a, dropped_b) = files(&a, &b);
    assert_eq!(dropped_a, dropped_b);
    assert!(
        dropped_a.starts_with("# spokekeeper-issuer-dropped: ")
            && dropped_a.contains("\njwt: []\n"),
        "{dropped_a}"
    );
    let port = a.api_port;
    let servers = [a.address, b.address].map(|ip| format!("https://{ip}:{port}"));
    let ca = a.pki().parts.ca_pem.clone();
    let account = ("flux-system", "kustomize-controller", "uid-2");
    let fresh = hub.issuer.token(account, &[servers[0].clone()], 3600);
    for server in &servers {
        assert!(!accepted(server, &ca, &fresh), "{server} after the drop");
    }

    let (code, report, err) = spokekeeper(&config, &["-o", "json", "rotate", "spoke0", "--force"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let trusting = files(&a, &b).0;
    assert_eq!(files(&a, &b).1, trusting);
    assert!(
        !trusting.contains("spokekeeper-issuer-dropped"),
        "{trusting}"
    );
    // The second node alone says its issuer was dropped.
    std::fs::write(authentication_config_path(&b), &dropped_b).unwrap();
    let (code, report, err) = rotate(&config, &["--force"]);
    assert_ne!(code, 0, "{report:#}\n{err}");
    let error = report["spokes"][0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("by `spokekeeper revoke --drop-issuer` at")
            && error.contains(&format!("node {}", b.address)),
        "{report:#}"
    );
    assert_eq!(files(&a, &b), (trusting, dropped_b));
}
