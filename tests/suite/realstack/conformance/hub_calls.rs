//! The calls spokekeeper makes on a hub, and what it reads of their answers: the
//! transcript the simulated hub and the real hub are compared by.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use super::{call, status_of};
use serde_json::{Value, json};
use spokekeeper::hub::{Consumer, Hub, HubObject, Kind};
use support::realstack::hub::{CONTROLLER, CONTROLLER_NS};

pub(super) const FLUX_NS: &str = "flux-system";

pub(super) const SECRET: &str = "conform-kubeconfig";

/// What spokekeeper compares of a hub object: conditions without their timestamps.
fn read(o: &Option<HubObject>) -> Value {
    let Some(o) = o else { return Value::Null };
    let mut conditions: Vec<Value> = o
        .conditions
        .iter()
        .map(|c| {
            json!({"type": c.type_, "status": c.status, "reason": c.reason,
                   "message": c.message.clone().filter(|m| !m.is_empty()).is_some()})
        })
        .collect();
    conditions.sort_by_key(|c| c["type"].to_string());
    json!({
        "generation": o.generation, "observedGeneration": o.observed_generation,
        "conditions": conditions, "lastHandledReconcileAt": o.last_handled_reconcile_at,
        "requestedAt": o.requested_at,
    })
}

fn consumer(kind: Kind, name: &str) -> Consumer {
    Consumer {
        kind,
        namespace: FLUX_NS.into(),
        name: name.into(),
    }
}

fn collection(kind: Kind) -> String {
    let ar = kind.resource();
    format!(
        "/apis/{}/{}/namespaces/{FLUX_NS}/{}",
        ar.group, ar.version, ar.plural
    )
}

/// Every page of a list with `limit=1`: (code, names, whether each page but the last
/// carried a continue token).
async fn paged(client: &kube::Client, kind: Kind) -> Value {
    let mut names = Vec::new();
    let mut codes = Vec::new();
    let mut next: Option<String> = None;
    for _ in 0..10 {
        let mut path = format!("{}?limit=1", collection(kind));
        if let Some(c) = &next {
            let c: String = url::form_urlencoded::byte_serialize(c.as_bytes()).collect();
            path.push_str(&format!("&continue={c}"));
        }
        let a = call(client, "GET", &path, "application/json", None).await;
        codes.push(a.code);
        for i in a.body["items"].as_array().into_iter().flatten() {
            names.push(i["metadata"]["name"].clone());
        }
        match a.body["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => next = Some(c.to_string()),
            _ => break,
        }
    }
    json!({"codes": codes, "names": names})
}

/// The calls spokekeeper makes on a hub, through its own `Hub` and raw for status codes.
/// `client` is what spokekeeper runs as; `admin` makes the calls outside its RBAC (a wrong
/// method), so that routing, not authorization, answers them.
pub(super) async fn hub_transcript(
    hub: &Hub,
    client: &kube::Client,
    admin: &kube::Client,
) -> Vec<(String, Value)> {
    let mut t = Vec::new();
    let svc = format!("/api/v1/namespaces/{CONTROLLER_NS}/services/{CONTROLLER}");
    let a = call(client, "GET", &svc, "application/json", None).await;
    t.push((
        "GET the controller's Service".into(),
        json!({"http": a.code, "port": a.body["spec"]["ports"][0]["name"]}),
    ));
    let a = call(admin, "POST", &svc, "application/json", Some(&json!({}))).await;
    t.push(("POST to a named Service".into(), status_of(&a)));
    t.push((
        "Hub::fetch_cert".into(),
        json!(
            hub.fetch_cert()
                .await
                .map(|c| c.len())
                .map_err(|e| e.to_string())
        ),
    ));
    t.push((
        "Hub::controller_version, after fetch_cert".into(),
        json!(hub.controller_version()),
    ));
    let wrong = format!("{svc}/proxy/v1/nothing");
    let wrong = wrong.replace(
        &format!("services/{CONTROLLER}"),
        &format!("services/http:{CONTROLLER}:http"),
    );
    let a = call(client, "GET", &wrong, "application/json", None).await;
    t.push((
        "GET an unknown path through the proxy".into(),
        json!({"http": a.code}),
    ));

    t.push((
        "Hub::sealed_secret (present)".into(),
        read(&hub.sealed_secret(FLUX_NS, SECRET).await.unwrap()),
    ));
    t.push((
        "Hub::sealed_secret (missing)".into(),
        read(&hub.sealed_secret(FLUX_NS, "missing").await.unwrap()),
    ));
    let a = call(
        client,
        "GET",
        &format!("/apis/bitnami.com/v1alpha1/namespaces/{FLUX_NS}/sealedsecrets/missing"),
        "application/json",
        None,
    )
    .await;
    t.push(("GET a missing SealedSecret".into(), status_of(&a)));

    let secrets: BTreeSet<String> = [SECRET.to_string()].into();
    let found = hub.consumers(FLUX_NS, &secrets).await.unwrap();
    t.push(("Hub::consumers".into(), json!(found)));
    for kind in Kind::ALL {
        t.push((format!("list {kind:?} limit=1"), paged(client, kind).await));
    }
    let k = consumer(Kind::Kustomization, "conform");
    let h = consumer(Kind::HelmRelease, "conform-app");
    t.push((
        "Hub::consumer Kustomization".into(),
        read(&hub.consumer(&k).await.unwrap()),
    ));
    t.push((
        "Hub::consumer HelmRelease".into(),
        read(&hub.consumer(&h).await.unwrap()),
    ));
    let gone = consumer(Kind::Kustomization, "missing");
    t.push((
        "Hub::consumer missing".into(),
        read(&hub.consumer(&gone).await.unwrap()),
    ));
    let a = call(
        client,
        "GET",
        &format!("{}/missing", collection(Kind::Kustomization)),
        "application/json",
        None,
    )
    .await;
    t.push(("GET a missing Kustomization".into(), status_of(&a)));

    reconcile_steps(hub, client, [&k, &h], &mut t).await;

    event_steps(hub, client, &k, &mut t).await;
    t
}

