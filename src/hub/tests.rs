use super::*;

#[test]
fn a_sealed_secret_that_failed_to_unseal() {
    // As the controller writes it (v0.32): Synced False, observedGeneration caught up.
    let v = serde_json::json!({
        "apiVersion": "bitnami.com/v1alpha1",
        "kind": "SealedSecret",
        "metadata": {"name": "dev-kubeconfig", "namespace": "flux-system", "generation": 3},
        "spec": {"encryptedData": {"value": "AgB..."}, "template": {"metadata": {"name": "dev-kubeconfig"}}},
        "status": {
            "conditions": [{
                "type": "Synced", "status": "False",
                "reason": "ErrUnsealFailed",
                "message": "no key could decrypt secret (value)",
                "lastUpdateTime": "2025-05-01T10:00:00Z",
                "lastTransitionTime": "2025-05-01T10:00:00Z"
            }],
            "observedGeneration": 3
        }
    });
    let h = HubObject::from_json(&v);
    assert_eq!(h.generation, Some(3));
    assert!(h.observed());
    let synced = h.condition("Synced").unwrap();
    assert_eq!(synced.status, "False");
    assert_eq!(
        synced.message.as_deref(),
        Some("no key could decrypt secret (value)")
    );
    assert_eq!(h.encrypted_data["value"], "AgB...");
    assert!(h.condition("Ready").is_none());
}

#[test]
fn a_kustomization_behind_its_generation_and_request() {
    let v = serde_json::json!({
        "metadata": {"name": "dev", "generation": 5,
                     "annotations": {"reconcile.fluxcd.io/requestedAt": "2025-05-01T10:00:00.5Z"}},
        "status": {
            "observedGeneration": 4,
            "lastHandledReconcileAt": "2025-04-30T09:00:00Z",
            "conditions": [
                {"type": "Reconciling", "status": "True", "reason": "Progressing", "message": "Reconciliation in progress", "lastTransitionTime": "2025-05-01T10:00:01Z", "observedGeneration": 5},
                {"type": "Ready", "status": "Unknown", "reason": "Progressing", "message": "Reconciliation in progress", "lastTransitionTime": "2025-05-01T10:00:01Z", "observedGeneration": 5}
            ]
        }
    });
    let h = HubObject::from_json(&v);
    assert!(!h.observed(), "4 of 5");
    assert_eq!(h.condition("Ready").unwrap().status, "Unknown");
    assert_eq!(
        h.condition("Ready").unwrap().reason.as_deref(),
        Some("Progressing")
    );
    assert_eq!(h.requested_at.as_deref(), Some("2025-05-01T10:00:00.5Z"));
    assert_eq!(
        h.last_handled_reconcile_at.as_deref(),
        Some("2025-04-30T09:00:00Z")
    );
    // No status at all (just created): nothing observed, no conditions.
    let h = HubObject::from_json(&serde_json::json!({"metadata": {"generation": 1}}));
    assert!(!h.observed());
    assert!(h.conditions.is_empty());
    // A malformed condition is skipped, not fatal.
    let h = HubObject::from_json(
        &serde_json::json!({"status": {"conditions": [{"type": 1}, {"type": "Ready", "status": "True"}]}}),
    );
    assert_eq!(h.conditions.len(), 1);
}

#[test]
fn requested_at_is_go_rfc3339_nano() {
    let t = time::macros::datetime!(2025-05-01 10:00:00.120000000 UTC);
    assert_eq!(rfc3339_nano(t), "2025-05-01T10:00:00.12Z");
    let t = time::macros::datetime!(2025-05-01 10:00:00 UTC);
    assert_eq!(rfc3339_nano(t), "2025-05-01T10:00:00Z");
    let t = time::macros::datetime!(2025-05-01 10:00:00.000000001 +02:00);
    assert_eq!(rfc3339_nano(t), "2025-05-01T08:00:00.000000001Z");
}

