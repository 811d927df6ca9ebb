//! What an operator installs on a spoke node, as printed by `spokekeeper init` and `add`:
//! the kubeconfig recipe ([`NODE_RECIPE`]), and the federated one ([`federated_recipe`]),
//! whose script may also replace the API server's AuthenticationConfiguration.

use crate::config::Distro;

/// The least-privilege setup for a node, printed by `spokekeeper init` and docs/operations.md.
///
/// The forced command means the hub's key can do exactly one thing on the node even if
/// the hub is compromised: print that one file.
pub const NODE_RECIPE: &str = r#"# Least privilege on each spoke node (k3s shown; rke2: /etc/rancher/rke2/rke2.yaml,
# kubeadm: /etc/kubernetes/admin.conf). Run as root on the node.

# 1. A dedicated user with no password (`*` is "no password", not "locked": public-key
#    login then works whether or not sshd uses PAM).
useradd --system --create-home --shell /bin/sh spokekeeper
usermod -p '*' spokekeeper

# 2. ~spokekeeper/.ssh/authorized_keys (mode 600, owned by spokekeeper): the hub's public
#    key, allowed to run one command and nothing else (whatever the client asks for).
command="sudo -n cat /etc/rancher/k3s/k3s.yaml",no-pty,no-port-forwarding,no-agent-forwarding,no-X11-forwarding ssh-ed25519 AAAA...the-hub-key... spokekeeper@hub

# 3. /etc/sudoers.d/spokekeeper (mode 440; check it with `visudo -cf` before installing):
#    root lets that user read that one file, nothing else.
spokekeeper ALL=(root) NOPASSWD: /usr/bin/cat /etc/rancher/k3s/k3s.yaml

# 4. On the hub: add the node's host key to spokekeeper's known_hosts after comparing its
#    fingerprint with `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` run on the node:
#      ssh-keyscan -t ed25519 NODE >> /etc/spokekeeper/ssh/known_hosts   # each server node
#    and in spokekeeper.yaml for this spoke:  ssh: { user: spokekeeper }
"#;

/// Where the federated recipe installs its script on the node.
pub const NODE_SCRIPT: &str = "/usr/local/sbin/spokekeeper-node";
/// The script's verb that prints the admin kubeconfig.
pub const VERB_READ: &str = "read";
/// The script's verb that replaces the AuthenticationConfiguration with its stdin.
pub const VERB_WRITE_AUTHENTICATION_CONFIG: &str = "write-authentication-config";
/// The script's verb that prints the first line of the AuthenticationConfiguration (at
/// most [`MAX_AUTHENTICATION_CONFIG_HEADER_BYTES`]; nothing when there is no file):
/// where `spokekeeper revoke --drop-issuer` leaves its marker.
pub const VERB_READ_AUTHENTICATION_CONFIG_HEADER: &str = "read-authentication-config-header";
/// The most `read-authentication-config-header` prints of the file's first line.
pub const MAX_AUTHENTICATION_CONFIG_HEADER_BYTES: usize = 256;
/// Largest AuthenticationConfiguration the script accepts; more is refused, not cut.
pub const MAX_AUTHENTICATION_CONFIG_BYTES: usize = 64 * 1024;
/// The script's exit codes (sysexits.h names): an unknown command or argument count,
/// refused input (empty or too large), a file it will not read (a symlink), a file or directory it cannot create.
pub const EXIT_USAGE: i32 = 64;
pub const EXIT_DATAERR: i32 = 65;
pub const EXIT_NOINPUT: i32 = 66;
pub const EXIT_CANTCREAT: i32 = 73;
/// The start of every line the script itself writes on stderr.
pub const SCRIPT_PREFIX: &str = "spokekeeper-node: ";

/// The line the script prints once it replaced the file with `len` bytes: anything else
/// on stdout means the node did not run it.
pub fn acknowledgement(len: usize) -> String {
    format!("{SCRIPT_PREFIX}wrote {len} bytes\n")
}

/// The directory holding the AuthenticationConfiguration: a directory of its own, which
/// a static-pod API server (rke2, kubeadm) mounts so that a rename inside it is seen (a
/// file mounted alone stays the inode it was).
pub fn authentication_config_dir(distro: Distro) -> &'static str {
    match distro {
        Distro::K3s => "/etc/rancher/k3s/spokekeeper",
        Distro::Rke2 => "/etc/rancher/rke2/spokekeeper",
        Distro::Kubeadm => "/etc/kubernetes/spokekeeper",
    }
}

/// The one file `write-authentication-config` writes.
pub fn authentication_config_path(distro: Distro) -> String {
    format!(
        "{}/authentication-config.yaml",
        authentication_config_dir(distro)
    )
}

