//! Kubeconfigs: parse, sanitize, rewrite, serialize.
//!
//! A kubeconfig read from a spoke is hostile input: a compromised node can plant an exec
//! plugin (CVE-2022-24817), point at local files, or disable TLS verification. So the
//! input is parsed under tight limits, anything but embedded certificates, a key and a
//! token is refused or dropped, and the output is rebuilt from scratch, one cluster, one
//! user, one context, deterministically.

use std::fmt;

use time::OffsetDateTime;
use url::Url;

use crate::certs::{self, CertError, CertInfo, PrivateKey, Validity};
use crate::fingerprint::{Content, Fingerprint};
use crate::secret::SecretBytes;

mod assess;
mod emit;
mod raw;
mod server;

use raw::RawConfig;
pub(crate) use server::{parse_server, server_string, with_host};

/// Inputs larger than this are refused before parsing; real kubeconfigs are a few KiB.
pub const MAX_BYTES: usize = 1024 * 1024;

/// Why a kubeconfig was refused. Each names the field (`users[default].user.exec`) and
/// the fix, and never contains key material or tokens.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error(
        "the input is {size} bytes, over the {limit}-byte limit for a kubeconfig (they are a \
         few KiB); check that this is the right file"
    )]
    TooLarge { size: usize, limit: usize },
    #[error(
        "not a readable kubeconfig{}: {reason}; check that this is the file the distribution wrote",
        location(line, column)
    )]
    Yaml {
        line: Option<u64>,
        column: Option<u64>,
        reason: String,
    },
    #[error("{field}: {what}, refused. Fix: {fix}")]
    Forbidden {
        field: String,
        what: &'static str,
        fix: &'static str,
    },
    #[error("{field}: missing. Fix: {fix}")]
    Missing { field: String, fix: &'static str },
    #[error("{field}: {reason}. Fix: {fix}")]
    Invalid {
        field: String,
        reason: String,
        fix: &'static str,
    },
    #[error(
        "{field}: {error}. Fix: read the kubeconfig again from the node; if it persists, regenerate it there"
    )]
    Certificate { field: String, error: CertError },
    #[error(
        "{field}: \"{subject}\" expired at {not_after}. Fix: renew it on the spoke (k3s/RKE2: restart the server; kubeadm: kubeadm certs renew admin.conf)"
    )]
    Expired {
        field: String,
        subject: String,
        not_after: String,
    },
    #[error(
        "{field}: \"{subject}\" is not valid before {not_before}. Fix: check the clocks of the spoke and of this host"
    )]
    NotYetValid {
        field: String,
        subject: String,
        not_before: String,
    },
}

fn location(line: &Option<u64>, column: &Option<u64>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" (line {l}, column {c})"),
        (Some(l), None) => format!(" (line {l})"),
        _ => String::new(),
    }
}

impl KubeconfigError {
    /// The field path the error is about, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::TooLarge { .. } | Self::Yaml { .. } => None,
            Self::Forbidden { field, .. }
            | Self::Missing { field, .. }
            | Self::Invalid { field, .. }
            | Self::Certificate { field, .. }
            | Self::Expired { field, .. }
            | Self::NotYetValid { field, .. } => Some(field),
        }
    }
}

/// A parsed kubeconfig, not yet judged. Holds secrets (zeroized on drop, never printed).
pub struct Kubeconfig {
    raw: RawConfig,
}

impl fmt::Debug for Kubeconfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kubeconfig")
            .field("current_context", &self.raw.current_context)
            .field("contexts", &self.raw.contexts.len())
            .finish_non_exhaustive()
    }
}

impl Kubeconfig {
    pub fn current_context(&self) -> Option<&str> {
        self.raw.current_context.as_deref()
    }

    /// Every field that would make a client do more than talk TLS with embedded
    /// credentials (a plugin, a file path, a proxy, basic auth, skipped verification),
    /// wherever it appears: the rule set [`sanitize`] and the live check share.
    pub fn forbidden(&self) -> Vec<KubeconfigError> {
        assess::forbidden(&self.raw)
    }
}