#[test]
fn access_lists_only_reads_the_annotation_patch_events_and_the_check_token() {
    let created: Vec<(&str, &str)> = ACCESS
        .iter()
        .filter(|a| a.verbs.contains(&"create"))
        .map(|a| (a.group, a.resource))
        .collect();
    assert_eq!(
        created,
        [("", "serviceaccounts/token"), ("events.k8s.io", "events")],
        "only Events and a ServiceAccount token are created"
    );
    for a in ACCESS {
        for v in a.verbs {
            assert!(["get", "list", "patch", "create"].contains(v), "{a:?}");
        }
        match (a.group, a.resource) {
            ("events.k8s.io", "events") => assert_eq!(a.verbs, ["create", "patch"]),
            // The TokenRequest subresource only: nothing reads or changes ServiceAccounts.
            ("", "serviceaccounts/token") => assert_eq!(a.verbs, ["create"]),
            _ => assert!(!a.verbs.contains(&"create"), "{a:?}"),
        }
        assert!(
            !a.resource.starts_with("serviceaccounts") || a.resource == "serviceaccounts/token",
            "{a:?}"
        );
        if a.verbs.contains(&"list") {
            assert!(
                ["kustomizations", "helmreleases"].contains(&a.resource),
                "only the Flux consumers are listed: {a:?}"
            );
        }
        if a.verbs.contains(&"patch") {
            assert!(
                [
                    "kustomizations",
                    "helmreleases",
                    "gitrepositories",
                    "events"
                ]
                .contains(&a.resource),
                "only the Flux consumers, the root and its GitRepository are annotated, and Events' series: {a:?}"
            );
        }
    }
    for kind in Kind::ALL {
        let ar = kind.resource();
        assert!(
            ACCESS.iter().any(|a| a.group == ar.group
                && a.resource == ar.plural
                && a.verbs == ["list", "get", "patch"]),
            "{kind:?}"
        );
    }
}

/// The lab emulates Flux under its own names (it cannot depend on this crate): they
/// must be Flux's as spokekeeper calls them.
#[test]
fn the_labs_flux_is_the_flux_spokekeeper_calls() {
    use spokekeeper_lab::hub as lab;
    assert_eq!(lab::REQUESTED_AT, REQUESTED_AT);
    assert_eq!(lab::RESET_AT, RESET_AT);
    assert_eq!(lab::Kind::ALL.len(), Kind::ALL.len());
    for (ours, theirs) in Kind::ALL.into_iter().zip(lab::Kind::ALL) {
        let ar = ours.resource();
        assert_eq!(
            (ours.as_str(), ar.group.as_str(), ar.version.as_str()),
            (theirs.as_str(), theirs.group(), theirs.version())
        );
        assert_eq!(
            (ar.plural.as_str(), ar.api_version.as_str()),
            (theirs.plural(), theirs.api_version().as_str())
        );
        assert_eq!(lab::Kind::named(ours.as_str()), Some(theirs));
    }
}

#[test]
fn a_helm_release_reports_ready_like_a_kustomization() {
    // helm-controller v2's status: the same condition and request fields.
    let v = serde_json::json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": "apps", "generation": 2},
        "spec": {"kubeConfig": {"secretRef": {"name": "dev-kubeconfig"}}},
        "status": {
            "observedGeneration": 2,
            "lastHandledReconcileAt": "2025-05-01T10:00:00Z",
            "conditions": [{"type": "Ready", "status": "False", "reason": "InstallFailed",
                            "message": "Helm install failed", "lastTransitionTime": "2025-05-01T10:00:01Z"}]
        }
    });
    let h = HubObject::from_json(&v);
    assert!(h.observed());
    assert_eq!(h.condition("Ready").unwrap().status, "False");
    assert_eq!(
        h.last_handled_reconcile_at.as_deref(),
        Some("2025-05-01T10:00:00Z")
    );
}
