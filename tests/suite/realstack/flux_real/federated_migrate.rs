//! Issue 42 item 6: a sealed spoke moves to federated without a gap, on the real
//! components. Switched, its ConfigMap is committed beside the SealedSecret; the operator
//! moves the consumers to `configMapRef` in a commit of their own; the next tick removes
//! the SealedSecret's file, and no tick before does. kubectl watches the Kustomization and
//! the HelmRelease on the hub the whole time: neither ever reports Ready False. From
//! minted, the minted generation's binding goes after that push, the federated one stays.

use super::*;

use std::process::{Child, Stdio};

use support::realstack::real_flux::Intervals;

pub(super) const SEALED: &str = "fluxcd/spoke0-kubeconfig-sealed.yaml";
pub(super) const CONFIG_MAP: &str = "fluxcd/spoke0-kubeconfig.yaml";
pub(super) const CONSUMERS: [&str; 2] = [
    "HelmRelease flux-system/spoke0",
    "Kustomization flux-system/spoke0",
];

/// Whether the remote's main holds `rel`.
pub(super) fn on_remote(stack: &RealFlux, rel: &str) -> bool {
    !git(
        &stack.fleet.remote,
        &["ls-tree", "--name-only", "main", "--", rel],
    )
    .trim()
    .is_empty()
}

/// spokekeeper.yaml's credential.mode `from` made `to` (the federated stack's is global).
pub(super) fn set_mode(stack: &RealFlux, from: &str, to: &str) {
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    let edited = text.replacen(&format!("  mode: {from}\n"), &format!("  mode: {to}\n"), 1);
    assert_ne!(edited, text, "{text}");
    std::fs::write(&stack.fleet.config, edited).unwrap();
}

