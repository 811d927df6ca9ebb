//! The rule of a federated spoke's move off its old Secret, pure: from what the hub and
//! the fleet repo show in one tick to waiting (each reason said) or removing the Secret.
//! Nothing here reads the network or the clone, so every case is a row of a table.

use crate::hub::{Consumer, HubError, HubObject};

/// What one tick saw of a federated spoke whose old Secret is still committed.
pub(super) struct Seen<'a> {
    /// The Secret's namespace and name (the ConfigMap has the same).
    pub namespace: &'a str,
    pub name: &'a str,
    /// The spoke's own tick ended with nothing to commit (healthy, or re-read unchanged):
    /// its ConfigMap committed before, its trust proven this tick.
    pub healthy: bool,
    /// A dry run: never removes.
    pub dry_run: bool,
    /// The hub's Kustomizations and HelmReleases in the namespace that name the
    /// credential.
    pub listed: Result<Listed, HubError>,
    /// Why the hub's ConfigMap does not hold the committed data (None: it does).
    pub unapplied: Option<String>,
}

/// What the fleet repo's tree says of consumers on `secretRef` to the old Secret.
pub(super) enum InRepo {
    /// Read whole: these (`KIND NS/NAME (FILE)`).
    Found(Vec<String>),
    /// This many YAML files were left unread: nothing is ruled out.
    Unread(usize),
}

/// The hub's consumers of one spoke's credential, by the field that names it.
#[derive(Default)]
pub(super) struct Listed {
    /// On `secretRef` to the old Secret.
    pub on_secret: Vec<Consumer>,
    /// On `configMapRef` to the ConfigMap, each as the hub has it now (None: gone).
    pub on_config_map: Vec<(Consumer, Option<HubObject>)>,
}

/// What the tick does with the old Secret.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Nothing: each reason, naming the consumer where one is the cause.
    Waits(Vec<String>),
    /// A dry run that would remove it.
    WouldRemove(Vec<Consumer>),
    /// Every consumer is on the ConfigMap and Ready through it: these.
    Remove(Vec<Consumer>),
}

/// The hub's side: no consumer on the old Secret, at least one on the ConfigMap, and each
/// of those Ready through it ([`through`]); the ConfigMap the commit's.
pub(super) fn on_hub(seen: &Seen<'_>) -> Step {
    let (ns, name) = (seen.namespace, seen.name);
    let mut waits = Vec::new();
    if !seen.healthy {
        waits.push(
            "the spoke's own tick committed or failed: its ConfigMap is committed and proven first"
                .to_string(),
        );
    }
    if let Some(why) = &seen.unapplied {
        waits.push(format!("ConfigMap {ns}/{name} on the hub: {why}"));
    }
    let listed = match &seen.listed {
        Ok(l) => l,
        Err(why) => {
            waits.push(format!("the consumers in {ns} were not listed: {why}"));
            return Step::Waits(waits);
        }
    };
    for c in &listed.on_secret {
        waits.push(format!(
            "{c} still reads Secret {ns}/{name} (spec.kubeConfig.secretRef): set its spec.kubeConfig to configMapRef: {{name: {name}}}"
        ));
    }
    if listed.on_config_map.is_empty() {
        waits.push(format!(
            "no Kustomization or HelmRelease in {ns} reads ConfigMap {ns}/{name} yet (spec.kubeConfig.configMapRef): nothing proves Flux reaches the spoke through it"
        ));
    }
    for (c, obj) in &listed.on_config_map {
        if let Some(why) = not_through(obj.as_ref()) {
            waits.push(format!("{c} reads ConfigMap {ns}/{name}, but {why}"));
        }
    }
    if !waits.is_empty() {
        return Step::Waits(waits);
    }
    let ready: Vec<Consumer> = listed
        .on_config_map
        .iter()
        .map(|(c, _)| c.clone())
        .collect();
    match seen.dry_run {
        true => Step::WouldRemove(ready),
        false => Step::Remove(ready),
    }
}

/// The fleet repo's side, once the hub's allows: a consumer committed on `secretRef` to
/// the old Secret but not applied yet keeps it, and so does a tree not read whole.
pub(super) fn with_repo(step: Step, name: &str, in_repo: InRepo) -> Step {
    if let Step::Waits(_) = step {
        return step;
    }
    match in_repo {
        InRepo::Found(found) if found.is_empty() => step,
        InRepo::Found(found) => Step::Waits(
            found
                .into_iter()
                .map(|c| format!("{c} in the fleet repo still reads Secret {name} (spec.kubeConfig.secretRef), though the hub has not applied it yet: set its spec.kubeConfig to configMapRef: {{name: {name}}}"))
                .collect(),
        ),
        InRepo::Unread(n) => Step::Waits(vec![format!(
            "the fleet repo could not be read whole to rule out a consumer on secretRef: {n} YAML files left unread past {} MiB",
            crate::flux::MAX_TOTAL_BYTES >> 20
        )]),
    }
}

