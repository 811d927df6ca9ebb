//! `spokekeeper revoke` against a fleet repo someone with push access worked on: what it
//! cuts is on the spoke, so nothing in the fleet repo may stop it before the cut.

use super::*;

const FILE: &str = "fluxcd/spoke0-kubeconfig-sealed.yaml";

/// A pusher's edit of a clone: its name, the edit, and whether the revoke after it commits.
type Tamper = (&'static str, fn(&Path), bool);

/// What a pusher does to spoke0's committed output, in a clone of the remote.
fn push(fleet: &Fleet, name: &str, edit: impl FnOnce(&Path)) {
    let theirs = fleet.dir.path().join(format!("theirs-{name}"));
    clone(&fleet.remote, &theirs);
    edit(&theirs);
    git(&theirs, &["add", "-A"]);
    support::git::commit(&theirs, name);
    git(&theirs, &["push", "--quiet", "origin", "main"]);
}

/// The recorded server's port set to one nobody listens on: the probe fails.
fn dead_port(theirs: &Path) {
    let file = theirs.join(FILE);
    let text = std::fs::read_to_string(&file).unwrap();
    let edited: String = text
        .lines()
        .map(|l| match l.split_once("spokekeeper.io/server: ") {
            Some((indent, value)) => {
                let url = value.trim_matches('"');
                let (host, _port) = url.rsplit_once(':').unwrap();
                format!("{indent}spokekeeper.io/server: \"{host}:1\"\n")
            }
            None => format!("{l}\n"),
        })
        .collect();
    assert_ne!(edited, text, "the server annotation is in {FILE}");
    std::fs::write(&file, edited).unwrap();
}

/// The output replaced by a symlink: it cannot be read.
fn symlink(theirs: &Path) {
    let file = theirs.join(FILE);
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink("../README.md", &file).unwrap();
}

/// The output deleted: nothing is recorded.
fn deleted(theirs: &Path) {
    std::fs::remove_file(theirs.join(FILE)).unwrap();
}

/// A pusher who wants a leaked minted certificate to keep working makes `revoke` stop
/// before it deletes the binding: a dead port in the recorded server (the probe fails
/// and said "unreachable" before the revoke ran), the output a symlink (unreadable) or
/// deleted (the revoke said nothing minted was committed). Each time the binding the
/// spoke holds is deleted, and the next generation is minted above it.
#[tokio::test(flavor = "multi_thread")]
async fn a_revoke_deletes_the_minted_binding_whatever_a_pusher_did_to_the_fleet_repo() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::with(&[NodeOptions::default()], "credential:\n  mode: minted\n");
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    let objects = fleet.nodes[0].api_objects();
    // The symlink last: with the only output unreadable and no sealing.sha256, nothing
    // may be sealed (sealing trust), so that revoke cuts and commits nothing.
    let tampers: [Tamper; 3] = [
        ("dead-port", dead_port, true),
        ("deleted", deleted, true),
        ("symlink", symlink, false),
    ];
    for (name, tamper, commits) in tampers {
        let live = objects.lock().unwrap().binding_names();
        assert_eq!(live.len(), 1, "{name}: {live:?}");
        push(&fleet, name, tamper);
        let (code, out, err) = fleet.run(&["revoke", "spoke0"]);
        let cut = format!("deleted ClusterRoleBinding {}", live[0]);
        assert!(err.contains(&cut), "{name}: {cut:?} not in:\n{out}\n{err}");
        let bound = objects.lock().unwrap().binding_names();
        assert!(!bound.contains(&live[0]), "{name}: {bound:?}");
        if commits {
            assert_eq!(code, 0, "{name}:\n{out}\n{err}");
            assert_eq!(bound.len(), 1, "{name}: the next generation: {bound:?}");
        } else {
            assert_ne!(code, 0, "{name}:\n{out}\n{err}");
            assert!(err.contains("no new credential was committed"), "{err}");
            assert!(bound.is_empty(), "{name}: {bound:?}");
        }
    }
}
