//! The federated node recipe installed as printed on a real sshd node (its paths moved
//! under the node's directory, its user the lab's): the forced command, the sudoers rule
//! and the script, driven by spokekeeper and by a raw ssh client asking for other things.

use crate::support;

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};

use spokekeeper::spoke::{
    Distro, ExtractError, Header, NODE_RECIPE, federated_recipe, read_authentication_config_header,
    read_with_script, write_authentication_config,
};
use support::{LAB_USER, Lab, Node, NodeOptions};

use support::recipe::{forced_options, install_federated as install, recipe_line};

/// A plain ssh client as `LAB_USER` running `command` with `input` on stdin: (exit
/// code, stdout, stderr).
fn raw_ssh(node: &Node, command: &str, input: &[u8]) -> (i32, Vec<u8>, String) {
    let mut child = Command::new("ssh")
        .args([
            "-F",
            "/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
        ])
        .args([
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
        ])
        .arg("-o")
        .arg(format!(
            "UserKnownHostsFile={}",
            node.known_hosts_path.display()
        ))
        .arg("-i")
        .arg(&node.identity_path)
        .args(["-p", &node.ssh_port.to_string(), "-l", LAB_USER, "--"])
        .arg(node.address_string())
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ssh");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // The node may stop reading early (a refusal): a failed write is not the test's concern.
    let writer = std::thread::spawn(move || {
        let _ = std::io::Write::write_all(&mut stdin, &input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn lab_node(lab: &Lab) -> Node {
    lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    })
}

#[tokio::test]
async fn the_federated_recipe_reads_and_replaces_one_file_atomically() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let mut node = lab_node(&lab);
    let at = install(&mut node);
    let address = node.address_string();
    let ssh = node.ssh_settings(LAB_USER);

    let got = read_with_script(&address, &ssh).await.unwrap();
    assert_eq!(got.expose(), &node.kubeconfig_bytes()[..]);

    let first = b"apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\n";
    write_authentication_config(&address, &ssh, first)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&at.file).unwrap(), first);
    let meta = std::fs::symlink_metadata(&at.file).unwrap();
    assert_eq!((meta.mode() & 0o777, meta.uid()), (0o600, 0), "root-only");
    let dir = std::fs::metadata(at.file.parent().unwrap()).unwrap();
    assert_eq!(
        (dir.mode() & 0o777, dir.uid()),
        (0o700, 0),
        "its own root-only directory"
    );

    // Replaced by a rename: a new inode, no temporary file left beside it.
    let second = vec![b'#'; spokekeeper::spoke::MAX_AUTHENTICATION_CONFIG_BYTES];
    write_authentication_config(&address, &ssh, &second)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&at.file).unwrap(), second);
    assert_ne!(std::fs::metadata(&at.file).unwrap().ino(), meta.ino());
    let names: Vec<_> = std::fs::read_dir(at.file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["authentication-config.yaml"]);

    // A symlink planted at the target is replaced, never followed.
    let victim = node.write_file("victim", b"not to be touched\n");
    std::fs::remove_file(&at.file).unwrap();
    std::os::unix::fs::symlink(&victim, &at.file).unwrap();
    write_authentication_config(&address, &ssh, b"third\n")
        .await
        .unwrap();
    assert!(
        !std::fs::symlink_metadata(&at.file)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(&at.file).unwrap(), b"third\n");
    assert_eq!(std::fs::read(&victim).unwrap(), b"not to be touched\n");
    assert!(at.script.is_file());
}

#[test]
fn the_node_refuses_bad_input_and_every_other_command() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let mut node = lab_node(&lab);
    let at = install(&mut node);
    let (code, out, err) = raw_ssh(&node, "write-authentication-config", b"kept\n");
    assert_eq!(
        (code, out),
        (0, b"spokekeeper-node: wrote 5 bytes\n".to_vec()),
        "{err}"
    );

    let limit = spokekeeper::spoke::MAX_AUTHENTICATION_CONFIG_BYTES;
    for input in [vec![b'x'; limit + 1], vec![b'x'; 4 * limit], Vec::new()] {
        let (code, out, err) = raw_ssh(&node, "write-authentication-config", &input);
        assert_eq!(code, 65, "{} bytes: {err}", input.len());
        assert!(out.is_empty());
        assert!(err.contains("spokekeeper-node: refused: "), "{err}");
        assert!(err.contains("nothing changed"), "{err}");
        assert_eq!(
            std::fs::read(&at.file).unwrap(),
            b"kept\n",
            "the old file stays"
        );
    }

    for command in [
        "cat /etc/shadow",
        "write-authentication-config; id",
        "read extra",
        "sh",
        "",
    ] {
        let (code, out, err) = raw_ssh(&node, command, b"changed\n");
        assert_ne!(code, 0, "{command:?} was run: {err}");
        assert!(out.is_empty(), "{command:?} printed something");
        // sudo refuses what its rule does not name exactly, before the script runs (with
        // -n it asks for the password it may not prompt for).
        assert!(
            err.contains("sudo: a password is required")
                || err.contains("is not allowed to execute"),
            "{command:?}: {err}"
        );
        assert!(!err.contains("spokekeeper-node: "), "{command:?}: {err}");
        assert_eq!(std::fs::read(&at.file).unwrap(), b"kept\n", "{command:?}");
    }
}

