//! The hub integration against the lab (real sshd spokes, a real git remote) and the
//! emulated hub API (the lab's `hub`), through the binary: the controller's certificate
//! fetched and pinned, a renewal re-sealing every spoke in one tick, the post-push
//! verification reaching Ready, a stuck SealedSecret, an unreachable hub, `status`, and
//! every request held to hub::ACCESS.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use spokekeeper::fingerprint::{Fingerprint, Sealing};
use spokekeeper::hub::ACCESS;
use spokekeeper::seal::{RecoveryKey, SealedSecret, SealingKey};
use spokekeeper_lab::config::ConfigBuilder;
use spokekeeper_lab::hub::{Controller, Flux, HubSim, Kind, SimSpoke, rbac_attributes};
use support::NodeOptions;
use support::fleet::{Fleet, action, authenticates, vectors};
use support::git::{clone, commit, git};
use support::hub_key::HubKey;

const PINNED: &str = "keys/sealed-secrets.pem";

pub(crate) struct HubLab {
    pub(crate) fleet: Fleet,
    pub(crate) hub: HubSim,
    /// The `hub:` section of the fleet's configuration.
    hub_yaml: String,
    // Last: the hub runs on it.
    rt: Option<tokio::runtime::Runtime>,
}

impl Drop for HubLab {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn key(dir: &str) -> RecoveryKey {
    RecoveryKey::load_all(
        &std::fs::read(vectors().join(dir).join("tls.key")).unwrap(),
        dir,
    )
    .unwrap()
    .remove(0)
}

/// The controller's key as the simulated hub holds it.
fn hub_key(dir: &str) -> HubKey {
    HubKey(key(dir))
}

fn cert(dir: &str) -> String {
    let file = if dir == "key" { "cert.pem" } else { "tls.crt" };
    std::fs::read_to_string(vectors().join(dir).join(file)).unwrap()
}

/// `n` spokes; sealing.cert pinned in the fleet repo under keys/ (the old key); the
/// hub's controller serves the same certificate; `hub_extra` goes under `hub:`.
pub(crate) fn lab(n: usize, hub_extra: &str) -> HubLab {
    let fleet = Fleet::new(&vec![NodeOptions::default(); n]);
    std::fs::create_dir_all(fleet.clone.join("keys")).unwrap();
    std::fs::write(fleet.clone.join(PINNED), cert("key")).unwrap();
    git(&fleet.clone, &["add", PINNED]);
    commit(&fleet.clone, "pin the controller's certificate");
    git(&fleet.clone, &["push", "--quiet", "origin", "HEAD:main"]);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let remote = fleet.remote.clone();
    // "Flux": what the fleet repo's main holds.
    let source = Arc::new(move |file: &str| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&remote)
            .args(["show", &format!("main:{file}")])
            .output()
            .ok()?;
        out.status.success().then_some(out.stdout)
    });
    let hub = HubSim::start(
        rt.handle(),
        "kube-system",
        "sealed-secrets-controller",
        &cert("key"),
        vec![hub_key("key")],
        source,
    )
    .unwrap();
    for i in 0..n {
        hub.add_spoke(SimSpoke {
            secret_namespace: "flux-system".into(),
            secret_name: format!("spoke{i}-kubeconfig"),
            kustomization_namespace: "flux-system".into(),
            kustomization_name: format!("spoke{i}"),
            file: format!("fluxcd/spoke{i}-kubeconfig-sealed.yaml"),
        });
    }
    let kubeconfig = fleet.dir.path().join("hub.kubeconfig");
    std::fs::write(&kubeconfig, hub.kubeconfig_yaml()).unwrap();
    let hub_yaml = format!("hub:\n  kubeconfig: {}\n{hub_extra}", kubeconfig.display());
    let l = HubLab {
        fleet,
        hub,
        hub_yaml,
        rt: Some(rt),
    };
    l.builder().write(&l.fleet.config).unwrap();
    l
}

impl HubLab {
    /// The fleet's configuration: the pinned certificate, and the hub.
    pub(crate) fn builder(&self) -> ConfigBuilder {
        self.builder_of(self.fleet.nodes.len())
    }

    /// [`HubLab::builder`] with only the first `n` nodes' spokes (a lab's fleet has no
    /// extra lines of its own).
    pub(crate) fn builder_of(&self, n: usize) -> ConfigBuilder {
        support::fleet::config(&self.fleet.clone, &self.fleet.nodes[..n])
            .sealing_cert(self.fleet.clone.join(PINNED))
            .top(&self.hub_yaml)
    }

    fn sealed(&self, i: usize) -> SealedSecret {
        SealedSecret::parse(self.fleet.remote_file(i).as_bytes()).unwrap()
    }

    fn status(&self) -> (i32, Value, String) {
        let (code, out, err) = self.fleet.run(&["status", "-o", "json"]);
        let json = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
        (code, json, err)
    }

    /// Every request the hub saw is one the Helm chart's Role grants (hub::ACCESS).
    fn assert_within_access(&self) {
        let seen = self.hub.requests();
        assert!(!seen.is_empty());
        for r in &seen {
            let (group, resource, verb) = rbac_attributes(&r.method, &r.path)
                .unwrap_or_else(|| panic!("{} {} is not a named-object request", r.method, r.path));
            assert!(
                ACCESS
                    .iter()
                    .any(|a| a.group == group && a.resource == resource && a.verbs.contains(&verb)),
                "{} {} needs {verb} on {resource:?} in group {group:?}, which hub::ACCESS does not grant",
                r.method,
                r.path
            );
        }
    }
}

