//! A real hub with Flux's real controllers (`flux_controllers`), real spokes, and the
//! fleet repo in Flux's layout served over HTTP (`git_http`): what the real-Flux tests
//! (tests/suite/realstack/flux_real/) and the recovery benchmark (benches/recovery.rs)
//! start. Nothing here writes a status: every Ready is the controllers' own.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::NodeOptions;
use crate::fleet::Fleet;
use crate::git::{commit, git};

use super::controller_manager::ControllerManager;
use super::flux_controllers::{self as flux, FluxControllers, FluxOptions, Ready, ready};
use super::git_http::GitHttp;
use super::hub::{HubOptions, RealHub};
use super::kube::KubeApi;
use super::spoke::real_api_with;
use super::wait_until;

const PINNED: &str = "keys/sealed-secrets.pem";
/// The Secret holding the hub's age key, as Flux's SOPS guide names it.
pub const AGE_SECRET: &str = "sops-age";
pub const WAIT: Duration = Duration::from_secs(120);

/// How often the layout's objects reconcile on their own.
#[derive(Clone, Copy, Debug)]
pub struct Intervals {
    /// The GitRepository `fleet`.
    pub source: &'static str,
    /// The root Kustomization `flux-system`, which applies `fluxcd/`.
    pub root: &'static str,
    /// The spokes' Kustomizations and HelmReleases.
    pub consumers: &'static str,
}

impl Intervals {
    /// The tests': a push reaches the hub within seconds without anyone asking, and
    /// only a reconcile request moves the consumers (Flux's usual 10m).
    pub const TESTS: Intervals = Intervals {
        source: "3s",
        root: "3s",
        consumers: "10m",
    };
    /// Flux's usual, as `flux bootstrap` writes them: GitRepository 1m, Kustomizations
    /// and HelmReleases 10m.
    pub const FLUX: Intervals = Intervals {
        source: "1m",
        root: "10m",
        consumers: "10m",
    };
}

/// What the fleet commits for the hub.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A SealedSecret per spoke, unsealed by the real Sealed Secrets controller.
    SealedSecrets,
    /// `sealing.format: sops` for the hub's age key (made for the run, in memory), which
    /// the root Kustomization decrypts (`spec.decryption`, the key in [`AGE_SECRET`]).
    Sops,
    /// `credential.mode: federated`: the hub is its own ServiceAccount issuer, each spoke's
    /// API server reads the file spokekeeper writes through the federated node recipe
    /// (installed for the lab's user), the controllers present their own tokens
    /// (`FluxOptions::pod_identity`) through each spoke's committed ConfigMap.
    Federated,
}

/// The hub ServiceAccount spokekeeper checks federated spokes with.
pub const CHECK_ACCOUNT: &str = "spokekeeper-check";

/// A real hub with Flux's controllers, real spokes, and the fleet repo in Flux's layout.
pub struct RealFlux {
    // Drop order: the controllers, the git server, the spokes, then the hub.
    pub controllers: FluxControllers,
    pub git: GitHttp,
    signers: Vec<Option<ControllerManager>>,
    pub spoke_apis: Vec<KubeApi>,
    pub fleet: Fleet,
    pub hub: RealHub,
    /// With [`Format::Sops`], the hub's age recipient the fleet encrypts to.
    pub age_recipient: Option<String>,
    pub format: Format,
}

impl RealFlux {
    /// `n` real spokes (each with a CSR signer when `signers`), `extra` top-level lines
    /// in spokekeeper.yaml.
    pub fn start(n: usize, signers: bool, extra: &str) -> RealFlux {
        RealFlux::start_with(n, signers, extra, |_| {})
    }

    /// [`RealFlux::start`], with `edit` applied to the seed's work tree after the layout
    /// is written and before it is pushed.
    pub fn start_with(n: usize, signers: bool, extra: &str, edit: impl FnOnce(&Path)) -> RealFlux {
        RealFlux::start_layout(n, signers, extra, Intervals::TESTS, edit)
    }

    /// [`RealFlux::start`], the fleet writing `format`.
    pub fn start_format(n: usize, signers: bool, extra: &str, format: Format) -> RealFlux {
        RealFlux::launch(n, signers, extra, Intervals::TESTS, format, |_| {})
    }

