use super::*;

fn page(v: serde_json::Value) -> Page {
    serde_json::from_value(v).unwrap()
}

#[test]
fn only_objects_in_the_namespace_that_use_the_secret() {
    let p = page(serde_json::json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "KustomizationList",
        "metadata": {"resourceVersion": "9", "continue": "abc"},
        "items": [
            {"metadata": {"name": "apps", "namespace": "flux-system"},
             "spec": {"kubeConfig": {"secretRef": {"name": "dev-kubeconfig", "key": "value"}}, "path": "./x"}},
            {"metadata": {"name": "infra", "namespace": "flux-system"},
             "spec": {"kubeConfig": {"secretRef": {"name": "test-kubeconfig"}}}},
            {"metadata": {"name": "local", "namespace": "flux-system"}, "spec": {"path": "./y"}},
            {"metadata": {"name": "nokc", "namespace": "flux-system"}, "spec": {"kubeConfig": null}},
            {"metadata": {"name": "elsewhere", "namespace": "other"},
             "spec": {"kubeConfig": {"secretRef": {"name": "dev-kubeconfig"}}}},
            {"metadata": {"name": "nospec"}}
        ]
    }));
    assert_eq!(p.metadata.next.as_deref(), Some("abc"));
    let secrets = BTreeSet::from(["dev-kubeconfig".to_string()]);
    let found = matching(Kind::Kustomization, "flux-system", p.items, &secrets).unwrap();
    assert_eq!(
        found,
        [Listing {
            secret: "dev-kubeconfig".to_string(),
            config_map: false,
            consumer: Consumer {
                kind: Kind::Kustomization,
                namespace: "flux-system".into(),
                name: "apps".into()
            },
            key: "value".into(),
            service_account: String::new(),
        }]
    );
    assert_eq!(
        found[0].consumer.to_string(),
        "Kustomization flux-system/apps"
    );
}

#[test]
fn the_key_flux_reads_follows_its_fallback_to_value_then_value_yaml() {
    // Named: that key only.
    assert_eq!(misread("value", "value"), None);
    assert_eq!(
        misread("kubeconfig", "value").as_deref(),
        Some("reads key kubeconfig")
    );
    assert_eq!(
        misread("value", "kubeconfig").as_deref(),
        Some("reads key value")
    );
    // Unset: `value`, else `value.yaml`; the Secret holds only the key written.
    assert_eq!(misread("", "value"), None);
    assert_eq!(misread("", "value.yaml"), None);
    let unset = misread("", "kubeconfig").unwrap();
    assert!(
        unset.contains("value (then value.yaml") && unset.contains("unset"),
        "{unset}"
    );
    // Hub text: one bounded line.
    let hostile = misread(&format!("a\nb{}", "x".repeat(500)), "value").unwrap();
    assert!(
        !hostile.contains('\n') && hostile.chars().count() < 100,
        "{hostile}"
    );
}

