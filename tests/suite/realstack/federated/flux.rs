//! Flux's real kustomize-controller and helm-controller deploy to a federated spoke through
//! `spec.kubeConfig.configMapRef`. What Flux does with that ConfigMap, from the modules
//! kustomize-controller v1.9.6 is built with (fluxcd/pkg/auth v0.54.3 as `auth`,
//! fluxcd/pkg/apis/meta v1.30.2 as `meta`):
//!
//! - Keys (meta reference_types.go 116-133, read by auth utils/restconfig.go 87-119):
//!   `provider` (here `generic`), `address` (https only; a missing port means 443:
//!   auth restconfig.go 71-90), `ca.crt` (PEM), `audiences` (one per line; without it
//!   the audience is the address: generic/provider.go 141-145), `serviceAccountName`,
//!   `cluster` (cloud providers' cluster resource).
//! - Whose token: without `serviceAccountName` (and no default service account flag),
//!   the controller's own. It learns which that is from the `sub` of the token file a
//!   Pod has, /var/run/secrets/kubernetes.io/serviceaccount/token, read unverified
//!   (generic/provider.go 60-84), and asks the hub for a TokenRequest for that
//!   ServiceAccount with the audiences (92): the lab runs the controller with that file
//!   (FluxOptions::pod_identity), there being no environment variable for it. With
//!   `serviceAccountName` the token is that ServiceAccount's in the object's namespace,
//!   and only with the feature gate `ObjectLevelWorkloadIdentity` on (opt-in,
//!   auth feature_gates.go 23-35; refused otherwise: access_token.go 67-69), set by
//!   `--feature-gates=ObjectLevelWorkloadIdentity=true`.
//! - Lifetime: the TokenRequest sets no expirationSeconds (generic/provider.go 87-91), so
//!   the hub's default applies (one hour); tokens are cached (kustomize-controller
//!   main.go 80, 138: `--token-cache-max-size`, 100 by default) and every request to the
//!   spoke asks for one through the cache (utils/restconfig.go 132-160), so a token that
//!   expired is replaced without a reconcile failing. The feature gate is read at start
//!   (kustomize-controller main.go 151; helm-controller v1.6.4 main.go 169).

use super::*;

use std::time::Duration;

use support::git::{commit, git};
use support::realstack::flux_controllers::{
    self as flux_ctl, FluxControllers, FluxOptions, Ready, request_reconcile,
};
use support::realstack::git_http::GitHttp;
use support::realstack::hub::{HubOptions, RealHub};
use support::realstack::wait_until;

const AUDIENCE: &str = "spoke-a";
const BINDING: &str = "hub-flux-controller";

/// A bare repository `app.git` under `root`: `app/configmap.yaml` and the chart
/// `charts/app` (a ConfigMap, no pods: the spoke has no kubelet) on main.
fn app_repo(root: &std::path::Path) {
    let work = root.join("work");
    let write = |rel: &str, text: &str| {
        let path = work.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("the work tree");
        std::fs::write(&path, text).expect("write the app");
    };
    write(
        "app/configmap.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: federated-app\n  namespace: default\n\
         data:\n  through: configmap-ref\n",
    );
    write(
        "charts/app/Chart.yaml",
        "apiVersion: v2\nname: app\nversion: 0.1.0\n",
    );
    write(
        "charts/app/templates/configmap.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: federated-chart\n  \
         namespace: {{ .Release.Namespace }}\ndata:\n  through: configmap-ref\n",
    );
    git(&work, &["init", "--quiet", "--initial-branch=main"]);
    git(&work, &["add", "-A"]);
    commit(&work, "app");
    git(root, &["clone", "--quiet", "--bare", "work", "app.git"]);
}