    /// [`RealFlux::start_format`], with `edit` applied to the seed's work tree as
    /// [`RealFlux::start_with`] does.
    pub fn start_format_with(
        n: usize,
        extra: &str,
        format: Format,
        edit: impl FnOnce(&Path),
    ) -> RealFlux {
        RealFlux::launch(n, false, extra, Intervals::TESTS, format, edit)
    }

    /// [`RealFlux::start_with`], the layout reconciling every `intervals`.
    pub fn start_layout(
        n: usize,
        signers: bool,
        extra: &str,
        intervals: Intervals,
        edit: impl FnOnce(&Path),
    ) -> RealFlux {
        RealFlux::launch(n, signers, extra, intervals, Format::SealedSecrets, edit)
    }

    /// [`Format::Federated`], kustomize- and helm-controller run with `flux_args` too.
    pub fn start_federated_with(n: usize, extra: &str, flux_args: &[&str]) -> RealFlux {
        let format = (Format::Federated, flux_args);
        RealFlux::launch_args(n, (false, extra), Intervals::TESTS, format, |_| {})
    }

    /// The stack in `format`, the layout reconciling every `intervals`, `edit` run on the
    /// seed clone before the layout is pushed.
    pub fn launch(
        n: usize,
        signers: bool,
        extra: &str,
        intervals: Intervals,
        format: Format,
        edit: impl FnOnce(&Path),
    ) -> RealFlux {
        RealFlux::launch_args(n, (signers, extra), intervals, (format, &[]), edit)
    }

    /// [`RealFlux::launch`], kustomize- and helm-controller started with `args` too
    /// (e.g. [`flux::OBJECT_LEVEL_IDENTITY`]).
    pub fn launch_args(
        n: usize,
        (signers, extra): (bool, &str),
        intervals: Intervals,
        (format, args): (Format, &[&str]),
        edit: impl FnOnce(&Path),
    ) -> RealFlux {
        let federated = format == Format::Federated;
        let hub = RealHub::start(&HubOptions {
            own_issuer: federated,
            ..HubOptions::default()
        });
        let node = NodeOptions {
            api: false,
            api_port: 6443,
            ..NodeOptions::default()
        };
        let mut fleet = Fleet::new(&vec![node; n]);
        let spoke_apis: Vec<KubeApi> = fleet
            .nodes
            .iter()
            .map(|n| real_api_with(n, &hub.etcd, hub.dir(), 0, federated))
            .collect();
        let signers = spoke_apis
            .iter()
            .zip(&fleet.nodes)
            .map(|(api, node)| {
                signers.then(|| ControllerManager::start(api, node.pki(), hub.dir()))
            })
            .collect();
        let age = (format == Format::Sops).then(age::x25519::Identity::generate);
        let age_recipient = age.as_ref().map(|a| a.to_public().to_string());
        let sealing = age_recipient
            .as_ref()
            .map(|r| format!("  format: sops\n  age_recipients: [{r}]\n"))
            .unwrap_or_default();
        let trust = if federated {
            federation(&hub, &mut fleet)
        } else {
            String::new()
        };
        let mut text = fleet
            .builder()
            .sealing_cert(fleet.clone.join(PINNED))
            .sealing(&sealing)
            .top(&trust)
            .yaml();
        // After the spokes, where the tests that edit spokes look for it.
        text.push_str(&format!(
            "hub:\n  kubeconfig: {}\n  verify_timeout: 90s\n{extra}",
            hub.admin_kubeconfig().display()
        ));
        std::fs::write(&fleet.config, text).unwrap();

        // The layout, pushed from the seed clone as a person would.
        let seed = fleet.dir.path().join("seed");
        let reference = if federated {
            "configMapRef"
        } else {
            "secretRef"
        };
        flux::write_layout_via(&seed, n, intervals.consumers, reference);
        edit(&seed);
        git(&seed, &["add", "-A"]);
        commit(&seed, "flux: the spokes' Kustomizations and HelmReleases");
        git(&seed, &["push", "--quiet", "origin", "HEAD:main"]);

        let git_http = GitHttp::serve(fleet.dir.path());
        let controllers = FluxControllers::start(
            &hub,
            &FluxOptions {
                pod_identity: federated,
                args: args.iter().map(ToString::to_string).collect(),
                ..FluxOptions::default()
            },
        );
        if let Some(identity) = &age {
            flux::age_secret(&hub, AGE_SECRET, identity);
        }
        flux::bootstrap(
            &hub,
            &git_http.url("fleet.git"),
            intervals.source,
            intervals.root,
            age.is_some().then_some(AGE_SECRET),
        );
        let stack = RealFlux {
            controllers,
            git: git_http,
            signers,
            spoke_apis,
            fleet,
            hub,
            age_recipient,
            format,
        };
        stack.wait_ready("gitrepository", "fleet", None);
        stack.wait_ready("kustomization", "flux-system", None);
        stack
    }

