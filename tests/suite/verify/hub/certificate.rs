//! The controller's sealing certificate: fetched and pinned, a renewal re-sealing every spoke, an unreachable or broken hub.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn renewed_certificate_reseals_every_spoke_in_one_tick() {
    crate::support::requires!(ROOT);
    let l = lab(2, "  verify_timeout: 30s\n");
    assert_eq!(l.fleet.rotate(&["--all"]).0, 0);
    let before: Vec<String> = (0..2).map(|i| l.fleet.remote_file(i)).collect();
    // The controller renews its key; it keeps the old one to decrypt older secrets.
    l.hub.renew_key(&cert("other-key"), key("other-key"));
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
    l.hub.renew_key(&cert("other-key"), key("other-key"));
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
    l.hub.renew_key(&demo, key("other-key"));
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
        key("other-key"),
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

    l.hub.renew_key(&cert("other-key"), key("other-key"));
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
    l.hub.renew_key(&cert("other-key"), key("other-key"));
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