fn requests_to(hub: &HubSim, method: &str, suffix: &str) -> usize {
    hub.requests()
        .iter()
        .filter(|r| r.method == method && r.path.ends_with(suffix))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn cert_fetched_and_a_push_verified_until_ready() {
    crate::support::requires!(ROOT);
    let l = lab(2, "  verify_timeout: 30s\n");
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    // The certificate came through the service proxy, the port named by the Service.
    assert_eq!(
        requests_to(
            &l.hub,
            "GET",
            "/namespaces/kube-system/services/sealed-secrets-controller"
        ),
        1
    );
    assert_eq!(
        requests_to(
            &l.hub,
            "GET",
            "/api/v1/namespaces/kube-system/services/http:sealed-secrets-controller:http/proxy/v1/cert.pem"
        ),
        1
    );
    assert_eq!(report["sealing"]["reachable"], true, "{report}");
    assert_eq!(report["sealing"]["renewed"], Value::Null);
    let pinned_fp = spokekeeper::seal::SealingKey::from_pem(
        cert("key").as_bytes(),
        "t",
        time::OffsetDateTime::now_utc(),
    )
    .unwrap()
    .fingerprint()
    .to_string();
    assert_eq!(report["sealing"]["sha256"], pinned_fp.as_str());
    for i in 0..2 {
        assert_eq!(action(&report, i), "rotated");
        let hub = &report["spokes"][i]["hub"];
        assert_eq!(hub["synced"]["ok"], true, "{hub}");
        assert_eq!(hub["synced"]["status"], "True");
        assert_eq!(hub["found_by"], "listed", "{hub}");
        assert_eq!(hub["consumers"].as_array().unwrap().len(), 1, "{hub}");
        let k = &hub["consumers"][0];
        assert_eq!(k["kind"], "Kustomization", "{hub}");
        assert_eq!(k["namespace"], "flux-system");
        assert_eq!(k["name"], format!("spoke{i}"));
        assert_eq!(k["ready"]["ok"], true, "{hub}");
        assert_eq!(k["ready"]["status"], "True");
        assert_eq!(k["ready"]["reason"], "ReconciliationSucceeded");
        let at = hub["requested_at"].as_str().unwrap();
        time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339)
            .expect("RFC 3339");
        // The reconcile request is what `flux reconcile` sends.
        let patches: Vec<_> = l
            .hub
            .requests()
            .into_iter()
            .filter(|r| r.method == "PATCH")
            .filter(|r| r.path == format!("/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations/spoke{i}"))
            .collect();
        assert_eq!(patches.len(), 1, "{patches:?}");
        assert_eq!(
            patches[0].content_type.as_deref(),
            Some("application/merge-patch+json")
        );
        let body: Value = serde_json::from_str(&patches[0].body).unwrap();
        assert_eq!(
            body,
            json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": at}}})
        );
        let k = l
            .hub
            .kustomization("flux-system", &format!("spoke{i}"))
            .unwrap();
        assert_eq!(k["status"]["lastHandledReconcileAt"], at);
        // The hub holds, and unsealed, exactly what was committed.
        let on_hub = l
            .hub
            .sealed_secret("flux-system", &format!("spoke{i}-kubeconfig"))
            .unwrap();
        assert_eq!(
            on_hub["spec"]["encryptedData"]["value"],
            l.sealed(i).encrypted_data["value"].as_str()
        );
        authenticates(&l.fleet.unsealed(i)).await;
    }
    l.assert_within_access();

    // Nothing to commit: nothing to verify, no reconcile requested.
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "healthy");
    assert_eq!(report["spokes"][0]["hub"], Value::Null);
    assert_eq!(requests_to(&l.hub, "PATCH", "/kustomizations/spoke0"), 1);

    let (code, status, err) = l.status();
    assert_eq!(code, 0, "{status}\n{err}");
    let s = &status["spokes"][0];
    assert_eq!(s["ok"], true, "{status}");
    assert_eq!(s["sealed_secret"]["condition"]["status"], "True");
    assert_eq!(s["sealed_secret"]["matches_commit"], true);
    assert_eq!(s["consumers"]["found_by"], "listed", "{status}");
    assert_eq!(s["consumers"]["items"][0]["kind"], "Kustomization");
    assert_eq!(s["consumers"]["items"][0]["condition"]["status"], "True");
    assert_eq!(s["probe"]["state"], "ok");
    assert_eq!(status["hub"]["reachable"], true);
    let (code, table, err) = l.fleet.run(&["status"]);
    assert_eq!(code, 0, "{table}\n{err}");
    let header = table.lines().next().unwrap();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        [
            "SPOKE",
            "COMMITTED",
            "CREDENTIAL",
            "CA",
            "SYNCED",
            "READY",
            "PROBE"
        ]
    );
    assert_eq!(
        table.lines().nth(1).unwrap().split_whitespace().nth(2),
        Some("extracted"),
        "{table}"
    );
    assert!(
        table.lines().nth(1).unwrap().ends_with("True    True   ok"),
        "{table}"
    );

    // The table output of rotate says what the hub made of each pushed credential.
    let (code, _, err) = l.fleet.rotate(&["spoke1", "--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("spoke1: hub: synced, ready"), "{err}");
    l.assert_within_access();
}

/// kustomize-controller (v1.7+) and helm-controller reconcile a consumer when its kubeConfig
/// Secret changes only if the Secret has the label reconcile.fluxcd.io/watch: Enabled
/// (their --watch-configs-label-selector default): the Secret the controller unseals
/// carries what the SealedSecret's template says.
#[tokio::test(flavor = "multi_thread")]
async fn the_unsealed_secret_is_labelled_for_fluxs_config_watch() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 30s\n");
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let on_hub = l
        .hub
        .sealed_secret("flux-system", "spoke0-kubeconfig")
        .unwrap();
    let template = &on_hub["spec"]["template"]["metadata"];
    assert_eq!(
        template["labels"],
        json!({"reconcile.fluxcd.io/watch": "Enabled"}),
        "{on_hub}"
    );
    assert_eq!(
        on_hub["metadata"]["labels"]["reconcile.fluxcd.io/watch"],
        Value::Null
    );
    assert_eq!(
        l.sealed(0).template.labels["reconcile.fluxcd.io/watch"],
        "Enabled"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn status_without_a_hub_reports_the_commit_and_the_probe() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    let (code, out, err) = fleet.run(&["status", "-o", "json"]);
    assert_eq!(code, 1, "nothing committed yet is a warning: {out}\n{err}");
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["spokes"][0]["committed"]["state"], "missing");
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let (code, out, err) = fleet.run(&["status", "-o", "json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["hub"], Value::Null);
    assert_eq!(status["spokes"][0]["sealed_secret"], Value::Null);
    assert_eq!(status["spokes"][0]["probe"]["state"], "ok");
    assert!(status["spokes"][0]["committed"]["ca_sha256"].is_string());
    assert_eq!(
        status["spokes"][0]["committed"]["credential"],
        serde_json::json!({"mode": "extracted"})
    );
    // A configuration that does not load: exit 2, with the field named.
    std::fs::write(
        &fleet.config,
        "repo: {path: x}\nsealing: {cert: c}\nhub: {kubecfg: x}\nspokes: []\n",
    )
    .unwrap();
    let (code, _, err) = fleet.run(&["status"]);
    assert_eq!(code, 2);
    assert!(err.contains("kubecfg"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn renewed_certificate_reseals_every_spoke_in_one_tick() {
    crate::support::requires!(ROOT);
    let l = lab(2, "  verify_timeout: 30s\n");
    assert_eq!(l.fleet.rotate(&["--all"]).0, 0);
    let before: Vec<String> = (0..2).map(|i| l.fleet.remote_file(i)).collect();
    // The controller renews its key; it keeps the old one to decrypt older secrets.
    l.hub.renew_key(&cert("other-key"), hub_key("other-key"));
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let renewed = &report["sealing"]["renewed"];
    assert!(renewed["commit"].is_string(), "{report}");
    let new_fp = renewed["new"].as_str().unwrap();
    assert_ne!(renewed["old"], renewed["new"]);
    let log = l.fleet.remote_log();
    // Newest first: the two spokes, then the certificate, all pushed in this tick.
    assert!(
        log[2].starts_with("sealing: controller certificate renewed sha256:"),
        "{log:?}"
    );
    assert!(
        log[2].contains(&format!(
            "-> {}",
            Fingerprint::<Sealing>::parse(new_fp).unwrap().short()
        )),
        "{log:?}"
    );
    assert_eq!(
        git(&l.fleet.remote, &["show", &format!("main:{PINNED}")]),
        cert("other-key"),
        "the renewed certificate is pinned in the fleet repo"
    );
    for i in 0..2 {
        assert_eq!(
            report["spokes"][i]["reason"]["kind"], "sealing-key-changed",
            "{report}"
        );
        assert!(log[i].contains("sealing key changed"), "{log:?}");
        assert_ne!(l.fleet.remote_file(i), before[i]);
        let sealed = l.sealed(i);
        assert_eq!(
            sealed.annotations["spokekeeper.io/sealing-cert-sha256"],
            new_fp
        );
        // Re-extracted and sealed to the new key only: the old key cannot open it.
        assert!(sealed.unseal(&[key("key")]).is_err());
        let mut secret = sealed.unseal(&[key("other-key")]).expect("the new key");
        authenticates(&secret.data.remove("value").unwrap()).await;
        assert_eq!(report["spokes"][i]["hub"]["synced"]["ok"], true, "{report}");
        assert_eq!(
            report["spokes"][i]["hub"]["consumers"][0]["ready"]["ok"], true,
            "{report}"
        );
    }
    // Renewed once: the next tick seals to the pinned copy and has nothing to do.
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["sealing"]["renewed"], Value::Null, "{report}");
    assert_eq!(report["sealing"]["sha256"], new_fp);
    assert_eq!(action(&report, 0), "healthy");
    assert_eq!(action(&report, 1), "healthy");
    l.assert_within_access();
}

#[tokio::test(flavor = "multi_thread")]
async fn stuck_sealed_secret_is_reported_and_the_commit_kept() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 5s\n");
    // The controller lost its key (reinstalled without the backup): it serves the old
    // certificate's copy from the cache, but cannot decrypt.
    l.hub.set_keys(vec![hub_key("other-key")]);
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated", "{report}");
    let hub = &report["spokes"][0]["hub"];
    assert_eq!(hub["synced"]["ok"], false, "{hub}");
    assert_eq!(hub["synced"]["status"], "False");
    assert_eq!(
        hub["synced"]["message"],
        "no key could decrypt secret (value)"
    );
    assert_eq!(hub["consumers"], json!([]), "no reconcile requested for it");
    assert_eq!(hub["requested_at"], Value::Null);
    assert_eq!(requests_to(&l.hub, "PATCH", "/kustomizations/spoke0"), 0);
    // The validated commit stays pushed.
    assert!(l.fleet.remote_log()[0].starts_with("spoke0: rotate kubeconfig: initial credential"));
    authenticates(&l.fleet.unsealed(0)).await;

    let (code, status, err) = l.status();
    assert_eq!(code, 1, "{status}\n{err}");
    let problems = status["spokes"][0]["problems"].to_string();
    assert!(
        problems.contains("no key could decrypt secret (value)"),
        "{problems}"
    );

    // A controller that never gets to it: timed out, bounded by verify_timeout.
    l.hub.set_keys(vec![hub_key("key")]);
    l.hub.set_controller(Controller::Stalled);
    let started = std::time::Instant::now();
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let hub = &report["spokes"][0]["hub"];
    assert_eq!(hub["synced"]["status"], "TimedOut", "{hub}");
    assert!(
        hub["synced"]["message"]
            .as_str()
            .unwrap()
            .contains("has not looked at generation"),
        "{hub}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    l.assert_within_access();
}

/// Issue 19, item 2: the controller's version is read from its Service's
/// app.kubernetes.io/version label (as the Helm chart sets it) when the Service is read,
/// reported with the sealing certificate, and named when a SealedSecret gets no status.
#[tokio::test(flavor = "multi_thread")]
async fn the_controller_version_comes_from_its_service_label() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 3s\n");
    l.hub.set_version_label("0.24.2");
    l.hub.set_controller(Controller::Stalled);
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    assert_eq!(
        report["sealing"]["controller_version"], "0.24.2",
        "{report}"
    );
    let synced = &report["spokes"][0]["hub"]["synced"];
    assert_eq!(synced["status"], "TimedOut", "{synced}");
    let message = synced["message"].as_str().unwrap();
    assert!(
        message.contains("Sealed Secrets v0.24.2")
            && message.contains("does not support")
            && message.contains("v0.24.3 or later"),
        "{message}"
    );
    l.assert_within_access();

    // A configured port (as the chart writes it): the Service is still read for its label.
    let l = lab(1, "  verify_timeout: 3s\n  controller: {port: http}\n");
    l.hub.set_version_label("0.36.1");
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        report["sealing"]["controller_version"], "0.36.1",
        "{report}"
    );
    l.assert_within_access();

    // No label: no version is claimed.
    let l = lab(1, "  verify_timeout: 3s\n  controller: {port: http}\n");
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        report["sealing"]["controller_version"],
        Value::Null,
        "{report}"
    );
}

/// A HelmRelease that used up its retries (on the broken credential before the push) is
/// asked with reconcile.fluxcd.io/resetAt equal to requestedAt, as `flux reconcile hr
/// --reset` asks: helm-controller runs it again only then. Its Kustomization sibling gets
/// the plain request.
#[tokio::test(flavor = "multi_thread")]
async fn a_helm_release_stalled_after_its_retries_is_reset_and_comes_back() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 20s\n");
    l.hub.add_consumer(
        Kind::HelmRelease,
        "flux-system",
        "spoke0-apps",
        Some("spoke0-kubeconfig"),
    );
    l.hub.exhaust_retries(
        "flux-system",
        "spoke0-apps",
        "Kubernetes cluster unreachable: x509: certificate signed by unknown authority",
    );
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let hub = &report["spokes"][0]["hub"];
    let hr = hub["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "HelmRelease")
        .unwrap();
    assert_eq!(hr["ready"]["ok"], true, "{hub}");
    assert_eq!(hr["ready"]["reason"], "UpgradeSucceeded", "{hub}");
    // Asked once, with the spoke's request: no request of its own to report.
    assert_eq!(hr["requested_at"], Value::Null, "{hub}");
    let at = hub["requested_at"].as_str().unwrap();
    let patch = |path: &str| -> Vec<Value> {
        l.hub
            .requests()
            .into_iter()
            .filter(|r| r.method == "PATCH" && r.path.ends_with(path))
            .map(|r| serde_json::from_str(&r.body).unwrap())
            .collect()
    };
    assert_eq!(
        patch("/helmreleases/spoke0-apps"),
        [json!({"metadata": {"annotations": {
            "reconcile.fluxcd.io/requestedAt": at, "reconcile.fluxcd.io/resetAt": at}}})]
    );
    assert_eq!(
        patch("/kustomizations/spoke0"),
        [json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": at}}})]
    );
    let obj = l
        .hub
        .consumer(Kind::HelmRelease, "flux-system", "spoke0-apps")
        .unwrap();
    assert_eq!(obj["status"]["lastHandledResetAt"], at, "{obj}");
    l.assert_within_access();
}

/// After the push the fleet's GitRepository, then the Kustomization that applies the
/// SealedSecret (the root, named by its kustomize.toolkit.fluxcd.io labels), then the
/// consumers are asked to reconcile, in that order, as `flux reconcile ks --with-source`:
/// the root only once source-controller handled its source's request.
#[tokio::test(flavor = "multi_thread")]
async fn the_fleet_source_then_the_root_then_the_consumers_are_asked_in_turn() {
    crate::support::requires!(ROOT);
    let l = lab(2, "  verify_timeout: 20s\n");
    l.hub.add_root();
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let seen = l.hub.requests();
    let at = |method: &str, suffix: &str| -> Vec<usize> {
        seen.iter()
            .enumerate()
            .filter(|(_, r)| r.method == method && r.path.ends_with(suffix))
            .map(|(i, _)| i)
            .collect()
    };
    let source = at("PATCH", "/gitrepositories/flux-system");
    let root = at("PATCH", "/kustomizations/infra");
    // Asked once for both spokes: they share the root.
    assert_eq!((source.len(), root.len()), (1, 1), "{seen:?}");
    let echo = at("GET", "/gitrepositories/flux-system");
    assert!(
        echo.iter().any(|&g| source[0] < g && g < root[0]),
        "the root is asked once the source was read back: {seen:?}"
    );
    for spoke in ["/kustomizations/spoke0", "/kustomizations/spoke1"] {
        let consumer = at("PATCH", spoke);
        assert_eq!(consumer.len(), 1, "{spoke}: {seen:?}");
        assert!(root[0] < consumer[0], "{spoke}: {seen:?}");
    }
    let git = l
        .hub
        .source("gitrepositories", "flux-system", "flux-system")
        .unwrap();
    let asked = git["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"]
        .as_str()
        .unwrap();
    assert_eq!(git["status"]["lastHandledReconcileAt"], asked);
    let root = l.hub.kustomization("flux-system", "infra").unwrap();
    assert_eq!(
        root["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"],
        asked
    );
    l.assert_within_access();
}

/// The fleet's GitRepository fails after an earlier good fetch: the root stays Ready on
/// the old artifact and the SealedSecret never becomes the commit's. The report names the
/// GitRepository and source-controller's message at once, not a timeout.
#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_source_failing_after_a_good_fetch_is_named_not_a_timeout() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 20s\n");
    l.hub.add_root();
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let broken = "failed to checkout and determine revision: unable to clone 'ssh://git@git.example/fleet.git': dial tcp: lookup git.example: no such host";
    l.hub
        .break_git_repository("flux-system", "flux-system", "GitOperationFailed", broken);
    let started = std::time::Instant::now();
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 1, "{report}\n{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let synced = &report["spokes"][0]["hub"]["synced"];
    assert_eq!(synced["status"], "SourceFailed", "{report}");
    assert_eq!(synced["reason"], "GitOperationFailed");
    assert_eq!(
        synced["message"],
        format!("source GitRepository flux-system/flux-system: {broken}")
    );
    assert!(
        err.contains("source GitRepository flux-system/flux-system"),
        "{err}"
    );
    l.assert_within_access();
}

/// kustomize-controller writes Ready False `ArtifactFailed` for a Kustomization whose
/// GitRepository is missing, or was never fetched: the report names the source and what
/// Flux says of it at once, not a timeout after waiting for Flux's retries.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_source_is_named_as_the_cause_not_a_timeout() {
    crate::support::requires!(ROOT);
    let l = lab(2, "  verify_timeout: 60s\n");
    // spoke0's source is missing; spoke1's fails to clone.
    l.hub.remove_git_repository("flux-system", "flux-system");
    let k = l.hub.kustomization("flux-system", "spoke1").unwrap();
    assert_eq!(k["spec"]["sourceRef"]["name"], "flux-system");
    l.hub.add_consumer(
        Kind::Kustomization,
        "flux-system",
        "spoke1-apps",
        Some("spoke1-kubeconfig"),
    );
    let started = std::time::Instant::now();
    let (code, report, err) = l.fleet.rotate_json(&["spoke0"]);
    assert_eq!(code, 1, "{report}\n{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let ready = &report["spokes"][0]["hub"]["consumers"][0]["ready"];
    assert_eq!(ready["status"], "SourceFailed", "{report}");
    assert_eq!(ready["reason"], "NotFound");
    assert_eq!(
        ready["message"],
        "source GitRepository flux-system/flux-system: does not exist on the hub (ArtifactFailed: GitRepository.source.toolkit.fluxcd.io \"flux-system\" not found)"
    );
    assert!(
        err.contains("source GitRepository flux-system/flux-system"),
        "{err}"
    );

    let broken = "failed to checkout and determine revision: unable to clone 'ssh://git@git.example/fleet.git': dial tcp: lookup git.example: no such host";
    l.hub
        .fail_git_repository("flux-system", "flux-system", "GitOperationFailed", broken);
    let started = std::time::Instant::now();
    let (code, report, err) = l.fleet.rotate_json(&["spoke1"]);
    assert_eq!(code, 1, "{report}\n{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    for c in report["spokes"][0]["hub"]["consumers"].as_array().unwrap() {
        let ready = &c["ready"];
        assert_eq!(ready["status"], "SourceFailed", "{report}");
        assert_eq!(ready["reason"], "GitOperationFailed");
        assert_eq!(
            ready["message"],
            format!("source GitRepository flux-system/flux-system: {broken}")
        );
    }
    l.assert_within_access();
}

#[tokio::test(flavor = "multi_thread")]
async fn kustomization_not_ready_is_reported() {
    crate::support::requires!(ROOT);
    // A configured port: the Service is read for its version label only.
    let l = lab(1, "  verify_timeout: 10s\n  controller: {port: http}\n");
    l.hub.set_flux(Flux::Failing(
        "Secret/flux-system/spoke0-kubeconfig: x509: certificate signed by unknown authority"
            .into(),
    ));
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let hub = &report["spokes"][0]["hub"];
    assert_eq!(hub["synced"]["ok"], true, "{hub}");
    let ready = &hub["consumers"][0]["ready"];
    assert_eq!(ready["status"], "False", "{hub}");
    assert_eq!(ready["reason"], "ReconciliationFailed");
    assert!(ready["message"].as_str().unwrap().contains("x509"));
    let (code, status, err) = l.status();
    assert_eq!(code, 1, "{status}\n{err}");
    assert_eq!(
        status["spokes"][0]["consumers"]["items"][0]["condition"]["status"],
        "False"
    );
    assert!(requests_to(&l.hub, "GET", "/proxy/v1/cert.pem") >= 1);
    l.assert_within_access();
}

#[tokio::test(flavor = "multi_thread")]
async fn hub_unreachable_seals_to_the_pinned_copy_and_still_rotates() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 2s\n");
    // A first tick with the hub up records what it serves (.git/spokekeeper/).
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    // The controller's pod is gone: the proxy answers 503.
    l.hub.set_controller(Controller::Down);
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(action(&report, 0), "rotated", "{report}\n{err}");
    assert_eq!(report["sealing"]["trusted"], true, "{report}");
    assert!(
        report["sealing"]["trust"]
            .as_str()
            .unwrap()
            .contains("served last"),
        "{report}"
    );
    assert_eq!(report["sealing"]["reachable"], false, "{report}");
    let error = report["sealing"]["error"].as_str().unwrap();
    assert!(
        error.contains("no endpoints available for service"),
        "{error}"
    );
    // Sealed to the pinned copy, which the controller will be able to open.
    let mut secret = l.sealed(0).unseal(&[key("key")]).unwrap();
    authenticates(&secret.data.remove("value").unwrap()).await;
    // With the controller down nothing is unsealed: reported, exit 1.
    assert_eq!(code, 1);
    assert_eq!(report["spokes"][0]["hub"]["synced"]["status"], "TimedOut");

    // The whole API unreachable: the same, and `status` says it cannot read the hub.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let kc = l.fleet.dir.path().join("hub.kubeconfig");
    let text = std::fs::read_to_string(&kc).unwrap();
    std::fs::write(
        &kc,
        text.replace(&l.hub.addr.to_string(), &format!("127.0.0.1:{port}")),
    )
    .unwrap();
    let (_, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(action(&report, 0), "rotated", "{report}\n{err}");
    assert_eq!(report["sealing"]["reachable"], false);
    assert_eq!(report["spokes"][0]["reason"]["kind"], "forced");
    let (code, status, err) = l.status();
    assert_eq!(code, 2, "{status}\n{err}");
    assert_eq!(status["hub"]["reachable"], false);
    assert_eq!(status["spokes"][0]["committed"]["state"], "committed");
}

/// A certificate pushed to the repo while the hub is unreachable is not sealed to (nothing
/// outside the repo confirms it); once the controller serves it, every spoke is re-sealed.
#[tokio::test(flavor = "multi_thread")]
async fn a_pushed_certificate_is_sealed_to_only_once_the_hub_serves_it() {
    crate::support::requires!(ROOT);
    let l = lab(2, "  verify_timeout: 10s\n");
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["sealing"]["trusted"], true, "{report}");
    let old = report["sealing"]["sha256"].as_str().unwrap().to_string();

    // Someone with push access replaces the pinned copy; the controller is down.
    let other = l.fleet.dir.path().join("other");
    clone(&l.fleet.remote, &other);
    std::fs::write(other.join(PINNED), cert("other-key")).unwrap();
    git(&other, &["add", PINNED]);
    commit(&other, "new key");
    git(&other, &["push", "--quiet", "origin", "HEAD:main"]);
    let attack = git(&other, &["rev-parse", "HEAD"]).trim().to_string();
    l.hub.set_controller(Controller::Down);
    let head = git(&l.fleet.remote, &["rev-parse", "main"]);
    let files = [l.fleet.remote_file(0), l.fleet.remote_file(1)];
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    assert_eq!(report["sealing"]["reachable"], false, "{report}");
    let u = &report["sealing"]["untrusted"];
    let new = u["sha256"].as_str().unwrap().to_string();
    assert_ne!(new, old);
    assert_eq!(u["expected"][0], old.as_str(), "{report}");
    assert_eq!(u["commit"], attack.as_str(), "{report}");
    assert_eq!(action(&report, 0), "healthy", "{report}");
    assert_eq!(action(&report, 1), "healthy", "{report}");
    assert_eq!(git(&l.fleet.remote, &["rev-parse", "main"]), head);
    assert_eq!([l.fleet.remote_file(0), l.fleet.remote_file(1)], files);

    // The controller really has that key: it serves it, and every spoke is re-sealed.
    l.hub.set_controller(Controller::Up);
    l.hub.renew_key(&cert("other-key"), hub_key("other-key"));
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["sealing"]["trusted"], true, "{report}");
    assert_eq!(report["sealing"]["sha256"], new.as_str());
    for i in 0..2 {
        assert_eq!(action(&report, i), "rotated", "{report}");
        assert!(l.sealed(i).unseal(&[key("other-key")]).is_ok());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_demo_or_broken_certificate_from_the_hub_is_refused() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 10s\n");
    assert_eq!(l.fleet.rotate(&["--all"]).0, 0);
    let demo =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("keys/demo/tls.crt"))
            .unwrap();
    l.hub.renew_key(&demo, hub_key("other-key"));
    // The pinned copy, which the hub served last, is still trusted.
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert!(
        report["sealing"]["error"]
            .as_str()
            .unwrap()
            .contains("demo key"),
        "{report}"
    );
    assert_eq!(report["sealing"]["renewed"], Value::Null);
    assert!(
        l.sealed(0).unseal(&[key("key")]).is_ok(),
        "the pinned copy was used"
    );
    assert_eq!(
        git(&l.fleet.remote, &["show", &format!("main:{PINNED}")]),
        cert("key")
    );
    l.hub.renew_key(
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n",
        hub_key("other-key"),
    );
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert!(
        report["sealing"]["error"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{report}"
    );
    assert_eq!(action(&report, 0), "healthy");
}