/// Whether a consumer on the ConfigMap has reached the spoke through it: its current
/// spec (the one that names the ConfigMap) reconciled and Ready. A Ready True left from
/// before the move (observedGeneration behind), a suspended object (it echoes nothing and
/// keeps its old Ready), or a last run that did not apply what it attempted, does not
/// count. Why not, as a phrase (None: it has).
pub(super) fn not_through(obj: Option<&HubObject>) -> Option<String> {
    let Some(obj) = obj else {
        return Some("it is gone from the hub since it was listed".into());
    };
    if obj.suspended {
        return Some("it is suspended (spec.suspend: true): resume it (flux resume)".into());
    }
    match (obj.generation, obj.observed_generation) {
        (Some(g), Some(o)) if o >= g => {}
        (g, o) => {
            return Some(format!(
                "it has not reconciled its current spec yet (generation {}, observedGeneration {}): its Ready may be from before the move",
                shown(g),
                shown(o)
            ));
        }
    }
    let Some(ready) = obj.condition("Ready") else {
        return Some("it has no Ready condition yet".into());
    };
    if ready.status != "True" {
        let said = crate::text::one_line(
            &format!(
                "{}: {}",
                ready.reason.as_deref().unwrap_or_default(),
                ready.message.as_deref().unwrap_or_default()
            ),
            200,
        );
        return Some(format!("it is Ready {} ({said})", ready.status));
    }
    if let (Some(attempted), Some(applied)) = &obj.revisions
        && attempted != applied
    {
        return Some(crate::text::one_line(
            &format!(
                "its last run attempted revision {attempted} and applied {applied}: it has not applied the current one"
            ),
            300,
        ));
    }
    None
}