/// POSIX sh (dash, busybox): paths in single quotes, so none may hold a quote.
const SCRIPT: &str = r#"#!/bin/sh
# spokekeeper-node: all that the hub's key may run on this node, as root through sudo.
#   read                         print the admin kubeconfig
#   write-authentication-config  replace the API server's AuthenticationConfiguration
#                                with stdin (1 to @MAX@ bytes), atomically
#   read-authentication-config-header
#                                print its first line (at most @HEADER@ bytes; nothing
#                                when there is none): spokekeeper's drop marker
set -eu
umask 077
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
kubeconfig='@KUBECONFIG@'
dir='@DIR@'
file="$dir/authentication-config.yaml"
max=@MAX@

refuse() {
    printf 'spokekeeper-node: refused: %s\n' "$2" >&2
    exit "$1"
}

write() {
    if [ -L "$dir" ]; then
        refuse @CANTCREAT@ "$dir is a symlink; nothing changed"
    fi
    if [ ! -d "$dir" ]; then
        mkdir -m 700 "$dir" || refuse @CANTCREAT@ "cannot create $dir"
    fi
    tmp=$(mktemp "$dir/.authentication-config.XXXXXX") ||
        refuse @CANTCREAT@ "cannot create a file in $dir"
    trap 'rm -f "$tmp"' EXIT
    trap 'exit 1' HUP INT TERM
    # One byte more than allowed tells "too large" from "exactly the limit".
    head -c $((max + 1)) >"$tmp"
    size=$(wc -c <"$tmp")
    if [ "$size" -eq 0 ]; then
        refuse @DATAERR@ "empty input; nothing changed"
    fi
    if [ "$size" -gt "$max" ]; then
        refuse @DATAERR@ "input over $max bytes; nothing changed"
    fi
    chmod 600 "$tmp"
    # rename(2) replaces a symlink at the target instead of following it, but mv moves
    # into a directory that a symlink points to: such a link is removed first.
    if [ -d "$file" ]; then
        [ -L "$file" ] || refuse @CANTCREAT@ "$file is a directory; nothing changed"
        rm -f "$file"
    fi
    mv -f "$tmp" "$file"
    printf 'spokekeeper-node: wrote %s bytes\n' "$size"
}

header() {
    # Only that one file: never through a symlink, never anything but a regular file.
    if [ -L "$dir" ] || [ -L "$file" ]; then
        refuse @NOINPUT@ "$dir or its file is a symlink; nothing read"
    fi
    [ -e "$file" ] || exit 0
    [ -f "$file" ] || refuse @NOINPUT@ "$file is not a regular file; nothing read"
    head -n 1 -- "$file" | head -c @HEADER@
}

[ "$#" -eq 1 ] || refuse @USAGE@ "takes exactly one argument"
case "$1" in
read) exec cat -- "$kubeconfig" ;;
write-authentication-config) write ;;
read-authentication-config-header) header ;;
*) refuse @USAGE@ "unknown command (only 'read', 'write-authentication-config' and 'read-authentication-config-header')" ;;
esac
"#;

/// The script for `distro`, as installed at [`NODE_SCRIPT`].
pub fn node_script(distro: Distro) -> String {
    SCRIPT
        .replace("@KUBECONFIG@", distro.kubeconfig_path())
        .replace("@DIR@", authentication_config_dir(distro))
        .replace("@MAX@", &MAX_AUTHENTICATION_CONFIG_BYTES.to_string())
        .replace(
            "@HEADER@",
            &MAX_AUTHENTICATION_CONFIG_HEADER_BYTES.to_string(),
        )
        .replace("@NOINPUT@", &EXIT_NOINPUT.to_string())
        .replace("@USAGE@", &EXIT_USAGE.to_string())
        .replace("@DATAERR@", &EXIT_DATAERR.to_string())
        .replace("@CANTCREAT@", &EXIT_CANTCREAT.to_string())
}