/// `spokekeeper run` with a hub: the tick's hub results reach /metrics and the alert log.
#[test]
fn the_daemon_exports_hub_metrics_and_alerts_on_a_stuck_sealed_secret() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 3s\n");
    l.hub.set_keys(vec![hub_key("other-key")]);
    let daemon = support::daemon::Daemon::start(&l.fleet.config, &[]);
    let text = daemon.wait_for("tick finished", std::time::Duration::from_secs(60));
    assert!(text.contains("SpokekeeperHubNotReady"), "{text}");
    assert!(
        text.contains("no key could decrypt secret (value)"),
        "{text}"
    );
    let metrics = daemon.metrics();
    for line in [
        "spokekeeper_hub_reachable 1",
        "spokekeeper_hub_synced{spoke=\"spoke0\"} 0",
        "spokekeeper_hub_ready{spoke=\"spoke0\"} 0",
        "spokekeeper_errors_total{spoke=\"spoke0\",stage=\"hub\"} 1",
        "spokekeeper_rotations_total{spoke=\"spoke0\",reason=\"initial\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "want {line:?} in:\n{metrics}"
        );
    }
    l.assert_within_access();
}

/// Review mode never pushes the target branch: a renewed certificate is proposed on its
/// own branch and pull request, and every spoke's re-sealed credential on its own.
#[tokio::test(flavor = "multi_thread")]
async fn in_review_mode_a_renewed_certificate_is_proposed_not_pushed() {
    crate::support::requires!(ROOT);
    use spokekeeper_lab::forge::{ForgeSim, Kind, TOKEN};
    let l = lab(2, "  verify_timeout: 5s\n");
    assert_eq!(l.fleet.rotate(&["--all"]).0, 0, "seeded directly");
    let main_before = git(&l.fleet.remote, &["rev-parse", "main"]);
    let forge = ForgeSim::start(Kind::Github, l.fleet.remote.clone());
    let token_file = l.fleet.dir.path().join("forge-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let signing_key = support::git::signing_key(&l.fleet.dir.path().join("signing-key"));
    l.builder()
        .repo(&forge.repo_yaml(&signing_key, &token_file))
        .write(&l.fleet.config)
        .unwrap();

    l.hub.renew_key(&cert("other-key"), hub_key("other-key"));
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        git(&l.fleet.remote, &["rev-parse", "main"]),
        main_before,
        "main is not pushed to in review mode"
    );
    let renewed = &report["sealing"]["renewed"];
    assert!(renewed["commit"].is_string(), "{report}");
    let branch = "spokekeeper/sealing.cert";
    assert_eq!(
        git(&l.fleet.remote, &["show", &format!("{branch}:{PINNED}")]),
        cert("other-key"),
        "the renewed certificate waits on its own branch"
    );
    let pulls = forge.open_pulls();
    let heads: Vec<&str> = pulls.iter().map(|p| p.head.as_str()).collect();
    assert_eq!(pulls.len(), 3, "{heads:?}");
    let cert_pr = pulls.iter().find(|p| p.head == branch).expect("{heads:?}");
    let cert_head = git(&l.fleet.remote, &["rev-parse", branch]);
    assert!(
        support::git::verifies_with(&l.fleet.remote, &signing_key, cert_head.trim()),
        "the certificate's review commit is signed with repo.signing_key"
    );
    assert!(
        cert_pr
            .title
            .starts_with("sealing: controller certificate renewed"),
        "{}",
        cert_pr.title
    );
    for i in 0..2 {
        assert_eq!(report["spokes"][i]["action"], "pending", "{report}");
        let head = format!("spokekeeper/spoke{i}");
        let file = format!("fluxcd/spoke{i}-kubeconfig-sealed.yaml");
        let text = git(&l.fleet.remote, &["show", &format!("{head}:{file}")]);
        let sealed = SealedSecret::parse(text.as_bytes()).unwrap();
        assert_eq!(
            sealed.annotations["spokekeeper.io/sealing-cert-sha256"],
            renewed["new"].as_str().unwrap()
        );
        assert!(
            sealed.unseal(&[key("key")]).is_err(),
            "sealed to the new key"
        );
    }
    // The next tick: everything waits for review; nothing new is pushed or opened.
    let cert_head = git(&l.fleet.remote, &["rev-parse", branch]);
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(git(&l.fleet.remote, &["rev-parse", branch]), cert_head);
    assert_eq!(forge.pulls().len(), 3);
    assert_eq!(git(&l.fleet.remote, &["rev-parse", "main"]), main_before);
    let status = git(&l.fleet.clone, &["status", "--porcelain"]);
    assert!(
        status.trim().is_empty(),
        "the clone is left clean: {status}"
    );
}

