//! spokekeeper against a spoke made by the real kubeadm (tests/support/src/realstack/kubeadm.rs):
//! its admin.conf (user kubernetes-admin in the group kubeadm:cluster-admins, bound by
//! the ClusterRoleBinding kubeadm creates with super-admin.conf) read over the node's real
//! sshd at /etc/kubernetes/admin.conf (`distro: kubeadm`), the real hub, the real Sealed
//! Secrets controller and Flux's kubeconfig loading. `kubeadm certs renew admin.conf` is
//! the expiring client certificate, `kubeadm reset` and a new init the rebuild.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use support::NodeOptions;
use support::fleet::Fleet;
use support::realstack::flux::LabFlux;
use support::realstack::hub::{HubOptions, RealHub};
use support::realstack::kubeadm::{
    ADMIN_CONF, CA_CRT, KubeadmOptions, KubeadmSpoke, SUPER_ADMIN_CONF,
};
use support::realstack::{list_namespaces, wait_until};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::our_bindings;

const PINNED: &str = "keys/sealed-secrets.pem";
const READ_ADMIN_CONF: &str = "cat /etc/kubernetes/admin.conf";

/// A real hub, one kubeadm spoke (spoke0) as `distro: kubeadm`, the fleet repo, and the
/// lab's Flux applying it.
struct Stack {
    flux: LabFlux,
    spoke: KubeadmSpoke,
    fleet: Fleet,
    hub: RealHub,
}

impl Stack {
    fn start(opts: &KubeadmOptions) -> Stack {
        let hub = RealHub::start(&HubOptions::default());
        let fleet = Fleet::new(&[NodeOptions {
            api: false,
            ..NodeOptions::default()
        }]);
        let spoke = KubeadmSpoke::init(&fleet.nodes[0], &hub.etcd, opts);
        // The spoke as a kubeadm user writes it: distro kubeadm (admin.conf's path), the
        // API at its advertise address.
        let text = std::fs::read_to_string(&fleet.config).unwrap();
        let path_line = text
            .lines()
            .find(|l| l.trim_start().starts_with("kubeconfig_path:"))
            .unwrap_or_else(|| panic!("{text}"))
            .to_string();
        let vectors = support::fleet::vectors().join("key/cert.pem");
        let text = text
            .replace(
                &path_line,
                &format!("    distro: kubeadm\n    api_server: {}", spoke.api_url()),
            )
            .replace(
                vectors.to_str().unwrap(),
                fleet.clone.join(PINNED).to_str().unwrap(),
            );
        std::fs::write(
            &fleet.config,
            format!(
                "{text}hub:\n  kubeconfig: {}\n  verify_timeout: 90s\n",
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
        let flux = LabFlux::start(hub.admin_kubeconfig(), &fleet.remote, "main");
        Stack {
            flux,
            spoke,
            fleet,
            hub,
        }
    }

    fn configure(&self, yaml: &str) {
        let mut text = std::fs::read_to_string(&self.fleet.config).unwrap();
        text.push_str(yaml);
        std::fs::write(&self.fleet.config, text).unwrap();
    }

    fn rotate_json(&self, args: &[&str]) -> (Value, String) {
        let (code, report, err) = self.fleet.rotate_json(args);
        assert_eq!(
            code,
            0,
            "{report:#}\n{err}\n--- the lab's Flux:\n{}",
            self.flux.log()
        );
        (report, err)
    }

    /// The committed kubeconfig, unsealed with the hub controller's keys.
    fn committed_kubeconfig(&self, name: &str) -> PathBuf {
        let sealed = self.hub.dir().join("committed.yaml");
        std::fs::write(&sealed, self.fleet.remote_file(0)).unwrap();
        let keys = self.hub.sealing_keys_files();
        let secret = self.hub.recovery_unseal(&sealed, &keys).unwrap();
        use base64::Engine as _;
        let value = base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["value"].as_str().expect("data.value"))
            .unwrap();
        let path = self.hub.dir().join(name);
        std::fs::write(&path, value).unwrap();
        path
    }

    /// Waits until the hub's controller unsealed the commit, then asks the spoke, with
    /// Flux's own kubeconfig loading, who the committed credential is.
    fn flux_whoami(&self) -> Value {
        let expected = std::fs::read(self.committed_kubeconfig("expected.yaml")).unwrap();
        wait_until(
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
        self.hub
            .flux_calls_spoke("flux-system", "spoke0-kubeconfig")
            .unwrap()
    }

    /// Every command the hub's key ran on the node read admin.conf, and there was one.
    fn assert_read_admin_conf_only(&self) {
        let commands = self.spoke.ssh_commands();
        assert!(!commands.is_empty(), "the node saw no SSH command");
        for c in &commands {
            assert_eq!(c, READ_ADMIN_CONF, "{commands:?}");
        }
    }
}

/// The first client certificate of a kubeconfig file (DER).
fn client_cert_der(kubeconfig: &str) -> Vec<u8> {
    let line = kubeconfig
        .lines()
        .find(|l| l.trim_start().starts_with("client-certificate-data:"))
        .unwrap_or_else(|| panic!("no client certificate"));
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(line.split_whitespace().last().unwrap())
        .unwrap();
    pem_der(&pem)
}

fn pem_der(pem: &[u8]) -> Vec<u8> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem).expect("a PEM certificate");
    p.contents
}

