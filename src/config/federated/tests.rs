use crate::config::{Config, CredentialMode};

const HEAD: &str = "repo: {path: f}\nsealing: {cert: c}\nhub: {}\n";

fn parse(text: &str) -> Result<Config, crate::config::ConfigError> {
    Config::parse(text, "t.yaml", std::path::Path::new("/etc/sk"))
}

fn spoke(credential: &str) -> String {
    format!("{HEAD}spokes:\n- name: dev\n  address: 10.0.0.5\n  credential: {credential}\n")
}

fn refused(text: &str, needles: &[&str]) {
    let e = parse(text).expect_err(text).to_string();
    for n in needles {
        assert!(e.contains(n), "{e:?} lacks {n:?}");
    }
}

#[test]
fn a_federated_spoke_gets_the_documented_defaults_and_a_configmap_output() {
    let c = parse(&spoke(
        "{mode: federated, federated: {issuer: \"https://hub.example:6443\"}}",
    ))
    .unwrap();
    let s = &c.spokes[0];
    assert_eq!(s.credential.mode, CredentialMode::Federated);
    let f = s.credential.federated.as_ref().unwrap();
    assert_eq!(f.issuer, "https://hub.example:6443");
    assert_eq!(
        f.discovery(),
        "https://hub.example:6443/.well-known/openid-configuration"
    );
    let accounts: Vec<String> = f.service_accounts.iter().map(ToString::to_string).collect();
    assert_eq!(
        accounts,
        [
            "flux-system/kustomize-controller",
            "flux-system/helm-controller"
        ]
    );
    assert_eq!(f.check_as.to_string(), "spokekeeper/spokekeeper");
    assert_eq!(f.username_prefix, "hub:");
    assert_eq!(
        s.output,
        std::path::PathBuf::from("fluxcd/dev-kubeconfig.yaml")
    );
    // The other modes carry no federated policy, and keep their sealed file.
    let minted = parse(&spoke("{mode: minted}")).unwrap();
    assert!(minted.spokes[0].credential.federated.is_none());
    assert_eq!(
        minted.spokes[0].output,
        std::path::PathBuf::from("fluxcd/dev-kubeconfig-sealed.yaml")
    );
}

#[test]
fn the_spokes_federated_fields_win_one_by_one_and_paths_resolve_against_the_file() {
    let text = format!(
        "{HEAD}credential:\n  hub_id: eu\n  federated: {{issuer: \"https://a.example\", issuer_ca: ca.pem, username_prefix: \"{{hub}}.fleet:\"}}\n\
         spokes:\n- name: dev\n  address: 10.0.0.5\n  credential: {{mode: federated, federated: {{service_accounts: [tenants/deployer], discovery_url: \"https://10.0.0.1:6443/.well-known/openid-configuration\"}}}}\n"
    );
    let c = parse(&text).unwrap();
    let f = c.spokes[0].credential.federated.clone().unwrap();
    assert_eq!(f.issuer, "https://a.example");
    assert_eq!(f.issuer_ca, Some("/etc/sk/ca.pem".into()));
    assert_eq!(f.username_prefix, "eu.fleet:");
    assert_eq!(
        f.service_accounts[0].subject(),
        "system:serviceaccount:tenants:deployer"
    );
    assert_eq!(
        f.discovery(),
        "https://10.0.0.1:6443/.well-known/openid-configuration"
    );
}

