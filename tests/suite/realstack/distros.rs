//! spokekeeper against spokes laid out as k3s and RKE2 write them (issue 30): the real
//! kube-apiserver and kube-controller-manager started with the files and flags k3s and
//! RKE2 use (tests/support/src/realstack/distro.rs, docs/distributions.md), behind the lab's
//! real sshd, against the real hub. Per distribution and credential mode: the first
//! rotation, a renewal (an expiring client certificate, same CA) and a reinstall; and
//! k3s's own CA rotation (rotate-default-ca-certs.sh, then `certificate rotate-ca`).

use crate::support;

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use spokekeeper::seal::RecoveryKey;
use support::NodeOptions;
use support::fleet::Fleet;
use support::realstack::distro::{Distro, DistroOptions, DistroSpoke, KUBECONFIG_PORT};
use support::realstack::flux::LabFlux;
use support::realstack::hub::{HubOptions, RealHub};
use support::realstack::list_namespaces;

const PINNED: &str = "keys/sealed-secrets.pem";
const MINTED: &str = "credential:\n  mode: minted\n  ttl: 1h\n  renew_before: 3590s\n";

/// The real hub, one distro spoke (spoke0), the fleet repo and the lab's Flux.
struct Stack {
    flux: Option<LabFlux>,
    spoke: DistroSpoke,
    fleet: Fleet,
    hub: RealHub,
}

impl Stack {
    fn start(opts: DistroOptions, extra: &str) -> Stack {
        let hub = RealHub::start(&HubOptions::default());
        let mut fleet = Fleet::new(&[NodeOptions {
            api: false,
            api_port: KUBECONFIG_PORT,
            ..NodeOptions::default()
        }]);
        let spoke = DistroSpoke::on(&mut fleet.nodes[0], &hub.etcd, hub.dir(), opts);
        let vectors = support::fleet::vectors().join("key/cert.pem");
        let text = fleet.builder().yaml().replace(
            vectors.to_str().unwrap(),
            fleet.clone.join(PINNED).to_str().unwrap(),
        );
        std::fs::write(
            &fleet.config,
            format!(
                "{text}{extra}hub:\n  kubeconfig: {}\n  verify_timeout: 90s\n",
                hub.admin_kubeconfig().display()
            ),
        )
        .unwrap();
        hub.api.apply(
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  \
             name: spoke0\n  namespace: flux-system\nspec:\n  interval: 10m\n  path: ./apps\n  \
             prune: true\n  sourceRef:\n    kind: GitRepository\n    name: fleet\n  \
             kubeConfig:\n    secretRef:\n      name: spoke0-kubeconfig\n",
        );
        let flux = Some(LabFlux::start(
            hub.admin_kubeconfig(),
            &fleet.remote,
            "main",
        ));
        Stack {
            flux,
            spoke,
            fleet,
            hub,
        }
    }

    /// No key of the fleet (every committed generation, unsealed with the controller's
    /// keys) in plaintext anywhere the fleet helper looks.
    fn assert_no_plaintext(&self) {
        let keys: Vec<RecoveryKey> = self
            .hub
            .sealing_keys()
            .iter()
            .flat_map(|pem| RecoveryKey::load_all(pem.as_bytes(), "controller key").unwrap())
            .collect();
        let needles = self.fleet.key_needles_unsealing(&keys);
        self.fleet.assert_no_plaintext_of(&needles);
    }

    /// `rotate --all`: spoke0's report, after checking the run succeeded.
    fn rotate(&self) -> Value {
        let (code, report, err) = self.fleet.rotate_json(&["--all"]);
        let flux = self.flux.as_ref().map(|f| f.log()).unwrap_or_default();
        assert_eq!(code, 0, "{report:#}\n{err}\n--- the lab's Flux:\n{flux}");
        report["spokes"][0].clone()
    }