/// The ConfigMap a federated spoke is reached through and the GitRepository `app`.
fn reach_objects(git_url: &str, spoke: &RealSpoke, extra: &str) -> String {
    let ca = spoke
        .node
        .pki()
        .parts
        .ca_pem
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect::<String>();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: spoke-federated\n  namespace: {NS}\n\
         data:\n  provider: generic\n  address: {address}\n  audiences: {AUDIENCE}\n{extra}  ca.crt: |\n{ca}---\n\
         apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata:\n  name: app\n  \
         namespace: {NS}\nspec:\n  interval: 10m\n  timeout: 20s\n  url: {git_url}\n  ref:\n    \
         branch: main\n",
        address = spoke.api.url,
    )
}

/// The Kustomization `app` that applies `./app` to the spoke through the ConfigMap.
const KUSTOMIZATION: &str = "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
     metadata:\n  name: app\n  namespace: flux-system\nspec:\n  interval: 10m\n  retryInterval: 5s\n  \
     path: ./app\n  prune: true\n  timeout: 30s\n  sourceRef:\n    kind: GitRepository\n    name: app\n  \
     kubeConfig:\n    configMapRef:\n      name: spoke-federated\n";

/// The HelmRelease `app` that installs `charts/app` on the spoke through the ConfigMap.
const HELM_RELEASE: &str = "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  \
     name: app\n  namespace: flux-system\nspec:\n  interval: 10m\n  timeout: 30s\n  releaseName: app\n  \
     targetNamespace: default\n  storageNamespace: default\n  chart:\n    spec:\n      chart: ./charts/app\n      \
     interval: 10m\n      sourceRef:\n        kind: GitRepository\n        name: app\n  \
     kubeConfig:\n    configMapRef:\n      name: spoke-federated\n";

/// A hub that is its own issuer with Flux's real controllers (each with its token where
/// a Pod has it), a federated spoke trusting the hub's ServiceAccount `controller` for
/// [`AUDIENCE`] and binding it cluster-admin, and the app repository.
struct FluxFederation {
    // Drop order: the controllers, the git server, the spoke, the hub, the lab.
    controllers: FluxControllers,
    _git: GitHttp,
    _repos: tempfile::TempDir,
    spoke: RealSpoke,
    hub: RealHub,
    _lab: Lab,
    user: String,
}

impl FluxFederation {
    /// The spoke trusting the hub's ServiceAccount `sa`, the controllers run with `opts`
    /// (pod_identity set here), the ConfigMap with `extra` data lines.
    fn start(sa: &str, opts: FluxOptions, extra: &str) -> FluxFederation {
        let lab = Lab::new();
        let hub = RealHub::start(&HubOptions {
            own_issuer: true,
            ..HubOptions::default()
        });
        let spoke = federated_spoke(&lab, &hub.etcd, hub.dir());
        let trust = Trust {
            subject: format!("system:serviceaccount:{NS}:{sa}"),
            ..Trust::kustomize_controller(&hub.api, &hub.pki.parts.ca_pem, AUDIENCE)
        };
        spoke.write_authentication_config(&authentication_config(std::slice::from_ref(&trust)));
        spoke.api.apply(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  \
             name: {BINDING}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  \
             name: cluster-admin\nsubjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: User\n  \
             name: \"{}\"\n",
            trust.username()
        ));
        let repos = support::scratch_dir();
        app_repo(repos.path());
        let git_http = GitHttp::serve(repos.path());
        let controllers = FluxControllers::start(
            &hub,
            &FluxOptions {
                pod_identity: true,
                ..opts
            },
        );
        hub.api
            .apply(&reach_objects(&git_http.url("app.git"), &spoke, extra));
        FluxFederation {
            controllers,
            _git: git_http,
            _repos: repos,
            spoke,
            hub,
            _lab: lab,
            user: trust.username(),
        }
    }

    fn wait(&self, kind: &str, what: &str, ok: impl Fn(&Ready) -> bool) -> Ready {
        wait_until(
            &format!("{kind} app: {what}"),
            Duration::from_secs(120),
            || match flux_ctl::ready(&self.hub, kind, "app") {
                Some(r) if ok(&r) => Ok(r),
                other => Err(format!("{other:?}\n{}", self.controllers.tail(15))),
            },
        )
    }

    /// Deletes the spoke's binding, asks `kind` app to reconcile, and returns its
    /// Ready=False for that request.
    fn unbound_reconcile(&self, kind: &str) -> Ready {
        self.spoke
            .api
            .kubectl(&["delete", "clusterrolebinding", BINDING]);
        let asked = request_reconcile(&self.hub, kind, "app");
        self.wait(kind, "Ready=False after the request", |r| {
            r.status == "False" && r.last_handled == asked
        })
    }

    /// The managers of `name`'s fields in the spoke's default namespace.
    fn managers(&self, kind: &str, name: &str) -> Vec<String> {
        let object =
            self.spoke
                .api
                .get_json(&[kind, name, "-n", "default", "--show-managed-fields"]);
        object["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["manager"].as_str().map(str::to_string))
            .collect()
    }
}

