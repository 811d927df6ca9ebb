//! The chart's pod: locked down, wired to its files and config, review mode's token and signing key.

use super::*;

#[test]
fn chart_pod_is_locked_down_and_wired_to_its_files() {
    crate::support::requires!(HELM);
    let objects = read_all(&render(&[]), "chart (defaults)");
    let d = deployment(&objects);
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.as_ref().unwrap();
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(
        psc.run_as_user,
        Some(65532),
        "the Dockerfile's spokekeeper uid"
    );
    assert_eq!(
        psc.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    let all: Vec<_> = pod
        .init_containers
        .iter()
        .flatten()
        .chain(&pod.containers)
        .collect();
    assert_eq!(all.len(), 2);
    for c in &all {
        let sc = c
            .security_context
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no securityContext", c.name));
        assert_eq!(sc.run_as_non_root, Some(true), "{}", c.name);
        assert_eq!(sc.read_only_root_filesystem, Some(true), "{}", c.name);
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(sc.privileged, None, "{}", c.name);
        let caps = sc.capabilities.as_ref().unwrap();
        assert_eq!(
            caps.drop.as_deref(),
            Some(&["ALL".to_string()][..]),
            "{}",
            c.name
        );
        assert_eq!(caps.add, None, "{}", c.name);
        // Whatever is written goes to emptyDir volumes: the state dir (HOME, the clone) and /tmp.
        let mounts: BTreeMap<&str, &str> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.mount_path.as_str(), m.name.as_str()))
            .collect();
        assert_eq!(
            mounts.get("/var/lib/spokekeeper"),
            Some(&"state"),
            "{}",
            c.name
        );
        assert_eq!(mounts.get("/tmp"), Some(&"tmp"), "{}", c.name);
        let env: BTreeMap<&str, &str> = c
            .env
            .iter()
            .flatten()
            .filter_map(|e| Some((e.name.as_str(), e.value.as_deref()?)))
            .collect();
        assert_eq!(env.get("HOME"), Some(&"/var/lib/spokekeeper"), "{}", c.name);
        let git_ssh = env["GIT_SSH_COMMAND"];
        assert!(git_ssh.contains("StrictHostKeyChecking=yes") && git_ssh.contains("BatchMode=yes"));
    }
    let volumes: BTreeMap<&str, &k8s_openapi::api::core::v1::Volume> = pod
        .volumes
        .iter()
        .flatten()
        .map(|v| (v.name.as_str(), v))
        .collect();
    assert!(volumes["state"].empty_dir.is_some() && volumes["tmp"].empty_dir.is_some());
    assert_the_clones_volume_is_bounded(&objects);
    for (name, keys) in [
        ("ssh", ["id_ed25519", "known_hosts"]),
        ("git", ["identity", "known_hosts"]),
    ] {
        let secret = volumes[name].secret.as_ref().unwrap();
        assert_eq!(
            secret.default_mode,
            Some(0o440),
            "{name}: not readable by others"
        );
        let items: Vec<&str> = secret
            .items
            .iter()
            .flatten()
            .map(|i| i.key.as_str())
            .collect();
        assert_eq!(items, keys, "{name}");
    }

    assert_runs_on_the_config_the_chart_writes(&objects);
}

/// A push cannot fill the node's disk: the clone's volume is bounded, and values raise it.
fn assert_the_clones_volume_is_bounded(objects: &[Object]) {
    let limit = |objects: &[Object]| {
        let pod = pod_spec(objects);
        let state = pod.volumes.iter().flatten().find(|v| v.name == "state");
        state
            .and_then(|v| v.empty_dir.as_ref())
            .and_then(|e| e.size_limit.as_ref())
            .map(|q| q.0.clone())
    };
    assert_eq!(limit(objects).as_deref(), Some("1Gi"));
    let raised = read_all(
        &render_with("fleet:\n  diskLimit: 8Gi\n"),
        "chart (diskLimit)",
    );
    assert_eq!(limit(&raised).as_deref(), Some("8Gi"));
}

