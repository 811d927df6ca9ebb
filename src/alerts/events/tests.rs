use super::*;
use crate::rotate::SpokeReport;

fn finding(spoke: &str, subject: Subject, status: Status, alert: AlertName) -> Finding {
    Finding {
        spoke: spoke.into(),
        subject,
        status,
        not_after: Some(time::macros::datetime!(2027-01-01 00:00 UTC)),
        days_left: Some(20),
        detail: "expires in 20 days".into(),
        alert: Some(alert),
        credential: None,
        summary: "spoke dev: the client certificate expires in 20 days".into(),
        description: String::new(),
    }
}

const AGE: &str = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";

/// `dev` seals with Sealed Secrets, `ops` with sops; `spoke` is added to dev's entry.
fn config(spoke: &str) -> Config {
    let text = format!(
        "repo: {{path: f}}\nsealing: {{cert: c.pem, age_recipients: [{AGE}]}}\nspokes:\n  \
         - {{name: dev, address: 10.0.0.1{spoke}}}\n  \
         - {{name: ops, address: 10.0.0.2, sealing: {{format: sops}}}}\nhub: {{}}\n"
    );
    Config::parse(&text, "/etc/spokekeeper.yaml", std::path::Path::new("/etc")).unwrap()
}

fn failed(spokes: &[&str]) -> Vec<Noted> {
    spokes
        .iter()
        .map(|s| Noted {
            spoke: s.to_string(),
            reason: Reason::RotationFailed,
            note: format!("spoke {s}: rotation failed"),
        })
        .collect()
}

/// The hub answered the listing of flux-system with `consumers` (Kustomizations on
/// `NAME-kubeconfig`), or with an error.
fn listing(consumers: Option<&[&str]>) -> Listed {
    use crate::hub::consumers::{Consumer, Kind, Listing};
    let answer = match consumers {
        Some(names) => Ok(names
            .iter()
            .map(|n| Listing {
                secret: format!("{n}-kubeconfig"),
                config_map: false,
                consumer: Consumer {
                    kind: Kind::Kustomization,
                    namespace: "flux-system".into(),
                    name: format!("{n}-apps"),
                },
                key: String::new(),
                service_account: String::new(),
            })
            .collect()),
        None => Err(std::sync::Arc::new(HubError::NotListed {
            namespace: "flux-system".into(),
        })),
    };
    Listed::from([("flux-system".to_string(), answer)])
}

fn kinds(about: &[Regarding]) -> Vec<String> {
    about.iter().map(|r| format!("{r}")).collect()
}

/// What the hub's Events of `t` are about.
fn on_hub(t: &Targeted) -> Vec<String> {
    t.on_hub()
        .iter()
        .map(|o| format!("{}", o.regarding))
        .collect()
}

#[test]
fn unlisted_consumers_are_the_last_ones_found_and_never_the_credentials_object() {
    let c = config("");
    let report = TickReport::of(Vec::new());
    let mut known = HashMap::new();
    // Nothing known yet, and the hub does not answer: no Flux object.
    let t = targeted(
        &c,
        &report,
        &listing(None),
        &mut known,
        failed(&["dev", "ops"]),
    );
    assert!(t.iter().all(|t| t.consumers.is_empty()), "{t:?}");
    // The hub's Events stand on the credential as the hub holds it: no SealedSecret
    // for a sops spoke.
    assert_eq!(on_hub(&t[0]), ["SealedSecret flux-system/dev-kubeconfig"]);
    assert_eq!(on_hub(&t[1]), ["Secret flux-system/ops-kubeconfig"]);
    assert_eq!(t[1].credential.api_version, "v1");
    // Listed once: remembered for the ticks whose listing fails.
    let t = targeted(
        &c,
        &report,
        &listing(Some(&["dev"])),
        &mut known,
        failed(&["dev"]),
    );
    assert_eq!(
        kinds(&t[0].consumers),
        ["Kustomization flux-system/dev-apps"]
    );
    let t = targeted(
        &c,
        &report,
        &listing(None),
        &mut known,
        failed(&["dev", "ops"]),
    );
    assert_eq!(
        kinds(&t[0].consumers),
        ["Kustomization flux-system/dev-apps"]
    );
    assert_eq!(on_hub(&t[0]), ["Kustomization flux-system/dev-apps"]);
    assert!(t[1].consumers.is_empty(), "ops was never found");
}

#[test]
fn a_configured_kustomization_is_regarded_whatever_the_hub_answers() {
    let c = config(", kustomization: {name: dev-infra}");
    let mut known = HashMap::new();
    for answer in [None, Some(&["dev"][..])] {
        let t = targeted(
            &c,
            &TickReport::of(Vec::new()),
            &listing(answer),
            &mut known,
            failed(&["dev"]),
        );
        assert_eq!(
            kinds(&t[0].consumers),
            ["Kustomization flux-system/dev-infra"]
        );
    }
}

