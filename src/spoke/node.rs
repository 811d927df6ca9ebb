//! The federated recipe's script on a node ([`super::recipe`]), over SSH: the hub sends a
//! verb as the remote command, the forced command hands it to the script through sudo.
//!
//! A node set up otherwise answers differently, and each answer is told apart: the older
//! recipe's `sudo -n cat` prints the kubeconfig whatever is asked (a write then gets a
//! kubeconfig instead of the script's acknowledgement), a key with no forced command runs
//! the verb in a shell, sudo refuses a rule it lacks, the script may be missing. What a
//! node printed is never put in an error (only its length, or sanitized stderr).

use super::error::ExtractError;
use super::recipe::{
    EXIT_CANTCREAT, EXIT_DATAERR, EXIT_NOINPUT, EXIT_USAGE, MAX_AUTHENTICATION_CONFIG_BYTES,
    MAX_AUTHENTICATION_CONFIG_HEADER_BYTES, NODE_SCRIPT, SCRIPT_PREFIX, VERB_READ,
    VERB_READ_AUTHENTICATION_CONFIG_HEADER, VERB_WRITE_AUTHENTICATION_CONFIG, acknowledgement,
};
use super::sanitize_remote_text;
use super::ssh::{self, Remote};
use crate::config::SshSettings;
use crate::secret::SecretBytes;

/// The kubeconfig, printed by the node's script (`read`).
pub async fn read_with_script(
    address: &str,
    ssh: &SshSettings,
) -> Result<SecretBytes, ExtractError> {
    let target = ssh::target(address, ssh);
    let origin = format!("{target} ({NODE_SCRIPT} {VERB_READ})");
    let remote = Remote {
        words: &[VERB_READ],
        stdin: None,
        origin: origin.clone(),
    };
    let done = ssh::run(address, ssh, remote).await?;
    if done.code != 0 {
        return Err(script_error(
            &target,
            ssh,
            VERB_READ,
            done.code,
            &done.stderr,
        ));
    }
    if done.stdout.is_empty() {
        return Err(ExtractError::Empty { origin });
    }
    Ok(done.stdout)
}

/// Replaces the node's AuthenticationConfiguration with `bytes` (`write-authentication-config`),
/// and checks the script's acknowledgement of exactly that many bytes.
pub async fn write_authentication_config(
    address: &str,
    ssh: &SshSettings,
    bytes: &[u8],
) -> Result<(), ExtractError> {
    let target = ssh::target(address, ssh);
    if bytes.is_empty() || bytes.len() > MAX_AUTHENTICATION_CONFIG_BYTES {
        return Err(ExtractError::AuthenticationConfigSize {
            target,
            len: bytes.len(),
            limit: MAX_AUTHENTICATION_CONFIG_BYTES,
        });
    }
    let verb = VERB_WRITE_AUTHENTICATION_CONFIG;
    let remote = Remote {
        words: &[verb],
        stdin: Some(bytes),
        origin: format!("{target} ({NODE_SCRIPT} {verb})"),
    };
    let done = ssh::run(address, ssh, remote).await?;
    if done.code != 0 {
        return Err(script_error(&target, ssh, verb, done.code, &done.stderr));
    }
    if done.stdout.expose() != acknowledgement(bytes.len()).as_bytes() {
        return Err(ExtractError::NotFederated {
            target,
            verb: verb.into(),
            printed: done.stdout.len(),
        });
    }
    Ok(())
}

/// What the node's script printed of its AuthenticationConfiguration's first line.
#[derive(Debug)]
pub enum Header {
    /// The line as printed (at most the script's cap; empty: no file).
    Line(Vec<u8>),
    /// The node's recipe predates the verb: its sudoers rule or script does not take it.
    Unsupported(ExtractError),
}

/// The first line of the node's AuthenticationConfiguration
/// (`read-authentication-config-header`). More than the script prints is not its answer
/// (the older recipe's `sudo -n cat` prints the kubeconfig whatever is asked): refused,
/// and never quoted.
pub async fn read_authentication_config_header(
    address: &str,
    ssh: &SshSettings,
) -> Result<Header, ExtractError> {
    let target = ssh::target(address, ssh);
    let verb = VERB_READ_AUTHENTICATION_CONFIG_HEADER;
    let remote = Remote {
        words: &[verb],
        stdin: None,
        origin: format!("{target} ({NODE_SCRIPT} {verb})"),
    };
    let done = ssh::run(address, ssh, remote).await?;
    if done.code != 0 {
        let unknown = done.code == EXIT_USAGE && done.stderr.contains("unknown command");
        let sudo = SUDO_REFUSALS.iter().any(|m| done.stderr.contains(m));
        let error = script_error(&target, ssh, verb, done.code, &done.stderr);
        if unknown || sudo {
            return Ok(Header::Unsupported(error));
        }
        return Err(error);
    }
    if done.stdout.len() > MAX_AUTHENTICATION_CONFIG_HEADER_BYTES {
        return Err(ExtractError::NotFederated {
            target,
            verb: verb.into(),
            printed: done.stdout.len(),
        });
    }
    Ok(Header::Line(done.stdout.expose().to_vec()))
}

/// What sudo says when it will not run a command.
const SUDO_REFUSALS: [&str; 5] = [
    "a password is required",
    "a terminal is required",
    "is not in the sudoers",
    "is not allowed to execute",
    "may not run sudo",
];

