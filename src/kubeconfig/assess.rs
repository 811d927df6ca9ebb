//! Judging a parsed kubeconfig: forbidden fields anywhere, then the selected context's
//! cluster and user, each problem named by its field path.

use url::Url;

use super::KubeconfigError;
use super::raw::{Flag, Named, RawCluster, RawConfig, RawUser};
use super::server;
use crate::certs::{self, CertError, CertInfo, PrivateKey, pem};
use crate::secret::SecretBytes;

#[derive(Default)]
pub(crate) struct Assessment {
    pub context: Option<String>,
    pub(crate) cluster_name: Option<String>,
    pub(crate) user_name: Option<String>,
    pub(crate) server_raw: Option<String>,
    pub server: Option<Url>,
    pub tls_server_name: Option<String>,
    pub ca: Vec<CertInfo>,
    pub client: Vec<CertInfo>,
    pub key: Option<PrivateKey>,
    pub token: Option<SecretBytes>,
    pub problems: Vec<KubeconfigError>,
}

const FIX_PLUGIN: &str = "use the admin kubeconfig the distribution writes (k3s.yaml, rke2.yaml, \
     admin.conf): it embeds a client certificate and key";
const FIX_PATH: &str =
    "embed the data instead (kubectl config view --raw --flatten writes the *-data fields)";

pub(crate) fn assess(raw: &RawConfig) -> Assessment {
    let mut a = Assessment {
        problems: forbidden(raw),
        ..Assessment::default()
    };
    duplicates("clusters", &raw.clusters, &mut a.problems);
    duplicates("contexts", &raw.contexts, &mut a.problems);
    duplicates("users", &raw.users, &mut a.problems);

    let Some(ctx) = select_context(raw, &mut a.problems) else {
        return a;
    };
    let ctx_name = esc(&ctx.name);
    a.context = Some(ctx_name.clone());
    let body = ctx.body.as_ref();
    let cluster = lookup(
        &ctx_name,
        "cluster",
        body.and_then(|b| b.cluster.as_deref()),
        &raw.clusters,
        &mut a.problems,
    );
    let user = lookup(
        &ctx_name,
        "user",
        body.and_then(|b| b.user.as_deref()),
        &raw.users,
        &mut a.problems,
    );
    if let Some(cluster) = cluster {
        a.cluster_name = Some(esc(&cluster.name));
        assess_cluster(cluster, &mut a);
    }
    if let Some(user) = user {
        a.user_name = Some(esc(&user.name));
        assess_user(user, &mut a);
    }
    a
}

/// The fields refused wherever they appear, in every cluster and user (not only the
/// selected ones): the one rule set for sanitizing and for the live check.
pub(crate) fn forbidden(raw: &RawConfig) -> Vec<KubeconfigError> {
    let mut out = Vec::new();
    for c in &raw.clusters {
        if let Some(body) = &c.body {
            forbidden_in_cluster(&esc(&c.name), body, &mut out);
        }
    }
    for u in &raw.users {
        if let Some(body) = &u.body {
            forbidden_in_user(&esc(&u.name), body, &mut out);
        }
    }
    out
}

/// Names from the input, made safe to print and short enough for a field path.
fn esc(name: &str) -> String {
    let mut s = crate::text::one_line(name, 256);
    if s.chars().count() > 64 {
        s = s.chars().take(63).chain(['…']).collect();
    }
    s
}

fn forbid(out: &mut Vec<KubeconfigError>, field: String, what: &'static str, fix: &'static str) {
    out.push(KubeconfigError::Forbidden { field, what, fix });
}