    /// The committed kubeconfig, opened with the controller's keys, as a file for kubectl.
    fn committed_kubeconfig(&self, name: &str) -> PathBuf {
        let keys = self.hub.sealing_keys_files();
        let sealed = self.hub.dir().join("committed0.yaml");
        std::fs::write(&sealed, self.fleet.remote_file(0)).unwrap();
        let secret = self.hub.recovery_unseal(&sealed, &keys).unwrap();
        use base64::Engine as _;
        let value = base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["value"].as_str().expect("data.value"))
            .unwrap();
        let path = self.hub.dir().join(name);
        std::fs::write(&path, value).unwrap();
        path
    }

    /// Waits until the real controller unsealed the commit, then has Flux's own
    /// kubeconfig loading call the spoke with it: the user it authenticated as.
    fn flux_user(&self) -> String {
        let expected = std::fs::read(self.committed_kubeconfig("expected.yaml")).unwrap();
        support::realstack::wait_until(
            "the controller unseals the commit",
            Duration::from_secs(60),
            || match self
                .hub
                .secret_value("flux-system", "spoke0-kubeconfig", "value")
            {
                Some(v) if v == expected => Ok(()),
                _ => Err(self.hub.controller_log()),
            },
        );
        let who = self
            .hub
            .flux_calls_spoke("flux-system", "spoke0-kubeconfig")
            .unwrap_or_else(|e| panic!("Flux's code calls the spoke: {e}"));
        who["username"].as_str().unwrap().to_string()
    }
}

fn kind(spoke: &Value) -> &str {
    spoke["reason"]["kind"].as_str().unwrap_or("")
}

fn days_left(spoke: &Value, field: &[&str]) -> i64 {
    let mut v = spoke;
    for f in field {
        v = &v[*f];
    }
    let at = time::OffsetDateTime::parse(
        v.as_str()
            .unwrap_or_else(|| panic!("{field:?} in {spoke:#}")),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    (at - time::OffsetDateTime::now_utc()).whole_days()
}

/// Extracted: the admin kubeconfig at the distribution's path is committed and Flux's
/// code authenticates as system:admin through port 6443; the server restarted with its
/// admin certificate 25 days from expiry renews it (same CA, new key) and spokekeeper
/// commits the renewal for that reason; a reinstall (new CAs) is rotated for the CA.
fn extracted_lifecycle(distro: Distro) {
    let _heavy = support::timing::heavy();
    let mut opts = DistroOptions::new(distro);
    opts.admin_days = 25;
    let mut stack = Stack::start(opts, "");
    let spoke = stack.rotate();
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(kind(&spoke), "initial", "{spoke:#}");
    assert_eq!(spoke["user"], "system:admin", "{spoke:#}");
    assert_eq!(stack.flux_user(), "system:admin");
    let first_ca = spoke["ca_sha256"].clone();

    stack.spoke.restart_renewing(&stack.hub.etcd, 365);
    let spoke = stack.rotate();
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(kind(&spoke), "client-expiring", "{spoke:#}");
    assert_eq!(spoke["ca_sha256"], first_ca, "same CA: {spoke:#}");
    assert!(days_left(&spoke, &["client_not_after"]) > 300, "{spoke:#}");
    assert_eq!(stack.flux_user(), "system:admin");

    stack.spoke.rebuild(&stack.hub.etcd);
    let spoke = stack.rotate();
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(kind(&spoke), "ca-changed", "{spoke:#}");
    assert_ne!(spoke["ca_sha256"], first_ca, "{spoke:#}");
    assert_eq!(stack.flux_user(), "system:admin");
    stack.assert_no_plaintext();
}

/// Minted: the distribution's signer (kube-controller-manager on
/// `client-ca.nochain.crt`) signs generation 1, Flux's code authenticates as it; its
/// renewal (credential.renew_before reached) mints 2 and revokes 1; a reinstall mints 3
/// on the new CAs and revokes 2's binding with it.
fn minted_lifecycle(distro: Distro) {
    let _heavy = support::timing::heavy();
    let mut stack = Stack::start(DistroOptions::new(distro), MINTED);
    let spoke = stack.rotate();
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 1, "{spoke:#}");
    assert!(
        stack.flux_user().starts_with("spokekeeper:hub:spoke0:1:"),
        "{spoke:#}"
    );
    let gen1 = stack.committed_kubeconfig("gen1.yaml");
    list_namespaces(&gen1).expect("generation 1 works");

    // renew_before (3590s of a 1h certificate) is reached 10s after the mint.
    std::thread::sleep(Duration::from_secs(11));
    let spoke = stack.rotate();
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(kind(&spoke), "client-expiring", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 2, "{spoke:#}");
    assert_eq!(
        spoke["revoked"],
        serde_json::json!(["spokekeeper.hub.spoke0.g1"]),
        "{spoke:#}"
    );
    assert!(stack.flux_user().starts_with("spokekeeper:hub:spoke0:2:"));
    let refused = list_namespaces(&gen1).expect_err("generation 1 is revoked");
    assert!(refused.to_lowercase().contains("forbidden"), "{refused}");

    stack.spoke.rebuild(&stack.hub.etcd);
    let spoke = stack.rotate();
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(kind(&spoke), "ca-changed", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 3, "{spoke:#}");
    assert!(stack.flux_user().starts_with("spokekeeper:hub:spoke0:3:"));
    stack.assert_no_plaintext();
}

