use super::*;

fn table(check: fn(&str) -> Reason, good: &[&str], bad: &[&str]) {
    for v in good {
        assert_eq!(check(v), Ok(()), "{v:?} should pass");
    }
    for v in bad {
        assert!(check(v).is_err(), "{v:?} should be refused");
    }
}

#[test]
fn hosts() {
    table(
        host,
        &[
            "10.0.0.1",
            "::1",
            "fd00::5",
            "node1",
            "node-1.example.org",
            "k3s_a.lan",
        ],
        &[
            "",
            " 10.0.0.1",
            "10.0.0.1\n",
            "-oProxyCommand=x",
            "root@10.0.0.1",
            "ssh://node1",
            "https://node1:6443",
            "node1:22",
            "[::1]",
            "node1/x",
            "-node",
            "node-.example.org",
            "a..b",
            "node;reboot",
            "node$(id)",
        ],
    );
}

#[test]
fn ssh_users() {
    table(
        ssh_user,
        &["root", "spokekeeper", "k3s.admin", "svc_1"],
        &[
            "", "-lroot", "a b", "a\tb", "a;b", "$(id)", "a`b`", "a@b", "a\nb", "é",
        ],
    );
}

#[test]
fn node_paths() {
    table(
        node_path,
        &["/etc/rancher/k3s/k3s.yaml", "/etc/kubernetes/admin.conf"],
        &["k3s.yaml", "", "-/x", "/etc/k3s\0.yaml", "/etc/k3s\n.yaml"],
    );
}

#[test]
fn kubernetes_names() {
    table(
        dns_subdomain,
        &["dev-kubeconfig", "a.b-c"],
        &["", "Dev", "a_b", "-a", "a.", &"a".repeat(254)],
    );
    table(
        dns_label,
        &["flux-system", "a1"],
        &["", "flux.system", "Flux", &"a".repeat(64)],
    );
    table(spoke_name, &["dev", "edge-1"], &["Dev_1", "a.b", "-a", ""]);
    table(
        secret_key,
        &["value", "kubeconfig.yaml", "A_b-1"],
        &["", "a/b", "a b", "ké"],
    );
}

#[test]
fn api_servers() {
    for good in [
        "https://api.dev:6443",
        "https://10.0.0.1:6443",
        "https://[::1]:6443/k8s",
    ] {
        assert!(api_server(good).is_ok(), "{good}");
    }
    for bad in [
        "http://x:6443",
        "https://x:0",
        "https://admin:pw@x:6443",
        "https://u@x",
        "https://x:6443?a=1",
        "https://x:6443#f",
        "x:6443",
        "https://",
    ] {
        assert!(api_server(bad).is_err(), "{bad}");
    }
}