/// A fresh install: nothing pinned yet. The controller's certificate is fetched, every
/// spoke sealed to it, and the certificate pinned in the fleet repo by the same tick.
#[tokio::test(flavor = "multi_thread")]
async fn first_start_without_a_pinned_certificate_fetches_and_pins_it() {
    crate::support::requires!(ROOT);
    let l = lab(2, "  verify_timeout: 10s\n");
    git(&l.fleet.clone, &["rm", "--quiet", PINNED]);
    commit(&l.fleet.clone, "nothing pinned yet");
    git(&l.fleet.clone, &["push", "--quiet", "origin", "HEAD:main"]);
    assert!(!l.fleet.clone.join(PINNED).exists());

    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let log = l.fleet.remote_log();
    assert!(
        log[2].starts_with("sealing: pin the controller's certificate sha256:"),
        "pinned before the spokes' commits: {log:?}"
    );
    assert_eq!(
        git(&l.fleet.remote, &["show", &format!("main:{PINNED}")]),
        cert("key")
    );
    let fp = report["sealing"]["sha256"].as_str().unwrap().to_string();
    for i in 0..2 {
        assert_eq!(action(&report, i), "rotated", "{report}");
        let sealed = l.sealed(i);
        assert_eq!(sealed.annotations["spokekeeper.io/sealing-cert-sha256"], fp);
        let mut secret = sealed.unseal(&[key("key")]).expect("the controller's key");
        authenticates(&secret.data.remove("value").unwrap()).await;
    }
    // Pinned once: the next tick has nothing to do.
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(l.fleet.remote_log().len(), log.len(), "{report}");
    l.assert_within_access();
}

