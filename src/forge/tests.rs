use super::*;

fn forge(kind: ForgeKind, url: &str) -> Forge {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("t");
    std::fs::write(&token, "s3cr3t-token\n").unwrap();
    Forge::new(&ForgeConfig {
        kind,
        url: url.parse().unwrap(),
        repository: "org/fleet".into(),
        token: TokenSource::File(token),
        labels: vec![],
        reviewers: vec![],
        timeout: Duration::from_secs(5),
        rate_limit_wait: Duration::from_secs(5),
    })
    .unwrap()
}

#[test]
fn api_roots_per_kind() {
    assert_eq!(
        forge(ForgeKind::Github, "https://api.github.com/").api,
        "https://api.github.com"
    );
    assert_eq!(
        forge(ForgeKind::Gitlab, "https://gitlab.example.org").api,
        "https://gitlab.example.org/api/v4"
    );
    assert_eq!(
        forge(ForgeKind::Gitea, "https://gitea.example.org/api/v1").api,
        "https://gitea.example.org/api/v1"
    );
}

#[test]
fn token_is_redacted_and_never_debugged() {
    let f = forge(ForgeKind::Github, "https://api.github.com");
    assert!(!format!("{f:?}").contains("s3cr3t"));
    let body = serde_json::json!({"message": "bad credentials s3cr3t-token"});
    let d = f.detail(&body, "");
    assert_eq!(d, "bad credentials [redacted]");
}

#[test]
fn rate_limits_read_from_headers() {
    let f = forge(ForgeKind::Github, "https://api.github.com");
    let mut h = HeaderMap::new();
    h.insert("retry-after", HeaderValue::from_static("7"));
    assert_eq!(
        f.rate_limited(StatusCode::FORBIDDEN, &h, &Value::Null),
        Some(Duration::from_secs(7))
    );
    let mut h = HeaderMap::new();
    h.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
    let reset = OffsetDateTime::now_utc().unix_timestamp() + 30;
    h.insert("x-ratelimit-reset", reset.to_string().parse().unwrap());
    let wait = f
        .rate_limited(StatusCode::FORBIDDEN, &h, &Value::Null)
        .unwrap();
    assert!(wait >= Duration::from_secs(28) && wait <= Duration::from_secs(30));
    assert_eq!(
        f.rate_limited(StatusCode::FORBIDDEN, &HeaderMap::new(), &Value::Null),
        None,
        "a plain 403 is a permission problem"
    );
}

#[test]
fn missing_token_names_the_field_and_the_fix() {
    let e = read_token(&TokenSource::Env("SPOKEKEEPER_TEST_UNSET_TOKEN".into()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("repo.forge.token_env") && e.contains("export"),
        "{e}"
    );
    let e = read_token(&TokenSource::File("/nonexistent/token".into()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("repo.forge.token_file"), "{e}");
}
