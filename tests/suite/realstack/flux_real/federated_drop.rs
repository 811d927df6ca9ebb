//! `spokekeeper revoke --drop-issuer` on the real components: the hub's real
//! kube-apiserver issues the tokens, the spoke's real kube-apiserver (1.37) loads the file
//! that trusts no issuer (`jwt: []`), and Flux's real kustomize-controller fails against
//! the spoke until `rotate --force` trusts the hub again.

use super::*;

use support::realstack::bearer::Bearer;
use support::realstack::federated::hub_token;
use support::realstack::spoke::authentication_config_path;

/// What spoke 0's API server says of a token of kustomize-controller's for its audience,
/// minted by the hub now (after whatever ran before).
fn fresh_whoami(stack: &RealFlux) -> Result<String, u16> {
    let url = &stack.spoke_apis[0].url;
    let token = hub_token(&stack.hub.api, flux::NS, "kustomize-controller", url);
    let ca = stack.fleet.nodes[0].pki().parts.ca_pem.clone();
    Bearer::new(url, &ca, &token).whoami()
}

/// After `revoke --drop-issuer` the real spoke refuses a hub token minted after the drop
/// (401), nothing is committed and Flux fails against the spoke; the next `rotate` does
/// not trust the hub again (it fails naming the drop, the file unchanged), while
/// `rotate spoke0 --force` does, and the real kustomize-controller deploys again.
#[test]
fn a_dropped_issuer_stays_dropped_on_the_real_spoke_until_rotate_force() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_format(1, false, "", Format::Federated);
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let url = stack.spoke_apis[0].url.clone();
    let user = "hub:system:serviceaccount:flux-system:kustomize-controller";
    assert_eq!(fresh_whoami(&stack), Ok(user.to_string()));
    let commits = stack.fleet.remote_log().len();

    let (code, out, err) = stack.fleet.run(&["revoke", "spoke0", "--drop-issuer"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains(&format!(
            "a fresh hub token for {url} was refused (401). Nothing was committed"
        )),
        "{err}"
    );
    assert_eq!(fresh_whoami(&stack), Err(401));
    assert_eq!(stack.fleet.remote_log().len(), commits, "nothing committed");
    let path = authentication_config_path(&stack.fleet.nodes[0]);
    let dropped = std::fs::read_to_string(&path).unwrap();
    assert!(
        dropped.starts_with("# spokekeeper-issuer-dropped: "),
        "{dropped}"
    );

    // Flux fails against the spoke: what it deploys there is not put back.
    let api = &stack.spoke_apis[0];
    api.kubectl(&["delete", "configmap", "spoke-app", "-n", "default"]);
    let at = request_reconcile(&stack.hub, "kustomization", "spoke0");
    stack.wait_for(
        "kustomization",
        "spoke0",
        "Ready=False at the request",
        |r| r.last_handled == at && r.status == "False",
    );

    let (code, report, err) = stack.fleet.rotate_json(&["spoke0"]);
    assert_ne!(code, 0, "{report:#}\n{err}");
    let error = report["spokes"][0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("by `spokekeeper revoke --drop-issuer` at")
            && error.contains("run `spokekeeper rotate spoke0 --force`"),
        "{report:#}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), dropped);
    assert_eq!(fresh_whoami(&stack), Err(401));

    let (code, report, err) = stack.fleet.rotate_json(&["--force", "spoke0"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(fresh_whoami(&stack), Ok(user.to_string()));
    let at = request_reconcile(&stack.hub, "kustomization", "spoke0");
    stack.wait_for(
        "kustomization",
        "spoke0",
        "Ready=True at the request",
        |r| r.last_handled == at && r.status == "True",
    );
    stack.assert_deployed(0);
}
