//! `spokekeeper seal` (kubeseal-compatible) and `spokekeeper unseal` (recovery).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use base64::Engine;
use time::OffsetDateTime;

use super::{Chain, Format, fail};
use spokekeeper::fingerprint::{AgeRecipients as AgeRecipientsKind, Fingerprint, Sealing};
use spokekeeper::seal::crypto::SealError;
use spokekeeper::seal::manifest::MAX_MANIFEST_BYTES;
use spokekeeper::seal::sops::{self, AgeIdentities, AgeRecipients, SopsError};
use spokekeeper::seal::{
    KeyError, ManifestError, RecoveryKey, Scope, SealedSecret, SealingKey, SecretInput,
    hybrid_encrypt,
};
use spokekeeper::secret::SecretBytes;

/// What stops `seal` or `unseal`: each names the flag or file at fault; never a value.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SealCliError {
    /// `what`: the flag and path (`--cert keys/cert.pem`), a path, or `stdin`.
    #[error("cannot read {what}: {error}")]
    Read { what: String, error: std::io::Error },
    #[error("cannot write {what}: {error}")]
    Write { what: String, error: std::io::Error },
    #[error("{what} is over the {MAX_MANIFEST_BYTES}-byte limit")]
    TooLarge { what: String },
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A `--sha256` that is no fingerprint (the rule's message names the flag).
    #[error(transparent)]
    Fingerprint(spokekeeper::rotate::state::AnnotationError),
    #[error(
        "--cert {} is {actual}, but --sha256 allows only {}: nothing sealed. It may have been replaced; fetch it from the controller (kubeseal --fetch-cert) and compare",
        cert.display(),
        allowed.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )]
    FingerprintMismatch {
        cert: PathBuf,
        actual: Fingerprint<Sealing>,
        allowed: Vec<Fingerprint<Sealing>>,
    },
    #[error(
        "seal needs --cert CERT (Sealed Secrets), or --format sops with --age RECIPIENT or --age-file FILE"
    )]
    NoCert,
    #[error("{flag} does not apply to --format {format}: {fix}")]
    NotForFormat {
        flag: &'static str,
        format: &'static str,
        fix: &'static str,
    },
    #[error("{what}: {error}")]
    Sops { what: String, error: SopsError },
    #[error(
        "the age recipients ({recipients}) are {actual}, but --age-sha256 allows only {}: nothing encrypted. The recipients file or .sops.yaml may have been changed; check it",
        allowed.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )]
    RecipientsMismatch {
        recipients: String,
        actual: Fingerprint<AgeRecipientsKind>,
        allowed: Vec<Fingerprint<AgeRecipientsKind>>,
    },
    #[error("--raw needs --namespace (unless --scope cluster-wide)")]
    RawNeedsNamespace,
    #[error("--raw with strict scope needs --name")]
    RawNeedsName,
    #[error("-o table does not apply: use -o yaml or -o json")]
    TableFormat,
    #[error(
        "{file} is sealed {sealed}, but --scope {given} was given: drop --scope, or reseal the whole Secret"
    )]
    ScopeConflict {
        file: String,
        sealed: Scope,
        given: Scope,
    },
    #[error(transparent)]
    Seal(#[from] SealError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A manifest read from `input` (a path or `stdin`).
    #[error("{input}: {error}")]
    Input { input: String, error: ManifestError },
}

fn input(input: impl Into<String>) -> impl FnOnce(ManifestError) -> SealCliError {
    let input = input.into();
    move |error| SealCliError::Input { input, error }
}