/// Nothing pinned and no hub answering: a clear error naming sealing.cert and the fix.
#[tokio::test(flavor = "multi_thread")]
async fn first_start_without_a_pinned_certificate_or_a_hub_says_what_to_do() {
    crate::support::requires!(ROOT);
    let l = lab(1, "");
    std::fs::remove_file(l.fleet.clone.join(PINNED)).unwrap();
    l.hub.set_controller(Controller::Down);
    let (code, out, err) = l.fleet.rotate(&["--all"]);
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("sealing.cert")
            && err.contains("does not exist yet")
            && err.contains("kubeseal --fetch-cert"),
        "{err}"
    );
    assert_eq!(l.fleet.remote_log().len(), 2, "nothing committed");
}

/// A renewal that cannot be pinned (here git attributes on it refuse it) changes nothing: the
/// hub has just contradicted the pinned copy, so this tick seals to nothing (not even with
/// sealing.sha256 listing the pinned copy) and says why; once the repo takes it, the
/// renewal goes through.
#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_that_cannot_be_pinned_seals_nothing_until_it_is() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 10s\n");
    assert_eq!(l.fleet.rotate(&["--all"]).0, 0);
    let before = l.fleet.remote_file(0);
    l.hub.renew_key(&cert("other-key"), hub_key("other-key"));
    let policy = l.fleet.clone.join(".git/info/attributes");
    std::fs::write(&policy, format!("/{PINNED} refused-by-policy\n")).unwrap();

    let pinned = l.sealed(0).annotations["spokekeeper.io/sealing-cert-sha256"].clone();
    let text = std::fs::read_to_string(&l.fleet.config).unwrap();
    let at = format!("  cert: {}\n", l.fleet.clone.join(PINNED).display());
    let with_sha = text.replace(&at, &format!("{at}  sha256: {pinned}\n"));
    assert_ne!(with_sha, text);
    std::fs::write(&l.fleet.config, &with_sha).unwrap();

    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let e = report["sealing"]["error"].as_str().unwrap();
    assert!(
        e.contains("cannot be pinned") && e.contains("refused-by-policy"),
        "{e}"
    );
    assert_eq!(report["sealing"]["renewed"], Value::Null, "{report}");
    assert_eq!(report["sealing"]["trusted"], false, "{report}");
    assert_eq!(report["sealing"]["untrusted"]["anchor"], "hub", "{report}");
    assert_eq!(action(&report, 0), "healthy", "{report}");
    assert_eq!(l.fleet.remote_file(0), before);
    assert_eq!(
        std::fs::read_to_string(l.fleet.clone.join(PINNED)).unwrap(),
        cert("key"),
        "the clone's pinned copy is put back"
    );

    std::fs::remove_file(&policy).unwrap();
    std::fs::write(&l.fleet.config, &text).unwrap();
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert!(
        report["sealing"]["renewed"]["commit"].is_string(),
        "{report}"
    );
    assert_eq!(action(&report, 0), "rotated", "{report}");
    assert!(l.sealed(0).unseal(&[key("other-key")]).is_ok());
}

/// Set `sealing.sha256` in the lab's config.
fn set_sealing_sha256(l: &HubLab, fp: &str) {
    let text = std::fs::read_to_string(&l.fleet.config).unwrap();
    let at = format!("  cert: {}\n", l.fleet.clone.join(PINNED).display());
    assert!(text.contains(&at));
    std::fs::write(
        &l.fleet.config,
        text.replace(&at, &format!("{at}  sha256: {fp}\n")),
    )
    .unwrap();
}

/// With `hub:`, a clone that never reached the hub has nothing outside the repo to trust:
/// an unreachable hub on a fresh install seals nothing (no first use) and says to set
/// sealing.sha256.
#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_clone_with_the_hub_unreachable_seals_nothing_and_says_to_set_sealing_sha256() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 10s\n");
    l.hub.set_controller(Controller::Down);
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let u = &report["sealing"]["untrusted"];
    assert_eq!(u["anchor"], "last-served", "{report}");
    assert_eq!(u["expected"], json!([]), "{report}");
    let error = u["error"].as_str().unwrap();
    assert!(
        error.contains("no record") && error.contains("set sealing.sha256"),
        "{error}"
    );
    assert_eq!(report["spokes"][0]["stage"], "seal", "{report}");
    assert!(!l.fleet.output(0).exists(), "nothing sealed");
    assert_eq!(l.fleet.remote_log().len(), 2, "nothing committed");

    // The operator checked the fingerprint with the controller and sets it.
    set_sealing_sha256(
        &l,
        &SealingKey::from_pem(cert("key").as_bytes(), "t", time::OffsetDateTime::now_utc())
            .unwrap()
            .fingerprint()
            .to_string(),
    );
    let (_, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(action(&report, 0), "rotated", "{report}\n{err}");
    assert_eq!(report["sealing"]["trust"], "listed in sealing.sha256");
}

/// With `hub:`, deleting every output along with a pushed certificate does not make the
/// next tick a fresh install: while the hub is unreachable, only what it served last counts.
#[tokio::test(flavor = "multi_thread")]
async fn with_a_hub_deleting_every_output_does_not_reach_first_use() {
    crate::support::requires!(ROOT);
    let l = lab(2, "  verify_timeout: 10s\n");
    assert_eq!(l.fleet.rotate(&["--all"]).0, 0);
    let old = l.sealed(0).annotations["spokekeeper.io/sealing-cert-sha256"].clone();
    std::fs::write(l.fleet.clone.join(PINNED), cert("other-key")).unwrap();
    git(&l.fleet.clone, &["rm", "--quiet", "-r", "fluxcd"]);
    git(&l.fleet.clone, &["add", "-u"]);
    commit(&l.fleet.clone, "new key, start over");
    git(&l.fleet.clone, &["push", "--quiet", "origin", "HEAD:main"]);
    l.hub.set_controller(Controller::Down);
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let u = &report["sealing"]["untrusted"];
    assert_eq!(u["anchor"], "last-served", "{report}");
    assert_eq!(u["expected"][0], old.as_str(), "{report}");
    for i in 0..2 {
        assert_eq!(report["spokes"][i]["stage"], "seal", "{report}");
        assert!(
            !l.fleet.output(i).exists(),
            "nothing sealed to the pushed key"
        );
    }
}

/// A committed sealing.cert that cannot be used (garbage) does not stop a process with a
/// reachable hub: it starts from the controller's certificate and the tick pins it.
#[tokio::test(flavor = "multi_thread")]
async fn a_broken_pinned_certificate_is_replaced_by_the_controllers() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 10s\n");
    std::fs::write(l.fleet.clone.join(PINNED), "garbage\n").unwrap();
    git(&l.fleet.clone, &["add", "-u"]);
    commit(&l.fleet.clone, "break it");
    git(&l.fleet.clone, &["push", "--quiet", "origin", "HEAD:main"]);
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "rotated", "{report}");
    assert_eq!(
        git(&l.fleet.remote, &["show", &format!("main:{PINNED}")]),
        cert("key")
    );
    assert!(
        l.fleet
            .remote_log()
            .iter()
            .any(|m| m.starts_with("sealing: pin the controller's certificate")),
        "{:?}",
        l.fleet.remote_log()
    );
    assert!(l.sealed(0).unseal(&[key("key")]).is_ok());
}

/// The daemon looks again, every tick, at a spoke whose pushed credential the hub had not
/// taken: once Flux recovers, the gauges (and so the alerts) clear without a new rotation.
#[test]
fn the_daemon_clears_hub_gauges_once_the_hub_takes_the_credential() {
    crate::support::requires!(ROOT);
    use std::time::{Duration, Instant};
    let l = lab(1, "  verify_timeout: 3s\n");
    l.hub
        .set_flux(Flux::Failing("kustomize build failed".into()));
    let daemon = support::daemon::Daemon::start(&l.fleet.config, &["--interval", "2s"]);
    daemon.wait_for("tick finished", Duration::from_secs(60));
    let scrape = || daemon.metrics();
    let has = |text: &str, line: &str| text.lines().any(|l| l == line);
    let metrics = scrape();
    assert!(
        has(&metrics, "spokekeeper_hub_ready{spoke=\"spoke0\"} 0"),
        "{metrics}"
    );
    let commits = l.fleet.remote_log().len();
    l.hub.set_flux(Flux::Ready);
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = scrape();
        if has(&metrics, "spokekeeper_hub_ready{spoke=\"spoke0\"} 1") {
            assert!(has(&metrics, "spokekeeper_hub_synced{spoke=\"spoke0\"} 1"));
            break;
        }
        assert!(
            Instant::now() < end,
            "the gauge never cleared:\n{metrics}\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        l.fleet.remote_log().len(),
        commits,
        "no new rotation was needed"
    );
    l.assert_within_access();
}

fn patches_to(hub: &HubSim, plural: &str, ns: &str, name: &str) -> usize {
    requests_to(hub, "PATCH", &format!("/namespaces/{ns}/{plural}/{name}"))
}

fn lists(hub: &HubSim) -> Vec<spokekeeper_lab::hub::Seen> {
    hub.requests()
        .into_iter()
        .filter(|r| {
            r.method == "GET"
                && (r.path.ends_with("/kustomizations") || r.path.ends_with("/helmreleases"))
        })
        .collect()
}

