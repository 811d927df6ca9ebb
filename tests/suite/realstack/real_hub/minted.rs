//! Minted credentials on real spokes: renewed, revoked, rebuilt; each entry's own bindings;
//! the generation annotation trusted only as committed.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Stack, assert_ready};
use crate::realstack::our_bindings;
use support::realstack::{access, list_namespaces};

/// Minted end to end on a real spoke with its real signer: the hub's real controller
/// unseals the minted kubeconfig and Flux's code authenticates as the minted user (not
/// system:masters); a renewal (credential.renew_before reached) mints generation 2 and,
/// once the hub verified it, deletes generation 1's binding, so that credential is
/// refused (403); `spokekeeper revoke` refuses generation 2 at once and mints 3; a
/// reinstalled spoke (new CAs) is minted again (4); the periodic check finds the binding
/// deleted by hand and mints 5. No CSR is left behind, the admin kubeconfig is never
/// committed.
#[test]
fn minted_credentials_renew_revoke_and_survive_a_rebuild() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = Stack::with_signing_spokes(&[true]);
    let gen1 = the_first_mint_is_bound_and_works(&stack);

    renewal_revokes_the_generation_before(&stack, &gen1);

    revoke_refuses_at_once_and_commits_the_next(&stack);

    let admin_key_before_rebuild = stack.fleet.nodes[0].parts().client_key_pem.clone();
    a_reinstall_is_minted_on_the_new_cluster(&mut stack);

    a_binding_deleted_by_hand_is_minted_again(&stack);
    // Every committed generation unsealed with the controller's keys: the admin keys of
    // both installs and the five minted keys, none of them in plaintext anywhere.
    let mut needles = stack.fleet.key_needles_unsealing(&stack.recovery_keys());
    needles.add_key(&admin_key_before_rebuild);
    assert_eq!(needles.keys(), 2 + 5);
    stack.fleet.assert_no_plaintext_of(&needles);
}

/// The first mint: generation 1, bound, committed, working, the admin key not in it; its
/// kubeconfig.
fn the_first_mint_is_bound_and_works(stack: &Stack) -> PathBuf {
    stack.configure("credential:\n  mode: minted\n  ttl: 1h\n  renew_before: 3590s\n");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert!(
        spoke["user"]
            .as_str()
            .unwrap()
            .starts_with("spokekeeper:hub:spoke0:1:"),
        "{spoke:#}"
    );
    assert_eq!(spoke["credential"]["mode"], "minted", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 1, "{spoke:#}");
    let not_after = time::OffsetDateTime::parse(
        spoke["credential"]["not_after"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert!(
        not_after <= time::OffsetDateTime::now_utc() + time::Duration::hours(1),
        "{spoke:#}"
    );
    assert_ready(spoke, &["Kustomization/flux-system/spoke0"]);
    stack.wait_unsealed(0, Duration::from_secs(60));
    let who = flux_calls_spoke0_as(stack, 1);
    assert!(!who.to_string().contains("system:masters"), "{who}");
    let unsealed = String::from_utf8(stack.recovery_unsealed(0)).unwrap();
    let admin = String::from_utf8(stack.fleet.nodes[0].kubeconfig_bytes()).unwrap();
    let admin_cert = admin
        .lines()
        .find(|l| l.contains("client-certificate-data"))
        .unwrap();
    assert!(!unsealed.contains(admin_cert.split_whitespace().last().unwrap()));
    let subject = stack.fleet.remote_log();
    assert!(
        subject[0].contains("minted spokekeeper:hub:spoke0:1:"),
        "{subject:?}"
    );
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g1"]
    );
    let csrs = stack.spoke_apis[0].kubectl(&["get", "csr", "-o", "name"]);
    assert!(!csrs.contains("spokekeeper-"), "{csrs}");
    let gen1 = stack.committed_kubeconfig(0, "gen1.yaml");
    list_namespaces(&gen1).expect("generation 1 works");
    gen1
}

/// renew_before (3590s of a 1h certificate) is reached 10s after the mint.
fn renewal_revokes_the_generation_before(stack: &Stack, gen1: &Path) {
    std::thread::sleep(Duration::from_secs(11));
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["reason"]["kind"], "client-expiring", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 2, "{spoke:#}");
    assert_eq!(
        spoke["revoked"],
        serde_json::json!(["spokekeeper.hub.spoke0.g1"]),
        "{spoke:#}"
    );
    assert_ready(spoke, &["Kustomization/flux-system/spoke0"]);
    stack.wait_unsealed(0, Duration::from_secs(60));
    let refused = list_namespaces(gen1).expect_err("generation 1 is revoked");
    assert!(
        refused.contains("Forbidden") || refused.contains("forbidden"),
        "{refused}"
    );
    flux_calls_spoke0_as(stack, 2);
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g2"]
    );
}

