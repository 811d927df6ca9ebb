use super::*;
use crate::fingerprint::Fingerprint;
use crate::rotate::state::{Recorded, SealedTo, test_ca};
use crate::seal::SealedSecret;

/// Spokes edge (federated, Secret `kc` in `edge`) and dev (`dev_mode`, Secret `dev_name`
/// in `dev`): two spokes may share a Secret name in two namespaces.
fn spokes(dev_mode: &str, dev_name: &str) -> Vec<SpokeConfig> {
    let text = format!(
        "repo: {{path: f}}\nsealing: {{cert: c.pem}}\nhub: {{}}\ncredential: {{federated: {{issuer: \"https://hub.example:6443\"}}}}\nspokes:\n  - {{name: edge, address: 10.0.0.1, secret: {{name: kc, namespace: edge}}, credential: {{mode: federated}}}}\n  - {{name: dev, address: 10.0.0.2, secret: {{name: {dev_name}, namespace: dev}}, credential: {{mode: {dev_mode}}}}}\n"
    );
    crate::config::Config::parse(&text, "spokekeeper.yaml", std::path::Path::new("/x"))
        .unwrap_or_else(|e| panic!("{e}"))
        .spokes
}

/// A SealedSecret of `namespace`/`name` recording spoke `spoke`, minted at generation 3.
fn sealed(spoke: &str, namespace: &str, name: &str) -> Vec<u8> {
    let ca = test_ca("old");
    let recorded = Recorded {
        spoke: spoke.into(),
        server: "https://10.0.0.1:6443".into(),
        ca_sha256: Fingerprint::of(&ca),
        ca_bundle: vec![ca],
        ca_not_after: time::OffsetDateTime::from_unix_timestamp(2_000_000_000).unwrap(),
        client_sha256: None,
        client_not_after: None,
        content_sha256: Fingerprint::from_digest([3; 32]),
        sealed_to: SealedTo::Cert(Fingerprint::from_digest([4; 32])),
        rotated_at: time::OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap(),
        credential: RecordedCredential {
            mode: CredentialMode::Minted,
            user: Some("spokekeeper:hub:edge:3:0a0b0c0d".into()),
            generation: 3,
        },
        trust_sha256: None,
    };
    let mut s = SealedSecret {
        name: name.into(),
        namespace: namespace.into(),
        annotations: recorded.to_annotations(),
        ..Default::default()
    };
    s.encrypted_data.insert("value".into(), "AgA".into());
    s.to_yaml().into_bytes()
}

fn why(judged: Result<Old, Migration>) -> String {
    match judged {
        Err(Migration {
            state: MigrationState::Failed { why },
            ..
        }) => why,
        Err(other) => panic!("{other:?}"),
        Ok(old) => panic!("taken as the old Secret: {}", old.path.display()),
    }
}

#[test]
fn the_old_path_is_the_sealed_default_unless_another_spoke_commits_there() {
    let fleet = spokes("minted", "kc");
    assert_eq!(
        old_path(&fleet[0], &fleet),
        None,
        "dev's own SealedSecret is at fluxcd/kc-sealed.yaml"
    );
    assert_eq!(old_path(&fleet[1], &fleet), None, "dev is not federated");
    let fleet = spokes("minted", "other");
    let path = old_path(&fleet[0], &fleet).unwrap();
    assert_eq!(path, std::path::Path::new("fluxcd/kc-sealed.yaml"));
}

#[test]
fn only_the_spokes_own_secret_is_taken_as_its_old_one() {
    let fleet = spokes("minted", "other");
    let (edge, path) = (&fleet[0], PathBuf::from("fluxcd/kc-sealed.yaml"));
    let old = judged(edge, path.clone(), &sealed("edge", "edge", "kc")).unwrap();
    assert_eq!(old.path, path);
    assert_eq!(
        (old.credential.mode, old.credential.generation),
        (CredentialMode::Minted, 3)
    );
    // Another spoke's Secret of the same name, or one naming another spoke.
    let w = why(judged(edge, path.clone(), &sealed("dev", "dev", "kc")));
    assert!(
        w.starts_with(
            "holds SealedSecret dev/kc of spoke \"dev\", not spoke edge's old Secret edge/kc"
        ),
        "{w}"
    );
    let w = why(judged(edge, path.clone(), &sealed("dev", "edge", "kc")));
    assert!(w.contains("of spoke \"dev\""), "{w}");
    let w = why(judged(edge, path.clone(), &sealed("edge", "edge", "other")));
    assert!(w.starts_with("holds SealedSecret edge/other"), "{w}");
    // Not spokekeeper's at all.
    let w = why(judged(edge, path, b"apiVersion: v1\nkind: Secret\n"));
    assert!(w.starts_with("is not a Secret spokekeeper wrote ("), "{w}");
}
