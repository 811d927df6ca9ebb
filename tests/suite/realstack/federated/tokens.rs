//! What a federated spoke's kube-apiserver does with hub tokens: who it says they are,
//! what RBAC lets them do, which it refuses, and when a changed file takes effect.

use super::*;

use std::time::Duration;

use support::realstack::federated::{
    DISCOVERY_BINDING, NO_ISSUERS, anonymous_discovery, config_hash, loaded_config_hash,
    reload_failures, wait_config_loaded, write_config,
};
use support::realstack::spoke::authentication_config_path;
use support::realstack::wait_until;

const USER: &str = "hub:system:serviceaccount:flux-system:kustomize-controller";

#[test]
fn a_hub_token_for_the_spokes_audience_is_the_prefixed_service_account_on_the_spoke() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let fed = Federation::start(&["spoke-a"]);
    let client = fed.hub.client(KUSTOMIZE, "spoke-a", &fed.spokes[0]);
    assert_eq!(client.whoami(), Ok(USER.to_string()));
}

#[test]
fn the_federated_user_may_do_what_its_spoke_binding_grants_and_nothing_without_it() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let fed = Federation::start(&["spoke-a"]);
    let spoke = &fed.spokes[0];
    let client = fed.hub.client(KUSTOMIZE, "spoke-a", spoke);
    assert_eq!(client.may("get", "configmaps", "default"), Ok(false));
    spoke.api.apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: lab-configmaps\n\
         rules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get, list]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: lab-configmaps\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: lab-configmaps\n\
         subjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: User\n  name: \"{USER}\"\n"
    ));
    // RBAC reads bindings through an informer: a moment passes before a change counts.
    wait_until(
        "the binding counts",
        Duration::from_secs(30),
        || match client.may("get", "configmaps", "default") {
            Ok(true) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    assert_eq!(client.may("get", "secrets", "default"), Ok(false));
    assert_eq!(client.may("delete", "configmaps", "default"), Ok(false));
    spoke
        .api
        .kubectl(&["delete", "clusterrolebinding", "lab-configmaps"]);
    wait_until(
        "the deleted binding no longer counts",
        Duration::from_secs(30),
        || match client.may("get", "configmaps", "default") {
            Ok(false) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
}

#[test]
fn tokens_for_another_audience_another_service_account_or_another_issuer_are_refused_with_401() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let fed = Federation::start(&["spoke-a"]);
    let spoke = &fed.spokes[0];
    let other_hub = Hub::start("other-hub", fed.dir.path(), &fed.etcd);
    // The right token passes, so each refusal below is the token's doing.
    assert_eq!(
        fed.hub.client(KUSTOMIZE, "spoke-a", spoke).whoami(),
        Ok(USER.to_string())
    );
    assert_eq!(
        fed.hub.client(KUSTOMIZE, "spoke-b", spoke).whoami(),
        Err(401),
        "another audience"
    );
    assert_eq!(
        fed.hub.client("helm-controller", "spoke-a", spoke).whoami(),
        Err(401),
        "another ServiceAccount of the same hub (the claim validation rule)"
    );
    assert_eq!(
        other_hub.client(KUSTOMIZE, "spoke-a", spoke).whoami(),
        Err(401),
        "the same ServiceAccount and audience from another issuer"
    );
}

#[test]
fn a_token_for_spoke_a_is_refused_by_spoke_b() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let fed = Federation::start(&["spoke-a", "spoke-b"]);
    let (a, b) = (&fed.spokes[0], &fed.spokes[1]);
    assert_eq!(
        fed.hub.client(KUSTOMIZE, "spoke-a", a).whoami(),
        Ok(USER.to_string())
    );
    assert_eq!(
        fed.hub.client(KUSTOMIZE, "spoke-b", b).whoami(),
        Ok(USER.to_string())
    );
    assert_eq!(fed.hub.client(KUSTOMIZE, "spoke-a", b).whoami(), Err(401));
}

/// The spoke runs a renamed-over file without a restart: trusting nobody, then the hub
/// for `spoke-a`, then for `spoke-b` only. The times are printed; see the module's
/// comment for what they were.
#[test]
fn a_changed_file_is_run_without_a_restart() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut fed = Federation::start(&[]);
    let spoke = federated_spoke(&fed.lab, &fed.etcd, fed.dir.path());
    let pid = spoke.api.proc.pid();
    wait_config_loaded(&spoke.api, NO_ISSUERS, Duration::from_secs(10));
    let token_a = fed.hub.client(KUSTOMIZE, "spoke-a", &spoke);
    assert_eq!(token_a.whoami(), Err(401), "no issuer trusted yet");
    let first =
        spoke.write_authentication_config(&authentication_config(&[fed.hub.trust("spoke-a")]));
    assert_eq!(token_a.whoami(), Ok(USER.to_string()));
    let second =
        spoke.write_authentication_config(&authentication_config(&[fed.hub.trust("spoke-b")]));
    assert_eq!(token_a.whoami(), Err(401), "spoke-a no longer trusted");
    assert_eq!(
        fed.hub.client(KUSTOMIZE, "spoke-b", &spoke).whoami(),
        Ok(USER.to_string())
    );
    assert_eq!(spoke.api.proc.pid(), pid, "the same API server process");
    eprintln!("authentication config run after: {first:?} (new issuer), {second:?} (new audience)");
    fed.spokes.push(spoke);
}

