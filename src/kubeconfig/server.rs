//! The API server URL and host names: parsed, never edited as text.

use std::net::{IpAddr, Ipv6Addr};

use url::Url;

/// Why a server URL is refused: the reason after the field that holds it (never the
/// URL's credentials).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServerError {
    #[error("not a URL ({0})")]
    NotUrl(url::ParseError),
    #[error("uses {scheme}://; only https keeps credentials and API traffic private")]
    NotHttps { scheme: String },
    #[error("has no host")]
    NoHost,
    #[error("carries credentials in the URL")]
    Credentials,
    #[error("has a query or a fragment, which an API server URL never has")]
    QueryOrFragment,
}

/// Why a host cannot be the API server URL's host: the reason after the host.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HostError {
    #[error("is bracketed but not an IPv6 address")]
    BracketedNotIpv6,
    #[error("is neither an IP address nor a DNS name (letters, digits, '-' and '.')")]
    NotAHost,
    #[error("cannot be set as the URL's host")]
    NotSettable,
}

/// An https URL with a host, no credentials, no query, no fragment.
pub(crate) fn parse_server(s: &str) -> Result<Url, ServerError> {
    let url = Url::parse(s).map_err(ServerError::NotUrl)?;
    if url.scheme() != "https" {
        return Err(ServerError::NotHttps {
            scheme: url.scheme().to_string(),
        });
    }
    if url.host().is_none() {
        return Err(ServerError::NoHost);
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ServerError::Credentials);
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(ServerError::QueryOrFragment);
    }
    Ok(url)
}

/// The URL as written into the kubeconfig: `https://host:port`, without the bare `/`
/// path the url crate adds.
pub(crate) fn server_string(url: &Url) -> String {
    let s = url.as_str();
    if url.path() == "/" {
        s.trim_end_matches('/').to_owned()
    } else {
        s.to_owned()
    }
}

/// `url` with its host replaced by `host` (IP address, bracketed or not, or DNS name);
/// scheme, port and path are kept.
pub(crate) fn with_host(url: &Url, host: &str) -> Result<Url, HostError> {
    let mut url = url.clone();
    let set = match parse_host(host)? {
        Host::Ip(ip) => url.set_ip_host(ip),
        Host::Name(name) => url.set_host(Some(&name)).map_err(|_| ()),
    };
    set.map_err(|()| HostError::NotSettable)?;
    Ok(url)
}

/// What a host argument turned out to be.
pub(crate) enum Host {
    Ip(IpAddr),
    Name(String),
}

/// An IPv4 or IPv6 address (brackets optional) or a DNS name; nothing else.
pub(crate) fn parse_host(host: &str) -> Result<Host, HostError> {
    let inner = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    if let Some(inner) = inner {
        return inner
            .parse::<Ipv6Addr>()
            .map(|ip| Host::Ip(IpAddr::V6(ip)))
            .map_err(|_| HostError::BracketedNotIpv6);
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(Host::Ip(ip));
    }
    if is_dns_name(host) {
        Ok(Host::Name(host.to_ascii_lowercase()))
    } else {
        Err(HostError::NotAHost)
    }
}

/// RFC 1123 host name; the last label must not be all digits (the url crate would read
/// `1.2.3` as an IPv4 address).
pub(crate) fn is_dns_name(s: &str) -> bool {
    let s = s.strip_suffix('.').unwrap_or(s);
    if s.is_empty() || s.len() > 253 {
        return false;
    }
    let labels_ok = s.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    labels_ok
        && !s
            .rsplit('.')
            .next()
            .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls() {
        let u = parse_server("https://127.0.0.1:6443").unwrap();
        assert_eq!(server_string(&u), "https://127.0.0.1:6443");
        let u = parse_server("https://rancher.example/k8s/clusters/c-1").unwrap();
        assert_eq!(
            server_string(&u),
            "https://rancher.example/k8s/clusters/c-1"
        );
        for bad in [
            "http://a:6443",
            "https://u:p@a:6443",
            "https://a/?x=1",
            "a:6443",
            "https://",
        ] {
            assert!(parse_server(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_new_host_keeps_scheme_port_and_path() {
        let u = parse_server("https://10.0.0.1:7443/k8s/spoke").unwrap();
        let moved = with_host(&u, "[fd00::2]").unwrap();
        assert_eq!(server_string(&moved), "https://[fd00::2]:7443/k8s/spoke");
        let u = parse_server("https://10.0.0.1").unwrap();
        let moved = with_host(&u, "API.example.org").unwrap();
        assert_eq!(server_string(&moved), "https://api.example.org");
        assert!(with_host(&u, "a b").is_err());
    }

    #[test]
    fn hosts() {
        assert!(matches!(
            parse_host("[fd00::1]"),
            Ok(Host::Ip(IpAddr::V6(_)))
        ));
        assert!(matches!(parse_host("fd00::1"), Ok(Host::Ip(IpAddr::V6(_)))));
        assert!(matches!(
            parse_host("10.0.0.1"),
            Ok(Host::Ip(IpAddr::V4(_)))
        ));
        assert!(
            matches!(parse_host("API.example.org"), Ok(Host::Name(n)) if n == "api.example.org")
        );
        for bad in [
            "",
            "a b",
            "evil.com/x",
            "a@b",
            "1.2.3",
            "-a.b",
            "[1.2.3.4]",
            "a..b",
        ] {
            assert!(parse_host(bad).is_err(), "{bad}");
        }
    }
}
