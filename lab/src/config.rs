//! [`ConfigBuilder`]: a spokekeeper.yaml for the lab's fleets (docs/configuration.md), so
//! tests and benchmarks do not each spell the format.
//!
//! ```ignore
//! let yaml = ConfigBuilder::new(&clone, &cert)
//!     .top("renew_before: 1d\n")
//!     .spoke(Spoke::new("dev", "127.0.0.1").local(&kubeconfig))
//!     .yaml();
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The author the lab's configurations commit as.
pub const AUTHOR: &str = "spokekeeper <spokekeeper@example.org>";

/// A spokekeeper.yaml: `repo` (path and author), `sealing.cert`, lines of other top-level
/// sections as given, and the spokes.
#[derive(Clone, Debug)]
pub struct ConfigBuilder {
    repo: PathBuf,
    /// More lines under `repo:`, as written.
    repo_lines: String,
    cert: PathBuf,
    /// More lines under `sealing:`, as written.
    sealing_lines: String,
    top: String,
    spokes: Vec<Spoke>,
}

/// How a spoke is reached over SSH (`spokes[].ssh`).
#[derive(Clone, Debug)]
pub struct Ssh {
    pub port: u16,
    pub identity: PathBuf,
    /// None: the default (`~/.ssh/known_hosts`).
    pub known_hosts: Option<PathBuf>,
    /// As written in the file (`5s`); None: the default.
    pub connect_timeout: Option<String>,
}

/// One entry of `spokes:`.
#[derive(Clone, Debug)]
pub struct Spoke {
    name: String,
    address: String,
    /// `key: value` lines in the order given.
    fields: Vec<(String, String)>,
}

impl ConfigBuilder {
    /// The fleet repo's clone at `repo`, sealing to the certificate at `cert`.
    pub fn new(repo: impl AsRef<Path>, cert: impl AsRef<Path>) -> ConfigBuilder {
        ConfigBuilder {
            repo: repo.as_ref().to_path_buf(),
            repo_lines: String::new(),
            cert: cert.as_ref().to_path_buf(),
            sealing_lines: String::new(),
            top: String::new(),
            spokes: Vec::new(),
        }
    }

    /// Lines under `repo:` as written, indented (`  mode: pull-request\n`).
    pub fn repo(mut self, lines: &str) -> ConfigBuilder {
        push_lines(&mut self.repo_lines, lines);
        self
    }

    /// Seals to the certificate at `cert` instead.
    pub fn sealing_cert(mut self, cert: impl AsRef<Path>) -> ConfigBuilder {
        self.cert = cert.as_ref().to_path_buf();
        self
    }

    /// Lines under `sealing:` as written, indented (`  format: sops\n`).
    pub fn sealing(mut self, lines: &str) -> ConfigBuilder {
        push_lines(&mut self.sealing_lines, lines);
        self
    }

    /// Top-level lines as written (`renew_before: 1d\nhub:\n  kubeconfig: ...\n`), after
    /// `repo` and `sealing`.
    pub fn top(mut self, lines: &str) -> ConfigBuilder {
        push_lines(&mut self.top, lines);
        self
    }

    pub fn spoke(mut self, spoke: Spoke) -> ConfigBuilder {
        self.spokes.push(spoke);
        self
    }

    pub fn spokes(mut self, spokes: impl IntoIterator<Item = Spoke>) -> ConfigBuilder {
        self.spokes.extend(spokes);
        self
    }

    pub fn yaml(&self) -> String {
        let mut y = format!(
            "repo:\n  path: {}\n  author: {}\n{}sealing:\n  cert: {}\n{}{}",
            quote(&self.repo.display().to_string()),
            quote(AUTHOR),
            self.repo_lines,
            quote(&self.cert.display().to_string()),
            self.sealing_lines,
            self.top
        );
        if self.spokes.is_empty() {
            y.push_str("spokes: []\n");
            return y;
        }
        y.push_str("spokes:\n");
        for s in &self.spokes {
            let _ = writeln!(y, "  - name: {}", quote(&s.name));
            let _ = writeln!(y, "    address: {}", quote(&s.address));
            for (k, v) in &s.fields {
                let _ = writeln!(y, "    {k}: {v}");
            }
        }
        y
    }

