//! Issue 42, a per-spoke hub ServiceAccount on the real components: each federated spoke
//! names its own hub account (`credential.federated.service_account_name`), in its own hub
//! namespace with its ConfigMap and its Flux objects (the layout Flux's docs use for
//! object-level workload identity), and the spoke's file lets in that account alone. Flux's
//! real kustomize-controller and helm-controller, started with the
//! ObjectLevelWorkloadIdentity feature gate, ask the hub for that account's tokens
//! (the ConfigMap's `serviceAccountName`) and deploy through it. spokekeeper reads the gate
//! off the controllers' Deployments on the hub (the processes here run out of cluster:
//! the Deployments say how they run) and commits nothing while it is off.

use super::*;

use support::realstack::bearer::Bearer;
use support::realstack::federated::hub_token;
use support::realstack::flux_controllers::OBJECT_LEVEL_IDENTITY;
use support::realstack::real_flux::{Format, Intervals};
use support::realstack::spoke::authentication_config_path;

/// Spoke i's own hub account, as `{spoke}-flux` names it.
fn account(i: usize) -> String {
    format!("spoke{i}-flux")
}

/// The layout with each spoke's Flux objects in its own namespace (reading the fleet's
/// GitRepository in flux-system), and that namespace's own account.
fn own_namespaces(seed: &Path) {
    let mut own = String::new();
    for i in 0..2 {
        let path = seed.join(format!("fluxcd/spoke{i}.yaml"));
        let text = std::fs::read_to_string(&path).unwrap();
        let moved = text
            .replace(
                &format!("namespace: {}\n", flux::NS),
                &format!("namespace: spoke{i}\n"),
            )
            .replace(
                "    kind: GitRepository\n    name: fleet\n",
                "    kind: GitRepository\n    name: fleet\n    namespace: flux-system\n",
            )
            .replace(
                "        kind: GitRepository\n        name: fleet\n",
                "        kind: GitRepository\n        name: fleet\n        namespace: flux-system\n",
            );
        assert_eq!(
            moved.matches("namespace: flux-system\n").count(),
            2,
            "{moved}"
        );
        std::fs::write(&path, moved).unwrap();
        own.push_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: spoke{i}\n---\n\
             apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {}\n  namespace: spoke{i}\n---\n",
            account(i)
        ));
    }
    std::fs::write(seed.join("fluxcd/own-accounts.yaml"), own).unwrap();
}

/// spokekeeper.yaml: each spoke's ConfigMap in its own namespace, each spoke with its own
/// account there (the global template).
fn configure_own_accounts(stack: &RealFlux) {
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    let check = format!(
        "    check_as: flux-system/{}\n",
        support::realstack::real_flux::CHECK_ACCOUNT
    );
    let mut edited = text.replacen(
        &check,
        &format!("{check}    service_account_name: \"{{spoke}}-flux\"\n"),
        1,
    );
    for i in 0..2 {
        let entry = format!("  - name: spoke{i}\n");
        edited = edited.replacen(
            &entry,
            &format!("{entry}    secret: {{namespace: spoke{i}}}\n"),
            1,
        );
    }
    assert_eq!(
        edited.matches("secret: {namespace: spoke").count(),
        2,
        "{edited}"
    );
    assert!(edited.contains("service_account_name"), "{edited}");
    std::fs::write(&stack.fleet.config, edited).unwrap();
}

/// The Deployments Flux installs its two controllers with (what spokekeeper reads),
/// their manager's args with `gate` when given.
fn deployments(stack: &RealFlux, gate: Option<&str>) {
    for name in ["kustomize-controller", "helm-controller"] {
        let args = gate.map_or(String::new(), |g| format!(", \"{g}\""));
        stack.hub.api.apply(&format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\n\
             spec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    \
             metadata:\n      labels: {{app: {name}}}\n    spec:\n      serviceAccountName: {name}\n      \
             containers:\n      - name: manager\n        image: ghcr.io/fluxcd/{name}\n        \
             args: [\"--watch-all-namespaces=true\"{args}]\n",
            ns = flux::NS
        ));
    }
}