/// Every Flux consumer of the spoke's Secret is asked to reconcile and waited for: two
/// Kustomizations and a HelmRelease on spoke0-kubeconfig; a HelmRelease on another Secret,
/// a Kustomization in another namespace and one deploying to the hub itself are left
/// alone, and 150 more HelmReleases make the list come in two pages.
#[tokio::test(flavor = "multi_thread")]
async fn every_consumer_of_the_secret_is_reconciled_and_each_reported() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 20s\n");
    let secret = Some("spoke0-kubeconfig");
    l.hub
        .add_consumer(Kind::Kustomization, "flux-system", "spoke0-infra", secret);
    l.hub
        .add_consumer(Kind::HelmRelease, "flux-system", "spoke0-apps", secret);
    l.hub.add_consumer(
        Kind::HelmRelease,
        "flux-system",
        "other-apps",
        Some("other-kubeconfig"),
    );
    l.hub
        .add_consumer(Kind::Kustomization, "apps", "spoke0-elsewhere", secret);
    l.hub
        .add_consumer(Kind::Kustomization, "flux-system", "hub-local", None);
    for i in 0..150 {
        l.hub.add_consumer(
            Kind::HelmRelease,
            "flux-system",
            &format!("filler-{i:03}"),
            Some("filler-kubeconfig"),
        );
    }
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let hub = &report["spokes"][0]["hub"];
    assert_eq!(hub["found_by"], "listed", "{hub}");
    assert_eq!(hub["secret"], "flux-system/spoke0-kubeconfig");
    let at = hub["requested_at"].as_str().unwrap();
    let seen: Vec<(String, String, bool)> = hub["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["namespace"], "flux-system", "{c}");
            (
                c["kind"].as_str().unwrap().to_string(),
                c["name"].as_str().unwrap().to_string(),
                c["ready"]["ok"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("Kustomization".into(), "spoke0".into(), true),
            ("Kustomization".into(), "spoke0-infra".into(), true),
            ("HelmRelease".into(), "spoke0-apps".into(), true),
        ]
    );
    assert_eq!(
        hub["consumers"][2]["ready"]["reason"], "UpgradeSucceeded",
        "{hub}"
    );
    for (plural, ns, name, n) in [
        ("kustomizations", "flux-system", "spoke0", 1),
        ("kustomizations", "flux-system", "spoke0-infra", 1),
        ("helmreleases", "flux-system", "spoke0-apps", 1),
        ("helmreleases", "flux-system", "other-apps", 0),
        ("kustomizations", "apps", "spoke0-elsewhere", 0),
        ("kustomizations", "flux-system", "hub-local", 0),
    ] {
        assert_eq!(
            patches_to(&l.hub, plural, ns, name),
            n,
            "{plural} {ns}/{name}"
        );
    }
    // The same annotation for both kinds, and each echoed back by its controller.
    let hr = l
        .hub
        .consumer(Kind::HelmRelease, "flux-system", "spoke0-apps")
        .unwrap();
    assert_eq!(
        hr["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"],
        at
    );
    assert_eq!(hr["status"]["lastHandledReconcileAt"], at);
    // Listed in the Secret's namespace only, in bounded pages.
    let lists = lists(&l.hub);
    assert!(
        lists
            .iter()
            .all(|r| r.path.contains("/namespaces/flux-system/") && r.query.contains("limit=100")),
        "{lists:?}"
    );
    assert_eq!(
        lists
            .iter()
            .filter(|r| r.path.ends_with("/helmreleases"))
            .count(),
        2,
        "152 HelmReleases: two pages of 100: {lists:?}"
    );
    assert!(
        lists.iter().any(|r| r.query.contains("continue=")),
        "{lists:?}"
    );

    // One consumer fails: the report, the table, the log and `status` name it.
    l.hub.set_consumer_flux(
        Kind::HelmRelease,
        "flux-system",
        "spoke0-apps",
        Flux::Failing("Helm upgrade failed: Kubernetes cluster unreachable".into()),
    );
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let consumers = &report["spokes"][0]["hub"]["consumers"];
    assert_eq!(consumers[0]["ready"]["ok"], true, "{consumers}");
    assert_eq!(consumers[1]["ready"]["ok"], true, "{consumers}");
    assert_eq!(consumers[2]["name"], "spoke0-apps");
    assert_eq!(consumers[2]["ready"]["ok"], false, "{consumers}");
    assert_eq!(consumers[2]["ready"]["reason"], "UpgradeFailed");
    assert!(
        err.contains("HelmRelease flux-system/spoke0-apps"),
        "the log names it: {err}"
    );
    let (code, _, err) = l.fleet.rotate(&["--all", "--force"]);
    assert_eq!(code, 1);
    assert!(
        err.contains(
            "spoke0: hub: synced, not ready: HelmRelease flux-system/spoke0-apps (Helm upgrade failed: Kubernetes cluster unreachable); ready: Kustomization flux-system/spoke0, Kustomization flux-system/spoke0-infra"
        ),
        "{err}"
    );
    let (code, status, err) = l.status();
    assert_eq!(code, 1, "{status}\n{err}");
    let items = &status["spokes"][0]["consumers"]["items"];
    assert_eq!(items.as_array().unwrap().len(), 3, "{status}");
    assert_eq!(items[2]["kind"], "HelmRelease");
    assert_eq!(items[2]["condition"]["status"], "False");
    assert!(
        status["spokes"][0]["problems"].to_string().contains(
            "not ready: HelmRelease flux-system/spoke0-apps: Ready False (Helm upgrade failed"
        ),
        "{status}"
    );
    let (_, table, _) = l.fleet.run(&["status"]);
    assert!(table.lines().nth(1).unwrap().contains(" False "), "{table}");
    l.assert_within_access();
}

/// `spokes[].kustomization` names the one consumer: nothing is listed, and the other
/// consumers of the Secret are left alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_configured_kustomization_is_the_only_one_verified() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 10s\n");
    let text = std::fs::read_to_string(&l.fleet.config).unwrap();
    std::fs::write(
        &l.fleet.config,
        text.replace(
            "  - name: spoke0\n",
            "  - name: spoke0\n    kustomization: {name: spoke0}\n",
        ),
    )
    .unwrap();
    l.hub.add_consumer(
        Kind::HelmRelease,
        "flux-system",
        "spoke0-apps",
        Some("spoke0-kubeconfig"),
    );
    l.hub.set_consumer_flux(
        Kind::HelmRelease,
        "flux-system",
        "spoke0-apps",
        Flux::Failing("would fail".into()),
    );
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let hub = &report["spokes"][0]["hub"];
    assert_eq!(hub["found_by"], "configured", "{hub}");
    assert_eq!(hub["consumers"].as_array().unwrap().len(), 1, "{hub}");
    assert_eq!(hub["consumers"][0]["kind"], "Kustomization");
    assert_eq!(hub["consumers"][0]["name"], "spoke0");
    assert_eq!(hub["consumers"][0]["ready"]["ok"], true);
    assert_eq!(
        patches_to(&l.hub, "kustomizations", "flux-system", "spoke0"),
        1
    );
    assert_eq!(
        patches_to(&l.hub, "helmreleases", "flux-system", "spoke0-apps"),
        0
    );
    let (code, status, err) = l.status();
    assert_eq!(code, 0, "{status}\n{err}");
    assert_eq!(status["spokes"][0]["consumers"]["found_by"], "configured");
    assert!(lists(&l.hub).is_empty(), "{:?}", lists(&l.hub));
    l.assert_within_access();
}

/// A hub whose Flux has no helm-controller (no HelmRelease CRD: the list is 404) has no
/// HelmRelease consumers; the Kustomizations are verified as usual.
#[tokio::test(flavor = "multi_thread")]
async fn a_hub_without_helm_releases_verifies_its_kustomizations() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 10s\n");
    l.hub.remove_kind(Kind::HelmRelease);
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let hub = &report["spokes"][0]["hub"];
    assert_eq!(hub["list_error"], Value::Null, "{hub}");
    assert_eq!(hub["consumers"].as_array().unwrap().len(), 1, "{hub}");
    assert_eq!(hub["consumers"][0]["kind"], "Kustomization");
    assert_eq!(hub["consumers"][0]["ready"]["ok"], true, "{hub}");
    assert_eq!(
        requests_to(&l.hub, "GET", "/namespaces/flux-system/helmreleases"),
        1
    );
    l.assert_within_access();
}

/// A Secret nothing deploys with is reported plainly, as a warning: the credential is
/// committed and unsealed, and `rotate` succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_secret_without_consumers_is_a_warning() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 10s\n");
    l.hub
        .remove_consumer(Kind::Kustomization, "flux-system", "spoke0");
    l.hub.add_consumer(
        Kind::Kustomization,
        "flux-system",
        "spoke0",
        Some("spoke0-kubeconfg"),
    );
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let hub = &report["spokes"][0]["hub"];
    assert_eq!(hub["synced"]["ok"], true, "{hub}");
    assert_eq!(hub["consumers"], json!([]), "{hub}");
    assert_eq!(hub["requested_at"], Value::Null);
    assert!(err.contains("no Flux consumer uses the Secret"), "{err}");
    assert_eq!(requests_to(&l.hub, "PATCH", ""), 0);
    let (code, _, err) = l.fleet.rotate(&["--all", "--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("spoke0: hub: synced, but nothing deploys with it: no Kustomization or HelmRelease in flux-system has spec.kubeConfig.secretRef.name spoke0-kubeconfig"),
        "{err}"
    );
    let (code, status, err) = l.status();
    assert_eq!(code, 1, "a warning: {status}\n{err}");
    assert!(
        status["spokes"][0]["problems"]
            .to_string()
            .contains("nothing deploys with Secret flux-system/spoke0-kubeconfig"),
        "{status}"
    );
    let (_, table, _) = l.fleet.run(&["status"]);
    assert!(table.lines().nth(1).unwrap().contains(" none "), "{table}");
    l.assert_within_access();
}

