//! observe and decide end to end, through the binary: a damaged recorded state, a
//! re-addressed spoke, an `api_server` on 443 or under a path, a CA bundle, an old API.

use crate::support;

use serde_json::Value;
use support::NodeOptions;
use support::fleet::{Fleet, action, authenticates};
use support::git::{clone, git};

/// Commits `edit` of spoke i's SealedSecret to the remote, as a person would.
fn push_edit(fleet: &Fleet, i: usize, edit: impl Fn(&str) -> String) {
    let other = fleet.dir.path().join("editor");
    if !other.exists() {
        clone(&fleet.remote, &other);
    }
    git(&other, &["pull", "--quiet", "--ff-only"]);
    let file = other.join(format!("fluxcd/spoke{i}-kubeconfig-sealed.yaml"));
    let text = std::fs::read_to_string(&file).unwrap();
    let edited = edit(&text);
    assert_ne!(edited, text, "the edit changed something");
    std::fs::write(&file, edited).unwrap();
    git(&other, &["add", "-A"]);
    git(
        &other,
        &[
            "-c",
            "user.name=p",
            "-c",
            "user.email=p@p",
            "commit",
            "--quiet",
            "-m",
            "edited by hand",
        ],
    );
    git(&other, &["push", "--quiet", "origin", "HEAD:main"]);
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

/// The daemon's tick keeps each spoke's probe (`keep_probes`) and `after_tick` reuses it
/// for the alerts rather than probing again: with the API stopped after the tick, the
/// observation still holds the tick's probe. A one-shot tick keeps none (most of a
/// 10 000-spoke tick's memory), so the same call probes again and finds the API down.
#[tokio::test(flavor = "multi_thread")]
async fn the_daemons_tick_keeps_each_probe_for_the_alerts_and_a_one_shot_tick_none() {
    crate::support::requires!(ROOT);
    use spokekeeper::rotate::{self, Options, observe};
    use std::time::Duration;

    support::install_crypto_provider();
    let mut fleet = Fleet::new(&[NodeOptions::default()]);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    let ctx = fleet.context().await;
    let daemon = Options {
        keep_probes: true,
        ..Options::default()
    };
    let kept = rotate::tick(&ctx, &daemon).await.unwrap();
    let one_shot = rotate::tick(&ctx, &Options::default()).await.unwrap();
    assert_eq!(kept.seen.len(), 1);
    assert!(one_shot.seen.is_empty());

    fleet.nodes[0].stop_api();
    let limit = Duration::from_secs(2);
    let reused = observe::after_tick(&ctx.config, &ctx.repo, &kept, limit).await;
    let probe = reused[0].probe.as_ref().expect("a probe");
    assert!(probe.is_ok(), "the tick's own probe: {probe:?}");
    let again = observe::after_tick(&ctx.config, &ctx.repo, &one_shot, limit).await;
    let probe = again[0].probe.as_ref().expect("a probe");
    assert!(
        probe.as_ref().is_err_and(|e| e.is_unreachable()),
        "probed again: {probe:?}"
    );
}
