//! The Lease emulator against a real Lease.

use crate::support;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use super::{Answer, assert_same, call, client_from_yaml, status_of};
use serde_json::{Value, json};
use spokekeeper::daemon::lease::{LeaseLock, Observed};
use spokekeeper_lab::lease::Emulator;
use spokekeeper_lab::{Pki, PkiOptions};
use support::realstack::free_port;
use support::realstack::kube::{Etcd, KubeApi};

const LEASE_NS: &str = "conform";

fn lease_path(name: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases{name}")
}

/// `2006-01-02T15:04:05.000000Z`, the API server's MicroTime.
fn micro_time_shape(v: &Value) -> Value {
    let Some(s) = v.as_str() else {
        return v.clone();
    };
    let ok = s.len() == 27
        && s.ends_with('Z')
        && s.as_bytes()[19] == b'.'
        && s[20..26].bytes().all(|b| b.is_ascii_digit());
    json!(if ok { "MicroTime" } else { s })
}

fn lease_spec(a: &Answer) -> Value {
    let s = &a.body["spec"];
    json!({
        "http": a.code,
        "holderIdentity": s["holderIdentity"],
        "leaseDurationSeconds": s["leaseDurationSeconds"],
        "leaseTransitions": s["leaseTransitions"],
        "acquireTime": micro_time_shape(&s["acquireTime"]),
        "renewTime": micro_time_shape(&s["renewTime"]),
    })
}

fn observed(o: Result<Observed, spokekeeper::daemon::lease::LeaseError>) -> Value {
    match o {
        Ok(Observed::Held { holder, .. }) => json!({"Held": holder}),
        Ok(o) => json!(format!("{o:?}")),
        Err(e) => json!({"error": e.to_string()}),
    }
}

async fn get_lease(client: &kube::Client, name: &str) -> Answer {
    call(client, "GET", &lease_path(name), "application/json", None).await
}

async fn lease_transcript(client: &kube::Client) -> Vec<(String, Value)> {
    let mut t = Vec::new();
    let a = LeaseLock::new(
        client.clone(),
        LEASE_NS,
        "conform",
        "a",
        Duration::from_secs(15),
    );
    let b = LeaseLock::new(
        client.clone(),
        LEASE_NS,
        "conform",
        "b",
        Duration::from_secs(15),
    );

    t.push((
        "GET a missing Lease".into(),
        status_of(&get_lease(client, "/missing").await),
    ));
    t.push((
        "a acquires (create)".into(),
        observed(a.try_acquire_or_renew().await),
    ));
    let created = get_lease(client, "/conform").await;
    t.push(("GET after create".into(), lease_spec(&created)));
    t.push((
        "b sees it held".into(),
        observed(b.try_acquire_or_renew().await),
    ));
    t.push((
        "a renews (update)".into(),
        observed(a.try_acquire_or_renew().await),
    ));
    let renewed = get_lease(client, "/conform").await;
    t.push((
        "GET after renew".into(),
        json!({"spec": lease_spec(&renewed),
               "acquireTime kept": renewed.body["spec"]["acquireTime"] == created.body["spec"]["acquireTime"],
               "resourceVersion changed": renewed.body["metadata"]["resourceVersion"] != created.body["metadata"]["resourceVersion"]}),
    ));

    raw_writes(client, &created, &renewed, &mut t).await;

    // a (leaseDurationSeconds rewritten by someone: its own 15 goes back) releases, b
    // takes over at once: a transition.
    t.push(("a renews".into(), observed(a.try_acquire_or_renew().await)));
    t.push((
        "a releases".into(),
        json!(a.release().await.map_err(|e| e.to_string())),
    ));
    t.push((
        "GET after release".into(),
        lease_spec(&get_lease(client, "/conform").await),
    ));
    t.push((
        "b acquires".into(),
        observed(b.try_acquire_or_renew().await),
    ));
    t.push((
        "GET after takeover".into(),
        lease_spec(&get_lease(client, "/conform").await),
    ));
    t
}

/// Raw writes: the current resourceVersion wins, a stale one is a 409 Conflict, none
/// at all is invalid; a second create is AlreadyExists.
async fn raw_writes(
    client: &kube::Client,
    created: &Answer,
    renewed: &Answer,
    t: &mut Vec<(String, Value)>,
) {
    let mut stale = created.body.clone();
    stale["spec"]["holderIdentity"] = json!("intruder");
    let a1 = call(
        client,
        "PUT",
        &lease_path("/conform"),
        "application/json",
        Some(&stale),
    )
    .await;
    t.push(("PUT with a stale resourceVersion".into(), status_of(&a1)));
    let mut unversioned = renewed.body.clone();
    unversioned["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let a1 = call(
        client,
        "PUT",
        &lease_path("/conform"),
        "application/json",
        Some(&unversioned),
    )
    .await;
    t.push(("PUT without a resourceVersion".into(), status_of(&a1)));
    let mut current = renewed.body.clone();
    current["spec"]["leaseDurationSeconds"] = json!(20);
    let a1 = call(
        client,
        "PUT",
        &lease_path("/conform"),
        "application/json",
        Some(&current),
    )
    .await;
    t.push((
        "PUT with the current resourceVersion".into(),
        lease_spec(&a1),
    ));
    let fresh = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "conform"}, "spec": {"holderIdentity": "c"}});
    let a1 = call(
        client,
        "POST",
        &lease_path(""),
        "application/json",
        Some(&fresh),
    )
    .await;
    t.push(("POST an existing Lease".into(), status_of(&a1)));
}

#[test]
fn the_lease_emulator_answers_as_a_real_api_server() {
    crate::support::requires!(REAL_STACK);
    let _heavy = support::timing::heavy();
    support::install_crypto_provider();
    let dir = support::scratch_dir();
    let etcd = Etcd::start(dir.path());
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let pki = Pki::generate(&PkiOptions {
        address: lo,
        address_in_sans: true,
        client_cert_days: 365,
    });
    let api = KubeApi::start("lease", dir.path(), &etcd, lo, free_port(lo), &pki, &[]);
    api.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {LEASE_NS}\n"
    ));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let real_client = client_from_yaml(
        &rt,
        &std::fs::read_to_string(&api.admin_kubeconfig).unwrap(),
    );
    let real = rt.block_on(lease_transcript(&real_client));

    let emu = Emulator::new();
    let ep = emu.endpoint();
    let emu_client = support::lease::client(&emu, &ep);
    let emulated = rt.block_on(lease_transcript(&emu_client));
    assert_same(&emulated, &real);
    assert_eq!(real[1].1, json!("Leader"), "{real:#?}");
}
