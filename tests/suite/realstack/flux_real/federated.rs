//! Issue 42, federated credentials, end to end on the real components: a hub kube-apiserver
//! that is its own ServiceAccount issuer, a spoke kube-apiserver reading the
//! AuthenticationConfiguration spokekeeper writes through the federated node recipe (its
//! script, forced command and sudoers rule as printed, on the node's real sshd), and Flux's
//! real kustomize-controller and helm-controller reaching the spoke with their own
//! ServiceAccount tokens through the ConfigMap spokekeeper commits. Every Ready is the
//! controllers' own.

use super::*;

use support::realstack::real_flux::{CHECK_ACCOUNT, Format};
use support::realstack::spoke::authentication_config_path;

/// The spoke's user for a hub ServiceAccount in flux-system.
fn hub_user(account: &str) -> String {
    format!("hub:system:serviceaccount:flux-system:{account}")
}

/// The committed ConfigMap says how to reach spoke 0 now: Flux's generic provider, its
/// address as audience, its CA (the node's, after a rebuild the new one); nothing else.
fn assert_committed_reach(stack: &RealFlux) {
    let text = git(
        &stack.fleet.remote,
        &["show", "main:fluxcd/spoke0-kubeconfig.yaml"],
    );
    let file: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(file["kind"], "ConfigMap", "{text}");
    let data = file["data"].as_object().unwrap_or_else(|| panic!("{text}"));
    let mut keys: Vec<&String> = data.keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["address", "audiences", "ca.crt", "provider"],
        "{text}"
    );
    assert_eq!(data["provider"], "generic", "{text}");
    let address = &stack.spoke_apis[0].url;
    assert_eq!(data["address"], address.as_str(), "{text}");
    assert_eq!(data["audiences"], address.as_str(), "{text}");
    let ca = stack.fleet.nodes[0].pki().parts.ca_pem.clone();
    assert_eq!(
        data["ca.crt"].as_str().map(str::trim),
        Some(ca.trim()),
        "{text}"
    );
    let labels = &file["metadata"]["labels"];
    assert_eq!(labels["reconcile.fluxcd.io/watch"], "Enabled", "{text}");
    let annotations = &file["metadata"]["annotations"];
    assert_eq!(
        annotations["spokekeeper.io/credential-mode"], "federated",
        "{text}"
    );
}

/// `status` reads the hub's ConfigMap (no SealedSecret) and finds it the commit's, its
/// consumers Ready, nothing wrong.
fn assert_status_applied(stack: &RealFlux) {
    let (code, out, err) = stack.fleet.run(&["status", "-o", "json"]);
    let status: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let s = &status["spokes"][0];
    assert_eq!(
        (code, &s["ok"]),
        (0, &Value::Bool(true)),
        "{status:#}\n{err}"
    );
    assert_eq!(s.get("sealed_secret"), None, "{status:#}");
    let cm = &s["config_map"];
    assert_eq!(cm["name"], "spoke0-kubeconfig", "{status:#}");
    assert_eq!(
        (&cm["exists"], &cm["matches_commit"]),
        (&Value::Bool(true), &Value::Bool(true)),
        "{status:#}"
    );
    let items = s["consumers"]["items"].as_array().map_or(0, Vec::len);
    assert!(items > 0, "{status:#}");
    for c in s["consumers"]["items"].as_array().into_iter().flatten() {
        assert_eq!(c["condition"]["status"], "True", "{status:#}");
    }
    let (_, table, _) = stack.fleet.run(&["status"]);
    assert!(table.contains("applied"), "{table}");
}

/// The spoke's one binding of this hub binds the two controllers, and its file names
/// the hub's issuer and the spoke's own audience.
fn assert_spoke_trusts_the_hub(stack: &RealFlux) {
    let binding =
        stack.spoke_apis[0].get_json(&["clusterrolebinding", "spokekeeper.hub.spoke0.federated"]);
    let users: Vec<&str> = binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(
        users,
        [
            hub_user("kustomize-controller"),
            hub_user("helm-controller")
        ],
        "{binding:#}"
    );
    assert_eq!(binding["roleRef"]["name"], "cluster-admin", "{binding:#}");
    let file = std::fs::read_to_string(authentication_config_path(&stack.fleet.nodes[0]))
        .expect("the file spokekeeper wrote");
    let issuer = stack.hub.issuer.clone().expect("the hub's issuer");
    assert!(file.contains(&format!("url: \"{issuer}\"")), "{file}");
    assert!(
        file.contains(&format!("- \"{}\"", stack.spoke_apis[0].url)),
        "{file}"
    );
    assert!(file.contains(&hub_user(CHECK_ACCOUNT)[4..]), "{file}");
}

