//! The age recipients of a spoke's sops output: `.sops.yaml`'s creation rule for its
//! path when `sealing.sops_config` is set, else `sealing.age_recipients`. Recipients read
//! from the fleet repo (a recipients file in it, its `.sops.yaml`) are trusted only when
//! `sealing.age_sha256` pins them or they are the configured ones, as a sealing
//! certificate is: a push to the fleet repo must not redirect every credential to a key
//! its author holds.

use std::path::{Path, PathBuf};

use super::sops::{self, AgeRecipients, SopsError};
use crate::config::{AgeRecipientsFrom, Config, SpokeConfig};
use crate::fingerprint::{self, Fingerprint};
use crate::fsutil::{inside, read_under};

/// Why a sops spoke's recipients cannot be used this tick.
#[derive(Debug, thiserror::Error)]
pub enum RecipientsError {
    #[error("cannot read {what} {}: {error} (fix the path in {config})", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        config: PathBuf,
        error: std::io::Error,
    },
    #[error("{what} {}: {error}", path.display())]
    Parse {
        what: &'static str,
        path: PathBuf,
        error: SopsError,
    },
    #[error(
        "the age recipients of {what} are {sha256}, not trusted: {why}. Nothing is encrypted for them: a write to the fleet repo must not redirect every spoke's credential to a key its author may hold. Fix: if the change is wanted, set sealing.age_sha256: {sha256} in {}; otherwise revert it",
        config.display()
    )]
    Untrusted {
        what: String,
        sha256: Fingerprint<fingerprint::AgeRecipients>,
        why: String,
        config: PathBuf,
    },
    #[error(
        "the age recipients {sha256} for spoke {spoke} are not among spokes[].sealing.age_sha256 of spoke {spoke}. Nothing is encrypted for them: the spoke's credential goes only to the sets pinned for it. Fix: if the change is wanted, add {sha256} to that list in {}; otherwise revert the change to the fleet repo's recipients",
        config.display()
    )]
    Unbound {
        spoke: String,
        sha256: Fingerprint<fingerprint::AgeRecipients>,
        config: PathBuf,
    },
    #[error(
        "spoke {spoke}'s output is encrypted for {old}, and the fleet repo now names {new}, listed after it in {list}: an output never moves to a set listed later (a retired or less trusted one), so nothing is encrypted for {new}. Fix: if the move is wanted, list {new} before {old} in {list} in {}; otherwise revert the change to the fleet repo's recipients",
        config.display(),
        list = pins_key(*.own)
    )]
    Older {
        spoke: String,
        old: Fingerprint<fingerprint::AgeRecipients>,
        new: Fingerprint<fingerprint::AgeRecipients>,
        /// The spoke's own pins ordered it (else the fleet's).
        own: bool,
        config: PathBuf,
    },
}

fn pins_key(own: bool) -> &'static str {
    if own {
        "spokes[].sealing.age_sha256"
    } else {
        "sealing.age_sha256"
    }
}

/// Where the configured recipients came from.
enum Origin {
    Config,
    File { path: PathBuf, in_repo: bool },
}

/// The spoke's age recipients: `.sops.yaml`'s rule for its output when
/// `sealing.sops_config` is set, else `sealing.age_recipients`; either trusted as the
/// module says, and one of `spokes[].sealing.age_sha256` when the spoke has its own.
pub fn recipients(config: &Config, spoke: &SpokeConfig) -> Result<AgeRecipients, RecipientsError> {
    let r = trusted(config, spoke)?;
    if !spoke.age_sha256.is_empty() && !spoke.age_sha256.contains(&r.fingerprint()) {
        return Err(RecipientsError::Unbound {
            spoke: spoke.name.clone(),
            sha256: r.fingerprint(),
            config: config.file.clone(),
        });
    }
    Ok(r)
}