#[test]
fn bad_federated_values_are_refused_naming_the_key_and_the_fix() {
    refused(
        &spoke("{mode: federated}"),
        &[
            "spokes[0].credential.mode is federated",
            "credential.federated.issuer is not set",
            "--service-account-issuer",
        ],
    );
    refused(
        &spoke("{mode: federated, federated: {issuer: \"http://hub\"}}"),
        &["spokes[0].credential.federated.issuer", "is not https"],
    );
    refused(
        &spoke("{mode: federated, federated: {issuer: \"https://u:p@hub\"}}"),
        &["user, password, query or fragment"],
    );
    refused(
        &spoke(
            "{mode: federated, federated: {issuer: \"https://hub\", discovery_url: \"https://hub/\"}}",
        ),
        &["discovery_url is the issuer itself"],
    );
    refused(
        &spoke(
            "{mode: federated, federated: {issuer: \"https://hub\", service_accounts: [kustomize-controller]}}",
        ),
        &["service_accounts", "NAMESPACE/NAME"],
    );
    refused(
        &spoke("{mode: federated, federated: {issuer: \"https://hub\", service_accounts: []}}"),
        &["must list 1 to 16"],
    );
    refused(
        &spoke(
            "{mode: federated, federated: {issuer: \"https://hub\", check_as: flux-system/kustomize-controller}}",
        ),
        &["check_as", "never a controller's"],
    );
    refused(
        &spoke(
            "{mode: federated, federated: {issuer: \"https://hub\", username_prefix: \"system:hub:\"}}",
        ),
        &["username_prefix", "starts with system:"],
    );
    refused(
        &spoke("{mode: federated, federated: {issuer: \"https://hub\", username_prefix: \"\"}}"),
        &["username_prefix is empty"],
    );
    refused(
        &spoke("{mode: federated, federated: {issuer: \"https://hub\", username_prefix: \"a b\"}}"),
        &["may hold only letters"],
    );
    refused(
        &spoke("{mode: federated, federated: {issuer: \"https://hub\", audience: x}}"),
        &["unknown field", "audience"],
    );
}

#[test]
fn a_federated_spoke_needs_the_hub_and_ssh() {
    let body = "spokes:\n- name: dev\n  address: 10.0.0.5\n  credential: {mode: federated, federated: {issuer: \"https://hub\"}}\n";
    refused(
        &format!("repo: {{path: f}}\nsealing: {{cert: c}}\n{body}"),
        &[
            "spokes[0].credential.mode is federated (dev), but there is no hub: section",
            "add hub:",
        ],
    );
    let local = format!(
        "{HEAD}spokes:\n- name: dev\n  address: 10.0.0.5\n  source: local\n  kubeconfig_path: /k\n  credential: {{mode: federated, federated: {{issuer: \"https://hub\"}}}}\n"
    );
    refused(&local, &["spokes[0].source", "use source: ssh"]);
}