#[test]
fn the_service_accounts_flux_impersonates_are_each_listed_once() {
    let p = page(serde_json::json!({"items": [
        {"metadata": {"name": "a", "namespace": "flux-system"},
         "spec": {"serviceAccountName": "deployer", "kubeConfig": {"secretRef": {"name": "dev-kubeconfig"}}}},
        {"metadata": {"name": "b", "namespace": "flux-system"},
         "spec": {"serviceAccountName": "deployer", "kubeConfig": {"secretRef": {"name": "dev-kubeconfig"}}}},
        {"metadata": {"name": "c", "namespace": "flux-system"},
         "spec": {"serviceAccountName": "", "kubeConfig": {"secretRef": {"name": "dev-kubeconfig"}}}},
        {"metadata": {"name": "d", "namespace": "flux-system"},
         "spec": {"serviceAccountName": "other", "kubeConfig": {"secretRef": {"name": "test-kubeconfig"}}}}
    ]}));
    let secrets = BTreeSet::from(["dev-kubeconfig".to_string(), "test-kubeconfig".to_string()]);
    let found = matching(Kind::Kustomization, "flux-system", p.items, &secrets).unwrap();
    let listed = Listed::from([("flux-system".to_string(), Ok(found))]);
    let text =
        "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";
    let cfg = crate::config::Config::parse(text, "spokekeeper.yaml", std::path::Path::new("/x"))
        .unwrap_or_else(|e| panic!("{e}"));
    let shown = |got: Vec<Impersonated>| {
        got.iter()
            .map(|i| format!("{}/{} for {}", i.namespace, i.name, i.consumer))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        shown(impersonated(&cfg.spokes[0], &listed, None)),
        ["flux-system/deployer for Kustomization flux-system/a"]
    );
    // The controllers' --default-service-account stands in for an unset one.
    assert_eq!(
        shown(impersonated(&cfg.spokes[0], &listed, Some("flux-deployer"))),
        [
            "flux-system/deployer for Kustomization flux-system/a",
            "flux-system/flux-deployer for Kustomization flux-system/c"
        ]
    );
    // A configured kustomization is not listed: nothing known to check.
    let text = text.replace("10.0.0.1}", "10.0.0.1, kustomization: {}}");
    let cfg = crate::config::Config::parse(&text, "spokekeeper.yaml", std::path::Path::new("/x"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(impersonated(&cfg.spokes[0], &listed, Some("x")), []);
    // Not a name: the listing fails (it goes into a review the spoke answers).
    let p = page(serde_json::json!({"items": [
        {"metadata": {"name": "a"},
         "spec": {"serviceAccountName": "x\ny", "kubeConfig": {"secretRef": {"name": "dev-kubeconfig"}}}}
    ]}));
    let e = matching(Kind::HelmRelease, "flux-system", p.items, &secrets)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("HelmRelease flux-system/a has spec.serviceAccountName") && !e.contains('\n'),
        "{e}"
    );
}

#[test]
fn a_consumer_name_that_is_no_kubernetes_name_fails_the_listing() {
    let p = page(serde_json::json!({"items": [
        {"metadata": {"name": "../../secrets/x\nforged"},
         "spec": {"kubeConfig": {"secretRef": {"name": "dev-kubeconfig"}}}}
    ]}));
    let secrets = BTreeSet::from(["dev-kubeconfig".to_string()]);
    let e = matching(Kind::HelmRelease, "flux-system", p.items, &secrets)
        .unwrap_err()
        .to_string();
    assert!(e.contains("HelmRelease in flux-system named"), "{e}");
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn a_failed_call_is_one_bounded_line() {
    let body = serde_json::json!({"kind": "Status", "reason": "Forbidden",
            "message": format!("helmreleases.helm.toolkit.fluxcd.io is forbidden:\nUser {}", "x".repeat(1000))});
    let e = api_error(
        hyper::http::StatusCode::FORBIDDEN,
        body.to_string().as_bytes(),
    );
    assert!(e.starts_with("403 Forbidden: helmreleases"), "{e}");
    assert!(!e.contains('\n') && e.chars().count() <= 300, "{e}");
    assert_eq!(
        api_error(hyper::http::StatusCode::BAD_GATEWAY, b"<html>"),
        "502 Bad Gateway"
    );
}

#[test]
fn a_federated_spokes_consumers_reach_it_through_its_configmap_and_a_sealed_spokes_through_its_secret()
 {
    let p = page(serde_json::json!({"items": [
        {"metadata": {"name": "by-secret", "namespace": "flux-system"},
         "spec": {"kubeConfig": {"secretRef": {"name": "dev-kubeconfig"}}}},
        {"metadata": {"name": "by-configmap", "namespace": "flux-system"},
         "spec": {"kubeConfig": {"configMapRef": {"name": "dev-kubeconfig"}}}},
        {"metadata": {"name": "other-configmap", "namespace": "flux-system"},
         "spec": {"kubeConfig": {"configMapRef": {"name": "prod-kubeconfig"}}}}
    ]}));
    let secrets = BTreeSet::from(["dev-kubeconfig".to_string()]);
    let found = matching(Kind::Kustomization, "flux-system", p.items, &secrets).unwrap();
    assert_eq!(
        found
            .iter()
            .map(|l| (l.consumer.name.as_str(), l.config_map))
            .collect::<Vec<_>>(),
        [("by-secret", false), ("by-configmap", true)]
    );
    let listed = Listed::from([("flux-system".to_string(), Ok(found))]);
    let names = |text: &str| {
        let cfg =
            crate::config::Config::parse(text, "spokekeeper.yaml", std::path::Path::new("/x"))
                .unwrap_or_else(|e| panic!("{e}"));
        let (_, found) = of(&cfg.spokes[0], &listed);
        found
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect::<Vec<_>>()
    };
    let sealed =
        "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";
    assert_eq!(names(sealed), ["by-secret"]);
    let federated = "repo: {path: f}\nsealing: {cert: c.pem}\nhub: {}\nspokes:\n  - {name: dev, address: 10.0.0.1, credential: {mode: federated, federated: {issuer: \"https://hub\"}}}\n";
    assert_eq!(names(federated), ["by-configmap"]);
    // What still reads a federated spoke's old Secret; a sealed spoke has none.
    let old = |text: &str| {
        let cfg =
            crate::config::Config::parse(text, "spokekeeper.yaml", std::path::Path::new("/x"))
                .unwrap_or_else(|e| panic!("{e}"));
        on_old_secret(&cfg.spokes[0], &listed)
            .into_iter()
            .map(|c| c.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(old(federated), ["by-secret"]);
    assert!(old(sealed).is_empty());
}