    /// Writes [`ConfigBuilder::yaml`] to `path`.
    pub fn write(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.yaml())
    }
}

impl Spoke {
    pub fn new(name: impl Into<String>, address: impl ToString) -> Spoke {
        Spoke {
            name: name.into(),
            address: address.to_string(),
            fields: Vec::new(),
        }
    }

    /// `kubeconfig_path`, read over SSH.
    pub fn kubeconfig_path(self, path: impl AsRef<Path>) -> Spoke {
        let path = quote(&path.as_ref().display().to_string());
        self.field("kubeconfig_path", &path)
    }

    /// `source: local`: the kubeconfig at `path` is read on this host.
    pub fn local(self, path: impl AsRef<Path>) -> Spoke {
        self.field("source", "local").kubeconfig_path(path)
    }

    pub fn api_server(self, url: &str) -> Spoke {
        self.field("api_server", &quote(url))
    }

    pub fn ssh(self, ssh: &Ssh) -> Spoke {
        let mut v = format!(
            "{{ port: {}, identity: {}",
            ssh.port,
            quote(&ssh.identity.display().to_string())
        );
        if let Some(k) = &ssh.known_hosts {
            let _ = write!(v, ", known_hosts: {}", quote(&k.display().to_string()));
        }
        if let Some(t) = &ssh.connect_timeout {
            let _ = write!(v, ", connect_timeout: {t}");
        }
        v.push_str(" }");
        self.field("ssh", &v)
    }

    /// Any other key of the spoke, its value as written in YAML.
    pub fn field(mut self, key: &str, value: &str) -> Spoke {
        self.fields.push((key.into(), value.into()));
        self
    }
}

fn push_lines(to: &mut String, lines: &str) {
    to.push_str(lines);
    if !to.is_empty() && !to.ends_with('\n') {
        to.push('\n');
    }
}

/// `s` as a YAML scalar: plain when that reads back as the same string (tests edit the
/// written text, `  cert: /path`), else double-quoted (a JSON string is a YAML one).
fn quote(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_./-+@:~".contains(c);
    let typed = s.parse::<f64>().is_ok()
        || ["true", "false", "null", "yes", "no", "on", "off", "~"]
            .contains(&s.to_ascii_lowercase().as_str());
    let plain = !s.is_empty()
        && s.chars().all(safe)
        && !s.starts_with(['-', ':', '@', '~'])
        && !s.ends_with(':')
        && !typed;
    match plain {
        true => s.to_string(),
        false => serde_json::Value::from(s).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// spokekeeper's config::tests parses a full one; here, the layout and the quoting.
    #[test]
    fn writes_the_sections_in_order_quoting_only_what_needs_it() {
        for plain in ["/k/cert.pem", "127.0.0.2", "https://lb:443", "dev"] {
            assert_eq!(quote(plain), plain);
        }
        for quoted in ["/tmp/fleet clone", "1", "/k,h", "yes", "-x", "a: b", ""] {
            assert_eq!(quote(quoted), serde_json::Value::from(quoted).to_string());
        }
        assert_eq!(
            ConfigBuilder::new("r", "c")
                .repo("  mode: pull-request")
                .sealing_cert("d")
                .top("renew_before: 1d")
                .spoke(Spoke::new("dev", "127.0.0.2").local("/n"))
                .yaml(),
            "repo:\n  path: r\n  author: \"spokekeeper <spokekeeper@example.org>\"\n  mode: pull-request\n\
             sealing:\n  cert: d\nrenew_before: 1d\nspokes:\n\
             \x20 - name: dev\n    address: 127.0.0.2\n    source: local\n    kubeconfig_path: /n\n"
        );
        assert!(
            ConfigBuilder::new("r", "c")
                .yaml()
                .ends_with("spokes: []\n")
        );
    }
}
