//! `spokekeeper add` on the lab's spoke nodes: the spoke is appended to spokekeeper.yaml,
//! rotated, and its credential committed with the Flux objects that deploy to it in one
//! commit and one push; what exists is never overwritten, and a failure writes nothing.
//! The real controllers judge the objects in realstack/flux_add/.

use crate::support;

use spokekeeper_lab::hub::SimSpoke;
use support::NodeOptions;
use support::fleet::{Fleet, config};
use support::git::{commit, git};

/// Two lab nodes; spokekeeper.yaml names only spoke0, and its global `ssh:` reaches
/// node 1 (as an operator's defaults would reach a new node).
fn fleet() -> Fleet {
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    let known_hosts = fleet.nodes[1].known_hosts_path.clone();
    reach_node1(&fleet, &known_hosts);
    fleet
}

/// spokekeeper.yaml: spoke0, and global `ssh:` settings for node 1 with `known_hosts`.
fn reach_node1(fleet: &Fleet, known_hosts: &std::path::Path) {
    config(&fleet.clone, &fleet.nodes[..1])
        .top(&ssh_to_node1(fleet, known_hosts))
        .write(&fleet.config)
        .unwrap();
}

/// Global `ssh:` settings that reach node 1.
fn ssh_to_node1(fleet: &Fleet, known_hosts: &std::path::Path) -> String {
    let n1 = &fleet.nodes[1];
    format!(
        "ssh:\n  port: {}\n  identity: \"{}\"\n  known_hosts: \"{}\"\n  connect_timeout: 5s\n",
        n1.ssh_port,
        n1.identity_path.display(),
        known_hosts.display()
    )
}

fn add(fleet: &Fleet, extra: &[&str]) -> (i32, String, String) {
    fleet.add(1, extra)
}

/// A failed add committed nothing and left spokekeeper.yaml as it was.
fn left_as_it_was(fleet: &Fleet, remote_log: &[String], config: &str) {
    assert_eq!(fleet.remote_log(), remote_log);
    assert_eq!(std::fs::read_to_string(&fleet.config).unwrap(), config);
}

