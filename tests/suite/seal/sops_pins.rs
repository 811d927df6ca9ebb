//! How `age_sha256` pins bind a sops output (issue 39, defect 2): a pusher who edits the
//! fleet repo's `.sops.yaml` cannot move an output to a set listed after its own in the
//! pins (the retired set of a rollover, another path's set), nor, with
//! `spokes[].sealing.age_sha256`, to any set not pinned for that spoke; a move the pins
//! allow is committed and raises `SpokekeeperRecipientsChanged`.

use crate::support;

use spokekeeper::seal::sops::recipients_fingerprint;

use super::sops_tick::{AgeKey, age_key};
use support::NodeOptions;
use support::fleet::{Fleet, action};
use support::git::{clone, commit, git};

const OUTPUT: &str = "fluxcd/spoke0-kubeconfig-sealed.yaml";

fn pin(key: &AgeKey) -> String {
    recipients_fingerprint([&key.recipient]).to_string()
}

/// Pushes a `.sops.yaml` whose rule for spoke0's output names `key`, as anyone with push
/// access can (`remove`: spoke0's committed output too).
fn push_rule(fleet: &Fleet, key: &AgeKey, remove: bool) {
    let other = tempfile::tempdir().unwrap();
    let dir = other.path().join("pusher");
    clone(&fleet.remote, &dir);
    std::fs::write(dir.join(".sops.yaml"), rule(&key.recipient)).unwrap();
    if remove && dir.join(OUTPUT).exists() {
        std::fs::remove_file(dir.join(OUTPUT)).unwrap();
    }
    git(&dir, &["add", "-A"]);
    commit(&dir, "sops: recipients");
    git(&dir, &["push", "--quiet", "origin", "HEAD:main"]);
}

fn rule(recipient: &str) -> String {
    format!(
        "creation_rules:\n  - path_regex: ^fluxcd/spoke0-.*\\.yaml$\n    encrypted_regex: ^(data|stringData)$\n    age: {recipient}\n"
    )
}

/// spoke0 in sops format by the clone's `.sops.yaml`, pinned by `pins` (global) and
/// `own` (spoke0's `sealing.age_sha256`, none when empty).
fn configure(fleet: &Fleet, pins: &[&AgeKey], own: &[&AgeKey]) {
    let list = |keys: &[&AgeKey]| keys.iter().map(|k| pin(k)).collect::<Vec<_>>().join(", ");
    let sealing = format!(
        "  sops_config: {}\n  age_sha256: [{}]\n",
        fleet.clone.join(".sops.yaml").display(),
        list(pins)
    );
    let spoke = match own {
        [] => "    sealing: {format: sops}\n".to_string(),
        own => format!(
            "    sealing: {{format: sops, age_sha256: [{}]}}\n",
            list(own)
        ),
    };
    let yaml = fleet.builder().sealing(&sealing).yaml();
    let yaml = yaml.replacen(
        "  - name: spoke0\n",
        &format!("  - name: spoke0\n{spoke}"),
        1,
    );
    std::fs::write(&fleet.config, yaml).unwrap();
}

struct Setup {
    fleet: Fleet,
    _keys: tempfile::TempDir,
    prod: AgeKey,
    staging: AgeKey,
}

/// spoke0 committed for `first`, with `.sops.yaml` naming it.
fn setup(first: fn(&Setup) -> &AgeKey, pins: fn(&Setup) -> Vec<&AgeKey>) -> Setup {
    let keys = tempfile::tempdir().unwrap();
    let (prod, staging) = (
        age_key(keys.path(), "prod"),
        age_key(keys.path(), "staging"),
    );
    let s = Setup {
        fleet: Fleet::new(&[NodeOptions::default()]),
        _keys: keys,
        prod,
        staging,
    };
    push_rule(&s.fleet, first(&s), false);
    configure(&s.fleet, &pins(&s), &[]);
    let (code, report, err) = s.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(action(&report, 0), "rotated", "{report:#}");
    s
}

/// The spoke failed at `seal` with every needle in its error, and nothing was pushed.
fn refused(fleet: &Fleet, needles: &[&str]) {
    let head = git(&fleet.remote, &["rev-parse", "main"]);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_ne!(code, 0, "{report:#}\n{err}");
    let spoke = &report["spokes"][0];
    assert_eq!(spoke["stage"], "seal", "{spoke:#}");
    let error = spoke["error"].as_str().unwrap();
    for needle in needles {
        assert!(error.contains(needle), "{needle:?} in {error}");
    }
    assert_eq!(git(&fleet.remote, &["rev-parse", "main"]), head);
}