fn shown(n: Option<i64>) -> String {
    n.map_or_else(|| "none".into(), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::{Condition, Kind};

    fn consumer(kind: Kind, name: &str) -> Consumer {
        Consumer {
            kind,
            namespace: "flux-system".into(),
            name: name.into(),
        }
    }

    fn obj(generation: i64, observed: i64, ready: &str) -> HubObject {
        HubObject {
            generation: Some(generation),
            observed_generation: Some(observed),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: ready.into(),
                reason: Some("ReconciliationSucceeded".into()),
                message: Some("Applied revision: main@sha1:2".into()),
                ..Condition::default()
            }],
            revisions: (Some("main@sha1:2".into()), Some("main@sha1:2".into())),
            ..HubObject::default()
        }
    }

    fn seen(listed: Result<Listed, HubError>) -> Seen<'static> {
        Seen {
            namespace: "flux-system",
            name: "edge-kubeconfig",
            healthy: true,
            dry_run: false,
            listed,
            unapplied: None,
        }
    }

    fn moved(objs: Vec<Option<HubObject>>) -> Listed {
        Listed {
            on_secret: Vec::new(),
            on_config_map: objs
                .into_iter()
                .enumerate()
                .map(|(i, o)| (consumer(Kind::Kustomization, &format!("k{i}")), o))
                .collect(),
        }
    }

    /// The one reason the step waits for (panics unless it waits for exactly one).
    fn waits_for(step: Step) -> String {
        match step {
            Step::Waits(w) if w.len() == 1 => w[0].clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_a_consumer_whose_current_spec_reconciled_ready_has_moved() {
        let suspended = HubObject {
            suspended: true,
            ..obj(2, 2, "True")
        };
        let mut half_applied = obj(2, 2, "True");
        half_applied.revisions.0 = Some("main@sha1:3".into());
        let no_ready = HubObject {
            conditions: Vec::new(),
            ..obj(2, 2, "True")
        };
        let unobserved = HubObject {
            observed_generation: None,
            ..obj(1, 1, "True")
        };
        for (o, want) in [
            (Some(obj(2, 2, "True")), None),
            (Some(obj(2, 3, "True")), None),
            (None, Some("gone from the hub")),
            (Some(suspended), Some("suspended")),
            // Ready from the spec on secretRef: the move not reconciled yet.
            (
                Some(obj(3, 2, "True")),
                Some("generation 3, observedGeneration 2"),
            ),
            (Some(unobserved), Some("observedGeneration none")),
            (
                Some(obj(2, 2, "False")),
                Some("Ready False (ReconciliationSucceeded"),
            ),
            (Some(obj(2, 2, "Unknown")), Some("Ready Unknown")),
            (Some(no_ready), Some("no Ready condition")),
            (Some(half_applied), Some("attempted revision main@sha1:3")),
        ] {
            match (not_through(o.as_ref()), want) {
                (None, None) => {}
                (Some(why), Some(want)) => assert!(why.contains(want), "{why}"),
                (got, want) => panic!("{o:?}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn the_secret_is_removed_only_when_nothing_reads_it_and_every_reader_of_the_configmap_moved() {
        let k0 = consumer(Kind::Kustomization, "k0");
        let k1 = consumer(Kind::Kustomization, "k1");
        assert_eq!(
            on_hub(&seen(Ok(moved(vec![
                Some(obj(2, 2, "True")),
                Some(obj(5, 5, "True"))
            ])))),
            Step::Remove(vec![k0.clone(), k1])
        );
        // One consumer left on secretRef, though the other moved.
        let mut left = moved(vec![Some(obj(2, 2, "True"))]);
        left.on_secret.push(consumer(Kind::HelmRelease, "apps"));
        let why = waits_for(on_hub(&seen(Ok(left))));
        assert!(
            why.starts_with(
                "HelmRelease flux-system/apps still reads Secret flux-system/edge-kubeconfig"
            ) && why.ends_with("configMapRef: {name: edge-kubeconfig}"),
            "{why}"
        );
        // Nobody on either: nothing proves the ConfigMap works.
        let why = waits_for(on_hub(&seen(Ok(Listed::default()))));
        assert!(
            why.contains("nothing proves Flux reaches the spoke"),
            "{why}"
        );
        // A reader of the ConfigMap not reconciled since the move.
        let why = waits_for(on_hub(&seen(Ok(moved(vec![Some(obj(3, 2, "True"))])))));
        assert!(
            why.starts_with("Kustomization flux-system/k0 reads ConfigMap"),
            "{why}"
        );
        // Not listed: nothing is known.
        let not_listed = HubError::NotListed {
            namespace: "flux-system".into(),
        };
        let why = waits_for(on_hub(&seen(Err(not_listed))));
        assert!(
            why.starts_with("the consumers in flux-system were not listed: "),
            "{why}"
        );
        // The hub's ConfigMap not the commit's, the spoke's own tick not healthy.
        let mut s = seen(Ok(moved(vec![Some(obj(2, 2, "True"))])));
        s.unapplied = Some("it holds another commit's data".into());
        let why = waits_for(on_hub(&s));
        assert!(
            why.starts_with("ConfigMap flux-system/edge-kubeconfig on the hub"),
            "{why}"
        );
        let mut s = seen(Ok(moved(vec![Some(obj(2, 2, "True"))])));
        s.healthy = false;
        assert!(waits_for(on_hub(&s)).contains("committed or failed"));
        // A dry run says what it would do, and does nothing.
        let mut s = seen(Ok(moved(vec![Some(obj(2, 2, "True"))])));
        s.dry_run = true;
        assert_eq!(on_hub(&s), Step::WouldRemove(vec![k0]));
    }

    #[test]
    fn a_consumer_committed_on_secret_ref_but_not_applied_keeps_the_secret() {
        let ready = || on_hub(&seen(Ok(moved(vec![Some(obj(2, 2, "True"))]))));
        assert!(matches!(
            with_repo(ready(), "edge-kubeconfig", InRepo::Found(Vec::new())),
            Step::Remove(_)
        ));
        let pushed = vec!["Kustomization flux-system/late (fluxcd/late.yaml)".to_string()];
        let why = waits_for(with_repo(ready(), "edge-kubeconfig", InRepo::Found(pushed)));
        assert!(
            why.starts_with("Kustomization flux-system/late (fluxcd/late.yaml) in the fleet repo still reads Secret edge-kubeconfig"),
            "{why}"
        );
        let why = waits_for(with_repo(ready(), "edge-kubeconfig", InRepo::Unread(3)));
        assert!(why.contains(": 3 YAML files left unread"), "{why}");
        // Waiting already: the repo changes nothing.
        let waiting = Step::Waits(vec!["x".into()]);
        assert_eq!(
            with_repo(waiting, "edge-kubeconfig", InRepo::Found(Vec::new())),
            Step::Waits(vec!["x".into()])
        );
    }
}
