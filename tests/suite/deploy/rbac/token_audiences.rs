//! The chart's token audience policy: Flux's controllers may not ask the hub for a token
//! the hub itself accepts, which a changed `provider: generic` ConfigMap would have them
//! send to its address.
//!
//! What a ValidatingAdmissionPolicy sees of a TokenRequest (k8s.io/kubernetes v1.37.2 as
//! `k8s`, k8s.io/apiserver v0.37.2 as `apiserver`): the create handler makes the admission
//! attributes from the decoded body with the `token` subresource and passes validating
//! admission to the storage as `createValidation` (apiserver
//! pkg/endpoints/handlers/create.go 182, 188; pkg/registry/rest/create.go 218-243, which
//! builds the attributes again around the object the storage hands it). The kind is
//! authentication.k8s.io/v1 TokenRequest (k8s pkg/registry/core/serviceaccount/storage/
//! token.go 88-92, 343, registered by apiserver pkg/endpoints/installer.go 261), which a
//! policy matches as `attr.GetKind()` (apiserver pkg/admission/plugin/policy/matching/
//! matching.go 124) and converts the object to (validating/dispatcher.go 170). TokenREST
//! fills empty `spec.audiences` with the API server's audiences, then calls
//! `createValidation(ctx, obj.DeepCopyObject())` (token.go 130-133, 159-163): so `object`
//! is the TokenRequest with its audiences already defaulted, and a request naming none is
//! judged by the hub's audiences. (An older token.go in the code index called validation
//! first, before defaulting: the policy refuses empty audiences too.)

use super::*;

use std::time::Duration;

use support::realstack::federated::issuer_control_plane;
use support::realstack::kube::KubeApi;
use support::realstack::wait_until;

const KUSTOMIZE: &str = "system:serviceaccount:flux-system:kustomize-controller";
const HELM_CONTROLLER: &str = "system:serviceaccount:flux-system:helm-controller";

fn policy(
    objects: &[Object],
) -> Option<(
    &ValidatingAdmissionPolicy,
    &ValidatingAdmissionPolicyBinding,
)> {
    let policy = objects.iter().find_map(|o| match o {
        Object::AdmissionPolicy(p) => Some(p),
        _ => None,
    })?;
    let binding = one(objects, |o| match o {
        Object::AdmissionPolicyBinding(b) => Some(b),
        _ => None,
    });
    Some((policy, binding))
}

/// The users the policy's match condition lists, read back from its CEL list.
fn matched_users(policy: &ValidatingAdmissionPolicy) -> Vec<String> {
    let spec = policy.spec.as_ref().unwrap();
    let conditions = spec.match_conditions.as_ref().unwrap();
    assert_eq!(conditions.len(), 1);
    let list = conditions[0]
        .expression
        .strip_prefix("request.userInfo.username in ")
        .unwrap_or_else(|| panic!("{}", conditions[0].expression));
    serde_json::from_str(list).unwrap()
}

/// The hub audiences the policy refuses, read back from its CEL list.
fn refused_audiences(policy: &ValidatingAdmissionPolicy) -> Vec<String> {
    let spec = policy.spec.as_ref().unwrap();
    let variable = spec
        .variables
        .iter()
        .flatten()
        .find(|v| v.name == "hubAudiences")
        .expect("the hubAudiences variable");
    serde_json::from_str(&variable.expression).unwrap()
}

/// Two federated spokes (one with accounts of its own), a sealed one, two hub audiences.
const TWO_FEDERATED: &str = r#"
federated: {hubAudiences: ["https://hub.example.org:6443", "k3s"]}
config:
  credential:
    federated: {issuer: "https://hub.example.org:6443"}
  spokes:
    - {name: dev, address: 10.0.0.1}
    - {name: edge, address: 10.0.0.2, credential: {mode: federated}}
    - name: lab
      address: 10.0.0.3
      credential: {mode: federated, federated: {service_accounts: [tenants/lab-deployer]}}
"#;

