//! `spokekeeper check` through the binary: real sshd nodes and TLS API servers, a real
//! bare git remote, state recorded by `spokekeeper rotate --all` first.

use crate::support;

use serde_json::Value;
use spokekeeper::certs::CertInfo;
use spokekeeper::fingerprint::{Fingerprint, Sealing};
use spokekeeper::rotate::state::rfc3339;
use spokekeeper_lab::config::{ConfigBuilder, Spoke};
use support::NodeOptions;
use support::fleet::{Fleet, spokekeeper, vectors};
use support::git::{commit, fleet_remote, git};
use time::OffsetDateTime;

/// The thresholds under test; `renew_before: 1d` so rotate does not treat 5 days as due.
const ALERTS: &str = "renew_before: 1d\nalerts:\n  warn_before: 30d\n  critical_before: 7d\n";

/// One spoke per client-certificate lifetime.
fn fleet_with_client_days(days: &[i64]) -> Fleet {
    let opts: Vec<NodeOptions> = days
        .iter()
        .map(|&d| NodeOptions {
            client_cert_days: d,
            ..NodeOptions::default()
        })
        .collect();
    Fleet::with(&opts, ALERTS)
}

fn check_json(fleet: &Fleet, spokes: &[&str]) -> (i32, Value) {
    let mut args = vec!["-o", "json", "check"];
    args.extend_from_slice(spokes);
    let (code, out, err) = fleet.run(&args);
    let json = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, json)
}

fn client_not_after(fleet: &Fleet, i: usize) -> OffsetDateTime {
    CertInfo::from_der(&fleet.nodes[i].client_cert_der())
        .unwrap()
        .not_after
}

/// A clone of a seeded bare remote.
fn seeded_clone(dir: &std::path::Path) -> std::path::PathBuf {
    fleet_remote(dir, 1).1.remove(0)
}

fn finding<'a>(report: &'a Value, spoke: &str, cert: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["spoke"] == spoke && f["cert"] == cert)
        .unwrap_or_else(|| panic!("no {spoke}/{cert} finding in {report:#}"))
}

fn has_finding(report: &Value, spoke: &str, cert: &str) -> bool {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["spoke"] == spoke && f["cert"] == cert)
}