fn reading(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SealCliError {
    let what = what.into();
    move |error| SealCliError::Read { what, error }
}

fn writing(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SealCliError {
    let what = what.into();
    move |error| SealCliError::Write { what, error }
}

fn sops_at(what: impl Into<String>) -> impl FnOnce(SopsError) -> SealCliError {
    let what = what.into();
    move |error| SealCliError::Sops { what, error }
}

/// What `seal` writes: a SealedSecret (kubeseal's) or a sops-encrypted Secret (age).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    #[default]
    SealedSecrets,
    Sops,
}

#[derive(Debug, clap::Args)]
pub struct SealArgs {
    /// sealed-secrets (default: a SealedSecret for --cert) or sops (a Secret encrypted for
    /// the --age recipients as `sops -e --encrypted-regex '^(data|stringData)$'` does).
    #[arg(long, value_enum, default_value_t = OutputFormat::SealedSecrets)]
    pub format: OutputFormat,
    /// The sealing certificate (what the controller serves at /v1/cert.pem) or RSA public key, PEM.
    #[arg(long)]
    pub cert: Option<PathBuf>,
    /// --format sops: age recipients (age1...); comma-separated or repeated.
    #[arg(long = "age", value_name = "RECIPIENT", value_delimiter = ',')]
    pub age: Vec<String>,
    /// --format sops: a file of age recipients, one a line (`#` comments).
    #[arg(long = "age-file", value_name = "FILE")]
    pub age_file: Option<PathBuf>,
    /// --format sops: take the recipients from this .sops.yaml's creation rule for --path,
    /// as sops -e would (instead of --age / --age-file).
    #[arg(long = "sops-config", value_name = "FILE", requires = "path", conflicts_with_all = ["age", "age_file"])]
    pub sops_config: Option<PathBuf>,
    /// --format sops: the fingerprint the recipient set must have (sha256:<64 hex>, as
    /// `seal` prints it); repeatable. Use it when the recipients come from a file others
    /// can write (the fleet repo's .sops.yaml or recipients file).
    #[arg(long = "age-sha256", value_name = "FP")]
    pub age_sha256: Vec<String>,
    /// With --sops-config: where the output goes, relative to the .sops.yaml's directory
    /// (matched against each rule's path_regex).
    #[arg(long = "path", value_name = "PATH", requires = "sops_config")]
    pub path: Option<String>,
    /// The fingerprint the certificate must have (sha256:<64 hex>, checked with the
    /// controller); repeatable. A file anyone could have swapped is refused on mismatch.
    #[arg(long = "sha256", value_name = "FP")]
    pub sha256: Vec<String>,
    /// strict (default), namespace-wide or cluster-wide; default: the Secret's own scope annotation.
    #[arg(long, value_enum)]
    pub scope: Option<Scope>,
    /// The Secret's name, when the input has none (required with --raw for strict scope).
    #[arg(long)]
    pub name: Option<String>,
    /// The Secret's namespace, when the input has none.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Seal stdin as one value and print bare base64 (for spec.encryptedData).
    #[arg(long, conflicts_with = "merge_into")]
    pub raw: bool,
    /// Add or replace the input's keys in this SealedSecret file, in place.
    #[arg(long, value_name = "FILE")]
    pub(crate) merge_into: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct UnsealArgs {
    /// Private keys: PEM (PKCS#1 or PKCS#8) or the controller's key Secret; comma-separated or repeated.
    #[arg(
        long = "recovery-key",
        value_name = "KEY",
        value_delimiter = ',',
        required_unless_present = "age_key",
        conflicts_with = "age_key"
    )]
    pub(crate) recovery_key: Vec<PathBuf>,
    /// A sops file instead: the age identity file (AGE-SECRET-KEY-1..., as age-keygen
    /// writes it) that decrypts it; the MAC is checked as sops -d checks it.
    #[arg(long = "age-key", value_name = "FILE")]
    pub(crate) age_key: Option<PathBuf>,
    /// The SealedSecret or sops file (YAML or JSON); `-` or nothing reads stdin.
    pub file: Option<PathBuf>,
}

pub(super) fn seal(args: &SealArgs, format: Option<Format>) -> ExitCode {
    match try_seal(args, format) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail("seal", Chain(&e)),
    }
}

fn try_seal(args: &SealArgs, format: Option<Format>) -> Result<(), SealCliError> {
    if args.format == OutputFormat::Sops {
        return seal_sops(args, format);
    }
    let not_for = |flag| SealCliError::NotForFormat {
        flag,
        format: "sealed-secrets",
        fix: "add --format sops",
    };
    for (flag, given) in [
        ("--age", !args.age.is_empty()),
        ("--age-file", args.age_file.is_some()),
        ("--sops-config", args.sops_config.is_some()),
        ("--age-sha256", !args.age_sha256.is_empty()),
    ] {
        if given {
            return Err(not_for(flag));
        }
    }
    let cert_path = args.cert.as_ref().ok_or(SealCliError::NoCert)?;
    let cert =
        std::fs::read(cert_path).map_err(reading(format!("--cert {}", cert_path.display())))?;
    let key = SealingKey::from_pem(
        &cert,
        &cert_path.display().to_string(),
        OffsetDateTime::now_utc(),
    )?;
    check_fingerprint(&key, &args.sha256, cert_path)?;
    seal_with(args, format, &key)?;
    // Always said, so whoever seals can compare it with the controller's.
    eprintln!("sealed to {}", key.fingerprint());
    Ok(())
}