/// revoke: generation 2 is refused at once, generation 3 is committed and works.
fn revoke_refuses_at_once_and_commits_the_next(stack: &Stack) {
    let gen2 = stack.committed_kubeconfig(0, "gen2.yaml");
    list_namespaces(&gen2).expect("generation 2 works");
    let (code, out, err) = stack.fleet.run(&["revoke", "spoke0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("deleted ClusterRoleBinding spokekeeper.hub.spoke0.g2"),
        "{err}"
    );
    assert!(
        err.contains("minted generation 3 for spokekeeper:hub:spoke0:3:"),
        "{err}"
    );
    assert!(
        err.contains("kubectl auth can-i '*' '*' --as spokekeeper:hub:spoke0:2:"),
        "{err}"
    );
    let refused = list_namespaces(&gen2).expect_err("generation 2 is revoked");
    assert!(refused.to_lowercase().contains("forbidden"), "{refused}");
    stack.wait_unsealed(0, Duration::from_secs(60));
    let gen3 = stack.committed_kubeconfig(0, "gen3.yaml");
    list_namespaces(&gen3).expect("generation 3 works");
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g3"]
    );
}

/// A reinstall: new CAs; the probe sees it and generation 4 is minted on the new cluster.
fn a_reinstall_is_minted_on_the_new_cluster(stack: &mut Stack) {
    stack.rebuild(0, 1);
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["reason"]["kind"], "ca-changed", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 4, "{spoke:#}");
    stack.wait_unsealed(0, Duration::from_secs(60));
    flux_calls_spoke0_as(stack, 4);
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g4"]
    );
}

/// The periodic check (verify_every) looks at the binding with the admin credential:
/// present, nothing to do; deleted by hand, generation 5 is minted.
fn a_binding_deleted_by_hand_is_minted_again(stack: &Stack) {
    stack.configure("verify_every: 1s\n");
    std::thread::sleep(Duration::from_secs(2));
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(report["spokes"][0]["action"], "unchanged", "{report:#}");
    stack.spoke_apis[0].kubectl(&["delete", "clusterrolebinding", "spokekeeper.hub.spoke0.g4"]);
    std::thread::sleep(Duration::from_secs(2));
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["reason"]["kind"], "binding-missing", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 5, "{spoke:#}");
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g5"]
    );
}

/// Two entries for one real spoke (issue 28, defect 8e): the real API server answers the
/// scoped label selectors, each entry gets its own binding, renewing spoke0 revokes only
/// spoke0's older generation (spoke1's credential keeps working on the real spoke), and
/// `revoke spoke1` leaves spoke0's alone.
/// What Flux calls spoke 0 as, with the committed credential: generation `generation`'s
/// minted user.
fn flux_calls_spoke0_as(stack: &Stack, generation: u32) -> serde_json::Value {
    let who = stack
        .hub
        .flux_calls_spoke("flux-system", "spoke0-kubeconfig")
        .unwrap();
    let user = format!("spokekeeper:hub:spoke0:{generation}:");
    assert!(
        who["username"].as_str().unwrap().starts_with(&user),
        "{who}"
    );
    who
}