/// The container runs `spokekeeper run` with leader election, on the config the chart
/// writes, its mounts where that config points, listening where the probes and the
/// Service look.
fn assert_runs_on_the_config_the_chart_writes(objects: &[Object]) {
    let d = deployment(objects);
    let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let args = main_container_args(d);
    assert_eq!(
        args, CHART_ARGS_LEADER,
        "the binary's unit tests parse these"
    );
    assert_eq!(subcommand(&args), "run");
    let main = pod
        .containers
        .iter()
        .find(|c| c.name == "spokekeeper")
        .unwrap();
    let env_from_field: BTreeMap<&str, &str> = main
        .env
        .iter()
        .flatten()
        .filter_map(|e| {
            let f = e.value_from.as_ref()?.field_ref.as_ref()?;
            Some((e.name.as_str(), f.field_path.as_str()))
        })
        .collect();
    assert_eq!(env_from_field.get("POD_NAME"), Some(&"metadata.name"));
    assert_eq!(
        env_from_field.get("POD_NAMESPACE"),
        Some(&"metadata.namespace")
    );
    let mounts: BTreeMap<&str, (&str, Option<&str>)> = main
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| {
            (
                m.mount_path.as_str(),
                (m.name.as_str(), m.sub_path.as_deref()),
            )
        })
        .collect();
    assert_eq!(
        mounts["/etc/spokekeeper/spokekeeper.yaml"],
        ("config", Some("spokekeeper.yaml"))
    );
    assert_eq!(mounts["/etc/spokekeeper/ssh"], ("ssh", None));

    // The config points at those mounts and listens where the probes and the Service look.
    let config: Value = serde_saphyr::from_str(config_text(objects)).unwrap();
    assert_eq!(config["ssh"]["identity"], "/etc/spokekeeper/ssh/id_ed25519");
    assert_eq!(
        config["ssh"]["known_hosts"],
        "/etc/spokekeeper/ssh/known_hosts"
    );
    assert_eq!(config["repo"]["path"], "/var/lib/spokekeeper/fleet");
    assert_eq!(
        config["sealing"]["cert"], "/var/lib/spokekeeper/fleet/keys/sealed-secrets-infra.pem",
        "the pinned certificate lives in the fleet repo"
    );
    assert_eq!(config["metrics"]["listen"], "0.0.0.0:9464");
    assert_eq!(
        config["hub"]["controller"],
        serde_json::json!({"namespace": "kube-system", "name": "sealed-secrets-controller", "port": "http"})
    );
    let port = &main.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.container_port),
        (Some("metrics"), 9464)
    );
    for (probe, path) in [
        (&main.liveness_probe, "/healthz"),
        (&main.readiness_probe, "/readyz"),
    ] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.path.as_deref(), Some(path));
    }
    let svc = one(objects, |o| match o {
        Object::Service(s) => Some(s),
        _ => None,
    });
    let sp = &svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    assert_eq!((sp.name.as_deref(), sp.port), (Some("metrics"), 9464));
}

#[test]
fn chart_config_is_accepted_by_spokekeeper() {
    crate::support::requires!(HELM);
    let objects = read_all(&render(&[]), "chart (defaults)");
    let text = config_text(&objects);
    let config = Config::parse(text, "spokekeeper.yaml", Path::new("/etc/spokekeeper"))
        .unwrap_or_else(|e| panic!("the chart's spokekeeper.yaml is refused: {e}\n{text}"));
    assert_eq!(config.spokes[0].name, "dev");
    assert_eq!(config.repo.path, Path::new("/var/lib/spokekeeper/fleet"));
    assert!(config.spokes[0].ssh.sudo);
}

