//! `spokekeeper inspect`: a kubeconfig's or certificate's fingerprints and validity.
//!
//! Prints public facts only (fingerprints, names, dates, problems): never key material
//! or tokens. Exit 0 when spokekeeper would accept the input, 1 when it would refuse it,
//! 2 when the input cannot be read.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::Format;
use spokekeeper::certs::{self, CertInfo, Validity, pem};
use spokekeeper::kubeconfig::{self, KubeconfigError, MAX_BYTES};
use spokekeeper::secret::SecretBytes;

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// A kubeconfig or PEM certificate file; `-` or nothing reads stdin.
    pub file: Option<PathBuf>,
}

pub(super) fn run(args: &InspectArgs, format: Option<Format>) -> ExitCode {
    let path = args.file.as_deref().filter(|p| *p != Path::new("-"));
    let name = path.map_or_else(|| "stdin".to_owned(), |p| p.display().to_string());
    let (input, size) = match read_capped(path) {
        Ok(read) => read,
        Err(err) => {
            eprintln!("error: cannot read {name}: {}", super::Chain(&err));
            eprintln!("  fix: check the path and that this user may read it (`-` reads stdin)");
            return ExitCode::from(2);
        }
    };
    let now = OffsetDateTime::now_utc();
    let report = if pem::looks_like_pem(input.expose()) {
        certificates_report(name, input.expose(), now)
    } else {
        kubeconfig_report(name, input.expose(), size, now)
    };
    let text = match format.unwrap_or(Format::Table) {
        Format::Table => Ok(table(&report)),
        Format::Json => serde_json::to_string_pretty(&report)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
        Format::Yaml => serde_saphyr::to_string(&report).map_err(|e| e.to_string()),
    };
    let text = match text {
        Ok(text) => text,
        Err(err) => {
            eprintln!("error: cannot format the report: {err}; try -o table");
            return ExitCode::from(2);
        }
    };
    // A closed pipe (`| head`) is not an error worth a panic; the exit code still counts.
    let _ = io::stdout().lock().write_all(text.as_bytes());
    if report.refused {
        eprintln!(
            "error: spokekeeper would refuse this {}: {} problem(s), each with its fix, listed above",
            report.kind,
            report.problems.len()
        );
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Reads at most MAX_BYTES + 1 bytes into a buffer that never reallocates; also returns
/// the full size when known (a regular file), to say how far over the limit it is.
fn read_capped(path: Option<&Path>) -> io::Result<(SecretBytes, usize)> {
    let mut buf = Vec::with_capacity(MAX_BYTES + 1);
    let known = match path {
        Some(p) => {
            let file = File::open(p)?;
            let len = file.metadata()?.len();
            file.take(MAX_BYTES as u64 + 1).read_to_end(&mut buf)?;
            usize::try_from(len).unwrap_or(usize::MAX)
        }
        None => {
            io::stdin()
                .lock()
                .take(MAX_BYTES as u64 + 1)
                .read_to_end(&mut buf)?;
            0
        }
    };
    let size = known.max(buf.len());
    Ok((SecretBytes::new(buf), size))
}

#[derive(Default, Serialize)]
struct Report {
    input: String,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_server_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    credentials: Option<String>,
    certificates: Vec<CertRow>,
    /// Non-certificate PEM blocks that were skipped (their labels only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    skipped_blocks: Vec<String>,
    problems: Vec<Problem>,
    refused: bool,
}

#[derive(Serialize)]
struct CertRow {
    role: String,
    fingerprint: spokekeeper::fingerprint::Fingerprint<spokekeeper::fingerprint::Cert>,
    subject: String,
    issuer: String,
    serial: String,
    not_before: String,
    not_after: String,
    days_left: i64,
    is_ca: bool,
    dns_names: Vec<String>,
    ip_addresses: Vec<String>,
}

#[derive(Serialize)]
struct Problem {
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
    message: String,
}

impl From<&KubeconfigError> for Problem {
    fn from(e: &KubeconfigError) -> Self {
        Problem {
            field: e.field().map(str::to_owned),
            message: e.to_string(),
        }
    }
}

fn row(role: String, c: &CertInfo, now: OffsetDateTime) -> CertRow {
    let date = |t: OffsetDateTime| t.format(&Rfc3339).unwrap_or_else(|_| t.to_string());
    CertRow {
        role,
        fingerprint: c.fingerprint,
        subject: c.subject.clone(),
        issuer: c.issuer.clone(),
        serial: c.serial.clone(),
        not_before: date(c.not_before),
        not_after: date(c.not_after),
        days_left: c.days_left(now),
        is_ca: c.is_ca,
        dns_names: c.dns_names.clone(),
        ip_addresses: c.ip_addresses.iter().map(ToString::to_string).collect(),
    }
}

fn kubeconfig_report(input: String, bytes: &[u8], size: usize, now: OffsetDateTime) -> Report {
    let mut report = Report {
        input,
        kind: "kubeconfig",
        refused: true,
        ..Report::default()
    };
    let parsed = if size > MAX_BYTES {
        Err(KubeconfigError::TooLarge {
            size,
            limit: MAX_BYTES,
        })
    } else {
        kubeconfig::parse(bytes)
    };
    let kc = match parsed {
        Ok(kc) => kc,
        Err(e) => {
            report.problems.push((&e).into());
            return report;
        }
    };
    let review = kubeconfig::review(&kc, now);
    report.context = review.context;
    report.server = review.server;
    report.tls_server_name = review.tls_server_name;
    report.credentials = Some(
        match (review.has_client_key, review.has_token) {
            (true, true) => "client certificate and key, and a token",
            (true, false) => "client certificate and key",
            (false, true) => "token",
            (false, false) => "none usable",
        }
        .to_owned(),
    );
    report.certificates = review
        .certificates
        .iter()
        .map(|(role, c)| row(role.to_string(), c, now))
        .collect();
    report.problems = review.problems.iter().map(Problem::from).collect();
    report.refused = !report.problems.is_empty();
    report
}

fn certificates_report(input: String, bytes: &[u8], now: OffsetDateTime) -> Report {
    let mut report = Report {
        input,
        kind: "certificate file",
        ..Report::default()
    };
    let blocks = match pem::blocks(bytes) {
        Ok(blocks) => blocks,
        Err(e) => {
            report.problems.push(Problem {
                field: None,
                message: format!("{e}; check that this is a PEM file"),
            });
            report.refused = true;
            return report;
        }
    };
    for (index, block) in blocks.iter().enumerate() {
        let field = Some(format!("block[{index}]"));
        if block.label != "CERTIFICATE" {
            report.skipped_blocks.push(block.label.clone());
            continue;
        }
        match CertInfo::from_der(block.der.expose()) {
            Ok(cert) => {
                let message = match cert.validity_at(now) {
                    Validity::Valid => None,
                    Validity::Expired => {
                        Some(format!("\"{}\" has expired; renew it", cert.subject))
                    }
                    Validity::NotYetValid => Some(format!(
                        "\"{}\" is not valid yet; check the clocks",
                        cert.subject
                    )),
                };
                if let Some(message) = message {
                    report.problems.push(Problem {
                        field: field.clone(),
                        message,
                    });
                }
                report
                    .certificates
                    .push(row("certificate".into(), &cert, now));
            }
            Err(e) => report.problems.push(Problem {
                field,
                message: e.to_string(),
            }),
        }
    }
    if report.certificates.is_empty() && report.problems.is_empty() {
        report.problems.push(Problem {
            field: None,
            message: certs::CertError::NoCertificate.to_string(),
        });
    }
    report.refused = !report.problems.is_empty();
    report
}

fn table(r: &Report) -> String {
    let mut out = format!(
        "{}: {}\n",
        r.kind,
        spokekeeper::text::one_line(&r.input, 256)
    );
    for (label, value) in [
        ("context", &r.context),
        ("server", &r.server),
        ("tls-server-name", &r.tls_server_name),
        ("credentials", &r.credentials),
    ] {
        if let Some(v) = value {
            out.push_str(&format!("{label}: {v}\n"));
        }
    }
    if !r.certificates.is_empty() {
        out.push_str(&format!(
            "\n{:<13} {:<71} {:<20} {:>9}  SUBJECT\n",
            "ROLE", "FINGERPRINT", "NOT AFTER", "DAYS LEFT"
        ));
        for c in &r.certificates {
            out.push_str(&format!(
                "{:<13} {:<71} {:<20} {:>9}  {}\n",
                c.role, c.fingerprint, c.not_after, c.days_left, c.subject
            ));
        }
    }
    for label in &r.skipped_blocks {
        out.push_str(&format!("skipped a {label} block (not shown)\n"));
    }
    if r.problems.is_empty() {
        out.push_str("\nproblems: none\n");
    } else {
        out.push_str(&format!("\nproblems ({}):\n", r.problems.len()));
        for p in &r.problems {
            out.push_str(&format!("  - {}\n", p.message));
        }
    }
    out
}