#[test]
fn client_certs_expiring_in_5_20_and_300_days_grade_critical_warning_ok() {
    crate::support::requires!(ROOT);
    let mut fleet = fleet_with_client_days(&[5, 20, 300, 365]);
    // spoke3 is left never rotated.
    let (code, out, err) = fleet.run(&["rotate", "spoke0", "spoke1", "spoke2"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(!out.contains("not renewed"), "renew_before 1d: {out}");

    let (code, report) = check_json(&fleet, &["spoke0", "spoke1", "spoke2"]);
    assert_eq!(code, 2, "{report:#}");
    assert_eq!(report["status"], "critical");
    assert_eq!(report["exit_code"], 2);
    assert_eq!(report["warn_before"], "30d");
    for (i, severity, days) in [(0, "critical", 4), (1, "warning", 19), (2, "ok", 299)] {
        let spoke = format!("spoke{i}");
        let f = finding(&report, &spoke, "client");
        assert_eq!(f["severity"], severity, "{f:#}");
        assert_eq!(f["days_left"], days, "{f:#}");
        assert_eq!(
            f["not_after"],
            rfc3339(client_not_after(&fleet, i)),
            "the exact recorded date"
        );
        let alert = if severity == "ok" {
            Value::Null
        } else {
            "SpokekeeperCertificateExpiring".into()
        };
        assert_eq!(f["alertname"], alert);
        // Everything else about these spokes is fine.
        for cert in ["ca", "serving", "sealing", "api"] {
            assert_eq!(finding(&report, &spoke, cert)["severity"], "ok", "{cert}");
        }
        assert!(!has_finding(&report, &spoke, "state"));
    }
    assert_eq!(
        finding(&report, "spoke0", "sealing")["not_after"],
        "2036-11-26T16:44:04Z"
    );

    // One spoke at a time: each grade has its exit code.
    let (code, out, _) = fleet.run(&["check", "spoke1"]);
    assert_eq!(code, 1, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "SPOKE", "CERT", "SEVERITY", "NOT", "AFTER", "DAYS", "LEFT", "DETAIL"
        ]
    );
    let row = lines
        .iter()
        .find(|l| l.starts_with("spoke1") && l.split_whitespace().nth(1) == Some("client"))
        .unwrap();
    let na = rfc3339(client_not_after(&fleet, 1));
    assert!(
        row.contains("warning") && row.contains(&na) && row.contains(" 19 "),
        "{row}"
    );
    assert!(
        out.contains("\nWARNING: 1 warning, 4 ok (1 spoke)\n"),
        "{out}"
    );
    assert_eq!(fleet.run(&["check", "spoke2"]).0, 0);
    assert_eq!(check_json(&fleet, &["spoke2"]).1["status"], "ok");

    // Never rotated: unknown (3), but a known critical is never hidden behind it.
    let (code, report) = check_json(&fleet, &["spoke3"]);
    assert_eq!(code, 3, "{report:#}");
    let state = finding(&report, "spoke3", "state");
    assert_eq!(state["severity"], "unknown");
    assert!(state["detail"].as_str().unwrap().contains("never rotated"));
    assert_eq!(check_json(&fleet, &[]).0, 2, "critical beats unknown");

    // Unreachable: unknown, above warning and below critical.
    fleet.nodes[2].stop_api();
    let (code, report) = check_json(&fleet, &["spoke2"]);
    assert_eq!(code, 3, "{report:#}");
    let api = finding(&report, "spoke2", "api");
    assert_eq!(api["severity"], "unknown");
    assert_eq!(api["alertname"], "SpokekeeperSpokeUnreachable");
    assert!(api["detail"].as_str().unwrap().contains("refused"), "{api}");
    assert_eq!(finding(&report, "spoke2", "client")["severity"], "ok");
    assert_eq!(check_json(&fleet, &["spoke1", "spoke2"]).0, 3);
    assert_eq!(check_json(&fleet, &["spoke0", "spoke2"]).0, 2);
    fleet.nodes[2].start_api();

    // A rebuilt spoke: the hub's kubeconfig no longer trusts it. check commits nothing.
    fleet.nodes[2].rebuild();
    let committed = std::fs::read(fleet.output(2)).unwrap();
    let (code, report) = check_json(&fleet, &["spoke2"]);
    assert_eq!(code, 2, "{report:#}");
    let ca = finding(&report, "spoke2", "ca");
    assert_eq!(ca["severity"], "critical");
    assert_eq!(ca["alertname"], "SpokekeeperCaMismatch");
    assert_eq!(
        std::fs::read(fleet.output(2)).unwrap(),
        committed,
        "check changes nothing"
    );
}

/// A certificate for the vectors' sealing key, valid until `not_after`.
fn sealing_cert(not_after: OffsetDateTime) -> String {
    use rsa::pkcs8::EncodePrivateKey;
    let keys = spokekeeper::seal::RecoveryKey::load_all(
        &std::fs::read(vectors().join("key/tls.key")).unwrap(),
        "tls.key",
    )
    .unwrap();
    let der = keys[0].private_key().to_pkcs8_der().unwrap();
    let key = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(
        &der.as_bytes().into(),
        &rcgen::PKCS_RSA_SHA256,
    )
    .unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.not_before = not_after - time::Duration::days(365);
    p.not_after = not_after;
    p.self_signed(&key).unwrap().pem()
}

#[test]
fn the_sealing_certificate_is_graded_even_when_expired() {
    let dir = tempfile::tempdir().unwrap();
    let clone = seeded_clone(dir.path());
    let now = OffsetDateTime::now_utc();
    let soon = now + time::Duration::days(3);
    let gone = now - time::Duration::days(2);
    for (name, not_after, severity, alert) in [
        (
            "soon.pem",
            soon,
            "critical",
            "SpokekeeperCertificateExpiring",
        ),
        ("gone.pem", gone, "expired", "SpokekeeperCertificateExpired"),
    ] {
        let cert = dir.path().join(name);
        std::fs::write(&cert, sealing_cert(not_after)).unwrap();
        let config = dir.path().join("spokekeeper.yaml");
        ConfigBuilder::new(&clone, &cert)
            .spoke(Spoke::new("dev", "127.0.0.1"))
            .write(&config)
            .unwrap();
        let (code, out, err) = spokekeeper(&config, &["check", "-o", "json"]);
        assert_eq!(code, 2, "{out}\n{err}");
        let report: Value = serde_json::from_str(&out).unwrap();
        let f = finding(&report, "dev", "sealing");
        assert_eq!(f["severity"], severity, "{f:#}");
        assert_eq!(f["alertname"], alert);
        assert_eq!(f["not_after"], rfc3339(not_after));
        // dev was never rotated and has no api_server: unknown, but sealing is worse.
        assert_eq!(finding(&report, "dev", "state")["severity"], "unknown");
        assert!(!has_finding(&report, "dev", "api"), "nothing to probe");
    }
}

#[test]
fn what_cannot_be_checked_exits_3_and_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere.yaml");
    let (code, out, err) = spokekeeper(&missing, &["check"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("UNKNOWN") && err.contains("nowhere.yaml") && err.contains("--config"),
        "{err}"
    );

    let not_a_clone = dir.path().join("empty");
    std::fs::create_dir(&not_a_clone).unwrap();
    let config = dir.path().join("spokekeeper.yaml");
    ConfigBuilder::new(&not_a_clone, vectors().join("key/cert.pem"))
        .spoke(Spoke::new("dev", "127.0.0.1"))
        .write(&config)
        .unwrap();
    let (code, out, err) = spokekeeper(&config, &["check", "-o", "json"]);
    assert_eq!(code, 3, "{out}\n{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["status"], "unknown");
    assert_eq!(report["exit_code"], 3);
    let error = report["error"].as_str().unwrap();
    assert!(
        error.contains("not a git clone") && error.contains("git clone"),
        "{error}"
    );
    assert!(err.contains(error), "{err}");

    let (code, _, err) = spokekeeper(&config, &["check", "nosuch"]);
    assert_eq!(code, 3);
    assert!(err.contains("no spoke named \"nosuch\""), "{err}");

    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("cert.pem", "absent.pem")).unwrap();
    let (code, _, err) = spokekeeper(&config, &["check"]);
    assert_eq!(code, 3);
    assert!(
        err.contains("sealing.cert") && err.contains("absent.pem"),
        "{err}"
    );
}

/// Writes `pem` to keys/sealing.pem in `clone`, commits and pushes it: the commit's id.
fn push_sealing_cert(clone: &std::path::Path, pem: &str) -> String {
    std::fs::create_dir_all(clone.join("keys")).unwrap();
    std::fs::write(clone.join("keys/sealing.pem"), pem).unwrap();
    git(clone, &["add", "keys/sealing.pem"]);
    commit(clone, "keys: the sealing certificate");
    git(clone, &["push", "--quiet", "origin", "HEAD:main"]);
    git(clone, &["rev-parse", "HEAD"]).trim().to_string()
}

fn sealing_fingerprint(pem: &str) -> Fingerprint<Sealing> {
    spokekeeper::seal::SealingKey::from_pem(pem.as_bytes(), "test", OffsetDateTime::now_utc())
        .unwrap()
        .fingerprint()
}

fn untrusted_findings(report: &Value) -> Vec<&Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["alertname"] == "SpokekeeperSealingCertUntrusted")
        .collect()
}