/// Subject CN, subject O, notAfter (Unix seconds) of a certificate.
fn names(der: &[u8]) -> (String, Vec<String>, i64) {
    let (_, cert) = X509Certificate::from_der(der).expect("a certificate");
    let cn = cert
        .subject()
        .iter_common_name()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let orgs = cert
        .subject()
        .iter_organization()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    (cn, orgs, cert.validity().not_after.timestamp())
}

/// notAfter less notBefore of a certificate, in seconds.
fn lifetime(der: &[u8]) -> i64 {
    let (_, cert) = X509Certificate::from_der(der).expect("a certificate");
    cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp()
}

/// What kubeadm's renewal signs for `validity` seconds: notBefore is backdated five
/// minutes, notAfter is the renewal's time plus the validity.
fn renewed_lifetime(validity: i64) -> i64 {
    validity + 300
}

const YEAR: i64 = 365 * 86_400;

/// Whether `der` is signed by the CA certificate in `ca_pem`.
fn signed_by(der: &[u8], ca_pem: &str) -> bool {
    let ca_der = pem_der(ca_pem.as_bytes());
    let (_, ca) = X509Certificate::from_der(&ca_der).unwrap();
    let (_, cert) = X509Certificate::from_der(der).unwrap();
    cert.issuer() == ca.subject() && cert.verify_signature(Some(ca.public_key())).is_ok()
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// Extracted mode on a kubeadm control plane: spokekeeper commits admin.conf as kubeadm
/// wrote it (kubernetes-admin in kubeadm:cluster-admins, not system:masters) and reads
/// nothing else; a certificate near its end is reported until `kubeadm certs renew
/// admin.conf`, then rotated as client-expiring (same CA): renewed at the five days the
/// cluster stores it is committed and still reported, renewed for a year once the stored
/// validity is a year it settles; `kubeadm reset` and a new init (new CA) is rotated as
/// ca-changed. super-admin.conf is read only when configured.
#[test]
fn kubeadm_admin_conf_is_extracted_renewed_and_rebuilt() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    // Five days: within renew_before (30d), as a year-old admin.conf would be.
    let mut stack = Stack::start(&KubeadmOptions {
        certificate_validity: Some("120h".into()),
        ..KubeadmOptions::default()
    });
    let admin = stack.spoke.read(ADMIN_CONF);
    assert!(
        admin.contains(&format!("server: {}\n", stack.spoke.api_url())),
        "{admin}"
    );
    let (cn, orgs, first_not_after) = names(&client_cert_der(&admin));
    assert_eq!(cn, "kubernetes-admin");
    assert_eq!(orgs, ["kubeadm:cluster-admins"]);
    let super_admin = stack.spoke.read(SUPER_ADMIN_CONF);
    assert_eq!(names(&client_cert_der(&super_admin)).1, ["system:masters"]);

    let (report, err) = stack.rotate_json(&["--all"]);
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}\n{err}");
    assert_eq!(spoke["reason"]["kind"], "initial", "{spoke:#}");
    assert_eq!(spoke["user"], "kubernetes-admin", "{spoke:#}");
    let who = stack.flux_whoami();
    assert_eq!(who["username"], "kubernetes-admin", "{who}");
    let groups = who["groups"].to_string();
    assert!(groups.contains("kubeadm:cluster-admins"), "{who}");
    assert!(!groups.contains("system:masters"), "{who}");
    stack.assert_read_admin_conf_only();
    let first_ca = spoke["ca_sha256"].clone();

    // Five days left: the node has not renewed it, nothing is committed.
    let commits = stack.fleet.remote_log().len();
    let (report, _) = stack.rotate_json(&["--all"]);
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "not-renewed", "{spoke:#}");
    assert_eq!(spoke["reason"]["kind"], "client-expiring", "{spoke:#}");
    assert_eq!(stack.fleet.remote_log().len(), commits);

    // kubeadm renews it for the validity the cluster stores, the install's five days: a
    // new certificate, still within renew_before, committed once and then reported.
    let stored = stack.spoke.stored_cluster_configuration();
    assert!(
        stored.contains("certificateValidityPeriod: 120h0m0s\n"),
        "{stored}"
    );
    let ca_before = stack.spoke.read(CA_CRT);
    let out = stack.spoke.renew_admin_conf();
    assert!(out.contains("renewed"), "{out}");
    let short = client_cert_der(&stack.spoke.read(ADMIN_CONF));
    assert_eq!(lifetime(&short), renewed_lifetime(120 * 3600));
    assert!(signed_by(&short, &ca_before));
    let (report, err) = stack.rotate_json(&["--all"]);
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}\n{err}");
    assert_eq!(spoke["reason"]["kind"], "client-expiring", "{spoke:#}");
    let committed = std::fs::read_to_string(stack.committed_kubeconfig("short.yaml")).unwrap();
    assert_eq!(client_cert_der(&committed), short);
    let (report, _) = stack.rotate_json(&["--all"]);
    assert_eq!(report["spokes"][0]["action"], "not-renewed", "{report:#}");

    // The operator stores a year (kubeadm's default) and renews: the same CA, a new
    // certificate for a year.
    stack.spoke.store_certificate_validity(None);
    let stored = stack.spoke.stored_cluster_configuration();
    assert!(
        stored.contains("certificateValidityPeriod: 8760h0m0s\n"),
        "{stored}"
    );
    let out = stack.spoke.renew_admin_conf();
    assert!(out.contains("renewed"), "{out}");
    assert_eq!(stack.spoke.read(CA_CRT), ca_before);
    let renewed = stack.spoke.read(ADMIN_CONF);
    let (cn, orgs, renewed_not_after) = names(&client_cert_der(&renewed));
    assert_eq!(cn, "kubernetes-admin");
    assert_eq!(orgs, ["kubeadm:cluster-admins"]);
    assert!(
        renewed_not_after > now() + 300 * 86_400,
        "{renewed_not_after}"
    );
    assert_eq!(lifetime(&client_cert_der(&renewed)), renewed_lifetime(YEAR));
    assert!(signed_by(&client_cert_der(&renewed), &ca_before));
    let (report, err) = stack.rotate_json(&["--all"]);
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}\n{err}");
    assert_eq!(spoke["reason"]["kind"], "client-expiring", "{spoke:#}");
    assert_eq!(spoke["ca_sha256"], first_ca, "{spoke:#}");
    let committed = std::fs::read_to_string(stack.committed_kubeconfig("renewed.yaml")).unwrap();
    assert_eq!(
        client_cert_der(&committed),
        client_cert_der(&renewed),
        "the renewed certificate is committed"
    );
    assert!(renewed_not_after > first_not_after);
    assert_eq!(stack.flux_whoami()["username"], "kubernetes-admin");
    let (report, _) = stack.rotate_json(&["--all"]);
    assert_eq!(report["spokes"][0]["action"], "healthy", "{report:#}");

    reset_and_init_is_rotated_as_ca_changed(&mut stack, &ca_before, &first_ca);

    super_admin_conf_is_read_when_configured(&stack);
}

