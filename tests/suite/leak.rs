//! The plaintext-key check itself (tests/support/src/leak.rs): its needles identify one key,
//! find it in every encoding spokekeeper writes a key in (each built here with openssl
//! and the base64 crate, not with leak.rs), and it finds a planted key where the
//! end-to-end tests and the soak look.

use crate::kc_fixtures::openssl;
use crate::support;

use std::net::{IpAddr, Ipv4Addr};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use spokekeeper_lab::{Pki, PkiOptions, kubeconfig_yaml};
use support::fleet::{Openers, sealed_keys};
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
            // The shortest is a half of the scalar's base64 run: 15 key bytes, 120 bits.
            assert!(n.len() >= 20, "needle of {} bytes", n.len());
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

/// A sops Secret is opened for its key as a SealedSecret is: with the age identity the
/// key of the kubeconfig it holds becomes a needle (a minted key exists nowhere else);
/// without one, or with another fleet's, the check refuses to pass blind.
#[test]
fn a_key_committed_in_a_sops_secret_is_read_with_the_age_identity_and_never_skipped() {
    use spokekeeper::seal::SecretInput;
    use spokekeeper::seal::sops::{self, AgeIdentities, AgeRecipients};
    use spokekeeper::secret::SecretBytes;

    let dir = tempfile::tempdir().unwrap();
    let (_remote, clones) = fleet_remote(dir.path(), 1);
    let clone = &clones[0];
    let identity = |id: &age::x25519::Identity| {
        let text = age::secrecy::ExposeSecret::expose_secret(&id.to_string()).to_string();
        AgeIdentities::parse(&SecretBytes::from(text)).unwrap()
    };
    let (ours, theirs) = (
        age::x25519::Identity::generate(),
        age::x25519::Identity::generate(),
    );
    let minted = pki();
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: spoke0-kubeconfig\n  namespace: flux-system\ndata:\n  value: {}\n",
        STANDARD.encode(kubeconfig(&minted))
    );
    let recipients = AgeRecipients::parse(&[ours.to_public().to_string()]).unwrap();
    let text = sops::encrypt(&SecretInput::parse(secret.as_bytes()).unwrap(), &recipients).unwrap();
    std::fs::write(clone.join("spoke0.yaml"), &text).unwrap();
    git(clone, &["add", "spoke0.yaml"]);
    commit(clone, "spoke0: rotate kubeconfig");

    let (recovery, ours, theirs) = (Vec::new(), identity(&ours), identity(&theirs));
    let mut needles = Needles::new();
    let opened = |age| Openers {
        recovery: &recovery,
        age,
    };
    assert_eq!(sealed_keys(&mut needles, clone, &opened(Some(&ours))), 1);
    assert_eq!(needles.keys(), 1);
    needles.assert_absent("the committed sops file", text.as_bytes());
    let mut alone = Needles::new();
    alone.add_key(&minted.parts.client_key_pem);
    assert_eq!(
        alone.len(),
        needles.len(),
        "the minted key's needles, all of them"
    );

    for age in [None, Some(&theirs)] {
        let blind = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            sealed_keys(&mut Needles::new(), clone, &opened(age))
        }));
        let why = blind.expect_err("a sops Secret it cannot open was skipped");
        let why = why.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(why.contains("its key cannot be looked for"), "{why}");
    }
}

fn body_of(pem: &str) -> String {
    pem.lines().filter(|l| !l.starts_with("-----")).collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A P-256 key as `openssl ecparam -genkey` writes it: SEC1, `EC PRIVATE KEY`.
fn openssl_sec1_key() -> String {
    let pem = openssl(
        &["ecparam", "-name", "prime256v1", "-genkey", "-noout"],
        b"",
    );
    String::from_utf8(pem).unwrap()
}

/// A P-256 key as `openssl genpkey` writes it: PKCS#8, `PRIVATE KEY`.
fn openssl_pkcs8_key() -> String {
    let pem = openssl(
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ],
        b"",
    );
    String::from_utf8(pem).unwrap()
}

/// A P-256 key as spokekeeper mints one (ring's PKCS#8, which rcgen generates too).
fn ring_pkcs8_key() -> String {
    rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .unwrap()
        .serialize_pem()
}

/// A kubeconfig for user `user` whose client-key-data is the base64 of `key_text`.
fn kubeconfig_holding(user: &str, key_text: &[u8]) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: spoke\n  cluster:\n    server: \
         https://127.0.0.1:6443\nusers:\n- name: {user}\n  user:\n    client-certificate-data: \
         TFMwdExTMUNSVWRKVGlCRFJWSlVTVVpKUTBGVVJTMHRMUzB0Q2c9PQo=\n    client-key-data: {}\n\
         contexts:\n- name: spoke\n  context:\n    cluster: spoke\n    user: {user}\n\
         current-context: spoke\n",
        STANDARD.encode(key_text)
    )
}