#[test]
fn kustomize_controller_deploys_through_a_generic_configmap_and_gets_the_spokes_403_without_its_binding()
 {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let fed = FluxFederation::start(KUSTOMIZE, FluxOptions::default(), "");
    fed.hub.api.apply(KUSTOMIZATION);
    fed.wait("kustomization", "Ready=True", |r| r.status == "True");
    let app = fed
        .spoke
        .api
        .get_json(&["configmap", "federated-app", "-n", "default"]);
    assert_eq!(app["data"]["through"], "configmap-ref", "{app:#}");
    assert_eq!(
        fed.managers("configmap", "federated-app"),
        ["kustomize-controller"]
    );

    let failed = fed.unbound_reconcile("kustomization");
    let forbidden = format!("is forbidden: User \"{}\"", fed.user);
    assert!(failed.message.contains(&forbidden), "{failed:?}");
}

#[test]
fn helm_controller_installs_through_a_generic_configmap_and_gets_the_spokes_403_without_its_binding()
 {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let fed = FluxFederation::start("helm-controller", FluxOptions::default(), "");
    fed.hub.api.apply(HELM_RELEASE);
    fed.wait("helmrelease", "Ready=True", |r| r.status == "True");
    let chart = fed
        .spoke
        .api
        .get_json(&["configmap", "federated-chart", "-n", "default"]);
    assert_eq!(chart["data"]["through"], "configmap-ref", "{chart:#}");
    assert_eq!(
        chart["metadata"]["annotations"]["meta.helm.sh/release-name"], "app",
        "{chart:#}"
    );

    let failed = fed.unbound_reconcile("helmrelease");
    let forbidden = format!("is forbidden: User \"{}\"", fed.user);
    assert!(failed.message.contains(&forbidden), "{failed:?}");
}

/// With `serviceAccountName` in the ConfigMap and the gate on, the token is that
/// ServiceAccount's (the spoke trusts only it), not the controller's.
#[test]
fn with_the_gate_on_kustomize_controller_deploys_as_the_configmaps_service_account() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let opts = FluxOptions {
        args: vec!["--feature-gates=ObjectLevelWorkloadIdentity=true".into()],
        ..FluxOptions::default()
    };
    let fed = FluxFederation::start(
        "spoke-a-deployer",
        opts,
        "  serviceAccountName: spoke-a-deployer\n",
    );
    fed.hub.api.apply(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: spoke-a-deployer\n  namespace: {NS}\n"
    ));
    fed.hub.api.apply(KUSTOMIZATION);
    fed.wait("kustomization", "Ready=True", |r| r.status == "True");
    let app = fed
        .spoke
        .api
        .get_json(&["configmap", "federated-app", "-n", "default"]);
    assert_eq!(app["data"]["through"], "configmap-ref", "{app:#}");
    assert_eq!(
        fed.managers("configmap", "federated-app"),
        ["kustomize-controller"]
    );
}
