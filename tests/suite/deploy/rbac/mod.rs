//! The chart's RBAC: exactly what the code calls, per spoke namespace and name, nothing without a hub or a Lease.

use super::*;

/// Listing the Flux consumers of the Secrets in `ns`, and requesting their reconcile: not
/// limited by name (the names are what the listing finds).
fn consumer_grants(ns: &str) -> Vec<Grant> {
    [
        ("kustomize.toolkit.fluxcd.io", "kustomizations"),
        ("helm.toolkit.fluxcd.io", "helmreleases"),
    ]
    .into_iter()
    .flat_map(|(group, resource)| {
        ["list", "get", "patch"]
            .into_iter()
            .map(move |verb| grant(ns, group, resource, verb, &[]))
    })
    .chain(
        [
            "gitrepositories",
            "ocirepositories",
            "buckets",
            "helmcharts",
            "externalartifacts",
        ]
        .into_iter()
        .map(|resource| grant(ns, "source.toolkit.fluxcd.io", resource, "get", &[])),
    )
    .chain([grant(
        ns,
        "source.toolkit.fluxcd.io",
        "gitrepositories",
        "patch",
        &[],
    )])
    .collect()
}

/// Recording Events about the spokes whose objects are in `ns` (hub::recorder): create,
/// and patch a repeat's series; names are generated, so not limited by name.
fn event_grants(ns: &str) -> Vec<Grant> {
    ["create", "patch"]
        .into_iter()
        .map(|verb| grant(ns, "events.k8s.io", "events", verb, &[]))
        .collect()
}

/// What the code calls on the hub API, and nothing more: the hub client and the Lease
/// lock export their calls, and the suite's verify::hub and daemon::lease check every
/// request the emulated API server saw against these same lists.
fn access() -> BTreeSet<(String, String, String)> {
    spokekeeper::hub::ACCESS
        .iter()
        .chain(spokekeeper::daemon::lease::ACCESS)
        .flat_map(|a| {
            a.verbs
                .iter()
                .map(move |v| (a.group.to_string(), a.resource.to_string(), v.to_string()))
        })
        .collect()
}

/// Every Role is bound to the chart's ServiceAccount only, by a RoleBinding in its own
/// namespace; nothing is cluster-wide.
fn assert_bindings(objects: &[Object], sa: &str) {
    let roles: BTreeSet<(String, String)> = objects
        .iter()
        .filter_map(|o| match o {
            Object::Role(r) => Some((
                r.metadata.namespace.clone().unwrap(),
                r.metadata.name.clone().unwrap(),
            )),
            _ => None,
        })
        .collect();
    let mut bound = BTreeSet::new();
    for o in objects {
        let Object::RoleBinding(b) = o else { continue };
        let ns = b.metadata.namespace.clone().unwrap();
        assert_eq!(
            b.role_ref.kind, "Role",
            "bindings refer to namespaced Roles only"
        );
        let subjects = b.subjects.as_ref().unwrap();
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].kind, "ServiceAccount");
        assert_eq!(subjects[0].name, sa);
        assert_eq!(subjects[0].namespace.as_deref(), Some(RELEASE_NS));
        bound.insert((ns, b.role_ref.name.clone()));
    }
    assert_eq!(bound, roles, "each Role has exactly its RoleBinding");
}

