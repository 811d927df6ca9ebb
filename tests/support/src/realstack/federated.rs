//! Federated credentials (issue 42) in the lab: a hub API server with an issuer of its own
//! whose discovery document and JWKS anyone may read, spokes whose API server trusts it
//! through a structured AuthenticationConfiguration file, and a client that presents a
//! hub token to a spoke. Facts from the modules the lab is built from (k8s.io/kubernetes
//! v1.37.2 as `k8s`, k8s.io/apiserver v0.37.2 as `apiserver`):
//!
//! - jwks_uri: without `--service-account-jwks-uri` the discovery document names
//!   `https://EXTERNAL_ADDRESS/openid/v1/jwks` (k8s pkg/serviceaccount/openidmetadata.go
//!   141-157), the external address being the advertise address (k8s
//!   pkg/controlplane/apiserver/options/options.go 253), 10.43.0.1 in the lab: unreachable,
//!   so [`issuer_flags`] names the hub's own URL.
//! - The file is watched (fsnotify, and a poll every minute: k8s
//!   pkg/kubeapiserver/options/authentication.go 762-766, apiserver
//!   pkg/util/filesystem/watchuntil.go 50); a changed file is built, and swapped in only
//!   once every issuer in it answered its discovery and JWKS, checked every 10 s for at
//!   most a minute (k8s pkg/kubeapiserver/authenticator/config.go 321,
//!   `UpdateAuthenticationConfigTimeout` authentication.go 82). A file that does not
//!   parse or validate is not retried until it changes; a fetch that fails is.
//! - On success the metric `apiserver_authentication_config_controller_last_config_info`
//!   carries `hash="sha256:HEX"` of the file's bytes (apiserver
//!   pkg/server/options/authenticationconfig/metrics/metrics.go 96-106), set at start too
//!   (authentication.go 756): [`wait_config_loaded`] waits on it.
//! - `anonymous` in the file and `--anonymous-auth` together stop the server (authentication.go
//!   588-592), and the block may not change on reload (authentication.go 761, 797). A
//!   k3s in the code index leaves out its usual `--anonymous-auth=false` when
//!   kube-apiserver-arg names authentication-config (pkg/daemons/control/server.go: "Not
//!   setting kube-apiserver 'anonymous-auth' flag due to user-provided
//!   'authentication-config' file"), which turns anonymous requests on unless the file
//!   says otherwise: the lab's spokes do as that k3s, and every file here carries the
//!   same `anonymous: {enabled: false}`.
//! - Zero authenticators is a valid file (apiserver pkg/apis/apiserver/validation/validation.go
//!   51-53); every signing algorithm is accepted from the file (authentication.go 524-527:
//!   the hub's ES256 keys work); the issuer must differ from the spoke's own
//!   (validation.go 155).

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spokekeeper_lab::{Pki, PkiOptions};
use zeroize::Zeroizing;

use super::free_port;
use super::kube::{Etcd, KubeApi};

/// A file that trusts no issuer: what a spoke starts with before spokekeeper writes one.
pub const NO_ISSUERS: &str = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n\
                              anonymous:\n  enabled: false\njwt: []\n";

/// The flags that make the API server at `url` its own issuer, its JWKS named at its URL.
pub fn issuer_flags(url: &str) -> Vec<String> {
    vec![
        format!("--service-account-issuer={url}"),
        format!("--service-account-jwks-uri={url}/openid/v1/jwks"),
    ]
}

/// The ClusterRoleBinding of [`grant_anonymous_discovery`].
pub const DISCOVERY_BINDING: &str = "lab-anonymous-issuer-discovery";

/// The discovery document and JWKS to anyone (no credentials), nothing else: the
/// bootstrap ClusterRole system:service-account-issuer-discovery, which the API server
/// binds only to system:serviceaccounts, bound to system:unauthenticated too.
pub fn grant_anonymous_discovery(api: &KubeApi) {
    api.apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  \
         name: {DISCOVERY_BINDING}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  \
         kind: ClusterRole\n  name: system:service-account-issuer-discovery\nsubjects:\n\
         - apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: system:unauthenticated\n",
    ));
}

/// The hub's discovery document as a client without credentials gets it (the spoke's
/// fetch), trusting `ca_pem` (written beside the hub's files: public).
pub fn anonymous_discovery(api: &KubeApi, ca_pem: &str) -> Result<String, String> {
    let ca = api.dir.join("discovery-ca.crt");
    std::fs::write(&ca, ca_pem).map_err(|e| format!("{}: {e}", ca.display()))?;
    // curl: kubectl without credentials asks for a username.
    super::run(
        std::process::Command::new("curl")
            .args([
                "--silent",
                "--show-error",
                "--fail-with-body",
                "--max-time",
                "10",
            ])
            .arg("--cacert")
            .arg(&ca)
            .arg(format!("{}/.well-known/openid-configuration", api.url)),
    )
}

