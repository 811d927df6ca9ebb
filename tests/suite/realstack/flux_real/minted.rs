//! Minted credentials on the real controllers: one that may impersonate the deployer deploys, one that may not is refused at validate.

use super::*;

/// spoke 0's Kustomization makes Flux impersonate the ServiceAccount `deployer` on the
/// spoke (`spec.serviceAccountName`), in the seed's work tree `dir`.
fn kustomization_as_deployer(dir: &Path) {
    let path = dir.join("fluxcd/spoke0.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replace(
        "  path: ./apps/spoke0\n",
        "  path: ./apps/spoke0\n  serviceAccountName: deployer\n",
    );
    assert_ne!(edited, text);
    std::fs::write(&path, edited).unwrap();
}

/// `spoke-deployer` as [`deployer_role`] makes it ready, with `impersonate` on the
/// ServiceAccount `deployer` when `impersonate`.
fn deployer_role_impersonating(impersonate: bool) -> String {
    let mut role = deployer_role(true);
    if impersonate {
        role.push_str(
            "- apiGroups: [\"\"]\n  resources: [serviceaccounts]\n  verbs: [impersonate]\n  \
             resourceNames: [deployer]\n",
        );
    }
    role
}

/// Scenario 5 of issue 27: spoke 0's Kustomization names `serviceAccountName: deployer`
/// (applied to the hub by the real kustomize-controller) and the minted user's
/// ClusterRole lacks `impersonate`, as the real spoke's authorizer answers the
/// SelfSubjectAccessReview. The tick fails spoke 0 at validate naming the ServiceAccount
/// and the missing verb; no credential is committed or pushed, nothing reaches the hub,
/// and the refused generation's binding is gone from the spoke.
#[test]
fn a_minted_credential_that_may_not_impersonate_is_refused_at_validate_on_the_real_controllers() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_with(1, true, MINTED_DEPLOYER, kustomization_as_deployer);
    stack.spoke_apis[0].apply(&deployer_role_impersonating(false));
    let listed = stack
        .hub
        .api
        .get_json(&["kustomization", "spoke0", "-n", flux::NS]);
    assert_eq!(
        listed["spec"]["serviceAccountName"], "deployer",
        "{listed:#}"
    );
    let commits = stack.fleet.remote_log();

    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 1, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["stage"], "validate", "{spoke:#}");
    let error = spoke["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{spoke:#}"));
    for part in [
        "may not impersonate ServiceAccount flux-system/deployer",
        "missing verb impersonate on serviceaccounts",
        "Kustomization flux-system/spoke0",
    ] {
        assert!(error.contains(part), "{part}: {error}");
    }
    // The first tick pins the controller's certificate (a commit of its own); no
    // credential is committed or pushed.
    let log = stack.fleet.remote_log();
    let new = log.len() - commits.len();
    assert_eq!(log[new..], commits, "{log:?}");
    assert!(
        log[..new]
            .iter()
            .all(|c| c.starts_with("sealing: pin the controller's certificate")),
        "{log:?}"
    );
    let sealed = git(
        &stack.fleet.remote,
        &["ls-tree", "-r", "--name-only", "main", "fluxcd/"],
    );
    assert!(!sealed.contains("spoke0-kubeconfig"), "{sealed}");
    for kind in ["sealedsecret", "secret"] {
        let absent = stack
            .hub
            .api
            .try_kubectl(&["get", kind, "spoke0-kubeconfig", "-n", flux::NS]);
        assert!(absent.is_err(), "{kind}: {absent:?}");
    }
    let bindings = stack.spoke_apis[0].kubectl(&["get", "clusterrolebindings", "-o", "name"]);
    assert!(!bindings.contains("spokekeeper."), "{bindings}");
}

/// Scenario 5's twin: the same layout, the minted user's ClusterRole granting
/// `impersonate` on `deployer`, and `deployer` allowed to write ConfigMaps on the spoke.
/// The tick passes validate, and the real kustomize-controller, impersonating `deployer`
/// with the committed credential, applies the ConfigMap: every consumer Ready.
#[test]
fn a_minted_credential_that_may_impersonate_deploys_on_the_real_controllers() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_with(1, true, MINTED_DEPLOYER, kustomization_as_deployer);
    stack.spoke_apis[0].apply(&deployer_role_impersonating(true));
    stack.spoke_apis[0].apply(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  \
         name: deployer-apps\nrules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  \
         verbs: [get, list, watch, create, update, patch, delete]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  \
         name: deployer-apps\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  \
         kind: ClusterRole\n  name: deployer-apps\nsubjects:\n\
         - {kind: ServiceAccount, name: deployer, namespace: flux-system}\n",
    );
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert!(
        spoke["user"]
            .as_str()
            .is_some_and(|u| u.starts_with("spokekeeper:hub:spoke0:1:")),
        "{spoke:#}"
    );
    stack.assert_consumers_ready(&report, 0);
    stack.assert_deployed(0);
}
