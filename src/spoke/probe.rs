//! TLS probe of a spoke API server: take the serving chain without trusting it.
//!
//! This is how a rebuilt spoke (new CA) is seen without SSH: the recorded CA no longer
//! signs what the server presents. The probe decides nothing; it reports.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use time::OffsetDateTime;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use tokio_rustls::TlsConnector;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::chain::CaCheck;
use super::host_port;
use crate::fingerprint::{Fingerprint, Serving};

/// What the spoke API presented.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    /// `host:port` that was probed.
    pub server: String,
    /// The host part of the URL, as written (IP address or DNS name).
    pub host: String,
    /// The presented chain, DER, serving certificate first. Not verified.
    pub chain: Vec<Vec<u8>>,
    pub serving_sha256: Fingerprint<Serving>,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    /// The host is covered by the SANs: an IP SAN for an IP, a DNS SAN for a name.
    pub address_in_sans: bool,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ProbeError {
    #[error("invalid API server URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("{server} is unreachable: connection refused (API server down, or wrong port)")]
    Refused { server: String },
    #[error("{server} is unreachable: no answer within {secs}s while {phase}")]
    TimedOut {
        server: String,
        phase: &'static str,
        secs: f64,
    },
    #[error("{server} is unreachable: {reason}")]
    Unreachable { server: String, reason: String },
    #[error(
        "{server} does not speak TLS (something else answers on that port, e.g. plain HTTP or SSH): check \
         the API server URL"
    )]
    NotTls { server: String },
    #[error("TLS handshake with {server} failed: {reason}")]
    Handshake { server: String, reason: String },
    #[error("{server} completed TLS without presenting a certificate")]
    NoCertificate { server: String },
    #[error("{server} presented a serving certificate that does not parse as X.509")]
    BadCertificate { server: String },
    #[error(
        "{server} presented a chain of {certs} certificates ({bytes} bytes), over the {} certificates or {} bytes \
         spokekeeper judges: the server should present its certificate and intermediates only \
         (check its --tls-cert-file); nothing is decided for this spoke until it does",
        super::chain::MAX_CHAIN_CERTS,
        super::chain::MAX_CHAIN_BYTES
    )]
    ChainTooLong {
        server: String,
        certs: usize,
        bytes: usize,
    },
}

impl ProbeError {
    /// The server could not be reached at all: says nothing about its CA.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            Self::Refused { .. } | Self::TimedOut { .. } | Self::Unreachable { .. }
        )
    }
}

impl ProbeReport {
    /// Whether the serving certificate is signed by `ca_der`, directly or through
    /// presented certificates: by signature only, a change detector, not a trust
    /// decision (roots presented beside it are [`super::chain::judge`]'s to weigh).
    pub fn check_ca(&self, ca_der: &[u8]) -> CaCheck {
        match super::chain::judge(&self.chain, &[ca_der.to_vec()]).check {
            CaCheck::RootChanged => CaCheck::Verified,
            other => other,
        }
    }
}

/// Connects to `server` (`https://host:port`), completes a TLS handshake without
/// trusting the server, and reports its serving certificate. Bounded by `limit` in all.
pub async fn probe(server: &str, limit: Duration) -> Result<ProbeReport, ProbeError> {
    let (host, port) = parse_server(server)?;
    let shown = host_port(&host, port);
    let deadline = Instant::now() + limit;
    let secs = limit.as_secs_f64();
    let tcp = match timeout_at(deadline, TcpStream::connect((host.as_str(), port))).await {
        Err(_) => {
            return Err(ProbeError::TimedOut {
                server: shown,
                phase: "connecting",
                secs,
            });
        }
        Ok(Err(e)) => return Err(connect_error(shown, &e)),
        Ok(Ok(tcp)) => tcp,
    };
    let connector = TlsConnector::from(shared_config());
    let name = ServerName::try_from(host.clone()).map_err(|e| ProbeError::InvalidUrl {
        url: server.to_owned(),
        reason: e.to_string(),
    })?;
    let chain = match timeout_at(deadline, connector.connect(name, tcp)).await {
        Err(_) => {
            return Err(ProbeError::TimedOut {
                server: shown,
                phase: "in the TLS handshake",
                secs,
            });
        }
        Ok(Err(e)) => return Err(handshake_error(shown, &e)),
        Ok(Ok(mut tls)) => {
            let chain = tls
                .get_ref()
                .1
                .peer_certificates()
                .unwrap_or_default()
                .iter()
                .map(|c| c.to_vec())
                .collect();
            // Polite close; the report does not depend on it.
            let _ = timeout_at(deadline, tokio::io::AsyncWriteExt::shutdown(&mut tls)).await;
            chain
        }
    };
    report(shown, host, chain)
}