/// Without `hub:`, check applies the tick's trust rule: a pushed replacement for the
/// certificate the committed credentials record is critical until sealing.sha256 lists it.
#[test]
fn a_pushed_sealing_certificate_is_critical_until_sealing_sha256_lists_it() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    let real = std::fs::read_to_string(vectors().join("key/cert.pem")).unwrap();
    let other = std::fs::read_to_string(vectors().join("other-key/tls.crt")).unwrap();
    let (old, new) = (sealing_fingerprint(&real), sealing_fingerprint(&other));
    push_sealing_cert(&fleet.clone, &real);
    let pinned = fleet.clone.join("keys/sealing.pem");
    let text = std::fs::read_to_string(&fleet.config).unwrap();
    let at = format!("  cert: {}\n", vectors().join("key/cert.pem").display());
    assert!(text.contains(&at), "{text}");
    let text = text.replace(&at, &format!("  cert: {}\n", pinned.display()));
    std::fs::write(&fleet.config, &text).unwrap();

    // A fresh install without anchors (first use), then what the credentials record.
    let (code, report) = check_json(&fleet, &[]);
    assert_eq!(code, 3, "never rotated: {report:#}");
    assert!(untrusted_findings(&report).is_empty(), "{report:#}");
    let (code, out, err) = fleet.run(&["rotate", "--all"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, report) = check_json(&fleet, &[]);
    assert_eq!(code, 0, "{report:#}");
    assert!(untrusted_findings(&report).is_empty(), "{report:#}");

    // A replacement is pushed (check reads the clone as it is, so pushed from there).
    let attack = push_sealing_cert(&fleet.clone, &other);
    let (code, report) = check_json(&fleet, &[]);
    assert_eq!(code, 2, "{report:#}");
    assert_eq!(report["status"], "critical");
    let found = untrusted_findings(&report);
    assert_eq!(found.len(), 1, "{report:#}");
    let f = found[0];
    assert_eq!((&f["spoke"], &f["cert"]), (&"".into(), &"sealing".into()));
    assert_eq!(f["severity"], "critical", "{f:#}");
    let detail = f["detail"].as_str().unwrap();
    for needle in [new.short(), old.short(), attack.clone()] {
        assert!(detail.contains(&needle), "{needle} not in {detail}");
    }
    let (code, out, err) = fleet.run(&["check"]);
    assert_eq!(code, 2, "{out}");
    let row = out
        .lines()
        .find(|l| l.contains("not trusted"))
        .unwrap_or_else(|| panic!("no untrusted row in {out}"));
    assert!(
        row.contains("critical") && row.contains(&new.short()),
        "{row}"
    );
    for needle in [new.to_string(), old.to_string(), attack] {
        assert!(err.contains(&needle), "{needle} not in {err}");
    }

    // The operator checked it with the controller and lists it: OK again.
    std::fs::write(
        &fleet.config,
        text.replace(
            &format!("  cert: {}\n", pinned.display()),
            &format!("  cert: {}\n  sha256: {new}\n", pinned.display()),
        ),
    )
    .unwrap();
    let (code, report) = check_json(&fleet, &[]);
    assert_eq!(code, 0, "{report:#}");
    assert!(untrusted_findings(&report).is_empty(), "{report:#}");
}

