use serde_json::json;

use super::flux::merge;
use super::rbac_attributes;

#[test]
fn rbac_attributes_as_the_authorizer_derives_them() {
    let a = |m, p| rbac_attributes(m, p).map(|(g, r, v)| format!("{g}|{r}|{v}"));
    assert_eq!(
        a("GET", "/api/v1/namespaces/kube-system/services/http:sealed-secrets-controller:http/proxy/v1/cert.pem").as_deref(),
        Some("|services/proxy|get")
    );
    assert_eq!(
        a(
            "GET",
            "/api/v1/namespaces/kube-system/services/sealed-secrets-controller"
        )
        .as_deref(),
        Some("|services|get")
    );
    assert_eq!(
        a(
            "PATCH",
            "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations/dev"
        )
        .as_deref(),
        Some("kustomize.toolkit.fluxcd.io|kustomizations|patch")
    );
    assert_eq!(
        a("GET", "/api/v1/namespaces/x/secrets").as_deref(),
        Some("|secrets|list"),
        "a collection GET is a list, not a get"
    );
    assert_eq!(
        a("POST", "/apis/coordination.k8s.io/v1/namespaces/x/leases").as_deref(),
        Some("coordination.k8s.io|leases|create")
    );
    assert_eq!(
        a("PUT", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l").as_deref(),
        Some("coordination.k8s.io|leases|update")
    );
    assert_eq!(a("GET", "/version"), None);
}

#[test]
fn merge_patch_sets_and_removes() {
    let mut v = json!({"metadata": {"annotations": {"a": "1", "b": "2"}, "name": "x"}});
    merge(
        &mut v,
        &json!({"metadata": {"annotations": {"a": null, "c": "3"}}}),
    );
    assert_eq!(
        v,
        json!({"metadata": {"annotations": {"b": "2", "c": "3"}, "name": "x"}})
    );
}
