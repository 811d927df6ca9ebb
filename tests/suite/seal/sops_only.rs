//! A fleet with no Sealed Secrets controller: every spoke in sops format and no
//! `sealing.cert` in spokekeeper.yaml. The tick, `check`, `status` and the daemon's first
//! tick load, fetch, trust and grade no sealing certificate, and say nothing about one.

use std::time::Duration;

use super::sops_tick::{AgeKey, age_key, real_sops_decrypt};
use crate::support::NodeOptions;
use crate::support::daemon::Daemon;
use crate::support::fleet::{Fleet, action, authenticates};

/// Writes the fleet's configuration in sops format for `key`, with no `cert:` under
/// `sealing:`.
fn sops_only(fleet: &Fleet, key: &AgeKey) {
    let yaml = fleet
        .builder()
        .sealing(&format!(
            "  format: sops\n  age_recipients: [{}]\n",
            key.recipient
        ))
        .yaml();
    let without: String = yaml
        .lines()
        .filter(|l| !l.starts_with("  cert: "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(!without.contains("cert:"), "{without}");
    std::fs::write(&fleet.config, without).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sops_only_fleet_without_sealing_cert_rotates_and_is_healthy_next_tick() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default(), NodeOptions::default()]);
    let keys = tempfile::tempdir().unwrap();
    let a = age_key(keys.path(), "a");
    sops_only(&fleet, &a);

    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    for i in 0..2 {
        assert_eq!(action(&report, i), "rotated", "{report:#}");
        let secret = real_sops_decrypt(keys.path(), &a.file, &fleet.remote_file(i)).unwrap();
        authenticates(&secret.data["value"]).await;
    }
    // No certificate: nothing to report on one, nothing pinned, nothing said.
    assert!(report.get("sealing").is_none(), "{report:#}");
    assert!(!err.contains("sealing"), "{err}");
    let log = fleet.remote_log();
    assert!(!log.iter().any(|l| l.starts_with("sealing:")), "{log:?}");

    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(action(&report, 0), "healthy", "{report:#}");
    assert_eq!(action(&report, 1), "healthy", "{report:#}");
    assert_eq!(fleet.remote_log(), log, "nothing committed");
}

#[tokio::test(flavor = "multi_thread")]
async fn check_and_status_on_a_sops_only_fleet_grade_no_sealing_certificate() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    let keys = tempfile::tempdir().unwrap();
    sops_only(&fleet, &age_key(keys.path(), "a"));
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");

    let (code, out, err) = fleet.run(&["check", "-o", "json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let checked: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(checked["status"], "ok", "{checked:#}");
    let certs: Vec<&str> = checked["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["cert"].as_str().unwrap())
        .collect();
    assert!(certs.contains(&"client"), "{checked:#}");
    assert!(!certs.contains(&"sealing"), "{checked:#}");
    assert!(err.is_empty(), "{err}");

    let (code, out, err) = fleet.run(&["status", "-o", "json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["spokes"][0]["ok"], true, "{status:#}");
    assert!(!out.contains("sealing"), "{out}");
    assert!(err.is_empty(), "{err}");
}

/// `spokekeeper run`: the first tick rotates with no certificate loaded; /metrics has no
/// sealing series at all (not 0: the trust, the expiry, whether the hub gave one) and
/// the log says nothing of a certificate.
#[test]
fn the_daemons_first_tick_on_a_sops_only_fleet_exports_no_sealing_series() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    let keys = tempfile::tempdir().unwrap();
    let a = age_key(keys.path(), "a");
    sops_only(&fleet, &a);
    let d = Daemon::start(&fleet.config, &["--interval", "1h"]);
    let log = d.wait_for("tick finished", Duration::from_secs(60));
    let m = d.metrics();
    assert!(
        m.contains("spokekeeper_credential_info{spoke=\"spoke0\""),
        "{m}"
    );
    assert!(
        m.contains(
            "spokekeeper_certificate_not_after_timestamp_seconds{spoke=\"spoke0\",cert=\"client\"}"
        ),
        "{m}"
    );
    for absent in [
        "spokekeeper_sealing_cert_trusted",
        "spokekeeper_sealing_certificate_not_after_timestamp_seconds",
        "spokekeeper_hub_reachable",
        "cert=\"sealing\"",
    ] {
        assert!(!m.contains(absent), "{absent} in {m}");
    }
    assert!(!log.contains("sealing.cert"), "{log}");
    assert!(!log.contains("sealing certificate"), "{log}");
    real_sops_decrypt(keys.path(), &a.file, &fleet.remote_file(0)).unwrap();
}
