//! Verification after a push: the fleet source, the root Kustomization and the consumers asked in turn, and each way it stops short.

use super::*;

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
        assert_rotated_synced_and_ready(&l, &report, i).await;
    }
    l.assert_within_access();

    // Nothing to commit: nothing to verify, no reconcile requested.
    let (code, report, err) = l.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), "healthy");
    assert_eq!(report["spokes"][0]["hub"], Value::Null);
    assert_eq!(requests_to(&l.hub, "PATCH", "/kustomizations/spoke0"), 1);

    assert_status_ok(&l);

    // The table output of rotate says what the hub made of each pushed credential.
    let (code, _, err) = l.fleet.rotate(&["spoke1", "--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("spoke1: hub: synced, ready"), "{err}");
    l.assert_within_access();
}

/// Spoke `i` of a rotation's report: rotated, its SealedSecret synced and its Kustomization
/// ready after the reconcile request `flux reconcile` sends, holding what was committed.
async fn assert_rotated_synced_and_ready(l: &HubLab, report: &Value, i: usize) {
    assert_eq!(action(report, i), "rotated");
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

/// `status` after a verified rotation, as JSON and as the table.
fn assert_status_ok(l: &HubLab) {
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
async fn stuck_sealed_secret_is_reported_and_the_commit_kept() {
    crate::support::requires!(ROOT);
    let l = lab(1, "  verify_timeout: 5s\n");
    // The controller lost its key (reinstalled without the backup): it serves the old
    // certificate's copy from the cache, but cannot decrypt.
    l.hub.set_keys(vec![key("other-key")]);
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
    l.hub.set_keys(vec![key("key")]);
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
