//! Plaintext-key checks: "needles" cut from the random part of each client key (an EC
//! key's private scalar, an RSA key's private exponent: "scalar" below), searched for in
//! files, git objects and command output.
//!
//! A cut from the start of a key's PEM, of the PEM's base64 or of a PKCS#8 body is the
//! same for every P-256 key (`-----BEGIN EC PRIVATE KEY-----`, ASN.1 header bytes), so it
//! cannot tell one node's key from another. The needles here encode scalar bytes only,
//! in every form spokekeeper writes a key or could leak one:
//! - raw (any DER: SEC1, PKCS#8), lower and upper hex, Rust's `{:?}` of the bytes;
//! - base64 at each of the 3 alignments a base64 stream can give the scalar (a PEM
//!   body, base64 of the DER, wrapped or not): the whole run, and its two halves, so
//!   that one half is whole whatever line break falls in the run (a PKCS#8 key's scalar
//!   crosses the PEM's 64-column break);
//! - the base64 of a text holding a half (a kubeconfig's `client-key-data`: base64 of
//!   the PEM), at the 3 alignments of that outer stream;
//! - the base64 of a text holding one of those (a Secret's `data.value`: base64 of the
//!   kubeconfig), again at the 3 alignments.
//!
//! Besides the bytes as they are, the search reads each haystack with whitespace and
//! JSON's `\n`, `\r`, `\t` escapes removed, so a base64 stream wrapped at any width (or
//! indented in YAML) matches too.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::git::all_objects;

/// Every needle is at least this long (the search indexes this many leading bytes).
const PREFIX: usize = 8;

/// Files are read this much at a time.
pub const CHUNK: usize = 16 << 20;

/// Consecutive reads of a file overlap by this much: a needle spread by whitespace over
/// more than this, across a read boundary, is missed.
const OVERLAP: usize = 4096;

#[derive(Default)]
pub struct Needles {
    needles: Vec<Vec<u8>>,
    /// Which key (index into `keys`) each needle came from.
    owner: Vec<usize>,
    by_prefix: HashMap<[u8; PREFIX], Vec<usize>>,
    /// Whether some needle starts with these two bytes: most positions stop here.
    first_two: Vec<bool>,
    distinct: HashSet<Vec<u8>>,
    keys: Vec<Vec<u8>>,
}

impl Needles {
    pub fn new() -> Needles {
        Needles::default()
    }

    /// Adds one EC or RSA private key PEM (SEC1 `EC PRIVATE KEY`, PKCS#1 `RSA PRIVATE KEY`
    /// as kubeadm writes, or PKCS#8 `PRIVATE KEY`; other blocks such as `EC PARAMETERS`
    /// are skipped). Adding the same key again (a renewed
    /// certificate keeps its key) changes nothing. Panics, saying why, on text that holds
    /// no such key, and on a different key whose needles collide with an earlier key's,
    /// since then a hit could not name the key.
    pub fn add_key(&mut self, pem: &str) {
        let scalar = scalar_of_pem(pem);
        self.add_scalar(scalar);
    }

    /// Adds the key of every user's `client-key-data` in a kubeconfig (YAML or JSON);
    /// returns how many the kubeconfig held.
    pub fn add_kubeconfig(&mut self, kubeconfig: &[u8]) -> usize {
        let pems = kubeconfig_keys(kubeconfig);
        for pem in &pems {
            self.add_key(pem);
        }
        pems.len()
    }

    fn add_scalar(&mut self, scalar: Vec<u8>) {
        let key = match self.keys.iter().position(|k| *k == scalar) {
            Some(_) => return,
            None => {
                self.keys.push(scalar.clone());
                self.keys.len() - 1
            }
        };
        for n in scalar_needles(&scalar) {
            // scalar_needles has no duplicates: a repeat is another key's needle.
            if !self.distinct.insert(n.clone()) {
                let other = self
                    .needles
                    .iter()
                    .position(|m| *m == n)
                    .map(|i| self.owner[i]);
                panic!("a needle of key {key} is also one of key {other:?}: not key material");
            }
            if self.first_two.is_empty() {
                self.first_two = vec![false; 1 << 16];
            }
            self.first_two[pair(n[0], n[1])] = true;
            let mut prefix = [0u8; PREFIX];
            prefix.copy_from_slice(&n[..PREFIX]);
            self.by_prefix
                .entry(prefix)
                .or_default()
                .push(self.needles.len());
            self.needles.push(n);
            self.owner.push(key);
        }
    }