/// Upstream controller.yaml's Service port is unnamed: `port: ""` is granted and
/// configured as kubeseal asks for it (`http:NAME:`), not refused as a missing value.
#[test]
fn chart_accepts_the_controllers_unnamed_port() {
    crate::support::requires!(HELM);
    let objects = read_all(
        &render_with("hub:\n  controller: {port: \"\"}\n"),
        "chart (unnamed controller port)",
    );
    let proxy: Vec<Grant> = grants(&objects)
        .into_iter()
        .filter(|g| g.2 == "services/proxy")
        .collect();
    assert_eq!(
        proxy,
        [grant(
            "kube-system",
            "",
            "services/proxy",
            "get",
            &["http:sealed-secrets-controller:"]
        )]
    );
    let text = config_text(&objects);
    let config = Config::parse(text, "spokekeeper.yaml", Path::new("/etc/spokekeeper"))
        .unwrap_or_else(|e| panic!("the chart's spokekeeper.yaml is refused: {e}\n{text}"));
    assert_eq!(config.hub.unwrap().controller.port.as_deref(), Some(""));
}

#[test]
fn chart_mounts_the_forge_token_for_review_mode() {
    crate::support::requires!(HELM);
    let values = "forgeTokenSecret: fleet-forge\nsigningKeySecret: fleet-signing\nconfig:\n  repo:\n    mode: pull-request\n    forge:\n      kind: gitlab\n      url: https://gitlab.example.org\n      repository: infra/fleet\n      token_env: LEFT_OVER\n  sealing:\n    cert: keys/sealed-secrets-infra.pem\n  spokes:\n    - name: dev\n      address: 10.0.0.1\n";
    let objects = read_all(&render_with(values), "chart (review mode)");
    let text = config_text(&objects);
    let config = Config::parse(text, "spokekeeper.yaml", Path::new("/etc/spokekeeper"))
        .unwrap_or_else(|e| panic!("the chart's spokekeeper.yaml is refused: {e}\n{text}"));
    let forge = config.repo.forge.expect("repo.forge kept");
    assert_eq!(
        forge.token,
        spokekeeper::config::TokenSource::File("/etc/spokekeeper/forge/token".into()),
        "the chart points token_file at the mounted Secret, replacing token_env"
    );
    let pod = pod_spec(&objects);
    let secret = secret_volume(pod, "forge");
    assert_eq!(secret.secret_name.as_deref(), Some("fleet-forge"));
    assert_eq!(secret.default_mode, Some(0o440));
    let main = pod
        .containers
        .iter()
        .find(|c| c.name == "spokekeeper")
        .unwrap();
    let mount = volume_mount(main, "forge");
    assert_eq!(mount.mount_path, "/etc/spokekeeper/forge");
    assert_eq!(mount.read_only, Some(true));
    // The signing key: mounted from its Secret, and repo.signing_key points at it.
    assert_eq!(
        config.repo.signing_key.as_deref(),
        Some(Path::new("/etc/spokekeeper/signing/signing-key"))
    );
    let secret = secret_volume(pod, "signing");
    assert_eq!(secret.secret_name.as_deref(), Some("fleet-signing"));
    assert_eq!(secret.default_mode, Some(0o440));
    let items: Vec<_> = secret
        .items
        .iter()
        .flatten()
        .map(|i| (i.key.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(items, [("signing-key", "signing-key")]);
    let mount = volume_mount(main, "signing");
    assert_eq!(
        (mount.mount_path.as_str(), mount.read_only),
        ("/etc/spokekeeper/signing", Some(true))
    );
    // Without the value, nothing is mounted.
    let defaults = read_all(&render(&[]), "chart (defaults)");
    let pod = pod_spec(&defaults);
    assert!(
        pod.volumes
            .iter()
            .flatten()
            .all(|v| v.name != "forge" && v.name != "signing")
    );
}

/// Review mode without signingKeySecret (and no repo.signing_key of its own) does not
/// render: spokekeeper would refuse the config at start anyway.
#[test]
fn chart_refuses_review_mode_without_a_signing_key() {
    crate::support::requires!(HELM);
    let values = "forgeTokenSecret: fleet-forge\nconfig:\n  repo:\n    mode: pull-request\n    forge:\n      kind: github\n      url: https://api.github.com\n      repository: org/fleet\n  sealing:\n    cert: keys/sealed-secrets-infra.pem\n  spokes:\n    - name: dev\n      address: 10.0.0.1\n";
    let err = refused_with(values, "without a signing key");
    assert!(
        err.contains("signingKeySecret") && err.contains("ssh-keygen"),
        "{err}"
    );
}
