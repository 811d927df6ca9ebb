//! Reaching a spoke: SSH extraction, TLS probe, live API check.
//!
//! - [`extract`]: read the kubeconfig from the node (SSH, or a local file), into memory only;
//! - [`probe`]: the serving chain of the spoke API, taken without trusting it;
//! - [`live`]: call the spoke API with a kubeconfig and report who it authenticates as;
//! - [`recipe`]: what the operator installs on a node; [`write_authentication_config`]
//!   replaces a node's AuthenticationConfiguration through it.
//!
//! Everything read from a spoke is hostile input: sizes are capped, every step is bounded
//! by a timeout, errors say what failed and what to do, and never carry secret bytes.

pub mod chain;
mod error;
pub mod extract;
pub mod live;
mod node;
pub mod probe;
mod read;
pub mod recipe;
mod ssh;

pub use crate::config::{Distro, SshSettings};
pub use chain::{CaCheck, Judged};
pub use error::ExtractError;
pub use extract::{Source, extract, read_local, read_over_ssh};
pub use live::{LiveError, LiveReport, check_live, may_impersonate};
pub use node::{
    Header, read_authentication_config_header, read_with_script, write_authentication_config,
};
pub use probe::{ProbeError, ProbeReport, probe};
pub use recipe::{
    MAX_AUTHENTICATION_CONFIG_BYTES, NODE_RECIPE, NODE_SCRIPT, authentication_config_path,
    federated_recipe,
};

/// Largest kubeconfig accepted from a spoke. Bigger is an error, never a truncation.
pub const MAX_KUBECONFIG_BYTES: usize = 1 << 20;

/// `host:port`, with brackets around IPv6 literals, for messages.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Text from a remote party, made safe to put in an error: one line, printable ASCII,
/// short, and with long base64-like runs (keys, certificates, tokens) blanked out.
pub(crate) fn sanitize_remote_text(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("");
    let printable: String = line
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    let mut out = String::with_capacity(printable.len().min(max));
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() >= 32 {
            out.push_str("<redacted>");
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in printable.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_') {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    if out.len() > max {
        out.truncate(max);
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_text_is_one_short_printable_line_without_key_material() {
        let key = "LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0NBUUVFSUJ";
        let text = format!("first line\ncat: {key}: No such file\x1b[31m\n\n");
        let clean = sanitize_remote_text(&text, 200);
        assert_eq!(clean, "cat: <redacted>: No such file?[31m");
        assert_eq!(sanitize_remote_text(&"x ".repeat(300), 20).len(), 23);
    }
}
