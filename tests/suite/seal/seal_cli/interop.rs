//! Sealing interoperates: round trips at the edge sizes in every scope, kubesealpy both ways, an oversized input.

use super::*;

#[test]
fn round_trip_edge_sizes_in_every_scope() {
    let sealing = SealingKey::from_pem(
        &std::fs::read(cert()).unwrap(),
        "cert",
        OffsetDateTime::now_utc(),
    )
    .unwrap();
    let big: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    for scope in [Scope::Strict, Scope::NamespaceWide, Scope::ClusterWide] {
        for value in [Vec::new(), vec![0u8; 1], big.clone()] {
            let mut input = SecretInput {
                name: "s".into(),
                namespace: "ns".into(),
                ..Default::default()
            };
            input.data.insert("v".into(), value.clone().into());
            let sealed = SealedSecret::seal(&input, &sealing, scope).unwrap();
            let plain = SealedSecret::parse(sealed.to_yaml().as_bytes())
                .unwrap()
                .unseal(&key())
                .unwrap();
            assert_eq!(
                plain.data["v"].expose(),
                value.as_slice(),
                "{scope} {} bytes",
                value.len()
            );
        }
    }
}

/// An independent implementation (kubesealpy, checked against upstream) unseals what
/// `spokekeeper seal` writes, and we unseal what it seals.
#[test]
fn kubesealpy_interoperates_both_ways() {
    crate::support::requires!(PYTHON);
    const UNSEAL: &str = r#"
import sys, json, base64
from kubesealpy.unsealer import Unsealer
from kubesealpy.models import SealedSecret
u = Unsealer.from_private_key_file(sys.argv[1])
s = u.unseal(SealedSecret.from_yaml(open(sys.argv[2]).read()))
print(json.dumps({k: base64.b64decode(v).hex() for k, v in s.data.items()}, sort_keys=True))
"#;
    const SEAL: &str = r#"
import sys
from kubesealpy.sealer import Sealer
from kubesealpy.scopes import SealingScope
scope = {"strict": SealingScope.STRICT, "namespace-wide": SealingScope.NAMESPACE_WIDE, "cluster-wide": SealingScope.CLUSTER_WIDE}[sys.argv[2]]
s = Sealer.from_certificate_file(sys.argv[1]).seal("dev-kubeconfig", "flux-system", {"value": bytes.fromhex(sys.argv[3])}, scope=scope)
print(s.to_yaml())
"#;
    let dir = tempfile::tempdir().unwrap();
    let value = b"apiVersion: v1\nkind: Config\n\xff\x00binary";
    let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: dev-kubeconfig\n  namespace: flux-system\ndata:\n  value: {}\n",
        {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(value)
        }
    );
    for scope in ["strict", "namespace-wide", "cluster-wide"] {
        for format in ["yaml", "json"] {
            let (code, stdout, stderr) =
                seal(&["--scope", scope, "-o", format], &cert(), secret.clone());
            assert_eq!(code, 0, "{stderr}");
            let path = dir.path().join(format!("ours-{scope}.{format}"));
            std::fs::write(&path, stdout).unwrap();
            let out = std::process::Command::new(crate::support::requires::PYTHON_BIN.path())
                .args(["-c", UNSEAL])
                .arg(vectors().join("key/tls.key"))
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "kubesealpy could not unseal {scope}/{format}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(got["value"], hex.as_str(), "{scope}/{format}");
        }
        let out = std::process::Command::new(crate::support::requires::PYTHON_BIN.path())
            .args(["-c", SEAL])
            .arg(cert())
            .arg(scope)
            .arg(&hex)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubesealpy seal: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs = dir.path().join(format!("theirs-{scope}.yaml"));
        std::fs::write(&theirs, &out.stdout).unwrap();
        let out = bin()
            .arg("unseal")
            .arg("--recovery-key")
            .arg(vectors().join("key/tls.key"))
            .arg(&theirs)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{scope}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let plain = SecretInput::parse(&out.stdout).unwrap();
        assert_eq!(plain.data["value"].expose(), value, "{scope}");
    }
}

#[test]
fn oversized_input_is_refused() {
    let big = vec![b'a'; spokekeeper::seal::manifest::MAX_MANIFEST_BYTES + 1];
    let (code, stdout, stderr) = seal(&[], &cert(), big);
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert!(stderr.contains("over the 4194304-byte limit"), "{stderr}");
}
