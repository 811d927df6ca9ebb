//! Issue 42: the hub's ServiceAccount issuer changes without a gap, on the real
//! components. With `credential.federated.next` set, one tick rewrites the spoke's file
//! to trust both issuers; the real hub kube-apiserver is restarted signing as the next
//! one (first in its `--service-account-issuer` list, the old one still accepted); Flux's
//! real controllers keep deploying; then the next issuer is promoted and the old one
//! dropped from the spoke's file.
//!
//! The next issuer's discovery document is a static copy (issuer: the next URL, keys:
//! the hub's JWKS) on a port of the hub's address, served with the hub's certificate:
//! before the hub signs as it, the hub's own document names the old issuer, and a spoke
//! loads a file only once every issuer in it answered its discovery.

use super::*;

use support::realstack::bearer::Bearer;
use support::realstack::federated::{StaticIssuer, hub_token, token_issuer};
use support::realstack::real_flux::CHECK_ACCOUNT;
use support::realstack::spoke::authentication_config_path;

/// How long the controllers keep a token (`--token-cache-max-duration`): a switch of the
/// hub's issuer reaches their requests this long after it.
const TOKEN_CACHE: Duration = Duration::from_secs(20);

/// The issuers spoke 0's file trusts, in order.
fn trusted_issuers(stack: &RealFlux) -> Vec<String> {
    let path = authentication_config_path(&stack.fleet.nodes[0]);
    let text = std::fs::read_to_string(&path).expect("the file spokekeeper wrote");
    let file: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let jwt = file["jwt"].as_array().unwrap_or_else(|| panic!("{text}"));
    for entry in jwt {
        // One audience, rule and prefix for both: the user names do not change.
        assert_eq!(entry["claimMappings"], jwt[0]["claimMappings"], "{text}");
        assert_eq!(
            entry["claimValidationRules"], jwt[0]["claimValidationRules"],
            "{text}"
        );
        assert_eq!(
            entry["issuer"]["audiences"], jwt[0]["issuer"]["audiences"],
            "{text}"
        );
    }
    jwt.iter()
        .map(|e| e["issuer"]["url"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// spokekeeper.yaml's `credential.federated` edited with `edit`.
fn edit_config(stack: &RealFlux, edit: impl FnOnce(String) -> String) {
    let path = &stack.fleet.config;
    let text = std::fs::read_to_string(path).expect("spokekeeper.yaml");
    let edited = edit(text.clone());
    assert_ne!(edited, text, "the edit changed nothing");
    std::fs::write(path, edited).expect("write spokekeeper.yaml");
}

/// One tick that rewrites spoke 0's file for a changed `credential.federated`, the
/// consumers Ready after it.
fn rewritten(stack: &RealFlux) {
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["reason"]["kind"], "config-changed", "{spoke:#}");
    assert_eq!(
        spoke["reason"]["detail"], "credential.federated",
        "{spoke:#}"
    );
    stack.assert_consumers_ready(&report, 0);
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

/// `check -o json`: its findings of `cert` for spoke 0, and its stderr.
fn checked(stack: &RealFlux, cert: &str) -> (Value, String) {
    let (_, out, err) = stack.fleet.run(&["check", "-o", "json"]);
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let found = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["spoke"] == "spoke0" && f["cert"] == cert)
        .cloned()
        .unwrap_or_else(|| panic!("no {cert} finding: {report:#}\n{err}"));
    (found, err)
}

#[test]
fn the_hubs_issuer_changes_with_every_spoke_trusting_both_first_and_flux_deploying_throughout() {
    crate::support::requires!(ROOT, REAL_STACK, PYTHON);
    let _heavy = support::timing::heavy();
    let cache = format!("--token-cache-max-duration={}s", TOKEN_CACHE.as_secs());
    let mut stack = RealFlux::start_federated_with(1, "", &[&cache]);
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    stack.assert_consumers_ready(&report, 0);
    let old = stack.hub.issuer.clone().expect("the hub's issuer");
    let next = StaticIssuer::serve(&stack.hub);
    assert_eq!(trusted_issuers(&stack), std::slice::from_ref(&old));
    let (spoke_url, spoke_ca) = (
        stack.spoke_apis[0].url.clone(),
        stack.fleet.nodes[0].pki().parts.ca_pem.clone(),
    );
    // A token of the old issuer, kept for the end.
    let old_token = hub_token(&stack.hub.api, "flux-system", CHECK_ACCOUNT, &spoke_url);
    assert_eq!(token_issuer(&old_token), old);

    // 1. The next issuer named: one tick rewrites the file to trust both.
    edit_config(&stack, |t| {
        t.replacen(
            "    check_as:",
            &format!("    next: {{issuer: \"{}\"}}\n    check_as:", next.url),
            1,
        )
    });
    let (finding, err) = checked(&stack, "next-issuer");
    assert_eq!(
        finding["alertname"], "SpokekeeperNextIssuerNotTrusted",
        "{finding:#}"
    );
    assert!(
        err.contains("0 of 1 federated spokes run a file trusting the next issuer"),
        "{err}"
    );
    rewritten(&stack);
    assert_eq!(trusted_issuers(&stack), [old.clone(), next.url.clone()]);
    let (finding, err) = checked(&stack, "next-issuer");
    assert_eq!(finding["severity"], "ok", "{finding:#}");
    assert!(
        err.contains(&format!(
            "1 of 1 federated spokes run a file trusting the next issuer {}: the hub may sign as it",
            next.url
        )),
        "{err}"
    );

    // 2. The hub signs as the next issuer; the old one is still accepted by the hub.
    stack.hub.restart_with_issuers(&[&next.url, &old]);
    let fresh = hub_token(&stack.hub.api, "flux-system", CHECK_ACCOUNT, &spoke_url);
    assert_eq!(token_issuer(&fresh), next.url);
    assert_eq!(
        Bearer::new(&spoke_url, &spoke_ca, &fresh).whoami(),
        Ok(format!(
            "hub:system:serviceaccount:flux-system:{CHECK_ACCOUNT}"
        ))
    );
    reconciled(&stack, "Ready=True, the hub signing as the next issuer");
    // The tick's own check takes a token of the next issuer: nothing to repair.
    let commits = stack.fleet.remote_log().len();
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(report["spokes"][0]["action"], "healthy", "{report:#}");
    assert_eq!(stack.fleet.remote_log().len(), commits);
    // The old issuer's document (the hub's own) names the next one now: said before it
    // matters (a spoke restarted on a file trusting the old one alone would refuse).
    let (finding, _) = checked(&stack, "issuer");
    assert_eq!(
        finding["alertname"], "SpokekeeperIssuerUnreachable",
        "{finding:#}"
    );
    // The controllers' cached tokens of the old issuer expire; their next are the new one's.
    std::thread::sleep(TOKEN_CACHE + Duration::from_secs(5));
    reconciled(&stack, "Ready=True on tokens of the next issuer");

    // 3. Promoted: the old issuer dropped from the spoke's file.
    edit_config(&stack, |t| {
        t.replacen(
            &format!("issuer: \"{old}\""),
            &format!("issuer: \"{}\"", next.url),
            1,
        )
        .replacen(&format!("    next: {{issuer: \"{}\"}}\n", next.url), "", 1)
    });
    rewritten(&stack);
    assert_eq!(trusted_issuers(&stack), std::slice::from_ref(&next.url));
    assert_eq!(
        Bearer::new(&spoke_url, &spoke_ca, &old_token).whoami(),
        Err(401)
    );
    reconciled(&stack, "Ready=True trusting the new issuer alone");
    stack.assert_deployed(0);
    let (finding, _) = checked(&stack, "issuer");
    assert_eq!(finding["severity"], "ok", "{finding:#}");
}
