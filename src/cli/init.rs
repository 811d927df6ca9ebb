//! `spokekeeper init`: scaffold a spokekeeper.yaml and print the node recipe: the
//! kubeconfig one by default, the federated one (per distribution) where the flags or the
//! configuration ask for `credential.mode: federated`.

use std::path::Path;
use std::process::ExitCode;

use super::fail;
use spokekeeper::config::{Config, CredentialMode, Distro, SpokeConfig};
use spokekeeper::spoke::{NODE_RECIPE, federated_recipe};

/// A starting configuration: every key of the contract, with its default or an example.
pub(crate) const TEMPLATE: &str = r#"# spokekeeper.yaml: keeps the hub's kubeconfigs for its spokes valid.
# Relative paths resolve against this file's directory. Durations take s, m, h, d.
repo:
  path: fleet                          # a clone of the fleet repo, owned by spokekeeper
  remote: origin
  branch: main
  author: "spokekeeper <spokekeeper@example.org>"
  push: true                           # false: commit only
sealing:
  cert: keys/sealed-secrets-infra.pem  # kubeseal --fetch-cert > keys/sealed-secrets-infra.pem
  # The certificate's fingerprint (spokekeeper inspect keys/sealed-secrets-infra.pem), kept here,
  # outside the fleet repo: a sealing.cert pushed to the repo is sealed to only when it matches
  # this (or the hub's controller serves it). A list allows a planned key rollover.
  # sha256: sha256:0000000000000000000000000000000000000000000000000000000000000000
schedule: "*/15 * * * *"               # 5-field cron, or @hourly, @daily
metrics:
  listen: 127.0.0.1:9464
renew_before: 30d                      # rotate when the stored client cert expires sooner
verify_every: 24h                      # also re-extract this often, to catch changes a probe cannot see
alerts:
  warn_before: 30d
  critical_before: 7d
  # alertmanager: http://alertmanager.monitoring:9093
  # webhook: https://hooks.example.org/spokekeeper
ssh:                                   # defaults for every spoke; a spoke may override any field
  user: spokekeeper                    # see the node recipe `spokekeeper init` prints
  port: 22
  identity: /etc/spokekeeper/ssh/id_ed25519
  known_hosts: /etc/spokekeeper/ssh/known_hosts   # strict: unknown or changed host keys are refused
  sudo: true                           # read the file with `sudo -n cat`
  connect_timeout: 10s
credential:                            # how the hub's credential for each spoke is made (a spoke may override any field)
  mode: minted                         # minted: a short-lived, revocable client certificate per spoke (docs/minted.md); extracted: the node's admin kubeconfig
  # ttl: 30d                           # the minted certificate's lifetime (at least 1h)
  # renew_before: 10d                  # default: a third of ttl
  # user: "spokekeeper:{hub}:{spoke}:{generation}"   # each mint appends :RANDOM
  # hub_id: hub                        # global: set one per spokekeeper deployment that shares a cluster
  # cluster_role: cluster-admin
# hub:                                 # optional: fetch the sealing certificate, verify after a push
#   kubeconfig: /etc/spokekeeper/hub.kubeconfig   # absent: in-cluster, else KUBECONFIG or ~/.kube/config
#   controller: { namespace: kube-system, name: sealed-secrets-controller }
#   verify_timeout: 2m
spokes:
  - name: dev
    address: 192.168.1.20              # SSH target, and the host written into the kubeconfig
    distro: k3s                        # k3s | rke2 | kubeadm: sets the kubeconfig path
    # kubeconfig_path: /etc/rancher/k3s/k3s.yaml
    # api_server: https://192.168.1.20:6443
    # ssh: { port: 2222 }
    # secret: { name: dev-kubeconfig, namespace: flux-system, key: value }
    # scope: strict                    # strict | namespace-wide | cluster-wide
    # kustomization: { name: dev, namespace: flux-system }   # verify only this one (default: every Flux consumer of the Secret)
    # output: fluxcd/dev-kubeconfig-sealed.yaml
"#;

#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// Overwrite an existing configuration file.
    #[arg(long)]
    pub force: bool,
    /// The credential.mode to scaffold and print the node recipe for [default: the
    /// template's (minted), or an existing file's spokes'].
    #[arg(long, value_enum)]
    pub credential: Option<CredentialMode>,
    /// The distribution whose federated recipe is printed [default: the configuration's
    /// federated spokes', else k3s].
    #[arg(long, value_enum)]
    pub distro: Option<Distro>,
}

