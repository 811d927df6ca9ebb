//! A spoke's certificates, shaped like k3s's, and its k3s.yaml.

use std::net::IpAddr;

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use time::{Duration, OffsetDateTime};
use zeroize::Zeroizing;

/// What can be made wrong in a generated kubeconfig.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hostile {
    /// A user with an exec credential plugin that would `touch` the node's exec marker.
    ExecPlugin,
    /// `insecure-skip-tls-verify: true` on the cluster.
    InsecureSkipTlsVerify,
    /// `certificate-authority:` pointing at a file on the hub.
    CaFile,
    /// An `auth-provider` block.
    AuthProvider,
}

/// The credential parts of a kubeconfig, PEM.
#[derive(Clone, Debug)]
pub struct KubeconfigParts {
    pub ca_pem: String,
    /// Client leaf then client CA, as k3s writes client-certificate-data.
    pub client_chain_pem: String,
    /// EC P-256, SEC1 ("EC PRIVATE KEY").
    pub client_key_pem: String,
}

pub struct Pki {
    pub server_ca_der: Vec<u8>,
    pub client_ca_der: Vec<u8>,
    pub client_cert_der: Vec<u8>,
    pub serving_chain: Vec<CertificateDer<'static>>,
    pub serving_key_pkcs8: Vec<u8>,
    pub parts: KubeconfigParts,
    /// Kept to renew the admin certificate the way k3s does: same CA, same key.
    client_ca: CertifiedIssuer<'static, KeyPair>,
    admin_key: KeyPair,
    /// Kept to re-issue the serving certificate during a CA rotation.
    server_ca: CertifiedIssuer<'static, KeyPair>,
    next_server_ca: Option<CertifiedIssuer<'static, KeyPair>>,
    serving_params: CertificateParams,
    serving_key: KeyPair,
}

pub struct PkiOptions {
    pub address: IpAddr,
    pub address_in_sans: bool,
    pub client_cert_days: i64,
}

impl Pki {
    pub fn generate(o: &PkiOptions) -> Pki {
        let now = OffsetDateTime::now_utc();
        let stamp = now.unix_timestamp();
        let server_ca = ca(&format!("k3s-server-ca@{stamp}"), now);
        let client_ca = ca(&format!("k3s-client-ca@{stamp}"), now);

        let mut names: Vec<SanType> =
            ["kubernetes", "kubernetes.default", "kubernetes.default.svc"]
                .iter()
                .chain(&["kubernetes.default.svc.cluster.local", "localhost"])
                .map(|n| SanType::DnsName((*n).try_into().expect("ia5")))
                .collect();
        names.push(SanType::IpAddress("127.0.0.1".parse().expect("ip")));
        names.push(SanType::IpAddress("::1".parse().expect("ip")));
        if o.address_in_sans {
            names.push(SanType::IpAddress(o.address));
        }
        let mut serving = leaf_params("kube-apiserver", None, now, 365);
        serving.subject_alt_names = names;
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_key = KeyPair::generate().expect("keygen");
        let serving_cert = serving
            .clone()
            .signed_by(&serving_key, &server_ca)
            .expect("sign serving");

        let mut admin = leaf_params(
            "system:admin",
            Some("system:masters"),
            now,
            o.client_cert_days,
        );
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_key = KeyPair::generate().expect("keygen");
        let admin_cert = admin.signed_by(&admin_key, &client_ca).expect("sign admin");

        let parts = KubeconfigParts {
            ca_pem: server_ca.pem(),
            client_chain_pem: format!("{}{}", admin_cert.pem(), client_ca.pem()),
            client_key_pem: pem(
                "EC PRIVATE KEY",
                &pkcs8_p256_to_sec1(admin_key.serialized_der()),
            ),
        };
        Pki {
            server_ca_der: server_ca.der().to_vec(),
            client_ca_der: client_ca.der().to_vec(),
            client_cert_der: admin_cert.der().to_vec(),
            serving_chain: vec![serving_cert.der().clone(), server_ca.der().clone()],
            serving_key_pkcs8: serving_key.serialize_der(),
            parts,
            client_ca,
            admin_key,
            server_ca,
            next_server_ca: None,
            serving_params: serving,
            serving_key,
        }
    }