#[test]
fn chart_policy_holds_flux_controllers_and_the_federated_accounts_to_non_hub_audiences() {
    crate::support::requires!(HELM);
    let objects = read_all(&render_with(TWO_FEDERATED), "chart (token policy)");
    let (policy, binding) = policy(&objects).expect("a federated spoke installs the policy");
    let name = "sk-spokekeeper.spokekeeper.flux-token-audiences";
    assert_eq!(policy.metadata.name.as_deref(), Some(name));
    let spec = policy.spec.as_ref().unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let rules = spec
        .match_constraints
        .as_ref()
        .unwrap()
        .resource_rules
        .as_ref()
        .unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["serviceaccounts/token".to_string()][..])
    );
    assert_eq!(
        rules[0].operations.as_deref(),
        Some(&["CREATE".to_string()][..])
    );
    assert_eq!(
        matched_users(policy),
        [
            "system:serviceaccount:flux-system:helm-controller",
            "system:serviceaccount:flux-system:kustomize-controller",
            "system:serviceaccount:tenants:lab-deployer",
        ],
        "Flux's two controllers and lab's own account; dev is sealed"
    );
    assert_eq!(
        refused_audiences(policy),
        ["https://hub.example.org:6443", "k3s"]
    );
    let binding = binding.spec.as_ref().unwrap();
    assert_eq!(binding.policy_name.as_deref(), Some(name));
    assert_eq!(
        binding.validation_actions.as_deref(),
        Some(&["Deny".to_string()][..])
    );
}

#[test]
fn chart_with_a_federated_spoke_and_no_hub_audiences_refuses_naming_the_value() {
    crate::support::requires!(HELM);
    let values = "config:\n  credential: {mode: federated, federated: {issuer: \"https://hub\"}}\n";
    let err = refused_with(values, "without the hub's audiences");
    assert!(
        err.contains("federated.hubAudiences")
            && err.contains("--api-audiences")
            && err.contains("/.well-known/openid-configuration")
            && err.contains("tokenAudiencePolicy.enabled: false"),
        "{err}"
    );
    // Turned off, the same values render, without a policy.
    let off = read_all(
        &render_with(&format!(
            "federated: {{tokenAudiencePolicy: {{enabled: false}}}}\n{values}"
        )),
        "chart (policy off)",
    );
    assert!(policy(&off).is_none());
}

#[test]
fn chart_installs_the_policy_without_a_federated_spoke_only_when_given_hub_audiences() {
    crate::support::requires!(HELM);
    assert!(policy(&read_all(&render(&[]), "chart (defaults)")).is_none());
    let objects = read_all(
        &render_with("federated: {hubAudiences: [\"https://hub.example.org\"]}\n"),
        "chart (sealed fleet, hub audiences)",
    );
    let (policy, _) = policy(&objects).expect("hub audiences alone install the policy");
    assert_eq!(matched_users(policy), [HELM_CONTROLLER, KUSTOMIZE]);
    assert_eq!(refused_audiences(policy), ["https://hub.example.org"]);
}

