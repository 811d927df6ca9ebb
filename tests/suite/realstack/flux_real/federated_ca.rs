//! Issue 42: a federated spoke's CA rotation (k3s `certificate rotate-ca`) on the real
//! components. The committed ConfigMap trusts the old and the new CA while the node does,
//! then the new one alone, and Flux's real controllers reach the spoke at every step.

use super::*;

use support::realstack::distro::pem_certs;

/// The CAs (DER) the committed ConfigMap of spoke 0 trusts, in order.
fn committed_cas(stack: &RealFlux) -> Vec<Vec<u8>> {
    let text = git(
        &stack.fleet.remote,
        &["show", "main:fluxcd/spoke0-kubeconfig.yaml"],
    );
    let file: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let pem = file["data"]["ca.crt"].as_str().unwrap_or_default();
    pem_certs(pem.as_bytes())
}

/// The CAs (DER) spoke 0's node kubeconfig trusts now.
fn node_cas(stack: &RealFlux) -> Vec<Vec<u8>> {
    pem_certs(stack.fleet.nodes[0].pki().parts.ca_pem.as_bytes())
}

/// Each consumer of spoke 0, asked to reconcile now, is Ready=True having handled it.
fn reconciled(stack: &RealFlux, what: &str) {
    for kind in ["kustomization", "helmrelease"] {
        let at = request_reconcile(&stack.hub, kind, "spoke0");
        stack.wait_for(kind, "spoke0", what, |r| {
            r.last_handled == at && r.status == "True"
        });
    }
}

/// One tick that commits spoke 0 for `reason`, its consumers Ready after it.
fn committed_for(stack: &RealFlux, reason: &str) {
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["reason"]["kind"], reason, "{spoke:#}");
    stack.assert_consumers_ready(&report, 0);
}

/// The rotation as k3s runs it: the node trusts both CAs while the server presents the
/// new root beside the old chain (as a cross-signed chain does), then serves from the
/// new CA, then the old one is dropped. spokekeeper commits both CAs at the first step,
/// nothing at the switch (Flux, with both, reaches the spoke through it) and the new one
/// alone once the node dropped the old.
#[test]
fn a_federated_spokes_ca_rotation_commits_both_cas_then_the_new_one_with_flux_ready_throughout() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    // The old CA's removal shows only to a re-read of the node: every tick is one here.
    let mut stack = RealFlux::start_format(1, false, "verify_every: 1s\n", Format::Federated);
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    stack.assert_consumers_ready(&report, 0);
    let old = node_cas(&stack);
    assert_eq!((old.len(), committed_cas(&stack)), (1, old.clone()));

    stack.fleet.nodes[0].rotate_server_ca(false);
    let both = node_cas(&stack);
    assert_eq!((both.len(), &both[0]), (2, &old[0]));
    stack.fleet.nodes[0].serve_also(&both[1..]);
    stack.restart_spoke(0, 0);
    committed_for(&stack, "ca-changed");
    assert_eq!(committed_cas(&stack), both);

    // The server switches to the new CA: the commit already trusts it.
    stack.fleet.nodes[0].rotate_server_ca(true);
    stack.restart_spoke(0, 0);
    reconciled(&stack, "Ready=True on the new CA's certificate");
    let commits = stack.fleet.remote_log().len();
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_ne!(report["spokes"][0]["action"], "rotated", "{report:#}");
    assert_eq!(stack.fleet.remote_log().len(), commits, "{report:#}");

    // The old CA dropped from the node: the new one alone is committed.
    stack.fleet.nodes[0].finish_server_ca_rotation();
    stack.restart_spoke(0, 0);
    committed_for(&stack, "content-changed");
    assert_eq!(committed_cas(&stack), [both[1].clone()]);
    reconciled(&stack, "Ready=True with the new CA alone");
}
