//! The sanitized kubeconfig as YAML, written by hand: fixed field order (kubectl's),
//! every string double-quoted, secrets assembled in buffers sized up front so no
//! reallocation leaves a copy behind.

use super::{Sanitized, server};
use crate::certs::{self, pem};
use crate::secret::SecretBytes;

pub(crate) fn to_yaml(s: &Sanitized) -> SecretBytes {
    let name = quote(&s.name);
    let ca = pem::encode_base64(s.ca_pem().as_bytes());
    let mut head = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: {}\n",
        String::from_utf8_lossy(ca.expose()),
        quote(&server::server_string(&s.server)),
    );
    if let Some(tls) = &s.tls_server_name {
        head.push_str(&format!("    tls-server-name: {}\n", quote(tls)));
    }
    head.push_str(&format!(
        "  name: {name}\ncontexts:\n- context:\n    cluster: {name}\n    user: {name}\n  name: {name}\n\
         current-context: {name}\nkind: Config\npreferences: {{}}\nusers:\n- name: {name}\n  user:\n"
    ));
    let client = (!s.client.is_empty()).then(|| {
        let ders: Vec<Vec<u8>> = s.client.iter().map(|c| c.der.clone()).collect();
        pem::encode_base64(certs::to_pem(&ders).as_bytes())
    });
    let key = s
        .key
        .as_ref()
        .map(|k| pem::encode_base64(k.to_pem().expose()));

    let mut parts: Vec<&[u8]> = vec![head.as_bytes()];
    if let Some(client) = &client {
        parts.extend([
            b"    client-certificate-data: ".as_slice(),
            client.expose(),
            b"\n",
        ]);
    }
    if let Some(key) = &key {
        parts.extend([b"    client-key-data: ".as_slice(), key.expose(), b"\n"]);
    }
    if let Some(token) = &s.token {
        // Checked at assessment: visible ASCII without quotes or backslashes.
        parts.extend([b"    token: \"".as_slice(), token.expose(), b"\"\n"]);
    }
    pem::concat(&parts)
}

/// A YAML double-quoted scalar (JSON string syntax is valid YAML).
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}
