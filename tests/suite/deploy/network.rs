//! The chart's NetworkPolicies: the metrics scrape only, notification-controller's event port when asked.

use super::*;

/// The chart's NetworkPolicy in `namespace`, if it renders one.
fn network_policy_in<'a>(objects: &'a [Object], namespace: &str) -> Option<&'a NetworkPolicy> {
    let found: Vec<&NetworkPolicy> = objects
        .iter()
        .filter_map(|o| match o {
            Object::NetworkPolicy(n) if n.metadata.namespace.as_deref() == Some(namespace) => {
                Some(n)
            }
            _ => None,
        })
        .collect();
    assert!(
        found.len() <= 1,
        "more than one NetworkPolicy in {namespace}"
    );
    found.first().copied()
}

/// The chart's NetworkPolicy for its own pod, if it renders one.
fn network_policy(objects: &[Object]) -> Option<&NetworkPolicy> {
    network_policy_in(objects, RELEASE_NS)
}

/// Whether `selector` (matchLabels only, as the chart writes it) selects `labels`.
fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    assert!(
        selector.match_expressions.is_none(),
        "the chart's pod selector uses matchLabels only"
    );
    let wanted = selector.match_labels.clone().unwrap_or_default();
    !wanted.is_empty() && wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The ports of the daemon's container: (containerPort, name) and the probes' ports.
fn metrics_port(objects: &[Object]) -> i32 {
    let pod = pod_spec(objects);
    let c = &pod.containers[0];
    let port = c
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .expect("a container port named metrics");
    for probe in [&c.liveness_probe, &c.readiness_probe] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(
            get.port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("metrics".into()),
            "the probes use the metrics port"
        );
    }
    port.container_port
}

fn tcp_port(n: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n)),
        protocol: Some("TCP".into()),
        end_port: None,
    }
}

fn peer_value(p: &NetworkPolicyPeer) -> Value {
    serde_json::to_value(p).unwrap()
}

#[test]
fn chart_network_policy_admits_only_the_scrape_to_the_metrics_port_and_values_widen_it() {
    crate::support::requires!(HELM);
    let objects = read_all(&render(&[]), "chart (defaults)");
    let np = network_policy(&objects).expect("the chart renders a NetworkPolicy by default");
    let spec = np.spec.as_ref().unwrap();
    let template_labels = template_labels(&objects);
    assert!(
        spec.pod_selector
            .as_ref()
            .is_some_and(|sel| selects(sel, &template_labels)),
        "the NetworkPolicy's podSelector {:?} does not select the pod {template_labels:?}",
        spec.pod_selector
    );
    // Egress stays open: SSH to nodes, the hub API, git, the forge, the sinks.
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Ingress".to_string()][..])
    );
    assert!(spec.egress.is_none());
    let port = metrics_port(&objects);
    let ingress = spec.ingress.as_ref().unwrap();
    assert_eq!(ingress.len(), 1, "one ingress rule: {ingress:?}");
    assert_eq!(ingress[0].ports.as_deref(), Some(&[tcp_port(port)][..]));
    let from: Vec<Value> = ingress[0].from.iter().flatten().map(peer_value).collect();
    assert_eq!(
        from,
        [serde_json::json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        })],
        "by default only Prometheus in namespace monitoring is admitted"
    );

    // Widened: another scraper, the nodes for the probes, an extra rule, restricted egress,
    // and the port follows metrics.port.
    let objects = read_all(
        &render_with(
            "metrics: {port: 9100}\n\
             networkPolicy:\n\
             \x20 scrapeFrom: [{namespaceSelector: {matchLabels: {team: obs}}, podSelector: {}}]\n\
             \x20 probeCIDRs: [10.0.0.0/24]\n\
             \x20 extraIngress: [{from: [{ipBlock: {cidr: 192.168.0.0/16}}], ports: [{port: 9100}]}]\n\
             \x20 egress: [{ports: [{port: 53, protocol: UDP}]}]\n",
        ),
        "chart (network policy widened)",
    );
    let spec = network_policy(&objects).unwrap().spec.clone().unwrap();
    assert_eq!(metrics_port(&objects), 9100);
    let ingress = spec.ingress.unwrap();
    assert_eq!(ingress.len(), 2, "{ingress:?}");
    assert_eq!(ingress[0].ports.as_deref(), Some(&[tcp_port(9100)][..]));
    let from: Vec<Value> = ingress[0].from.iter().flatten().map(peer_value).collect();
    assert_eq!(
        from,
        [
            serde_json::json!({"namespaceSelector": {"matchLabels": {"team": "obs"}}, "podSelector": {}}),
            serde_json::json!({"ipBlock": {"cidr": "10.0.0.0/24"}}),
        ]
    );
    assert_eq!(
        serde_json::to_value(&ingress[1]).unwrap(),
        serde_json::json!({"from": [{"ipBlock": {"cidr": "192.168.0.0/16"}}], "ports": [{"port": 9100}]})
    );
    assert_eq!(
        spec.policy_types.unwrap(),
        ["Ingress".to_string(), "Egress".to_string()]
    );
    assert_eq!(spec.egress.unwrap().len(), 1);

    // Nobody to admit would mean everybody: refused, with the fix.
    let out = helm_command(&[
        "template",
        "sk",
        CHART,
        "--set",
        "networkPolicy.scrapeFrom=null",
    ])
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("networkPolicy.enabled: false"),
        "{err}"
    );

    let objects = read_all(
        &render_with("networkPolicy: {enabled: false}\n"),
        "chart (no network policy)",
    );
    assert!(network_policy(&objects).is_none());
}

