//! The simulated hub against the real hub.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::hub_calls::{FLUX_NS, SECRET, hub_transcript};
use super::{assert_same, call, client_from_yaml};
use serde_json::{Value, json};
use spokekeeper::config::{ControllerRef, HubConfig};
use spokekeeper::hub::Hub;
use spokekeeper_lab::hub::{HubSim, Kind as SimKind, SimSpoke, rbac_attributes};
use support::realstack::hub::{CONTROLLER, CONTROLLER_NS, HubOptions, RealHub};
use support::realstack::wait_until;

fn hub_config(kubeconfig: &Path) -> HubConfig {
    HubConfig {
        kubeconfig: Some(kubeconfig.to_owned()),
        controller: ControllerRef {
            namespace: CONTROLLER_NS.into(),
            name: CONTROLLER.into(),
            port: None,
        },
        verify_timeout: Duration::from_secs(30),
        flux_default_service_account: None,
    }
}

/// A Kustomization or HelmRelease as the simulated hub holds it, for the real hub: its
/// spec and status, applied and then written through the status subresource.
fn copy_to_real(real: &RealHub, sim: &HubSim, kind: SimKind, name: &str) {
    let obj = sim.consumer(kind, FLUX_NS, name).expect("the sim holds it");
    let manifest = json!({
        "apiVersion": obj["apiVersion"], "kind": obj["kind"],
        "metadata": {"name": name, "namespace": FLUX_NS},
        "spec": obj["spec"],
    });
    real.api.apply(&manifest.to_string());
    real.api.kubectl(&[
        "patch",
        &format!("{}.{}", kind.plural(), kind.group()),
        name,
        "-n",
        FLUX_NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        &json!({"status": obj["status"]}).to_string(),
    ]);
}

/// Role rules for exactly `hub::ACCESS`.
fn access_rules() -> Value {
    spokekeeper::hub::ACCESS
        .iter()
        .map(|a| json!({"apiGroups": [a.group], "resources": [a.resource], "verbs": a.verbs}))
        .collect()
}

#[test]
fn the_simulated_hub_answers_as_the_real_hub() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let real = RealHub::start(&HubOptions::default());
    let rt = tokio::runtime::Runtime::new().unwrap();

    let sim = hub_sim_as_real(&real, &rt);

    let sim_kubeconfig = real.dir().join("sim.kubeconfig");
    std::fs::write(&sim_kubeconfig, sim.kubeconfig_yaml()).unwrap();
    let sim_hub = rt
        .block_on(Hub::connect(&hub_config(&sim_kubeconfig)))
        .unwrap();
    let sim_client = client_from_yaml(&rt, &sim.kubeconfig_yaml());
    let emulated = rt.block_on(hub_transcript(&sim_hub, &sim_client, &sim_client));

    let token_kubeconfig = production_kubeconfig(&real);
    let real_hub = rt
        .block_on(Hub::connect(&hub_config(&token_kubeconfig)))
        .unwrap();
    let real_client = client_from_yaml(&rt, &std::fs::read_to_string(&token_kubeconfig).unwrap());
    let real_admin = client_from_yaml(
        &rt,
        &std::fs::read_to_string(real.admin_kubeconfig()).unwrap(),
    );
    let actual = rt.block_on(hub_transcript(&real_hub, &real_client, &real_admin));
    assert_same(&emulated, &actual);
    assert_eq!(
        actual[2].1,
        json!({"Ok": real.cert_pem().len()}),
        "{actual:#?}"
    );
    let step = |name: &str| &actual.iter().find(|(n, _)| n == name).unwrap().1;
    assert_eq!(step("Recorder::record (first)"), &json!({"Ok": "created"}));
    assert_eq!(
        step("Recorder::record (repeat)"),
        &json!({"Ok": "patched to count 2"})
    );
    assert_eq!(step("merge-patch a missing Event")["http"], 404);

    outside_access_is_refused_or_never_asked(&rt, &real_client, &sim);
}