/// A consumer whose spec.kubeConfig.secretRef.key names another key than the one written
/// fails inside Flux: the log says so before the push, and the report and `status` name
/// it, the key it reads and the key written; it is not asked to reconcile. One with the
/// key unset reads `value`, the key written here, and is verified as usual.
#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_reading_another_key_is_named_before_the_push() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 20s\n");
    let secret = Some("spoke0-kubeconfig");
    l.hub
        .add_consumer(Kind::HelmRelease, "flux-system", "spoke0-apps", secret);
    l.hub.set_consumer_key(
        Kind::HelmRelease,
        "flux-system",
        "spoke0-apps",
        Some("kubeconfig"),
    );
    l.hub
        .add_consumer(Kind::Kustomization, "flux-system", "spoke0-infra", secret);
    l.hub
        .set_consumer_key(Kind::Kustomization, "flux-system", "spoke0-infra", None);
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let hub = &report["spokes"][0]["hub"];
    let consumers = hub["consumers"].as_array().unwrap();
    let names: Vec<(&str, bool)> = consumers
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["ready"]["ok"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("spoke0", true),
            ("spoke0-infra", true),
            ("spoke0-apps", false)
        ],
        "{hub}"
    );
    let ready = &consumers[2]["ready"];
    assert_eq!(ready["status"], "WrongKey", "{hub}");
    let why = "HelmRelease flux-system/spoke0-apps reads key kubeconfig of Secret flux-system/spoke0-kubeconfig, but spokekeeper writes key value (spokes[spoke0].secret.key)";
    assert!(ready["message"].as_str().unwrap().starts_with(why), "{hub}");
    assert_eq!(
        patches_to(&l.hub, "helmreleases", "flux-system", "spoke0-apps"),
        0
    );
    assert_eq!(
        patches_to(&l.hub, "kustomizations", "flux-system", "spoke0-infra"),
        1
    );
    // Said before the push.
    let warned = err.find(why).unwrap_or_else(|| panic!("not logged: {err}"));
    let pushed = err
        .find("pushed")
        .unwrap_or_else(|| panic!("no push: {err}"));
    assert!(warned < pushed, "{err}");
    let (code, status, err) = l.status();
    assert_eq!(code, 1, "{status}\n{err}");
    assert!(
        status["spokes"][0]["problems"].to_string().contains(why),
        "{status}"
    );
    assert_eq!(
        status["spokes"][0]["consumers"]["items"][2]["wrong_key"]
            .as_str()
            .map(|w| w.starts_with(why)),
        Some(true),
        "{status}"
    );
    l.assert_within_access();
}

/// A consumer with spec.serviceAccountName makes Flux impersonate that ServiceAccount on
/// the spoke with the committed credential. The node's admin credential may; a minted one
/// bound to `view` may not: refused at validate, naming the ServiceAccount, the consumer
/// and the missing verb, and nothing is committed.
#[tokio::test(flavor = "multi_thread")]
async fn a_credential_that_may_not_impersonate_a_consumers_service_account_is_refused() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 10s\n");
    let secret = Some("spoke0-kubeconfig");
    l.hub
        .add_consumer(Kind::HelmRelease, "flux-system", "spoke0-apps", secret);
    l.hub
        .set_consumer_service_account(Kind::HelmRelease, "flux-system", "spoke0-apps", "deployer");
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "the admin credential may: {report}\n{err}");
    let committed = l.fleet.remote_file(0);
    let text = std::fs::read_to_string(&l.fleet.config).unwrap();
    std::fs::write(
        &l.fleet.config,
        format!("{text}credential:\n  mode: minted\n  cluster_role: view\n"),
    )
    .unwrap();
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["stage"], "validate", "{spoke}");
    let error = spoke["error"].as_str().unwrap();
    for part in [
        "may not impersonate ServiceAccount flux-system/deployer",
        "missing verb impersonate on serviceaccounts",
        "HelmRelease flux-system/spoke0-apps",
    ] {
        assert!(error.contains(part), "{part}: {error}");
    }
    assert_eq!(l.fleet.remote_file(0), committed, "nothing committed");
    // The generation minted for the refused credential is not left bound on the spoke.
    let bound = l.fleet.nodes[0]
        .api_objects()
        .lock()
        .unwrap()
        .binding_names();
    assert_eq!(bound, Vec::<String>::new(), "nothing left granted");
    l.assert_within_access();
}

/// `hub.flux_default_service_account` (the controllers' --default-service-account) is
/// what Flux impersonates for a consumer without spec.serviceAccountName: checked the same.
#[tokio::test(flavor = "multi_thread")]
async fn the_flux_default_service_account_is_checked_for_consumers_without_one() {
    crate::support::requires!(ROOT);
    let l = lab(
        1,
        "  verify_timeout: 10s\n  flux_default_service_account: flux-deployer\n",
    );
    let text = std::fs::read_to_string(&l.fleet.config).unwrap();
    std::fs::write(
        &l.fleet.config,
        format!("{text}credential:\n  mode: minted\n  cluster_role: view\n"),
    )
    .unwrap();
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["stage"], "validate", "{spoke}");
    let error = spoke["error"].as_str().unwrap();
    assert!(
        error.contains("may not impersonate ServiceAccount flux-system/flux-deployer")
            && error.contains("Kustomization flux-system/spoke0"),
        "{error}"
    );
    assert_eq!(requests_to(&l.hub, "PATCH", ""), 0, "nothing pushed");
}

/// A hostile hub cannot make the listing unbounded: a page over 4 MiB, or more than
/// 1000 objects of a kind, fails the verification plainly and nothing is requested.
#[tokio::test(flavor = "multi_thread")]
async fn a_list_too_large_to_read_fails_verification_plainly() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 20s\n");
    l.hub
        .add_consumer(Kind::HelmRelease, "flux-system", "big", None);
    l.hub.annotate_consumer(
        Kind::HelmRelease,
        "flux-system",
        "big",
        "padding",
        &"x".repeat(5 << 20),
    );
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let hub = &report["spokes"][0]["hub"];
    assert_eq!(hub["synced"]["ok"], true, "{hub}");
    let e = hub["list_error"].as_str().unwrap();
    assert!(e.contains("list helmreleases in flux-system"), "{e}");
    assert!(e.contains("longer than 4 MiB"), "{e}");
    assert_eq!(requests_to(&l.hub, "PATCH", ""), 0, "nothing requested");

    l.hub
        .remove_consumer(Kind::HelmRelease, "flux-system", "big");
    for i in 0..1001 {
        l.hub.add_consumer(
            Kind::Kustomization,
            "flux-system",
            &format!("many-{i:04}"),
            Some("other-kubeconfig"),
        );
    }
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 1, "{report}\n{err}");
    let e = report["spokes"][0]["hub"]["list_error"].as_str().unwrap();
    assert!(
        e.contains("kustomizations in flux-system: more than 1000 objects"),
        "{e}"
    );
    assert_eq!(requests_to(&l.hub, "PATCH", ""), 0, "nothing requested");
    l.assert_within_access();
}

/// Upstream controller.yaml's Service port has no name: the API server matches endpoints
/// by name only, so kubeseal's `http:NAME:` (port "") and the number reach it, and the
/// chart's default `http` is a 503 whose error names hub.controller.port and the fix.
#[tokio::test(flavor = "multi_thread")]
async fn an_unnamed_controller_port_is_reached_as_kubeseal_asks() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 10s\n  controller: {port: \"\"}\n");
    l.hub.set_port_name("");
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        requests_to(
            &l.hub,
            "GET",
            "/services/http:sealed-secrets-controller:/proxy/v1/cert.pem"
        ),
        1
    );
    let text = std::fs::read_to_string(&l.fleet.config).unwrap();
    // Not configured: the Service's first port, by its number.
    std::fs::write(
        &l.fleet.config,
        text.replace("  controller: {port: \"\"}\n", ""),
    )
    .unwrap();
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        requests_to(
            &l.hub,
            "GET",
            "/services/http:sealed-secrets-controller:8080/proxy/v1/cert.pem"
        ),
        1
    );
    // The named port the Service does not have: 503, and the error says what to set.
    std::fs::write(
        &l.fleet.config,
        text.replace(
            "  controller: {port: \"\"}\n",
            "  controller: {port: http}\n",
        ),
    )
    .unwrap();
    let (_, report, err) = l.fleet.rotate_json(&["--all"]);
    let all = format!("{report}\n{err}");
    assert!(
        all.contains("503") && all.contains("hub.controller.port to \\\"\\\" or 8080"),
        "{all}"
    );
    l.assert_within_access();
}

