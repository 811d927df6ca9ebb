//! Extraction over SSH against real sshd nodes: root, sudo, the node recipe, strict host
//! keys, timeouts, the size cap, and no ssh process left behind.

use crate::support;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use spokekeeper::spoke::{
    ExtractError, MAX_KUBECONFIG_BYTES, NODE_RECIPE, Source, extract, read_over_ssh,
};
use support::procs::{command_lines, descendants, ssh_clients_for};
use support::{LAB_USER, Lab, Node, NodeOptions};

async fn read(node: &Node, user: &str, path: &str) -> Result<Vec<u8>, ExtractError> {
    read_over_ssh(&node.address_string(), &node.ssh_settings(user), path)
        .await
        .map(|b| b.expose().to_vec())
}

/// ssh processes may take a moment to exit after the session ends.
async fn assert_no_ssh_left(address: IpAddr) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = ssh_clients_for(address);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "ssh processes left behind: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn root_reads_the_kubeconfig_byte_for_byte() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    let got = read(&node, "root", node.kubeconfig_path_str())
        .await
        .unwrap();
    assert_eq!(got, node.kubeconfig_bytes());
    assert_no_ssh_left(node.address).await;

    // Through the generic entry point too.
    let source = Source::Ssh {
        address: node.address_string(),
        ssh: node.ssh_settings("root"),
        path: node.kubeconfig_path_str().into(),
    };
    assert_eq!(
        extract(&source).await.unwrap().expose(),
        &node.kubeconfig_bytes()[..]
    );
}

#[tokio::test]
async fn an_unprivileged_user_reads_it_with_sudo_only() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    let got = read(&node, LAB_USER, node.kubeconfig_path_str())
        .await
        .unwrap();
    assert_eq!(got, node.kubeconfig_bytes());

    // Without sudo the mode-600 file is unreadable, and the error says what to do.
    let no_sudo = spokekeeper::spoke::SshSettings {
        sudo: false,
        ..node.ssh_settings(LAB_USER)
    };
    let err = read_over_ssh(&node.address_string(), &no_sudo, node.kubeconfig_path_str())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ExtractError::PermissionDenied { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("set `ssh.sudo: true`"), "{err}");

    // The sudoers rule covers that one file, nothing else.
    let other = node.write_file("other.yaml", b"apiVersion: v1\n");
    let err = read(&node, LAB_USER, other.to_str().unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, ExtractError::SudoRefused { .. }), "{err}");
    assert!(err.to_string().contains("NOPASSWD sudoers rule"), "{err}");
}

#[tokio::test]
async fn the_node_recipe_works_as_written() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let mut node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    let path = node.kubeconfig_path_str().to_owned();
    let localize = |line: &str| {
        line.replace("/etc/rancher/k3s/k3s.yaml", &path)
            .replace("spokekeeper ", &format!("{LAB_USER} "))
    };

    let forced = NODE_RECIPE
        .lines()
        .find(|l| l.starts_with("command="))
        .expect("recipe has the forced command");
    let options = localize(forced.split(" ssh-ed25519 ").next().unwrap());
    node.set_authorized_key_options(LAB_USER, &options);
    let sudoers = NODE_RECIPE
        .lines()
        .find(|l| l.starts_with("spokekeeper ALL="))
        .expect("recipe has a sudoers rule");
    node.set_sudoers(&format!("{}\n", localize(sudoers)))
        .unwrap();

    // The forced command answers whatever we ask for: here a file we may not read.
    let settings = spokekeeper::spoke::SshSettings {
        sudo: false,
        ..node.ssh_settings(LAB_USER)
    };
    let got = read_over_ssh(&node.address_string(), &settings, "/etc/shadow")
        .await
        .unwrap();
    assert_eq!(got.expose(), &node.kubeconfig_bytes()[..]);
    let with_sudo = read(&node, LAB_USER, &path).await.unwrap();
    assert_eq!(with_sudo, node.kubeconfig_bytes());
}

#[tokio::test]
async fn unknown_host_keys_are_refused_and_nothing_is_learned() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    let other = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    let scratch = support::scratch_dir();

    let empty = scratch.path().join("known_hosts");
    std::fs::write(&empty, b"").unwrap();
    // Another node's line: a key is known, just not for this host.
    let foreign = scratch.path().join("foreign_known_hosts");
    std::fs::write(&foreign, format!("{}\n", other.host_key_line())).unwrap();

    for known_hosts in [empty, foreign] {
        let before = std::fs::read(&known_hosts).unwrap();
        let settings = spokekeeper::spoke::SshSettings {
            known_hosts: known_hosts.clone(),
            ..node.ssh_settings("root")
        };
        let err = read_over_ssh(
            &node.address_string(),
            &settings,
            node.kubeconfig_path_str(),
        )
        .await
        .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, ExtractError::HostKeyUnknown { .. }), "{msg}");
        let host = format!("[{}]:{}", node.address, node.ssh_port);
        assert!(
            msg.starts_with(&format!(
                "host key for {host} is not in {}",
                known_hosts.display()
            )),
            "{msg}"
        );
        assert!(
            msg.contains(&format!(
                "ssh-keyscan -p {} {} >> {}",
                node.ssh_port,
                node.address,
                known_hosts.display()
            )),
            "{msg}"
        );
        assert_eq!(
            std::fs::read(&known_hosts).unwrap(),
            before,
            "no trust on first use"
        );
    }
    assert_no_ssh_left(node.address).await;
}