/// Parses a kubeconfig under limits: size ([`MAX_BYTES`]), nesting, aliases, one document.
pub fn parse(bytes: &[u8]) -> Result<Kubeconfig, KubeconfigError> {
    if bytes.len() > MAX_BYTES {
        return Err(KubeconfigError::TooLarge {
            size: bytes.len(),
            limit: MAX_BYTES,
        });
    }
    if bytes.trim_ascii().is_empty() {
        return Err(yaml_reason("the input is empty"));
    }
    let raw: RawConfig =
        serde_saphyr::from_slice_with_options(bytes, crate::text::hostile_yaml(MAX_BYTES))
            .map_err(yaml_error)?;
    if let Some(v) = raw.api_version.as_deref().filter(|v| *v != "v1") {
        return Err(not_a_kubeconfig("apiVersion", v, "v1"));
    }
    if let Some(k) = raw.kind.as_deref().filter(|k| *k != "Config") {
        return Err(not_a_kubeconfig("kind", k, "Config"));
    }
    Ok(Kubeconfig { raw })
}

fn yaml_reason(reason: &str) -> KubeconfigError {
    KubeconfigError::Yaml {
        line: None,
        column: None,
        reason: reason.into(),
    }
}

fn not_a_kubeconfig(field: &str, found: &str, want: &'static str) -> KubeconfigError {
    KubeconfigError::Invalid {
        field: field.into(),
        reason: format!(
            "is \"{}\", not \"{want}\": this is not a kubeconfig",
            crate::text::one_line(found, 256)
        ),
        fix: "pass the kubeconfig file itself (k3s.yaml, rke2.yaml, admin.conf)",
    }
}

fn yaml_error(e: serde_saphyr::Error) -> KubeconfigError {
    let at = e.location().filter(|l| l.line() > 0);
    let (line, column) = (
        at.map(|l| l.line()),
        at.map(|l| l.column()).filter(|&c| c > 0),
    );
    let reason = match &e {
        serde_saphyr::Error::Budget { breach, .. } => {
            format!("it exceeds a limit set for kubeconfigs ({breach:?})")
        }
        _ => {
            let mut msg = e.to_string();
            if let (Some(l), Some(c)) = (line, column) {
                let suffix = format!(" at line {l}, column {c}");
                if let Some(stripped) = msg.strip_suffix(&suffix) {
                    msg = stripped.to_owned();
                }
            }
            redact_quoted(&msg.replace(", set DuplicateKeyPolicy in Options if acceptable", ""))
        }
    };
    KubeconfigError::Yaml {
        line,
        column,
        reason,
    }
}

/// Parser messages quote offending values; a value may be a secret, so quotes are emptied.
fn redact_quoted(msg: &str) -> String {
    let first_line = msg.lines().next().unwrap_or_default();
    let mut out = String::new();
    let mut inside = false;
    for c in first_line.chars() {
        if c == '"' {
            inside = !inside;
            out.push_str(if inside { "\"…" } else { "\"" });
        } else if !inside {
            out.push(c);
        }
    }
    crate::text::one_line(&out, 256)
}

/// What a certificate is for, in a kubeconfig.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertRole {
    ClusterCa,
    Client,
    /// The certificates after the leaf in client-certificate-data (k3s: the client CA).
    ClientChain,
}

impl fmt::Display for CertRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CertRole::ClusterCa => "cluster CA",
            CertRole::Client => "client",
            CertRole::ClientChain => "client chain",
        })
    }
}

/// A kubeconfig reduced to one cluster, one user and one context, all named after the
/// spoke, with embedded data only. Holds secrets: zeroized on drop, never printed.
pub struct Sanitized {
    name: String,
    server: Url,
    tls_server_name: Option<String>,
    ca: Vec<CertInfo>,
    client: Vec<CertInfo>,
    key: Option<PrivateKey>,
    token: Option<SecretBytes>,
}

