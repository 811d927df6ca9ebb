//! Minted credentials through the binary against the emulated API: generations revoked after the push, wound back, at the maximum, and refused before they are bound.

use super::*;

/// credential.mode: minted against the emulated API (the real one: realstack::real_hub):
/// each spoke gets generation 1 and no admin certificate is committed; without `hub:` the
/// older generation's binding goes right after the push; a spoke whose approvals are
/// denied fails at `mint` and keeps its commit; `revoke` deletes the current binding and
/// commits the next generation.
#[tokio::test(flavor = "multi_thread")]
async fn minted_generations_are_revoked_after_the_push_and_a_denial_fails_safe() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::with(
        &[NodeOptions::default(), NodeOptions::default()],
        "credential:\n  mode: minted\n",
    );
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    for i in 0..2 {
        let spoke = &report["spokes"][i];
        assert_eq!(action(&report, i), "rotated", "{spoke:#}");
        assert_eq!(spoke["credential"]["mode"], "minted", "{spoke:#}");
        let user = spoke["credential"]["user"].as_str().unwrap();
        assert!(
            user.starts_with(&format!("spokekeeper:hub:spoke{i}:1:")),
            "{spoke:#}"
        );
        assert_eq!(spoke["credential"]["generation"], 1, "{spoke:#}");
        let objects = fleet.nodes[i].api_objects();
        let objects = objects.lock().unwrap();
        assert_eq!(
            objects.binding_names(),
            [format!("spokekeeper.hub.spoke{i}.g1")]
        );
        assert!(objects.csr_names().is_empty(), "{:?}", objects.csr_names());
        let kc = fleet.unsealed(i);
        let text = std::str::from_utf8(kc.expose()).unwrap();
        let admin = String::from_utf8(fleet.nodes[i].kubeconfig_bytes()).unwrap();
        let admin_cert = admin
            .lines()
            .find_map(|l| l.trim().strip_prefix("client-certificate-data: "))
            .unwrap();
        assert!(!text.contains(admin_cert.trim_matches('"')), "{text}");
    }
    assert!(
        fleet.remote_log().iter().any(|l| {
            l.starts_with("spoke0: rotate kubeconfig, minted spokekeeper:hub:spoke0:1:")
                && l.ends_with(": initial credential")
        }),
        "{:?}",
        fleet.remote_log()
    );

    let committed1 = fleet.remote_file(1);
    fleet.nodes[1]
        .api_objects()
        .lock()
        .unwrap()
        .deny_approvals();
    let (code, report, err) = fleet.rotate_json(&["--all", "--force"]);
    assert_ne!(code, 0, "{report:#}\n{err}");
    let spoke0 = &report["spokes"][0];
    assert_eq!(action(&report, 0), "rotated", "{spoke0:#}");
    assert_eq!(spoke0["credential"]["generation"], 2, "{spoke0:#}");
    assert_eq!(
        spoke0["revoked"],
        serde_json::json!(["spokekeeper.hub.spoke0.g1"]),
        "{spoke0:#}"
    );
    let objects0 = fleet.nodes[0].api_objects();
    assert_eq!(
        objects0.lock().unwrap().binding_names(),
        ["spokekeeper.hub.spoke0.g2"]
    );
    let spoke1 = &report["spokes"][1];
    assert_eq!(action(&report, 1), "failed", "{spoke1:#}");
    assert_eq!(spoke1["stage"], "mint", "{spoke1:#}");
    assert!(
        spoke1["error"].as_str().unwrap().contains("is Denied"),
        "{spoke1:#}"
    );
    assert_eq!(fleet.remote_file(1), committed1);
    assert_eq!(
        fleet.nodes[1].api_objects().lock().unwrap().binding_names(),
        ["spokekeeper.hub.spoke1.g1"]
    );

    let (code, out, err) = fleet.run(&["revoke", "spoke0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("spoke0: deleted ClusterRoleBinding spokekeeper.hub.spoke0.g2"),
        "{err}"
    );
    assert!(
        err.contains("minted generation 3 for spokekeeper:hub:spoke0:3:"),
        "{err}"
    );
    assert_eq!(
        objects0.lock().unwrap().binding_names(),
        ["spokekeeper.hub.spoke0.g3"]
    );
    let (code, out, err) = fleet.run(&["revoke", "spoke1"]);
    assert_ne!(code, 0, "{out}\n{err}");
    // The nodes' admin keys and every minted key committed (generation 1 of both spokes,
    // 2 and 3 of spoke0), read back by unsealing each committed output.
    let needles = fleet.key_needles();
    assert_eq!(needles.keys(), 2 + 4);
    fleet.assert_no_plaintext_of(&needles);
}

