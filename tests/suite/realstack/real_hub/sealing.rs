//! The real Sealed Secrets controller and kubeseal: the certificate, unsealing in every
//! scope, kubeseal's own sealing, a key renewal, the port, a controller that writes no status.

use crate::support;

use std::time::Duration;

use super::{PINNED, SCOPES, Stack, assert_ready};
use support::git::git;
use support::realstack::hub::{CONTROLLER, CONTROLLER_NS, HubOptions, RealHub};
use support::realstack::run;

fn kubeseal_fetch_cert(hub: &RealHub) -> String {
    run(hub.kubeseal().arg("--fetch-cert")).unwrap()
}

/// Scenario 1: the certificate spokekeeper fetches through the real service proxy is the
/// one `kubeseal --fetch-cert` gets, byte for byte.
#[test]
fn the_sealing_certificate_is_what_kubeseal_fetches() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let hub = RealHub::start(&HubOptions::default());
    let from_kubeseal = kubeseal_fetch_cert(&hub);
    assert!(from_kubeseal.starts_with("-----BEGIN CERTIFICATE-----"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ours = rt.block_on(async {
        let cfg = spokekeeper::config::HubConfig {
            kubeconfig: Some(hub.admin_kubeconfig().to_owned()),
            controller: spokekeeper::config::ControllerRef {
                namespace: CONTROLLER_NS.into(),
                name: CONTROLLER.into(),
                // The Service's first port, as the chart names it (http).
                port: None,
            },
            verify_timeout: Duration::from_secs(30),
            flux_default_service_account: None,
        };
        let hub = spokekeeper::hub::Hub::connect(&cfg).await.unwrap();
        hub.fetch_cert().await.unwrap()
    });
    assert_eq!(ours, from_kubeseal);
}

/// Scenario 2: rotations in all three scopes are unsealed by the real controller into
/// Secrets holding exactly the committed (validated) kubeconfig, and spokekeeper's hub
/// verification reads the real Synced condition.
#[test]
fn the_real_controller_unseals_rotations_in_every_scope() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES, &HubOptions::default(), "");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}\n{}", stack.hub.controller_log());
    // The first tick pinned the controller's certificate, as kubeseal fetches it.
    let pinned = std::fs::read_to_string(stack.fleet.clone.join(PINNED)).unwrap();
    assert_eq!(pinned, kubeseal_fetch_cert(&stack.hub));
    for (i, scope) in SCOPES.iter().enumerate() {
        let spoke = &report["spokes"][i];
        assert_eq!(spoke["action"], "rotated", "{spoke:#}");
        assert_eq!(spoke["hub"]["synced"]["ok"], true, "{spoke:#}");
        assert_eq!(spoke["hub"]["synced"]["status"], "True", "{spoke:#}");
        let committed = stack.fleet.remote_file(i);
        let scope_annotation = match *scope {
            "strict" => None,
            "namespace-wide" => Some("sealedsecrets.bitnami.com/namespace-wide: \"true\""),
            _ => Some("sealedsecrets.bitnami.com/cluster-wide: \"true\""),
        };
        if let Some(a) = scope_annotation {
            assert!(committed.contains(a), "{scope}: {committed}");
        }
        let value = stack.wait_unsealed(i, Duration::from_secs(60));
        assert_eq!(
            stack
                .hub
                .synced("flux-system", &format!("spoke{i}-kubeconfig")),
            Some(("True".into(), String::new()))
        );
        // The validated credential: it authenticates to the spoke.
        let rt = tokio::runtime::Runtime::new().unwrap();
        let live = rt.block_on(support::fleet::authenticates(
            &spokekeeper::secret::SecretBytes::from(value),
        ));
        assert_eq!(live.username, "system:admin", "{live:?}");
    }
}