fn report(server: String, host: String, chain: Vec<Vec<u8>>) -> Result<ProbeReport, ProbeError> {
    let Some(leaf_der) = chain.first() else {
        return Err(ProbeError::NoCertificate { server });
    };
    if let Some((certs, bytes)) = super::chain::over_caps(&chain) {
        return Err(ProbeError::ChainTooLong {
            server,
            certs,
            bytes,
        });
    }
    let Ok((_, leaf)) = X509Certificate::from_der(leaf_der) else {
        return Err(ProbeError::BadCertificate { server });
    };
    let mut dns_names = Vec::new();
    let mut ip_addresses = Vec::new();
    if let Ok(Some(san)) = leaf.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => dns_names.push((*d).to_owned()),
                GeneralName::IPAddress(b) => {
                    if let Ok(a) = <[u8; 4]>::try_from(*b) {
                        ip_addresses.push(IpAddr::from(a));
                    } else if let Ok(a) = <[u8; 16]>::try_from(*b) {
                        ip_addresses.push(IpAddr::from(a));
                    }
                }
                _ => {}
            }
        }
    }
    let address_in_sans = covers(&host, &dns_names, &ip_addresses);
    Ok(ProbeReport {
        serving_sha256: Fingerprint::of(leaf_der),
        not_before: leaf.validity().not_before.to_datetime(),
        not_after: leaf.validity().not_after.to_datetime(),
        server,
        host,
        dns_names,
        ip_addresses,
        address_in_sans,
        chain,
    })
}

/// IP hosts need an IP SAN (a DNS SAN spelling the IP does not count); names need a
/// DNS SAN, where `*.` covers exactly one leftmost label.
fn covers(host: &str, dns: &[String], ips: &[IpAddr]) -> bool {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return ips.contains(&ip);
    }
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    dns.iter().any(|san| {
        let san = san.trim_end_matches('.').to_ascii_lowercase();
        match san.strip_prefix("*.") {
            Some(suffix) => host
                .split_once('.')
                .is_some_and(|(label, rest)| !label.is_empty() && rest == suffix),
            None => san == host,
        }
    })
}

fn parse_server(server: &str) -> Result<(String, u16), ProbeError> {
    let invalid = |reason: &str| ProbeError::InvalidUrl {
        url: server.to_owned(),
        reason: reason.to_owned(),
    };
    let url = url::Url::parse(server).map_err(|e| invalid(&e.to_string()))?;
    if url.scheme() != "https" {
        return Err(invalid("the scheme must be https"));
    }
    let host = match url.host() {
        Some(url::Host::Domain(d)) => d.to_owned(),
        Some(url::Host::Ipv4(a)) => a.to_string(),
        Some(url::Host::Ipv6(a)) => a.to_string(),
        None => return Err(invalid("no host")),
    };
    let port = url
        .port_or_known_default()
        .ok_or_else(|| invalid("no port"))?;
    Ok((host, port))
}

fn connect_error(server: String, e: &std::io::Error) -> ProbeError {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => ProbeError::Refused { server },
        K::TimedOut => ProbeError::TimedOut {
            server,
            phase: "connecting",
            secs: 0.0,
        },
        _ => ProbeError::Unreachable {
            server,
            reason: e.to_string(),
        },
    }
}

fn handshake_error(server: String, e: &std::io::Error) -> ProbeError {
    use std::io::ErrorKind as K;
    let tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match (tls, e.kind()) {
        (Some(rustls::Error::InvalidMessage(_)), _) => ProbeError::NotTls { server },
        (Some(rustls::Error::AlertReceived(alert)), _) => ProbeError::Handshake {
            server,
            reason: format!("the server sent the TLS alert {alert:?}"),
        },
        (Some(other), _) => ProbeError::Handshake {
            server,
            reason: other.to_string(),
        },
        (None, K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe) => {
            ProbeError::Handshake {
                server,
                reason: "the server closed the connection during the handshake".into(),
            }
        }
        (None, _) => ProbeError::Handshake {
            server,
            reason: e.to_string(),
        },
    }
}

/// One client configuration for every probe, built once: a provider and a verifier per
/// probe were a measurable part of a 10 000-spoke tick.
fn shared_config() -> Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    CONFIG.get_or_init(|| Arc::new(client_config())).clone()
}