/// The same SealedSecret on both: sealed by kubeseal to the real controller's key.
fn hub_sim_as_real(real: &RealHub, rt: &tokio::runtime::Runtime) -> HubSim {
    let cert = real.dir().join("cert.pem");
    std::fs::write(&cert, real.cert_pem()).unwrap();
    let secret = real.dir().join("secret.json");
    std::fs::write(
        &secret,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": SECRET, "namespace": FLUX_NS},
               "data": {"value": "Y29uZm9ybQ=="}})
        .to_string(),
    )
    .unwrap();
    let sealed = support::realstack::run(
        real.kubeseal()
            .arg(format!("--cert={}", cert.display()))
            .args(["-o", "yaml"])
            .stdin(std::fs::File::open(&secret).unwrap()),
    )
    .unwrap();
    real.api.apply(&sealed);
    let keys = spokekeeper::seal::RecoveryKey::load_all(
        real.sealing_keys().concat().as_bytes(),
        "controller",
    )
    .unwrap();
    let file = sealed.clone().into_bytes();
    let sim = HubSim::start(
        rt.handle(),
        CONTROLLER_NS,
        CONTROLLER,
        &real.cert_pem(),
        keys,
        Arc::new(move |path: &str| (path == "fluxcd/conform.yaml").then(|| file.clone())),
    )
    .unwrap();
    sim.add_spoke(SimSpoke {
        secret_namespace: FLUX_NS.into(),
        secret_name: SECRET.into(),
        kustomization_namespace: FLUX_NS.into(),
        kustomization_name: "conform".into(),
        file: "fluxcd/conform.yaml".into(),
    });
    // The chart's label on the real controller's Service (its appVersion).
    let label = real
        .api
        .get_json(&["service", "-n", CONTROLLER_NS, CONTROLLER])["metadata"]["labels"]
        [spokekeeper::hub::VERSION_LABEL]
        .as_str()
        .expect("the chart labels the controller's Service with its version")
        .to_string();
    sim.set_version_label(&label);
    sim.add_consumer(SimKind::Kustomization, FLUX_NS, "conform-b", Some(SECRET));
    sim.add_consumer(SimKind::Kustomization, FLUX_NS, "conform-c", None);
    sim.add_consumer(SimKind::HelmRelease, FLUX_NS, "conform-app", Some(SECRET));
    for (kind, name) in [
        (SimKind::Kustomization, "conform"),
        (SimKind::Kustomization, "conform-b"),
        (SimKind::Kustomization, "conform-c"),
        (SimKind::HelmRelease, "conform-app"),
    ] {
        copy_to_real(real, &sim, kind, name);
    }
    wait_until(
        "the real controller unseals",
        Duration::from_secs(60),
        || {
            real.synced(FLUX_NS, SECRET)
                .ok_or_else(|| "no Synced yet".to_string())
        },
    );
    sim
}

/// The real hub, called as production calls it: a ServiceAccount granted exactly
/// hub::ACCESS in the controller's and the Secret's namespaces.
fn production_kubeconfig(real: &RealHub) -> std::path::PathBuf {
    real.api.apply(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: conform\n  namespace: {FLUX_NS}\n"
    ));
    real.api.apply(
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "conform"}, "rules": access_rules()})
        .to_string(),
    );
    for ns in [CONTROLLER_NS, FLUX_NS] {
        real.api.apply(
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "conform", "namespace": ns},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "conform"},
                    "subjects": [{"kind": "ServiceAccount", "name": "conform", "namespace": FLUX_NS}]})
            .to_string(),
        );
    }
    real.token_kubeconfig("conform", &real.token(FLUX_NS, "conform"))
}

/// Outside hub::ACCESS the real authorizer answers 403. The simulated hub does no
/// authorization; it records every request instead, and each is within hub::ACCESS.
fn outside_access_is_refused_or_never_asked(
    rt: &tokio::runtime::Runtime,
    real_client: &kube::Client,
    sim: &HubSim,
) {
    let a = rt.block_on(call(
        real_client,
        "GET",
        &format!("/api/v1/namespaces/{FLUX_NS}/secrets"),
        "application/json",
        None,
    ));
    assert_eq!(
        (a.code, a.body["reason"].as_str()),
        (403, Some("Forbidden")),
        "{}",
        a.text
    );
    for seen in sim.requests() {
        // The test's own probes outside it (a POST, a strategic merge) are the exceptions.
        if seen.method == "POST"
            || seen.content_type.as_deref() == Some("application/strategic-merge-patch+json")
        {
            continue;
        }
        let Some((group, resource, verb)) = rbac_attributes(&seen.method, &seen.path) else {
            panic!(
                "{} {}: not a namespaced resource request",
                seen.method, seen.path
            );
        };
        let granted = spokekeeper::hub::ACCESS
            .iter()
            .any(|a| a.group == group && a.resource == resource && a.verbs.contains(&verb));
        assert!(
            granted,
            "{} {} needs {group}/{resource} {verb}",
            seen.method, seen.path
        );
    }
}