fn forbidden_in_cluster(name: &str, c: &RawCluster, out: &mut Vec<KubeconfigError>) {
    let field = |f: &str| format!("clusters[{name}].cluster.{f}");
    // Anything but an explicit false (a quoted "true", "yes") is refused too.
    if matches!(
        c.insecure_skip_tls_verify,
        Some(Flag::Bool(true) | Flag::Other)
    ) {
        forbid(
            out,
            field("insecure-skip-tls-verify"),
            "turns off verification of the API server's certificate",
            "remove it; certificate-authority-data pins the spoke's CA",
        );
    }
    if c.certificate_authority.is_some() {
        forbid(
            out,
            field("certificate-authority"),
            "a file path, read on whichever host uses the kubeconfig",
            FIX_PATH,
        );
    }
    if c.proxy_url.is_some() {
        forbid(
            out,
            field("proxy-url"),
            "routes the API traffic through a proxy chosen by the node",
            "remove proxy-url; spokekeeper connects to the spoke directly",
        );
    }
}

fn forbidden_in_user(name: &str, u: &RawUser, out: &mut Vec<KubeconfigError>) {
    let field = |f: &str| format!("users[{name}].user.{f}");
    let path = "a file path, read on whichever host uses the kubeconfig";
    let basic = "basic authentication (removed from Kubernetes in 1.19)";
    let checks: [(bool, &str, &'static str, &'static str); 7] = [
        (
            u.exec.is_some(),
            "exec",
            "an exec plugin, which runs a command wherever the kubeconfig is used (CVE-2022-24817)",
            FIX_PLUGIN,
        ),
        (
            u.auth_provider.is_some(),
            "auth-provider",
            "an auth-provider plugin, which runs code to fetch credentials",
            FIX_PLUGIN,
        ),
        (
            u.client_certificate.is_some(),
            "client-certificate",
            path,
            FIX_PATH,
        ),
        (u.client_key.is_some(), "client-key", path, FIX_PATH),
        (u.token_file.is_some(), "tokenFile", path, FIX_PATH),
        (
            u.username.is_some(),
            "username",
            basic,
            "use a client certificate and key, or a token",
        ),
        (
            u.password.is_some(),
            "password",
            basic,
            "use a client certificate and key, or a token",
        ),
    ];
    for (present, f, what, fix) in checks {
        if present {
            forbid(out, field(f), what, fix);
        }
    }
}

fn duplicates<T>(list: &str, entries: &[Named<T>], out: &mut Vec<KubeconfigError>) {
    let mut seen = std::collections::BTreeSet::new();
    let mut reported = std::collections::BTreeSet::new();
    for e in entries {
        if !seen.insert(e.name.as_str()) && reported.insert(e.name.as_str()) {
            out.push(KubeconfigError::Invalid {
                field: format!("{list}[{}]", esc(&e.name)),
                reason: "appears more than once, so which one applies is ambiguous".into(),
                fix: "keep one entry per name",
            });
        }
    }
}

fn select_context<'a>(
    raw: &'a RawConfig,
    out: &mut Vec<KubeconfigError>,
) -> Option<&'a Named<super::raw::RawContext>> {
    match raw.current_context.as_deref().filter(|c| !c.is_empty()) {
        Some(want) => {
            let found = raw.contexts.iter().find(|c| c.name == want);
            if found.is_none() {
                let present: Vec<String> = raw.contexts.iter().map(|c| esc(&c.name)).collect();
                out.push(KubeconfigError::Invalid {
                    field: "current-context".into(),
                    reason: format!(
                        "names context \"{}\", which is not in contexts (there: {})",
                        esc(want),
                        if present.is_empty() {
                            "none".into()
                        } else {
                            present.join(", ")
                        }
                    ),
                    fix: "set current-context to one of the contexts (kubectl config use-context)",
                });
            }
            found
        }
        None if raw.contexts.len() == 1 => raw.contexts.first(),
        None if raw.contexts.is_empty() => {
            out.push(KubeconfigError::Missing {
                field: "contexts".into(),
                fix: "use a kubeconfig with a context (k3s.yaml, rke2.yaml and admin.conf have one)",
            });
            None
        }
        None => {
            out.push(KubeconfigError::Missing {
                field: "current-context".into(),
                fix: "set current-context to the admin context (kubectl config use-context)",
            });
            None
        }
    }
}

