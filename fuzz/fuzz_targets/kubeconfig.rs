//! Parse, review, sanitize and rewrite arbitrary bytes as a kubeconfig. Nothing may
//! panic, and whatever is accepted must come out as a kubeconfig that spokekeeper
//! reads back to the same bytes and kube-rs reads at all.
//!
//! Mutated base64 almost never stays a valid certificate, so the input may name
//! placeholders (`@CA@`, `@CHAIN@`, `@CERT@`, `@KEY@`) that are replaced by valid data
//! generated once: the fuzzer then explores the YAML around real credentials.
#![no_main]

use std::sync::OnceLock;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use libfuzzer_sys::fuzz_target;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use spokekeeper::kubeconfig::{self, KubeconfigError};
use time::OffsetDateTime;

const HOSTS: [&str; 7] = [
    "192.0.2.1",
    "[2001:db8::1]",
    "2001:db8::2",
    "api.example.org",
    "bad host",
    "",
    "1.2.3",
];

/// (placeholder, base64 value)
fn placeholders() -> &'static [(&'static [u8], String); 4] {
    static DATA: OnceLock<[(&'static [u8], String); 4]> = OnceLock::new();
    DATA.get_or_init(|| {
        let ca = |cn: &str| {
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let key = KeyPair::generate().unwrap();
            (p.self_signed(&key).unwrap(), p, key)
        };
        let (server_ca, _, _) = ca("fuzz-server-ca");
        let (client_ca, client_params, client_key) = ca("fuzz-client-ca");
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .signed_by(&leaf_key, &Issuer::from_params(&client_params, &client_key))
            .unwrap();
        [
            (b"@CA@", STANDARD.encode(server_ca.pem())),
            (b"@CHAIN@", STANDARD.encode(leaf.pem() + &client_ca.pem())),
            (b"@CERT@", STANDARD.encode(leaf.pem())),
            (b"@KEY@", STANDARD.encode(leaf_key.serialize_pem())),
        ]
    })
}

fn expand(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut rest = data;
    'scan: while let Some((&first, tail)) = rest.split_first() {
        if first == b'@' {
            for (name, value) in placeholders() {
                if let Some(after) = rest.strip_prefix(*name) {
                    out.extend_from_slice(value.as_bytes());
                    rest = after;
                    continue 'scan;
                }
            }
        }
        out.push(first);
        rest = tail;
    }
    out
}

fuzz_target!(|raw: &[u8]| {
    let data = expand(raw);
    let Ok(kc) = kubeconfig::parse(&data) else {
        return;
    };
    let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let review = kubeconfig::review(&kc, now);
    let Ok(mut s) = kubeconfig::sanitize(&kc, "fuzz") else {
        return;
    };
    assert!(
        review.problems.iter().all(|p| matches!(
            p,
            KubeconfigError::Expired { .. } | KubeconfigError::NotYetValid { .. }
        )),
        "review and sanitize disagree: {:?}",
        review.problems
    );

    // Pick the rewrite from the input, so the fuzzer steers it too.
    let pick = data[0] ^ data[data.len() - 1];
    let host = HOSTS[usize::from(pick) % HOSTS.len()];
    let port = (pick & 0x80 != 0).then(|| u16::from(pick) * 509);
    let tls = (pick & 0x40 != 0).then_some("api.example.org");
    let before = s.to_yaml();
    if s.rewrite_server(host, port, tls).is_err() {
        assert_eq!(
            s.to_yaml().expose(),
            before.expose(),
            "a refused rewrite changed the kubeconfig"
        );
    }

    let out = s.to_yaml();
    let again = kubeconfig::parse(out.expose()).expect("the output parses");
    let again = kubeconfig::sanitize(&again, "fuzz").expect("the output sanitizes");
    assert_eq!(
        again.to_yaml().expose(),
        out.expose(),
        "sanitizing the output changed it"
    );
    assert_eq!(again.content_sha256(), s.content_sha256());
    let text = std::str::from_utf8(out.expose()).expect("the output is UTF-8");
    kube::config::Kubeconfig::from_yaml(text).expect("kube-rs reads the output");
});
