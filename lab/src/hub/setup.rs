//! What the hub holds and how its controllers behave: the tests' and the demo's knobs.

use serde_json::json;

use super::flux::{condition, git_repository};
use super::{Controller, Flux, FluxObject, HubSim, Key, Kind, ROOT, SimSpoke, SopsKey, boxed};

impl HubSim {
    /// Registers a spoke: its Kustomization exists (Ready, as after an earlier deploy).
    pub fn add_spoke(&self, spoke: SimSpoke) {
        self.add_consumer(
            Kind::Kustomization,
            &spoke.kustomization_namespace,
            &spoke.kustomization_name,
            Some(&spoke.secret_name),
        );
        self.lock().spokes.push(spoke);
    }

    /// A Kustomization or HelmRelease (Ready, as after an earlier deploy) that deploys
    /// with the kubeconfig Secret `secret` of its own namespace (None: to the hub itself).
    pub fn add_consumer(&self, kind: Kind, namespace: &str, name: &str, secret: Option<&str>) {
        let mut st = self.lock();
        st.revision += 1;
        let mut spec = match kind {
            Kind::Kustomization => json!({
                "interval": "10m",
                "path": format!("./clusters/{name}"),
                "prune": true,
                "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
            }),
            Kind::HelmRelease => json!({
                "interval": "10m",
                "chart": {"spec": {"chart": name, "version": "1.x",
                    "sourceRef": {"kind": "HelmRepository", "name": "charts"}}},
            }),
        };
        if let Some(secret) = secret {
            spec["kubeConfig"] = json!({"secretRef": {"name": secret, "key": "value"}});
        }
        let done = match kind {
            Kind::Kustomization => condition(
                "Ready",
                "True",
                "ReconciliationSucceeded",
                "Applied revision: main@sha1:0000000000000000000000000000000000000000",
            ),
            Kind::HelmRelease => condition(
                "Ready",
                "True",
                "InstallSucceeded",
                &format!(
                    "Helm install succeeded for release {namespace}/{name}.v1 with chart {name}@1.0.0"
                ),
            ),
        };
        let obj = json!({
            "apiVersion": kind.api_version(),
            "kind": kind.as_str(),
            "metadata": {
                "name": name,
                "namespace": namespace,
                "generation": 1,
                "resourceVersion": st.revision.to_string(),
                "uid": format!("00000000-0000-4000-8000-{:012}", st.revision),
                "creationTimestamp": "2025-01-01T00:00:00Z",
                "finalizers": ["finalizers.fluxcd.io"],
            },
            "spec": spec,
            "status": {"observedGeneration": 1, "conditions": [done]},
        });
        st.consumers.insert(
            (kind, namespace.to_string(), name.to_string()),
            FluxObject {
                obj,
                pending: None,
                flux: None,
                stalled: false,
                sops: None,
            },
        );
    }

    /// A Kustomization (Ready, as after an earlier deploy) that applies `path` of the
    /// fleet repo to the hub, decrypting with sops (`spec.decryption: {provider: sops,
    /// secretRef: {name: secret}}`): `key` is the age identity that Secret holds.
    pub fn add_sops_kustomization(
        &self,
        namespace: &str,
        name: &str,
        path: &str,
        secret: &str,
        key: SopsKey,
    ) {
        self.add_consumer(Kind::Kustomization, namespace, name, None);
        let mut st = self.lock();
        let key_of = (Kind::Kustomization, namespace.to_string(), name.to_string());
        if let Some(o) = st.consumers.get_mut(&key_of) {
            o.obj["spec"]["path"] = json!(path);
            o.obj["spec"]["decryption"] =
                json!({"provider": "sops", "secretRef": {"name": secret}});
            o.sops = Some(key);
        }
    }

    /// Deletes a GitRepository (the consumers' default source is flux-system/flux-system).
    pub fn remove_git_repository(&self, namespace: &str, name: &str) {
        self.lock().sources.remove(&(
            "gitrepositories".to_string(),
            namespace.to_string(),
            name.to_string(),
        ));
    }