/// Spoke i's committed ConfigMap: in its namespace, naming its own account and
/// `audience`.
fn assert_names_its_account(stack: &RealFlux, i: usize, audience: &str) {
    let text = git(
        &stack.fleet.remote,
        &["show", &format!("main:fluxcd/spoke{i}-kubeconfig.yaml")],
    );
    let file: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(file["metadata"]["namespace"], format!("spoke{i}"), "{text}");
    let data = &file["data"];
    assert_eq!(data["serviceAccountName"], account(i), "{text}");
    assert_eq!(data["audiences"], audience, "{text}");
}

/// Whether the fleet's remote holds spoke i's ConfigMap.
fn committed(stack: &RealFlux, i: usize) -> bool {
    std::process::Command::new("git")
        .arg("-C")
        .arg(&stack.fleet.remote)
        .args([
            "cat-file",
            "-e",
            &format!("main:fluxcd/spoke{i}-kubeconfig.yaml"),
        ])
        .status()
        .is_ok_and(|s| s.success())
}

/// The user spoke j's API server gives a hub token of spoke i's account for `audience`.
fn whoami(stack: &RealFlux, (i, j): (usize, usize), audience: &str) -> Result<String, u16> {
    let token = hub_token(&stack.hub.api, &format!("spoke{i}"), &account(i), audience);
    let ca = stack.fleet.nodes[j].pki().parts.ca_pem.clone();
    Bearer::new(&stack.spoke_apis[j].url, &ca, &token).whoami()
}