    /// A cluster CA rotation in progress: the kubeconfig trusts [old, new] (in that
    /// order) and the API serves a certificate issued by the new CA or the old one.
    pub fn rotate_server_ca(&mut self, serve_from_new: bool) {
        let now = OffsetDateTime::now_utc();
        let next = self.next_server_ca.get_or_insert_with(|| {
            ca(&format!("k3s-server-ca-next@{}", now.unix_timestamp()), now)
        });
        self.parts.ca_pem = format!("{}{}", self.server_ca.pem(), next.pem());
        let issuer = if serve_from_new {
            &*next
        } else {
            &self.server_ca
        };
        let cert = self
            .serving_params
            .clone()
            .signed_by(&self.serving_key, issuer)
            .expect("sign serving");
        self.serving_chain = vec![cert.der().clone(), issuer.der().clone()];
    }

    /// The rotation finished: the new CA is the only one the kubeconfig trusts and the
    /// one that issues the serving certificate. Nothing when no rotation was started.
    pub fn finish_server_ca_rotation(&mut self) {
        let Some(next) = self.next_server_ca.take() else {
            return;
        };
        self.server_ca = next;
        self.server_ca_der = self.server_ca.der().to_vec();
        self.parts.ca_pem = self.server_ca.pem();
        let cert = self
            .serving_params
            .clone()
            .signed_by(&self.serving_key, &self.server_ca)
            .expect("sign serving");
        self.serving_chain = vec![cert.der().clone(), self.server_ca.der().clone()];
    }

    /// Another server of the same control plane at `address`: the serving certificate
    /// names it too (the same CA, as every server of a control plane is issued by).
    pub fn serve_also(&mut self, address: IpAddr) {
        let san = SanType::IpAddress(address);
        if !self.serving_params.subject_alt_names.contains(&san) {
            self.serving_params.subject_alt_names.push(san);
        }
        let cert = self
            .serving_params
            .clone()
            .signed_by(&self.serving_key, &self.server_ca)
            .expect("sign serving");
        self.serving_chain = vec![cert.der().clone(), self.server_ca.der().clone()];
    }

    /// What k3s does on restart within 120 days of expiry: a new admin certificate from
    /// the same client CA, for the same key, valid `days` from now.
    pub fn renew_client(&mut self, days: i64) {
        let mut admin = leaf_params(
            "system:admin",
            Some("system:masters"),
            OffsetDateTime::now_utc(),
            days,
        );
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = admin
            .signed_by(&self.admin_key, &self.client_ca)
            .expect("sign admin");
        self.client_cert_der = cert.der().to_vec();
        self.parts.client_chain_pem = format!("{}{}", cert.pem(), self.client_ca.pem());
    }

    /// The client CA's certificate, PEM: what a cluster's CSR signer for
    /// `kubernetes.io/kube-apiserver-client` signs with (k3s signs with its client CA).
    pub fn client_ca_pem(&self) -> String {
        self.client_ca.pem()
    }

    /// The client CA's private key, PKCS#8 PEM, for a lab signer (kube-controller-manager
    /// reads it from a file, as it does on a node). Test material; zeroized when dropped.
    pub fn client_ca_key_pem(&self) -> Zeroizing<String> {
        Zeroizing::new(self.client_ca.key().serialize_pem())
    }

    /// Signs a leaf for `params` and `public_key` with the client CA: the mock API's
    /// CSR signer.
    pub fn sign_client(
        &self,
        params: CertificateParams,
        public_key: &impl rcgen::PublicKeyData,
    ) -> Result<Vec<u8>, rcgen::Error> {
        Ok(params
            .signed_by(public_key, &self.client_ca)?
            .der()
            .to_vec())
    }

    /// A client certificate from the client CA for `user` (CN) in `group` (O), valid
    /// `days`, with a fresh P-256 key, as kubeconfig parts: a lab user other than the
    /// admin (an RBAC'd one, a controller's identity).
    pub fn issue_client(&self, user: &str, group: Option<&str>, days: i64) -> KubeconfigParts {
        let mut params = leaf_params(user, group, OffsetDateTime::now_utc(), days);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("keygen");
        let cert = params
            .signed_by(&key, &self.client_ca)
            .expect("sign client");
        KubeconfigParts {
            ca_pem: self.parts.ca_pem.clone(),
            client_chain_pem: format!("{}{}", cert.pem(), self.client_ca.pem()),
            client_key_pem: pem("EC PRIVATE KEY", &pkcs8_p256_to_sec1(key.serialized_der())),
        }
    }

    pub fn serving_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.serving_key_pkcs8.clone()))
    }
}

fn ca(cn: &str, now: OffsetDateTime) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::default();
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::CrlSign,
    ];
    p.not_before = now - Duration::hours(1);
    p.not_after = now + Duration::days(3650);
    CertifiedIssuer::self_signed(p, KeyPair::generate().expect("keygen")).expect("self-sign CA")
}