#[tokio::test]
async fn a_changed_host_key_is_refused_with_the_new_fingerprint() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let mut node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    assert!(
        read(&node, "root", node.kubeconfig_path_str())
            .await
            .is_ok()
    );
    let before = std::fs::read(&node.known_hosts_path).unwrap();

    node.rotate_host_key();
    let err = read(&node, "root", node.kubeconfig_path_str())
        .await
        .unwrap_err();
    let msg = err.to_string();
    let ExtractError::HostKeyChanged { presented, .. } = &err else {
        panic!("{msg}")
    };
    let fingerprint = std::process::Command::new("ssh-keygen")
        .arg("-lf")
        .arg(node.dir.join("ssh_host_ed25519_key.pub"))
        .output()
        .unwrap();
    let fingerprint = String::from_utf8(fingerprint.stdout).unwrap();
    assert_eq!(
        Some(presented.as_str()),
        fingerprint.split_whitespace().nth(1),
        "{msg}"
    );
    assert!(msg.contains("has CHANGED"), "{msg}");
    assert!(
        msg.contains(&format!(
            "ssh-keygen -R '[{}]:{}' -f {}",
            node.address,
            node.ssh_port,
            node.known_hosts_path.display()
        )),
        "{msg}"
    );
    assert_eq!(
        std::fs::read(&node.known_hosts_path).unwrap(),
        before,
        "known_hosts untouched"
    );
    assert_no_ssh_left(node.address).await;
}

#[tokio::test]
async fn a_node_that_accepts_tcp_but_never_answers_times_out() {
    crate::support::requires!(ROOT);
    let _quiet = support::timing::exclusive();
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    node.sigstop();
    let settings = spokekeeper::spoke::SshSettings {
        connect_timeout: Duration::from_secs(2),
        ..node.ssh_settings("root")
    };
    let started = Instant::now();
    let err = read_over_ssh(
        &node.address_string(),
        &settings,
        node.kubeconfig_path_str(),
    )
    .await
    .unwrap_err();
    let took = started.elapsed();
    node.sigcont();
    assert!(matches!(err, ExtractError::ConnectTimeout { .. }), "{err}");
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_millis(3500),
        "took {took:?}"
    );
    assert!(err.to_string().contains("within 2s"), "{err}");
    assert_no_ssh_left(node.address).await;
}

#[tokio::test]
async fn a_command_that_hangs_is_cut_off_and_its_session_ended() {
    crate::support::requires!(ROOT);
    let _quiet = support::timing::exclusive();
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    node.set_authorized_key_options("root", r#"command="sleep 60",no-pty"#);
    let settings = spokekeeper::spoke::SshSettings {
        command_timeout: Duration::from_secs(2),
        ..node.ssh_settings("root")
    };
    let started = Instant::now();
    let err = read_over_ssh(
        &node.address_string(),
        &settings,
        node.kubeconfig_path_str(),
    )
    .await
    .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, ExtractError::CommandTimeout { .. }), "{err}");
    assert!(took < Duration::from_secs(8), "took {took:?}");
    assert_no_ssh_left(node.address).await;
}

/// Our own child processes that are ssh clients for `address`, with their pids.
fn our_ssh_children(address: IpAddr) -> Vec<i32> {
    let ours = descendants(std::process::id() as i32);
    let clients = ssh_clients_for(address);
    command_lines()
        .into_iter()
        .filter(|(pid, args)| ours.contains(pid) && clients.contains(&args.join(" ")))
        .map(|(pid, _)| pid)
        .collect()
}

