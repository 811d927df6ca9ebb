use std::sync::Arc;

use super::authn::{SpokeTrust, sha256};
use super::{Issuer, Reachable};

const KUSTOMIZE: (&str, &str, &str) = ("flux-system", "kustomize-controller", "uid-1");
const SUB: &str = "system:serviceaccount:flux-system:kustomize-controller";

/// A file as spokekeeper renders one: the issuer, one audience, the accepted subjects.
fn config(issuer: &str, audience: &str, subjects: &[&str]) -> String {
    let subjects: Vec<String> = subjects.iter().map(|s| format!("{s:?}")).collect();
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n\
         - issuer:\n    url: {issuer:?}\n    audiences:\n    - {audience:?}\n  claimValidationRules:\n\
         \x20 - expression: {:?}\n    message: \"only these\"\n  claimMappings:\n    username:\n\
         \x20     claim: \"sub\"\n      prefix: \"hub:\"\nanonymous:\n  enabled: false\n",
        format!("claims.sub in [{}]", subjects.join(", "))
    )
}

fn aud(a: &str) -> Vec<String> {
    vec![a.to_owned()]
}

#[test]
fn a_token_verifies_with_its_issuer_only_and_says_what_was_asked() {
    let hub = Issuer::new("https://hub.lab.invalid");
    let other = Issuer::new("https://hub.lab.invalid");
    let token = hub.token(KUSTOMIZE, &aud("spoke-a"), 600);
    let claims = hub.verify(&token).expect("its own token");
    assert_eq!(claims.subject, SUB);
    assert_eq!(claims.audiences, ["spoke-a"]);
    assert_eq!(claims.issuer, "https://hub.lab.invalid");
    assert_eq!(claims.expires - claims.not_before, 600);
    assert_eq!(other.verify(&token), None, "another key, same URL");
    let mut forged = token.clone();
    forged.pop();
    forged.push(if token.ends_with('A') { 'B' } else { 'A' });
    assert_eq!(hub.verify(&forged), None, "a signature changed");
}

#[test]
fn the_spoke_lets_in_the_accepted_subject_for_its_audience_under_the_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("authentication-config.yaml");
    let hub = Arc::new(Issuer::new("https://hub.lab.invalid"));
    let stranger = Arc::new(Issuer::new("https://stranger.lab.invalid"));
    std::fs::write(&path, config(&hub.url, "spoke-a", &[SUB])).unwrap();
    let trust = SpokeTrust::new(path, Reachable(vec![hub.clone(), stranger.clone()]));
    let ok = hub.token(KUSTOMIZE, &aud("spoke-a"), 600);
    assert_eq!(trust.authenticate(&ok), Some(format!("hub:{SUB}")));
    let refused = [
        hub.token(KUSTOMIZE, &aud("spoke-b"), 600),
        hub.token(
            ("flux-system", "helm-controller", "u"),
            &aud("spoke-a"),
            600,
        ),
        hub.token(KUSTOMIZE, &aud("spoke-a"), -1),
        stranger.token(KUSTOMIZE, &aud("spoke-a"), 600),
        "not.a.token".to_owned(),
    ];
    for token in refused {
        assert_eq!(trust.authenticate(&token), None);
    }
}

#[test]
fn a_rewritten_file_is_run_and_a_bad_one_counted_as_failed_and_the_previous_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("authentication-config.yaml");
    let hub = Arc::new(Issuer::new("https://hub.lab.invalid"));
    let first = config(&hub.url, "spoke-a", &[SUB]);
    std::fs::write(&path, &first).unwrap();
    let trust = SpokeTrust::new(path.clone(), Reachable::of(&hub));
    let hash = |m: &str| {
        m.lines()
            .find(|l| l.starts_with("apiserver_authentication_config_controller_last_config_info{"))
            .and_then(|l| l.split(",hash=\"").nth(1))
            .and_then(|h| h.split('"').next())
            .map(str::to_owned)
    };
    let started = trust.metrics();
    assert_eq!(hash(&started), Some(sha256(&first)));
    assert!(!started.contains("automatic_reloads_total{"), "{started}");
    let second = config(&hub.url, "spoke-b", &[SUB]);
    std::fs::write(&path, &second).unwrap();
    assert_eq!(hash(&trust.metrics()), Some(sha256(&second)));
    let token_b = hub.token(KUSTOMIZE, &aud("spoke-b"), 600);
    assert_eq!(trust.authenticate(&token_b), Some(format!("hub:{SUB}")));
    // An issuer out of reach, then a file that is no configuration: both refused.
    for bad in [
        config("https://elsewhere.invalid", "spoke-c", &[SUB]),
        "jwt: [".into(),
    ] {
        std::fs::write(&path, bad).unwrap();
        assert_eq!(hash(&trust.metrics()), Some(sha256(&second)));
    }
    let metrics = trust.metrics();
    assert!(metrics.contains("status=\"failure\"} 2\n"), "{metrics}");
    assert!(metrics.contains("status=\"success\"} 1\n"), "{metrics}");
    assert_eq!(trust.authenticate(&token_b), Some(format!("hub:{SUB}")));
}