/// An API server named `name` on `addr` whose issuer is its own URL, discovery granted to
/// anyone, with the namespace flux-system and its ServiceAccounts kustomize-controller and
/// helm-controller (the identities the tests ask tokens for).
pub fn start_issuer(name: &str, dir: &Path, etcd: &Etcd, addr: IpAddr, pki: &Pki) -> KubeApi {
    let port = free_port(addr);
    let url = match addr {
        IpAddr::V4(a) => format!("https://{a}:{port}"),
        IpAddr::V6(a) => format!("https://[{a}]:{port}"),
    };
    let api = KubeApi::start(name, dir, etcd, addr, port, pki, &issuer_flags(&url));
    grant_anonymous_discovery(&api);
    api.apply(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: flux-system\n---\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: kustomize-controller\n  namespace: flux-system\n---\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: helm-controller\n  namespace: flux-system\n",
    );
    api
}

/// [`super::kube::control_plane`] with the hub as its own issuer ([`start_issuer`]).
pub fn issuer_control_plane(dir: &Path, host: IpAddr) -> (Pki, Etcd, KubeApi) {
    let pki = Pki::generate(&PkiOptions {
        address: host,
        address_in_sans: true,
        client_cert_days: 365,
    });
    let etcd = Etcd::start(dir);
    let api = start_issuer("hub", dir, &etcd, host, &pki);
    (pki, etcd, api)
}

/// One trusted issuer of an AuthenticationConfiguration, as the tests write it.
#[derive(Clone, Debug)]
pub struct Trust {
    /// The hub's issuer: its URL.
    pub issuer: String,
    /// The CA of the hub's serving certificate, PEM.
    pub ca_pem: String,
    /// The audiences a token must carry (one per spoke).
    pub audiences: Vec<String>,
    /// The only `sub` accepted (a CEL claim validation rule).
    pub subject: String,
    /// Prepended to `sub` to make the username.
    pub prefix: String,
}

impl Trust {
    /// The hub's kustomize-controller, for `audience`, usernames prefixed `hub:`.
    pub fn kustomize_controller(hub: &KubeApi, ca_pem: &str, audience: &str) -> Trust {
        Trust {
            issuer: hub.url.clone(),
            ca_pem: ca_pem.to_string(),
            audiences: vec![audience.to_string()],
            subject: "system:serviceaccount:flux-system:kustomize-controller".into(),
            prefix: "hub:".into(),
        }
    }

    /// The username a token of [`Trust::subject`] gets on the spoke.
    pub fn username(&self) -> String {
        format!("{}{}", self.prefix, self.subject)
    }
}

/// An AuthenticationConfiguration (apiserver.config.k8s.io/v1) trusting `trusts`, anonymous
/// requests off, as JSON (YAML's subset, so no quoting question arises).
pub fn authentication_config(trusts: &[Trust]) -> String {
    let jwt: Vec<Value> = trusts
        .iter()
        .map(|t| {
            json!({
                "issuer": {"url": t.issuer, "certificateAuthority": t.ca_pem, "audiences": t.audiences},
                "claimValidationRules": [{
                    "expression": format!("claims.sub == {}", json!(t.subject)),
                    "message": format!("only {} is trusted", t.subject),
                }],
                "claimMappings": {"username": {"claim": "sub", "prefix": t.prefix}},
            })
        })
        .collect();
    let config = json!({"apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AuthenticationConfiguration", "anonymous": {"enabled": false}, "jwt": jwt});
    format!("{config:#}\n")
}

/// Writes `text` to `path` as the node script does: a temporary file in the same
/// directory, then a rename over the target.
pub fn write_config(path: &Path, text: &str) {
    let dir = path.parent().expect("the file's directory");
    std::fs::create_dir_all(dir).expect("the config directory");
    let tmp = dir.join(".authentication-config.yaml.new");
    std::fs::write(&tmp, text).expect("write the new config");
    std::fs::rename(&tmp, path).expect("rename the new config into place");
}

/// The hash the API server's metric gives a file of `text`.
pub fn config_hash(text: &str) -> String {
    use sha2::Digest as _;
    let sum = sha2::Sha256::digest(text.as_bytes());
    let hex: String = sum.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The hash of the configuration `api` runs now, from its /metrics (read by the admin).
pub fn loaded_config_hash(api: &KubeApi) -> Result<String, String> {
    let metrics = api.try_kubectl(&["get", "--raw", "/metrics"])?;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("apiserver_authentication_config_controller_last_config_info{"))
        .ok_or("no last_config_info metric (started without --authentication-config?)")?;
    let labels = line
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(labels, _)| labels)
        .unwrap_or("");
    labels
        .split(',')
        .find_map(|l| l.strip_prefix("hash=\""))
        .and_then(|h| h.strip_suffix('"'))
        .map(str::to_string)
        .ok_or_else(|| format!("no hash label: {line}"))
}

