use super::*;

#[test]
fn the_metrics_say_which_configuration_runs_and_how_many_reloads_failed() {
    let text = "# HELP apiserver_authentication_config_controller_last_config_info Information\n\
        # TYPE apiserver_authentication_config_controller_last_config_info gauge\n\
        apiserver_authentication_config_controller_last_config_info{apiserver_id_hash=\"sha256:aa\",hash=\"sha256:0f\"} 1\n\
        apiserver_authentication_config_controller_automatic_reloads_total{apiserver_id_hash=\"sha256:aa\",status=\"failure\"} 3\n\
        apiserver_authentication_config_controller_automatic_reloads_total{apiserver_id_hash=\"sha256:aa\",status=\"success\"} 7\n\
        apiserver_request_total{code=\"200\"} 12\n";
    let loaded = Loaded::parse(text);
    assert_eq!(
        loaded,
        Loaded {
            hashes: vec!["sha256:0f".into()],
            failures: 3
        }
    );
    assert!(!loaded.runs("x"));
    assert_eq!(
        Loaded::parse("apiserver_request_total 1\n"),
        Loaded::default()
    );
}

#[test]
fn the_hash_is_the_api_servers_sha256_of_the_file() {
    // Go: fmt.Sprintf("sha256:%x", sha256.Sum256([]byte("abc")))
    assert_eq!(
        hash_of("abc"),
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    let loaded = Loaded {
        hashes: vec![hash_of("abc")],
        failures: 0,
    };
    assert!(loaded.runs("abc") && !loaded.runs("abd"));
}

fn jwt(payload: &str) -> SecretBytes {
    let body = URL_SAFE_NO_PAD.encode(payload);
    SecretBytes::from(format!("eyJhbGciOiJSUzI1NiJ9.{body}.c2ln").into_bytes())
}

#[test]
fn a_tokens_claims_are_read_and_a_token_without_them_is_refused() {
    let c = Claims::of(&jwt(
        r#"{"iss":"https://hub:6443","sub":"system:serviceaccount:flux-system:kustomize-controller","aud":["https://10.0.0.5:6443"]}"#,
    ))
    .unwrap();
    assert_eq!(c.issuer, "https://hub:6443");
    assert_eq!(c.audiences, ["https://10.0.0.5:6443"]);
    assert_eq!(
        Claims::of(&jwt(r#"{"iss":"x","sub":"y","aud":"one"}"#))
            .unwrap()
            .audiences,
        ["one"]
    );
    assert_eq!(Claims::of(&jwt(r#"{"sub":"y"}"#)), Err("it has no iss"));
    assert_eq!(
        Claims::of(&SecretBytes::from(b"opaque".to_vec())),
        Err("not a JWT")
    );
    assert_eq!(
        Claims::of(&SecretBytes::from(b"a.!!!.c".to_vec())),
        Err("its payload is not base64url")
    );
}

#[test]
fn the_in_memory_kubeconfig_holds_the_spoke_its_cas_and_the_token() {
    let token = SecretBytes::from(b"tok\"en".to_vec());
    let kc = bearer_kubeconfig("https://10.0.0.5:6443", "PEM", &token).unwrap();
    let v: Value = serde_saphyr::from_str(std::str::from_utf8(kc.expose()).unwrap()).unwrap();
    assert_eq!(
        v["clusters"][0]["cluster"]["server"],
        "https://10.0.0.5:6443"
    );
    assert_eq!(
        v["clusters"][0]["cluster"]["certificate-authority-data"],
        "UEVN"
    );
    assert_eq!(v["users"][0]["user"]["token"], "tok\"en");
}