fn committed_for(fleet: &Fleet, key: &AgeKey) -> bool {
    fleet.remote_file(0).contains(&key.recipient)
}

/// Pins `[prod, staging]` (a rollover's `[new, old]`, or per-path sets): prod's output
/// is not moved to staging by a pushed `.sops.yaml`; the operator listing staging
/// first allows it.
#[tokio::test(flavor = "multi_thread")]
async fn a_push_does_not_move_an_output_to_a_set_listed_after_its_own() {
    crate::support::requires!(ROOT);
    let s = setup(|s| &s.prod, |s| vec![&s.prod, &s.staging]);
    let committed = s.fleet.remote_file(0);
    push_rule(&s.fleet, &s.staging, false);
    let fix = format!("list {} before {}", pin(&s.staging), pin(&s.prod));
    refused(
        &s.fleet,
        &["listed after it in sealing.age_sha256", "never moves", &fix],
    );
    assert_eq!(s.fleet.remote_file(0), committed);
    assert!(committed_for(&s.fleet, &s.prod));
    configure(&s.fleet, &[&s.staging, &s.prod], &[]);
    let (code, report, err) = s.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(report["spokes"][0]["reason"]["kind"], "recipients-changed");
    assert!(committed_for(&s.fleet, &s.staging));
}

/// `spokes[].sealing.age_sha256` binds the output whatever is committed: a pusher who
/// also deletes it (nothing committed to keep the order by) gets nothing encrypted for
/// another set.
#[tokio::test(flavor = "multi_thread")]
async fn a_spoke_bound_to_its_own_sets_is_encrypted_for_no_other() {
    crate::support::requires!(ROOT);
    let s = setup(|s| &s.prod, |s| vec![&s.prod, &s.staging]);
    configure(&s.fleet, &[&s.prod, &s.staging], &[&s.prod]);
    push_rule(&s.fleet, &s.staging, true);
    let needles = [
        "not among spokes[].sealing.age_sha256 of spoke spoke0",
        &format!("add {}", pin(&s.staging)),
    ];
    refused(&s.fleet, &needles);
    // The spoke's own pins bind it even where the fleet's list allows the set.
    push_rule(&s.fleet, &s.prod, false);
    let (code, report, err) = s.fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(action(&report, 0), "rotated", "{report:#}");
    assert!(committed_for(&s.fleet, &s.prod));
}

/// The tick's SpokekeeperRecipientsChanged findings, as the daemon grades it.
async fn recipients_alerts(
    ctx: &spokekeeper::rotate::Context,
    report: &spokekeeper::rotate::TickReport,
) -> Vec<spokekeeper::alerts::Finding> {
    use spokekeeper::alerts;
    let now = time::OffsetDateTime::now_utc();
    alerts::evaluate(
        &ctx.config.alerts,
        &report.observed,
        None,
        now,
        Some(report),
    )
    .into_iter()
    .filter(|f| f.alert == Some(alerts::AlertName::RecipientsChanged))
    .collect()
}

/// A move the pins allow (staging up to prod, listed first) is committed, and the tick
/// raises SpokekeeperRecipientsChanged naming both sets; the next tick does not.
#[tokio::test(flavor = "multi_thread")]
async fn a_recipients_changed_commit_raises_an_alert() {
    crate::support::requires!(ROOT);
    use spokekeeper::rotate::{Options, tick};
    support::install_crypto_provider();
    let s = setup(|s| &s.staging, |s| vec![&s.prod, &s.staging]);
    push_rule(&s.fleet, &s.prod, false);
    let ctx = s.fleet.context().await;
    let report = tick(&ctx, &Options::default()).await.unwrap();
    let found = recipients_alerts(&ctx, &report).await;
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].spoke, "spoke0");
    assert_eq!(found[0].status, spokekeeper::alerts::Status::Warning);
    for set in [pin(&s.prod), pin(&s.staging)] {
        let text = &found[0].description;
        assert!(text.contains(&set), "{set} in {text}");
    }
    assert!(committed_for(&s.fleet, &s.prod));
    let report = tick(&ctx, &Options::default()).await.unwrap();
    let found = recipients_alerts(&ctx, &report).await;
    assert!(found.is_empty(), "{found:#?}");
}