/// kubeadm reset and a new init: new CAs; the committed credential is refused, and the
/// next tick rotates it as ca-changed.
fn reset_and_init_is_rotated_as_ca_changed(stack: &mut Stack, ca_before: &str, first_ca: &Value) {
    stack.spoke.reset_and_init(&stack.hub.etcd);
    assert_ne!(stack.spoke.read(CA_CRT), ca_before);
    let stale = stack
        .hub
        .flux_calls_spoke("flux-system", "spoke0-kubeconfig");
    assert!(stale.is_err(), "{stale:?}");
    let (report, err) = stack.rotate_json(&["--all"]);
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}\n{err}");
    assert_eq!(spoke["reason"]["kind"], "ca-changed", "{spoke:#}");
    assert_ne!(&spoke["ca_sha256"], first_ca, "{spoke:#}");
    let who = stack.flux_whoami();
    assert_eq!(who["username"], "kubernetes-admin", "{who}");
    stack.assert_read_admin_conf_only();
}

/// Configured to, spokekeeper reads super-admin.conf, and the node sees it.
fn super_admin_conf_is_read_when_configured(stack: &Stack) {
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    std::fs::write(
        &stack.fleet.config,
        text.replace(
            "    distro: kubeadm\n",
            &format!("    distro: kubeadm\n    kubeconfig_path: {SUPER_ADMIN_CONF}\n"),
        ),
    )
    .unwrap();
    let (report, err) = stack.rotate_json(&["spoke0", "--force"]);
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}\n{err}");
    assert_eq!(spoke["user"], "kubernetes-super-admin", "{spoke:#}");
    assert_eq!(
        stack.spoke.ssh_commands().last().map(String::as_str),
        Some("cat /etc/kubernetes/super-admin.conf")
    );
    stack.fleet.assert_no_plaintext_of(
        &stack
            .fleet
            .key_needles_unsealing(&recovery_keys(&stack.hub)),
    );
}