/// A recheck of a spoke whose consumer Flux had not finished waits for the request made
/// at the push (and its echo) instead of setting a new one that restarts the wait.
#[tokio::test(flavor = "multi_thread")]
async fn a_recheck_waits_for_the_pending_request() {
    crate::support::requires!(ROOT);
    use spokekeeper::hub::Hub;
    use spokekeeper::hub::verify::{Ask, verify};
    use std::time::Duration;
    let l = lab(1, "  verify_timeout: 5s\n");
    l.hub.set_flux(Flux::Stalled);
    let (_, report, err) = l.fleet.rotate_json(&["--all"]);
    let first = &report["spokes"][0]["hub"];
    assert_eq!(
        first["consumers"][0]["ready"]["status"], "TimedOut",
        "{report}\n{err}"
    );
    let at = first["requested_at"].as_str().unwrap().to_string();
    assert_eq!(
        patches_to(&l.hub, "kustomizations", "flux-system", "spoke0"),
        1
    );

    l.hub.set_flux(Flux::Ready);
    let text = std::fs::read_to_string(&l.fleet.config).unwrap();
    let config =
        spokekeeper::config::Config::parse(&text, "spokekeeper.yaml", l.fleet.dir.path()).unwrap();
    let hub_cfg = config.hub.clone().unwrap();
    let hub = Hub::connect(&hub_cfg).await.unwrap();
    let spoke = &config.spokes[0];
    let ciphertext = l.sealed(0).encrypted_data[&spoke.secret.key].clone();
    let consumer = spokekeeper::hub::Consumer {
        kind: spokekeeper::hub::Kind::Kustomization,
        namespace: "flux-system".into(),
        name: "spoke0".into(),
    };
    let again = verify(
        &hub,
        spoke,
        &ciphertext,
        Ok(vec![consumer]),
        None,
        Duration::from_secs(5),
        Ask::Again,
    )
    .await;
    assert!(again.ok(), "{again:?}");
    assert_eq!(again.requested_at.as_deref(), Some(at.as_str()));
    assert_eq!(
        patches_to(&l.hub, "kustomizations", "flux-system", "spoke0"),
        1,
        "no new request"
    );
}

/// Flux reads a kubeConfig Secret only from the consumer's own namespace, and a hub
/// without kustomize.toolkit.fluxcd.io/v1 (no Flux, or one older than v2.0) is said to be
/// one, not told to set spokes[].kustomization.
#[tokio::test(flavor = "multi_thread")]
async fn where_flux_looks_is_checked_and_said() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 5s\n");
    let text = std::fs::read_to_string(&l.fleet.config).unwrap();
    let configure = |k: &str| {
        std::fs::write(
            &l.fleet.config,
            text.replace(
                "  - name: spoke0\n",
                &format!("  - name: spoke0\n    kustomization: {k}\n"),
            ),
        )
        .unwrap()
    };
    configure("{name: spoke0, namespace: apps}");
    let (_, report, err) = l.fleet.rotate_json(&["--all"]);
    let ready = &report["spokes"][0]["hub"]["consumers"][0]["ready"];
    assert_eq!(ready["status"], "WrongNamespace", "{report}\n{err}");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("its own namespace"),
        "{ready}"
    );
    assert_eq!(patches_to(&l.hub, "kustomizations", "apps", "spoke0"), 0);

    configure("{name: spoke0}");
    l.hub.remove_kind(Kind::Kustomization);
    let (_, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    let ready = &report["spokes"][0]["hub"]["consumers"][0]["ready"];
    assert_eq!(ready["status"], "NotServed", "{report}\n{err}");
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.contains("kustomize.toolkit.fluxcd.io/v1") && !message.contains("set spokes"),
        "{message}"
    );
}

/// A 429 from the hub API (API Priority and Fairness) during verification is waited out
/// for its Retry-After, for the reads and the reconcile request alike, and verification
/// still ends Ready.
#[tokio::test(flavor = "multi_thread")]
async fn verification_honours_retry_after() {
    crate::support::requires!(ROOT);
    use std::time::Duration;
    let l = lab(1, "  verify_timeout: 30s\n");
    let gaps_after_429 = |part: &str| {
        let seen: Vec<_> = l
            .hub
            .requests()
            .into_iter()
            .filter(|r| r.path.contains(part))
            .collect();
        let throttled = seen.iter().filter(|r| r.throttled).count();
        let gaps: Vec<Duration> = seen
            .windows(2)
            .filter(|w| w[0].throttled)
            .map(|w| w[1].at - w[0].at)
            .collect();
        (throttled, gaps)
    };
    l.hub.throttle("/sealedsecrets/", 2, 2);
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        report["spokes"][0]["hub"]["consumers"][0]["ready"]["ok"],
        true
    );
    let (throttled, gaps) = gaps_after_429("/sealedsecrets/");
    assert_eq!((throttled, gaps.len()), (2, 2));
    assert!(
        gaps.iter().all(|g| *g >= Duration::from_secs(2)),
        "{gaps:?}"
    );

    l.hub.throttle("/kustomizations/spoke0", 1, 1);
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        report["spokes"][0]["hub"]["consumers"][0]["ready"]["ok"],
        true
    );
    let (throttled, gaps) = gaps_after_429("/kustomizations/spoke0");
    assert_eq!((throttled, gaps.len()), (1, 1));
    assert!(gaps[0] >= Duration::from_secs(1), "{gaps:?}");
    l.assert_within_access();
}

/// The controller writes Synced False when an unseal fails, then retries it: a False is
/// the result only once the retry had its chance.
#[tokio::test(flavor = "multi_thread")]
async fn a_synced_false_waits_for_the_controllers_retry() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 30s\n");
    l.hub.fail_next_unseal();
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    let hub = &report["spokes"][0]["hub"];
    assert_eq!(hub["synced"]["ok"], true, "{hub}");
    assert_eq!(hub["consumers"][0]["ready"]["ok"], true, "{hub}");
}

/// The daemon's Events on the emulated hub: a rotation and an expiry warning on the
/// spoke's Kustomization, the warning's repeats patched into one Event's series, an Event
/// gone from the hub (its TTL) created again rather than lost, and every call within
/// hub::ACCESS (create and patch on events.k8s.io Events).
#[test]
fn the_daemon_records_events_aggregates_repeats_and_recreates_an_expired_one() {
    crate::support::requires!(ROOT);
    let l = lab(1, "");
    l.builder()
        .top("alerts:\n  warn_before: 36500d\n")
        .write(&l.fleet.config)
        .unwrap();
    let daemon = support::daemon::Daemon::start(&l.fleet.config, &["--interval", "1s"]);
    let ticks = |n: usize| {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while daemon.log().matches("tick finished").count() < n {
            assert!(std::time::Instant::now() < end, "{}", daemon.log());
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let client_warning = |events: &[Value]| -> Vec<Value> {
        events
            .iter()
            .filter(|e| {
                e["reason"] == "CredentialExpiring"
                    && e["note"]
                        .as_str()
                        .is_some_and(|n| n.contains("client certificate"))
            })
            .cloned()
            .collect()
    };
    ticks(3);
    let events = l.hub.events();
    let rotated: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "CredentialRotated")
        .collect();
    assert_eq!(rotated.len(), 1, "{events:#?}");
    assert_eq!(rotated[0]["regarding"]["kind"], "Kustomization");
    assert_eq!(rotated[0]["regarding"]["name"], "spoke0");
    assert_eq!(rotated[0]["metadata"]["namespace"], "flux-system");
    let warned = client_warning(&events);
    assert_eq!(warned.len(), 1, "one Event, not one per tick: {events:#?}");
    let first = warned[0]["metadata"]["name"].as_str().unwrap().to_string();
    assert!(
        warned[0]["series"]["count"].as_u64().unwrap_or(0) >= 2,
        "{:#}",
        warned[0]
    );

    // The API server deletes Events after --event-ttl: the next repeat starts anew.
    l.hub.expire_events();
    let seen = daemon.log().matches("tick finished").count();
    ticks(seen + 2);
    let log = daemon.log();
    drop(daemon);
    let warned = client_warning(&l.hub.events());
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert_ne!(warned[0]["metadata"]["name"], first.as_str(), "a new Event");
    assert!(!log.contains("event not recorded"), "{log}");
    let patches_gone = l
        .hub
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.contains(&format!("/events/{first}")))
        .count();
    assert!(
        patches_gone >= 2,
        "the series was patched, also after it was gone"
    );
    l.assert_within_access();
}

/// Issue 40 (11): the one-shot `rotate` and `revoke` record their Events on the hub as the
/// daemon does: the rotation, the revocation and its new generation, and a failure, each
/// on the spoke's Kustomization; a dry run records none.
#[test]
fn one_shot_rotate_and_revoke_record_their_events_on_the_kustomization() {
    crate::support::requires!(ROOT);
    let mut l = lab(1, "");
    l.builder()
        .top("credential:\n  mode: minted\n")
        .write(&l.fleet.config)
        .unwrap();
    let recorded = |l: &HubLab| -> Vec<String> {
        let mut events: Vec<Value> = l.hub.events();
        events.sort_by_key(|e| e["eventTime"].as_str().map(String::from));
        events
            .iter()
            .map(|e| {
                format!(
                    "{} {}/{}",
                    e["reason"].as_str().unwrap_or_default(),
                    e["regarding"]["kind"].as_str().unwrap_or_default(),
                    e["regarding"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect()
    };
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(recorded(&l), ["CredentialRotated Kustomization/spoke0"]);
    let (code, out, err) = l.fleet.run(&["revoke", "spoke0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let mut after_revoke = recorded(&l);
    after_revoke.sort();
    assert_eq!(
        after_revoke,
        [
            "CredentialRevoked Kustomization/spoke0",
            "CredentialRotated Kustomization/spoke0",
            "CredentialRotated Kustomization/spoke0",
        ]
    );
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force", "--dry-run"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(l.hub.events().len(), 3, "a dry run records nothing");
    l.fleet.nodes[0].stop_api();
    l.fleet.nodes[0].stop_sshd();
    let (code, report, err) = l.fleet.rotate_json(&["--all", "--force"]);
    assert_ne!(code, 0, "{report:#}\n{err}");
    assert_eq!(
        recorded(&l).last().map(String::as_str),
        Some("RotationFailed Kustomization/spoke0")
    );
    assert!(!err.contains("not recorded"), "{err}");
    l.assert_within_access();
}