impl fmt::Debug for Sanitized {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sanitized")
            .field("name", &self.name)
            .field("server", &self.server.as_str())
            .field("tls_server_name", &self.tls_server_name)
            .field(
                "ca",
                &self.ca.iter().map(|c| &c.fingerprint).collect::<Vec<_>>(),
            )
            .field(
                "client",
                &self
                    .client
                    .iter()
                    .map(|c| &c.fingerprint)
                    .collect::<Vec<_>>(),
            )
            .field("client_key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Checks a parsed kubeconfig and reduces it to what spokekeeper stores. The first
/// problem found is the error; [`review`] lists them all.
pub fn sanitize(kc: &Kubeconfig, spoke_name: &str) -> Result<Sanitized, KubeconfigError> {
    if !server::is_dns_name(spoke_name) || spoke_name.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(KubeconfigError::Invalid {
            field: "spoke name".into(),
            reason: format!(
                "\"{}\" is not a DNS-1123 name",
                crate::text::one_line(spoke_name, 256)
            ),
            fix: "name spokes with lowercase letters, digits, '-' and '.'",
        });
    }
    let mut a = assess::assess(&kc.raw);
    if !a.problems.is_empty() {
        return Err(a.problems.swap_remove(0));
    }
    let Some(server) = a.server.filter(|_| !a.ca.is_empty()) else {
        return unreachable_problem();
    };
    Ok(Sanitized {
        name: spoke_name.to_owned(),
        server,
        tls_server_name: a.tls_server_name,
        ca: a.ca,
        client: a.client,
        key: a.key,
        token: a.token,
    })
}

/// Assessment promises a server and a CA when it reports no problem; should that ever
/// break, refuse rather than panic.
fn unreachable_problem<T>() -> Result<T, KubeconfigError> {
    Err(KubeconfigError::Missing {
        field: "clusters".into(),
        fix: "report this as a spokekeeper bug, with the kubeconfig's structure (not its data)",
    })
}

impl Sanitized {
    /// The same cluster, server and CA with another client chain and key and no token:
    /// a minted credential next to the admin one it was minted with.
    pub(crate) fn with_client(&self, client: Vec<CertInfo>, key: PrivateKey) -> Sanitized {
        Sanitized {
            name: self.name.clone(),
            server: self.server.clone(),
            tls_server_name: self.tls_server_name.clone(),
            ca: self.ca.clone(),
            client,
            key: Some(key),
            token: None,
        }
    }

