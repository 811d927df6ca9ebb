//! The plaintext-key check itself (tests/support/leak.rs): its needles identify one key,
//! and it finds a planted key where the end-to-end tests and the soak look.

use crate::support;

use std::net::{IpAddr, Ipv4Addr};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use spokekeeper_lab::{Pki, PkiOptions, kubeconfig_yaml};
use support::git::{commit, fleet_remote, git};
use support::leak::{Needles, key_needles, scalar_of_pem};

fn pki() -> Pki {
    Pki::generate(&PkiOptions {
        address: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
        address_in_sans: true,
        client_cert_days: 365,
    })
}

fn kubeconfig(p: &Pki) -> String {
    kubeconfig_yaml("https://127.0.0.1:6443", &p.parts, None, "/nonexistent")
}

#[test]
fn needles_are_cut_from_each_keys_scalar_and_tell_keys_apart() {
    let pkis: Vec<Pki> = (0..4).map(|_| pki()).collect();
    let pems: Vec<&str> = pkis
        .iter()
        .map(|p| p.parts.client_key_pem.as_str())
        .collect();
    // The old cuts: the first 40 characters of the PEM's base64 encode the BEGIN line, one
    // string for every key; so do the first 9 of a SEC1 body and the first 40 of a
    // PKCS#8 body (ASN.1 header bytes), not key material.
    let old_b64 = STANDARD.encode(pems[0])[..40].to_string();
    let sec1_head = body_of(pems[0])[..9].to_string();
    let pkcs8_head = STANDARD.encode(&pkis[0].serving_key_pkcs8)[..40].to_string();
    for (pem, p) in pems.iter().zip(&pkis).skip(1) {
        assert_eq!(STANDARD.encode(pem)[..40], old_b64);
        assert_eq!(body_of(pem)[..9], sec1_head);
        assert_eq!(STANDARD.encode(&p.serving_key_pkcs8)[..40], pkcs8_head);
    }
    let headers: Vec<Vec<u8>> = [
        "-----BEGIN EC PRIVATE KEY-----\n",
        "-----END EC PRIVATE KEY-----\n",
        "-----BEGIN PRIVATE KEY-----\n",
    ]
    .iter()
    .flat_map(|h| [h.as_bytes().to_vec(), STANDARD.encode(h).into_bytes()])
    .chain([old_b64, sec1_head, pkcs8_head].map(String::into_bytes))
    // The DER around a SEC1 P-256 scalar: its header, and the curve OID after it.
    .chain([
        vec![0x30, 0x77, 0x02, 0x01, 0x01, 0x04, 0x20],
        vec![
            0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07,
        ],
    ])
    .collect();

    let mut all = Needles::new();
    for (i, pem) in pems.iter().enumerate() {
        let mine = key_needles(pem);
        assert!(mine.len() >= 8, "{} needles", mine.len());
        for n in &mine {
            assert!(n.len() >= 32, "needle of {} bytes", n.len());
            for h in &headers {
                assert!(
                    !contains(h, n) && !contains(n, h),
                    "a needle of key {i} overlaps a fixed header"
                );
            }
            for (j, other) in pems.iter().enumerate().filter(|(j, _)| *j != i) {
                assert!(
                    !key_needles(other).contains(n),
                    "keys {i} and {j} share a needle"
                );
                assert!(
                    !contains(other.as_bytes(), n),
                    "key {i}'s needle in key {j}'s PEM"
                );
                assert!(!contains(kubeconfig(&pkis[j]).as_bytes(), n));
            }
        }
        all.add_key(pem);
        // Each key is found in its own PEM, and in its own kubeconfig, where it is only
        // the base64 of the PEM (`client-key-data`).
        assert_eq!(all.find(pem.as_bytes()).map(|(k, _)| k), Some(i));
        let kc = kubeconfig(&pkis[i]);
        assert!(
            !kc.contains("PRIVATE KEY"),
            "the kubeconfig holds base64 only"
        );
        assert_eq!(all.find(kc.as_bytes()).map(|(k, _)| k), Some(i));
    }
    assert_eq!(all.keys(), 4);
    // A renewed certificate keeps its key: nothing new to look for.
    let before = all.len();
    all.add_key(pems[0]);
    assert_eq!((all.keys(), all.len()), (4, before));
}