/// `spokekeeper revoke spoke0`: a token of its own account for the old audience is
/// refused, one for the new audience taken as that account, the ConfigMap names the new
/// audience and still the account, and the real kustomize-controller, not restarted,
/// deploys through it again.
fn revoke_spoke0(stack: &RealFlux) {
    let url = stack.spoke_apis[0].url.clone();
    let leaked = hub_token(&stack.hub.api, "spoke0", &account(0), &url);
    let (code, out, err) = stack.fleet.run(&["revoke", "spoke0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let ca = stack.fleet.nodes[0].pki().parts.ca_pem.clone();
    let refused = Bearer::new(&url, &ca, &leaked).whoami();
    assert!(matches!(refused, Err(401 | 403)), "{refused:?}");
    let new = format!("{url}#generation-1");
    let own = format!("hub:system:serviceaccount:spoke0:{}", account(0));
    assert_eq!(whoami(stack, (0, 0), &new), Ok(own));
    assert_names_its_account(stack, 0, &new);

    stack.spoke_apis[0].kubectl(&["delete", "configmap", "spoke-app", "-n", "default"]);
    let at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let requested = format!("reconcile.fluxcd.io/requestedAt={at}");
    let annotate = [
        "annotate",
        "--overwrite",
        "kustomization",
        "spoke0",
        "-n",
        "spoke0",
    ];
    stack
        .hub
        .api
        .kubectl(&[&annotate[..], &[requested.as_str()]].concat());
    stack.wait_for_in(
        "spoke0",
        "kustomization",
        "spoke0",
        "Ready at the request",
        |r| r.last_handled == at && r.status == "True",
    );
    stack.assert_deployed(0);
}

/// Two spokes, each with its own hub account: refused at `trust` with the fix while the
/// hub's controllers run without the feature gate (nothing committed, no node touched);
/// with it, one tick commits both ConfigMaps, each naming its spoke's account, and the
/// real controllers deploy through each. A token of spoke 0's account is refused by
/// spoke 1 even for spoke 1's own audience: by identity, not only by audience. A revoke
/// of spoke 0 moves its account to the next audience.
#[test]
fn each_spoke_lets_in_its_own_hub_account_which_flux_deploys_as_and_another_spoke_refuses() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::launch_args(
        2,
        (false, ""),
        Intervals::TESTS,
        (Format::Federated, &[OBJECT_LEVEL_IDENTITY]),
        own_namespaces,
    );
    configure_own_accounts(&stack);

    // The gate off on the hub: refused before any node is touched, naming the fix.
    deployments(&stack, None);
    let files: Vec<String> = (0..2)
        .map(|i| {
            std::fs::read_to_string(authentication_config_path(&stack.fleet.nodes[i])).unwrap()
        })
        .collect();
    let (code, report, err) = stack.rotate_json();
    assert_ne!(code, 0, "{report:#}\n{err}");
    for i in 0..2 {
        let spoke = &report["spokes"][i];
        assert_eq!(
            (&spoke["action"], &spoke["stage"]),
            (&Value::from("failed"), &Value::from("trust")),
            "{spoke:#}"
        );
        let error = spoke["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&format!("its own hub ServiceAccount spoke{i}/spoke{i}-flux"))
                && error.contains("Deployments flux-system/kustomize-controller and flux-system/helm-controller run without it")
                && error.contains("--feature-gates=ObjectLevelWorkloadIdentity=true"),
            "{error}"
        );
        let now =
            std::fs::read_to_string(authentication_config_path(&stack.fleet.nodes[i])).unwrap();
        assert_eq!(now, files[i]);
        assert!(!committed(&stack, i), "{report:#}");
    }

    // The gate on: both committed, each deployed to through its own account.
    deployments(&stack, Some(OBJECT_LEVEL_IDENTITY));
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    for i in 0..2 {
        let spoke = &report["spokes"][i];
        assert_eq!(spoke["action"], "rotated", "{spoke:#}");
        assert_eq!(spoke["hub"]["applied"]["ok"], true, "{spoke:#}");
        assert_names_its_account(&stack, i, &stack.spoke_apis[i].url);
        let ns = format!("spoke{i}");
        stack.wait_ready_in(&ns, "kustomization", &ns);
        stack.wait_ready_in(&ns, "helmrelease", &ns);
        stack.assert_deployed(i);
        let binding = stack.spoke_apis[i].get_json(&[
            "clusterrolebinding",
            &format!("spokekeeper.hub.spoke{i}.federated"),
        ]);
        let own = format!("hub:system:serviceaccount:spoke{i}:{}", account(i));
        assert_eq!(binding["subjects"][0]["name"], own.as_str(), "{binding:#}");
        assert_eq!(
            binding["subjects"].as_array().map(Vec::len),
            Some(1),
            "{binding:#}"
        );
        // Its own account, for its own audience: accepted as that account.
        assert_eq!(whoami(&stack, (i, i), &stack.spoke_apis[i].url), Ok(own));
    }

    // Spoke 0's account is no one on spoke 1, whatever the audience; nor are the
    // controllers' own accounts any more.
    let spoke1 = stack.spoke_apis[1].url.clone();
    assert_eq!(whoami(&stack, (0, 1), &spoke1), Err(401));
    assert_eq!(whoami(&stack, (0, 1), &stack.spoke_apis[0].url), Err(401));
    let controller = hub_token(&stack.hub.api, flux::NS, "kustomize-controller", &spoke1);
    let ca = stack.fleet.nodes[1].pki().parts.ca_pem.clone();
    assert_eq!(Bearer::new(&spoke1, &ca, &controller).whoami(), Err(401));

    // The next tick judges both ConfigMaps as written: nothing to do.
    let commits = stack.fleet.remote_log().len();
    let (code, again, err) = stack.rotate_json();
    assert_eq!(code, 0, "{again:#}\n{err}");
    for i in 0..2 {
        assert_eq!(again["spokes"][i]["action"], "healthy", "{again:#}");
    }
    assert_eq!(stack.fleet.remote_log().len(), commits);
    revoke_spoke0(&stack);
}