fn status_json(fleet: &Fleet) -> (i32, Value) {
    let (code, out, err) = fleet.run(&["status", "-o", "json"]);
    let json = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, json)
}

#[test]
fn status_calls_a_spoke_whose_client_certificate_is_expiring_not_fine() {
    crate::support::requires!(ROOT);
    let fleet = fleet_with_client_days(&[5, 300]);
    let (code, out, err) = fleet.run(&["rotate", "--all"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, status) = status_json(&fleet);
    assert_eq!(
        code, 1,
        "a critical client certificate is not fine: {status:#}"
    );
    let expiring = &status["spokes"][0];
    assert_eq!(expiring["ok"], false, "{status:#}");
    let problems = expiring["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{status:#}");
    let date = rfc3339(client_not_after(&fleet, 0));
    assert_eq!(
        problems[0],
        format!("the client certificate expires in 4 days, on {date}")
    );
    assert_eq!(status["spokes"][1]["ok"], true, "{status:#}");
    assert_eq!(status["spokes"][1]["problems"], serde_json::json!([]));
}

#[test]
fn status_and_check_grade_every_spoke_alike() {
    crate::support::requires!(ROOT);
    let fleet = fleet_with_client_days(&[5, 20, 300, 365]);
    // spoke3 is left never rotated.
    let (code, out, err) = fleet.run(&["rotate", "spoke0", "spoke1", "spoke2"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let (_, check) = check_json(&fleet, &[]);
    let (_, status) = status_json(&fleet);
    let spokes = status["spokes"].as_array().unwrap();
    assert_eq!(spokes.len(), 4);
    for s in spokes {
        // check's per-spoke findings, but the fleet's sealing certificate (status reads
        // no sealing.cert).
        let fine = check["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["spoke"] == s["spoke"] && f["cert"] != "sealing")
            .all(|f| f["severity"] == "ok");
        assert_eq!(s["ok"], fine, "{s:#}\n{check:#}");
    }
    let fine: Vec<&Value> = spokes.iter().map(|s| &s["ok"]).collect();
    assert_eq!(fine, [false, false, true, false], "{status:#}");
}

/// Peak RSS of `spokekeeper check` (KiB, GNU time's %M) over `config`.
fn check_peak_kib(config: &std::path::Path) -> u64 {
    let out = std::process::Command::new("/usr/bin/time")
        .args(["-f", "maxrss=%M"])
        .arg(env!("CARGO_BIN_EXE_spokekeeper"))
        .arg("--config")
        .arg(config)
        .args(["-o", "json", "check", "--probe-timeout", "1s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{err}"));
    assert!(report["findings"].is_array(), "{report}");
    err.lines()
        .find_map(|l| l.strip_prefix("maxrss="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no maxrss in {err}"))
}

/// A push of many YAML files whose parsed trees are large (a flow list of 90 000 items
/// is about 180 KB of text and 6 MiB parsed): `check` holds one file's tree at a time,
/// so its peak stays near its floor however many files there are. Before, every file's
/// tree was held at once (24 of them: over 140 MiB).
#[test]
fn check_holds_one_fleet_repo_files_tree_at_a_time() {
    crate::support::requires!(GNU_TIME);
    let dir = support::scratch_dir();
    let clone = seeded_clone(dir.path());
    let config = dir.path().join("spokekeeper.yaml");
    support::fleet::config(&clone, &[])
        .spokes(support::fleet::unreachable_spokes(dir.path(), 1, "127.254"))
        .write(&config)
        .unwrap();
    let floor = check_peak_kib(&config);
    fn items(item: &str) -> String {
        format!("items: [{}]\n", vec![item; 90_000].join(","))
    }
    // One blob at 24 paths (the push costs 180 KB), then 24 different files.
    for shape in ["same", "distinct"] {
        let _ = std::fs::remove_dir_all(clone.join("apps"));
        for i in 0..24 {
            let file = clone.join(format!("apps/{shape}/f{i:02}.yaml"));
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            let item = match shape {
                "same" => "a".to_string(),
                _ => format!("b{i}"),
            };
            std::fs::write(&file, items(&item)).unwrap();
        }
        git(&clone, &["add", "-A"]);
        commit(&clone, shape);
        let peak = check_peak_kib(&config);
        println!("check: {floor} KiB with no YAML, {peak} KiB with 24 {shape} files");
        assert!(
            peak < floor + 48 * 1024,
            "{shape}: peak {peak} KiB, {floor} KiB without the files"
        );
    }
}