#[test]
fn chart_rbac_grants_exactly_what_the_code_calls() {
    crate::support::requires!(HELM);
    let objects = read_all(&render(&[]), "chart (defaults)");
    let g = grants(&objects);
    let expected: BTreeSet<Grant> = [
        grant(RELEASE_NS, "coordination.k8s.io", "leases", "create", &[]),
        grant(
            RELEASE_NS,
            "coordination.k8s.io",
            "leases",
            "get",
            &["spokekeeper"],
        ),
        grant(
            RELEASE_NS,
            "coordination.k8s.io",
            "leases",
            "update",
            &["spokekeeper"],
        ),
        grant(
            "kube-system",
            "",
            "services",
            "get",
            &["sealed-secrets-controller"],
        ),
        grant(
            "kube-system",
            "",
            "services/proxy",
            "get",
            &["http:sealed-secrets-controller:http"],
        ),
        grant(
            "flux-system",
            "bitnami.com",
            "sealedsecrets",
            "get",
            &["dev-kubeconfig"],
        ),
    ]
    .into_iter()
    .chain(consumer_grants("flux-system"))
    .chain(event_grants("flux-system"))
    .collect();
    assert_eq!(g, expected);
    assert_bindings(&objects, "sk-spokekeeper");
    // A federated spoke's calls (its ConfigMap, the check token) are granted only when
    // one is configured: the defaults and a federated render together are everything.
    let federated = grants(&read_all(&render_with(FEDERATED), "chart (federated)"));
    let own = grants(&read_all(
        &render_with(OWN_ACCOUNTS),
        "chart (own accounts)",
    ));
    let used: BTreeSet<(String, String, String)> = g
        .into_iter()
        .chain(federated)
        .chain(own)
        .map(|(_, group, res, verb, _)| (group, res, verb))
        .collect();
    // The chart always writes hub.controller.port; the Service is still read, by name,
    // for the controller's version label.
    let calls = access();
    assert_eq!(
        used, calls,
        "the chart grants what the code calls, no more, no less"
    );
}

/// One sealed spoke in flux-system, one federated in its own namespace, which sets no
/// check_as (so the chart's own ServiceAccount is used), under a global federated block.
const FEDERATED: &str = r#"
federated: {hubAudiences: ["https://hub.example.org"]}
config:
  credential:
    federated: {issuer: "https://hub.example.org"}
  spokes:
    - {name: dev, address: 10.0.0.1}
    - name: edge
      address: 10.0.0.2
      secret: {namespace: edge-secrets}
      credential: {mode: federated}
"#;

#[test]
fn chart_grants_a_federated_spoke_its_config_map_and_the_check_token_only() {
    crate::support::requires!(HELM);
    let objects = read_all(&render_with(FEDERATED), "chart (federated)");
    let spokes: BTreeSet<Grant> = grants(&objects)
        .into_iter()
        .filter(|g| g.0 != "kube-system" && g.2 != "leases")
        .collect();
    let expected: BTreeSet<Grant> = [
        grant(
            "flux-system",
            "bitnami.com",
            "sealedsecrets",
            "get",
            &["dev-kubeconfig"],
        ),
        // Its ConfigMap, by name, in place of a SealedSecret.
        grant(
            "edge-secrets",
            "",
            "configmaps",
            "get",
            &["edge-kubeconfig"],
        ),
        // The chart's own ServiceAccount's token, and no other's.
        grant(
            RELEASE_NS,
            "",
            "serviceaccounts/token",
            "create",
            &["sk-spokekeeper"],
        ),
    ]
    .into_iter()
    .chain(
        ["flux-system", "edge-secrets"]
            .into_iter()
            .flat_map(|ns| consumer_grants(ns).into_iter().chain(event_grants(ns))),
    )
    .collect();
    assert_eq!(spokes, expected);
    assert_bindings(&objects, "sk-spokekeeper");
    let text = config_text(&objects);
    let config = Config::parse(text, "spokekeeper.yaml", Path::new("/etc/spokekeeper"))
        .unwrap_or_else(|e| panic!("the chart's spokekeeper.yaml is refused: {e}\n{text}"));
    let policy = config.spokes[1].credential.federated.as_ref().unwrap();
    assert_eq!(
        policy.check_as.to_string(),
        format!("{RELEASE_NS}/sk-spokekeeper"),
        "the chart writes its own ServiceAccount as check_as: the one it grants"
    );
    assert_eq!(
        policy.issuer, "https://hub.example.org",
        "the global block is kept"
    );
    assert!(config.spokes[0].credential.federated.is_none());
}

/// Two federated spokes with their own hub ServiceAccounts (the global template, and one
/// of the spoke's own), one without, each in its own namespace.
const OWN_ACCOUNTS: &str = r#"
federated: {hubAudiences: ["https://hub.example.org"]}
config:
  credential:
    mode: federated
    federated: {issuer: "https://hub.example.org", service_account_name: "{spoke}-flux"}
  spokes:
    - {name: dev, address: 10.0.0.1, secret: {namespace: dev}}
    - name: lab
      address: 10.0.0.2
      secret: {namespace: lab}
      credential: {federated: {service_account_name: deployer}}
    - name: old
      address: 10.0.0.3
      secret: {namespace: old}
      credential: {federated: {service_accounts: [flux-system/kustomize-controller]}}