/// The `anonymous` block is fixed at start: a file that changes it is refused (counted as
/// a failed reload) and the spoke keeps running the file it had, tokens and all.
#[test]
fn a_file_that_changes_the_anonymous_block_is_refused_and_the_previous_one_kept() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let fed = Federation::start(&["spoke-a"]);
    let spoke = &fed.spokes[0];
    let kept = authentication_config(&[fed.hub.trust("spoke-a")]);
    let before = reload_failures(&spoke.api).expect("the reload metrics");
    let changed = kept.replace(
        "\"anonymous\": {\n    \"enabled\": false\n  }",
        "\"anonymous\": {\n    \"enabled\": true\n  }",
    );
    assert_ne!(
        changed, kept,
        "the lab's file has the anonymous block it replaces"
    );
    write_config(&authentication_config_path(&spoke.node), &changed);
    wait_until(
        "the changed file counted as a failed reload",
        Duration::from_secs(90),
        || match reload_failures(&spoke.api)? {
            n if n > before => Ok(()),
            n => Err(format!("{n} failed reloads")),
        },
    );
    assert_eq!(loaded_config_hash(&spoke.api), Ok(config_hash(&kept)));
    assert_eq!(
        fed.hub.client(KUSTOMIZE, "spoke-a", spoke).whoami(),
        Ok(USER.to_string())
    );
}

/// The spoke fetches the issuer's discovery document and JWKS without credentials: from a
/// hub that does not grant them to anyone, the file naming it is never run (a failed
/// reload after the minute's timeout) and the file before it stays in force.
#[test]
fn a_file_naming_an_issuer_without_anonymous_discovery_fails_to_load_and_the_previous_one_stays() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let fed = Federation::start(&["spoke-a"]);
    let spoke = &fed.spokes[0];
    let closed = Hub::start("closed-hub", fed.dir.path(), &fed.etcd);
    let open = anonymous_discovery(&closed.api, &closed.pki.parts.ca_pem);
    assert!(open.is_ok(), "{open:?}");
    closed
        .api
        .kubectl(&["delete", "clusterrolebinding", DISCOVERY_BINDING]);
    wait_until(
        "discovery refused to anyone",
        Duration::from_secs(30),
        || match anonymous_discovery(&closed.api, &closed.pki.parts.ca_pem) {
            Err(e) if e.contains("Forbidden") => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    let kept = authentication_config(&[fed.hub.trust("spoke-a")]);
    let before = reload_failures(&spoke.api).expect("the reload metrics");
    let mut other = closed.trust("spoke-a");
    other.prefix = "closed:".into();
    write_config(
        &authentication_config_path(&spoke.node),
        &authentication_config(&[fed.hub.trust("spoke-a"), other]),
    );
    wait_until(
        "a failed reload",
        Duration::from_secs(150),
        || match reload_failures(&spoke.api)? {
            n if n > before => Ok(()),
            n => Err(format!("{n} failed reloads")),
        },
    );
    assert_eq!(loaded_config_hash(&spoke.api), Ok(config_hash(&kept)));
    assert_eq!(
        fed.hub.client(KUSTOMIZE, "spoke-a", spoke).whoami(),
        Ok(USER.to_string())
    );
    assert_eq!(
        closed.client(KUSTOMIZE, "spoke-a", spoke).whoami(),
        Err(401)
    );
}