/// The template for `mode`: a federated one scaffolds the mode, its issuer (an example
/// to replace) and the hub section it needs.
pub(crate) fn template(mode: Option<CredentialMode>) -> String {
    match mode {
        Some(CredentialMode::Federated) => TEMPLATE
            .replace(
                "  mode: minted                         # minted:",
                "  mode: federated                      # docs/federated.md; minted:",
            )
            .replace(
                "  # ttl: 30d",
                "  federated:\n    issuer: https://hub.example.org:6443   # the hub's --service-account-issuer, reachable from the spokes\n  # ttl: 30d",
            )
            .replace(
                "# hub:                                 # optional:",
                "hub:                                   # required by federated spokes:",
            )
            .replace("#   verify_timeout: 2m", "  verify_timeout: 2m")
            .replace(
                "    # api_server: https://192.168.1.20:6443\n",
                "    # api_server: https://192.168.1.20:6443\n    # servers: [192.168.1.21, 192.168.1.22]   # the other control-plane nodes: each is written and proven\n",
            ),
        Some(CredentialMode::Extracted) => TEMPLATE.replace(
            "  mode: minted                         # minted:",
            "  mode: extracted                      # minted:",
        ),
        _ => TEMPLATE.to_string(),
    }
}

/// The node recipes to print: with `--credential`, that mode's (federated: for
/// `--distro`, else the configuration's federated spokes' distributions, else k3s);
/// without it, the federated one for each distribution the configuration's federated
/// spokes run and the kubeconfig one for its other spokes (or when it has none).
fn recipes(args: &InitArgs, config: Option<&Config>) -> String {
    let spokes = config.map(|c| c.spokes.as_slice()).unwrap_or_default();
    let is_federated = |s: &SpokeConfig| s.credential.mode == CredentialMode::Federated;
    let (sealed, federated) = match args.credential {
        Some(CredentialMode::Federated) => (false, true),
        Some(_) => (true, false),
        None => (
            spokes.is_empty() || !spokes.iter().all(is_federated),
            spokes.iter().any(is_federated),
        ),
    };
    let mut out = if sealed {
        NODE_RECIPE.to_string()
    } else {
        String::new()
    };
    if !federated {
        return out;
    }
    let configured = |d: &Distro| spokes.iter().any(|s| is_federated(s) && s.distro == *d);
    let distros: Vec<Distro> = match args.distro {
        Some(d) => vec![d],
        None => [Distro::K3s, Distro::Rke2, Distro::Kubeadm]
            .into_iter()
            .filter(configured)
            .collect(),
    };
    for d in if distros.is_empty() {
        vec![Distro::K3s]
    } else {
        distros
    } {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&federated_recipe(d));
    }
    out
}