/// The recipients, trusted by the fleet's pins or the spoke's own.
fn trusted(config: &Config, spoke: &SpokeConfig) -> Result<AgeRecipients, RecipientsError> {
    let pins = &config.sops.age_sha256;
    let pinned = |r: &AgeRecipients| {
        pins.contains(&r.fingerprint()) || spoke.age_sha256.contains(&r.fingerprint())
    };
    let configured = configured(config)?;
    if let Some((r, origin)) = &configured {
        let in_repo = matches!(origin, Origin::File { in_repo: true, .. });
        if (in_repo || !pins.is_empty()) && !pinned(r) {
            let (what, why) = match origin {
                Origin::Config => (
                    "sealing.age_recipients".to_string(),
                    format!(
                        "sealing.age_sha256 in {} allows others",
                        config.file.display()
                    ),
                ),
                Origin::File { path, .. } if in_repo => (
                    format!("the recipients file {}", path.display()),
                    "it is in the fleet repo and sealing.age_sha256 does not pin it".into(),
                ),
                Origin::File { path, .. } => (
                    format!("the recipients file {}", path.display()),
                    format!(
                        "sealing.age_sha256 in {} allows others",
                        config.file.display()
                    ),
                ),
            };
            return Err(RecipientsError::Untrusted {
                what,
                sha256: r.fingerprint(),
                why,
                config: config.file.clone(),
            });
        }
    }
    let Some(path) = &config.sops.sops_config else {
        // `spokekeeper check` (config/check.rs) refuses sops without either.
        return configured
            .map(|(r, _)| r)
            .ok_or_else(|| RecipientsError::Parse {
                what: "sealing.age_recipients",
                path: config.file.clone(),
                error: SopsError::NoRecipients,
            });
    };
    let text = read_under(path, &config.repo.path).map_err(|error| RecipientsError::Read {
        what: "sealing.sops_config",
        path: path.clone(),
        config: config.file.clone(),
        error,
    })?;
    let rel = relative_output(config, spoke, path);
    let r = sops::recipients_for(&text, &rel).map_err(|error| RecipientsError::Parse {
        what: "sealing.sops_config",
        path: path.clone(),
        error,
    })?;
    let same = configured
        .as_ref()
        .is_some_and(|(c, _)| c.fingerprint() == r.fingerprint());
    if !(same || pinned(&r)) {
        return Err(RecipientsError::Untrusted {
            what: format!("the creation rule of {} for {rel}", path.display()),
            sha256: r.fingerprint(),
            why: "neither sealing.age_recipients nor sealing.age_sha256 names them".into(),
            config: config.file.clone(),
        });
    }
    Ok(r)
}

/// Ok unless the spoke's output, encrypted for `old`, would move to `new`, listed after
/// it in the spoke's pins (`spokes[].sealing.age_sha256`, else `sealing.age_sha256`):
/// during a rollover (`[new, old]`) or with sets per path (`[prod, staging]`) a write to
/// the fleet repo must not move an output back to the retired set or down to another's.
pub fn never_older(
    config: &Config,
    spoke: &SpokeConfig,
    old: Fingerprint<fingerprint::AgeRecipients>,
    new: Fingerprint<fingerprint::AgeRecipients>,
) -> Result<(), RecipientsError> {
    let own = !spoke.age_sha256.is_empty();
    let pins = match own {
        true => &spoke.age_sha256,
        false => &config.sops.age_sha256,
    };
    let at = |f| pins.iter().position(|p| *p == f);
    match (at(old), at(new)) {
        (Some(was), Some(now)) if now > was => Err(RecipientsError::Older {
            spoke: spoke.name.clone(),
            old,
            new,
            own,
            config: config.file.clone(),
        }),
        _ => Ok(()),
    }
}

/// `sealing.age_recipients`, read and parsed.
fn configured(config: &Config) -> Result<Option<(AgeRecipients, Origin)>, RecipientsError> {
    let parse = |path: &Path, error| RecipientsError::Parse {
        what: "sealing.age_recipients",
        path: path.to_path_buf(),
        error,
    };
    Ok(match &config.sops.age_recipients {
        None => None,
        Some(AgeRecipientsFrom::Inline(list)) => Some((
            AgeRecipients::parse(list).map_err(|e| parse(&config.file, e))?,
            Origin::Config,
        )),
        Some(AgeRecipientsFrom::File(path)) => {
            let bytes =
                read_under(path, &config.repo.path).map_err(|error| RecipientsError::Read {
                    what: "sealing.age_recipients file",
                    path: path.clone(),
                    config: config.file.clone(),
                    error,
                })?;
            // Not UTF-8: the bad line is named by its replacement character.
            let text = String::from_utf8_lossy(&bytes);
            let r = AgeRecipients::parse_file(&text).map_err(|e| parse(path, e))?;
            let in_repo = inside(path, &config.repo.path).is_some();
            Some((
                r,
                Origin::File {
                    path: path.clone(),
                    in_repo,
                },
            ))
        }
    })
}