/// Every encoding of the key in `pem` that the needles must see, each inside other text:
/// (what, bytes). Built with openssl and the base64 crate; at each of the 3 base64
/// alignments where the encoding is base64.
fn encodings(pem: &str) -> Vec<(String, Vec<u8>)> {
    let forms = [
        (
            "SEC1",
            openssl(&["ec"], pem.as_bytes()),
            openssl(&["ec", "-outform", "DER"], pem.as_bytes()),
        ),
        (
            "PKCS#8",
            openssl(&["pkey"], pem.as_bytes()),
            openssl(&["pkey", "-outform", "DER"], pem.as_bytes()),
        ),
    ];
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |what: String, bytes: &[u8]| {
        let embedded = [b"log line before\n".as_slice(), bytes, b"\nand after\n"].concat();
        out.push((what, embedded));
    };
    for (form, key_pem, der) in &forms {
        let text = std::str::from_utf8(key_pem).unwrap();
        assert!(
            text.starts_with(&format!(
                "-----BEGIN {}PRIVATE KEY-----\n",
                if *form == "SEC1" { "EC " } else { "" }
            )),
            "{text}"
        );
        add(format!("{form} PEM"), key_pem);
        add(
            format!("{form} PEM, CRLF"),
            text.replace('\n', "\r\n").as_bytes(),
        );
        let indented: String = text.lines().map(|l| format!("      {l}\n")).collect();
        add(format!("{form} PEM in a YAML block"), indented.as_bytes());
        let json = serde_json::to_string(&serde_json::json!({ "key": text })).unwrap();
        add(format!("{form} PEM in a JSON string"), json.as_bytes());
        add(format!("{form} DER"), der);
        let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
        add(format!("{form} DER in hex"), hex.as_bytes());
        add(format!("{form} DER in HEX"), hex.to_uppercase().as_bytes());
        add(
            format!("{form} DER as {{:?}}"),
            format!("{der:?}").as_bytes(),
        );
        for j in 0..3 {
            shifted(form, key_pem, der, j, &mut add);
        }
    }
    out
}

/// The forms of `form`'s key after `j` bytes of something else, which move it across
/// base64's groups: base64 of the DER, client-key-data, a Secret's data.value (wrapped, and
/// with the user's name moving it along).
fn shifted(form: &str, key_pem: &[u8], der: &[u8], j: usize, add: &mut impl FnMut(String, &[u8])) {
    // j bytes before the DER or the PEM move it across the base64 groups.
    let shifted = [&b"ab"[..j], der].concat();
    add(
        format!("{form} DER after {j} bytes, base64 wrapped at 64"),
        &openssl(&["base64"], &shifted),
    );
    add(
        format!("{form} DER after {j} bytes, base64 on one line"),
        &openssl(&["base64", "-A"], &shifted),
    );
    add(
        format!("{form} DER after {j} bytes, base64 wrapped at 76"),
        STANDARD
            .encode(&shifted)
            .as_bytes()
            .chunks(76)
            .collect::<Vec<_>>()
            .join(&b'\n')
            .as_slice(),
    );
    let key_text = [&b"\n\n"[..j], key_pem].concat();
    let kc = kubeconfig_holding("hub", &key_text);
    add(
        format!("{form} PEM after {j} bytes in client-key-data"),
        kc.as_bytes(),
    );
    // `base64 kubeconfig` without -w0: wrapped at 76, here in a YAML block. A
    // comment of 0 to 54 bytes moves the key along a whole line of it.
    for pad in (0..57).step_by(3) {
        let kc = format!("# {}\n{kc}", "x".repeat(pad));
        let wrapped: String = STANDARD
            .encode(&kc)
            .as_bytes()
            .chunks(76)
            .map(|l| format!("    {}\n", std::str::from_utf8(l).unwrap()))
            .collect();
        add(
            format!("{form} PEM after {j} bytes, {pad} bytes later, in data.value wrapped at 76"),
            format!("data:\n  value: |\n{wrapped}").as_bytes(),
        );
    }
    for u in 0..3 {
        // The user's name moves client-key-data across the outer groups.
        let kc = kubeconfig_holding(&"spokekeeper:hub:1"[..15 + u], &key_text);
        let secret = format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: spoke0-kubeconfig\n  \
             namespace: flux-system\ndata:\n  value: {}\n",
            STANDARD.encode(&kc)
        );
        add(
            format!(
                "{form} PEM after {j} bytes, user name of {} bytes, in a Secret's data.value",
                15 + u
            ),
            secret.as_bytes(),
        );
        let json = serde_json::json!({"data": {"value": STANDARD.encode(&kc)}});
        add(
            format!(
                "{form} PEM after {j} bytes, user name of {} bytes, in a JSON Secret's data.value",
                15 + u
            ),
            json.to_string().as_bytes(),
        );
    }
}