/// Issue 40 (8): Flux's allow-egress policy admits only flux-system's pods to
/// notification-controller; asked to, the chart installs beside it the one ingress rule
/// spokekeeper's events need: its own pods, from the release's namespace, to port 9090 of
/// notification-controller's pods. Off by default.
#[test]
fn chart_admits_its_pods_to_notification_controllers_event_port_when_asked() {
    crate::support::requires!(HELM);
    let objects = read_all(&render(&[]), "chart (defaults)");
    assert!(
        network_policy_in(&objects, "flux-system").is_none(),
        "off by default"
    );
    let objects = read_all(
        &render_with("fluxNotificationPolicy: {enabled: true}\n"),
        "chart (notification policy)",
    );
    assert!(
        network_policy(&objects).is_some(),
        "the pod's own policy stays"
    );
    let np = network_policy_in(&objects, "flux-system").expect("a policy in flux-system");
    let spec = np.spec.clone().unwrap();
    let notification = BTreeMap::from([("app".to_string(), "notification-controller".to_string())]);
    assert!(
        spec.pod_selector
            .as_ref()
            .is_some_and(|s| selects(s, &notification)),
        "{:?}",
        spec.pod_selector
    );
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Ingress".to_string()][..])
    );
    assert!(spec.egress.is_none());
    let ingress = spec.ingress.unwrap();
    assert_eq!(ingress.len(), 1, "{ingress:?}");
    assert_eq!(ingress[0].ports.as_deref(), Some(&[tcp_port(9090)][..]));
    let from = ingress[0].from.clone().unwrap();
    assert_eq!(from.len(), 1, "{from:?}");
    let ns = from[0].namespace_selector.as_ref().unwrap();
    let release = BTreeMap::from([(
        "kubernetes.io/metadata.name".to_string(),
        RELEASE_NS.to_string(),
    )]);
    assert_eq!(ns.match_labels.as_ref(), Some(&release));
    let template_labels = template_labels(&objects);
    let pods = from[0].pod_selector.as_ref().unwrap();
    assert!(
        selects(pods, &template_labels),
        "{pods:?} selects {template_labels:?}"
    );
    // Another Flux namespace and controller labels.
    let objects = read_all(
        &render_with(
            "fluxNotificationPolicy:\n  enabled: true\n  namespace: flux\n  \
             podSelector: {matchLabels: {app: null, app.kubernetes.io/component: notification-controller}}\n",
        ),
        "chart (notification policy elsewhere)",
    );
    let np = network_policy_in(&objects, "flux").expect("a policy in flux");
    let selector = np.spec.as_ref().unwrap().pod_selector.clone().unwrap();
    assert_eq!(
        serde_json::to_value(selector).unwrap(),
        serde_json::json!({"matchLabels": {"app.kubernetes.io/component": "notification-controller"}})
    );
}