#[test]
fn a_spokes_own_hub_account_is_in_its_secrets_namespace_and_the_only_one_it_lets_in() {
    let text = format!(
        "{HEAD}credential:\n  federated: {{issuer: \"https://hub\", service_account_name: \"{{spoke}}-flux\"}}\n\
         spokes:\n- name: dev\n  address: 10.0.0.5\n  secret: {{namespace: dev}}\n  credential: {{mode: federated}}\n\
         - name: lab\n  address: 10.0.0.6\n  secret: {{namespace: lab}}\n  credential: {{mode: federated, federated: {{service_account_name: deployer}}}}\n\
         - name: old\n  address: 10.0.0.7\n  credential: {{mode: federated, federated: {{service_accounts: [tenants/deployer]}}}}\n"
    );
    let c = parse(&text).unwrap();
    let policy = |i: usize| c.spokes[i].credential.federated.clone().unwrap();
    let accounts = |i: usize| -> Vec<String> {
        policy(i)
            .service_accounts
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    // The global template, {spoke} filled in, in the spoke's namespace.
    assert_eq!(policy(0).own_account.unwrap().to_string(), "dev/dev-flux");
    assert_eq!(accounts(0), ["dev/dev-flux"]);
    // The spoke's own name wins over the global one.
    assert_eq!(policy(1).own_account.unwrap().to_string(), "lab/deployer");
    assert_eq!(accounts(1), ["lab/deployer"]);
    // The spoke's own list wins over the global name: no account of its own.
    assert_eq!(policy(2).own_account, None);
    assert_eq!(accounts(2), ["tenants/deployer"]);
}

#[test]
fn an_own_hub_account_beside_a_list_shared_or_badly_named_is_refused() {
    refused(
        &spoke(
            "{mode: federated, federated: {issuer: \"https://hub\", service_account_name: a, service_accounts: [x/y]}}",
        ),
        &[
            "spokes[0].credential.federated.service_account_name is set beside service_accounts",
            "drop one",
        ],
    );
    refused(
        &spoke(
            "{mode: federated, federated: {issuer: \"https://hub\", service_account_name: \"Not_A_Name\"}}",
        ),
        &[
            "service_account_name",
            "is not a ServiceAccount name",
            "{spoke}-flux",
        ],
    );
    refused(
        &spoke(
            "{mode: federated, federated: {issuer: \"https://hub\", service_account_name: checker, check_as: flux-system/checker}}",
        ),
        &[
            "check_as is flux-system/checker",
            "never a controller's or the spoke's",
        ],
    );
    let shared = format!(
        "{HEAD}credential:\n  federated: {{issuer: \"https://hub\", service_account_name: flux}}\n\
         spokes:\n- name: dev\n  address: 10.0.0.5\n  credential: {{mode: federated}}\n\
         - name: lab\n  address: 10.0.0.6\n  credential: {{mode: federated}}\n"
    );
    refused(
        &shared,
        &[
            "spokes[1] (lab) and dev both use the hub ServiceAccount flux-system/flux",
            "give each spoke its own",
        ],
    );
}

#[test]
fn a_next_issuer_is_trusted_beside_the_issuer_with_the_issuers_ca_unless_its_own() {
    let text = format!(
        "{HEAD}credential:\n  federated:\n    issuer: \"https://old.example\"\n    issuer_ca: ca.pem\n    next: {{issuer: \"https://new.example\"}}\n\
         spokes:\n- name: dev\n  address: 10.0.0.5\n  credential: {{mode: federated}}\n\
         - name: own\n  address: 10.0.0.6\n  credential: {{mode: federated, federated: {{next: {{issuer: \"https://other.example\", discovery_url: \"https://10.0.0.1/doc\", issuer_ca: other.pem}}}}}}\n"
    );
    let c = parse(&text).unwrap();
    let f = c.spokes[0].credential.federated.clone().unwrap();
    let next = f.next.clone().unwrap();
    assert_eq!(next.issuer, "https://new.example");
    assert_eq!(next.issuer_ca, Some("/etc/sk/ca.pem".into()));
    assert_eq!(
        next.discovery(),
        "https://new.example/.well-known/openid-configuration"
    );
    assert_eq!(f.issuers(), ["https://old.example", "https://new.example"]);
    // The spoke's next replaces the global one whole.
    let own = c.spokes[1]
        .credential
        .federated
        .clone()
        .unwrap()
        .next
        .unwrap();
    assert_eq!(own.issuer, "https://other.example");
    assert_eq!(own.discovery(), "https://10.0.0.1/doc");
    assert_eq!(own.issuer_ca, Some("/etc/sk/other.pem".into()));
    // Without next, the file trusts the issuer alone.
    let one = parse(&spoke(
        "{mode: federated, federated: {issuer: \"https://hub\"}}",
    ))
    .unwrap();
    let one = one.spokes[0].credential.federated.clone().unwrap();
    assert_eq!((&one.next, one.issuers()), (&None, vec!["https://hub"]));
}

#[test]
fn a_bad_next_issuer_is_refused_naming_the_key_and_the_fix() {
    let with = |next: &str| {
        spoke(&format!(
            "{{mode: federated, federated: {{issuer: \"https://hub\", discovery_url: \"https://10.0.0.1/doc\", next: {next}}}}}"
        ))
    };
    refused(
        &with("{discovery_url: \"https://10.0.0.2/doc\"}"),
        &[
            "spokes[0].credential.federated.next has no issuer",
            "or remove spokes[0].credential.federated.next",
        ],
    );
    refused(
        &with("{issuer: \"http://new\"}"),
        &["spokes[0].credential.federated.next.issuer", "is not https"],
    );
    refused(
        &with("{issuer: \"https://hub/\"}"),
        &[
            "next.issuer is the issuer itself",
            "remove spokes[0].credential.federated.next",
        ],
    );
    refused(
        &with("{issuer: \"https://new\", discovery_url: \"https://10.0.0.1/doc\"}"),
        &["next.discovery_url is credential.federated.discovery_url too"],
    );
    refused(
        &with("{issuer: \"https://new\", discovery_url: \"https://new\"}"),
        &["next.discovery_url is the issuer itself"],
    );
    refused(
        &with("{issuer: \"https://new\", audience: x}"),
        &["unknown field", "audience"],
    );
}