#[test]
fn the_scalar_is_read_from_sec1_and_pkcs8() {
    let p = pki();
    let sec1 = scalar_of_pem(&p.parts.client_key_pem);
    assert_eq!(sec1.len(), 32);
    let der = STANDARD.decode(body_of(&p.parts.client_key_pem)).unwrap();
    // SEC1 P-256: 30 77 02 01 01 04 20, then the scalar.
    assert_eq!(&der[7..39], &sec1[..]);
    let pkcs8 = &p.serving_key_pkcs8;
    let pem = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        STANDARD.encode(pkcs8)
    );
    let scalar = scalar_of_pem(&pem);
    assert_eq!(scalar.len(), 32);
    assert!(contains(pkcs8, &scalar));
    // PKCS#8 P-256: the SEC1 structure inside it puts the scalar at bytes 36..68, before
    // the public key (which also holds 32-byte runs).
    assert_eq!(&pkcs8[36..68], &scalar[..]);
    assert_ne!(scalar, sec1);
}

#[test]
fn a_planted_key_is_found_in_a_committed_file_a_packed_object_and_a_tmpdir() {
    let dir = tempfile::tempdir().unwrap();
    let (remote, clones) = fleet_remote(dir.path(), 1);
    let clone = &clones[0];
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let (planted, unrelated) = (pki(), pki());
    let mut needles = Needles::new();
    needles.add_key(&planted.parts.client_key_pem);
    // Clean so far; an unrelated key on disk is not this key.
    std::fs::write(tmp.join("other.pem"), &unrelated.parts.client_key_pem).unwrap();
    needles.assert_nowhere(&[dir.path()], &[&remote, clone]);

    // A plaintext kubeconfig committed and pushed.
    std::fs::write(clone.join("spoke0.yaml"), kubeconfig(&planted)).unwrap();
    git(clone, &["add", "spoke0.yaml"]);
    commit(clone, "oops");
    git(clone, &["push", "-q", "origin", "HEAD:main"]);
    assert_eq!(
        needles.files_containing(dir.path(), &[]),
        vec![clone.join("spoke0.yaml")]
    );
    let hits = needles.git_objects_containing(clone);
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert!(hits[0].ends_with(" blob"), "{hits:?}");

    // Packed on the remote, no loose object left: the object scan still finds it.
    git(&remote, &["repack", "-a", "-d", "-q"]);
    git(&remote, &["prune-packed"]);
    let counts = git(&remote, &["count-objects", "-v"]);
    assert!(
        counts.contains("\ncount: 0\n") || counts.starts_with("count: 0\n"),
        "{counts}"
    );
    assert!(counts.contains("in-pack: "), "{counts}");
    assert_eq!(needles.git_objects_containing(&remote), hits);

    // The bare PEM in a TMPDIR.
    std::fs::remove_file(clone.join("spoke0.yaml")).unwrap();
    let leaked = tmp.join("ssh-control/leftover");
    std::fs::create_dir(tmp.join("ssh-control")).unwrap();
    std::fs::write(&leaked, &planted.parts.client_key_pem).unwrap();
    assert_eq!(
        needles.files_containing(dir.path(), &[]),
        vec![leaked.clone()]
    );
    // In a file larger than one read, across the boundary between two reads: the PEM's
    // scalar window (characters 43..83) straddles it.
    std::fs::remove_file(&leaked).unwrap();
    let big = tmp.join("big.log");
    let mut bytes = vec![b'.'; support::leak::CHUNK - 60];
    bytes.extend_from_slice(planted.parts.client_key_pem.as_bytes());
    bytes.resize(support::leak::CHUNK + 4096, b'.');
    std::fs::write(&big, &bytes).unwrap();
    assert_eq!(needles.files_containing(dir.path(), &[]), vec![big]);
    let missed = std::panic::catch_unwind(|| needles.assert_nowhere(&[&tmp], &[]));
    assert!(missed.is_err(), "assert_nowhere let the planted key pass");
}

fn body_of(pem: &str) -> String {
    pem.lines().filter(|l| !l.starts_with("-----")).collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