    /// Distinct needles.
    pub fn len(&self) -> usize {
        self.needles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// Distinct keys.
    pub fn keys(&self) -> usize {
        self.keys.len()
    }

    /// The first needle in `hay`, read as it is and then with whitespace (and JSON's
    /// whitespace escapes) removed: (key index, needle).
    pub fn find(&self, hay: &[u8]) -> Option<(usize, &[u8])> {
        if let Some(hit) = self.find_exact(hay) {
            return Some(hit);
        }
        let compact = compact(hay);
        if compact.len() == hay.len() {
            return None;
        }
        self.find_exact(&compact)
    }

    fn find_exact(&self, hay: &[u8]) -> Option<(usize, &[u8])> {
        if hay.len() < PREFIX || self.is_empty() {
            return None;
        }
        for i in 0..=hay.len() - PREFIX {
            if !self.first_two[pair(hay[i], hay[i + 1])] {
                continue;
            }
            let mut prefix = [0u8; PREFIX];
            prefix.copy_from_slice(&hay[i..i + PREFIX]);
            if let Some(ids) = self.by_prefix.get(&prefix) {
                for &id in ids {
                    if hay[i..].starts_with(&self.needles[id]) {
                        return Some((self.owner[id], &self.needles[id]));
                    }
                }
            }
        }
        None
    }

    /// Files under `root` (symlinks not followed) holding a needle, except under `skip`.
    pub fn files_containing(&self, root: &Path, skip: &[PathBuf]) -> Vec<PathBuf> {
        let mut hits = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                if skip.iter().any(|s| p.starts_with(s)) {
                    continue;
                }
                let Ok(meta) = std::fs::symlink_metadata(&p) else {
                    continue;
                };
                if meta.is_dir() {
                    stack.push(p);
                } else if meta.is_file() && self.file_contains(&p) {
                    hits.push(p);
                }
            }
        }
        hits
    }

    /// Reads in chunks that overlap by [`OVERLAP`]. A file removed meanwhile (a
    /// session directory going away) holds nothing.
    fn file_contains(&self, path: &Path) -> bool {
        let Ok(mut f) = std::fs::File::open(path) else {
            return false;
        };
        let mut buf = Vec::with_capacity(CHUNK + OVERLAP);
        loop {
            let read = (&mut f)
                .take(CHUNK as u64)
                .read_to_end(&mut buf)
                .unwrap_or(0);
            if read == 0 {
                return false;
            }
            if self.find(&buf).is_some() {
                return true;
            }
            let tail = buf.len().saturating_sub(OVERLAP);
            buf.drain(..tail);
        }
    }

    /// Objects of the git repository `repo` (loose and packed, reachable or not) holding
    /// a needle: "OID TYPE".
    pub fn git_objects_containing(&self, repo: &Path) -> Vec<String> {
        let objects = all_objects(repo);
        assert!(!objects.is_empty(), "no objects in {}", repo.display());
        objects
            .iter()
            .filter(|(_, _, body)| self.find(body).is_some())
            .map(|(oid, kind, _)| format!("{oid} {kind}"))
            .collect()
    }

    /// Panics naming `what` if `bytes` holds a needle.
    pub fn assert_absent(&self, what: &str, bytes: &[u8]) {
        if let Some((key, _)) = self.find(bytes) {
            panic!("key {key}'s plaintext is in {what}");
        }
    }

    /// Panics if a needle is in a file under one of `dirs` or an object of one of `repos`.
    pub fn assert_nowhere(&self, dirs: &[&Path], repos: &[&Path]) {
        assert!(
            !self.is_empty(),
            "no needles: the check would pass vacuously"
        );
        for d in dirs {
            let hits = self.files_containing(d, &[]);
            assert!(hits.is_empty(), "plaintext key material in {hits:?}");
        }
        for r in repos {
            let hits = self.git_objects_containing(r);
            assert!(
                hits.is_empty(),
                "plaintext key material in {} objects {hits:?}",
                r.display()
            );
        }
    }
}

/// The needles of one EC private key PEM (SEC1 or PKCS#8); see the module doc.
pub fn key_needles(pem: &str) -> Vec<Vec<u8>> {
    scalar_needles(&scalar_of_pem(pem))
}

