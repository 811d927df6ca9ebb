//! A spoke whose API server presents a self-signed root its kubeconfig's CA bundle never
//! holds (a hostile spoke appending a throwaway root, or a --tls-cert-file carrying a
//! chain up to a root the kubeconfig lacks): one extraction finds the node's bundle
//! unchanged and commits nothing, and the daemon's next tick does not extract again
//! (issue 39, defect 3). The lab's API serves the chain the test sets.

use crate::support;

use serde_json::Value;
use spokekeeper::rotate::{self, Options};

use support::NodeOptions;
use support::fleet::{Fleet, action};

const MINTED: &str = "credential:\n  mode: minted\n";

fn throwaway_root() -> Vec<u8> {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "throwaway-root");
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = rcgen::KeyPair::generate().unwrap();
    p.self_signed(&key).unwrap().der().to_vec()
}

/// The fleet with its one spoke committed, then serving `root` after its own chain.
fn committed_then_serving(extra: &str, root: &[u8]) -> Fleet {
    let mut fleet = Fleet::with(&[NodeOptions::default()], extra);
    let (code, report, err) = fleet.rotate_json(&["--all"]);
    assert_eq!(code, 0, "{report:#}\n{err}");
    assert_eq!(action(&report, 0), "rotated", "{report:#}");
    fleet.nodes[0].serve_also(&[root.to_vec()]);
    fleet
}

fn spoke0(report: &rotate::TickReport) -> Value {
    serde_json::to_value(report).unwrap()["spokes"][0].clone()
}

/// Two ticks over one context, as the daemon runs them: the first extracts, finds the
/// node's bundle unchanged and commits nothing; the second does not extract at all.
/// Each one-shot run extracts and commits nothing either.
async fn a_root_outside_the_bundle_settles(extra: &str) {
    support::install_crypto_provider();
    let fleet = committed_then_serving(extra, &throwaway_root());
    let ctx = fleet.context().await;
    let first = spoke0(&rotate::tick(&ctx, &Options::default()).await.unwrap());
    assert_eq!(first["action"], "unchanged", "{first:#}");
    assert_eq!(first["reason"]["kind"], "root-changed", "{first:#}");
    let second = spoke0(&rotate::tick(&ctx, &Options::default()).await.unwrap());
    assert_eq!(second["action"], "healthy", "{second:#}");
    for _ in 0..2 {
        let (code, report, err) = fleet.rotate_json(&["--all"]);
        assert_eq!(code, 0, "{report:#}\n{err}");
        assert_eq!(action(&report, 0), "unchanged", "{report:#}");
    }
    assert_eq!(
        fleet.remote_log().len(),
        2,
        "the seed and the first commit only"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_extracted_spoke_serving_a_root_its_kubeconfig_lacks_settles() {
    crate::support::requires!(ROOT);
    a_root_outside_the_bundle_settles("").await;
}

/// Minted: the re-mint rule of a periodic check (the binding fits, the node's bundle is
/// the recorded one): no new generation, no binding made.
#[tokio::test(flavor = "multi_thread")]
async fn a_minted_spoke_serving_a_root_its_kubeconfig_lacks_settles() {
    crate::support::requires!(ROOT);
    a_root_outside_the_bundle_settles(MINTED).await;
}

/// Once the node's kubeconfig trusts the root too (a CA rotation reaching the node),
/// the next run commits the new bundle as a changed CA, and then the spoke is healthy.
#[tokio::test(flavor = "multi_thread")]
async fn a_root_the_kubeconfig_then_trusts_is_committed_once() {
    crate::support::requires!(ROOT);
    for extra in ["", MINTED] {
        let root = throwaway_root();
        let mut fleet = committed_then_serving(extra, &root);
        let (_, report, _) = fleet.rotate_json(&["--all"]);
        assert_eq!(action(&report, 0), "unchanged", "{report:#}");
        fleet.nodes[0].trust_also(&root);
        let (code, report, err) = fleet.rotate_json(&["--all"]);
        assert_eq!(code, 0, "{report:#}\n{err}");
        assert_eq!(action(&report, 0), "rotated", "{report:#}");
        assert_eq!(report["spokes"][0]["reason"]["kind"], "ca-changed");
        if extra == MINTED {
            assert_eq!(report["spokes"][0]["credential"]["generation"], 2);
        }
        let (_, report, _) = fleet.rotate_json(&["--all"]);
        assert_eq!(action(&report, 0), "healthy", "{report:#}");
        assert_eq!(fleet.remote_log().len(), 3, "the seed and two commits");
    }
}