/// `days` <= 0 makes a certificate that expired `-days` days (plus a minute) ago.
fn leaf_params(cn: &str, org: Option<&str>, now: OffsetDateTime, days: i64) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    if let Some(o) = org {
        p.distinguished_name.push(DnType::OrganizationName, o);
    }
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.use_authority_key_identifier_extension = true;
    if days > 0 {
        p.not_before = now - Duration::hours(1);
        p.not_after = now + Duration::days(days);
    } else {
        p.not_after = now + Duration::days(days) - Duration::minutes(1);
        p.not_before = p.not_after - Duration::days(365);
    }
    p
}

/// PEM of DER bytes.
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The k3s.yaml of a node, byte for byte in k3s's layout.
pub fn kubeconfig_yaml(
    server: &str,
    parts: &KubeconfigParts,
    hostile: Option<Hostile>,
    exec_marker: &str,
) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let mut cluster_extra = String::new();
    let mut user_extra = String::new();
    match hostile {
        None => {}
        Some(Hostile::ExecPlugin) => {
            user_extra = format!(
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      \
                 args:\n      - -c\n      - touch {exec_marker}\n      interactiveMode: Never\n"
            );
        }
        Some(Hostile::InsecureSkipTlsVerify) => {
            cluster_extra = "    insecure-skip-tls-verify: true\n".into()
        }
        Some(Hostile::CaFile) => {
            cluster_extra = "    certificate-authority: /etc/ssl/certs/ca-certificates.crt\n".into()
        }
        Some(Hostile::AuthProvider) => {
            user_extra = "    auth-provider:\n      name: oidc\n      config:\n        idp-issuer-url: https://127.0.0.1:1\n".into();
        }
    }
    format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n{cluster_extra}    server: {server}\n  \
         name: default\ncontexts:\n- context:\n    cluster: default\n    user: default\n  name: default\n\
         current-context: default\nkind: Config\npreferences: {{}}\nusers:\n- name: default\n  user:\n    \
         client-certificate-data: {cert}\n    client-key-data: {key}\n{user_extra}",
        ca = b64(&parts.ca_pem),
        cert = b64(&parts.client_chain_pem),
        key = b64(&parts.client_key_pem),
    )
}

/// ring's PKCS#8 for P-256 wraps a SEC1 ECPrivateKey without the curve parameters;
/// k3s (Go's MarshalECPrivateKey) writes them, so re-encode with `[0] prime256v1`.
pub fn pkcs8_p256_to_sec1(pkcs8: &[u8]) -> Vec<u8> {
    const PRIME256V1: [u8; 10] = [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    let (_, outer, _) = tlv(pkcs8);
    let (_, _version, rest) = tlv(outer);
    let (_, _algorithm, rest) = tlv(rest);
    let (tag, inner, _) = tlv(rest);
    assert_eq!(tag, 0x04, "PKCS#8 privateKey is an OCTET STRING");
    let (_, ec, _) = tlv(inner);
    let (_, _ec_version, rest) = tlv(ec);
    let (tag, private, mut rest) = tlv(rest);
    assert_eq!(tag, 0x04, "ECPrivateKey.privateKey");
    let mut public = None;
    while !rest.is_empty() {
        let start = rest;
        let (tag, _, next) = tlv(rest);
        if tag == 0xa1 {
            public = Some(&start[..start.len() - next.len()]);
        }
        rest = next;
    }
    let mut body = vec![0x02, 0x01, 0x01];
    body.extend(der(0x04, private));
    body.extend(der(0xa0, &PRIME256V1));
    body.extend(public.expect("ring includes the public key"));
    der(0x30, &body)
}

fn tlv(input: &[u8]) -> (u8, &[u8], &[u8]) {
    let tag = input[0];
    let (len, header) = match input[1] {
        l if l < 0x80 => (l as usize, 2),
        0x81 => (input[2] as usize, 3),
        0x82 => ((input[2] as usize) << 8 | input[3] as usize, 4),
        other => panic!("unsupported DER length byte {other:#x}"),
    };
    (tag, &input[header..header + len], &input[header + len..])
}

fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    match content.len() {
        l if l < 0x80 => out.push(l as u8),
        l if l < 0x100 => out.extend([0x81, l as u8]),
        l => out.extend([0x82, (l >> 8) as u8, l as u8]),
    }
    out.extend_from_slice(content);
    out
}