/// The needles of one private scalar; see the module doc.
pub fn scalar_needles(scalar: &[u8]) -> Vec<Vec<u8>> {
    let hex: String = scalar.iter().map(|b| format!("{b:02x}")).collect();
    let mut needles = vec![
        scalar.to_vec(),
        hex.clone().into_bytes(),
        hex.to_uppercase().into_bytes(),
    ];
    // `{:?}` of a byte slice holding the scalar: "..., 12, 200, ...", each half.
    let (a, b) = scalar.split_at(scalar.len() / 2);
    for part in [a, b] {
        let list: Vec<String> = part.iter().map(u8::to_string).collect();
        needles.push(list.join(", ").into_bytes());
    }
    // The longest run of whole base64 groups from each offset: one of the three starts
    // on a group of whatever stream the scalar is in. A line break falls in at most one
    // half of a run (a run is 40 characters, a PEM line 64).
    let run = (scalar.len() - 2) / 3 * 3;
    let half = run / 2 / 3 * 3;
    let mut halves = Vec::new();
    for k in 0..3 {
        let bytes = &scalar[k..k + run];
        needles.push(STANDARD.encode(bytes).into_bytes());
        halves.push(STANDARD.encode(&bytes[..half]).into_bytes());
        halves.push(STANDARD.encode(&bytes[half..]).into_bytes());
    }
    // client-key-data holds a half somewhere in the PEM's text; data.value holds that.
    let once = base64_of_each(&halves);
    let twice = base64_of_each(&once);
    needles.extend(halves);
    needles.extend(once);
    needles.extend(twice);
    needles.sort();
    needles.dedup();
    needles
}

/// For each text, its base64 at the 3 alignments it can have inside a longer encoded
/// text: the whole groups from each of its first 3 bytes.
fn base64_of_each(texts: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for t in texts {
        let len = (t.len() - 2) / 3 * 3;
        for j in 0..3 {
            out.push(STANDARD.encode(&t[j..j + len]).into_bytes());
        }
    }
    out
}

/// The private scalar of the one EC private key in a PEM text, or the private exponent
/// of the one RSA key. Panics, saying why, on text that holds none.
pub fn scalar_of_pem(pem: &str) -> Vec<u8> {
    try_scalar_of_pem(pem).unwrap_or_else(|why| panic!("not an EC or RSA private key PEM: {why}"))
}

fn try_scalar_of_pem(pem: &str) -> Result<Vec<u8>, String> {
    let mut found = None;
    let mut lines = pem.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let body: String = lines.by_ref().take_while(|l| *l != end).collect();
        let read: fn(&[u8]) -> Result<Vec<u8>, String> = match label {
            "EC PRIVATE KEY" => sec1_scalar,
            "RSA PRIVATE KEY" => rsa_exponent,
            "PRIVATE KEY" => pkcs8_scalar,
            _ => continue,
        };
        if found.is_some() {
            return Err("more than one private key block".into());
        }
        let der = STANDARD
            .decode(body.as_bytes())
            .map_err(|e| format!("the {label} body is not base64: {e}"))?;
        found = Some(read(&der)?);
    }
    found.ok_or_else(|| "no EC PRIVATE KEY, RSA PRIVATE KEY or PRIVATE KEY block".into())
}

/// id-ecPublicKey (1.2.840.10045.2.1), as DER.
const EC_PUBLIC_KEY: [u8; 9] = [0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];

/// rsaEncryption (1.2.840.113549.1.1.1), as DER.
const RSA_ENCRYPTION: [u8; 11] = [
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01,
];

/// PKCS#8: SEQUENCE { version, AlgorithmIdentifier, OCTET STRING { ECPrivateKey or
/// RSAPrivateKey }, ... }.
fn pkcs8_scalar(der: &[u8]) -> Result<Vec<u8>, String> {
    let (tag, seq, _) = tlv(der)?;
    expect(tag, 0x30, "PrivateKeyInfo")?;
    let (tag, _, rest) = tlv(seq)?;
    expect(tag, 0x02, "PrivateKeyInfo.version")?;
    let (tag, alg, rest) = tlv(rest)?;
    expect(tag, 0x30, "PrivateKeyInfo.privateKeyAlgorithm")?;
    let read = if alg.starts_with(&EC_PUBLIC_KEY) {
        sec1_scalar
    } else if alg.starts_with(&RSA_ENCRYPTION) {
        rsa_exponent
    } else {
        return Err("PKCS#8 of a key that is neither EC nor RSA".into());
    };
    let (tag, inner, _) = tlv(rest)?;
    expect(tag, 0x04, "PrivateKeyInfo.privateKey")?;
    read(inner)
}