    /// A GitRepository source-controller never fetched: Ready False with this reason and
    /// message, and no artifact (e.g. `GitOperationFailed`, a broken URL).
    pub fn fail_git_repository(&self, namespace: &str, name: &str, reason: &str, message: &str) {
        self.lock().sources.insert(
            ("gitrepositories".into(), namespace.into(), name.into()),
            git_repository(namespace, name, Some((reason, message))),
        );
    }

    /// The root: the Kustomization `flux-system/infra` that applies the SealedSecrets
    /// (their `kustomize.toolkit.fluxcd.io/*` labels name it) from the GitRepository
    /// `flux-system/flux-system`, to the hub itself.
    pub fn add_root(&self) {
        self.add_root_at("./fluxcd");
    }

    /// [`HubSim::add_root`] with this spec.path.
    pub fn add_root_at(&self, path: &str) {
        self.add_consumer(Kind::Kustomization, ROOT.0, ROOT.1, None);
        if let Some(o) = self.lock().consumers.get_mut(&(
            Kind::Kustomization,
            ROOT.0.to_string(),
            ROOT.1.to_string(),
        )) {
            o.obj["spec"]["path"] = json!(path);
        }
    }

    /// A GitRepository fetched before whose fetches now fail, as source-controller leaves
    /// it: Ready False with this reason and message, FetchFailed True, the old artifact
    /// kept. Flux applies that artifact: the SealedSecrets stay as they were.
    pub fn break_git_repository(&self, namespace: &str, name: &str, reason: &str, message: &str) {
        let mut st = self.lock();
        let Some(obj) =
            st.sources
                .get_mut(&("gitrepositories".into(), namespace.into(), name.into()))
        else {
            return;
        };
        let stored = obj["status"]["conditions"][0]["message"].clone();
        obj["status"]["conditions"] = json!([
            condition("FetchFailed", "True", reason, message),
            condition("Ready", "False", reason, message),
            condition(
                "ArtifactInStorage",
                "True",
                "Succeeded",
                stored.as_str().unwrap_or_default()
            ),
        ]);
    }

    /// Uninstalls a kind's CRD (its objects go with it), as a Flux without helm-controller.
    pub fn remove_kind(&self, kind: Kind) {
        let mut st = self.lock();
        st.consumers.retain(|(k, _, _), _| *k != kind);
        st.not_served.push(kind);
    }

    /// Names the controller Service's port 8080 (`""`: unnamed, as the upstream
    /// controller.yaml installs it).
    pub fn set_port_name(&self, name: &str) {
        self.lock().port_name = name.into();
    }

    /// Labels the controller Service `app.kubernetes.io/version: <version>`, as the
    /// upstream Helm chart does (its appVersion, without a leading v).
    pub fn set_version_label(&self, version: &str) {
        self.lock().version_label = Some(version.into());
    }

    /// The next `times` requests whose path contains `path` are answered 429 Too Many
    /// Requests with `Retry-After: retry_after_secs`, as API Priority and Fairness does.
    pub fn throttle(&self, path: &str, times: u32, retry_after_secs: u64) {
        self.lock().throttle = Some((path.into(), times, retry_after_secs));
    }

    /// The next unseal writes Synced False (as a Secret update conflict does), and the
    /// controller's retry, at the next read, succeeds.
    pub fn fail_next_unseal(&self) {
        self.lock().fail_next_unseal = true;
    }

    /// Deletes a Kustomization or HelmRelease.
    pub fn remove_consumer(&self, kind: Kind, namespace: &str, name: &str) {
        self.lock()
            .consumers
            .remove(&(kind, namespace.to_string(), name.to_string()));
    }