/// k3s's CA rotation on a minted spoke: after rotate-default-ca-certs.sh and `k3s
/// certificate rotate-ca` (new roots cross-signed by the old, the old roots kept in
/// the bundles, every leaf issued again), generation 1 still authenticates, since
/// client-ca.crt keeps the old root; the API server's chain reaches the committed CA
/// only through the cross-signed root, and spokekeeper rotates for the new server CA:
/// generation 2 is signed by the new client CA (client-ca.nochain.crt) and
/// generation 1's binding is deleted.
fn ca_rotation(distro: Distro) {
    let _heavy = support::timing::heavy();
    let mut stack = Stack::start(
        DistroOptions::new(distro),
        "credential:\n  mode: minted\n  ttl: 1h\n  renew_before: 10m\n",
    );
    let spoke = stack.rotate();
    assert_eq!(spoke["credential"]["generation"], 1, "{spoke:#}");
    let gen1 = stack.committed_kubeconfig("gen1.yaml");
    list_namespaces(&gen1).expect("generation 1 works");
    let old_client_root = stack.spoke.certs("client-ca.crt").remove(0);
    let old_server_root = stack.spoke.certs("server-ca.crt").remove(0);

    stack.spoke.rotate_ca(&stack.hub.etcd);
    let client = stack.spoke.certs("client-ca.crt");
    assert_eq!(
        client.len(),
        4,
        "new CA, new root, cross-signed root, old root"
    );
    assert_eq!(client[3], old_client_root);
    assert_eq!(stack.spoke.certs("server-ca.crt")[3], old_server_root);
    assert_eq!(
        stack.spoke.certs("client-ca.nochain.crt"),
        [client[0].clone()]
    );
    list_namespaces(&gen1).expect("generation 1 still authenticates after rotate-ca");

    let spoke = stack.rotate();
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(kind(&spoke), "ca-changed", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 2, "{spoke:#}");
    assert_eq!(
        spoke["revoked"],
        serde_json::json!(["spokekeeper.hub.spoke0.g1"]),
        "{spoke:#}"
    );
    assert!(stack.flux_user().starts_with("spokekeeper:hub:spoke0:2:"));
    let refused = list_namespaces(&gen1).expect_err("generation 1 is revoked");
    assert!(refused.to_lowercase().contains("forbidden"), "{refused}");
    // Generation 2's certificate is the new client CA's.
    let gen2 = std::fs::read_to_string(stack.committed_kubeconfig("gen2.yaml")).unwrap();
    let chain = client_chain(&gen2);
    let issued = spokekeeper::certs::verify_signed_by(&chain[0], &client[0]);
    assert!(
        issued.is_ok(),
        "generation 2 is not signed by client-ca.nochain.crt"
    );
    stack.assert_no_plaintext();
}

/// The certificates of a kubeconfig's client-certificate-data, DER.
fn client_chain(kubeconfig: &str) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let line = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("client-certificate-data: "))
        .expect("client-certificate-data");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(line)
        .unwrap();
    support::realstack::distro::pem_certs(&pem)
}

#[test]
fn k3s_extracted_rotates_renews_and_survives_a_rebuild() {
    crate::support::requires!(ROOT, REAL_STACK);
    extracted_lifecycle(Distro::K3s);
}

#[test]
fn rke2_extracted_rotates_renews_and_survives_a_rebuild() {
    crate::support::requires!(ROOT, REAL_STACK);
    extracted_lifecycle(Distro::Rke2);
}

#[test]
fn k3s_minted_rotates_renews_and_survives_a_rebuild() {
    crate::support::requires!(ROOT, REAL_STACK);
    minted_lifecycle(Distro::K3s);
}

#[test]
fn rke2_minted_rotates_renews_and_survives_a_rebuild() {
    crate::support::requires!(ROOT, REAL_STACK);
    minted_lifecycle(Distro::Rke2);
}

