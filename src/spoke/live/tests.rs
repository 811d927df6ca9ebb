use super::*;

const BASE: &str = "apiVersion: v1
kind: Config
clusters:
- name: default
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: AAAA
contexts:
- name: default
  context: {cluster: default, user: default}
current-context: default
users:
- name: default
  user:
    client-certificate-data: AAAA
    client-key-data: AAAA
";

fn refused(extra_cluster: &str, extra_user: &str) -> Option<String> {
    let text = BASE
        .replace(
            "    certificate-authority-data: AAAA\n",
            &format!("    certificate-authority-data: AAAA\n{extra_cluster}"),
        )
        .replace(
            "    client-key-data: AAAA\n",
            &format!("    client-key-data: AAAA\n{extra_user}"),
        );
    refuse_unsafe(text.as_bytes()).err().map(|e| e.to_string())
}

#[test]
fn hostile_fields_are_refused_and_named() {
    assert_eq!(refused("", ""), None);
    assert_eq!(refused("    insecure-skip-tls-verify: false\n", ""), None);
    let cases = [
        (
            "    insecure-skip-tls-verify: true\n",
            "",
            "insecure-skip-tls-verify",
        ),
        (
            "    certificate-authority: /etc/shadow\n",
            "",
            "cluster.certificate-authority: a file path",
        ),
        ("    proxy-url: http://10.0.0.1:3128\n", "", "proxy-url"),
        (
            "",
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n",
            "exec",
        ),
        ("", "    auth-provider:\n      name: gcp\n", "auth-provider"),
        (
            "",
            "    client-certificate: /root/cert.pem\n",
            "user.client-certificate: a file path",
        ),
        (
            "",
            "    client-key: /root/key.pem\n",
            "user.client-key: a file path",
        ),
        (
            "",
            "    tokenFile: /var/run/token\n",
            "tokenFile: a file path",
        ),
        // What this check once let through while sanitizing refused it: one rule set.
        (
            "    insecure-skip-tls-verify: \"true\"\n",
            "",
            "insecure-skip-tls-verify",
        ),
        (
            "    insecure-skip-tls-verify: yes\n",
            "",
            "insecure-skip-tls-verify",
        ),
        (
            "",
            "    username: admin\n",
            "user.username: basic authentication",
        ),
        (
            "",
            "    password: hunter2\n",
            "user.password: basic authentication",
        ),
    ];
    for (c, u, want) in cases {
        let why = refused(c, u).unwrap_or_else(|| panic!("not refused: {want}"));
        assert!(why.contains(want), "{why}");
        assert!(
            !why.contains("hunter2") && !why.contains("/etc/shadow"),
            "{why}"
        );
    }
}

#[test]
fn a_self_review_for_system_anonymous_is_a_failure() {
    let review = |user: serde_json::Value| serde_json::json!({"kind": "SelfSubjectReview", "status": {"userInfo": user}});
    let anon = review(serde_json::json!({"username": "system:anonymous",
            "groups": ["system:unauthenticated"]}));
    assert!(matches!(
        self_review("https://s", &anon),
        Err(LiveError::Anonymous { .. })
    ));
    // Remote text is escaped and bounded: it goes into commit messages.
    let odd = review(serde_json::json!({"username": "admin\nforged: line",
            "groups": ["a".repeat(1000)]}));
    let who = self_review("https://s", &odd).unwrap();
    assert_eq!(who.username, "admin forged: line");
    assert!(who.groups[0].chars().count() <= 257);
}

#[tokio::test]
async fn parse_errors_do_not_echo_the_input() {
    let secret = "client-key-data: [c2VjcmV0LWtleS1tYXRlcmlhbA==";
    let err = check_live(
        &SecretBytes::from(secret.to_owned()),
        Duration::from_secs(1),
    )
    .await
    .unwrap_err();
    let shown = err.to_string();
    assert!(matches!(err, LiveError::Parse(_)), "{shown}");
    assert!(!shown.contains("c2VjcmV0"), "{shown}");
}

#[tokio::test]
async fn an_exec_plugin_is_refused_before_any_client_exists() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let text = BASE.replace(
            "    client-key-data: AAAA\n",
            &format!(
                "    client-key-data: AAAA\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      \
                 command: /bin/sh\n      args: [\"-c\", \"touch {}\"]\n",
                marker.display()
            ),
        );
    let err = check_live(&SecretBytes::from(text), Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(err, LiveError::Unsafe(_)), "{err}");
    assert!(!marker.exists());
}
