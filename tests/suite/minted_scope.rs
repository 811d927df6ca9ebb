//! Minted bindings belong to one hub (`credential.hub_id`) and one spoke entry (issue 28,
//! defect 8e), each mint binds a user never bound before, and an earlier version's
//! unscoped bindings are adopted or named, never left silently. Against the emulated
//! API (the real one: realstack::real_hub).

use std::time::Duration;

use serde_json::{Value, json};
use spokekeeper::mint::{Answer, Spoke};
use spokekeeper::secret::SecretBytes;
use spokekeeper_lab::config::ConfigBuilder;

use crate::support;
use support::NodeOptions;
use support::fleet::{Fleet, action, vectors};
use support::git::{clone, git};

const BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";

/// What listing ClusterRoleBindings with `kc` answers: 200 while a cluster-admin binding
/// authorizes its user, 403 once none does.
async fn list_status(kc: &SecretBytes) -> u16 {
    support::install_crypto_provider();
    let spoke = Spoke::connect(kc, Duration::from_secs(10)).await.unwrap();
    match spoke.call("check", "GET", BINDINGS, None).await.unwrap() {
        Answer::Ok(_) => 200,
        Answer::Status { code, .. } => code,
    }
}

/// The node's admin credential, for what an operator does with kubectl.
async fn admin(fleet: &Fleet) -> Spoke {
    support::install_crypto_provider();
    let kc = fleet.nodes[0].hub_kubeconfig();
    Spoke::connect(&kc, Duration::from_secs(10)).await.unwrap()
}

fn user(report: &Value, i: usize) -> String {
    report["spokes"][i]["credential"]["user"]
        .as_str()
        .unwrap()
        .to_string()
}

fn names(fleet: &Fleet) -> Vec<String> {
    fleet.nodes[0].api_objects().lock().unwrap().binding_names()
}

/// `fleet`'s configuration with entries spoke0 and spoke1, both on node 0.
fn two_entries(fleet: &Fleet, extra: &str) {
    let node = &fleet.nodes[0];
    ConfigBuilder::new(&fleet.clone, vectors().join("key/cert.pem"))
        .spokes([node.spoke("spoke0", "5s"), node.spoke("spoke1", "5s")])
        .top(extra)
        .write(&fleet.config)
        .unwrap();
}