/// Asserts each encoding of `pems[i]` is found and named as key `i` by `needles`.
fn assert_each_found(needles: &Needles, pems: &[&str]) {
    let mut missed = Vec::new();
    for (i, pem) in pems.iter().enumerate() {
        let all = encodings(pem);
        assert!(all.len() >= 60, "{} encodings", all.len());
        for (what, bytes) in all {
            let found = needles.find(&bytes).map(|(k, _)| k);
            if found != Some(i) {
                missed.push(format!("key {i} in its {what}: found {found:?}"));
            }
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn a_sec1_key_is_found_in_every_encoding_at_every_alignment() {
    let pem = openssl_sec1_key();
    let mut needles = Needles::new();
    needles.add_key(&pem);
    assert_each_found(&needles, &[&pem]);
}

#[test]
fn a_pkcs8_key_is_found_in_every_encoding_at_every_alignment() {
    let (openssl_key, minted_like) = (openssl_pkcs8_key(), ring_pkcs8_key());
    let mut needles = Needles::new();
    needles.add_key(&openssl_key);
    needles.add_key(&minted_like);
    assert_eq!(needles.keys(), 2);
    assert_each_found(&needles, &[&openssl_key, &minted_like]);
}

#[test]
fn unrelated_keys_in_every_encoding_are_not_reported() {
    let mut needles = Needles::new();
    let (sec1, pkcs8) = (openssl_sec1_key(), openssl_pkcs8_key());
    needles.add_key(&sec1);
    needles.add_key(&pkcs8);
    for other in [openssl_sec1_key(), openssl_pkcs8_key(), ring_pkcs8_key()] {
        for (what, bytes) in encodings(&other) {
            assert_eq!(
                needles.find(&bytes).map(|(k, _)| k),
                None,
                "an unrelated key's {what}"
            );
        }
    }
    // Both keys, one after the other in one text: the first one's name comes back.
    let both = [encodings(&pkcs8)[0].1.clone(), sec1.clone().into_bytes()].concat();
    assert_eq!(needles.find(&both).map(|(k, _)| k), Some(1));
}

#[test]
fn a_key_is_added_from_either_form_with_its_parameters_and_one_form_is_enough() {
    let mut needles = Needles::new();
    // `openssl ecparam -genkey` without -noout: an EC PARAMETERS block first.
    let with_params =
        String::from_utf8(openssl(&["ecparam", "-name", "prime256v1", "-genkey"], b"")).unwrap();
    assert!(with_params.starts_with("-----BEGIN EC PARAMETERS-----\n"));
    needles.add_key(&with_params);
    let pkcs8 = String::from_utf8(openssl(&["pkey"], with_params.as_bytes())).unwrap();
    assert!(pkcs8.starts_with("-----BEGIN PRIVATE KEY-----\n"));
    let before = needles.len();
    needles.add_key(&pkcs8);
    needles.add_key(&pkcs8.replace('\n', "\r\n"));
    assert_eq!((needles.keys(), needles.len()), (1, before));
    assert_eq!(scalar_of_pem(&pkcs8), scalar_of_pem(&with_params));
    // Neither an EC nor an RSA key: refused, saying so.
    let ed25519 = String::from_utf8(openssl(&["genpkey", "-algorithm", "ed25519"], b"")).unwrap();
    let refused = std::panic::catch_unwind(|| scalar_of_pem(&ed25519)).unwrap_err();
    let why = refused.downcast_ref::<String>().unwrap();
    assert!(why.contains("neither EC nor RSA"), "{why}");
}

/// kubeadm's admin.conf holds an RSA key as PKCS#1 (`RSA PRIVATE KEY`): its needles come
/// from the start of the private exponent, the same in PKCS#8, and find the key in a
/// kubeconfig and in a Secret's value, not an unrelated key.
#[test]
fn an_rsa_key_as_kubeadm_writes_it_is_found_in_its_kubeconfig() {
    let pkcs8 = String::from_utf8(openssl(
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ],
        b"",
    ))
    .unwrap();
    let pkcs1 = String::from_utf8(openssl(&["rsa", "-traditional"], pkcs8.as_bytes())).unwrap();
    assert!(
        pkcs1.starts_with("-----BEGIN RSA PRIVATE KEY-----\n"),
        "{pkcs1}"
    );
    let exponent = scalar_of_pem(&pkcs1);
    assert_eq!(exponent, scalar_of_pem(&pkcs8));
    assert_eq!(exponent.len(), 32);
    let der = STANDARD.decode(body_of(&pkcs1)).unwrap();
    assert!(contains(&der, &exponent));

    let mut needles = Needles::new();
    needles.add_key(&pkcs1);
    let kc = format!(
        "apiVersion: v1\nkind: Config\nusers:\n- name: kubernetes-admin\n  user:\n    \
         client-key-data: {}\n",
        STANDARD.encode(&pkcs1)
    );
    assert_eq!(needles.find(kc.as_bytes()).map(|(k, _)| k), Some(0));
    let value = STANDARD.encode(&kc);
    assert_eq!(needles.find(value.as_bytes()).map(|(k, _)| k), Some(0));
    let unrelated = kubeconfig(&pki());
    assert!(needles.find(unrelated.as_bytes()).is_none());
    let other = String::from_utf8(openssl(
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ],
        b"",
    ))
    .unwrap();
    assert!(needles.find(other.as_bytes()).is_none());
    assert_eq!(needles.add_kubeconfig(kc.as_bytes()), 1);
    assert_eq!(needles.keys(), 1);
}