/// Someone with push access winds the recorded generation back: the next mint must not
/// bind a user again whose revoked certificate may still be valid.
#[tokio::test(flavor = "multi_thread")]
async fn a_generation_wound_back_in_the_fleet_repo_never_binds_an_older_user_again() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::with(&[NodeOptions::default()], "credential:\n  mode: minted\n");
    for expected in [1, 2] {
        let (code, report, err) = fleet.rotate_json(&["--all", "--force"]);
        assert_eq!(code, 0, "{report:#}\n{err}");
        assert_eq!(report["spokes"][0]["credential"]["generation"], expected);
    }
    let objects = fleet.nodes[0].api_objects();
    assert_eq!(
        objects.lock().unwrap().binding_names(),
        ["spokekeeper.hub.spoke0.g2"]
    );

    // The attacker's commit: the generation annotation removed (read back as 0).
    let theirs = fleet.dir.path().join("theirs");
    clone(&fleet.remote, &theirs);
    let file = theirs.join("fluxcd/spoke0-kubeconfig-sealed.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let wound: String = text
        .lines()
        .filter(|l| !l.contains("spokekeeper.io/credential-generation"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(wound, text, "the annotation was there");
    std::fs::write(&file, wound).unwrap();
    git(&theirs, &["add", "-A"]);
    support::git::commit(&theirs, "tidy annotations");
    git(&theirs, &["push", "--quiet", "origin", "main"]);

    let (code, report, err) = fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["credential"]["generation"], 3, "{spoke:#}");
    let user = spoke["credential"]["user"].as_str().unwrap();
    assert!(user.starts_with("spokekeeper:hub:spoke0:3:"), "{spoke:#}");
    let names = objects.lock().unwrap().binding_names();
    assert!(
        !names.contains(&"spokekeeper.hub.spoke0.g1".to_string()),
        "generation 1 was bound again: {names:?}"
    );
    assert!(
        names.contains(&"spokekeeper.hub.spoke0.g3".to_string()),
        "{names:?}"
    );
    // The admin key and generations 1 to 3 (the attacker's commit holds generation 2's).
    let needles = fleet.key_needles();
    assert_eq!(needles.keys(), 1 + 3);
    fleet.assert_no_plaintext_of(&needles);
    let theirs_hits = needles.git_objects_containing(&theirs);
    assert!(theirs_hits.is_empty(), "{theirs_hits:?}");
}

/// Someone with push access sets spoke0's `spokekeeper.io/credential-generation` to
/// `value` (the line is there: spoke0 was minted).
fn push_generation(fleet: &Fleet, value: &str) {
    support::git::push_annotation(
        &fleet.remote,
        &fleet.dir.path().join(format!("theirs-{value}")),
        "fluxcd/spoke0-kubeconfig-sealed.yaml",
        "spokekeeper.io/credential-generation",
        value,
    );
}

/// A recorded generation at the maximum (4294967295, which reads) leaves no generation
/// above it: the mint is refused, naming the annotation and the file, and nothing is
/// requested or bound (the counter used to saturate and bind one user on every mint).
#[tokio::test(flavor = "multi_thread")]
async fn a_generation_at_the_maximum_refuses_to_mint_and_binds_nothing() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::with(&[NodeOptions::default()], "credential:\n  mode: minted\n");
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    push_generation(&fleet, "4294967295");
    let objects = fleet.nodes[0].api_objects();
    for _ in 0..2 {
        let (code, report, err) = fleet.rotate_json(&["--all", "--force"]);
        assert_ne!(code, 0, "{report:#}\n{err}");
        let spoke = &report["spokes"][0];
        assert_eq!(spoke["stage"], "mint", "{spoke:#}");
        let error = spoke["error"].as_str().unwrap();
        for needle in [
            "above 4294967295",
            "spokekeeper.io/credential-generation in fluxcd/spoke0-kubeconfig-sealed.yaml is 4294967295",
        ] {
            assert!(error.contains(needle), "{needle:?} not in {error}");
        }
        let o = objects.lock().unwrap();
        assert_eq!(o.binding_names(), ["spokekeeper.hub.spoke0.g1"]);
        assert!(o.csr_names().is_empty(), "{:?}", o.csr_names());
    }
}

