//! Minting that fails on a real spoke: the committed credential stays, and a signer
//! shorter than renew_before fails at mint.

use crate::support;

use super::Stack;
use crate::realstack::our_bindings;
use support::realstack::access::Lacking;
use support::realstack::{access, list_namespaces};

/// Each way a mint fails on a real spoke stops at stage `mint` with what is missing and
/// the committed credential untouched: no signer (the request is never signed), an
/// approval turned into a denial, an admin credential that may not create bindings, one
/// that may not approve.
#[test]
fn minting_failures_leave_the_committed_credential_untouched() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::with_signing_spokes(&[false, true, true, true]);
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let before: Vec<String> = (0..4).map(|i| stack.fleet.remote_file(i)).collect();
    access::deny_csr_approvals(&stack.spoke_apis[1]);
    let limited = access::limited_admin(
        &stack.spoke_apis[2],
        &stack.fleet.nodes[2],
        Lacking::CreateBinding,
    );
    access::write_k3s_yaml(&stack.fleet.nodes[2], &limited);
    let limited = access::limited_admin(
        &stack.spoke_apis[3],
        &stack.fleet.nodes[3],
        Lacking::Approve,
    );
    access::write_k3s_yaml(&stack.fleet.nodes[3], &limited);
    stack.configure("credential:\n  mode: minted\n");

    let (code, report, err) = stack.rotate_json();
    assert_ne!(code, 0, "{report:#}\n{err}");
    let failed = |i: usize, needles: &[&str]| {
        let spoke = &report["spokes"][i];
        assert_eq!(spoke["action"], "failed", "{spoke:#}");
        assert_eq!(spoke["stage"], "mint", "{spoke:#}");
        assert_eq!(spoke["reason"]["kind"], "config-changed", "{spoke:#}");
        let error = spoke["error"].as_str().unwrap();
        for n in needles {
            assert!(error.contains(n), "{n:?} not in {error}");
        }
        assert_eq!(
            stack.fleet.remote_file(i),
            before[i],
            "spoke{i}'s commit changed"
        );
    };
    failed(
        0,
        &[
            "no certificate within 30s",
            "does not sign kubernetes.io/kube-apiserver-client",
            "/var/lib/rancher/k3s/server/tls/client-ca.nochain.crt",
            "/var/lib/rancher/rke2/agent/pod-manifests/kube-controller-manager.yaml",
            "kubeadm",
        ],
    );
    failed(
        1,
        &[
            "is Denied (LabDenied",
            "the lab denies every client certificate request",
        ],
    );
    failed(2, &["may not create clusterrolebindings", "403"]);
    failed(
        3,
        &[
            "may not update certificatesigningrequests/approval and approve on signers kubernetes.io/kube-apiserver-client",
            "403",
        ],
    );
    // The committed (extracted) credentials still work; no request is left behind.
    for i in 0..4 {
        let who = stack
            .hub
            .flux_calls_spoke("flux-system", &format!("spoke{i}-kubeconfig"))
            .unwrap();
        assert_eq!(who["username"], "system:admin", "{who}");
        let csrs = stack.spoke_apis[i].kubectl(&["get", "csr", "-o", "name"]);
        assert!(!csrs.contains("spokekeeper-"), "{csrs}");
    }
}

/// A spoke whose real kube-controller-manager signs for 24h at most
/// (`--cluster-signing-duration=24h`) while credential.ttl asks 30d: with renew_before
/// 12h the mint warns that it was cut short (and why) and succeeds, and the next tick
/// leaves it alone; with renew_before 2d (not below what is issued) each tick fails at
/// `mint` naming ttl, renew_before, what was issued and the fix, and nothing is
/// committed, bound or left behind: no mint loop.
#[test]
fn a_signer_shorter_than_renew_before_fails_at_mint_instead_of_looping() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = Stack::with_limited_signer("24h");
    stack.configure("credential:\n  mode: minted\n  ttl: 30d\n  renew_before: 12h\n");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["credential"]["generation"], 1, "{spoke:#}");
    let shortened = spoke["credential"]["shortened"]
        .as_str()
        .unwrap_or_else(|| panic!("{spoke:#}"));
    assert!(
        shortened.contains("for 23h5") && shortened.contains("not the 30d asked"),
        "{shortened}"
    );
    assert!(
        shortened.contains("kube-controller-manager --cluster-signing-duration"),
        "{shortened}"
    );
    assert!(
        err.contains("renewed sooner than credential.ttl implies"),
        "{err}"
    );
    let not_after = time::OffsetDateTime::parse(
        spoke["credential"]["not_after"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let left = not_after - time::OffsetDateTime::now_utc();
    assert!(
        left <= time::Duration::hours(24) && left > time::Duration::hours(23),
        "{spoke:#}"
    );
    let commits = stack.fleet.remote_log().len();
    let committed = stack.fleet.remote_file(0);
    assert_eq!(
        our_bindings(&stack.spoke_apis[0]),
        ["spokekeeper.hub.spoke0.g1"]
    );

    // 23h55m left is more than 12h: nothing to do.
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(report["spokes"][0]["action"], "healthy", "{report:#}");
    assert_eq!(stack.fleet.remote_log().len(), commits);

    // renew_before 2d: every certificate this signer issues is due at once.
    stack.reconfigure("  renew_before: 12h\n", "  renew_before: 2d\n");
    for tick in 0..2 {
        let (code, report, err) = stack.rotate_json();
        assert_ne!(code, 0, "tick {tick}: {report:#}\n{err}");
        let spoke = &report["spokes"][0];
        assert_eq!(spoke["action"], "failed", "tick {tick}: {spoke:#}");
        assert_eq!(spoke["stage"], "mint", "tick {tick}: {spoke:#}");
        assert_eq!(spoke["reason"]["kind"], "client-expiring", "{spoke:#}");
        let error = spoke["error"].as_str().unwrap();
        for needle in [
            "the spoke issued a certificate for 23h5",
            "not the 30d asked (credential.ttl)",
            "kube-controller-manager --cluster-signing-duration",
            "not longer than credential.renew_before (2d)",
            "every tick would mint a new generation",
            "lower credential.renew_before below what is issued, or raise the signer's --cluster-signing-duration",
        ] {
            assert!(
                error.contains(needle),
                "tick {tick}: {needle:?} not in {error}"
            );
        }
        assert_eq!(
            stack.fleet.remote_log().len(),
            commits,
            "tick {tick} committed"
        );
        assert_eq!(stack.fleet.remote_file(0), committed);
        assert_eq!(
            our_bindings(&stack.spoke_apis[0]),
            ["spokekeeper.hub.spoke0.g1"],
            "tick {tick} bound another generation"
        );
        let csrs = stack.spoke_apis[0].kubectl(&["get", "csr", "-o", "name"]);
        assert!(!csrs.contains("spokekeeper-"), "{csrs}");
    }
    // The committed generation still works.
    let gen1 = stack.committed_kubeconfig(0, "gen1.yaml");
    list_namespaces(&gen1).expect("generation 1 works");
    stack.assert_no_plaintext();
}