/// How many automatic reloads of the file `api` counted as failed (a file that does not
/// parse or validate, an issuer that did not answer within a minute).
pub fn reload_failures(api: &KubeApi) -> Result<u64, String> {
    let metrics = api.try_kubectl(&["get", "--raw", "/metrics"])?;
    Ok(metrics
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_authentication_config_controller_automatic_reloads_total{")
                && l.contains("status=\"failure\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|n| n as u64)
        .sum())
}

/// Waits until `api` runs the configuration `text` (its metric's hash), and returns how
/// long that took from the call.
pub fn wait_config_loaded(api: &KubeApi, text: &str, within: Duration) -> Duration {
    let (want, started) = (config_hash(text), Instant::now());
    super::wait_until(
        "the spoke runs the new authentication config",
        within,
        || {
            std::thread::sleep(Duration::from_millis(500));
            match loaded_config_hash(api)? {
                h if h == want => Ok(started.elapsed()),
                h => Err(format!("runs {h}, not {want}\n{}", api.proc.tail(5))),
            }
        },
    )
}

/// A hub token (TokenRequest, 1h) for ServiceAccount `namespace/sa` with `audience`.
pub fn hub_token(hub: &KubeApi, namespace: &str, sa: &str, audience: &str) -> Zeroizing<String> {
    let out = Zeroizing::new(hub.kubectl(&[
        "create",
        "token",
        sa,
        "-n",
        namespace,
        "--duration=1h",
        &format!("--audience={audience}"),
    ]));
    Zeroizing::new(out.trim().to_string())
}

/// The discovery server of [`StaticIssuer`]: one document at the well-known path.
const DISCOVERY_SERVER: &str = r#"
import http.server, ssl, sys
host, port, cert, key, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
doc = open(path, 'rb').read()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != '/.well-known/openid-configuration':
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(doc)))
        self.end_headers()
        self.wfile.write(doc)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
server = http.server.ThreadingHTTPServer((host, port), Handler)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;

/// An issuer the hub will sign as next, its discovery document served on its own port of
/// the hub's address with the hub's serving certificate (so the hub's CA verifies it),
/// naming the hub's JWKS: a static copy, as an operator publishes one for an issuer the
/// hub does not sign as yet (its own document names only the issuer it signs as).
pub struct StaticIssuer {
    /// The issuer: `https://HUB_ADDRESS:PORT`.
    pub url: String,
    _server: super::proc::Proc,
}

impl StaticIssuer {
    pub fn serve(hub: &super::hub::RealHub) -> StaticIssuer {
        let api = &hub.api;
        let port = free_port(api.addr);
        let url = format!("https://{}:{port}", api.addr);
        let dir = hub.dir().join("static-issuer");
        std::fs::create_dir_all(&dir).expect("the static issuer's directory");
        let doc = json!({
            "issuer": url,
            "jwks_uri": format!("{}/openid/v1/jwks", api.url),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256", "RS256"],
        });
        let path = dir.join("openid-configuration.json");
        std::fs::write(&path, doc.to_string()).expect("write the discovery document");
        let mut cmd = std::process::Command::new(crate::requires::PYTHON_BIN.path());
        cmd.args([
            "-c",
            DISCOVERY_SERVER,
            &api.addr.to_string(),
            &port.to_string(),
        ])
        .arg(api.dir.join("serving.crt"))
        .arg(api.dir.join("serving.key"))
        .arg(&path);
        let mut server = super::proc::Proc::spawn("static-issuer", &dir, cmd);
        let ca = dir.join("ca.crt");
        std::fs::write(&ca, &hub.pki.parts.ca_pem).expect("write the hub's CA");
        super::wait_until(
            "the static issuer serves its document",
            super::kube::START,
            || {
                if !server.running() {
                    panic!("the static issuer exited: {}", server.tail(20));
                }
                super::run(
                    std::process::Command::new("curl")
                        .args(["--silent", "--show-error", "--fail", "--max-time", "5"])
                        .arg("--cacert")
                        .arg(&ca)
                        .arg(format!("{url}/.well-known/openid-configuration")),
                )
            },
        );
        StaticIssuer {
            url,
            _server: server,
        }
    }
}

/// The `iss` of a JWT (read, not verified: the lab's own tokens).
pub fn token_issuer(token: &str) -> String {
    use base64::Engine as _;
    let payload = token.split('.').nth(1).expect("a JWT");
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .expect("base64url");
    let claims: Value = serde_json::from_slice(&json).expect("JSON claims");
    claims["iss"].as_str().expect("iss").to_string()
}