fn seal_with(
    args: &SealArgs,
    format: Option<Format>,
    key: &SealingKey,
) -> Result<(), SealCliError> {
    let input = read_limited(None)?;

    if args.raw {
        let scope = args.scope.unwrap_or_default();
        let namespace = args.namespace.as_deref().unwrap_or("");
        let name = args.name.as_deref().unwrap_or("");
        if scope != Scope::ClusterWide && namespace.is_empty() {
            return Err(SealCliError::RawNeedsNamespace);
        }
        if scope == Scope::Strict && name.is_empty() {
            return Err(SealCliError::RawNeedsName);
        }
        let ct = hybrid_encrypt(key, &scope.label(namespace, name), input.expose())?;
        let b64 = base64::engine::general_purpose::STANDARD.encode(ct);
        return write_stdout(b64.as_bytes());
    }

    let secret = stdin_secret(&input, args)?;
    if let Some(path) = &args.merge_into {
        return merge_into(path, &secret, key, args.scope);
    }
    let scope = args.scope.unwrap_or_else(|| secret.annotated_scope());
    let sealed = SealedSecret::seal(&secret, key, scope)?;
    let text = match format.unwrap_or(Format::Yaml) {
        Format::Json => sealed.to_json(),
        Format::Yaml => sealed.to_yaml(),
        Format::Table => return Err(SealCliError::TableFormat),
    };
    write_stdout(text.as_bytes())
}

/// The Secret read from stdin, with --name and --namespace applied.
fn stdin_secret(input: &SecretBytes, args: &SealArgs) -> Result<SecretInput, SealCliError> {
    let mut secret = SecretInput::parse(input.expose()).map_err(self::input("stdin"))?;
    secret
        .apply_flags(args.name.as_deref(), args.namespace.as_deref())
        .map_err(self::input("stdin"))?;
    Ok(secret)
}

/// `--format sops`: the Secret on stdin encrypted for the age recipients, as sops YAML.
fn seal_sops(args: &SealArgs, format: Option<Format>) -> Result<(), SealCliError> {
    let not_for = |flag, fix| SealCliError::NotForFormat {
        flag,
        format: "sops",
        fix,
    };
    let sealed_only = "it is for --format sealed-secrets; sops files have no scope";
    for (flag, given, fix) in [
        (
            "--cert",
            args.cert.is_some(),
            "pass age recipients with --age or --age-file",
        ),
        (
            "--sha256",
            !args.sha256.is_empty(),
            "pin the recipients with --age-sha256",
        ),
        ("--scope", args.scope.is_some(), sealed_only),
        ("--raw", args.raw, sealed_only),
        (
            "--merge-into",
            args.merge_into.is_some(),
            "encrypt the whole Secret again",
        ),
    ] {
        if given {
            return Err(not_for(flag, fix));
        }
    }
    if matches!(format, Some(Format::Json | Format::Table)) {
        return Err(not_for(
            "-o json/table",
            "sops files are written as YAML (-o yaml)",
        ));
    }
    let mut given = args.age.clone();
    if let Some(path) = &args.age_file {
        let what = format!("--age-file {}", path.display());
        let text = std::fs::read_to_string(path).map_err(reading(&what))?;
        let file = AgeRecipients::parse_file(&text).map_err(sops_at(what))?;
        given.extend(file.strings().map(str::to_string));
    }
    let recipients = match (&args.sops_config, &args.path) {
        (Some(config), Some(path)) => {
            let what = format!("--sops-config {}", config.display());
            let text = std::fs::read(config).map_err(reading(&what))?;
            sops::recipients_for(&text, path).map_err(sops_at(what))?
        }
        _ => AgeRecipients::parse(&given).map_err(sops_at("--age"))?,
    };
    let allowed = args
        .age_sha256
        .iter()
        .map(|fp| spokekeeper::rotate::state::fingerprint("--age-sha256", fp))
        .collect::<Result<Vec<Fingerprint<AgeRecipientsKind>>, _>>()
        .map_err(SealCliError::Fingerprint)?;
    let actual = recipients.fingerprint();
    if !allowed.is_empty() && !allowed.contains(&actual) {
        return Err(SealCliError::RecipientsMismatch {
            recipients: recipients.strings().collect::<Vec<_>>().join(", "),
            actual,
            allowed,
        });
    }
    let secret = stdin_secret(&read_limited(None)?, args)?;
    let text = sops::encrypt(&secret, &recipients).map_err(sops_at("stdin"))?;
    write_stdout(text.as_bytes())?;
    // Always said, so whoever encrypts can pin the set with --age-sha256.
    eprintln!(
        "encrypted for {} (recipients {actual})",
        recipients.strings().collect::<Vec<_>>().join(", ")
    );
    Ok(())
}

/// Refuses a certificate whose fingerprint `--sha256` does not list.
fn check_fingerprint(
    key: &SealingKey,
    allowed: &[String],
    cert: &Path,
) -> Result<(), SealCliError> {
    let allowed = allowed
        .iter()
        .map(|fp| spokekeeper::rotate::state::fingerprint("--sha256", fp))
        .collect::<Result<Vec<Fingerprint<Sealing>>, _>>()
        .map_err(SealCliError::Fingerprint)?;
    if allowed.is_empty() || allowed.contains(&key.fingerprint()) {
        return Ok(());
    }
    Err(SealCliError::FingerprintMismatch {
        cert: cert.to_path_buf(),
        actual: key.fingerprint(),
        allowed,
    })
}

