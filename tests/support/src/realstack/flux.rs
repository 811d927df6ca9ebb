//! The lab's Flux, in a thread: it applies what the fleet repo's branch holds to the real
//! hub (server-side apply of every file under `fluxcd/`, as kustomize-controller applies a
//! source), and answers reconcile requests on Kustomizations and HelmReleases the way
//! their controllers report them: it loads the consumer's kubeconfig Secret with Flux's
//! own code (`flux-kubeconfig`, built from the fluxcd modules), calls the spoke with it,
//! and writes `status.lastHandledReconcileAt`, `observedGeneration` and the Ready
//! condition, which the real API server validates against the real CRD schema.
//!
//! The controllers themselves do not run here (tests/suite/realstack/flux_real/ runs
//! them); what spokekeeper reads from them is exactly those status fields. As the
//! controllers do, a suspended object echoes the request and keeps its status. Every
//! shape it writes is held to the real controllers' in the same situation by
//! realstack::conformance::flux::the_played_flux_writes_what_the_real_controllers_write; a
//! situation it does not play (a build failure, DependencyNotReady and its retry) is
//! tested on the real controllers only.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

use super::{bin, run};

pub struct LabFlux {
    stop: Arc<AtomicBool>,
    applied: Arc<AtomicUsize>,
    reconciled: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<String>>>,
    handle: Option<JoinHandle<()>>,
}

#[derive(Clone)]
struct Ctx {
    kubeconfig: PathBuf,
    remote: PathBuf,
    branch: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Ctx {
    fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        run(Command::new(bin("kubectl"))
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args))
    }

    fn note(&self, line: String) {
        self.log.lock().unwrap().push(line);
    }

    fn git(&self, args: &[&str]) -> Result<String, String> {
        run(Command::new("git").arg("-C").arg(&self.remote).args(args))
    }
}