    /// What a spoke's hub report calls the delivery of its Secret: `synced` (a
    /// SealedSecret unsealed) or `decrypted` (a sops file applied).
    pub fn delivery(&self) -> &'static str {
        match self.format {
            Format::Sops => "decrypted",
            Format::SealedSecrets => "synced",
            Format::Federated => "applied",
        }
    }

    /// Waits until `kind` `name` is Ready=True, having handled `requested` if given.
    pub fn wait_ready(&self, kind: &str, name: &str, requested: Option<&str>) -> Ready {
        self.wait_for(kind, name, "Ready=True", |r| {
            r.status == "True" && requested.is_none_or(|at| r.last_handled == at)
        })
    }

    pub fn wait_for(
        &self,
        kind: &str,
        name: &str,
        what: &str,
        ok: impl Fn(&Ready) -> bool,
    ) -> Ready {
        self.wait_for_in(flux::NS, kind, name, what, ok)
    }

    /// [`RealFlux::wait_for`] of `kind` `name` in namespace `ns`.
    pub fn wait_for_in(
        &self,
        ns: &str,
        kind: &str,
        name: &str,
        what: &str,
        ok: impl Fn(&Ready) -> bool,
    ) -> Ready {
        wait_until(
            &format!("{kind} {ns}/{name}: {what}"),
            WAIT,
            || match flux::condition_in(&self.hub, ns, kind, name, "Ready") {
                Some(r) if ok(&r) => Ok(r),
                other => Err(format!("{other:?}\n{}", self.controllers.tail(15))),
            },
        )
    }

    /// Waits until `kind` `name` in namespace `ns` is Ready=True.
    pub fn wait_ready_in(&self, ns: &str, kind: &str, name: &str) -> Ready {
        self.wait_for_in(ns, kind, name, "Ready=True", |r| r.status == "True")
    }

    pub fn rotate_json(&self) -> (i32, Value, String) {
        let (code, report, err) = self.fleet.rotate_json(&["--all"]);
        (
            code,
            report,
            format!("{err}\n{}", self.controllers.tail(20)),
        )
    }

    /// Spoke i's API server restarted on its node's PKI as it is now (after a change of
    /// its CAs or serving chain), on the storage of `generation`.
    pub fn restart_spoke(&mut self, i: usize, generation: u32) {
        let federated = self.format == Format::Federated;
        let api = &mut self.spoke_apis[i];
        api.stop();
        *api = real_api_with(
            &self.fleet.nodes[i],
            &self.hub.etcd,
            self.hub.dir(),
            generation,
            federated,
        );
    }

    /// Spoke i's reinstall: new CAs, empty storage, the API server (and its signer)
    /// restarted.
    pub fn rebuild(&mut self, i: usize, generation: u32) {
        if self.format == Format::Federated {
            // A reinstall leaves no trust of the hub behind: the file is gone.
            let api = &mut self.spoke_apis[i];
            api.stop();
            let node = &mut self.fleet.nodes[i];
            node.rebuild();
            let _ = std::fs::remove_file(super::spoke::authentication_config_path(node));
            *api = real_api_with(node, &self.hub.etcd, self.hub.dir(), generation, true);
            return;
        }
        super::spoke::rebuild(
            &mut self.fleet.nodes[i],
            &mut self.spoke_apis[i],
            &mut self.signers[i],
            &self.hub.etcd,
            self.hub.dir(),
            generation,
        );
    }

    /// What the controllers put on spoke i, read with the spoke's admin: the
    /// Kustomization's ConfigMap and the Helm release's.
    pub fn assert_deployed(&self, i: usize) {
        let api = &self.spoke_apis[i];
        let app = api.get_json(&[
            "configmap",
            "spoke-app",
            "-n",
            "default",
            "--show-managed-fields",
        ]);
        assert_eq!(app["data"]["spoke"], format!("spoke{i}"), "{app:#}");
        let managers: Vec<&str> = app["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["manager"].as_str())
            .collect();
        assert_eq!(managers, ["kustomize-controller"], "{app:#}");
        let chart = api.get_json(&["configmap", "spoke-config", "-n", "default"]);
        assert_eq!(chart["data"]["spoke"], format!("spoke{i}"), "{chart:#}");
        assert_eq!(
            chart["metadata"]["annotations"]["meta.helm.sh/release-name"], "spoke-config",
            "{chart:#}"
        );
        let releases = api.get_json(&[
            "secrets",
            "-n",
            "default",
            "-l",
            "owner=helm,name=spoke-config,status=deployed",
        ]);
        assert_eq!(
            releases["items"].as_array().map(Vec::len),
            Some(1),
            "{releases:#}"
        );
    }

    /// Spoke i's hub report names exactly its Kustomization and HelmRelease, each Ready,
    /// and says what `kubectl get` says of them on the hub; returns the requestedAt set.
    pub fn assert_consumers_ready(&self, report: &Value, i: usize) -> String {
        let spoke = &report["spokes"][i];
        let listed = spoke["hub"]["consumers"]
            .as_array()
            .unwrap_or_else(|| panic!("{spoke:#}"));
        let mut names: Vec<String> = listed
            .iter()
            .map(|c| format!("{}/{}/{}", c["kind"], c["namespace"], c["name"]).replace('"', ""))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                format!("HelmRelease/flux-system/spoke{i}"),
                format!("Kustomization/flux-system/spoke{i}")
            ],
            "{spoke:#}"
        );
        let requested = spoke["hub"]["requested_at"]
            .as_str()
            .unwrap_or_else(|| panic!("{spoke:#}"))
            .to_string();
        for c in listed {
            assert_eq!(c["ready"]["ok"], true, "{spoke:#}");
            let kind = c["kind"].as_str().unwrap().to_lowercase();
            let live = ready(&self.hub, &kind, &format!("spoke{i}")).expect("Ready");
            assert_eq!(c["ready"]["status"], live.status, "{spoke:#}\n{live:?}");
            assert_eq!(c["ready"]["reason"], live.reason, "{spoke:#}\n{live:?}");
            assert_eq!(live.status, "True", "{live:?}");
            // A consumer asked again during the wait (a HelmRelease reset) says so.
            let asked = c["requested_at"].as_str().unwrap_or(&requested);
            assert_eq!(live.last_handled, asked, "{live:?}");
            assert_eq!(live.observed_generation, live.generation, "{live:?}");
        }
        requested
    }
}

/// A federated fleet's trust: the federated recipe on every node, spokekeeper's check
/// ServiceAccount on the hub, the hub's CA beside the configuration; the top-level lines
/// of spokekeeper.yaml that use them.
fn federation(hub: &RealHub, fleet: &mut Fleet) -> String {
    for node in &mut fleet.nodes {
        crate::recipe::install_federated(node);
    }
    hub.api.apply(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {CHECK_ACCOUNT}\n  namespace: flux-system\n"
    ));
    let ca = fleet.dir.path().join("hub-ca.pem");
    std::fs::write(&ca, &hub.pki.parts.ca_pem).expect("write the hub's CA");
    let issuer = hub.issuer.clone().expect("the hub is its own issuer");
    format!(
        "ssh:\n  user: {user}\ncredential:\n  mode: federated\n  federated:\n    issuer: \"{issuer}\"\n    \
         issuer_ca: {ca}\n    check_as: flux-system/{CHECK_ACCOUNT}\n",
        user = crate::LAB_USER,
        ca = ca.display(),
    )
}