pub(super) fn run(args: &InitArgs, config_path: &Path) -> ExitCode {
    if config_path.exists() && !args.force {
        eprintln!(
            "{} exists: left as it is (pass --force to overwrite). The node recipe follows.\n",
            config_path.display()
        );
    } else {
        let template = template(args.credential);
        if let Err(e) = spokekeeper::fsutil::write_atomic(config_path, template.as_bytes()) {
            return fail(
                "init",
                format!("cannot write {}: {e}", config_path.display()),
            );
        }
        eprintln!(
            "wrote {}: edit repo, sealing{} and spokes. The node recipe follows.\n",
            config_path.display(),
            if args.credential == Some(CredentialMode::Federated) {
                ", credential.federated.issuer"
            } else {
                ""
            }
        );
    }
    // A file that does not load (yet) asks for nothing: the flags alone choose.
    let config = Config::load(config_path).ok();
    super::out(&recipes(args, config.as_ref()));
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use spokekeeper::config::Config;

    #[test]
    fn template_is_a_valid_configuration() {
        let c = Config::parse(TEMPLATE, "spokekeeper.yaml", Path::new("/etc/spokekeeper")).unwrap();
        assert_eq!(c.spokes[0].name, "dev");
        assert_eq!(c.spokes[0].kubeconfig_path, "/etc/rancher/k3s/k3s.yaml");
        assert!(c.spokes[0].ssh.sudo);
        assert_eq!(
            c.spokes[0].credential.mode,
            spokekeeper::config::CredentialMode::Minted
        );
    }

    #[test]
    fn the_commented_hub_lines_are_valid_when_uncommented() {
        let text = TEMPLATE
            .replace("# hub:", "hub:")
            .replace("#   ", "  ")
            .replace("  # ttl:", "  ttl:")
            .replace("  # renew_before:", "  renew_before:")
            .replace("  # user:", "  user:")
            .replace("  # cluster_role:", "  cluster_role:")
            .replace("    # kustomization:", "    kustomization:");
        let c = Config::parse(&text, "spokekeeper.yaml", Path::new("/etc/spokekeeper")).unwrap();
        let hub = c.hub.expect("hub");
        let with_sha = TEMPLATE.replace("  # sha256:", "  sha256:");
        let c2 =
            Config::parse(&with_sha, "spokekeeper.yaml", Path::new("/etc/spokekeeper")).unwrap();
        assert_eq!(c2.sealing_sha256.len(), 1);
        assert_eq!(hub.controller.name, "sealed-secrets-controller");
        assert_eq!(hub.verify_timeout, std::time::Duration::from_secs(120));
        assert_eq!(c.spokes[0].kustomization.as_ref().unwrap().name, "dev");
    }

    fn init(flags: &[&str]) -> InitArgs {
        use clap::Parser;
        let argv = ["spokekeeper", "init"]
            .into_iter()
            .chain(flags.iter().copied());
        match super::super::Cli::parse_from(argv).command {
            super::super::Command::Init(a) => a,
            other => panic!("{other:?}"),
        }
    }

    fn parse(text: &str) -> Config {
        Config::parse(text, "spokekeeper.yaml", Path::new("/etc/spokekeeper")).unwrap()
    }

    #[test]
    fn the_default_recipe_is_the_kubeconfig_one_and_a_federated_scaffold_asks_for_its_own() {
        let sealed = recipes(&init(&[]), Some(&parse(TEMPLATE)));
        assert_eq!(sealed, NODE_RECIPE);
        assert_eq!(recipes(&init(&[]), None), NODE_RECIPE);
        // The federated scaffold loads as federated, and its recipe is the federated one.
        let scaffold = parse(&template(Some(CredentialMode::Federated)));
        let dev = &scaffold.spokes[0];
        assert_eq!(dev.credential.mode, CredentialMode::Federated);
        assert_eq!(
            dev.credential.federated.as_ref().map(|f| f.issuer.as_str()),
            Some("https://hub.example.org:6443")
        );
        assert_eq!(
            recipes(&init(&[]), Some(&scaffold)),
            federated_recipe(Distro::K3s)
        );
        // Its other server nodes, once uncommented, are the spoke's.
        let ha =
            parse(&template(Some(CredentialMode::Federated)).replace("# servers:", "servers:"));
        assert_eq!(ha.spokes[0].servers, ["192.168.1.21", "192.168.1.22"]);
        let extracted = parse(&template(Some(CredentialMode::Extracted)));
        assert_eq!(
            extracted.spokes[0].credential.mode,
            CredentialMode::Extracted
        );
    }

    #[test]
    fn the_flags_or_the_federated_spokes_choose_the_distributions() {
        let flags = init(&["--credential", "federated", "--distro", "kubeadm"]);
        assert_eq!(
            recipes(&flags, Some(&parse(TEMPLATE))),
            federated_recipe(Distro::Kubeadm)
        );
        let flags = init(&["--credential", "federated"]);
        assert_eq!(recipes(&flags, None), federated_recipe(Distro::K3s));
        // A mixed fleet: the kubeconfig recipe, then one per federated distribution.
        let mixed = template(Some(CredentialMode::Federated)).replace(
            "    distro: k3s ",
            "    distro: rke2\n  - {name: old, address: 10.0.0.2, credential: {mode: minted}}\n  - {name: new, address: 10.0.0.3, distro: kubeadm}\n    # ",
        );
        let mixed = parse(&mixed);
        assert_eq!(mixed.spokes.len(), 3, "{:?}", mixed.spokes);
        let all = recipes(&init(&[]), Some(&mixed));
        assert_eq!(
            all,
            format!(
                "{NODE_RECIPE}\n{}\n{}",
                federated_recipe(Distro::Rke2),
                federated_recipe(Distro::Kubeadm)
            )
        );
        assert_eq!(
            recipes(&init(&["--credential", "minted"]), Some(&mixed)),
            NODE_RECIPE
        );
    }
}