#[tokio::test]
async fn a_flux_event_with_no_flux_object_is_an_error_naming_the_fix_and_is_not_posted() {
    use spokekeeper_lab::webhook::Receiver;
    let r = Receiver::start("/").await;
    let url = url::Url::parse(&r.url()).unwrap();
    let mut flux = FluxSink::new(&url, "pod-0", Duration::ZERO, NotifyOptions::default()).unwrap();
    let c = config("");
    let mut known = HashMap::new();
    let report = TickReport::of(Vec::new());
    let t = targeted(&c, &report, &listing(None), &mut known, failed(&["dev"]));
    let now = time::macros::datetime!(2026-12-04 08:00 UTC);
    let errors = send_flux(&mut flux, &t, &Gate::default(), now).await;
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(text.len(), 1, "{text:?}");
    for needle in ["spoke dev", "RotationFailed", "spokes[].kustomization"] {
        assert!(text[0].contains(needle), "{needle} in {}", text[0]);
    }
    assert_eq!(
        r.requests(),
        0,
        "nothing about a SealedSecret: {:?}",
        r.posts()
    );
    let t = targeted(
        &c,
        &report,
        &listing(Some(&["dev"])),
        &mut known,
        failed(&["dev"]),
    );
    assert!(
        send_flux(&mut flux, &t, &Gate::default(), now)
            .await
            .is_empty()
    );
    let posts = r.posts();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].body["involvedObject"]["kind"], "Kustomization");
    assert_eq!(posts[0].body["involvedObject"]["name"], "dev-apps");
    r.assert_clean();
}

#[test]
fn rotations_failures_and_revocations_are_noted_and_healthy_spokes_are_not() {
    let mut rotated = SpokeReport::new(
        "dev",
        Outcome::Rotated {
            commit: "0123456789abcdef0123".into(),
        },
    );
    rotated.revoked = vec!["spokekeeper-dev-g1".into()];
    let mut revoke_failed = SpokeReport::new("prod", Outcome::Healthy);
    revoke_failed.revoke_error = Some("forbidden:\nno delete".into());
    let report = TickReport::of(vec![
        rotated,
        SpokeReport::new("quiet", Outcome::Healthy),
        revoke_failed,
    ]);
    let n = noted(&report, &[]);
    let reasons: Vec<(&str, Reason)> = n.iter().map(|n| (n.spoke.as_str(), n.reason)).collect();
    assert_eq!(
        reasons,
        [
            ("dev", Reason::CredentialRotated),
            ("dev", Reason::CredentialRevoked),
            ("prod", Reason::RevocationFailed),
        ]
    );
    assert_eq!(
        n[0].note,
        "spoke dev: a validated credential was committed, commit 0123456789ab"
    );
    assert!(n[1].note.contains("spokekeeper-dev-g1"), "{}", n[1].note);
    assert_eq!(
        n[2].note,
        "spoke prod: superseded minted credentials not revoked: forbidden: no delete"
    );
}

#[test]
fn a_federated_revoke_is_noted_with_the_audience_now_trusted() {
    let mut revoked = SpokeReport::new(
        "edge",
        Outcome::Rotated {
            commit: "0123456789abcdef0123".into(),
        },
    );
    revoked.revoked = vec!["spokekeeper.hub.edge.federated".into()];
    revoked.credential = Some(crate::rotate::CredentialReport {
        mode: crate::config::CredentialMode::Federated,
        user: None,
        generation: Some(1),
        audience: Some("https://10.0.0.5:6443#generation-1".into()),
        not_after: None,
        shortened: None,
    });
    let n = noted(&TickReport::of(vec![revoked]), &[]);
    assert_eq!(n[1].reason, Reason::CredentialRevoked);
    assert_eq!(
        n[1].note,
        "spoke edge: hub tokens for the revoked audience refused (ClusterRoleBinding spokekeeper.hub.edge.federated bound nobody at once); the spoke trusts audience https://10.0.0.5:6443#generation-1 only"
    );
}

#[test]
fn expiry_of_the_hubs_credential_is_noted_by_date_and_nothing_else_is() {
    let findings = [
        finding(
            "dev",
            Subject::Client,
            Status::Warning,
            AlertName::CertificateExpiring,
        ),
        finding(
            "dev",
            Subject::Ca,
            Status::Expired,
            AlertName::CertificateExpired,
        ),
        // Not the hub's credential: the spoke's serving certificate, the sealing one.
        finding(
            "dev",
            Subject::Serving,
            Status::Warning,
            AlertName::CertificateExpiring,
        ),
        finding(
            "dev",
            Subject::Sealing,
            Status::Critical,
            AlertName::CertificateExpiring,
        ),
    ];
    let n = noted(&TickReport::of(Vec::new()), &findings);
    assert_eq!(
        n,
        [
            Noted {
                spoke: "dev".into(),
                reason: Reason::CredentialExpiring,
                note: "spoke dev: the client certificate expires on 2027-01-01T00:00:00Z (warning)"
                    .into()
            },
            Noted {
                spoke: "dev".into(),
                reason: Reason::CredentialExpired,
                note: "spoke dev: the cluster CA expired on 2027-01-01T00:00:00Z".into()
            },
        ]
    );
    // The next day's finding says one day less; the note is the same.
    let mut later = findings[0].clone();
    later.days_left = Some(19);
    later.summary = "spoke dev: the client certificate expires in 19 days".into();
    assert_eq!(noted(&TickReport::of(Vec::new()), &[later])[0], n[0]);
}