#[test]
fn k3s_ca_rotation_keeps_the_old_generation_until_the_new_ca_is_minted_on() {
    crate::support::requires!(ROOT, REAL_STACK);
    ca_rotation(Distro::K3s);
}

/// The same script with `PRODUCT=rke2` (its data dir /var/lib/rancher/rke2), then
/// `rke2 certificate rotate-ca`.
#[test]
fn rke2_ca_rotation_keeps_the_old_generation_until_the_new_ca_is_minted_on() {
    crate::support::requires!(ROOT, REAL_STACK);
    ca_rotation(Distro::Rke2);
}

/// The files and ports as the distributions have them: the kubeconfig at its path,
/// root's, mode 0600 (0644 with `--write-kubeconfig-mode 0644`), naming
/// https://127.0.0.1:6443; the CA bundles and their nochain files; k3s's API server
/// on 6444 with 6443 relaying to it, RKE2's on 6443 itself; and spokekeeper reads the
/// kubeconfig over SSH from that path, as root and as the node user with sudo.
#[test]
fn k3s_and_rke2_files_and_ports_are_as_they_write_them() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let dir = tempfile::tempdir().unwrap();
    let etcd = support::realstack::kube::Etcd::start(dir.path());
    let lab = support::Lab::new();
    for (distro, mode) in [(Distro::K3s, None), (Distro::Rke2, Some(0o644))] {
        let mut node = lab.add_node(NodeOptions {
            api: false,
            api_port: KUBECONFIG_PORT,
            ..NodeOptions::default()
        });
        let mut opts = DistroOptions::new(distro);
        opts.kubeconfig_mode = mode;
        let spoke = DistroSpoke::on(&mut node, &etcd, dir.path(), opts);
        let p = distro.program();
        let path = node.kubeconfig_path.clone();
        assert!(
            path.ends_with(format!("etc/rancher/{p}/{p}.yaml")),
            "{}",
            path.display()
        );
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, mode.unwrap_or(0o600), "{p}");
        assert_eq!(meta.uid(), 0, "{p}");
        let tls = spoke.tls("");
        assert!(tls.ends_with(format!("var/lib/rancher/{p}/server/tls")));
        assert_eq!(std::fs::metadata(&tls).unwrap().mode() & 0o777, 0o700);
        let key = std::fs::metadata(spoke.tls("client-ca.key")).unwrap();
        assert_eq!(key.mode() & 0o777, 0o600);
        assert_eq!(
            spoke.certs("client-ca.nochain.crt"),
            [spoke.certs("client-ca.crt")[0].clone()]
        );
        assert_eq!(
            spoke.certs("server-ca.nochain.crt"),
            [spoke.certs("server-ca.crt")[0].clone()]
        );
        let admin = spoke.certs("client-admin.crt");
        assert_eq!(admin[1..], spoke.certs("client-ca.crt")[..]);

        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("server: https://127.0.0.1:6443\n"), "{text}");
        assert_eq!(client_chain(&text), admin);
        let api_port = distro.api_port();
        assert_eq!(spoke.api().port, api_port);
        assert_eq!(
            std::net::TcpStream::connect((node.address, 6444)).is_ok(),
            distro == Distro::K3s,
            "{p}: kube-apiserver on 6444 for k3s only"
        );
        // Through 6443 (k3s: the supervisor's port) the admin kubeconfig works.
        let hub_side = dir.path().join(format!("{p}-hub.yaml"));
        std::fs::write(
            &hub_side,
            text.replace("127.0.0.1:6443", &format!("{}:6443", node.address)),
        )
        .unwrap();
        list_namespaces(&hub_side).unwrap_or_else(|e| panic!("{p} on 6443: {e}"));

        let rt = tokio::runtime::Runtime::new().unwrap();
        for user in ["root", support::LAB_USER] {
            if user != "root" {
                let rule = format!(
                    "{} ALL=(root) NOPASSWD: /usr/bin/cat {}\n",
                    support::LAB_USER,
                    path.display()
                );
                node.set_sudoers(&rule).unwrap();
            }
            let read = rt
                .block_on(spokekeeper::spoke::read_over_ssh(
                    &node.address_string(),
                    &node.ssh_settings(user),
                    node.kubeconfig_path_str(),
                ))
                .unwrap_or_else(|e| panic!("{p} as {user}: {e}"));
            assert_eq!(read.expose(), text.as_bytes(), "{p} as {user}");
        }
    }
}