/// spoke 0's Kustomization and HelmRelease reading its credential through `to` instead
/// of `from`, in the work tree `dir`.
fn reference(dir: &Path, from: &str, to: &str) {
    let path = dir.join("fluxcd/spoke0.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let moved = text.replace(&format!("{from}:\n"), &format!("{to}:\n"));
    assert_eq!(moved.matches(&format!("{to}:\n")).count(), 2, "{moved}");
    std::fs::write(&path, moved).unwrap();
}

/// The operator's commit: spoke 0's consumers on `configMapRef`, pushed from the seed
/// clone brought up to the remote first.
fn move_consumers(stack: &RealFlux) {
    let seed = stack.fleet.dir.path().join("seed");
    git(&seed, &["fetch", "--quiet", "origin", "main"]);
    git(&seed, &["reset", "--quiet", "--hard", "FETCH_HEAD"]);
    reference(&seed, "secretRef", "configMapRef");
    git(&seed, &["add", "-A"]);
    support::git::commit(&seed, "spoke0: read the ConfigMap (federated)");
    git(&seed, &["push", "--quiet", "origin", "HEAD:main"]);
}

/// Node 0 as the plain node recipe leaves it (the lab's: `sudo cat` of its kubeconfig,
/// no forced command), before any federated recipe, and `ssh.sudo` set for it (the
/// federated recipe's forced command ignores it).
pub(super) fn plain_recipe(stack: &mut RealFlux) {
    let text = std::fs::read_to_string(&stack.fleet.config).unwrap();
    let user = format!("ssh:\n  user: {}\n", support::LAB_USER);
    let edited = text.replacen(&user, &format!("{user}  sudo: true\n"), 1);
    assert_ne!(edited, text, "{text}");
    std::fs::write(&stack.fleet.config, edited).unwrap();
    let node = &mut stack.fleet.nodes[0];
    node.set_authorized_key_options(support::LAB_USER, "");
    let rule = format!(
        "{} ALL=(root) NOPASSWD: /usr/bin/cat {}\n",
        support::LAB_USER,
        node.kubeconfig_path.display()
    );
    node.set_sudoers(&rule).unwrap();
}

/// The tick's migration of spoke 0, asserting the tick itself went well.
pub(super) fn tick(stack: &RealFlux) -> Value {
    let (code, report, err) = stack.rotate_json();
    assert_eq!(code, 0, "{report:#}\n{err}");
    report["spokes"][0].clone()
}

/// A Ready condition as a watch saw it: status, reason, message.
type Seen = (String, String, String);

/// `kubectl get -w` of spoke 0's Kustomization and HelmRelease on the hub, each state
/// the API server sends written to a file of its own.
struct Watch {
    watching: Vec<(&'static str, Child, std::path::PathBuf)>,
}

impl Watch {
    fn start(stack: &RealFlux) -> Watch {
        let watching = ["kustomization", "helmrelease"]
            .into_iter()
            .map(|kind| {
                let out = stack.hub.dir().join(format!("watch-{kind}.json"));
                let file = std::fs::File::create(&out).unwrap();
                let child = stack
                    .hub
                    .api
                    .kubectl_command()
                    .args(["get", kind, "spoke0", "-n", flux::NS, "--watch"])
                    .args(["--output-watch-events", "-o", "json", "--request-timeout=0"])
                    .stdout(Stdio::from(file))
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                (kind, child, out)
            })
            .collect();
        Watch { watching }
    }

    /// Per kind, the Ready conditions seen (status, reason, message), in order.
    fn stop(mut self) -> Vec<(&'static str, Vec<Seen>)> {
        let mut seen = Vec::new();
        for (kind, child, out) in &mut self.watching {
            let _ = child.kill();
            let _ = child.wait();
            let text = std::fs::read_to_string(&*out).unwrap();
            // The last event may be cut short by the kill.
            let ready = serde_json::Deserializer::from_str(&text)
                .into_iter::<Value>()
                .map_while(Result::ok)
                .filter_map(|event| {
                    let c = event["object"]["status"]["conditions"]
                        .as_array()?
                        .iter()
                        .find(|c| c["type"] == "Ready")?
                        .clone();
                    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                    Some((text("status"), text("reason"), text("message")))
                })
                .collect();
            seen.push((*kind, ready));
        }
        seen
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        for (_, child, _) in &mut self.watching {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The problems `status` finds with spoke 0, and its exit code.
fn status_problems(stack: &RealFlux) -> (i32, Vec<String>) {
    let (code, out, err) = stack.fleet.run(&["status", "-o", "json"]);
    let status: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let problems = status["spokes"][0]["problems"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some(p.as_str()?.to_string()))
        .collect();
    (code, problems)
}

/// The migration's consumers on secretRef, as the tick names them.
fn remaining(spoke: &Value) -> Vec<String> {
    assert_eq!(spoke["migration"]["state"], "waits", "{spoke:#}");
    assert_eq!(spoke["migration"]["file"], SEALED, "{spoke:#}");
    let all = spoke["migration"]["remaining"]
        .as_array()
        .unwrap_or_else(|| panic!("{spoke:#}"));
    let mut on_secret: Vec<String> = all
        .iter()
        .filter_map(|r| r.as_str())
        .filter_map(|r| r.split_once(" still reads Secret flux-system/spoke0-kubeconfig"))
        .map(|(consumer, _)| consumer.to_string())
        .collect();
    on_secret.sort();
    on_secret
}

/// `removed`, a tick's report of spoke 0, says the old Secret was removed with both
/// consumers Ready through the ConfigMap, and the remote's last commit removed it alone.
fn assert_removed(stack: &RealFlux, removed: &Value) {
    assert_eq!(removed["action"], "healthy", "{removed:#}");
    let migration = &removed["migration"];
    assert_eq!(migration["state"], "removed", "{removed:#}");
    let mut ready: Vec<&str> = migration["ready"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    ready.sort();
    assert_eq!(ready, CONSUMERS, "{removed:#}");
    assert!(migration["problem"].is_null(), "{removed:#}");
    assert!(!on_remote(stack, SEALED) && on_remote(stack, CONFIG_MAP));
    let last = git(
        &stack.fleet.remote,
        &["show", "--name-status", "--format=%s", "main"],
    );
    assert_eq!(
        last.trim(),
        format!(
            "spoke0: remove the old Secret flux-system/spoke0-kubeconfig: migrated to federated\n\nD\t{SEALED}"
        ),
    );
}

/// The move of `stack`'s spoke 0 from `mode` to federated, with kubectl watching its
/// Kustomization and HelmRelease from the first commit on `mode` to the end; returns the
/// report of the tick that removed the old Secret.
fn moved_from(stack: &mut RealFlux, mode: &str) -> Value {
    plain_recipe(stack);
    set_mode(stack, "federated", mode);
    let spoke = tick(stack);
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["hub"]["synced"]["ok"], true, "{spoke:#}");
    assert!(spoke["migration"].is_null(), "{spoke:#}");
    stack.assert_consumers_ready(&serde_json::json!({"spokes": [spoke]}), 0);
    assert!(on_remote(stack, SEALED) && !on_remote(stack, CONFIG_MAP));

    let watch = Watch::start(stack);
    // The switch: the federated recipe on the node, then the mode.
    support::recipe::install_federated(&mut stack.fleet.nodes[0]);
    set_mode(stack, mode, "federated");
    let stack = &*stack;
    // The ConfigMap beside the Secret; the consumers still on the Secret.
    let spoke = tick(stack);
    assert_eq!(spoke["action"], "rotated", "{spoke:#}");
    assert_eq!(spoke["hub"]["applied"]["ok"], true, "{spoke:#}");
    assert_eq!(remaining(&spoke), CONSUMERS, "{spoke:#}");
    assert!(on_remote(stack, SEALED) && on_remote(stack, CONFIG_MAP));
    // A healthy tick: still on the Secret, nothing removed.
    let commits = stack.fleet.remote_log().len();
    let spoke = tick(stack);
    assert_eq!(spoke["action"], "healthy", "{spoke:#}");
    assert_eq!(remaining(&spoke), CONSUMERS, "{spoke:#}");
    assert_eq!(stack.fleet.remote_log().len(), commits);
    // status names each of them too.
    let (code, problems) = status_problems(stack);
    let mut named: Vec<&str> = problems
        .iter()
        .filter_map(|p| p.split_once(" still reads the old Secret flux-system/spoke0-kubeconfig "))
        .map(|(consumer, _)| consumer)
        .collect();
    named.sort();
    assert_eq!((code, named), (1, CONSUMERS.to_vec()), "{problems:#?}");

    moved(stack);

    // The next tick removes the Secret's file in a commit of its own.
    let removed = tick(stack);
    assert_removed(stack, &removed);

    // The root prunes the SealedSecret; Flux still reaches the spoke through the ConfigMap.
    wait_until("the SealedSecret pruned from the hub", WAIT, || {
        let args = ["get", "sealedsecret", "spoke0-kubeconfig", "-n", flux::NS];
        match stack.hub.api.try_kubectl(&args) {
            Err(e) if e.contains("NotFound") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    for kind in ["kustomization", "helmrelease"] {
        let at = request_reconcile(&stack.hub, kind, "spoke0");
        stack.wait_ready(kind, "spoke0", Some(&at));
    }
    stack.assert_deployed(0);
    let spoke = tick(stack);
    assert!(
        spoke["migration"].is_null(),
        "nothing left to move: {spoke:#}"
    );
    assert_eq!(status_problems(stack), (0, Vec::new()));

    for (kind, ready) in watch.stop() {
        assert!(!ready.is_empty(), "{kind}: the watch saw nothing");
        let failed: Vec<_> = ready.iter().filter(|(s, _, _)| s == "False").collect();
        assert!(failed.is_empty(), "{kind} failed a reconcile: {failed:#?}");
    }
    removed
}

/// The operator's commit moving spoke 0's consumers to configMapRef, and the controllers
/// reconciling the new spec through the ConfigMap, Ready.
pub(super) fn moved(stack: &RealFlux) {
    let generation = |kind| {
        flux::ready(&stack.hub, kind, "spoke0")
            .expect("Ready")
            .generation
    };
    let before = ["kustomization", "helmrelease"].map(|kind| (kind, generation(kind)));
    move_consumers(stack);
    for (kind, was) in before {
        let reads = || {
            let path = "jsonpath={.spec.kubeConfig.configMapRef.name}";
            let got =
                stack
                    .hub
                    .api
                    .try_kubectl(&["get", kind, "spoke0", "-n", flux::NS, "-o", path]);
            got.is_ok_and(|n| n == "spoke0-kubeconfig")
        };
        stack.wait_for(kind, "spoke0", "Ready=True on configMapRef", |r| {
            r.status == "True"
                && r.generation > was
                && r.observed_generation == r.generation
                && reads()
        });
    }
}

/// The federated stack (the hub its own issuer, the federated node recipe, the
/// controllers' own tokens), spoke 0's consumers on secretRef.
pub(super) fn on_secret_ref(signers: bool) -> RealFlux {
    RealFlux::launch(
        1,
        signers,
        "",
        Intervals::TESTS,
        Format::Federated,
        |seed| reference(seed, "configMapRef", "secretRef"),
    )
}

#[test]
fn an_extracted_spoke_moves_to_federated_and_its_secret_goes_only_once_flux_reads_the_configmap() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let removed = moved_from(&mut on_secret_ref(false), "extracted");
    assert!(removed["revoked"].is_null(), "{removed:#}");
}

/// The same move from minted: after the removal's push, the minted generation's binding
/// is deleted on the spoke and the federated one stays.
#[test]
fn a_minted_spoke_moves_to_federated_and_its_minted_binding_goes_after_the_secret() {
    crate::support::requires!(ROOT, REAL_STACK);
    let _heavy = support::timing::heavy();
    let mut stack = on_secret_ref(true);
    let removed = moved_from(&mut stack, "minted");
    assert_eq!(
        removed["revoked"],
        serde_json::json!(["spokekeeper.hub.spoke0.g1"]),
        "{removed:#}"
    );
    let bindings = stack.spoke_apis[0].kubectl(&["get", "clusterrolebindings", "-o", "name"]);
    assert!(
        !bindings.contains("spokekeeper.hub.spoke0.g1"),
        "{bindings}"
    );
    assert!(
        bindings.contains("spokekeeper.hub.spoke0.federated"),
        "{bindings}"
    );
}