fn recovery_keys(hub: &RealHub) -> Vec<spokekeeper::seal::RecoveryKey> {
    hub.sealing_keys()
        .iter()
        .flat_map(|pem| {
            spokekeeper::seal::RecoveryKey::load_all(pem.as_bytes(), "controller key").unwrap()
        })
        .collect()
}

fn minted_user(v: &Value, generation: u32) -> bool {
    v.as_str()
        .is_some_and(|u| u.starts_with(&format!("spokekeeper:hub:spoke0:{generation}:")))
}

/// Minted mode on a kubeadm control plane, with admin.conf as the admin credential: the
/// controller manager kubeadm configured (`--cluster-signing-cert-file`, the cluster CA)
/// signs the minted certificate; the minted generation renews at renew_before (after
/// `kubeadm certs renew admin.conf`) and the old one is revoked once the hub took the
/// new; after `kubeadm reset` (which empties the local etcd) and a new init, the next
/// generation is minted on the new CA and the old one is refused. super-admin.conf is never
/// read.
#[test]
fn kubeadm_minted_credentials_are_signed_by_the_cluster_ca_renewed_and_rebuilt() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = Stack::start(&KubeadmOptions::default());
    stack.configure("credential:\n  mode: minted\n  ttl: 1h\n  renew_before: 3590s\n");
    let manifest = stack
        .spoke
        .read("/etc/kubernetes/manifests/kube-controller-manager.yaml");
    assert!(
        manifest.contains("- --cluster-signing-cert-file=/etc/kubernetes/pki/ca.crt\n"),
        "{manifest}"
    );

    let (report, err) = stack.rotate_json(&["--all"]);
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}\n{err}");
    assert!(minted_user(&spoke["user"], 1), "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 1, "{spoke:#}");
    assert!(minted_user(&stack.flux_whoami()["username"], 1));
    let gen1 = stack.committed_kubeconfig("gen1.yaml");
    let minted = std::fs::read_to_string(&gen1).unwrap();
    let minted_der = client_cert_der(&minted);
    let ca = stack.spoke.read(CA_CRT);
    assert!(
        signed_by(&minted_der, &ca),
        "the minted certificate is signed by the cluster CA"
    );
    assert_ne!(
        minted_der,
        client_cert_der(&stack.spoke.read(ADMIN_CONF)),
        "admin.conf is not committed"
    );
    assert_eq!(
        our_bindings(&stack.spoke.api),
        ["spokekeeper.hub.spoke0.g1"]
    );
    list_namespaces(&gen1).expect("generation 1 works");
    stack.assert_read_admin_conf_only();

    // kubeadm renews admin.conf; renew_before (3590s of 1h) is reached 10s after the
    // mint: generation 2, minted with the renewed admin.conf; generation 1 revoked.
    stack.spoke.renew_admin_conf();
    let admin = client_cert_der(&stack.spoke.read(ADMIN_CONF));
    assert_eq!(lifetime(&admin), renewed_lifetime(YEAR));
    std::thread::sleep(Duration::from_secs(11));
    let (report, err) = stack.rotate_json(&["--all"]);
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}\n{err}");
    assert_eq!(spoke["reason"]["kind"], "client-expiring", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 2, "{spoke:#}");
    assert_eq!(
        spoke["revoked"],
        serde_json::json!(["spokekeeper.hub.spoke0.g1"]),
        "{spoke:#}"
    );
    assert!(minted_user(&stack.flux_whoami()["username"], 2));
    let refused = list_namespaces(&gen1).expect_err("generation 1 is revoked");
    assert!(refused.to_lowercase().contains("forbidden"), "{refused}");
    assert_eq!(
        our_bindings(&stack.spoke.api),
        ["spokekeeper.hub.spoke0.g2"]
    );
    let gen2 = stack.committed_kubeconfig("gen2.yaml");

    // kubeadm reset and a new init: generation 3 on the new CA; generation 2 is refused.
    stack.spoke.reset_and_init(&stack.hub.etcd);
    let new_ca = stack.spoke.read(CA_CRT);
    assert_ne!(new_ca, ca);
    let (report, err) = stack.rotate_json(&["--all"]);
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}\n{err}");
    assert_eq!(spoke["reason"]["kind"], "ca-changed", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 3, "{spoke:#}");
    // Generation 2's binding went with the old etcd data: nothing left to revoke.
    assert!(
        spoke["revoked"].as_array().is_none_or(Vec::is_empty),
        "{spoke:#}"
    );
    assert!(minted_user(&stack.flux_whoami()["username"], 3));
    let gen3 = stack.committed_kubeconfig("gen3.yaml");
    let gen3_der = client_cert_der(&std::fs::read_to_string(&gen3).unwrap());
    assert!(signed_by(&gen3_der, &new_ca));
    list_namespaces(&gen3).expect("generation 3 works");
    list_namespaces(&gen2).expect_err("generation 2 is of the old cluster");
    assert_eq!(
        our_bindings(&stack.spoke.api),
        ["spokekeeper.hub.spoke0.g3"]
    );
    stack.assert_read_admin_conf_only();
    stack.fleet.assert_no_plaintext_of(
        &stack
            .fleet
            .key_needles_unsealing(&recovery_keys(&stack.hub)),
    );
}