/// The script's verb `verb` exited with `code`: which part of the recipe is missing.
fn script_error(
    target: &str,
    s: &SshSettings,
    verb: &str,
    code: i32,
    stderr: &str,
) -> ExtractError {
    let fail = |problem: String, fix: &str| ExtractError::NodeScript {
        target: target.to_owned(),
        command: format!("{NODE_SCRIPT} {verb}"),
        problem,
        fix: fix.to_owned(),
    };
    let own_line = stderr
        .lines()
        .map(str::trim)
        .rfind(|l| l.starts_with(SCRIPT_PREFIX));
    if let Some(line) = own_line
        && matches!(
            code,
            EXIT_USAGE | EXIT_DATAERR | EXIT_CANTCREAT | EXIT_NOINPUT
        )
    {
        let said = sanitize_remote_text(line, 200);
        return match code {
            EXIT_USAGE => fail(
                format!("the script does not take it ({said})"),
                "reinstall the script from the federated recipe of this spokekeeper version",
            ),
            EXIT_DATAERR => fail(
                format!("the script refused the input ({said})"),
                &format!(
                    "nothing changed on the node; send 1 to {MAX_AUTHENTICATION_CONFIG_BYTES} bytes"
                ),
            ),
            EXIT_NOINPUT => fail(
                format!("the script would not read the file ({said})"),
                "the directory the recipe names and its authentication-config.yaml must be \
                 a directory and a file owned by root, not symlinks",
            ),
            _ => fail(
                format!("the script could not write the file ({said})"),
                "check the directory the recipe names on the node: it must be a directory \
                 owned by root, not a symlink",
            ),
        };
    }
    if stderr.contains("spokekeeper-node: command not found")
        || stderr.contains("spokekeeper-node: No such file or directory")
    {
        return fail(
            format!("the script is not installed (exit code {code})"),
            &format!("install {NODE_SCRIPT} from the federated recipe (owned by root, mode 755)"),
        );
    }
    if SUDO_REFUSALS.iter().any(|m| stderr.contains(m))
        || stderr.contains("sudo: command not found")
    {
        return fail(
            format!("sudo refused to run it as root for user {}", s.user),
            "install the federated recipe's sudoers rule (its two commands, exactly; \
             check it with `visudo -cf`)",
        );
    }
    if code == 127 {
        return fail(
            "the node's shell ran it as a command of its own (not found): the hub's key has no \
             forced command there"
                .into(),
            "install the federated recipe's authorized_keys line (command=\"sudo -n ...\") for the \
             hub's key",
        );
    }
    fail(
        format!(
            "it failed with exit code {code} ({}), not as the federated script fails",
            sanitize_remote_text(stderr, 160)
        ),
        "install the federated node recipe (script, forced command, sudoers rule) on the node",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(code: i32, stderr: &str) -> String {
        let s = SshSettings {
            user: "spokekeeper".into(),
            ..SshSettings::default()
        };
        script_error(
            "spokekeeper@n:22",
            &s,
            VERB_WRITE_AUTHENTICATION_CONFIG,
            code,
            stderr,
        )
        .to_string()
    }

    #[test]
    fn each_missing_part_of_the_recipe_is_named_with_its_fix() {
        let sudo = error(1, "sudo: a password is required\n");
        assert!(
            sudo.contains("sudo refused to run it as root for user spokekeeper"),
            "{sudo}"
        );
        assert!(sudo.contains("sudoers rule"), "{sudo}");
        let missing = error(
            1,
            "sudo: /usr/local/sbin/spokekeeper-node: command not found\n",
        );
        assert!(missing.contains("the script is not installed"), "{missing}");
        assert!(
            missing.contains("install /usr/local/sbin/spokekeeper-node"),
            "{missing}"
        );
        let shell = error(127, "sh: 1: write-authentication-config: not found\n");
        assert!(shell.contains("no forced command"), "{shell}");
        assert!(shell.contains("authorized_keys line"), "{shell}");
    }

    #[test]
    fn the_scripts_own_refusals_are_told_by_exit_code() {
        let big = error(
            65,
            "spokekeeper-node: refused: input over 65536 bytes; nothing changed\n",
        );
        assert!(big.contains("the script refused the input (spokekeeper-node: refused: input over 65536 bytes; nothing changed)"), "{big}");
        let usage = error(64, "spokekeeper-node: refused: unknown command\n");
        assert!(usage.contains("reinstall the script"), "{usage}");
        let dir = error(
            73,
            "spokekeeper-node: refused: /x is a symlink; nothing changed\n",
        );
        assert!(dir.contains("could not write the file"), "{dir}");
        // The same exit code without the script's line is someone else's failure.
        let other = error(65, "something else\n");
        assert!(
            other.contains("not as the federated script fails"),
            "{other}"
        );
    }

    #[test]
    fn other_failures_carry_no_key_material() {
        let key = "LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0NBUUVFSUJ";
        let msg = error(3, &format!("client-key-data: {key}\n"));
        assert!(!msg.contains(key), "{msg}");
        assert!(msg.contains("exit code 3"), "{msg}");
    }

    #[tokio::test]
    async fn empty_or_oversized_input_is_refused_before_connecting() {
        // No such node, key or known_hosts: a connection attempt would fail otherwise.
        let s = SshSettings::default();
        let limit = MAX_AUTHENTICATION_CONFIG_BYTES;
        for len in [0, limit + 1] {
            let err = write_authentication_config("node.invalid", &s, &vec![b'x'; len])
                .await
                .unwrap_err();
            assert!(
                matches!(err, ExtractError::AuthenticationConfigSize { len: l, .. } if l == len),
                "{err}"
            );
            assert!(err.to_string().contains("nothing was sent"), "{err}");
        }
    }
}