/// Seals into an existing SealedSecret with its own name, namespace and scope, keeping
/// its format; the file is replaced atomically.
fn merge_into(
    path: &Path,
    secret: &SecretInput,
    key: &SealingKey,
    scope: Option<Scope>,
) -> Result<(), SealCliError> {
    let shown = path.display().to_string();
    let existing = std::fs::read(path).map_err(reading(format!("--merge-into {shown}")))?;
    let mut sealed = SealedSecret::parse(&existing).map_err(input(shown.as_str()))?;
    if let Some(given) = scope.filter(|s| *s != sealed.scope()) {
        return Err(SealCliError::ScopeConflict {
            file: shown,
            sealed: sealed.scope(),
            given,
        });
    }
    sealed.add_values(secret, key)?;
    let is_json = existing.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let text = if is_json {
        sealed.to_json()
    } else {
        sealed.to_yaml()
    };
    spokekeeper::fsutil::write_atomic(path, text.as_bytes()).map_err(writing(shown))
}

pub(super) fn unseal(args: &UnsealArgs, format: Option<Format>) -> ExitCode {
    match try_unseal(args, format) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail("unseal", Chain(&e)),
    }
}

fn try_unseal(args: &UnsealArgs, format: Option<Format>) -> Result<(), SealCliError> {
    let format = format.unwrap_or(Format::Yaml);
    if format == Format::Table {
        return Err(SealCliError::TableFormat);
    }
    if let Some(path) = &args.age_key {
        return unseal_sops(args, path, format);
    }
    let mut keys = Vec::new();
    for path in &args.recovery_key {
        let bytes = SecretBytes::from(
            std::fs::read(path).map_err(reading(format!("--recovery-key {}", path.display())))?,
        );
        keys.extend(RecoveryKey::load_all(
            bytes.expose(),
            &path.display().to_string(),
        )?);
    }
    let input = read_limited(args.file.as_deref())?;
    let shown = shown_file(args);
    let sealed = SealedSecret::parse(input.expose()).map_err(self::input(shown.as_str()))?;
    if !sealed.template.data.is_empty() {
        eprintln!(
            "warning: {shown}: spec.template.data holds Go templates; they are not rendered here"
        );
    }
    let secret = sealed.unseal(&keys).map_err(self::input(shown))?;
    let text = match format {
        Format::Json => secret.to_json(),
        _ => secret.to_yaml(),
    };
    write_stdout(text.expose())
}

/// The file `unseal` reads, for messages: its path or `stdin`.
fn shown_file(args: &UnsealArgs) -> String {
    args.file
        .as_deref()
        .map_or("stdin".into(), |p| p.display().to_string())
}

/// `unseal --age-key`: a sops file decrypted, every value and the MAC checked.
fn unseal_sops(args: &UnsealArgs, key: &Path, format: Format) -> Result<(), SealCliError> {
    let what = format!("--age-key {}", key.display());
    let bytes = SecretBytes::from(std::fs::read(key).map_err(reading(&what))?);
    let identities = AgeIdentities::parse(&bytes).map_err(sops_at(what))?;
    drop(bytes);
    let input = read_limited(args.file.as_deref())?;
    let shown = shown_file(args);
    let secret = sops::decrypt(input.expose(), &identities).map_err(sops_at(shown))?;
    let text = match format {
        Format::Json => secret.to_json(),
        _ => secret.to_yaml(),
    };
    write_stdout(text.expose())
}

/// Reads a file or stdin into memory, refusing more than a manifest can hold. The buffer
/// is reserved up front so it never reallocates (and leaves no unzeroized copy behind).
fn read_limited(path: Option<&Path>) -> Result<SecretBytes, SealCliError> {
    let (mut reader, shown): (Box<dyn Read>, String) = match path.filter(|p| p.as_os_str() != "-") {
        Some(p) => (
            Box::new(std::fs::File::open(p).map_err(reading(p.display().to_string()))?),
            p.display().to_string(),
        ),
        None => (Box::new(std::io::stdin()), "stdin".into()),
    };
    let mut buf = SecretBytes::with_capacity(MAX_MANIFEST_BYTES);
    let mut chunk = zeroize::Zeroizing::new([0u8; 16 * 1024]);
    loop {
        let n = reader.read(chunk.as_mut()).map_err(reading(&shown))?;
        if n == 0 {
            return Ok(buf);
        }
        if !buf.try_extend(&chunk[..n]) {
            return Err(SealCliError::TooLarge { what: shown });
        }
    }
}

fn write_stdout(bytes: &[u8]) -> Result<(), SealCliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|_| out.flush())
        .map_err(writing("stdout"))
}