fn lookup<'a, T>(
    ctx: &str,
    kind: &str,
    wanted: Option<&str>,
    entries: &'a [Named<T>],
    out: &mut Vec<KubeconfigError>,
) -> Option<&'a Named<T>> {
    let field = format!("contexts[{ctx}].context.{kind}");
    let Some(wanted) = wanted.filter(|w| !w.is_empty()) else {
        out.push(KubeconfigError::Missing {
            field,
            fix: "name the entry the context uses",
        });
        return None;
    };
    let found = entries.iter().find(|e| e.name == wanted);
    if found.is_none() {
        out.push(KubeconfigError::Invalid {
            field,
            reason: format!("names {kind} \"{}\", which is not in {kind}s", esc(wanted)),
            fix: "point the context at an existing entry",
        });
    }
    found
}

fn assess_cluster(cluster: &Named<RawCluster>, a: &mut Assessment) {
    let name = esc(&cluster.name);
    let field = |f: &str| format!("clusters[{name}].cluster.{f}");
    let Some(body) = &cluster.body else {
        a.problems.push(KubeconfigError::Missing {
            field: format!("clusters[{name}].cluster"),
            fix: "the cluster entry needs server and certificate-authority-data",
        });
        return;
    };
    match body.server.as_deref() {
        None | Some("") => a.problems.push(KubeconfigError::Missing {
            field: field("server"),
            fix: "the kubeconfig must name its API server (https://HOST:6443)",
        }),
        Some(s) => {
            a.server_raw = Some(crate::text::one_line(s, 256));
            match server::parse_server(s) {
                Ok(url) => a.server = Some(url),
                Err(reason) => a.problems.push(KubeconfigError::Invalid {
                    field: field("server"),
                    reason: reason.to_string(),
                    fix: "use https://HOST:PORT of the spoke's API server",
                }),
            }
        }
    }
    if let Some(name) = body.tls_server_name.as_deref().filter(|n| !n.is_empty()) {
        match tls_server_name(name) {
            Ok(n) => a.tls_server_name = Some(n),
            Err(reason) => a.problems.push(KubeconfigError::Invalid {
                field: field("tls-server-name"),
                reason: reason.to_string(),
                fix: "use a DNS name or an IP address in the API server's certificate",
            }),
        }
    }
    match body.certificate_authority_data.as_deref() {
        None | Some("") => a.problems.push(KubeconfigError::Missing {
            field: field("certificate-authority-data"),
            fix: "spokekeeper pins the spoke's own CA; use the kubeconfig the distribution wrote, which embeds it",
        }),
        Some(data) => match certificates(data.as_bytes()) {
            Ok(ca) if ca.len() > certs::MAX_CA_BUNDLE => a.problems.push(KubeconfigError::Invalid {
                field: field("certificate-authority-data"),
                reason: format!("{} certificates, over the {} a CA bundle may hold", ca.len(), certs::MAX_CA_BUNDLE),
                fix: "keep the CAs that sign the API server's certificate (the distribution's kubeconfig has one to four)",
            }),
            Ok(ca) => a.ca = ca,
            Err(source) => a.problems.push(KubeconfigError::Certificate { field: field("certificate-authority-data"), error: source }),
        },
    }
}

