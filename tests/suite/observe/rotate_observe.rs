//! observe and decide end to end, through the binary: a damaged recorded state, a
//! re-addressed spoke, an `api_server` on 443 or under a path, a CA bundle, an old API.

use crate::support;

use serde_json::Value;
use support::NodeOptions;
use support::fleet::{Fleet, action, authenticates};
use support::git::git;

/// Commits `edit` of spoke i's SealedSecret to the remote, as a person would.
fn push_edit(fleet: &Fleet, i: usize, edit: impl Fn(&str) -> String) {
    fleet.push_edit(&format!("fluxcd/spoke{i}-kubeconfig-sealed.yaml"), edit);
}

/// Replaces the value of annotation `key` (one line in the manifest).
fn set_annotation(text: &str, key: &str, value: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        match line.split_once(&format!("{key}:")) {
            Some((indent, _)) => out.push_str(&format!("{indent}{key}: {value}")),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

fn annotation(text: &str, key: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key} in {text}"));
    let value = line.split_once(": ").unwrap().1.trim();
    value.trim_matches('"').to_string()
}

/// Adds `line` to spoke i's entry in spokekeeper.yaml (after its address).
fn configure(fleet: &Fleet, i: usize, line: &str) {
    let text = std::fs::read_to_string(&fleet.config).unwrap();
    let address = format!(
        "  - name: spoke{i}\n    address: {}\n",
        fleet.nodes[i].address
    );
    assert!(text.contains(&address), "{text}");
    std::fs::write(
        &fleet.config,
        text.replace(&address, &format!("{address}    {line}\n")),
    )
    .unwrap();
}

/// `rotate -o json ARGS`, which must succeed with spoke 0's action `expected`; the report.
fn rotate(fleet: &Fleet, args: &[&str], expected: &str) -> Value {
    let (code, report, err) = fleet.rotate_json(args);
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(action(&report, 0), expected, "{report}");
    report
}

/// With `api_server: URL` configured, spoke 0 is rotated to a kubeconfig that names URL
/// as it is and authenticates; recorded as configured, it is not rewritten the next tick.
async fn rotates_keeping_the_api_server(fleet: &Fleet, url: &str) {
    configure(fleet, 0, &format!("api_server: \"{url}\""));
    rotate(fleet, &["--all"], "rotated");
    let kc = fleet.unsealed(0);
    let text = std::str::from_utf8(kc.expose()).unwrap();
    assert!(text.contains(&format!("server: \"{url}\"")), "{text}");
    authenticates(&kc).await;
    rotate(fleet, &["--all"], "healthy");
    assert_eq!(fleet.remote_log().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_ascii_sealing_fingerprint_rotates_the_spoke_instead_of_panicking() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    // With the certificate anchored outside the repo, a damaged record of it is only a
    // reason to rotate (without an anchor the record is what trust rests on).
    support::trust::confirm_sealing_cert(&fleet.config);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    push_edit(&fleet, 0, |t| {
        set_annotation(
            t,
            "spokekeeper.io/sealing-cert-sha256",
            "\"sha256:aéééééé\"",
        )
    });
    let (code, out, err) = fleet.rotate(&["--all"]);
    assert_eq!(code, 0, "not a panic (101): {out}\n{err}");
    assert!(out.contains("rotated"), "{out}");
    let log = fleet.remote_log();
    assert!(
        log[0].starts_with("spoke0: rotate kubeconfig: committed manifest unreadable (annotation spokekeeper.io/sealing-cert-sha256 is not"),
        "the reason names the annotation: {log:?}"
    );
    // The fresh commit records a well-formed fingerprint again: the next tick is quiet.
    rotate(&fleet, &["--all"], "healthy");
    authenticates(&fleet.unsealed(0)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_re_addressed_spoke_is_probed_at_its_new_address_and_rotated() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions::default()]);
    assert_eq!(fleet.rotate(&["--all"]).0, 0);
    let node = &fleet.nodes[0];
    // The spoke was recorded at an address that is dead now (nothing listens there);
    // the configuration says where it is.
    let dead = format!("https://127.0.0.1:{}", node.api_port);
    let moved = |t: &str| set_annotation(t, "spokekeeper.io/server", &format!("\"{dead}\""));
    push_edit(&fleet, 0, moved);
    let report = rotate(&fleet, &["--all"], "rotated");
    assert_eq!(report["spokes"][0]["reason"]["kind"], "config-changed");
    let now = format!("https://{}:{}", node.address, node.api_port);
    assert_eq!(
        fleet.remote_log()[0],
        format!("spoke0: rotate kubeconfig: configuration changed (address {dead} -> {now})")
    );
    assert_eq!(
        annotation(&fleet.remote_file(0), "spokekeeper.io/server"),
        now
    );
    assert_eq!(action(&fleet.rotate_json(&["--all"]).1, 0), "healthy");

    // And with --force, as an operator would after changing `address`.
    push_edit(&fleet, 0, moved);
    rotate(&fleet, &["spoke0", "--force"], "rotated");
    authenticates(&fleet.unsealed(0)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_server_on_port_443_keeps_its_port() {
    crate::support::requires!(ROOT);
    // A load balancer on 443 in front of the node, whose k3s.yaml says 6443.
    let fleet = Fleet::new(&[NodeOptions {
        api_port: 443,
        kubeconfig_port: Some(6443),
        ..NodeOptions::default()
    }]);
    let url = format!("https://{}", fleet.nodes[0].address);
    rotates_keeping_the_api_server(&fleet, &url).await;
    assert_eq!(
        annotation(&fleet.remote_file(0), "spokekeeper.io/server"),
        url
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_server_behind_a_path_prefix_keeps_its_path() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions {
        api_prefix: "/k8s/spoke".into(),
        ..NodeOptions::default()
    }]);
    let node = &fleet.nodes[0];
    let url = format!("https://{}:{}/k8s/spoke", node.address, node.api_port);
    assert_eq!(node.api_url, url);
    rotates_keeping_the_api_server(&fleet, &url).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ca_bundle_is_recorded_whole_and_either_ca_is_healthy() {
    crate::support::requires!(ROOT);
    let mut fleet = Fleet::new(&[NodeOptions::default()]);
    // Mid CA rotation: the kubeconfig trusts [old, new], the API serves from the new.
    fleet.nodes[0].rotate_server_ca(true);
    rotate(&fleet, &["--all"], "rotated");
    let file = fleet.remote_file(0);
    assert_eq!(
        annotation(&file, "spokekeeper.io/ca-data")
            .split(',')
            .count(),
        2
    );
    assert_eq!(
        annotation(&file, "spokekeeper.io/ca-sha256"),
        spokekeeper::certs::fingerprint(&fleet.nodes[0].server_ca_der()).to_string(),
        "ca-sha256 stays the first CA"
    );
    rotate(&fleet, &["--all"], "healthy");
    // Served from the old CA again: also trusted, also healthy.
    fleet.nodes[0].rotate_server_ca(false);
    rotate(&fleet, &["--all"], "healthy");
    assert_eq!(fleet.remote_log().len(), 2, "one commit only");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_1_26_spoke_is_rotated_with_its_user_unknown() {
    crate::support::requires!(ROOT);
    let fleet = Fleet::new(&[NodeOptions {
        git_version: "v1.26.15+k3s1".into(),
        ..NodeOptions::default()
    }]);
    let report = rotate(&fleet, &["--all"], "rotated");
    assert_eq!(report["spokes"][0]["user"], "(unknown: pre-1.27 API)");
    let body = git(&fleet.remote, &["log", "-1", "--format=%B", "main"]);
    assert!(
        body.contains("validated: authenticated as (unknown: pre-1.27 API)"),
        "{body}"
    );
}

/// The daemon grades what its tick observed: the tick's report holds each spoke's
/// observation, its probe the tick's own (with the API stopped after the tick, it still
/// holds it); a spoke the tick rotated is held as its commit left it (what the clone
/// reads now, without the DER already judged), judged against the tick's probe.
#[tokio::test(flavor = "multi_thread")]
async fn the_ticks_report_holds_what_it_observed_and_what_its_commits_left() {
    crate::support::requires!(ROOT);
    use spokekeeper::rotate::{self, Options, Outcome, observe};
    use spokekeeper::spoke::CaCheck;
    use std::time::Duration;

    support::install_crypto_provider();
    let mut fleet = Fleet::new(&[NodeOptions::default()]);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    let ctx = fleet.context().await;
    let limit = Duration::from_secs(5);
    let before = observe::fleet(&ctx.config, &ctx.repo, &[], limit)
        .await
        .unwrap();
    let force = Options {
        force: true,
        ..Options::default()
    };
    // The record differs from the first rotation's by its time alone, in whole seconds.
    let first = time::OffsetDateTime::now_utc().unix_timestamp();
    while time::OffsetDateTime::now_utc().unix_timestamp() == first {
        std::thread::sleep(Duration::from_millis(50));
    }
    let rotated = rotate::tick(&ctx, &force).await.unwrap();
    assert!(
        matches!(rotated.spokes[0].outcome, Outcome::Rotated { .. }),
        "{:?}",
        rotated.spokes[0]
    );
    let after = observe::fleet(&ctx.config, &ctx.repo, &[], limit)
        .await
        .unwrap();
    let held = &rotated.observed[0];
    let now_committed = after[0].committed.recorded().expect("committed");
    assert_ne!(before[0].committed.recorded(), Some(now_committed));
    // Held without the bundle's DER and the presented chain: judged already, in `ca`.
    let mut lean = now_committed.clone();
    lean.ca_bundle = Vec::new();
    assert_eq!(held.committed.recorded(), Some(&lean));
    assert_eq!(held.ca.as_ref().map(|j| j.check), Some(CaCheck::Verified));
    let held_probe = held.probe.as_ref().and_then(|p| p.as_ref().ok());
    assert!(held_probe.expect("the tick's probe").chain.is_empty());

    let healthy = rotate::tick(&ctx, &Options::default()).await.unwrap();
    fleet.nodes[0].stop_api();
    let probe = healthy.observed[0].probe.as_ref().expect("a probe");
    assert!(probe.is_ok(), "the tick's own probe: {probe:?}");
}

/// A clone whose HEAD cannot be listed (its root tree is gone) is a repo error, for a
/// tick and for `observe::fleet` (check, status) alike: not a fallback that reads each
/// spoke's file on its own.
#[tokio::test]
async fn a_head_that_cannot_be_listed_is_a_repo_error() {
    use spokekeeper::config::Config;
    use spokekeeper::repo::Repo;
    use spokekeeper::rotate::{self, Context, Options, observe};
    use spokekeeper_lab::config::{ConfigBuilder, Spoke};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let clone = support::git::fleet_remote(dir.path(), 1).1.remove(0);
    let text = ConfigBuilder::new(&clone, "c.pem")
        .spokes([Spoke::new("dev", "127.0.0.1").api_server("https://127.0.0.1:1")])
        .yaml();
    let config = Config::parse(&text, "t.yaml", dir.path()).unwrap();
    let repo = Repo::open(&config.repo).await.unwrap();
    // A commit of its own, so that its root tree is a loose object (a clone's are packed).
    std::fs::write(clone.join("other.yaml"), "a: 1\n").unwrap();
    git(&clone, &["add", "other.yaml"]);
    git(
        &clone,
        &[
            "-c",
            "user.name=p",
            "-c",
            "user.email=p@p",
            "commit",
            "-qm",
            "o",
        ],
    );
    let tree = git(&clone, &["rev-parse", "HEAD^{tree}"]);
    let tree = tree.trim();
    let objects = clone.join(".git/objects").join(&tree[..2]);
    std::fs::remove_file(objects.join(&tree[2..])).unwrap();

    let limit = Duration::from_secs(1);
    let listed = observe::fleet(&config, &repo, &[], limit).await;
    assert!(listed.is_err(), "{listed:?}");
    let ctx = Context::new(config, None, repo).unwrap();
    let dry = Options {
        dry_run: true,
        ..Options::default()
    };
    let ticked = rotate::tick(&ctx, &dry).await;
    assert!(
        ticked
            .as_ref()
            .is_err_and(|e| e.to_string().contains("ls-tree")),
        "{:?}",
        ticked.map(|r| r.spokes)
    );
}