/// The annotation lowered below the live generation, then `revoke` whose mint is denied:
/// the live generation's binding is deleted all the same (it used to delete only the one
/// the annotation named, "already gone", and leave the live one working).
#[tokio::test(flavor = "multi_thread")]
async fn revoke_deletes_the_live_binding_a_lowered_annotation_no_longer_names() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::with(&[NodeOptions::default()], "credential:\n  mode: minted\n");
    for _ in 0..3 {
        let (code, report, err) = fleet.rotate_json(&["--all", "--force"]);
        assert_eq!(code, 0, "{report:#}\n{err}");
    }
    let objects = fleet.nodes[0].api_objects();
    assert_eq!(
        objects.lock().unwrap().binding_names(),
        ["spokekeeper.hub.spoke0.g3"]
    );
    push_generation(&fleet, "1");
    objects.lock().unwrap().deny_approvals();
    let (code, out, err) = fleet.run(&["revoke", "spoke0"]);
    assert_ne!(code, 0, "{out}\n{err}");
    for needle in [
        "deleted ClusterRoleBinding spokekeeper.hub.spoke0.g3",
        "says 1, but the spoke bound generations [3]",
        "--as spokekeeper:hub:spoke0:3:",
        "no new credential was committed",
    ] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
    assert!(objects.lock().unwrap().binding_names().is_empty());
}

/// The emulated spoke signs for 24h at most, as a controller-manager with
/// `--cluster-signing-duration=24h`, under the default ttl (30d) and renew_before (10d):
/// each tick fails at `mint` with the reason, commits nothing, binds nothing and leaves
/// no CSR, instead of minting, committing and pushing a generation every tick.
#[tokio::test(flavor = "multi_thread")]
async fn a_24h_signer_under_the_default_renew_before_mints_nothing_each_tick() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::with(&[NodeOptions::default()], "credential:\n  mode: minted\n");
    let objects = fleet.nodes[0].api_objects();
    objects.lock().unwrap().sign_at_most(24 * 3600);
    let seed = fleet.remote_log();
    for tick in 0..2 {
        let (code, report, err) = fleet.rotate_json(&["--all"]);
        assert_ne!(code, 0, "tick {tick}: {report:#}\n{err}");
        let spoke = &report["spokes"][0];
        assert_eq!(action(&report, 0), "failed", "{spoke:#}");
        assert_eq!(spoke["stage"], "mint", "{spoke:#}");
        let error = spoke["error"].as_str().unwrap();
        for needle in [
            "for 23h5",
            "not the 30d asked (credential.ttl)",
            "--cluster-signing-duration",
            "not longer than credential.renew_before (10d)",
        ] {
            assert!(error.contains(needle), "{needle:?} not in {error}");
        }
        assert_eq!(fleet.remote_log(), seed, "tick {tick} committed");
        let objects = objects.lock().unwrap();
        assert!(
            objects.binding_names().is_empty(),
            "{:?}",
            objects.binding_names()
        );
        assert!(objects.csr_names().is_empty(), "{:?}", objects.csr_names());
    }
}

/// The emulated spoke's signer signs with another cluster's client CA (one its API server
/// does not trust): the certificate is refused at `mint`, before its binding is made,
/// naming both issuers; nothing is committed, bound or left behind.
#[tokio::test(flavor = "multi_thread")]
async fn a_certificate_from_another_ca_is_refused_before_it_is_bound() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::with(&[NodeOptions::default()], "credential:\n  mode: minted\n");
    let elsewhere = spokekeeper_lab::Pki::generate(&spokekeeper_lab::PkiOptions {
        address: "127.0.0.1".parse().unwrap(),
        address_in_sans: true,
        client_cert_days: 365,
    });
    let objects = fleet.nodes[0].api_objects();
    objects
        .lock()
        .unwrap()
        .sign_with(spokekeeper_lab::objects::Signer::client_ca(&elsewhere));
    let seed = fleet.remote_log();
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_ne!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(action(&report, 0), "failed", "{spoke:#}");
    assert_eq!(spoke["stage"], "mint", "{spoke:#}");
    let error = spoke["error"].as_str().unwrap();
    assert!(
        error.contains("not signed by the client CA that issued the admin credential"),
        "{error}"
    );
    assert_eq!(fleet.remote_log(), seed);
    let objects = objects.lock().unwrap();
    assert!(
        objects.binding_names().is_empty(),
        "{:?}",
        objects.binding_names()
    );
    assert!(objects.csr_names().is_empty(), "{:?}", objects.csr_names());
}