/// The federated setup for a server node of a `distro` spoke: the script, the forced
/// command and the sudoers rule that let the hub's key run its three verbs and nothing
/// else, then the API server's flag (text for the operator).
///
/// The forced command hands the client's whole command to the script as ONE argument:
/// inside `command="..."` a quote is written `\"` (sshd(8), AUTHORIZED_KEYS FILE FORMAT),
/// and the shell does not split or glob a double-quoted expansion. sudo then matches the
/// arguments exactly (sudoers(5): a command with arguments in the rule must be run with
/// exactly those), so `read extra` or `read; id` are refused before the script runs.
pub fn federated_recipe(distro: Distro) -> String {
    let kubeconfig = distro.kubeconfig_path();
    let file = authentication_config_path(distro);
    let script = node_script(distro);
    format!(
        r#"# Federated credentials (credential.mode: federated) on each SERVER node of a {distro}
# spoke: its `address` and each node its spokes[].servers lists, as every API server reads
# its own file. Run as root on the node. The hub's key may run one script, which does three
# things: `read` prints {kubeconfig}, `write-authentication-config` replaces
# {file}
# (the API server's AuthenticationConfiguration) with what the hub sends, and
# `read-authentication-config-header` prints that file's first line (where
# `spokekeeper revoke --drop-issuer` marks that the hub is no longer trusted).

# 1. A dedicated user with no password (`*` is "no password", not "locked": public-key
#    login then works whether or not sshd uses PAM).
useradd --system --create-home --shell /bin/sh spokekeeper
usermod -p '*' spokekeeper

# 2. The script, owned by root, mode 755:
cat > {NODE_SCRIPT} <<'EOF'
{script}EOF
chown root:root {NODE_SCRIPT}
chmod 755 {NODE_SCRIPT}

# 3. ~spokekeeper/.ssh/authorized_keys (mode 600, owned by spokekeeper): the hub's public
#    key, forced to run the script with what the client asked for as its one argument.
command="sudo -n {NODE_SCRIPT} \"$SSH_ORIGINAL_COMMAND\"",no-pty,no-port-forwarding,no-agent-forwarding,no-X11-forwarding ssh-ed25519 AAAA...the-hub-key... spokekeeper@hub

# 4. /etc/sudoers.d/spokekeeper (mode 440; check it with `visudo -cf` before installing):
#    root runs the script for that user with exactly one of its three arguments.
spokekeeper ALL=(root) NOPASSWD: {NODE_SCRIPT} {VERB_READ}, {NODE_SCRIPT} {VERB_WRITE_AUTHENTICATION_CONFIG}, {NODE_SCRIPT} {VERB_READ_AUTHENTICATION_CONFIG_HEADER}

# 5. On the hub: add the node's host key to spokekeeper's known_hosts after comparing its
#    fingerprint with `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` run on the node:
#      ssh-keyscan -t ed25519 NODE >> /etc/spokekeeper/ssh/known_hosts
#    and in spokekeeper.yaml for this spoke:  ssh: {{ user: spokekeeper }}

# 6. The API server. FIRST let spokekeeper write the file (`spokekeeper rotate` does),
#    THEN add the flag: a kube-apiserver whose --authentication-config file is missing
#    does not start.
{api_server}"#,
        api_server = api_server_steps(distro),
    )
}

