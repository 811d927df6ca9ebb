//! `spokekeeper revoke` of a federated spoke on the real components: the hub's real
//! kube-apiserver issues the tokens, the spoke's real kube-apiserver (1.37, reading the
//! AuthenticationConfiguration spokekeeper writes) judges them, and Flux's real
//! kustomize-controller, never restarted, deploys through the ConfigMap committed after.

use super::*;

use support::realstack::bearer::Bearer;
use support::realstack::federated::hub_token;
use support::realstack::real_flux::Format;
use support::realstack::spoke::authentication_config_path;

const BINDING: &str = "spokekeeper.hub.spoke0.federated";

fn hub_user(account: &str) -> String {
    format!("hub:system:serviceaccount:flux-system:{account}")
}

/// What spoke 0's API server says of a token of kustomize-controller's, presented as
/// Flux presents it.
fn whoami(stack: &RealFlux, token: &str) -> Result<String, u16> {
    let ca = stack.fleet.nodes[0].pki().parts.ca_pem.clone();
    Bearer::new(&stack.spoke_apis[0].url, &ca, token).whoami()
}

/// A leaked token of kustomize-controller's (issued before the revoke, for the audience
/// the spoke trusted) is refused by the spoke's API server once `spokekeeper revoke` ran,
/// a fresh one for the new audience works, the committed ConfigMap names the new
/// audience and its generation (a later tick finds nothing to do; a revoke interrupted
/// after its cut is finished by the next rotation, never undone), and the real
/// kustomize-controller, never restarted, deploys through it again. Nothing secret is in
/// the fleet repo, the tokens included.
#[test]
fn a_federated_revoke_refuses_a_leaked_hub_token_and_flux_deploys_through_the_new_audience() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_format(1, false, "", Format::Federated);
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    stack.assert_consumers_ready(&report, 0);
    let url = stack.spoke_apis[0].url.clone();
    let leaked = hub_token(&stack.hub.api, flux::NS, "kustomize-controller", &url);
    assert_eq!(
        whoami(&stack, &leaked),
        Ok(hub_user("kustomize-controller"))
    );

    let (code, out, err) = stack.fleet.run(&["revoke", "spoke0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let new = format!("{url}#generation-1");
    for needle in [
        format!("spoke0: ClusterRoleBinding {BINDING} bound nobody at once"),
        format!(
            "the spoke trusts hub tokens for audience {new} only; a token for {url} is refused (401)"
        ),
        format!("--audience '{url}')\" {url}/version (401 Unauthorized"),
    ] {
        assert!(err.contains(&needle), "{needle:?} not in:\n{err}");
    }
    let refused = whoami(&stack, &leaked).expect_err("the leaked token is refused");
    assert!(refused == 401 || refused == 403, "{refused}");
    let fresh = hub_token(&stack.hub.api, flux::NS, "kustomize-controller", &new);
    assert_eq!(whoami(&stack, &fresh), Ok(hub_user("kustomize-controller")));
    let file = std::fs::read_to_string(authentication_config_path(&stack.fleet.nodes[0])).unwrap();
    assert!(file.contains(&format!("- \"{new}\"")), "{file}");
    assert!(!file.contains(&format!("- \"{url}\"")), "{file}");
    let binding = stack.spoke_apis[0].get_json(&["clusterrolebinding", BINDING]);
    assert_eq!(
        binding["metadata"]["labels"]["spokekeeper.io/audience-generation"], "1",
        "{binding:#}"
    );
    assert_committed_audience(&stack, &new, 1);
    let subject = git(&stack.fleet.remote, &["log", "-1", "--format=%B", "main"]);
    assert!(
        subject.starts_with("spoke0: trust the hub (federated): generation 0 revoked"),
        "{subject}"
    );
    assert!(
        subject.contains(&format!("audience {new} only")),
        "{subject}"
    );

    // A later tick renders the recorded generation: nothing to commit.
    let commits = stack.fleet.remote_log().len();
    let (code, again, err) = stack.rotate_json();
    assert_eq!(code, 0, "{again:#}\n{err}");
    assert_eq!(again["spokes"][0]["action"], "healthy", "{again:#}");
    assert_eq!(stack.fleet.remote_log().len(), commits);

    // A revoke interrupted after its cut (the binding at generation 2 binding nobody,
    // nothing committed) is finished by the next rotation, never undone.
    let api = &stack.spoke_apis[0];
    let empty = r#"[{"op": "remove", "path": "/subjects"}]"#;
    api.kubectl(&[
        "patch",
        "clusterrolebinding",
        BINDING,
        "--type=json",
        "-p",
        empty,
    ]);
    let label = "spokekeeper.io/audience-generation=2";
    api.kubectl(&["label", "--overwrite", "clusterrolebinding", BINDING, label]);
    let (code, report, err) = stack.fleet.rotate_json(&["--force", "spoke0"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    let third = format!("{url}#generation-2");
    assert_eq!(
        report["spokes"][0]["credential"]["audience"],
        third.as_str(),
        "{report:#}"
    );
    assert_committed_audience(&stack, &third, 2);
    let refused = whoami(&stack, &fresh).expect_err("generation 1 is no longer trusted");
    assert!(refused == 401 || refused == 403, "{refused}");

    // kustomize-controller asks the hub for a token of the new audience (a new cache key)
    // and puts back what was removed from the spoke.
    stack.spoke_apis[0].kubectl(&["delete", "configmap", "spoke-app", "-n", "default"]);
    let at = request_reconcile(&stack.hub, "kustomization", "spoke0");
    stack.wait_for(
        "kustomization",
        "spoke0",
        "Ready=True at the request",
        |r| r.last_handled == at && r.status == "True",
    );
    stack.assert_deployed(0);

    let mut needles = Needles::new();
    needles.add_key(&stack.fleet.nodes[0].parts().client_key_pem);
    assert_eq!(
        needles.add_kubeconfig(&stack.fleet.nodes[0].kubeconfig_bytes()),
        1
    );
    stack.fleet.assert_no_plaintext_of(&needles);
    let log = git(&stack.fleet.remote, &["log", "-p", "--all"]);
    for token in [&leaked, &fresh] {
        assert!(
            !log.contains(token.as_str()),
            "a hub token is in the fleet repo"
        );
    }
}

/// The committed ConfigMap asks Flux for tokens of `audience`, and records `generation`.
fn assert_committed_audience(stack: &RealFlux, audience: &str, generation: u64) {
    let text = git(
        &stack.fleet.remote,
        &["show", "main:fluxcd/spoke0-kubeconfig.yaml"],
    );
    let file: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(file["data"]["audiences"], audience, "{text}");
    assert_eq!(
        file["data"]["address"],
        stack.spoke_apis[0].url.as_str(),
        "{text}"
    );
    let annotations = &file["metadata"]["annotations"];
    let recorded = generation.to_string();
    assert_eq!(
        annotations["spokekeeper.io/credential-generation"],
        recorded.as_str(),
        "{text}"
    );
}

/// Someone with push access tries to keep a leaked hub token working by making `revoke`
/// stop before its cut. The spoke's binding decides, not the fleet repo: with the
/// ConfigMap deleted the revoke still moves the spoke to the next generation (it used to
/// say there was no federated trust to revoke), and at the last generation (a label a
/// rotation carried on from) it still binds nobody before it fails naming the counter
/// (it used to fail first and leave the token working).
#[test]
fn a_federated_revoke_cuts_the_hub_off_whatever_the_fleet_repo_holds() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let stack = RealFlux::start_format(1, false, "", Format::Federated);
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let url = stack.spoke_apis[0].url.clone();
    let theirs = stack.fleet.dir.path().join("theirs");
    support::git::clone(&stack.fleet.remote, &theirs);
    git(&theirs, &["rm", "--quiet", "fluxcd/spoke0-kubeconfig.yaml"]);
    support::git::commit(&theirs, "tidy");
    git(&theirs, &["push", "--quiet", "origin", "main"]);
    let (code, out, err) = stack.fleet.run(&["revoke", "spoke0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains(&format!(
            "spoke0: ClusterRoleBinding {BINDING} bound nobody at once"
        )),
        "{err}"
    );
    assert_committed_audience(&stack, &format!("{url}#generation-1"), 1);

    let api = &stack.spoke_apis[0];
    let last = "spokekeeper.io/audience-generation=4294967295";
    api.kubectl(&["label", "--overwrite", "clusterrolebinding", BINDING, last]);
    let (code, report, err) = stack.fleet.rotate_json(&["--force", "spoke0"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    let token = hub_token(
        &stack.hub.api,
        flux::NS,
        "kustomize-controller",
        &format!("{url}#generation-4294967295"),
    );
    assert_eq!(whoami(&stack, &token), Ok(hub_user("kustomize-controller")));
    let (code, out, err) = stack.fleet.run(&["revoke", "spoke0"]);
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("is already 4294967295, the highest there is"),
        "{err}"
    );
    let binding = api.get_json(&["clusterrolebinding", BINDING]);
    assert!(
        binding["subjects"].as_array().is_none_or(|s| s.is_empty()),
        "{binding:#}"
    );
    // Still authenticated (the audience is trusted), authorized for nothing.
    let ca = stack.fleet.nodes[0].pki().parts.ca_pem.clone();
    let bearer = Bearer::new(&url, &ca, &token);
    wait_until("the hub cut off", Duration::from_secs(5), || {
        match bearer.may("create", "configmaps", "default") {
            Ok(false) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}