fn client_config() -> ClientConfig {
    // The probe pins ring rather than relying on a process default being installed.
    let mut provider = rustls::crypto::ring::default_provider();
    // AES-128-GCM first: the probe protects no secret, and the SHA-384 of the
    // AES-256 suite was a measurable part of the handshake's CPU.
    provider
        .cipher_suites
        .sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyChain::default()))
        .with_no_client_auth();
    // Every probe a full handshake: a resumed session reports the certificate of the
    // session it resumes, not the one the server holds now (k3s renews in place).
    config.resumption = rustls::client::Resumption::disabled();
    config
}

/// Accepts any chain; the probe reads it from the connection. Handshake signatures are
/// still checked, so the server proves it holds the key of the certificate it presents.
#[derive(Debug)]
struct AnyChain {
    algorithms: WebPkiSupportedAlgorithms,
}

impl Default for AnyChain {
    fn default() -> Self {
        Self {
            algorithms: rustls::crypto::ring::default_provider().signature_verification_algorithms,
        }
    }
}

impl ServerCertVerifier for AnyChain {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AES-128-GCM is offered first, and every suite ring offers is still offered.
    #[test]
    fn the_probe_offers_aes_128_first_and_drops_no_suite() {
        let offered: Vec<_> = client_config()
            .crypto_provider()
            .cipher_suites
            .iter()
            .map(|s| s.suite())
            .collect();
        assert_eq!(offered[0], rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
        let mut all: Vec<_> = rustls::crypto::ring::default_provider()
            .cipher_suites
            .iter()
            .map(|s| s.suite())
            .collect();
        let mut sorted = offered.clone();
        sorted.sort_by_key(|s| u16::from(*s));
        all.sort_by_key(|s| u16::from(*s));
        assert_eq!(sorted, all);
    }

    /// A chain over the caps is refused before anything in it is parsed, naming the
    /// server and both sizes; one at the caps is reported.
    #[test]
    fn a_chain_over_the_caps_is_refused_not_judged() {
        use super::super::chain::{MAX_CHAIN_BYTES, MAX_CHAIN_CERTS};
        let mut p = rcgen::CertificateParams::new(vec!["spoke".into()]).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver");
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = p.self_signed(&key).unwrap().der().to_vec();
        let at_cap = vec![leaf.clone(); MAX_CHAIN_CERTS];
        let ok = report("s:6443".into(), "s".into(), at_cap).unwrap();
        assert_eq!(ok.chain.len(), MAX_CHAIN_CERTS);
        let long = vec![leaf.clone(); MAX_CHAIN_CERTS + 134];
        let e = report("s:6443".into(), "s".into(), long).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("s:6443 presented a chain of 150 certificates"),
            "{text}"
        );
        assert!(text.contains("--tls-cert-file"), "{text}");
        assert!(!e.is_unreachable());
        // Few certificates but too many bytes: a padded one.
        let padded = vec![leaf, vec![0u8; MAX_CHAIN_BYTES]];
        let e = report("s:6443".into(), "s".into(), padded).unwrap_err();
        assert!(
            matches!(e, ProbeError::ChainTooLong { certs: 2, .. }),
            "{e}"
        );
    }

    #[test]
    fn san_coverage_distinguishes_ip_and_dns() {
        let dns = vec![
            "kubernetes".to_owned(),
            "*.spokes.example.org".to_owned(),
            "10.0.0.9".to_owned(),
        ];
        let ips = vec!["127.0.0.5".parse().unwrap(), "::1".parse().unwrap()];
        assert!(covers("127.0.0.5", &dns, &ips));
        assert!(covers("::1", &dns, &ips));
        assert!(!covers("127.0.0.6", &dns, &ips));
        // An IP spelled as a DNS SAN does not cover the IP.
        assert!(!covers("10.0.0.9", &dns, &ips));
        assert!(covers("KUBERNETES", &dns, &ips));
        assert!(covers("dev.spokes.example.org", &dns, &ips));
        assert!(!covers("a.dev.spokes.example.org", &dns, &ips));
        assert!(!covers("spokes.example.org", &dns, &ips));
    }

    #[test]
    fn server_urls_must_be_https_with_a_host() {
        assert_eq!(
            parse_server("https://127.0.0.5:6443").unwrap(),
            ("127.0.0.5".into(), 6443)
        );
        assert_eq!(
            parse_server("https://[::1]:6443/").unwrap(),
            ("::1".into(), 6443)
        );
        assert_eq!(
            parse_server("https://dev.example.org").unwrap(),
            ("dev.example.org".into(), 443)
        );
        assert!(
            parse_server("http://127.0.0.5:6443")
                .unwrap_err()
                .to_string()
                .contains("https")
        );
        assert!(parse_server("127.0.0.5:6443").is_err());
    }
}