    /// Sets a consumer's spec.kubeConfig.secretRef.key (None: unset, so Flux reads
    /// `value`, else `value.yaml`).
    pub fn set_consumer_key(&self, kind: Kind, namespace: &str, name: &str, key: Option<&str>) {
        if let Some(o) =
            self.lock()
                .consumers
                .get_mut(&(kind, namespace.to_string(), name.to_string()))
        {
            let r = &mut o.obj["spec"]["kubeConfig"]["secretRef"];
            match (key, r.as_object_mut()) {
                (Some(k), Some(r)) => {
                    r.insert("key".into(), json!(k));
                }
                (None, Some(r)) => {
                    r.remove("key");
                }
                (_, None) => {}
            }
        }
    }

    /// Sets a consumer's spec.serviceAccountName: Flux impersonates that ServiceAccount of
    /// the consumer's namespace on the spoke.
    pub fn set_consumer_service_account(&self, kind: Kind, namespace: &str, name: &str, sa: &str) {
        if let Some(o) =
            self.lock()
                .consumers
                .get_mut(&(kind, namespace.to_string(), name.to_string()))
        {
            o.obj["spec"]["serviceAccountName"] = json!(sa);
        }
    }

    /// Sets an annotation on a consumer (e.g. a huge one, as a hostile hub could serve).
    pub fn annotate_consumer(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        key: &str,
        value: &str,
    ) {
        if let Some(o) =
            self.lock()
                .consumers
                .get_mut(&(kind, namespace.to_string(), name.to_string()))
        {
            o.obj["metadata"]["annotations"][key] = json!(value);
        }
    }

    /// How this consumer finishes a requested reconcile, whatever the hub's `flux`.
    pub fn set_consumer_flux(&self, kind: Kind, namespace: &str, name: &str, f: Flux) {
        if let Some(o) =
            self.lock()
                .consumers
                .get_mut(&(kind, namespace.to_string(), name.to_string()))
        {
            o.flux = Some(f);
        }
    }

    /// A HelmRelease whose upgrades failed until helm-controller stopped retrying, with
    /// the status it then writes (Ready False, Stalled True RetriesExceeded). A request
    /// is only echoed, until one comes with reconcile.fluxcd.io/resetAt equal to its
    /// requestedAt: then the failure counts are reset and it runs as the hub's `flux` says.
    pub fn exhaust_retries(&self, namespace: &str, name: &str, error: &str) {
        let key = (Kind::HelmRelease, namespace.to_string(), name.to_string());
        if let Some(o) = self.lock().consumers.get_mut(&key) {
            o.stalled = true;
            let failed = format!(
                "Helm upgrade failed for release {namespace}/{name} with chart {name}@1.0.0: {error}"
            );
            let status = &mut o.obj["status"];
            status["conditions"] = json!([
                condition("Ready", "False", "UpgradeFailed", &failed),
                condition(
                    "Stalled",
                    "True",
                    "RetriesExceeded",
                    "Failed to upgrade after 1 attempt(s)"
                ),
                condition("Released", "False", "UpgradeFailed", &failed),
            ]);
            status["failures"] = json!(1);
            status["upgradeFailures"] = json!(1);
            status["lastAttemptedReleaseAction"] = json!("upgrade");
        }
    }

    /// The controller's key rotation: a new certificate; it keeps the old keys to
    /// decrypt what is still sealed to them, as the real controller does.
    pub fn renew_key(&self, cert_pem: &str, key: impl Key + 'static) {
        let mut st = self.lock();
        st.cert_pem = cert_pem.into();
        st.keys.push(Box::new(key));
    }

    /// Replaces the controller's private keys (a lost key: nothing old unseals).
    pub fn set_keys<K: Key + 'static>(&self, keys: impl IntoIterator<Item = K>) {
        self.lock().keys = boxed(keys);
    }

    pub fn set_controller(&self, c: Controller) {
        self.lock().controller = c;
    }

    pub fn set_flux(&self, f: Flux) {
        self.lock().flux = f;
    }
}