fn assess_user(user: &Named<RawUser>, a: &mut Assessment) {
    let name = esc(&user.name);
    let field = |f: &str| format!("users[{name}].user.{f}");
    let Some(body) = &user.body else {
        a.problems.push(KubeconfigError::Missing {
            field: format!("users[{name}].user"),
            fix: "the user entry needs client-certificate-data and client-key-data, or a token",
        });
        return;
    };
    let cert_data = body
        .client_certificate_data
        .as_deref()
        .filter(|d| !d.is_empty());
    let key_data = body
        .client_key_data
        .as_ref()
        .map(|k| &k.0)
        .filter(|k| !k.is_empty());
    if let Some(data) = cert_data {
        match certificates(data.as_bytes()) {
            Ok(chain) => a.client = chain,
            Err(source) => a.problems.push(KubeconfigError::Certificate {
                field: field("client-certificate-data"),
                error: source,
            }),
        }
    }
    if let Some(data) = key_data {
        match pem::decode_base64(data.expose())
            .map_err(CertError::from)
            .and_then(|pem| PrivateKey::from_pem(pem.expose()))
        {
            Ok(key) => a.key = Some(key),
            Err(source) => a.problems.push(KubeconfigError::Certificate {
                field: field("client-key-data"),
                error: source,
            }),
        }
    }
    match (cert_data.is_some(), key_data.is_some()) {
        (true, false) => a.problems.push(KubeconfigError::Missing {
            field: field("client-key-data"),
            fix: "a client certificate needs its key: use the complete kubeconfig from the node",
        }),
        (false, true) => a.problems.push(KubeconfigError::Missing {
            field: field("client-certificate-data"),
            fix: "a client key needs its certificate: use the complete kubeconfig from the node",
        }),
        _ => {}
    }
    let token = body.token.as_ref().map(|t| &t.0).filter(|t| !t.is_empty());
    if let Some(token) = token {
        // Emitted verbatim between double quotes, so quotes and escapes are excluded.
        if token
            .expose()
            .iter()
            .all(|&b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
        {
            a.token = Some(token.clone());
        } else {
            a.problems.push(KubeconfigError::Invalid {
                field: field("token"),
                reason: "contains characters a bearer token cannot have".into(),
                fix: "use the token as the API server issued it",
            });
        }
    }
    if cert_data.is_none() && key_data.is_none() && token.is_none() {
        a.problems.push(KubeconfigError::Missing {
            field: field("client-certificate-data"),
            fix: "the user needs client-certificate-data and client-key-data, or a token",
        });
    }
    check_client_chain(&field, a);
}

/// The key belongs to the leaf; each certificate is signed by the next; a lone leaf that
/// names the cluster CA as issuer is signed by it (kubeadm).
fn check_client_chain(field: &dyn Fn(&str) -> String, a: &mut Assessment) {
    let Some(leaf) = a.client.first() else { return };
    if let Some(Err(source)) = a
        .key
        .as_ref()
        .map(|key| certs::key_matches_cert(key, &leaf.der))
    {
        a.problems.push(KubeconfigError::Certificate {
            field: field("client-key-data"),
            error: source,
        });
    }
    for pair in a.client.windows(2) {
        if let Err(source) = certs::verify_signed_by(&pair[0].der, &pair[1].der) {
            a.problems.push(KubeconfigError::Certificate {
                field: field("client-certificate-data"),
                error: source,
            });
        }
    }
    if a.client.len() == 1 {
        for ca in a.ca.iter().filter(|ca| leaf.names_as_issuer(ca)) {
            if let Err(source) = certs::verify_signed_by(&leaf.der, &ca.der) {
                a.problems.push(KubeconfigError::Certificate {
                    field: field("client-certificate-data"),
                    error: source,
                });
            }
        }
    }
}

/// Certificates in a kubeconfig `*-data` field: base64 of PEM, nothing else.
fn certificates(data: &[u8]) -> Result<Vec<CertInfo>, CertError> {
    let decoded = pem::decode_base64(data)?;
    certs::parse_pem_certificates(decoded.expose())
}

/// A tls-server-name that is no server name; shown escaped.
#[derive(Debug, thiserror::Error)]
#[error("\"{}\" is neither a DNS name nor an IP address", crate::text::one_line(.name, 256))]
pub(crate) struct TlsNameError {
    name: String,
}

/// A TLS server name: a DNS name or an IP address.
pub(crate) fn tls_server_name(name: &str) -> Result<String, TlsNameError> {
    if name.parse::<std::net::IpAddr>().is_ok() || server::is_dns_name(name) {
        Ok(name.to_ascii_lowercase())
    } else {
        Err(TlsNameError {
            name: name.to_string(),
        })
    }
}
