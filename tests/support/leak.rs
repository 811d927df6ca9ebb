//! Plaintext-key checks: "needles" cut from the random part of each client key (its
//! private scalar), searched for in files, git objects and command output.
//!
//! A cut from the start of a key's PEM, of the PEM's base64 or of a PKCS#8 body is the
//! same for every P-256 key (`-----BEGIN EC PRIVATE KEY-----`, ASN.1 header bytes), so it
//! cannot tell one node's key from another. The needles here encode scalar bytes only:
//! - the scalar raw, in hex, and in base64 at each of the 3 alignments a base64 stream
//!   can give it (this covers the PEM body line, whatever DER wraps the scalar);
//! - the base64 of the PEM text (a kubeconfig's `client-key-data`) at its 3 alignments,
//!   cut from the scalar's window of the PEM body.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Every needle is at least this long (the search indexes this many leading bytes).
const PREFIX: usize = 8;

/// Files are read this much at a time.
pub const CHUNK: usize = 16 << 20;

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

    /// Adds one EC private key (PEM, SEC1 or PKCS#8). Adding the same key again (a
    /// renewed certificate keeps its key) changes nothing; a different key whose needles
    /// collide with an earlier key's panics, since then a hit could not name the key.
    pub fn add_key(&mut self, pem: &str) {
        let scalar = scalar_of_pem(pem);
        let key = match self.keys.iter().position(|k| *k == scalar) {
            Some(_) => return,
            None => {
                self.keys.push(scalar.clone());
                self.keys.len() - 1
            }
        };
        for n in key_needles(pem) {
            // key_needles has no duplicates: a repeat is another key's needle.
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

    /// The first needle in `hay`: (key index, needle).
    pub fn find(&self, hay: &[u8]) -> Option<(usize, &[u8])> {
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

    /// Reads in chunks that overlap by a needle's length. A file removed meanwhile (a
    /// session directory going away) holds nothing.
    fn file_contains(&self, path: &Path) -> bool {
        let Ok(mut f) = std::fs::File::open(path) else {
            return false;
        };
        let overlap = self.needles.iter().map(Vec::len).max().unwrap_or(0);
        let mut buf = Vec::with_capacity(CHUNK + overlap);
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
            let tail = buf.len().saturating_sub(overlap);
            buf.drain(..tail);
        }
    }

    /// Objects of the git repository `repo` (loose and packed, reachable or not) holding
    /// a needle: "OID TYPE".
    pub fn git_objects_containing(&self, repo: &Path) -> Vec<String> {
        let mut child = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["cat-file", "--batch-all-objects", "--batch", "--unordered"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run git cat-file");
        let mut all = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut all).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "git cat-file in {}: {}",
            repo.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        // "OID TYPE SIZE\nCONTENT\n" per object.
        let mut hits = Vec::new();
        let mut rest = &all[..];
        let mut objects = 0;
        while !rest.is_empty() {
            let nl = rest.iter().position(|&b| b == b'\n').expect("header line");
            let header = std::str::from_utf8(&rest[..nl]).expect("header");
            let mut f = header.split(' ');
            let (oid, kind, size) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
            let size: usize = size.parse().expect("object size");
            let body = &rest[nl + 1..nl + 1 + size];
            if self.find(body).is_some() {
                hits.push(format!("{oid} {kind}"));
            }
            rest = &rest[nl + 1 + size + 1..];
            objects += 1;
        }
        assert!(objects > 0, "no objects in {}", repo.display());
        hits
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
    let scalar = scalar_of_pem(pem);
    let mut needles = vec![scalar.clone(), hex(&scalar).into_bytes()];
    // 30 of the 32 bytes from each offset: one of the three starts on a base64 group.
    let scalar_b64: Vec<String> = (0..3)
        .map(|k| STANDARD.encode(&scalar[k..k + 30]))
        .collect();
    needles.extend(scalar_b64.iter().map(|s| s.clone().into_bytes()));
    // The scalar's window in the PEM body (one line), and that line's text in base64 at
    // the three alignments: whatever precedes the key in a base64 blob, one matches.
    let window = scalar_b64
        .iter()
        .find_map(|w| pem.find(w.as_str()))
        .expect("the scalar's base64 lies within one PEM body line");
    needles.push(pem.as_bytes()[window..window + 40].to_vec());
    for k in 0..3 {
        let text = &pem.as_bytes()[window + k..window + k + 36];
        needles.push(STANDARD.encode(text).into_bytes());
    }
    needles.sort();
    needles.dedup();
    needles
}

/// The private scalar of an EC key PEM.
pub fn scalar_of_pem(pem: &str) -> Vec<u8> {
    let body: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .map(str::trim)
        .collect();
    let der = STANDARD.decode(body).expect("key PEM body is base64");
    if pem.contains("BEGIN EC PRIVATE KEY") {
        sec1_scalar(&der)
    } else {
        // PKCS#8: SEQUENCE { version, algorithm, OCTET STRING { ECPrivateKey } }.
        let (_, seq, _) = tlv(&der);
        let (_, _, rest) = tlv(seq);
        let (_, _, rest) = tlv(rest);
        let (tag, inner, _) = tlv(rest);
        assert_eq!(tag, 0x04, "PKCS#8 privateKey is an OCTET STRING");
        sec1_scalar(inner)
    }
}

/// ECPrivateKey: SEQUENCE { INTEGER 1, OCTET STRING privateKey, ... }.
fn sec1_scalar(der: &[u8]) -> Vec<u8> {
    let (tag, seq, _) = tlv(der);
    assert_eq!(tag, 0x30, "ECPrivateKey is a SEQUENCE");
    let (_, _, rest) = tlv(seq);
    let (tag, scalar, _) = tlv(rest);
    assert_eq!(tag, 0x04, "ECPrivateKey.privateKey is an OCTET STRING");
    assert!(scalar.len() >= 32, "a P-256 scalar or larger");
    scalar.to_vec()
}

/// One DER element: (tag, contents, what follows).
fn tlv(der: &[u8]) -> (u8, &[u8], &[u8]) {
    let tag = der[0];
    let (len, head) = match der[1] {
        n if n < 0x80 => (n as usize, 2),
        n => {
            let count = (n & 0x7f) as usize;
            let len = der[2..2 + count]
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | b as usize);
            (len, 2 + count)
        }
    };
    (tag, &der[head..head + len], &der[head + len..])
}

fn pair(a: u8, b: u8) -> usize {
    (a as usize) << 8 | b as usize
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