/// Pushes `files` to the remote's main from the seed clone, as a person would.
fn push_to_remote(fleet: &Fleet, files: &[(&str, &str)]) {
    let seed = fleet.dir.path().join("seed");
    git(&seed, &["pull", "--quiet", "origin", "main"]);
    for (rel, text) in files {
        let path = seed.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    git(&seed, &["add", "-A"]);
    commit(&seed, "the hub's root");
    git(&seed, &["push", "--quiet", "origin", "HEAD:main"]);
}

fn files_of(fleet: &Fleet, rev: &str) -> Vec<String> {
    let mut files: Vec<String> = git(
        &fleet.remote,
        &["diff-tree", "--no-commit-id", "--name-only", "-r", rev],
    )
    .lines()
    .map(str::to_string)
    .collect();
    files.sort();
    files
}

#[test]
fn add_commits_the_credential_with_its_flux_objects_in_one_commit_and_one_push() {
    crate::support::requires!(ROOT);
    let fleet = fleet();
    let root = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n# spokes\nresources:\n  - spoke0.yaml\n";
    push_to_remote(
        &fleet,
        &[
            ("fluxcd/kustomization.yaml", root),
            ("spokes/spoke1/apps/configmap.yaml", "kind: ConfigMap\n"),
        ],
    );
    let before = fleet.remote_log().len();
    let config_before = std::fs::read_to_string(&fleet.config).unwrap();

    let (code, out, err) = add(&fleet, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    // The node recipe and the host-key step, for this node's kubeconfig.
    let n1 = &fleet.nodes[1];
    assert!(
        out.contains(&format!(
            "NOPASSWD: /usr/bin/cat {}",
            n1.kubeconfig_path_str()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "ssh-keyscan -p {} -t ed25519 {}",
            n1.ssh_port, n1.address
        )),
        "{out}"
    );

    // One commit, pushed: the credential, the Kustomizations, the missing directory's
    // kustomization and the root's listing; the existing apps directory is left alone.
    let log = fleet.remote_log();
    assert_eq!(log.len(), before + 1, "{log:?}");
    assert_eq!(
        files_of(&fleet, "main"),
        [
            "fluxcd/kustomization.yaml",
            "fluxcd/spoke1-kubeconfig-sealed.yaml",
            "fluxcd/spoke1.yaml",
            "spokes/spoke1/helmreleases/kustomization.yaml",
        ]
    );
    let listed = git(&fleet.remote, &["show", "main:fluxcd/kustomization.yaml"]);
    assert_eq!(
        listed,
        format!("{root}  - spoke1-kubeconfig-sealed.yaml\n  - spoke1.yaml\n")
    );
    let objects = git(&fleet.remote, &["show", "main:fluxcd/spoke1.yaml"]);
    assert!(
        objects.contains("path: ./spokes/spoke1/apps\n")
            && objects.contains("path: /spec/kubeConfig\n"),
        "{objects}"
    );
    // The unsealed credential reaches node 1, sealed for spoke 1's own namespace.
    let kc = spokekeeper::kubeconfig::parse(fleet.unsealed_in(1, "spoke1").expose()).unwrap();
    let kc = spokekeeper::kubeconfig::sanitize(&kc, "spoke1").unwrap();
    assert_eq!(kc.server().host_str(), Some(n1.address_string().as_str()));

    // spokekeeper.yaml: the old text, then the spoke; it loads, and a second add of the
    // same name is refused, naming the line, with nothing committed.
    let config_after = std::fs::read_to_string(&fleet.config).unwrap();
    assert!(config_after.starts_with(&config_before), "{config_after}");
    let loaded = spokekeeper::config::Config::load(&fleet.config).unwrap();
    assert_eq!(loaded.spokes[1].name, "spoke1");
    let (code, _, err) = add(&fleet, &[]);
    assert_ne!(code, 0);
    assert!(
        err.contains("a spoke named \"spoke1\" is already configured (spokes[1])")
            && err.contains("line "),
        "{err}"
    );
    assert_eq!(fleet.remote_log().len(), before + 1);
    fleet.assert_no_plaintext();
}

#[test]
fn add_overwrites_nothing_and_a_failure_leaves_the_configuration_as_it_was() {
    crate::support::requires!(ROOT);
    let fleet = fleet();
    push_to_remote(&fleet, &[("fluxcd/spoke1.yaml", "# someone else's\n")]);
    let before = fleet.remote_log();
    let config_before = std::fs::read_to_string(&fleet.config).unwrap();
    let (code, _, err) = add(&fleet, &[]);
    assert_ne!(code, 0);
    assert!(
        err.contains("fluxcd/spoke1.yaml exists in the fleet repo: add overwrites nothing"),
        "{err}"
    );
    left_as_it_was(&fleet, &before, &config_before);

    // A node that cannot be reached: the rotation fails, nothing is committed or written.
    let (code, _, err) = add(
        &fleet,
        &["--root", "clusters/hub", "--ssh-host", "127.255.0.1"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("spoke1 was not added"), "{err}");
    left_as_it_was(&fleet, &before, &config_before);
    let status = git(&fleet.clone, &["status", "--porcelain"]);
    assert_eq!(status, "", "the clone is as the remote has it");
}

/// Strict known_hosts: node 1's host key is not known, so add prints the host-key step
/// and fails at extract; the key is not learned, nothing is committed or configured.
#[test]
fn add_trusts_no_host_key_on_first_use() {
    crate::support::requires!(ROOT);
    let fleet = fleet();
    let known_hosts = fleet.dir.path().join("empty_known_hosts");
    std::fs::write(&known_hosts, "").unwrap();
    reach_node1(&fleet, &known_hosts);
    let before = fleet.remote_log();
    let config_before = std::fs::read_to_string(&fleet.config).unwrap();
    let (code, out, err) = add(&fleet, &[]);
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(&format!("cat spoke1.hostkey >> {}", known_hosts.display())),
        "{out}"
    );
    assert!(
        err.contains("spoke1: failed at extract")
            && err.contains("refusing to trust it on first use"),
        "{err}"
    );
    assert!(err.contains("spoke1 was not added"), "{err}");
    assert_eq!(std::fs::read_to_string(&known_hosts).unwrap(), "");
    left_as_it_was(&fleet, &before, &config_before);
}

/// What add commits beside a credential is checked against the target branch at commit
/// time: a file that appeared there, or changed, since add read it stops the spoke's
/// commit (nothing committed, the clone put back); as read, it is committed with the
/// credential in one commit.
#[tokio::test(flavor = "multi_thread")]
async fn files_beside_a_credential_commit_only_as_add_read_them() {
    crate::support::requires!(ROOT);
    use spokekeeper::rotate::{self, Beside, Context, Options, Outcome};
    let fleet = Fleet::new(&[NodeOptions::default()]);
    push_to_remote(&fleet, &[("fluxcd/kustomization.yaml", "resources: []\n")]);
    let config = spokekeeper::config::Config::load(&fleet.config).unwrap();
    let sealing = spokekeeper::seal::SealingKey::from_pem(
        &std::fs::read(support::fleet::vectors().join("key/cert.pem")).unwrap(),
        "cert.pem",
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let repo = spokekeeper::repo::Repo::open(&config.repo).await.unwrap();
    let ctx = Context::new(config, sealing, repo).unwrap();
    let tick = |beside: Vec<Beside>| {
        let opts = Options {
            concurrency: 1,
            force: true,
            beside: [("spoke0".to_string(), beside)].into(),
            ..Options::default()
        };
        let ctx = &ctx;
        async move { rotate::tick(ctx, &opts).await.unwrap() }
    };
    let new = |rel: &str, was: Option<&str>| Beside {
        rel: rel.into(),
        bytes: b"kind: Kustomization\n".to_vec(),
        was: was.map(|w| w.as_bytes().to_vec()),
    };
    let before = fleet.remote_log();
    for (beside, why) in [
        (new("fluxcd/kustomization.yaml", None), "exists now"),
        (
            new("fluxcd/kustomization.yaml", Some("resources: [x]\n")),
            "changed",
        ),
        (new("fluxcd/gone.yaml", Some("x\n")), "is gone"),
    ] {
        let report = tick(vec![new("fluxcd/spoke0.yaml", None), beside]).await;
        let Outcome::Failed(e) = &report.spokes[0].outcome else {
            panic!("{:?}", report.spokes[0].outcome)
        };
        assert_eq!(e.stage(), rotate::Stage::Commit);
        assert!(
            e.to_string().contains(&format!(
                " {why} on the target branch: nothing was committed"
            )),
            "{e}"
        );
        assert_eq!(fleet.remote_log(), before);
        assert_eq!(git(&fleet.clone, &["status", "--porcelain"]), "");
    }
    let report = tick(vec![
        new("fluxcd/spoke0.yaml", None),
        new("fluxcd/kustomization.yaml", Some("resources: []\n")),
    ])
    .await;
    assert!(
        matches!(report.spokes[0].outcome, Outcome::Rotated { .. }),
        "{:?}",
        report.spokes[0].outcome
    );
    assert_eq!(fleet.remote_log().len(), before.len() + 1);
    assert_eq!(
        files_of(&fleet, "main"),
        [
            "fluxcd/kustomization.yaml",
            "fluxcd/spoke0-kubeconfig-sealed.yaml",
            "fluxcd/spoke0.yaml"
        ]
    );
}

const ONBOARDED: [&str; 4] = [
    "fluxcd/kustomization.yaml",
    "fluxcd/spoke1-kubeconfig-sealed.yaml",
    "fluxcd/spoke1.yaml",
    "spokes/spoke1/helmreleases/kustomization.yaml",
];

/// With `hub:`, ROOT is the path of the Kustomization whose labels the configured spokes'
/// SealedSecrets carry on the hub (here `./`, whose kustomization.yaml lists fluxcd/'s
/// files), not the credential's directory: a path leaving the repo is refused, naming
/// the Kustomization, and then the spoke's files are listed there.
#[test]
fn with_a_hub_add_finds_the_root_kustomization_through_its_labels() {
    crate::support::requires!(ROOT);
    let l = crate::verify::hub::lab(2, "  verify_timeout: 20s\n");
    let known_hosts = l.fleet.nodes[1].known_hosts_path.clone();
    l.builder_of(1)
        .top(&ssh_to_node1(&l.fleet, &known_hosts))
        .write(&l.fleet.config)
        .unwrap();
    // spoke1's own namespace, where add puts its Secret and Kustomizations.
    l.hub.add_spoke(SimSpoke {
        secret_namespace: "spoke1".into(),
        secret_name: "spoke1-kubeconfig".into(),
        kustomization_namespace: "spoke1".into(),
        kustomization_name: "spoke1".into(),
        file: "fluxcd/spoke1-kubeconfig-sealed.yaml".into(),
    });
    l.hub.add_root_at("../../etc");
    let (code, report, err) = l.fleet.rotate_json(&["spoke0"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let root = "resources:\n  - fluxcd/spoke0-kubeconfig-sealed.yaml\n";
    push_to_remote(&l.fleet, &[("kustomization.yaml", root)]);
    let before = l.fleet.remote_log();

    let (code, _, err) = add(&l.fleet, &[]);
    assert_ne!(code, 0);
    assert!(
        err.contains("Kustomization flux-system/infra applies the spokes' credentials on the hub, but its spec.path \"../../etc\" leaves the fleet repo: pass --root"),
        "{err}"
    );
    assert_eq!(l.fleet.remote_log(), before);

    l.hub.add_root_at("./");
    // Exit 1 whatever ROOT: the lab serves no GitRepository in spoke1's namespace, so
    // the hub check after the push fails. The commit is what is judged here.
    let (_, _, err) = add(&l.fleet, &[]);
    assert!(
        err.contains("ROOT is ./, the path of Kustomization flux-system/infra"),
        "{err}"
    );
    assert_eq!(
        files_of(&l.fleet, "main"),
        [
            "fluxcd/spoke1-kubeconfig-sealed.yaml",
            "kustomization.yaml",
            "spoke1.yaml",
            "spokes/spoke1/apps/kustomization.yaml",
            "spokes/spoke1/helmreleases/kustomization.yaml",
        ]
    );
    let listed = git(&l.fleet.remote, &["show", "main:kustomization.yaml"]);
    assert_eq!(
        listed,
        format!("{root}  - fluxcd/spoke1-kubeconfig-sealed.yaml\n  - spoke1.yaml\n")
    );
}

/// A spokekeeper.yaml add cannot write (the chart's ConfigMap; here its mode): add prints
/// the exact entry for config.spokes and commits nothing; once the file holds that entry,
/// add onboards the spoke as configured and leaves the file alone.
#[test]
fn a_read_only_configuration_gets_the_entry_printed_and_nothing_committed_until_it_has_it() {
    crate::support::requires!(ROOT);
    use std::os::unix::fs::PermissionsExt;
    let fleet = fleet();
    let read_only = |text: &str| {
        let _ = std::fs::set_permissions(&fleet.config, std::fs::Permissions::from_mode(0o644));
        std::fs::write(&fleet.config, text).unwrap();
        std::fs::set_permissions(&fleet.config, std::fs::Permissions::from_mode(0o444)).unwrap();
    };
    let config_before = std::fs::read_to_string(&fleet.config).unwrap();
    read_only(&config_before);
    let before = fleet.remote_log();

    let (code, _, err) = add(&fleet, &[]);
    assert_ne!(code, 0);
    let address = fleet.nodes[1].address_string();
    let entry = format!(
        "- name: spoke1\n  address: \"{address}\"\n  distro: k3s\n  kubeconfig_path: \"{}\"\n  secret: {{namespace: \"spoke1\"}}\n",
        fleet.nodes[1].kubeconfig_path_str()
    );
    assert!(err.contains(&format!("cannot be written: add this entry to the Helm chart's config.spokes (or to the file's spokes:), roll it out, and run add again:\n\n{entry}\n")), "{err}");
    assert!(
        err.contains("spoke1 was not added") && err.contains("nothing was committed"),
        "{err}"
    );
    left_as_it_was(&fleet, &before, &config_before);

    // The entry rolled out (nested under spokes:, as the chart renders its values).
    let nested: String = entry.lines().map(|l| format!("  {l}\n")).collect();
    let rolled_out = format!("{config_before}{nested}");
    read_only(&rolled_out);
    // The configuration decides: a flag saying otherwise is refused before any rotation.
    let (code, _, err) = add(&fleet, &["--namespace", "elsewhere"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--namespace \"elsewhere\" is not the spoke's secret.namespace \"spoke1\""),
        "{err}"
    );
    assert_eq!(fleet.remote_log(), before);
    let (code, out, err) = add(&fleet, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("onboarded spoke1 as"), "{err}");
    assert_eq!(fleet.remote_log().len(), before.len() + 1);
    assert!(files_of(&fleet, "main").contains(&"fluxcd/spoke1.yaml".to_string()));
    assert_eq!(std::fs::read_to_string(&fleet.config).unwrap(), rolled_out);
}

/// spoke0 rotated into the fleet repo with its credential alone, spoke1 added with its Flux
/// objects: `check` names spoke0, and only spoke0, as onboarded with the credential alone.
#[test]
fn check_names_a_spoke_onboarded_with_its_credential_alone() {
    crate::support::requires!(ROOT);
    let fleet = fleet();
    let (code, out, err) = fleet.rotate(&["spoke0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = add(&fleet, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    let (_, out, err) = fleet.run(&["check", "-o", "json"]);
    let report: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let flux: Vec<(&str, &str)> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["cert"] == "flux")
        .map(|f| (f["spoke"].as_str().unwrap(), f["detail"].as_str().unwrap()))
        .collect();
    assert_eq!(flux.len(), 1, "{report:#}");
    assert_eq!(flux[0].0, "spoke0");
    assert!(
        flux[0].1.starts_with("onboarded with its credential alone: fluxcd/spoke0-kubeconfig-sealed.yaml is committed, but no Flux object in the fleet repo reads Secret flux-system/spoke0-kubeconfig"),
        "{}",
        flux[0].1
    );
}

mod federated;
mod review;
