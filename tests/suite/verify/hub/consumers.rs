//! The Secret's consumers: each Kustomization and HelmRelease that reads it reconciled and reported, and what each may read.

use super::*;

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
    assert_listed_in_bounded_pages(&l);

    a_failing_consumer_is_named_everywhere(&l);
    l.assert_within_access();
}

/// Consumers are listed in the Secret's namespace only, in pages of 100.
fn assert_listed_in_bounded_pages(l: &HubLab) {
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
}

/// One consumer fails: the report, the table, the log and `status` name it.
fn a_failing_consumer_is_named_everywhere(l: &HubLab) {
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
