//! Anchoring the lab fleet's sealing certificate, as an operator would.

use std::path::Path;

/// Sets `sealing.sha256` in a fleet's spokekeeper.yaml to its sealing certificate's
/// fingerprint: the certificate is then confirmed from outside the fleet repo.
pub fn confirm_sealing_cert(config: &Path) {
    let text = std::fs::read_to_string(config).unwrap();
    let cert = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("cert: "))
        .expect("sealing.cert in the fleet's config")
        .to_string();
    let pem = std::fs::read(cert.trim_matches('"')).unwrap();
    let key = spokekeeper::seal::SealingKey::from_pem(&pem, &cert, time::OffsetDateTime::now_utc())
        .unwrap();
    let text = text.replacen(
        &format!("  cert: {cert}\n"),
        &format!("  cert: {cert}\n  sha256: {}\n", key.fingerprint()),
        1,
    );
    assert!(text.contains("  sha256: sha256:"), "{text}");
    std::fs::write(config, text).unwrap();
}