#[tokio::test]
async fn a_node_without_the_federated_recipe_is_named_with_the_fix_and_not_echoed() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let mut node = lab_node(&lab);
    let at = install(&mut node);
    let address = node.address_string();
    let ssh = node.ssh_settings(LAB_USER);
    let kubeconfig = String::from_utf8(node.kubeconfig_bytes()).unwrap();
    let echoes = |msg: &str| {
        kubeconfig
            .lines()
            .map(str::trim)
            .filter(|l| l.len() > 12)
            .any(|l| msg.contains(l))
    };

    // The older recipe: `sudo -n cat` answers with the kubeconfig whatever is asked.
    let old = forced_options(&node, NODE_RECIPE);
    node.set_authorized_key_options(LAB_USER, &old);
    let rule = recipe_line(&node, NODE_RECIPE, "spokekeeper ALL=");
    node.set_sudoers(&format!("{rule}\n")).unwrap();
    let err = write_authentication_config(&address, &ssh, b"config\n")
        .await
        .unwrap_err();
    let msg = format!("{err} {err:?}");
    let printed = kubeconfig.len();
    assert!(
        matches!(err, ExtractError::NotFederated { printed: p, .. } if p == printed),
        "{msg}"
    );
    assert!(msg.contains("install the federated node recipe"), "{msg}");
    assert!(!echoes(&msg), "the kubeconfig in the error: {msg}");
    assert!(!at.file.exists(), "nothing written");

    // No forced command: the login shell runs the verb itself.
    node.set_authorized_key_options(LAB_USER, "");
    let err = write_authentication_config(&address, &ssh, b"config\n")
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("no forced command"), "{msg}");
    assert!(msg.contains("authorized_keys line"), "{msg}");
    let err = read_with_script(&address, &ssh).await.unwrap_err();
    assert!(matches!(err, ExtractError::NodeScript { .. }), "{err}");
    assert!(!echoes(&err.to_string()), "{err}");

    // The federated forced command, but the old sudoers rule; then no script at all.
    let recipe = federated_recipe(Distro::K3s);
    node.set_authorized_key_options(LAB_USER, &forced_options(&node, &recipe));
    let err = write_authentication_config(&address, &ssh, b"config\n")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("sudo refused"), "{err}");
    let rule = recipe_line(&node, &recipe, "spokekeeper ALL=");
    node.set_sudoers(&format!("{rule}\n")).unwrap();
    std::fs::remove_file(&at.script).unwrap();
    let err = read_with_script(&address, &ssh).await.unwrap_err();
    assert!(
        err.to_string().contains("the script is not installed"),
        "{err}"
    );
    assert!(!at.file.exists(), "nothing written");
}

/// The header verb over the recipe as printed: the file's first line (nothing before the
/// first write); a node whose sudoers rule predates the verb is told apart (a drop is
/// refused there, and a rotation goes on), not taken for a node with no drop.
#[tokio::test]
async fn the_header_verb_reads_the_first_line_and_an_older_rule_is_told_apart() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let mut node = lab_node(&lab);
    install(&mut node);
    let address = node.address_string();
    let ssh = node.ssh_settings(LAB_USER);
    let line = |h: Header| match h {
        Header::Line(l) => l,
        Header::Unsupported(e) => panic!("{e}"),
    };
    let got = read_authentication_config_header(&address, &ssh)
        .await
        .unwrap();
    assert_eq!(line(got), b"");
    write_authentication_config(&address, &ssh, b"# first\nkind: x\n")
        .await
        .unwrap();
    let got = read_authentication_config_header(&address, &ssh)
        .await
        .unwrap();
    assert_eq!(line(got), b"# first\n");

    let recipe = federated_recipe(Distro::K3s);
    let rule = recipe_line(&node, &recipe, "spokekeeper ALL=");
    let older = rule
        .split(", ")
        .filter(|c| !c.ends_with("read-authentication-config-header"))
        .collect::<Vec<_>>()
        .join(", ");
    assert_ne!(older, rule);
    node.set_sudoers(&format!("{older}\n")).unwrap();
    match read_authentication_config_header(&address, &ssh)
        .await
        .unwrap()
    {
        Header::Unsupported(e) => assert!(e.to_string().contains("sudo refused"), "{e}"),
        Header::Line(l) => panic!("an older rule printed {l:?}"),
    }
}