/// Scenario 3: Flux's own kubeconfig loading accepts every unsealed Secret and calls the
/// spoke with it; the Kustomizations report Ready after spokekeeper's reconcile request.
#[test]
fn fluxs_code_deploys_with_every_unsealed_secret() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES, &HubOptions::default(), "");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    for i in 0..SCOPES.len() {
        stack.wait_unsealed(i, Duration::from_secs(60));
        let who = stack
            .hub
            .flux_calls_spoke("flux-system", &format!("spoke{i}-kubeconfig"))
            .unwrap();
        assert_eq!(who["username"], "system:admin", "{who}");
        assert!(
            who["gitVersion"].as_str().unwrap().starts_with("v1."),
            "{who}"
        );
        let spoke = &report["spokes"][i];
        assert_ready(spoke, &[&format!("Kustomization/flux-system/spoke{i}")]);
        assert!(spoke["hub"]["requested_at"].is_string(), "{spoke:#}");
    }
    assert!(stack.flux.as_ref().unwrap().reconciled() >= SCOPES.len());
}

/// Scenario 4: kubeseal opens every commit with the controller's keys, and for the same
/// Secret kubeseal and `spokekeeper seal` write the same manifest but for the ciphertext.
#[test]
fn kubeseal_opens_every_commit_and_seals_the_same_manifest() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES, &HubOptions::default(), "");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let cert = stack.fleet.clone.join(PINNED);
    for (i, scope) in SCOPES.iter().enumerate() {
        let value = stack.recovery_unsealed(i);
        assert_eq!(value, stack.wait_unsealed(i, Duration::from_secs(60)));
        let secret = stack.hub.dir().join(format!("secret{i}.json"));
        use base64::Engine as _;
        std::fs::write(
            &secret,
            serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("spoke{i}-kubeconfig"), "namespace": "flux-system"},
                "type": "Opaque",
                "data": {"value": base64::engine::general_purpose::STANDARD.encode(&value)},
            })
            .to_string(),
        )
        .unwrap();
        let kubeseal = run(stack
            .hub
            .kubeseal()
            .arg(format!("--cert={}", cert.display()))
            .arg(format!("--scope={scope}"))
            .args(["-o", "yaml"])
            .stdin(std::fs::File::open(&secret).unwrap()))
        .unwrap();
        let ours = run(
            std::process::Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
                .args(["seal", "--cert"])
                .arg(&cert)
                .arg(format!("--scope={scope}"))
                .args(["-o", "yaml"])
                .stdin(std::fs::File::open(&secret).unwrap()),
        )
        .unwrap();
        assert_eq!(
            mask_ciphertext(&ours),
            mask_ciphertext(&kubeseal),
            "{scope}"
        );
        assert_ne!(ours, kubeseal, "fresh ciphertext each time");
        // And the controller opens ours.
        let sealed = stack.hub.dir().join(format!("ours{i}.yaml"));
        std::fs::write(&sealed, &ours).unwrap();
        let keys = stack.hub.sealing_keys_files();
        let opened = stack.hub.recovery_unseal(&sealed, &keys).unwrap();
        assert_eq!(
            opened["data"]["value"].as_str().unwrap(),
            base64::engine::general_purpose::STANDARD.encode(&value)
        );
    }
}