#[test]
fn two_entries_on_one_real_spoke_keep_their_own_bindings() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::with_signing_spokes(&[true]);
    let mut text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    let start = text.find("  - name: spoke0\n").unwrap();
    let end = start + text[start..].find("\nhub:\n").unwrap() + 1;
    let second = text[start..end].replace("name: spoke0", "name: spoke1");
    text.insert_str(end, &second);
    std::fs::write(&stack.fleet.config, text).unwrap();
    stack.add_kustomizations(2);
    stack.configure("credential:\n  mode: minted\n");
    let api = &stack.spoke_apis[0];
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let (first0, first1) = (
        stack.committed_kubeconfig(0, "first0.yaml"),
        stack.committed_kubeconfig(1, "first1.yaml"),
    );
    list_namespaces(&first0).expect("spoke0's generation 1 works");
    list_namespaces(&first1).expect("spoke1's generation 1 works");
    assert_eq!(
        our_bindings(api),
        ["spokekeeper.hub.spoke0.g1", "spokekeeper.hub.spoke1.g1"]
    );

    // spoke0 alone renewed.
    let (code, report, err) = stack.fleet.rotate_json(&["spoke0", "--force"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(
        report["spokes"][0]["revoked"],
        serde_json::json!(["spokekeeper.hub.spoke0.g1"]),
        "{report:#}"
    );
    assert_eq!(
        our_bindings(api),
        ["spokekeeper.hub.spoke0.g2", "spokekeeper.hub.spoke1.g1"]
    );
    let refused = list_namespaces(&first0).expect_err("spoke0's generation 1 is revoked");
    assert!(refused.to_lowercase().contains("forbidden"), "{refused}");
    list_namespaces(&first1).expect("spoke1's generation 1 still works");

    let (code, out, err) = stack.fleet.run(&["revoke", "spoke1"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        our_bindings(api),
        ["spokekeeper.hub.spoke0.g2", "spokekeeper.hub.spoke1.g2"]
    );
    let refused = list_namespaces(&first1).expect_err("spoke1's generation 1 is revoked");
    assert!(refused.to_lowercase().contains("forbidden"), "{refused}");
    list_namespaces(&stack.committed_kubeconfig(0, "second0.yaml"))
        .expect("spoke0's generation 2 still works");
    list_namespaces(&stack.committed_kubeconfig(1, "second1.yaml"))
        .expect("spoke1's generation 2 works");
}

/// Pushes, as someone with push access to the fleet repo, spoke i's committed file with
/// its `spokekeeper.io/credential-generation` annotation set to `value`.
fn push_generation(stack: &Stack, i: usize, value: &str) {
    support::git::push_annotation(
        &stack.fleet.remote,
        &stack.hub.dir().join(format!("theirs-{value}")),
        &format!("fluxcd/spoke{i}-kubeconfig-sealed.yaml"),
        "spokekeeper.io/credential-generation",
        value,
    );
}

/// The generation counter against someone with push access to the fleet repo, on a real
/// spoke with its real signer. Frozen (`18446744073709551614`, which saturated to the same
/// user on every mint): a rotation is refused at `mint`, naming the annotation, its value,
/// the file and the fix, and nothing new is bound nor requested; `revoke` still deletes
/// the live binding (its credential gets 403) and binds nothing. Lowered below the live
/// generation: `revoke` deletes the live generation's binding, which the annotation no
/// longer names, says the two disagree, and that credential gets 403, even though the
/// mint after it fails (approvals denied).
#[test]
fn a_frozen_or_lowered_generation_annotation_neither_rebinds_nor_hides_the_live_binding() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::with_signing_spokes(&[true]);
    stack.configure("credential:\n  mode: minted\n  ttl: 1h\n");
    for generation in [1, 2] {
        let (code, report, err) = stack.fleet.rotate_json(&["--all", "--force"]);
        assert_eq!(code, 0, "{report:#}\n{err}");
        let spoke = &report["spokes"][0];
        assert_eq!(spoke["credential"]["generation"], generation, "{spoke:#}");
    }
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g2"]
    );
    let gen2 = stack.committed_kubeconfig(0, "gen2.yaml");
    list_namespaces(&gen2).expect("generation 2 works");
    let api = &stack.spoke_apis[0];
    let csrs = || api.kubectl(&["get", "csr", "-o", "name"]);

    // Frozen: refused, loudly; nothing bound, nothing requested, the commit untouched.
    push_generation(&stack, 0, "18446744073709551614");
    let frozen = stack.fleet.remote_file(0);
    let (code, report, err) = stack.fleet.rotate_json(&["--all", "--force"]);
    assert_ne!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "failed", "{spoke:#}");
    assert_eq!(spoke["stage"], "mint", "{spoke:#}");
    let error = spoke["error"].as_str().unwrap();
    for needle in [
        "refusing to mint for spoke0",
        "fluxcd/spoke0-kubeconfig-sealed.yaml",
        "annotation spokekeeper.io/credential-generation",
        // Shown by its length: a malformed annotation is fleet-repo text, never quoted.
        "20 bytes",
        "git log -p",
    ] {
        assert!(error.contains(needle), "{needle:?} not in {error}");
    }
    assert!(err.contains("refusing to mint"), "no warning logged: {err}");
    assert_eq!(our_bindings(api), ["spokekeeper.hub.spoke0.g2"]);
    assert!(!csrs().contains("spokekeeper-"), "{}", csrs());
    assert_eq!(stack.fleet.remote_file(0), frozen);
    // revoke still revokes: the live binding goes, and no user is bound again.
    let (code, out, err) = stack.fleet.run(&["revoke", "spoke0"]);
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("deleted ClusterRoleBinding spokekeeper.hub.spoke0.g2"),
        "{err}"
    );
    assert_eq!(our_bindings(api), Vec::<String>::new());
    let refused = list_namespaces(&gen2).expect_err("generation 2 is revoked");
    assert!(refused.to_lowercase().contains("forbidden"), "{refused}");
    assert_eq!(stack.fleet.remote_file(0), frozen);

    // Restored: the next generation is above it (3), and works.
    push_generation(&stack, 0, "2");
    let (code, report, err) = stack.fleet.rotate_json(&["--all", "--force"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(
        report["spokes"][0]["credential"]["generation"], 3,
        "{report:#}"
    );
    assert_eq!(our_bindings(api), ["spokekeeper.hub.spoke0.g3"]);
    let gen3 = stack.committed_kubeconfig(0, "gen3.yaml");
    list_namespaces(&gen3).expect("generation 3 works");

    // Lowered to 1: revoke deletes generation 3's binding all the same, and says why.
    push_generation(&stack, 0, "1");
    access::deny_csr_approvals(api);
    let (code, out, err) = stack.fleet.run(&["revoke", "spoke0"]);
    assert_ne!(code, 0, "the mint is denied: {out}\n{err}");
    assert!(
        err.contains("deleted ClusterRoleBinding spokekeeper.hub.spoke0.g3"),
        "{err}"
    );
    assert!(
        err.contains(
            "spokekeeper.io/credential-generation says 1, but the spoke bound generations [3]"
        ),
        "{err}"
    );
    assert!(
        err.contains("kubectl auth can-i '*' '*' --as spokekeeper:hub:spoke0:3:"),
        "{err}"
    );
    assert_eq!(our_bindings(api), Vec::<String>::new());
    let refused = list_namespaces(&gen3).expect_err("generation 3 is revoked");
    assert!(refused.to_lowercase().contains("forbidden"), "{refused}");
    assert!(!csrs().contains("spokekeeper-"), "{}", csrs());
    stack.assert_no_plaintext();
}