    /// The same credential for the API server at `url`: one server node of a control
    /// plane, reached by itself rather than through the balancer the kubeconfig names.
    pub(crate) fn at_server(&self, url: &Url) -> Sanitized {
        Sanitized {
            name: self.name.clone(),
            server: url.clone(),
            tls_server_name: self.tls_server_name.clone(),
            ca: self.ca.clone(),
            client: self.client.clone(),
            key: self.key.clone(),
            token: self.token.clone(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn server(&self) -> &Url {
        &self.server
    }

    /// The server as written into the kubeconfig (no trailing `/`).
    pub fn server_string(&self) -> String {
        server::server_string(&self.server)
    }

    pub fn tls_server_name(&self) -> Option<&str> {
        self.tls_server_name.as_deref()
    }

    /// Points the kubeconfig at `host` (IPv4, IPv6 with or without brackets, or a DNS
    /// name), keeping scheme, path and, unless `port` is given, the port. A given
    /// `tls_server_name` replaces the one read from the node.
    pub fn rewrite_server(
        &mut self,
        host: &str,
        port: Option<u16>,
        tls_server_name: Option<&str>,
    ) -> Result<(), KubeconfigError> {
        let field = format!("clusters[{}].cluster.server", self.name);
        let invalid = |reason: String| KubeconfigError::Invalid {
            field: field.clone(),
            reason,
            fix: "give the spoke's address as an IP address or a DNS name, and a port from 1 to 65535",
        };
        let mut url = server::with_host(&self.server, host).map_err(|r| {
            invalid(format!(
                "new host \"{}\" {r}",
                crate::text::one_line(host, 256)
            ))
        })?;
        if let Some(port) = port {
            if port == 0 {
                return Err(invalid("port 0 is not a port".into()));
            }
            url.set_port(Some(port))
                .map_err(|()| invalid("cannot set the port".into()))?;
        }
        if let Some(name) = tls_server_name {
            self.tls_server_name =
                Some(
                    assess::tls_server_name(name).map_err(|reason| KubeconfigError::Invalid {
                        field: format!("clusters[{}].cluster.tls-server-name", self.name),
                        reason: reason.to_string(),
                        fix: "give a DNS name or an IP address in the API server's certificate",
                    })?,
                );
        }
        self.server = url;
        Ok(())
    }

    /// Points the kubeconfig at `url` exactly (scheme, host, port and path), as given by a
    /// spoke's `api_server`: a load balancer on 443 or a proxy under a path.
    pub fn set_server(&mut self, url: &Url) -> Result<(), KubeconfigError> {
        self.server =
            server::parse_server(url.as_str()).map_err(|reason| KubeconfigError::Invalid {
                field: "api_server".into(),
                reason: format!("\"{}\" {reason}", crate::text::one_line(url.as_str(), 256)),
                fix: "give an https:// URL with a host and no credentials, query or fragment",
            })?;
        Ok(())
    }

    /// The cluster CA certificates (usually one), in the order given.
    pub(crate) fn ca_certs(&self) -> &[CertInfo] {
        &self.ca
    }

    /// DER of the first cluster CA certificate: the one spokekeeper records.
    pub fn ca_der(&self) -> &[u8] {
        &self.ca[0].der
    }

    pub fn ca_pem(&self) -> String {
        certs::to_pem(&self.ca.iter().map(|c| c.der.clone()).collect::<Vec<_>>())
    }

    /// The client leaf first, then the rest of client-certificate-data; empty with a
    /// token only.
    pub fn client_certs(&self) -> &[CertInfo] {
        &self.client
    }

    pub fn client_chain_der(&self) -> Vec<Vec<u8>> {
        self.client.iter().map(|c| c.der.clone()).collect()
    }

    pub fn has_client_key(&self) -> bool {
        self.key.is_some()
    }

    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Every certificate with its role.
    pub fn certificates(&self) -> Vec<(CertRole, &CertInfo)> {
        roles(&self.ca, &self.client)
    }

    /// Expired or not-yet-valid certificates at `now`.
    pub fn validity_problems(&self, now: OffsetDateTime) -> Vec<KubeconfigError> {
        validity_problems(&self.name, &self.name, self.certificates(), now)
    }

    /// The kubeconfig YAML; same content, same bytes.
    pub fn to_yaml(&self) -> SecretBytes {
        emit::to_yaml(self)
    }

    /// Lowercase hex SHA-256 of [`Sanitized::to_yaml`].
    pub fn content_sha256(&self) -> Fingerprint<Content> {
        Fingerprint::of(self.to_yaml().expose())
    }
}

fn roles<'a>(ca: &'a [CertInfo], client: &'a [CertInfo]) -> Vec<(CertRole, &'a CertInfo)> {
    let ca = ca.iter().map(|c| (CertRole::ClusterCa, c));
    let client = client.iter().enumerate().map(|(i, c)| {
        (
            if i == 0 {
                CertRole::Client
            } else {
                CertRole::ClientChain
            },
            c,
        )
    });
    ca.chain(client).collect()
}

fn validity_problems(
    cluster: &str,
    user: &str,
    certs: Vec<(CertRole, &CertInfo)>,
    now: OffsetDateTime,
) -> Vec<KubeconfigError> {
    let rfc3339 = |t: OffsetDateTime| {
        t.format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|_| t.to_string())
    };
    certs
        .into_iter()
        .filter_map(|(role, cert)| {
            let field = match role {
                CertRole::ClusterCa => {
                    format!("clusters[{cluster}].cluster.certificate-authority-data")
                }
                _ => format!("users[{user}].user.client-certificate-data"),
            };
            let subject = cert.subject.clone();
            match cert.validity_at(now) {
                Validity::Valid => None,
                Validity::Expired => Some(KubeconfigError::Expired {
                    field,
                    subject,
                    not_after: rfc3339(cert.not_after),
                }),
                Validity::NotYetValid => Some(KubeconfigError::NotYetValid {
                    field,
                    subject,
                    not_before: rfc3339(cert.not_before),
                }),
            }
        })
        .collect()
}

/// Everything `inspect` shows about a kubeconfig, refused or not.
#[derive(Debug)]
pub struct Review {
    pub context: Option<String>,
    /// As read (escaped), even when it would be refused.
    pub server: Option<String>,
    pub tls_server_name: Option<String>,
    pub certificates: Vec<(CertRole, CertInfo)>,
    pub has_client_key: bool,
    pub has_token: bool,
    /// Every reason the kubeconfig would be refused at `now`; empty when it is fine.
    pub problems: Vec<KubeconfigError>,
}

/// Lists every problem of the selected context, plus forbidden fields anywhere.
pub fn review(kc: &Kubeconfig, now: OffsetDateTime) -> Review {
    let a = assess::assess(&kc.raw);
    let mut problems = a.problems;
    let cluster = a.cluster_name.as_deref().unwrap_or("?");
    let user = a.user_name.as_deref().unwrap_or("?");
    problems.extend(validity_problems(
        cluster,
        user,
        roles(&a.ca, &a.client),
        now,
    ));
    Review {
        certificates: roles(&a.ca, &a.client)
            .into_iter()
            .map(|(r, c)| (r, c.clone()))
            .collect(),
        context: a.context,
        server: a.server_raw,
        tls_server_name: a.tls_server_name,
        has_client_key: a.key.is_some(),
        has_token: a.token.is_some(),
        problems,
    }
}
