use serde_json::{Value, json};

use super::*;

fn trust() -> Trust {
    Trust {
        issuer: "https://hub.example:6443".into(),
        discovery_url: None,
        issuer_ca: None,
        audience: "https://10.0.0.5:6443".into(),
        subjects: vec![
            "system:serviceaccount:flux-system:kustomize-controller".into(),
            "system:serviceaccount:flux-system:helm-controller".into(),
        ],
        username_prefix: "hub:".into(),
        next: None,
    }
}

fn parsed(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("the rendered file is YAML")
}

const V137: Version = Version {
    major: 1,
    minor: 37,
};

#[test]
fn versions_read_from_git_versions_of_each_distribution() {
    let v = |s| Version::parse(s).map(|v| (v.major, v.minor));
    assert_eq!(v("v1.33.1+k3s1"), Some((1, 33)));
    assert_eq!(v("v1.31.4+rke2r1"), Some((1, 31)));
    assert_eq!(v("v1.37.2"), Some((1, 37)));
    assert_eq!(v("v1.30.0-rc.1"), Some((1, 30)));
    assert_eq!(v("1.30.0"), None);
    assert_eq!(v("v1"), None);
    assert_eq!(v("vx.30"), None);
}

#[test]
fn the_file_trusts_one_issuer_for_one_audience_and_only_the_accepted_subjects() {
    let mut t = trust();
    t.discovery_url = Some("https://10.0.0.1:6443/.well-known/openid-configuration".into());
    t.issuer_ca = Some("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into());
    let doc = parsed(&render(&t, Distro::K3s, V137).unwrap());
    assert_eq!(doc["apiVersion"], "apiserver.config.k8s.io/v1");
    assert_eq!(doc["kind"], "AuthenticationConfiguration");
    let jwt = doc["jwt"].as_array().unwrap();
    assert_eq!(jwt.len(), 1);
    let issuer = &jwt[0]["issuer"];
    assert_eq!(issuer["url"], "https://hub.example:6443");
    assert_eq!(
        issuer["discoveryURL"],
        "https://10.0.0.1:6443/.well-known/openid-configuration"
    );
    assert_eq!(
        issuer["certificateAuthority"],
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    );
    assert_eq!(issuer["audiences"], json!(["https://10.0.0.5:6443"]));
    assert_eq!(
        jwt[0]["claimValidationRules"][0]["expression"],
        "claims.sub in [\"system:serviceaccount:flux-system:kustomize-controller\", \"system:serviceaccount:flux-system:helm-controller\"]"
    );
    assert_eq!(
        jwt[0]["claimMappings"]["username"],
        json!({"claim": "sub", "prefix": "hub:"})
    );
    assert_eq!(
        t.username("system:serviceaccount:flux-system:helm-controller"),
        "hub:system:serviceaccount:flux-system:helm-controller"
    );
}

#[test]
fn values_that_would_break_yaml_or_cel_stay_strings() {
    let mut t = trust();
    t.username_prefix = "a: b #c".into();
    t.subjects = vec!["x\"] || true || [\"".into()];
    let doc = parsed(&render(&t, Distro::K3s, V137).unwrap());
    let jwt = &doc["jwt"][0];
    assert_eq!(jwt["claimMappings"]["username"]["prefix"], "a: b #c");
    // The subject is one CEL string literal: the quote is escaped, not closing it.
    assert_eq!(
        jwt["claimValidationRules"][0]["expression"],
        "claims.sub in [\"x\\\"] || true || [\\\"\"]"
    );
    assert!(doc.get("claims").is_none() && doc["jwt"].as_array().unwrap().len() == 1);
}

#[test]
fn anonymous_stays_off_on_k3s_and_rke2_and_open_only_for_kubeadm_probes_and_join() {
    for distro in [Distro::K3s, Distro::Rke2] {
        let doc = parsed(&render(&trust(), distro, V137).unwrap());
        assert_eq!(doc["anonymous"], json!({"enabled": false}), "{distro:?}");
    }
    let doc = parsed(&render(&trust(), Distro::Kubeadm, V137).unwrap());
    assert_eq!(doc["anonymous"]["enabled"], true);
    let paths: Vec<&str> = doc["anonymous"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, KUBEADM_ANONYMOUS);
}

#[test]
fn the_api_version_follows_the_spoke_and_spokes_before_1_30_are_refused() {
    let at = |minor| render(&trust(), Distro::K3s, Version { major: 1, minor });
    let doc = parsed(&at(34).unwrap());
    assert_eq!(doc["apiVersion"], "apiserver.config.k8s.io/v1");
    let doc = parsed(&at(33).unwrap());
    assert_eq!(doc["apiVersion"], "apiserver.config.k8s.io/v1beta1");
    assert_eq!(doc["anonymous"], json!({"enabled": false}));
    // 1.30 and 1.31 have no anonymous block: --anonymous-auth stays the server's.
    let doc = parsed(&at(31).unwrap());
    assert_eq!(doc["apiVersion"], "apiserver.config.k8s.io/v1beta1");
    assert!(doc.get("anonymous").is_none());
    let e = at(29).unwrap_err();
    assert_eq!(
        e,
        TooOld {
            major: 1,
            minor: 29
        }
    );
    assert!(e.to_string().contains("from 1.30"), "{e}");
    assert!(
        e.to_string()
            .contains("keep credential.mode extracted or minted"),
        "{e}"
    );
}

#[test]
fn a_next_issuer_is_a_second_jwt_entry_with_the_same_audience_rule_and_prefix() {
    let one = render(&trust(), Distro::K3s, V137).unwrap();
    let mut t = trust();
    t.discovery_url = Some("https://10.0.0.1:6443/.well-known/openid-configuration".into());
    t.issuer_ca = Some("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into());
    t.next = Some(Issuer {
        issuer: "https://next.example".into(),
        discovery_url: Some("https://10.0.0.2/openid".into()),
        issuer_ca: Some("-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n".into()),
    });
    let doc = parsed(&render(&t, Distro::K3s, V137).unwrap());
    let jwt = doc["jwt"].as_array().unwrap();
    assert_eq!(jwt.len(), 2);
    assert_eq!(jwt[0]["issuer"]["url"], "https://hub.example:6443");
    assert_eq!(
        jwt[0]["issuer"]["certificateAuthority"],
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    );
    assert_eq!(
        jwt[1]["issuer"],
        json!({
            "url": "https://next.example",
            "discoveryURL": "https://10.0.0.2/openid",
            "certificateAuthority": "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n",
            "audiences": ["https://10.0.0.5:6443"],
        })
    );
    // The user names do not change with the issuer.
    for key in ["claimValidationRules", "claimMappings"] {
        assert_eq!(jwt[0][key], jwt[1][key], "{key}");
    }
    assert_eq!(doc["anonymous"], json!({"enabled": false}));
    // Without a next issuer the file is what it was: one entry, the same bytes.
    let mut back = t.clone();
    back.next = None;
    let alone = parsed(&render(&back, Distro::K3s, V137).unwrap());
    assert_eq!(alone["jwt"].as_array().unwrap().len(), 1);
    assert!(
        one.contains("jwt:\n- issuer:\n    url: \"https://hub.example:6443\"\n"),
        "{one}"
    );
}