/// Each `encryptedData` value replaced by a marker.
fn mask_ciphertext(manifest: &str) -> String {
    let mut out = String::new();
    let mut in_data = false;
    for line in manifest.lines() {
        let indent = line.len() - line.trim_start().len();
        if line.trim_start().starts_with("encryptedData:") {
            in_data = true;
            out.push_str(line);
        } else if in_data && indent > 2 {
            let key = line.split(':').next().unwrap();
            out.push_str(&format!("{key}: CIPHERTEXT"));
        } else {
            in_data = false;
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// Scenario 5: the controller renews its key (SIGUSR1, its own trigger); spokekeeper
/// notices at the next tick, pins the new certificate, re-seals every spoke to it, and
/// the controller unseals the new commits.
#[test]
fn a_controller_key_renewal_reseals_every_spoke() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::start(&SCOPES[..2], &HubOptions::default(), "");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let first = kubeseal_fetch_cert(&stack.hub);
    let old_keys = stack.hub.sealing_keys();
    assert_eq!(old_keys.len(), 1);

    stack.hub.renew_key();
    support::realstack::wait_until(
        "the controller serves a new certificate",
        Duration::from_secs(60),
        || {
            let now = kubeseal_fetch_cert(&stack.hub);
            if now != first {
                Ok(())
            } else {
                Err("same certificate".into())
            }
        },
    );
    let new_keys: Vec<String> = stack
        .hub
        .sealing_keys()
        .into_iter()
        .filter(|k| !old_keys.contains(k))
        .collect();
    assert_eq!(new_keys.len(), 1);
    let only_new = stack.hub.dir().join("newest-key.pem");
    std::fs::write(&only_new, &new_keys[0]).unwrap();

    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let renewed_fp = &report["sealing"]["renewed"];
    assert_eq!(renewed_fp["new"], report["sealing"]["sha256"], "{report:#}");
    assert_ne!(renewed_fp["old"], renewed_fp["new"], "{report:#}");
    let renewed = kubeseal_fetch_cert(&stack.hub);
    assert_eq!(
        std::fs::read_to_string(stack.fleet.clone.join(PINNED)).unwrap(),
        renewed
    );
    let log = git(&stack.fleet.remote, &["log", "--format=%s", "main"]);
    assert!(
        log.contains("sealing: controller certificate renewed"),
        "{log}"
    );
    for i in 0..2 {
        let spoke = &report["spokes"][i];
        assert_eq!(spoke["action"], "rotated", "{spoke:#}");
        assert_eq!(spoke["hub"]["synced"]["ok"], true, "{spoke:#}");
        stack.wait_unsealed(i, Duration::from_secs(60));
        // Sealed to the new key: the new key alone opens it.
        let opened = stack
            .hub
            .recovery_unseal(&stack.committed(i), only_new.to_str().unwrap());
        assert!(opened.is_ok(), "{opened:?}");
    }
}

/// Issue 19, item 1, on the real API server: the controller Service's port unnamed, as
/// upstream controller.yaml installs it. kubeseal asks for `http:NAME:`; spokekeeper
/// reaches it with `port: ""`, and with the chart's `http` it says what to set.
#[test]
fn an_unnamed_controller_port_is_reached_as_kubeseal_asks() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let opts = HubOptions {
        unnamed_port: true,
        ..HubOptions::default()
    };
    let stack = Stack::start(&SCOPES[..1], &opts, "  controller: {port: \"\"}\n");
    assert_eq!(kubeseal_fetch_cert(&stack.hub), stack.hub.cert_pem());
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_ready(&report["spokes"][0], &["Kustomization/flux-system/spoke0"]);
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    std::fs::write(
        &stack.fleet.config,
        text.replace(
            "  controller: {port: \"\"}\n",
            "  controller: {port: http}\n",
        ),
    )
    .unwrap();
    let (_, report, err) = stack.rotate_json();
    let all = format!("{report}\n{err}");
    assert!(
        all.contains("503") && all.contains("hub.controller.port to \\\"\\\" or 8080"),
        "{all}"
    );
}

/// Issue 19, item 2, on the real controller run as one that writes no status (before
/// v0.17 without --update-status; here v0.36.6 with --update-status=false): it unseals,
/// and verification says the controller does not report status and the minimum version,
/// instead of a bare timeout.
#[test]
fn a_controller_that_writes_no_status_is_named_as_such() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = Stack::start(&SCOPES[..1], &HubOptions::default(), "");
    stack.hub.start_controller_with(&["--update-status=false"]);
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    std::fs::write(
        &stack.fleet.config,
        text.replace("verify_timeout: 90s", "verify_timeout: 15s"),
    )
    .unwrap();
    let (_, report, err) = stack.rotate_json();
    let synced = &report["spokes"][0]["hub"]["synced"];
    assert_eq!(synced["ok"], false, "{report:#}\n{err}");
    let message = synced["message"].as_str().unwrap();
    // The chart labels the Service app.kubernetes.io/version (issue 19, item 2): a
    // supported version, so the message names the flag, not an upgrade.
    let version = report["sealing"]["controller_version"]
        .as_str()
        .unwrap_or_else(|| panic!("the chart's version label is read: {report:#}"));
    assert!(
        message.contains("--update-status=false")
            && message.contains(&format!("Sealed Secrets v{version}"))
            && !message.contains("does not support"),
        "{message}"
    );
    stack.wait_unsealed(0, Duration::from_secs(30));
}