/// `kubectl create token` of `namespace/sa` as `user` (impersonated by the admin) for
/// `audiences`: the audiences the TokenRequest came back with (never the token), or the
/// refusal.
fn token_audiences(
    api: &KubeApi,
    user: &str,
    namespace: &str,
    sa: &str,
    audiences: &[&str],
) -> Result<Vec<String>, String> {
    let mut args = vec![
        format!("--as={user}"),
        "create".into(),
        "token".into(),
        sa.into(),
        "-n".into(),
        namespace.into(),
        "--duration=10m".into(),
        "-o".into(),
        "jsonpath={range .spec.audiences[*]}{@}{\"\\n\"}{end}".into(),
    ];
    args.extend(audiences.iter().map(|a| format!("--audience={a}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    api.try_kubectl(&args)
        .map(|out| out.lines().map(str::to_string).collect())
}

/// The chart's policy and binding, rendered for one federated spoke and `hub_audience`,
/// applied to `api`; returns once it refuses kustomize-controller the hub's audience.
fn install_policy(api: &KubeApi, hub_audience: &str) -> String {
    let values = format!(
        "federated: {{hubAudiences: [{}]}}\nconfig:\n  credential: {{mode: federated, federated: {{issuer: {}}}}}\n",
        serde_json::json!(hub_audience),
        serde_json::json!(hub_audience),
    );
    let objects = render_with(&values);
    let mut name = String::new();
    for doc in objects
        .iter()
        .filter(|d| d["apiVersion"] == "admissionregistration.k8s.io/v1")
    {
        name = doc["metadata"]["name"].as_str().unwrap().to_string();
        api.apply(&doc.to_string());
    }
    assert!(!name.is_empty(), "the chart renders the policy");
    // Admission reads policies through an informer: a moment passes before one counts.
    wait_until(
        "the policy refuses",
        Duration::from_secs(30),
        || match token_audiences(
            api,
            KUSTOMIZE,
            "flux-system",
            "kustomize-controller",
            &[hub_audience],
        ) {
            Err(e) if e.contains(&name) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    name
}

/// Flux's install binds its two controllers to cluster-admin (flux2
/// manifests/rbac/reconciler.yaml); another account may ask for its own tokens.
const HUB_RBAC: &str = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
metadata:\n  name: cluster-reconciler\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  \
kind: ClusterRole\n  name: cluster-admin\nsubjects:\n\
- {kind: ServiceAccount, name: kustomize-controller, namespace: flux-system}\n\
- {kind: ServiceAccount, name: helm-controller, namespace: flux-system}\n---\n\
apiVersion: v1\nkind: Namespace\nmetadata:\n  name: tenant\n---\n\
apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: deployer\n  namespace: tenant\n---\n\
apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: source-controller\n  namespace: flux-system\n---\n\
apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: own-token\n  namespace: flux-system\n\
rules:\n- apiGroups: [\"\"]\n  resources: [serviceaccounts/token]\n  resourceNames: [source-controller]\n  verbs: [create]\n---\n\
apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: own-token\n  namespace: flux-system\n\
roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: own-token\n\
subjects:\n- {kind: ServiceAccount, name: source-controller, namespace: flux-system}\n";

#[test]
fn the_real_hub_refuses_flux_controllers_a_token_for_itself_and_no_one_else() {
    crate::support::requires!(ROOT, REAL_STACK, HELM);
    let _heavy = support::timing::heavy();
    let dir = support::scratch_dir();
    let addr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    let (_pki, _etcd, api) = issuer_control_plane(dir.path(), addr);
    api.apply(HUB_RBAC);
    // The hub's audience as docs/federated.md reads it: the discovery document's issuer.
    let discovery: serde_json::Value =
        serde_json::from_str(&api.kubectl(&["get", "--raw", "/.well-known/openid-configuration"]))
            .unwrap();
    let hub = discovery["issuer"].as_str().unwrap().to_string();
    let name = install_policy(&api, &hub);

    let ask = |user: &str, ns: &str, sa: &str, audiences: &[&str]| {
        token_audiences(&api, user, ns, sa, audiences)
    };
    let spoke = "spokekeeper:spoke-a";
    assert_eq!(
        ask(KUSTOMIZE, "flux-system", "kustomize-controller", &[spoke]),
        Ok(vec![spoke.to_string()]),
        "a spoke's audience is allowed"
    );
    let refused = |result: Result<Vec<String>, String>, what: &str| {
        let err = result.expect_err(what);
        assert!(
            err.contains(&name)
                && err.contains(&format!("with audience {hub}, the hub API server's own"))
                && err.contains("must name its spoke's audience"),
            "{what}: {err}"
        );
        err
    };
    let err = refused(
        ask(KUSTOMIZE, "flux-system", "kustomize-controller", &[&hub]),
        "the hub's audience",
    );
    eprintln!("kustomize-controller asking for the hub's audience: {err}");
    assert!(
        err.contains(&format!(
            "{KUSTOMIZE} asked for a token of ServiceAccount flux-system/kustomize-controller"
        )),
        "{err}"
    );
    refused(
        ask(
            KUSTOMIZE,
            "flux-system",
            "kustomize-controller",
            &[spoke, &hub],
        ),
        "the hub's audience beside a spoke's",
    );
    // Empty audiences reach the policy as the hub's own (defaulted first: see above).
    refused(
        ask(KUSTOMIZE, "flux-system", "kustomize-controller", &[]),
        "no audience",
    );
    refused(
        ask(HELM_CONTROLLER, "flux-system", "helm-controller", &[&hub]),
        "helm-controller",
    );
    // Who asks, not whose token: a ConfigMap's serviceAccountName in another namespace.
    refused(
        ask(KUSTOMIZE, "tenant", "deployer", &[&hub]),
        "kustomize-controller asking for a tenant's token",
    );

    // Anyone else is not held to it: another Flux account for its own token, the admin.
    let source = "system:serviceaccount:flux-system:source-controller";
    assert_eq!(
        ask(source, "flux-system", "source-controller", &[&hub]),
        Ok(vec![hub.clone()])
    );
    assert_eq!(
        ask(source, "flux-system", "source-controller", &[]),
        Ok(vec![hub.clone()]),
        "no audience is the hub's --api-audiences, by default its issuer"
    );
    let admin = api.kubectl(&[
        "create",
        "token",
        "deployer",
        "-n",
        "tenant",
        "--duration=10m",
        "-o",
        "jsonpath={.spec.audiences[0]}",
    ]);
    assert_eq!(admin, hub);
}
