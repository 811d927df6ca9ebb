//! The report as JSON, YAML or a table.

use super::{Consumers, Report, Seen};
use crate::cli::{Format, out};
use spokekeeper::alerts;

/// The READY column: every consumer's Ready, in one word.
fn ready_column(cs: &Option<Consumers>) -> String {
    let Some(cs) = cs else { return "-".into() };
    if cs.error.is_some() || cs.items.iter().any(|c| c.error.is_some()) {
        return "error".into();
    }
    if cs.items.is_empty() {
        return "none".into();
    }
    if cs.items.iter().any(|c| !c.exists) {
        return "missing".into();
    }
    cs.items
        .iter()
        .map(|c| c.condition.as_ref().map_or("-", |c| c.status.as_str()))
        .find(|s| *s != "True")
        .unwrap_or("True")
        .to_string()
}

/// `extracted`, or `minted g4` (the user is in -o json; it is long).
fn credential_column(c: Option<&alerts::CredentialFacts>) -> String {
    match c {
        None => String::new(),
        Some(c) => match c.generation {
            Some(g) => format!("{} g{g}", c.mode),
            None => c.mode.to_string(),
        },
    }
}

pub(super) fn print(report: &Report, format: Format) {
    match format {
        Format::Json => out(&format!(
            "{}\n",
            serde_json::to_string_pretty(report).unwrap_or_default()
        )),
        Format::Yaml => out(&serde_saphyr::to_string(report).unwrap_or_default()),
        Format::Table => {
            let cond = |s: &Option<Seen>| match s {
                None => "-".to_string(),
                Some(s) if s.error.is_some() => "error".into(),
                Some(s) if !s.exists => "missing".into(),
                Some(s) => s
                    .condition
                    .as_ref()
                    .map_or("-".into(), |c| c.status.clone()),
            };
            let mut rows = vec![
                [
                    "SPOKE",
                    "COMMITTED",
                    "CREDENTIAL",
                    "CA",
                    "SYNCED",
                    "READY",
                    "PROBE",
                ]
                .map(String::from),
            ];
            for s in &report.spokes {
                rows.push([
                    s.spoke.clone(),
                    s.committed
                        .rotated_at
                        .clone()
                        .unwrap_or_else(|| s.committed.state.into()),
                    credential_column(s.committed.credential.as_ref()),
                    s.committed.ca_sha256.map(|f| f.short()).unwrap_or_default(),
                    match &s.config_map {
                        // No condition: applied when its data is the commit's.
                        Some(c) if c.error.is_none() && c.exists => match c.matches_commit {
                            Some(true) => "applied".into(),
                            Some(false) => "stale".into(),
                            None => "-".into(),
                        },
                        c @ Some(_) => cond(c),
                        None => cond(&s.sealed_secret),
                    },
                    ready_column(&s.consumers),
                    s.probe.state.into(),
                ]);
            }
            out(&crate::cli::table::render(&rows));
            if let Some(h) = &report.hub
                && let Some(e) = &h.error
            {
                eprintln!("hub: {e}");
            }
            for s in &report.spokes {
                if let Some(r) = &s.removal {
                    eprintln!(
                        "{}: the removal of the old Secret {} waits for review: {}",
                        s.spoke, r.file, r.pull_request
                    );
                }
                for p in &s.problems {
                    eprintln!("{}: {p}", s.spoke);
                }
            }
        }
    }
}