/// The reconcile request: only metadata changes (no new generation), status stays.
async fn reconcile_steps(
    hub: &Hub,
    client: &kube::Client,
    consumers: [&Consumer; 2],
    t: &mut Vec<(String, Value)>,
) {
    let at = "2026-01-01T00:00:00.000000001Z";
    for c in consumers {
        let path = format!("{}/{}", collection(c.kind), c.name);
        let before = call(client, "GET", &path, "application/json", None).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let r = hub.request_reconcile(c, at, deadline).await;
        let after = call(client, "GET", &path, "application/json", None).await;
        t.push((
            format!("Hub::request_reconcile {:?}", c.kind),
            json!({"ok": r.is_ok(),
                   "annotation": after.body["metadata"]["annotations"][spokekeeper::hub::REQUESTED_AT],
                   "generation kept": after.body["metadata"]["generation"] == before.body["metadata"]["generation"],
                   "resourceVersion changed": after.body["metadata"]["resourceVersion"] != before.body["metadata"]["resourceVersion"]}),
        ));
        // status is a subresource: a patch of the main resource cannot write it.
        let p = json!({"status": {"lastHandledReconcileAt": "forged"}});
        let a = call(
            client,
            "PATCH",
            &path,
            "application/merge-patch+json",
            Some(&p),
        )
        .await;
        t.push((
            format!("merge-patch status of a {:?}", c.kind),
            json!({"http": a.code, "lastHandledReconcileAt": a.body["status"]["lastHandledReconcileAt"]}),
        ));
        let a = call(
            client,
            "PATCH",
            &path,
            "application/strategic-merge-patch+json",
            Some(&p),
        )
        .await;
        t.push((
            format!("strategic-merge-patch a {:?}", c.kind),
            status_of(&a),
        ));
    }
}

/// Events (hub::recorder): the first occurrence created, a repeat patched into its
/// series, a patch of an Event that is gone answered 404 (then created anew).
async fn event_steps(hub: &Hub, client: &kube::Client, k: &Consumer, t: &mut Vec<(String, Value)>) {
    use spokekeeper::hub::recorder::{Occurrence, Reason, Recorder, Regarding, Seen};
    let mut recorder = Recorder::new("conform-0", Duration::from_secs(600));
    let o = Occurrence {
        regarding: Regarding::consumer(k),
        reason: Reason::CredentialExpiring,
        note: "spoke conform: the client certificate expires on 2027-01-01T00:00:00Z (warning)"
            .into(),
    };
    let now = time::OffsetDateTime::now_utc();
    for step in ["first", "repeat"] {
        let r = recorder.record(hub, &o, now).await;
        t.push((
            format!("Recorder::record ({step})"),
            json!(
                r.map(|s| match s {
                    Seen::First => "created".to_string(),
                    Seen::Again { count, .. } => format!("patched to count {count}"),
                })
                .map_err(|e| e.to_string())
            ),
        ));
    }
    let a = call(
        client,
        "PATCH",
        &format!("/apis/events.k8s.io/v1/namespaces/{FLUX_NS}/events/missing"),
        "application/merge-patch+json",
        Some(&json!({"series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}})),
    )
    .await;
    t.push(("merge-patch a missing Event".into(), status_of(&a)));
}