/// A federated spoke on the real controllers: the first tick writes its trust, binds the
/// controllers, proves it with a hub token and commits a ConfigMap Flux deploys through;
/// a rebuilt spoke (new CAs, its file and binding gone) is deployed to again after one
/// tick. No credential for the spoke is anywhere: not in the fleet repo or its remote,
/// not in the hub's Secrets, not in what spokekeeper printed.
#[test]
fn a_federated_spoke_is_deployed_through_its_configmap_and_back_after_a_rebuild_in_one_tick() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_format(1, false, "", Format::Federated);
    let admin_key_before = stack.fleet.nodes[0].parts().client_key_pem.clone();
    let (mut stack, report) = rebuild_and_tick(stack);
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["credential"]["mode"], "federated", "{spoke:#}");
    assert_eq!(spoke["user"], hub_user(CHECK_ACCOUNT), "{spoke:#}");
    assert_committed_reach(&stack);
    assert_spoke_trusts_the_hub(&stack);

    // The next tick finds nothing to do: nothing is committed.
    let commits = stack.fleet.remote_log().len();
    let (code, again, err) = stack.rotate_json();
    assert_eq!(code, 0, "{again:#}\n{err}");
    assert_eq!(again["spokes"][0]["action"], "healthy", "{again:#}");
    assert_eq!(stack.fleet.remote_log().len(), commits);
    assert_status_applied(&stack);

    // A push that points the controllers' token at the hub's own audience: the next tick
    // finds the data not what it wrote and writes it back, naming the key.
    let issuer = stack.hub.issuer.clone().expect("the hub's issuer");
    let spoke_url = stack.spoke_apis[0].url.clone();
    stack
        .fleet
        .push_edit("fluxcd/spoke0-kubeconfig.yaml", |text| {
            text.replace(
                &format!("\"audiences\": \"{spoke_url}\""),
                &format!("\"audiences\": \"{issuer}\""),
            )
        });
    let (code, repaired, err) = stack.rotate_json();
    assert_eq!(code, 0, "{repaired:#}\n{err}");
    let spoke = &repaired["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["reason"]["kind"], "unreadable", "{spoke:#}");
    let detail = spoke["reason"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("data.audiences is not what spokekeeper wrote"),
        "{spoke:#}"
    );
    assert_committed_reach(&stack);

    // The spoke's API server restarted on a reverted file (it trusts no issuer), its
    // certificate unchanged: the next tick finds the hub's token refused and repairs it.
    std::fs::remove_file(authentication_config_path(&stack.fleet.nodes[0])).expect("the file");
    stack.restart_spoke(0, 1);
    let (code, repaired, err) = stack.rotate_json();
    assert_eq!(code, 0, "{repaired:#}\n{err}");
    let spoke = &repaired["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["reason"]["kind"], "trust-refused", "{spoke:#}");
    stack.assert_consumers_ready(&repaired, 0);
    assert_spoke_trusts_the_hub(&stack);

    // The hub holds no Secret for the spoke, and the fleet's files and outputs no key.
    let secrets = stack.hub.api.get_json(&["secrets", "-n", flux::NS]);
    let names: Vec<&str> = secrets["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["metadata"]["name"].as_str())
        .collect();
    assert!(!names.iter().any(|n| n.contains("spoke0")), "{names:?}");
    let mut needles = Needles::new();
    needles.add_key(&admin_key_before);
    needles.add_key(&stack.fleet.nodes[0].parts().client_key_pem);
    assert_eq!(
        needles.add_kubeconfig(&stack.fleet.nodes[0].kubeconfig_bytes()),
        1
    );
    stack.fleet.assert_no_plaintext_of(&needles);
}

/// Whether the fleet's remote holds spoke 0's file.
fn committed(stack: &RealFlux) -> bool {
    std::process::Command::new("git")
        .arg("-C")
        .arg(&stack.fleet.remote)
        .args(["cat-file", "-e", "main:fluxcd/spoke0-kubeconfig.yaml"])
        .status()
        .is_ok_and(|s| s.success())
}

/// Spoke 0 refused at `trust` with `needle` in its error, nothing committed for it, its
/// file on the node still `file`.
fn assert_refused_at_trust(stack: &RealFlux, needle: &str, file: &str) {
    let (code, report, err) = stack.rotate_json();
    let spoke = &report["spokes"][0];
    assert_ne!(code, 0, "{report:#}\n{err}");
    assert_eq!(spoke["action"], "failed", "{spoke:#}");
    assert_eq!(spoke["stage"], "trust", "{spoke:#}");
    let error = spoke["error"].as_str().unwrap_or_default();
    assert!(error.contains(needle), "{error}");
    assert!(!committed(stack), "{report:#}");
    let path = authentication_config_path(&stack.fleet.nodes[0]);
    assert_eq!(std::fs::read_to_string(path).unwrap(), file);
}

/// What stops a federated rotation says what to fix, and changes nothing it should not:
/// a dry run writes nothing on the node and binds nothing; an issuer the hub does not issue as is refused before the node is touched; a spoke
/// whose API server reads no authentication configuration is refused once the file is
/// written, naming the flag; with the flag, the next tick commits.
#[test]
fn a_dry_run_touches_no_node_and_a_wrong_issuer_or_a_missing_flag_is_refused_with_its_fix() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = RealFlux::start_format(1, false, "", Format::Federated);
    // A dry run reads the node and says what it would do: no file written, no binding,
    // no commit.
    let before =
        std::fs::read_to_string(authentication_config_path(&stack.fleet.nodes[0])).unwrap();
    let (code, dry, err) = stack.fleet.rotate_json(&["--all", "--dry-run"]);
    assert_eq!(code, 0, "{dry:#}\n{err}");
    assert_eq!(dry["spokes"][0]["action"], "would-rotate", "{dry:#}");
    let after = std::fs::read_to_string(authentication_config_path(&stack.fleet.nodes[0])).unwrap();
    assert_eq!(after, before);
    let binding = stack.spoke_apis[0].try_kubectl(&[
        "get",
        "clusterrolebinding",
        "spokekeeper.hub.spoke0.federated",
    ]);
    assert!(binding.is_err(), "{binding:?}");
    assert!(!committed(&stack), "{dry:#}");

    let issuer = stack.hub.issuer.clone().expect("the hub's issuer");
    let config = std::fs::read_to_string(&stack.fleet.config).unwrap();
    let wrong = config.replace(
        &format!("issuer: \"{issuer}\""),
        "issuer: \"https://wrong.example\"",
    );
    assert_ne!(wrong, config);
    std::fs::write(&stack.fleet.config, &wrong).unwrap();
    let untouched =
        std::fs::read_to_string(authentication_config_path(&stack.fleet.nodes[0])).unwrap();
    assert_refused_at_trust(
        &stack,
        &format!(
            "the hub issues tokens as {issuer} but credential.federated.issuer is https://wrong.example"
        ),
        &untouched,
    );

    std::fs::write(&stack.fleet.config, &config).unwrap();
    let (node, api) = (&stack.fleet.nodes[0], &mut stack.spoke_apis[0]);
    api.stop();
    *api =
        support::realstack::spoke::real_api_with(node, &stack.hub.etcd, stack.hub.dir(), 1, false);
    let written = {
        let (_, report, _) = stack.rotate_json();
        let error = report["spokes"][0]["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            error.contains("does not read an authentication configuration")
                && error.contains("node recipe"),
            "{report:#}"
        );
        assert!(!committed(&stack), "{report:#}");
        std::fs::read_to_string(authentication_config_path(node)).unwrap()
    };
    assert!(written.contains(&issuer), "the file was written: {written}");

    let (node, api) = (&stack.fleet.nodes[0], &mut stack.spoke_apis[0]);
    api.stop();
    *api =
        support::realstack::spoke::real_api_with(node, &stack.hub.etcd, stack.hub.dir(), 2, true);
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(report["spokes"][0]["action"], "rotated", "{report:#}");
    stack.assert_consumers_ready(&report, 0);
    stack.assert_deployed(0);
}