/// Someone with push access rewrites spoke0's committed file line by line.
fn push_edit(fleet: &Fleet, tag: &str, edit: impl Fn(&str) -> Option<String>) {
    let theirs = fleet.dir.path().join(format!("theirs-{tag}"));
    clone(&fleet.remote, &theirs);
    let file = theirs.join("fluxcd/spoke0-kubeconfig-sealed.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let edited: String = text
        .lines()
        .filter_map(edit)
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(edited, text, "nothing was edited");
    std::fs::write(&file, edited).unwrap();
    git(&theirs, &["add", "-A"]);
    support::git::commit(&theirs, "tidy annotations");
    git(&theirs, &["push", "--quiet", "origin", "main"]);
}

/// Two entries for one cluster: each has its own bindings, and renewing or revoking one
/// leaves the other's credential working (they used to delete each other's).
#[tokio::test(flavor = "multi_thread")]
async fn two_entries_on_one_spoke_mint_renew_and_revoke_without_touching_each_other() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::with(&[NodeOptions::default()], "");
    two_entries(&fleet, "credential:\n  mode: minted\n");
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    let (kc0, kc1) = (fleet.unsealed(0), fleet.unsealed(1));
    assert_eq!(
        (list_status(&kc0).await, list_status(&kc1).await),
        (200, 200)
    );
    assert_eq!(
        names(&fleet),
        ["spokekeeper.hub.spoke0.g1", "spokekeeper.hub.spoke1.g1"]
    );
    let (user0, user1) = (user(&report, 0), user(&report, 1));
    assert!(user0.starts_with("spokekeeper:hub:spoke0:1:"), "{user0}");
    assert!(user1.starts_with("spokekeeper:hub:spoke1:1:"), "{user1}");

    // Renewing spoke0 revokes spoke0's generation 1 only.
    let (code, report, err) = fleet.rotate_json(&["spoke0", "--force"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(list_status(&kc0).await, 403);
    assert_eq!(
        list_status(&kc1).await,
        200,
        "spoke1's credential was revoked"
    );
    assert_eq!(
        report["spokes"][0]["revoked"],
        json!(["spokekeeper.hub.spoke0.g1"])
    );
    assert_eq!(
        names(&fleet),
        ["spokekeeper.hub.spoke0.g2", "spokekeeper.hub.spoke1.g1"]
    );

    // Revoking spoke1 deletes spoke1's binding only.
    let (code, out, err) = fleet.run(&["revoke", "spoke1"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("spoke1: deleted ClusterRoleBinding spokekeeper.hub.spoke1.g1"),
        "{err}"
    );
    assert!(err.contains(&format!("--as {user1} (no)")), "{err}");
    assert_eq!(
        names(&fleet),
        ["spokekeeper.hub.spoke0.g2", "spokekeeper.hub.spoke1.g2"]
    );
    assert_eq!(list_status(&kc1).await, 403);
    assert_eq!(list_status(&fleet.unsealed(0)).await, 200);
    assert_eq!(list_status(&fleet.unsealed(1)).await, 200);
}

/// Two spokekeeper deployments (different `credential.hub_id`, each its fleet repo) with
/// an entry of the same name for one cluster: neither renews nor revokes the other's.
#[tokio::test(flavor = "multi_thread")]
async fn two_hubs_on_one_spoke_mint_renew_and_revoke_without_touching_each_other() {
    crate::support::requires!(ROOT);
    let east = Fleet::with(
        &[NodeOptions::default()],
        "credential:\n  mode: minted\n  hub_id: east\n",
    );
    let west = Fleet::with(&[], "");
    ConfigBuilder::new(&west.clone, vectors().join("key/cert.pem"))
        .spoke(east.nodes[0].spoke("spoke0", "5s"))
        .top("credential:\n  mode: minted\n  hub_id: west\n")
        .write(&west.config)
        .unwrap();
    for fleet in [&east, &west] {
        let (code, report, err) = fleet.rotate_json(&["--all"]);
        assert_eq!(code, 0, "{report:#}\n{err}");
        assert_eq!(action(&report, 0), "rotated");
    }
    assert_eq!(
        names(&east),
        ["spokekeeper.east.spoke0.g1", "spokekeeper.west.spoke0.g1"]
    );
    let (east1, west1) = (east.unsealed(0), west.unsealed(0));
    assert_eq!(
        (list_status(&east1).await, list_status(&west1).await),
        (200, 200)
    );

    let (code, report, err) = east.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(
        report["spokes"][0]["revoked"],
        json!(["spokekeeper.east.spoke0.g1"])
    );
    assert_eq!(
        list_status(&west1).await,
        200,
        "west's credential was revoked"
    );
    assert_eq!(list_status(&east1).await, 403);

    let (code, out, err) = west.run(&["revoke", "spoke0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        names(&east),
        ["spokekeeper.east.spoke0.g2", "spokekeeper.west.spoke0.g2"]
    );
    assert_eq!(list_status(&west1).await, 403);
    assert_eq!(list_status(&east.unsealed(0)).await, 200);
}

/// After `revoke` and with no binding left on the spoke, someone with push access removes
/// the credential annotations: the counter starts again, but the user does not, so no
/// earlier (revoked, still unexpired) certificate is authorized again. It used to bind
/// `spokekeeper:hub:1` again.
#[tokio::test(flavor = "multi_thread")]
async fn removed_annotations_after_a_revoke_never_bind_an_earlier_user_again() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::with(&[NodeOptions::default()], "credential:\n  mode: minted\n");
    let mut users = Vec::new();
    let mut old = Vec::new();
    for args in [
        &["rotate", "--all"][..],
        &["rotate", "--all", "--force"],
        &["revoke", "spoke0"],
    ] {
        let (code, out, err) = fleet.run(args);
        assert_eq!(code, 0, "{out}\n{err}");
        let kc = fleet.unsealed(0);
        users.push(authenticates_as(&kc).await);
        old.push(kc);
    }
    // The operator deletes the last binding too; then the annotations go.
    let admin = admin(&fleet).await;
    let left = names(&fleet);
    assert_eq!(left.len(), 1, "{left:?}");
    let gone = admin
        .call("d", "DELETE", &format!("{BINDINGS}/{}", left[0]), None)
        .await
        .unwrap();
    assert!(matches!(gone, Answer::Ok(_)));
    push_edit(&fleet, "annotations", |l| {
        (!l.contains("spokekeeper.io/credential-")).then(|| l.to_string())
    });

    let (code, report, err) = fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["credential"]["generation"], 1, "{spoke:#}");
    let new = user(&report, 0);
    assert!(!users.contains(&new), "{new} was bound before: {users:?}");
    for (kc, u) in old.iter().zip(&users) {
        assert_eq!(list_status(kc).await, 403, "{u} is authorized again");
    }
    assert_eq!(list_status(&fleet.unsealed(0)).await, 200);
    assert_eq!(names(&fleet), ["spokekeeper.hub.spoke0.g1"]);
}

async fn authenticates_as(kc: &SecretBytes) -> String {
    support::fleet::authenticates(kc).await.username
}

/// An earlier version's bindings (`spokekeeper-hub-gN`, no hub or spoke label): the one
/// of the spoke's recorded user is adopted and deleted once the next generation is
/// pushed, and by `revoke`; any other is left, with a warning naming the command that
/// deletes it (it may be another entry's or another deployment's).
#[tokio::test(flavor = "multi_thread")]
async fn an_earlier_versions_bindings_are_adopted_by_their_recorded_user_or_named() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::with(&[NodeOptions::default()], "credential:\n  mode: minted\n");
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    // What the earlier version left: its bindings of spokekeeper:hub:1 and :7, and the
    // recorded user spokekeeper:hub:1 (as if it had minted generation 1 here).
    let admin = admin(&fleet).await;
    for g in [1, 7] {
        let body = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("spokekeeper-hub-g{g}"), "labels": {
                "app.kubernetes.io/managed-by": "spokekeeper",
                "spokekeeper.io/generation": g.to_string(),
            }},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": format!("spokekeeper:hub:{g}")}],
        });
        let made = admin
            .call("c", "POST", BINDINGS, Some(&body))
            .await
            .unwrap();
        assert!(matches!(made, Answer::Ok(_)));
    }
    let recorded = |user: &'static str| {
        move |l: &str| {
            Some(match l.split_once("spokekeeper.io/credential-user:") {
                Some((indent, _)) => format!("{indent}spokekeeper.io/credential-user: {user}"),
                None => l.to_string(),
            })
        }
    };
    push_edit(&fleet, "legacy-1", recorded("spokekeeper:hub:1"));

    // The recorded user is not this version's: minted again at once, then the legacy
    // binding of that user goes with generation 1.
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["credential"]["generation"], 2, "{spoke:#}");
    assert_eq!(
        spoke["revoked"],
        json!(["spokekeeper.hub.spoke0.g1", "spokekeeper-hub-g1"]),
        "{spoke:#}"
    );
    assert_eq!(
        names(&fleet),
        ["spokekeeper-hub-g7", "spokekeeper.hub.spoke0.g2"]
    );
    assert!(
        err.contains("ClusterRoleBinding spokekeeper-hub-g7 was made by an earlier spokekeeper")
            && err.contains("kubectl delete clusterrolebinding spokekeeper-hub-g7"),
        "{err}"
    );

    // `revoke` deletes the legacy binding of the recorded user as well.
    push_edit(&fleet, "legacy-7", recorded("spokekeeper:hub:7"));
    let (code, out, err) = fleet.run(&["revoke", "spoke0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    for needle in [
        "deleted ClusterRoleBinding spokekeeper.hub.spoke0.g2",
        "deleted ClusterRoleBinding spokekeeper-hub-g7",
        "--as spokekeeper:hub:7 (no)",
    ] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
    assert_eq!(names(&fleet), ["spokekeeper.hub.spoke0.g3"]);
}