/// Step 6 for `distro`. Syntax from the distributions' references: k3s
/// docs.k3s.io/installation/configuration (a repeatable flag is a YAML list in
/// config.yaml) and docs.k3s.io/cli/server (`kube-apiserver-arg`); rke2
/// docs.rke2.io/reference/server_config and docs.rke2.io/advanced ("Extra Control Plane
/// Component Volume Mounts": `HOST:POD:ro`); kubeadm
/// kubernetes.io/docs/reference/config-api/kubeadm-config.v1beta4 (`extraArgs` is a list
/// of name/value since v1beta4; `extraVolumes` are HostPathMounts).
fn api_server_steps(distro: Distro) -> String {
    let dir = authentication_config_dir(distro);
    let file = authentication_config_path(distro);
    match distro {
        Distro::K3s => format!(
            r#"#    In /etc/rancher/k3s/config.yaml (k3s runs the API server in its own process,
#    which reads the file where it is):
#      kube-apiserver-arg:
#        - authentication-config={file}
#    then: systemctl restart k3s
"#
        ),
        Distro::Rke2 => format!(
            r#"#    In /etc/rancher/rke2/config.yaml (the API server is a static pod: it mounts the
#    DIRECTORY, so that each replacement of the file is seen):
#      kube-apiserver-arg:
#        - authentication-config={file}
#      kube-apiserver-extra-mount:
#        - {dir}:{dir}:ro
#    then: systemctl restart rke2-server
"#
        ),
        Distro::Kubeadm => format!(
            r#"#    In /etc/kubernetes/manifests/kube-apiserver.yaml (the kubelet restarts the pod),
#    mounting the DIRECTORY, so that each replacement of the file is seen:
#      spec.containers[0].command, one more item:
#        - --authentication-config={file}
#      spec.containers[0].volumeMounts, one more item:
#        - name: spokekeeper
#          mountPath: {dir}
#          readOnly: true
#      spec.volumes, one more item:
#        - name: spokekeeper
#          hostPath:
#            path: {dir}
#            type: DirectoryOrCreate
#    and the same in the ClusterConfiguration (ConfigMap kubeadm-config in kube-system),
#    so that `kubeadm upgrade` keeps it (kubeadm.k8s.io/v1beta4):
#      apiServer:
#        extraArgs:
#          - name: authentication-config
#            value: {file}
#        extraVolumes:
#          - name: spokekeeper
#            hostPath: {dir}
#            mountPath: {dir}
#            readOnly: true
#            pathType: DirectoryOrCreate
"#
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Distro; 3] = [Distro::K3s, Distro::Rke2, Distro::Kubeadm];

    #[test]
    fn recipe_has_the_forced_command_and_a_single_file_sudo_rule() {
        assert!(NODE_RECIPE.contains(
            r#"command="sudo -n cat /etc/rancher/k3s/k3s.yaml",no-pty,no-port-forwarding,no-agent-forwarding,no-X11-forwarding ssh-ed25519 "#
        ));
        assert!(
            NODE_RECIPE.contains(
                "spokekeeper ALL=(root) NOPASSWD: /usr/bin/cat /etc/rancher/k3s/k3s.yaml\n"
            )
        );
    }

    #[test]
    fn each_federated_recipe_names_its_distro_paths_and_no_other() {
        for distro in ALL {
            let recipe = federated_recipe(distro);
            let script = node_script(distro);
            assert!(
                recipe.contains(&format!("<<'EOF'\n{script}EOF\n")),
                "{distro}"
            );
            assert!(
                script.contains(&format!("kubeconfig='{}'\n", distro.kubeconfig_path())),
                "{distro}"
            );
            let dir = authentication_config_dir(distro);
            assert!(script.contains(&format!("dir='{dir}'\n")), "{distro}");
            assert!(
                !script.contains('@'),
                "a placeholder left in {distro}: {script}"
            );
            assert!(
                recipe.contains(&format!(
                    "authentication-config={}\n",
                    authentication_config_path(distro)
                )),
                "{distro}"
            );
            for other in ALL.into_iter().filter(|o| *o != distro) {
                assert!(
                    !recipe.contains(authentication_config_dir(other)),
                    "{distro} recipe names {other}'s directory"
                );
            }
        }
    }

    #[test]
    fn the_forced_command_passes_the_request_as_one_argument_to_three_allowed_commands() {
        let recipe = federated_recipe(Distro::Rke2);
        assert!(recipe.contains(
            "\ncommand=\"sudo -n /usr/local/sbin/spokekeeper-node \\\"$SSH_ORIGINAL_COMMAND\\\"\",no-pty,no-port-forwarding,no-agent-forwarding,no-X11-forwarding ssh-ed25519 "
        ));
        assert!(recipe.contains(
            "\nspokekeeper ALL=(root) NOPASSWD: /usr/local/sbin/spokekeeper-node read, /usr/local/sbin/spokekeeper-node write-authentication-config, /usr/local/sbin/spokekeeper-node read-authentication-config-header\n"
        ));
    }

    #[test]
    fn static_pod_distros_mount_the_directory_read_only() {
        let rke2 = federated_recipe(Distro::Rke2);
        assert!(rke2.contains(
            "#      kube-apiserver-extra-mount:\n#        - /etc/rancher/rke2/spokekeeper:/etc/rancher/rke2/spokekeeper:ro\n"
        ));
        let kubeadm = federated_recipe(Distro::Kubeadm);
        for needle in [
            "#        - --authentication-config=/etc/kubernetes/spokekeeper/authentication-config.yaml\n",
            "#            path: /etc/kubernetes/spokekeeper\n#            type: DirectoryOrCreate\n",
            "#          - name: authentication-config\n#            value: /etc/kubernetes/spokekeeper/authentication-config.yaml\n",
            "#            pathType: DirectoryOrCreate\n",
        ] {
            assert!(kubeadm.contains(needle), "{needle}");
        }
        let k3s = federated_recipe(Distro::K3s);
        assert!(!k3s.contains("extra-mount"));
        for recipe in [k3s, rke2, kubeadm] {
            assert!(recipe.contains("FIRST let spokekeeper write the file"));
        }
    }

    #[test]
    fn the_acknowledgement_is_the_scripts_own_line() {
        assert_eq!(acknowledgement(12), "spokekeeper-node: wrote 12 bytes\n");
        assert!(SCRIPT.contains("printf 'spokekeeper-node: wrote %s bytes\\n' \"$size\""));
    }
}