#[tokio::test]
async fn a_session_is_one_ssh_child_killed_and_reaped_when_the_caller_gives_up() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    node.set_authorized_key_options("root", r#"command="sleep 60",no-pty"#);
    let address = node.address_string();
    let settings = node.ssh_settings("root");
    let path = node.kubeconfig_path_str().to_owned();
    let reading =
        tokio::spawn(async move { read_over_ssh(&address, &settings, &path).await.is_ok() });

    // While the node's command runs: one ssh process, ours (no detached master).
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        let children = our_ssh_children(node.address);
        if !children.is_empty() {
            assert_eq!(children.len(), 1, "one ssh process per session");
            assert_eq!(ssh_clients_for(node.address).len(), 1, "and no other");
            break children[0];
        }
        assert!(Instant::now() < deadline, "no ssh child of ours appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    // The caller drops the future: the process is killed and reaped (no zombie left).
    reading.abort();
    assert!(reading.await.unwrap_err().is_cancelled());
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < deadline, "ssh {pid} not reaped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_no_ssh_left(node.address).await;
}

#[tokio::test]
async fn endless_output_is_refused_at_the_cap_without_waiting_for_the_node() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    // The node never stops writing; only the cap (not the command timeout) ends it.
    node.set_authorized_key_options("root", r#"command="exec cat /dev/zero",no-pty"#);
    let settings = spokekeeper::spoke::SshSettings {
        command_timeout: Duration::from_secs(600),
        ..node.ssh_settings("root")
    };
    let address = node.address_string();
    let reading = read_over_ssh(&address, &settings, node.kubeconfig_path_str());
    // A guard against hanging on the node, not a timing claim.
    let err = tokio::time::timeout(Duration::from_secs(120), reading)
        .await
        .expect("not cut off at the cap")
        .unwrap_err();
    assert!(
        matches!(
            err,
            ExtractError::TooLarge {
                limit: MAX_KUBECONFIG_BYTES,
                ..
            }
        ),
        "{err}"
    );
    assert_no_ssh_left(node.address).await;
}

#[tokio::test]
async fn the_size_cap_refuses_one_byte_more_and_accepts_exactly_the_cap() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    let exact = node.write_file("exact.yaml", &vec![b'#'; MAX_KUBECONFIG_BYTES]);
    let got = read(&node, "root", exact.to_str().unwrap()).await.unwrap();
    assert_eq!(got.len(), MAX_KUBECONFIG_BYTES);

    let big = node.write_file("big.yaml", &vec![b'#'; MAX_KUBECONFIG_BYTES + 1]);
    let err = read(&node, "root", big.to_str().unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ExtractError::TooLarge {
                limit: MAX_KUBECONFIG_BYTES,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("refused, not truncated"), "{err}");
    assert_no_ssh_left(node.address).await;
}

#[tokio::test]
async fn paths_reach_the_node_literally() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    let odd = node.write_file("it's a $(kubeconfig) *.yaml", b"kind: Config\n");
    let got = read(&node, "root", odd.to_str().unwrap()).await.unwrap();
    assert_eq!(got, b"kind: Config\n");

    let missing = format!("{}/nope.yaml", node.dir.display());
    let err = read(&node, "root", &missing).await.unwrap_err();
    assert!(matches!(err, ExtractError::NotFound { .. }), "{err}");
    assert!(err.to_string().contains("set kubeconfig_path"), "{err}");
}

#[tokio::test]
async fn wrong_key_and_stopped_sshd_are_told_apart() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let mut node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    let other = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });

    let foreign_key = spokekeeper::spoke::SshSettings {
        identity: other.identity_path.clone(),
        ..node.ssh_settings("root")
    };
    let err = read_over_ssh(
        &node.address_string(),
        &foreign_key,
        node.kubeconfig_path_str(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ExtractError::AuthRefused { .. }), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("add {}.pub", other.identity_path.display())),
        "{err}"
    );

    node.stop_sshd();
    let err = read(&node, "root", node.kubeconfig_path_str())
        .await
        .unwrap_err();
    assert!(matches!(err, ExtractError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("connection refused"), "{err}");

    node.start_sshd();
    assert!(
        read(&node, "root", node.kubeconfig_path_str())
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn errors_never_carry_kubeconfig_bytes() {
    crate::support::requires!(ROOT);
    let lab = Lab::new();
    let node = lab.add_node(NodeOptions {
        api: false,
        ..NodeOptions::default()
    });
    // A node that prints the credential on stderr and fails.
    let kubeconfig = node.kubeconfig_path_str().to_owned();
    node.set_authorized_key_options(
        "root",
        &format!(r#"command="cat {kubeconfig} >&2; exit 3""#),
    );
    let err = read(&node, "root", &kubeconfig).await.unwrap_err();
    let msg = format!("{err} {err:?}");
    assert!(matches!(err, ExtractError::RemoteFailed { .. }), "{msg}");
    assert!(msg.contains("exit code 3"), "{msg}");
    let text = String::from_utf8(node.kubeconfig_bytes()).unwrap();
    for line in text.lines().filter(|l| l.contains("-data: ")) {
        let value = line.split_once("-data: ").unwrap().1;
        assert!(
            !msg.contains(&value[..40]),
            "secret material in the error: {msg}"
        );
    }
}
