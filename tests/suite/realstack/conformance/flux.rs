//! The played Flux (tests/support/src/realstack/flux.rs, LabFlux) against Flux's real
//! controllers: the Ready it writes in each situation, and the fields spokekeeper reads.

use crate::support;

use super::assert_same;
use serde_json::{Value, json};
use support::realstack::hub::RealHub;

/// What spokekeeper reads of one consumer after a run: Ready's status and reason, whether
/// the run echoed the request, whether observedGeneration is the object's generation, and
/// the Stalled condition's status and reason (None when there is none).
fn shape(
    hub: &RealHub,
    kind: &str,
    r: &support::realstack::flux_controllers::Ready,
    requested: &str,
) -> Value {
    let stalled = support::realstack::flux_controllers::condition(hub, kind, "spoke0", "Stalled");
    json!({
        "status": r.status,
        "reason": r.reason,
        "handled": r.last_handled == requested,
        "observed": r.observed_generation == r.generation,
        "stalled": stalled.map(|s| [s.status, s.reason]),
    })
}

/// The same as the played Flux writes it for `plural` (a run answers the request it
/// handles; observedGeneration advances only with Ready True, else stays as it was; no
/// Stalled condition, ever).
fn played_shape(plural: &str, ok: bool, observed_before: bool) -> Value {
    let (status, reason) = support::realstack::flux::played_ready(plural, ok);
    json!({
        "status": status,
        "reason": reason,
        "handled": true,
        "observed": ok || observed_before,
        "stalled": null,
    })
}

/// Each shape LabFlux writes is one the real kustomize- and helm-controller wrote in the
/// same situation: Ready True after a handled request (the first rotation), Ready False
/// calling a rebuilt spoke (the x509 failure), and a suspended object's answer to a
/// request (echoed, status kept); in each, the Ready condition's status and reason,
/// lastHandledReconcileAt, observedGeneration, and no Stalled condition (which
/// spokekeeper reads). These are all the situations it plays: a build failure,
/// DependencyNotReady and its retry are tested on the real controllers only
/// (realstack::flux_real::flux_ready_semantics_on_the_real_controllers). Messages and
/// timestamps are not compared.
#[test]
fn the_played_flux_writes_what_the_real_controllers_write() {
    crate::support::requires!(ROOT, REAL_STACK);
    use support::realstack::flux_controllers::{NS, request_reconcile};
    use support::realstack::real_flux::RealFlux;

    let _heavy = support::timing::heavy();
    let mut stack = RealFlux::start(1, false, "");
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let requested = stack.assert_consumers_ready(&report, 0);
    let mut real = Vec::new();
    let mut played = Vec::new();
    for (kind, plural) in [
        ("kustomization", "kustomizations"),
        ("helmrelease", "helmreleases"),
    ] {
        let r = stack.wait_ready(kind, "spoke0", Some(&requested));
        real.push((
            format!("{kind} succeeded"),
            shape(&stack.hub, kind, &r, &requested),
        ));
        played.push((
            format!("{kind} succeeded"),
            played_shape(plural, true, true),
        ));
    }

    stack.rebuild(0, 1);
    for (kind, plural) in [
        ("kustomization", "kustomizations"),
        ("helmrelease", "helmreleases"),
    ] {
        let at = request_reconcile(&stack.hub, kind, "spoke0");
        let r = stack.wait_for(kind, "spoke0", "the x509 failure", |r| {
            r.last_handled == at && r.status == "False"
        });
        assert!(r.message.contains("x509"), "{r:?}");
        real.push((format!("{kind} x509"), shape(&stack.hub, kind, &r, &at)));
        played.push((format!("{kind} x509"), played_shape(plural, false, true)));
    }

    // Suspended: the request is echoed and the x509 failure kept.
    for kind in ["kustomization", "helmrelease"] {
        stack.hub.api.kubectl(&[
            "patch",
            kind,
            "spoke0",
            "-n",
            NS,
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ]);
        let before = stack.wait_for(kind, "spoke0", "still failing", |r| r.status == "False");
        let at = request_reconcile(&stack.hub, kind, "spoke0");
        let r = stack.wait_for(kind, "spoke0", "the request echoed", |r| {
            r.last_handled == at
        });
        // The played Flux echoes and keeps the Ready it had. (observedGeneration is not
        // compared: suspending bumped the generation here, and spokekeeper reports a
        // suspended consumer before reading it.)
        let mut seen = shape(&stack.hub, kind, &r, &at);
        let mut kept = shape(&stack.hub, kind, &before, &at);
        kept["handled"] = json!(true);
        for s in [&mut seen, &mut kept] {
            s.as_object_mut().expect("object").remove("observed");
        }
        real.push((format!("{kind} suspended"), seen));
        played.push((format!("{kind} suspended"), kept));
    }
    assert_same(&played, &real);
}