/// A kubeadm control plane on an external etcd (kubeadm's `etcd.external`), minted: `kubeadm
/// reset` leaves etcd's data, so the reinstall (new CA) still holds generation 1's
/// ClusterRoleBinding; generation 2 is minted on the new CA and, once the hub took it,
/// generation 1's binding is deleted.
#[test]
fn a_kubeadm_reinstall_over_kept_etcd_revokes_the_old_generation() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = Stack::start(&KubeadmOptions {
        external_etcd: true,
        ..KubeadmOptions::default()
    });
    stack.configure("credential:\n  mode: minted\n  ttl: 1h\n");
    let manifest = stack
        .spoke
        .read("/etc/kubernetes/manifests/kube-apiserver.yaml");
    assert!(
        manifest.contains(&format!("- --etcd-servers={}\n", stack.hub.etcd.url)),
        "{manifest}"
    );
    let (report, err) = stack.rotate_json(&["--all"]);
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}\n{err}");
    assert_eq!(spoke["credential"]["generation"], 1, "{spoke:#}");
    assert_eq!(
        our_bindings(&stack.spoke.api),
        ["spokekeeper.hub.spoke0.g1"]
    );

    stack.spoke.reset_and_init(&stack.hub.etcd);
    assert_eq!(
        our_bindings(&stack.spoke.api),
        ["spokekeeper.hub.spoke0.g1"]
    );
    let (report, err) = stack.rotate_json(&["--all"]);
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}\n{err}");
    assert_eq!(spoke["reason"]["kind"], "ca-changed", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 2, "{spoke:#}");
    assert_eq!(
        spoke["revoked"],
        serde_json::json!(["spokekeeper.hub.spoke0.g1"]),
        "{spoke:#}"
    );
    assert!(minted_user(&stack.flux_whoami()["username"], 2));
    assert_eq!(
        our_bindings(&stack.spoke.api),
        ["spokekeeper.hub.spoke0.g2"]
    );
    stack.assert_read_admin_conf_only();
}