#[test]
fn remotes_and_branches() {
    table(
        remote,
        &[
            "origin",
            "git@example.org:fleet.git",
            "https://example.org/fleet.git",
        ],
        &["", "-uorigin", "--upload-pack=x", "a b"],
    );
    table(
        branch,
        &["main", "release/1.2", "team-a/fleet_x"],
        &[
            "",
            "-f",
            "--force",
            "a..b",
            "a b",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[",
            "a\\b",
            "a@{u}",
            "/a",
            "a/",
            "a//b",
            "a.",
            ".a",
            "a/.b",
            "a.lock",
            "a/b.lock/c",
            "@",
            "HEAD",
            "a\u{7f}",
        ],
    );
}

#[test]
fn authors() {
    table(
        author,
        &["spokekeeper <spokekeeper@example.org>", "A B <a@b>"],
        &[
            "spokekeeper",
            "<a@b>",
            "a <>",
            "a <b",
            "a <b>\nc <d>",
            "a <b<c>",
        ],
    );
}

#[test]
fn outputs() {
    for good in ["fluxcd/dev.yaml", "a.yaml", ".hidden/a.yaml"] {
        assert_eq!(output(Path::new(good)), Ok(()), "{good}");
    }
    for bad in [
        "",
        "/etc/x.yaml",
        "../x.yaml",
        "a/../../x",
        "./a.yaml",
        ".git/hooks/post-commit",
        "a/.GIT/config",
        "a\nb.yaml",
        ":!a.yaml",
        ":(glob)*",
        ":/",
        ":",
        ":(top)fluxcd/dev.yaml",
        "fluxcd//dev.yaml",
        "fluxcd/./dev.yaml",
        "fluxcd/dev.yaml/",
    ] {
        assert!(output(Path::new(bad)).is_err(), "{bad}");
    }
}

#[test]
fn ports_and_durations() {
    assert!(port(0).is_err());
    assert_eq!(port(22), Ok(()));
    assert!(positive(Duration::ZERO, "1s").is_err());
    assert_eq!(positive(Duration::from_secs(1), "1s"), Ok(()));
}

#[test]
fn the_message_starts_with_the_key() {
    let e = at("spokes[2].address", host("root@x")).unwrap_err();
    assert_eq!(e.key, "spokes[2].address");
    assert!(
        e.message.starts_with("spokes[2].address \"root@x\""),
        "{}",
        e.message
    );
    assert!(e.message.contains("ssh.user"), "{}", e.message);
}

const BASE: &str =
    "repo:\n  path: f\nsealing: {cert: c.pem}\nspokes:\n  - name: dev\n    address: 10.0.0.1\n";

/// BASE with `extra` added to its spoke.
fn spoke(extra: &str) -> String {
    format!("{BASE}    {extra}\n")
}

fn address(a: &str) -> String {
    BASE.replace("10.0.0.1", a)
}

fn repo(extra: &str) -> String {
    BASE.replace("  path: f\n", &format!("  path: f\n  {extra}\n"))
}

/// Loading BASE succeeds, and loading each text is refused with an error that names the
/// file and contains each of its needles (the key, its line, the fix).
fn refused(cases: &[(String, &[&str])]) {
    let parse =
        |text: &str| super::super::Config::parse(text, "s.yaml", Path::new("/etc/spokekeeper"));
    parse(BASE).unwrap();
    for (text, needles) in cases {
        let e = parse(text).expect_err(text).to_string();
        assert!(e.starts_with("s.yaml: "), "{e}");
        for n in *needles {
            assert!(e.contains(n), "want {n:?} in: {e}\n--- for:\n{text}");
        }
    }
}

#[test]
fn load_refuses_a_bad_address_or_name_with_key_line_and_fix() {
    refused(&[
        (
            address("root@10.0.0.1"),
            &["line 6: spokes[0].address", "ssh.user"],
        ),
        (
            address("\"-oProxyCommand=x\""),
            &["line 6: spokes[0].address", "'-'"],
        ),
        (
            address("https://node1"),
            &["line 6: spokes[0].address", "URL"],
        ),
        (
            address("\"node1 x\""),
            &["line 6: spokes[0].address", "space"],
        ),
        (
            address("node1:22"),
            &["line 6: spokes[0].address", "ssh.port"],
        ),
        (
            BASE.replace("name: dev", "name: Dev"),
            &["line 5: spokes[0].name", "lowercase"],
        ),
    ]);
}

#[test]
fn load_refuses_bad_ssh_settings_with_key_line_and_fix() {
    refused(&[
        (
            spoke("ssh: {user: \"-lroot\"}"),
            &["line 7: spokes[0].ssh.user", "plain user name"],
        ),
        (spoke("ssh: {user: \"a;b\"}"), &["spokes[0].ssh.user"]),
        (
            spoke("ssh: {port: 0}"),
            &["line 7", "port 0 is not 1-65535"],
        ),
        (
            spoke("ssh: {port: 70000}"),
            &["line 7", "port 70000 is not 1-65535"],
        ),
        (
            spoke("ssh: {connect_timeout: 0s}"),
            &["line 7: spokes[0].ssh.connect_timeout", "longer than 0s"],
        ),
        (
            spoke("ssh: {command_timeout: 0s}"),
            &["spokes[0].ssh.command_timeout"],
        ),
        (
            format!("{BASE}ssh: {{user: \"a b\"}}\n"),
            &["line 7: ssh.user", "plain user name"],
        ),
        (
            format!("{BASE}ssh: {{connect_timeout: 0s}}\n"),
            &["line 7: ssh.connect_timeout"],
        ),
    ]);
}

#[test]
fn load_refuses_a_bad_node_path_secret_or_api_server_with_key_line_and_fix() {
    refused(&[
        (
            spoke("kubeconfig_path: \"/etc/k3s\\0.yaml\""),
            &["line 7: spokes[0].kubeconfig_path", "control"],
        ),
        (
            spoke("kubeconfig_path: k3s.yaml"),
            &["spokes[0].kubeconfig_path", "absolute"],
        ),
        (
            spoke("secret: {name: Bad_Name}"),
            &["line 7: spokes[0].secret.name", "e.g. dev-kubeconfig"],
        ),
        (
            spoke("secret: {namespace: a.b}"),
            &["spokes[0].secret.namespace", "flux-system"],
        ),
        (
            spoke("secret: {key: a/b}"),
            &["spokes[0].secret.key", "e.g. value"],
        ),
        (
            spoke("api_server: https://x:0"),
            &["line 7: spokes[0].api_server", "port 0"],
        ),
        (
            spoke("api_server: https://u:p@x:6443"),
            &["spokes[0].api_server", "password"],
        ),
        (
            spoke("api_server: https://x:6443?a=b"),
            &["spokes[0].api_server", "query"],
        ),
        (
            spoke("api_server: http://x:6443"),
            &["spokes[0].api_server", "https"],
        ),
    ]);
}

#[test]
fn load_refuses_an_output_outside_the_repo_or_not_as_git_names_it() {
    refused(&[
        (
            spoke("output: .git/hooks/post-commit"),
            &["line 7: spokes[0].output", ".git"],
        ),
        (
            spoke("output: ../x.yaml"),
            &["spokes[0].output", "inside the repo"],
        ),
        (
            spoke("output: \":!fluxcd/dev.yaml\""),
            &[
                "line 7: spokes[0].output",
                "pathspec magic",
                "write a relative path",
            ],
        ),
        (
            spoke("output: :(top)fluxcd/dev.yaml"),
            &[
                "line 7: spokes[0].output",
                "pathspec magic",
                "write a relative path",
            ],
        ),
        (
            spoke("output: fluxcd/./dev.yaml"),
            &["line 7: spokes[0].output", "Fix: write \"fluxcd/dev.yaml\""],
        ),
        (
            spoke("output: fluxcd//dev.yaml/"),
            &["line 7: spokes[0].output", "Fix: write \"fluxcd/dev.yaml\""],
        ),
    ]);
}

#[test]
fn load_refuses_a_zero_duration_or_bad_repo_setting_with_key_line_and_fix() {
    refused(&[
        (
            format!("{BASE}renew_before: 0s\n"),
            &["line 7: renew_before", "longer than 0s"],
        ),
        (
            format!("{BASE}verify_every: 0d\n"),
            &["line 7: verify_every"],
        ),
        (
            format!("{BASE}alerts: {{pending_review_after: 0s}}\n"),
            &["line 7: alerts.pending_review_after"],
        ),
        (
            format!("{BASE}alerts: {{warn_before: 0s, critical_before: 0s}}\n"),
            &["line 7: alerts.warn_before"],
        ),
        (
            repo("remote: --upload-pack=x"),
            &["line 3: repo.remote", "'-'"],
        ),
        (
            repo("branch: \"-f\""),
            &["line 3: repo.branch", "check-ref-format"],
        ),
        (repo("branch: a..b"), &["line 3: repo.branch", "'..'"]),
        (
            repo("author: nobody"),
            &["line 3: repo.author", "Name <email>"],
        ),
    ]);
}

#[test]
fn load_refuses_a_second_spoke_with_the_same_output_or_secret() {
    refused(&[
        (
            format!(
                "{BASE}  - {{name: test, address: 10.0.0.2, output: fluxcd/dev-kubeconfig-sealed.yaml}}\n"
            ),
            &["line 7: spokes[1].output", "spokes[0]"],
        ),
        (
            format!(
                "{BASE}  - {{name: test, address: 10.0.0.2, secret: {{name: dev-kubeconfig}}, output: t.yaml}}\n"
            ),
            &["line 7: spokes[1].secret.name", "spokes[0]"],
        ),
    ]);
}
