//! Parts of a tick's report, for tests of what renders one (metrics, alerts).

use spokekeeper::hub::verify::{Check, ConsumerCheck, Delivery, FoundBy, HubReport};
use spokekeeper::hub::{Consumer, Kind};

/// A condition as verification reads it: `True` when `ok`, else `False`.
pub fn check(ok: bool) -> Check {
    Check {
        ok,
        status: if ok { "True" } else { "False" }.into(),
        reason: None,
        message: String::new(),
    }
}

/// Spoke dev's Secret `flux-system/dev-kubeconfig` as the hub took it (synced, found by
/// listing), with one consumer `kind` `flux-system/name`, ready or not.
pub fn dev_hub_report(kind: Kind, name: &str, ready: bool) -> HubReport {
    HubReport {
        delivery: Delivery::Synced(check(true)),
        secret: "flux-system/dev-kubeconfig".into(),
        found_by: FoundBy::Listed,
        list_error: None,
        consumers: vec![ConsumerCheck {
            consumer: Consumer {
                kind,
                namespace: "flux-system".into(),
                name: name.into(),
            },
            ready: check(ready),
            requested_at: None,
        }],
        requested_at: None,
    }
}
