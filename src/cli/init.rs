//! `spokekeeper init`: scaffold a spokekeeper.yaml and print the node recipe.

use std::path::Path;
use std::process::ExitCode;

use super::fail;
use spokekeeper::spoke::NODE_RECIPE;

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
}

pub(super) fn run(args: &InitArgs, config_path: &Path) -> ExitCode {
    if config_path.exists() && !args.force {
        eprintln!(
            "{} exists: left as it is (pass --force to overwrite). The node recipe follows.\n",
            config_path.display()
        );
    } else {
        if let Err(e) = spokekeeper::fsutil::write_atomic(config_path, TEMPLATE.as_bytes()) {
            return fail(
                "init",
                format!("cannot write {}: {e}", config_path.display()),
            );
        }
        eprintln!(
            "wrote {}: edit repo, sealing and spokes. The node recipe follows.\n",
            config_path.display()
        );
    }
    super::out(NODE_RECIPE);
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
}
