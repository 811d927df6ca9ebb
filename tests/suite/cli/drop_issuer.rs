//! `spokekeeper revoke SPOKE --drop-issuer` on the lab: the emulated hub's issuer, and a
//! node whose emulated API server reads the file the federated recipe's script writes
//! over the node's sshd. The real components: realstack::flux_real::federated_drop.

use crate::support;

use std::sync::Arc;

use spokekeeper_lab::config::ConfigBuilder;
use spokekeeper_lab::federation::Issuer;
use support::federation::{ISSUER, LabHub, node_options};
use support::fleet::{Fleet, vectors};
use support::realstack::bearer::Bearer;

/// What the node's API server says of a fresh token of kustomize-controller's for
/// `audience`: its user, or the status of its refusal.
fn whoami(fleet: &Fleet, hub: &LabHub, audience: &str) -> Result<String, u16> {
    let who = ("flux-system", "kustomize-controller", "uid-kc");
    let token = hub.issuer.token(who, &[audience.to_string()], 600);
    let node = &fleet.nodes[0];
    Bearer::new(&node.api_url, &node.pki().parts.ca_pem, &token).whoami()
}

fn file(fleet: &Fleet) -> String {
    let path = fleet.nodes[0]
        .dir
        .join("spokekeeper/authentication-config.yaml");
    std::fs::read_to_string(path).unwrap()
}

/// A drop refuses a fresh hub token at once and commits nothing; the next rotations
/// (plain, `--all --force`, a revoke) refuse to trust the hub again, naming the drop, and
/// leave the file as it is; `rotate spoke0 --force` trusts the hub again.
#[test]
fn a_dropped_issuer_stays_dropped_until_rotate_force_names_the_spoke() {
    crate::support::requires!(ROOT);
    let issuer = Arc::new(Issuer::new(ISSUER));
    let mut fleet = Fleet::new(&[node_options(&issuer)]);
    // Not federated yet: the flag is refused before anything is done.
    let (code, _, err) = fleet.run(&["revoke", "spoke0", "--drop-issuer"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--drop-issuer is for federated spokes"),
        "{err}"
    );

    let hub = LabHub::with_issuer(fleet.dir.path(), &fleet.remote, issuer);
    let spoke = hub.add_federated(&mut fleet.nodes[0], "spoke0");
    let yaml = ConfigBuilder::new(&fleet.clone, vectors().join("key/cert.pem"))
        .top(&hub.top())
        .spokes(vec![spoke])
        .yaml();
    std::fs::write(&fleet.config, yaml).unwrap();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    let url = fleet.nodes[0].api_url.clone();
    assert!(whoami(&fleet, &hub, &url).is_ok());
    let commits = fleet.remote_log().len();

    let (code, out, err) = fleet.run(&["revoke", "spoke0", "--drop-issuer"]);
    assert_eq!(code, 0, "{out}\n{err}");
    for needle in [
        "binds nobody: every hub token was refused (403) at once",
        "trusts no issuer since",
        &format!("a fresh hub token for {url} was refused (401). Nothing was committed"),
        "spokekeeper rotate spoke0 --force",
    ] {
        assert!(err.contains(needle), "{needle:?} not in:\n{err}");
    }
    assert_eq!(fleet.remote_log().len(), commits, "nothing committed");
    let dropped = file(&fleet);
    assert!(
        dropped.starts_with("# spokekeeper-issuer-dropped: "),
        "{dropped}"
    );
    assert!(dropped.contains("\njwt: []\n"), "{dropped}");
    assert_eq!(whoami(&fleet, &hub, &url), Err(401));

    let refusal = "by `spokekeeper revoke --drop-issuer` at";
    for args in [&["spoke0"][..], &["--all", "--force"]] {
        let (code, report, err) = fleet.rotate_json(args);
        assert_ne!(code, 0, "{args:?}: {report:#}\n{err}");
        let error = report["spokes"][0]["error"].as_str().unwrap_or_default();
        assert!(error.contains(refusal), "{args:?}: {report:#}");
        assert!(
            error.contains("run `spokekeeper rotate spoke0 --force`"),
            "{error}"
        );
        assert_eq!(file(&fleet), dropped, "{args:?}");
    }
    let (code, out, err) = fleet.run(&["revoke", "spoke0"]);
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(err.contains(refusal), "{err}");
    assert_eq!(file(&fleet), dropped);
    assert_eq!(whoami(&fleet, &hub, &url), Err(401));
    assert_eq!(fleet.remote_log().len(), commits, "nothing committed");

    // The revoke above moved the binding to generation 1 before it stopped: trust comes
    // back at that audience, never the one it moved away from.
    let (code, report, err) = fleet.rotate_json(&["spoke0", "--force"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    let now = format!("{url}#generation-1");
    assert!(whoami(&fleet, &hub, &now).is_ok());
    assert_eq!(whoami(&fleet, &hub, &url), Err(401));
    assert!(!file(&fleet).contains("spokekeeper-issuer-dropped"));
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(report["spokes"][0]["action"], "healthy", "{report:#}");
}