/// The output's path as sops sees it: relative to the `.sops.yaml`'s directory.
fn relative_output(config: &Config, spoke: &SpokeConfig, sops_config: &Path) -> String {
    let output = config.repo.path.join(&spoke.output);
    let dir = sops_config.parent().unwrap_or(Path::new(""));
    output
        .strip_prefix(dir)
        .unwrap_or(&spoke.output)
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";

    fn b() -> String {
        age::x25519::Identity::generate().to_public().to_string()
    }

    /// A configuration in `dir` whose fleet repo is `dir/fleet`, sealing spoke `dev`
    /// with the `sealing` keys given.
    fn config(dir: &Path, sealing: &str) -> Config {
        std::fs::create_dir_all(dir.join("fleet")).unwrap();
        let text = format!(
            "repo: {{path: fleet}}\nsealing: {{cert: c.pem, format: sops, {sealing}}}\nspokes:\n  - {{name: dev, address: 10.0.0.1}}\n"
        );
        Config::parse(&text, "/etc/spokekeeper.yaml", dir).unwrap_or_else(|e| panic!("{e}"))
    }

    fn fp(r: &[&str]) -> String {
        sops::recipients_fingerprint(r).to_string()
    }

    fn got(c: &Config) -> Result<Vec<String>, String> {
        recipients(c, &c.spokes[0])
            .map(|r| r.strings().map(str::to_string).collect())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_recipients_file_in_the_fleet_repo_is_used_only_when_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let b = b();
        std::fs::create_dir_all(d.join("fleet")).unwrap();
        std::fs::write(d.join("fleet/age.txt"), format!("# ops\n{b}\n\n")).unwrap();
        std::fs::write(d.join("outside.txt"), format!("{A}\n")).unwrap();
        // Outside the repo: trusted as the configuration is.
        assert_eq!(
            got(&config(d, "age_recipients: outside.txt")),
            Ok(vec![A.into()])
        );
        // Inside, unpinned: refused, naming the file, the fingerprint and the fix.
        let e = got(&config(d, "age_recipients: fleet/age.txt")).unwrap_err();
        for needle in [
            "fleet/age.txt",
            "not trusted",
            "in the fleet repo",
            &format!("set sealing.age_sha256: {}", fp(&[&b])),
        ] {
            assert!(e.contains(needle), "{needle:?} in {e}");
        }
        let pinned = format!("age_recipients: fleet/age.txt, age_sha256: {}", fp(&[&b]));
        assert_eq!(got(&config(d, &pinned)), Ok(vec![b.clone()]));
        // Pins restrict inline recipients too.
        let other = format!("age_recipients: [{A}], age_sha256: {}", fp(&[&b]));
        assert!(
            got(&config(d, &other))
                .unwrap_err()
                .contains("allows others")
        );
        // A bad line is named.
        std::fs::write(d.join("outside.txt"), format!("{A}\nage1nope\n")).unwrap();
        let e = got(&config(d, "age_recipients: outside.txt")).unwrap_err();
        assert!(e.contains("line 2") && !e.contains("age1nope"), "{e}");
        let e = got(&config(d, "age_recipients: missing.txt")).unwrap_err();
        assert!(
            e.contains("cannot read") && e.contains("missing.txt"),
            "{e}"
        );
    }

    #[test]
    fn a_sops_yaml_rule_is_used_only_for_recipients_the_configuration_trusts() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let b = b();
        std::fs::create_dir_all(d.join("fleet")).unwrap();
        let rules = format!(
            "creation_rules:\n  - path_regex: ^fluxcd/.*\\.yaml$\n    encrypted_regex: ^(data|stringData)$\n    age: {b}\n  - encrypted_regex: ^(data|stringData)$\n    age: {A}\n"
        );
        std::fs::write(d.join("fleet/.sops.yaml"), rules).unwrap();
        let sops_config = "sops_config: fleet/.sops.yaml";
        // The rule for fluxcd/dev-kubeconfig-sealed.yaml names b, which nothing trusts.
        let e = got(&config(d, &format!("{sops_config}, age_recipients: [{A}]"))).unwrap_err();
        for needle in [
            ".sops.yaml for fluxcd/dev-kubeconfig-sealed.yaml",
            "not trusted",
            &format!("set sealing.age_sha256: {}", fp(&[&b])),
        ] {
            assert!(e.contains(needle), "{needle:?} in {e}");
        }
        // The configured recipients, or pinned ones, are used.
        let same = format!("{sops_config}, age_recipients: [{b}]");
        assert_eq!(got(&config(d, &same)), Ok(vec![b.clone()]));
        let pinned = format!("{sops_config}, age_sha256: {}", fp(&[&b]));
        assert_eq!(got(&config(d, &pinned)), Ok(vec![b.clone()]));
        // Another path takes the second rule.
        let mut c = config(d, &format!("{sops_config}, age_recipients: [{A}]"));
        c.spokes[0].output = "clusters/dev.yaml".into();
        assert_eq!(got(&c), Ok(vec![A.into()]));
    }

    /// Pins are ordered: an output moves to a set listed before its own, or stays,
    /// never to one listed after it; a set no pin names is not judged here (the trust
    /// rule above refuses it).
    /// A configuration with `recipients` inline and the pins `[prod, staging]`.
    fn two_pins(dir: &Path, recipients: &str, prod: &str, staging: &str) -> Config {
        let pins = format!("[{}, {}]", fp(&[prod]), fp(&[staging]));
        config(
            dir,
            &format!("age_recipients: [{recipients}], age_sha256: {pins}"),
        )
    }

    fn says(e: &str, needles: &[&str]) {
        for needle in needles {
            assert!(e.contains(needle), "{needle:?} in {e}");
        }
    }

    #[test]
    fn an_output_never_moves_to_a_set_listed_after_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let (prod, staging) = (b(), b());
        let c = two_pins(dir.path(), &prod, &prod, &staging);
        let f = |r: &str| sops::recipients_fingerprint([r]);
        let e = never_older(&c, &c.spokes[0], f(&prod), f(&staging))
            .unwrap_err()
            .to_string();
        let fix = format!("list {} before {}", fp(&[&staging]), fp(&[&prod]));
        says(
            &e,
            &[
                "spoke dev's output is encrypted for",
                "listed after it in sealing.age_sha256",
                &fix,
                "/etc/spokekeeper.yaml",
            ],
        );
        assert!(never_older(&c, &c.spokes[0], f(&staging), f(&prod)).is_ok());
        assert!(never_older(&c, &c.spokes[0], f(&prod), f(&prod)).is_ok());
        assert!(never_older(&c, &c.spokes[0], f(A), f(&staging)).is_ok());
        // A spoke's own list orders it instead of the fleet's.
        let mut own = c.clone();
        own.spokes[0].age_sha256 = vec![f(&staging), f(&prod)];
        assert!(never_older(&own, &own.spokes[0], f(&prod), f(&staging)).is_ok());
        let e = never_older(&own, &own.spokes[0], f(&staging), f(&prod)).unwrap_err();
        assert!(e.to_string().contains("spokes[].sealing.age_sha256"), "{e}");
    }

    /// A spoke with its own pins is encrypted for those sets alone, even for a set the
    /// fleet's pins trust; its own pins trust a set the fleet's do not name.
    #[test]
    fn a_spoke_with_its_own_pins_is_bound_to_them() {
        let dir = tempfile::tempdir().unwrap();
        let (prod, staging) = (b(), b());
        let mut c = two_pins(dir.path(), &staging, &prod, &staging);
        c.spokes[0].age_sha256 = vec![sops::recipients_fingerprint([&prod])];
        let e = got(&c).unwrap_err();
        let fix = format!("add {}", fp(&[&staging]));
        says(
            &e,
            &["not among spokes[].sealing.age_sha256 of spoke dev", &fix],
        );
        let only_own = format!("age_recipients: [{prod}]");
        let mut c = config(dir.path(), &only_own);
        c.spokes[0].age_sha256 = vec![sops::recipients_fingerprint([&prod])];
        assert_eq!(got(&c), Ok(vec![prod.clone()]));
    }

    /// A file holding a forge token and an age identity, as a pushed link may name.
    fn secret_file(d: &Path) -> (PathBuf, String) {
        let id = age::x25519::Identity::generate();
        let line = age::secrecy::ExposeSecret::expose_secret(&id.to_string()).to_string();
        let file = d.join("token");
        std::fs::write(
            &file,
            format!("ghp_0123456789abcdefghijklmnopqrstuvwxyz\n{line}\n"),
        )
        .unwrap();
        (file, line)
    }

    fn assert_no_secret(e: &str, identity: &str) {
        for part in [
            "ghp_0123",
            "456789abcdef",
            "AGE-SECRET-KEY",
            &identity[16..40],
        ] {
            assert!(!e.contains(part), "{part:?} in {e}");
        }
    }

    #[test]
    fn a_pushed_link_at_either_sops_input_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (secret, identity) = secret_file(d);
        std::fs::create_dir_all(d.join("fleet/keys")).unwrap();
        for (at, target) in [
            ("fleet/keys/age.txt", secret.as_path()),
            ("fleet/keys/zero.txt", Path::new("/dev/zero")),
            ("fleet/.sops.yaml", secret.as_path()),
            ("fleet/zero.sops.yaml", Path::new("/dev/zero")),
        ] {
            std::os::unix::fs::symlink(target, d.join(at)).unwrap();
        }
        // A linked directory on the way is refused the same.
        std::os::unix::fs::symlink(d, d.join("fleet/up")).unwrap();
        let pin = format!("age_sha256: {}", fp(&[A]));
        for (sealing, named) in [
            (
                "age_recipients: fleet/keys/age.txt".to_string(),
                "keys/age.txt",
            ),
            (
                "age_recipients: fleet/keys/zero.txt".to_string(),
                "keys/zero.txt",
            ),
            ("age_recipients: fleet/up/token".to_string(), "fleet/up"),
            (
                format!("sops_config: fleet/.sops.yaml, {pin}"),
                ".sops.yaml",
            ),
            (
                format!("sops_config: fleet/zero.sops.yaml, {pin}"),
                "zero.sops.yaml",
            ),
        ] {
            let e = got(&config(d, &sealing)).unwrap_err();
            assert!(
                e.contains(&format!("{named} is a symbolic link"))
                    && e.contains("replace it with a regular file"),
                "{sealing}: {e}"
            );
            assert_no_secret(&e, &identity);
        }
    }

    #[test]
    fn a_recipients_file_that_is_a_secret_is_not_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Outside the clone, the operator's path: read, and the bad line named by number.
        let (secret, identity) = secret_file(d);
        let e = got(&config(d, &format!("age_recipients: {}", secret.display()))).unwrap_err();
        assert!(
            e.contains("line 1") && e.contains("not an age X25519 recipient"),
            "{e}"
        );
        assert_no_secret(&e, &identity);
        std::fs::write(&secret, format!("{A}\n{identity}\n")).unwrap();
        let e = got(&config(d, &format!("age_recipients: {}", secret.display()))).unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        assert_no_secret(&e, &identity);
        // A .sops.yaml whose rule names a secret as a recipient.
        std::fs::write(
            d.join("fleet/.sops.yaml"),
            format!(
                "creation_rules:\n  - encrypted_regex: ^(data|stringData)$\n    age: {identity}\n"
            ),
        )
        .unwrap();
        let e = got(&config(
            d,
            &format!("sops_config: fleet/.sops.yaml, age_sha256: {}", fp(&[A])),
        ))
        .unwrap_err();
        assert!(
            e.contains("#1") && e.contains("not an age X25519 recipient"),
            "{e}"
        );
        assert_no_secret(&e, &identity);
    }

    #[test]
    fn an_oversized_or_device_input_is_refused_not_read_without_bound() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("fleet")).unwrap();
        let big = format!(
            "# {}\n{A}\n",
            "x".repeat(usize::try_from(crate::fsutil::MAX_FILE_BYTES).unwrap())
        );
        std::fs::write(d.join("fleet/age.txt"), &big).unwrap();
        std::fs::write(d.join("big.txt"), &big).unwrap();
        let pin = format!("age_sha256: {}", fp(&[A]));
        for sealing in [
            format!("age_recipients: fleet/age.txt, {pin}"),
            "age_recipients: big.txt".to_string(),
        ] {
            let e = got(&config(d, &sealing)).unwrap_err();
            assert!(
                e.contains("age.txt is larger than") || e.contains("big.txt is larger than"),
                "{e}"
            );
        }
        let e = got(&config(d, "age_recipients: /dev/zero")).unwrap_err();
        assert!(e.contains("/dev/zero is not a regular file"), "{e}");
    }
}