"#;

/// A spoke with its own hub ServiceAccount: spokekeeper may read Flux's two controllers'
/// Deployments, by name, for their feature gates; without one, nothing of them.
#[test]
fn chart_grants_the_flux_deployments_for_the_feature_gate_only_with_an_own_account() {
    crate::support::requires!(HELM);
    let objects = read_all(&render_with(OWN_ACCOUNTS), "chart (own accounts)");
    let deployments: Vec<Grant> = grants(&objects)
        .into_iter()
        .filter(|g| g.2 == "deployments")
        .collect();
    assert_eq!(
        deployments,
        [grant(
            "flux-system",
            "apps",
            "deployments",
            "get",
            &["helm-controller", "kustomize-controller"]
        )]
    );
    assert_bindings(&objects, "sk-spokekeeper");
    let text = config_text(&objects);
    let config = Config::parse(text, "spokekeeper.yaml", Path::new("/etc/spokekeeper"))
        .unwrap_or_else(|e| panic!("the chart's spokekeeper.yaml is refused: {e}\n{text}"));
    let own = |i: usize| {
        let policy = config.spokes[i].credential.federated.as_ref().unwrap();
        policy.own_account.as_ref().map(ToString::to_string)
    };
    assert_eq!(
        [own(0), own(1), own(2)],
        [
            Some("dev/dev-flux".into()),
            Some("lab/deployer".into()),
            None
        ]
    );
    let without = read_all(&render_with(FEDERATED), "chart (federated)");
    assert!(
        grants(&without).iter().all(|g| g.2 != "deployments"),
        "no spoke of FEDERATED has its own account"
    );
}

/// A check_as of the configuration's own, per spoke, is granted where it is, and kept.
#[test]
fn chart_grants_the_token_of_a_configured_check_as() {
    crate::support::requires!(HELM);
    let values = "federated: {hubAudiences: [\"https://hub\"]}\nconfig:\n  credential: {mode: federated, federated: {issuer: \"https://hub\", check_as: checks/prober}}\n  spokes:\n    - {name: dev, address: 10.0.0.1}\n    - {name: lab, address: 10.0.0.2, credential: {federated: {check_as: lab-checks/lab-prober}}}\n";
    let objects = read_all(&render_with(values), "chart (check_as)");
    let tokens: Vec<Grant> = grants(&objects)
        .into_iter()
        .filter(|g| g.2.starts_with("serviceaccounts"))
        .collect();
    assert_eq!(
        tokens,
        [
            grant("checks", "", "serviceaccounts/token", "create", &["prober"]),
            grant(
                "lab-checks",
                "",
                "serviceaccounts/token",
                "create",
                &["lab-prober"]
            ),
        ]
    );
    let configmaps: Vec<Grant> = grants(&objects)
        .into_iter()
        .filter(|g| g.2 == "configmaps" || g.2 == "sealedsecrets")
        .collect();
    assert_eq!(
        configmaps,
        [grant(
            "flux-system",
            "",
            "configmaps",
            "get",
            &["dev-kubeconfig", "lab-kubeconfig"]
        )],
        "the global mode makes every spoke federated"
    );
    let text = config_text(&objects);
    let config = Config::parse(text, "spokekeeper.yaml", Path::new("/etc/spokekeeper"))
        .unwrap_or_else(|e| panic!("the chart's spokekeeper.yaml is refused: {e}\n{text}"));
    let check_as = |i: usize| {
        let policy = config.spokes[i].credential.federated.as_ref().unwrap();
        policy.check_as.to_string()
    };
    assert_eq!(
        (check_as(0), check_as(1)),
        ("checks/prober".into(), "lab-checks/lab-prober".into())
    );
}

/// A Flux controller's token is hub admin: the chart refuses to grant it, as the daemon
/// refuses to ask for it.
#[test]
fn chart_refuses_a_controller_as_check_as() {
    crate::support::requires!(HELM);
    let values = "federated: {hubAudiences: [\"https://hub\"]}\nconfig:\n  credential: {mode: federated, federated: {issuer: \"https://hub\", check_as: flux-system/kustomize-controller}}\n";
    let err = refused_with(values, "granting a controller's token");
    assert!(
        err.contains("check_as")
            && err.contains("hub admin")
            && err.contains("spokekeeper/sk-spokekeeper"),
        "{err}"
    );
}