/// RSAPrivateKey (PKCS#1, kubeadm's default key): SEQUENCE { version, modulus,
/// publicExponent, privateExponent, ... }. The private exponent is the random part; its
/// first 32 bytes are the "scalar": as long as a P-256 scalar, so that a half's base64
/// falls whole between a PEM's line breaks as an EC scalar's does (a half of the whole
/// exponent would span several lines).
fn rsa_exponent(der: &[u8]) -> Result<Vec<u8>, String> {
    let (tag, seq, _) = tlv(der)?;
    expect(tag, 0x30, "RSAPrivateKey")?;
    let mut rest = seq;
    for what in ["version", "modulus", "publicExponent"] {
        let (tag, _, next) = tlv(rest)?;
        expect(tag, 0x02, &format!("RSAPrivateKey.{what}"))?;
        rest = next;
    }
    let (tag, exponent, _) = tlv(rest)?;
    expect(tag, 0x02, "RSAPrivateKey.privateExponent")?;
    if exponent.len() < 128 {
        return Err(format!(
            "a {}-byte private exponent; RSA-1024 and larger have 128 or more",
            exponent.len()
        ));
    }
    let exponent = exponent.strip_prefix(&[0]).unwrap_or(exponent);
    Ok(exponent[..32].to_vec())
}

/// ECPrivateKey: SEQUENCE { INTEGER 1, OCTET STRING privateKey, ... }.
fn sec1_scalar(der: &[u8]) -> Result<Vec<u8>, String> {
    let (tag, seq, _) = tlv(der)?;
    expect(tag, 0x30, "ECPrivateKey")?;
    let (tag, _, rest) = tlv(seq)?;
    expect(tag, 0x02, "ECPrivateKey.version")?;
    let (tag, scalar, _) = tlv(rest)?;
    expect(tag, 0x04, "ECPrivateKey.privateKey")?;
    if scalar.len() < 32 {
        return Err(format!(
            "a {}-byte scalar; P-256 and larger have 32 or more",
            scalar.len()
        ));
    }
    Ok(scalar.to_vec())
}

fn expect(tag: u8, want: u8, what: &str) -> Result<(), String> {
    if tag == want {
        Ok(())
    } else {
        Err(format!("{what} has tag {tag:#04x}, not {want:#04x}"))
    }
}

/// One DER element: (tag, contents, what follows).
fn tlv(der: &[u8]) -> Result<(u8, &[u8], &[u8]), String> {
    let short = || "DER ends inside an element".to_string();
    let (&tag, rest) = der.split_first().ok_or_else(short)?;
    let (&first, rest) = rest.split_first().ok_or_else(short)?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let count = (first & 0x7f) as usize;
        if count == 0 || count > 4 || rest.len() < count {
            return Err("a DER length that is not definite and short".into());
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | b as usize);
        (len, &rest[count..])
    };
    if rest.len() < len {
        return Err(short());
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

/// The PEM of every user's `client-key-data` in a kubeconfig (YAML or JSON). Panics,
/// saying why, on a kubeconfig that does not parse or a key that does not decode.
pub fn kubeconfig_keys(kubeconfig: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(kubeconfig).expect("a kubeconfig is UTF-8");
    let doc: serde_json::Value =
        serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("kubeconfig: {e}"));
    let users = doc["users"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    users
        .iter()
        .filter_map(|u| u["user"]["client-key-data"].as_str())
        .map(|b64| {
            let pem = STANDARD
                .decode(b64.trim())
                .unwrap_or_else(|e| panic!("client-key-data is not base64: {e}"));
            String::from_utf8(pem).expect("client-key-data holds a PEM")
        })
        .collect()
}

/// `hay` without ASCII whitespace and without JSON's `\n`, `\r` and `\t` escapes. Only
/// the raw scalar and the `{:?}` lists can hold what is removed; [`Needles::find`] also
/// searches the bytes as they are.
fn compact(hay: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        match hay[i] {
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            b'\\' if matches!(hay.get(i + 1), Some(b'n' | b'r' | b't')) => i += 2,
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

fn pair(a: u8, b: u8) -> usize {
    (a as usize) << 8 | b as usize
}