impl LabFlux {
    /// Watches `branch` of the bare repo `remote` and the hub behind `kubeconfig`.
    pub fn start(kubeconfig: &Path, remote: &Path, branch: &str) -> LabFlux {
        let log = Arc::new(Mutex::new(Vec::new()));
        let ctx = Ctx {
            kubeconfig: kubeconfig.to_owned(),
            remote: remote.to_owned(),
            branch: branch.into(),
            log: log.clone(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let applied = Arc::new(AtomicUsize::new(0));
        let reconciled = Arc::new(AtomicUsize::new(0));
        let (s, a, r) = (stop.clone(), applied.clone(), reconciled.clone());
        let handle = std::thread::spawn(move || {
            let mut last = String::new();
            while !s.load(Ordering::Relaxed) {
                if let Ok(head) = ctx.git(&["rev-parse", "--verify", "-q", &ctx.branch])
                    && head != last
                {
                    match apply_source(&ctx) {
                        Ok(()) => {
                            ctx.note(format!("applied {}", head.trim()));
                            last = head;
                            a.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => ctx.note(format!("apply {}: {e}", head.trim())),
                    }
                }
                r.fetch_add(reconcile_requested(&ctx), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        LabFlux {
            stop,
            applied,
            reconciled,
            log,
            handle: Some(handle),
        }
    }

    /// How many source revisions were applied.
    pub fn applied(&self) -> usize {
        self.applied.load(Ordering::Relaxed)
    }

    /// What it did and what failed, a line each.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// How many reconcile requests were answered.
    pub fn reconciled(&self) -> usize {
        self.reconciled.load(Ordering::Relaxed)
    }
}

impl Drop for LabFlux {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn apply_source(ctx: &Ctx) -> Result<(), String> {
    let files = ctx.git(&["ls-tree", "-r", "--name-only", &ctx.branch, "--", "fluxcd/"])?;
    for file in files.lines().filter(|f| f.ends_with(".yaml")) {
        let text = ctx.git(&["show", &format!("{}:{file}", ctx.branch)])?;
        let tmp = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
        std::fs::write(tmp.path(), text).map_err(|e| e.to_string())?;
        ctx.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=kustomize-controller",
            "-f",
            &tmp.path().display().to_string(),
        ])?;
    }
    Ok(())
}

/// Answers every consumer whose requestedAt is not yet handled; returns how many.
fn reconcile_requested(ctx: &Ctx) -> usize {
    let mut n = 0;
    for kind in ["kustomizations", "helmreleases"] {
        let Ok(list) = ctx.kubectl(&["get", kind, "-A", "-o", "json"]) else {
            continue;
        };
        let Ok(list) = serde_json::from_str::<Value>(&list) else {
            continue;
        };
        for item in list["items"].as_array().into_iter().flatten() {
            let requested = item["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"]
                .as_str()
                .unwrap_or("");
            let handled = item["status"]["lastHandledReconcileAt"]
                .as_str()
                .unwrap_or("");
            if requested.is_empty() || requested == handled {
                continue;
            }
            if item["spec"]["suspend"] == true {
                // The controllers' deferred status patch records the request; nothing runs.
                let (ns, name) = names(item);
                let patch = json!({"status": {"lastHandledReconcileAt": requested}});
                ctx.note(format!("{kind} {ns}/{name} {requested}: suspended"));
                patch_status(ctx, kind, ns, name, &patch);
                n += 1;
                continue;
            }
            reconcile(ctx, kind, item, requested);
            n += 1;
        }
    }
    n
}

fn names(item: &Value) -> (&str, &str) {
    (
        item["metadata"]["namespace"].as_str().unwrap_or(""),
        item["metadata"]["name"].as_str().unwrap_or(""),
    )
}

fn reconcile(ctx: &Ctx, kind: &str, item: &Value, requested: &str) {
    let (ns, name) = names(item);
    let generation = item["metadata"]["generation"].as_i64().unwrap_or(1);
    let (ok, message) = match item["spec"]["kubeConfig"]["secretRef"]["name"].as_str() {
        None => (true, "Applied revision: in-cluster".to_string()),
        Some(secret) => match flux_calls_spoke(&ctx.kubeconfig, ns, secret) {
            Ok(who) => (
                true,
                format!("Applied revision: spoke answered as {}", who["username"]),
            ),
            Err(e) => (false, e),
        },
    };
    let (status, reason) = played_ready(kind, ok);
    write_run(
        ctx,
        kind,
        ns,
        name,
        generation,
        requested,
        (status, reason, &message),
    );
}

/// The Ready (status, reason) one unscripted run of `kind` (plural) writes: succeeded, or
/// failed calling the spoke. Held to what the real controllers write in the same run by
/// realstack::conformance::flux::the_played_flux_writes_what_the_real_controllers_write.
pub fn played_ready(kind: &str, ok: bool) -> (&'static str, &'static str) {
    match (kind, ok) {
        // helm-controller's Ready names its last action: a release the spoke does not
        // hold yet (the first rotation, a rebuilt spoke's empty storage) is installed.
        ("helmreleases", true) => ("True", "InstallSucceeded"),
        (_, true) => ("True", "ReconciliationSucceeded"),
        // A spoke it cannot call: helm-controller cannot read the release's state.
        ("helmreleases", false) => ("False", "StateError"),
        (_, false) => ("False", "ReconciliationFailed"),
    }
}

/// The status one run writes: the request it handled, Ready, and observedGeneration
/// only when Ready is True (as Flux does).
fn write_run(
    ctx: &Ctx,
    kind: &str,
    ns: &str,
    name: &str,
    generation: i64,
    requested: &str,
    (status, reason, message): (&str, &str, &str),
) {
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let mut s = json!({
        "lastHandledReconcileAt": requested,
        "conditions": [{
            "type": "Ready",
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
            "observedGeneration": generation,
        }],
    });
    if status == "True" {
        s["observedGeneration"] = json!(generation);
    }
    ctx.note(format!(
        "{kind} {ns}/{name} {requested}: Ready={status} {message}"
    ));
    patch_status(ctx, kind, ns, name, &json!({ "status": s }));
}

fn patch_status(ctx: &Ctx, kind: &str, ns: &str, name: &str, patch: &Value) {
    if let Err(e) = ctx.kubectl(&[
        "patch",
        kind,
        name,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]) {
        ctx.note(format!("status of {kind} {ns}/{name}: {e}"));
    }
}

/// Flux's own kubeconfig loading for the Secret `namespace/secret`, then a call to the
/// spoke: Ok(what the spoke said the caller is) or Err(the message).
pub fn flux_calls_spoke(kubeconfig: &Path, namespace: &str, secret: &str) -> Result<Value, String> {
    let out = run(Command::new(bin("flux-kubeconfig"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--namespace={namespace}"))
        .arg(format!("--secret={secret}")))?;
    serde_json::from_str(out.trim()).map_err(|e| format!("{e}: {out}"))
}