#[test]
fn chart_rbac_follows_the_spokes_namespaces_and_names() {
    crate::support::requires!(HELM);
    let objects = read_all(
        &render_with(
            r#"
hub:
  controller: {namespace: sealed-secrets, name: sealer, port: web}
leaderElection: {leaseName: keeper}
config:
  spokes:
    - {name: dev, address: 10.0.0.1}
    - {name: edge, address: 10.0.0.2, secret: {name: edge-kc, namespace: edge-secrets}}
    - name: lab
      address: 10.0.0.3
      kustomization: {name: lab-apps, namespace: lab-flux}
    - {name: solo, address: 10.0.0.4, secret: {namespace: solo-secrets}, kustomization: {}}
"#,
        ),
        "chart (four spokes)",
    );
    let g = grants(&objects);
    let expected: BTreeSet<Grant> = [
        grant(RELEASE_NS, "coordination.k8s.io", "leases", "create", &[]),
        grant(
            RELEASE_NS,
            "coordination.k8s.io",
            "leases",
            "get",
            &["keeper"],
        ),
        grant(
            RELEASE_NS,
            "coordination.k8s.io",
            "leases",
            "update",
            &["keeper"],
        ),
        grant("sealed-secrets", "", "services", "get", &["sealer"]),
        grant(
            "sealed-secrets",
            "",
            "services/proxy",
            "get",
            &["http:sealer:web"],
        ),
        grant(
            "flux-system",
            "bitnami.com",
            "sealedsecrets",
            "get",
            &["dev-kubeconfig", "lab-kubeconfig"],
        ),
        grant(
            "edge-secrets",
            "bitnami.com",
            "sealedsecrets",
            "get",
            &["edge-kc"],
        ),
        // solo's `kustomization: {}` is the override with its defaults (solo in
        // flux-system, covered there): nothing is listed in its Secret's namespace.
        grant(
            "solo-secrets",
            "bitnami.com",
            "sealedsecrets",
            "get",
            &["solo-kubeconfig"],
        ),
        grant(
            "lab-flux",
            "kustomize.toolkit.fluxcd.io",
            "kustomizations",
            "get",
            &["lab-apps"],
        ),
        grant(
            "lab-flux",
            "kustomize.toolkit.fluxcd.io",
            "kustomizations",
            "patch",
            &["lab-apps"],
        ),
    ]
    .into_iter()
    // dev and edge: every consumer of their Secret, in the Secret's namespace; lab (and
    // solo): the configured Kustomization alone, by name.
    .chain(consumer_grants("flux-system"))
    .chain(consumer_grants("edge-secrets"))
    // Events where each spoke's objects are: its consumers' namespace, its configured
    // Kustomization's, and its SealedSecret's when nothing deploys with it.
    .chain(
        ["flux-system", "edge-secrets", "solo-secrets", "lab-flux"]
            .into_iter()
            .flat_map(event_grants),
    )
    .collect();
    assert_eq!(g, expected);
    assert_bindings(&objects, "sk-spokekeeper");
    let config: Value = serde_saphyr::from_str(config_text(&objects)).unwrap();
    assert_eq!(
        config["hub"]["controller"],
        serde_json::json!({"namespace": "sealed-secrets", "name": "sealer", "port": "web"})
    );
}

#[test]
fn chart_without_hub_or_lease_grants_nothing_and_runs_one_replica() {
    crate::support::requires!(HELM);
    let objects = read_all(
        &render_with("hub: {enabled: false}\nleaderElection: {enabled: false}\n"),
        "chart (no hub, no lease)",
    );
    assert!(grants(&objects).is_empty());
    assert!(
        !objects
            .iter()
            .any(|o| matches!(o, Object::Role(_) | Object::RoleBinding(_)))
    );
    let d = deployment(&objects);
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(
        spec.strategy.as_ref().unwrap().type_.as_deref(),
        Some("Recreate")
    );
    let args = main_container_args(d);
    assert!(!args.iter().any(|a| a == "--leader-elect"), "{args:?}");
    assert_eq!(
        args, CHART_ARGS_SINGLE,
        "the binary's unit tests parse these"
    );
    assert_eq!(subcommand(&args), "run");
}

mod token_audiences;
