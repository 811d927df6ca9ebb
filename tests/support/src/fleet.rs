//! A whole fleet for end-to-end tests: lab nodes, a bare fleet remote and spokekeeper's
//! clone, a spokekeeper.yaml, and the binary driven through it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use spokekeeper::seal::sops::{self, AgeIdentities};
use spokekeeper::seal::{RecoveryKey, SealedSecret};
use spokekeeper::secret::SecretBytes;
use spokekeeper_lab::config::{ConfigBuilder, Spoke, Ssh};

use super::git::{all_objects, fleet_remote, git};
use super::leak::Needles;
use super::{Lab, Node, NodeOptions};

pub fn vectors() -> PathBuf {
    crate::repo_root().join("tests/vectors/sealed-secrets")
}

/// The published demo key (keys/demo/) wrapped three other ways, written into `dir` with
/// the openssl CLI: (a certificate re-issued for the same key, the bare SPKI public key,
/// the PKCS#1 RSA public key).
pub fn demo_key_wrappings(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let key = crate::repo_root().join("keys/demo/tls.key");
    let key = key.to_str().expect("utf-8 path");
    let (reissued, spki, pkcs1) = (
        dir.join("demo-reissued.pem"),
        dir.join("demo-spki.pem"),
        dir.join("demo-pkcs1.pem"),
    );
    let s = |p: &Path| p.to_str().expect("utf-8 path").to_string();
    let reissue = [
        "req",
        "-x509",
        "-key",
        key,
        "-subj",
        "/CN=not-the-demo",
        "-days",
        "30",
        "-out",
    ];
    for args in [
        [&reissue[..], &[s(&reissued).as_str()]].concat(),
        vec!["pkey", "-in", key, "-pubout", "-out", &s(&spki)],
        vec!["rsa", "-in", key, "-RSAPublicKey_out", "-out", &s(&pkcs1)],
    ] {
        let out = Command::new("openssl")
            .args(&args)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for (file, label) in [
        (&spki, "BEGIN PUBLIC KEY"),
        (&pkcs1, "BEGIN RSA PUBLIC KEY"),
    ] {
        let text = std::fs::read_to_string(file).expect("written by openssl");
        assert!(text.contains(label), "{label}: {text}");
    }
    (reissued, spki, pkcs1)
}

pub struct Fleet {
    pub nodes: Vec<Node>,
    pub dir: tempfile::TempDir,
    pub remote: PathBuf,
    pub clone: PathBuf,
    pub config: PathBuf,
    /// TMPDIR of every command run through the fleet (scanned for plaintext).
    pub tmp: PathBuf,
    /// The top-level lines `Fleet::with` was given.
    extra: String,
    /// Everything those commands printed: (args, stdout, stderr).
    outputs: Mutex<Vec<(String, String, String)>>,
    /// PATH for the commands, when set (a git wrapper: [`super::git::GitWrapper`]).
    pub path: Option<std::ffi::OsString>,
    // Last: the lab's runtime outlives the nodes.
    _lab: Lab,
}

/// A fresh ed25519 identity (`dir/id_ed25519`) and an empty known_hosts
/// (`dir/known_hosts`), for spokes whose SSH is never reached or never answers.
pub fn ssh_client_files(dir: &Path) -> (PathBuf, PathBuf) {
    let identity = dir.join("id_ed25519");
    let keygen = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&identity)
        .status()
        .unwrap();
    assert!(keygen.success());
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, "").unwrap();
    (identity, known_hosts)
}

/// The number of spokes `metrics` (a /metrics answer) counts errors at the extract
/// stage for.
pub fn extract_failures(metrics: &str) -> usize {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("spokekeeper_errors_total{spoke=\"spoke")
                && l.contains("stage=\"extract\"")
        })
        .count()
}

/// `n` spokes (spoke0, spoke1, ...) at `{net}.X.Y` on SSH port 1, where nothing listens:
/// every connection is refused at once. Their identity and known_hosts are made in `dir`.
pub fn unreachable_spokes(dir: &Path, n: usize, net: &str) -> Vec<Spoke> {
    let (identity, known_hosts) = ssh_client_files(dir);
    let ssh = Ssh {
        port: 1,
        identity,
        known_hosts: Some(known_hosts),
        connect_timeout: Some("2s".into()),
    };
    (0..n)
        .map(|i| {
            Spoke::new(
                format!("spoke{i}"),
                format!("{net}.{}.{}", i / 250, i % 250 + 1),
            )
            .ssh(&ssh)
        })
        .collect()
}

/// A spokekeeper.yaml over `clone` with one spoke, `unreachable` at 127.255.0.1 on SSH
/// port 1 with an identity in `dir` that does not exist: a tick that fails fast, for
/// tests of the daemon's loop rather than of rotations.
pub fn one_unreachable(clone: &Path, dir: &Path) -> ConfigBuilder {
    let ssh = Ssh {
        port: 1,
        identity: dir.join("no-such-key"),
        known_hosts: None,
        connect_timeout: None,
    };
    ConfigBuilder::new(clone, vectors().join("key/cert.pem"))
        .spoke(Spoke::new("unreachable", "127.255.0.1").ssh(&ssh))
}

/// A spokekeeper.yaml for `nodes` (spoke0, spoke1, ...) over `clone`, sealing to the
/// vectors' certificate.
pub fn config(clone: &Path, nodes: &[Node]) -> ConfigBuilder {
    ConfigBuilder::new(clone, vectors().join("key/cert.pem")).spokes(
        nodes
            .iter()
            .enumerate()
            .map(|(i, n)| n.spoke(&format!("spoke{i}"), "5s")),
    )
}

/// The same as text, with `extra` top-level lines (e.g. `renew_before: 1d`).
pub fn config_yaml(clone: &Path, nodes: &[Node], extra: &str) -> String {
    config(clone, nodes).top(extra).yaml()
}

/// Runs the binary with `--config config` and `args`: (exit code, stdout, stderr).
pub fn spokekeeper(config: &Path, args: &[&str]) -> (i32, String, String) {
    spokekeeper_in(config, args, &std::env::temp_dir(), None)
}

/// Same, with TMPDIR `tmp` and, when given, PATH `path`.
fn spokekeeper_in(
    config: &Path,
    args: &[&str],
    tmp: &Path,
    path: Option<&std::ffi::OsStr>,
) -> (i32, String, String) {
    let mut cmd = Command::new(crate::bin());
    cmd.arg("--config")
        .arg(config)
        .args(args)
        .env("TMPDIR", tmp);
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

impl Fleet {
    pub fn new(opts: &[NodeOptions]) -> Fleet {
        Self::with(opts, "")
    }

    /// The configuration the fleet was made with, to change and write again.
    pub fn builder(&self) -> ConfigBuilder {
        config(&self.clone, &self.nodes).top(&self.extra)
    }

    /// With `extra` top-level configuration lines.
    pub fn with(opts: &[NodeOptions], extra: &str) -> Fleet {
        let lab = Lab::new();
        let nodes: Vec<Node> = opts.iter().map(|o| lab.add_node(o.clone())).collect();
        let dir = tempfile::tempdir().unwrap();
        let (remote, mut clones) = fleet_remote(dir.path(), 1);
        let clone = clones.remove(0);
        let config = dir.path().join("spokekeeper.yaml");
        std::fs::write(&config, config_yaml(&clone, &nodes, extra)).unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        Fleet {
            nodes,
            dir,
            remote,
            clone,
            config,
            tmp,
            extra: extra.into(),
            outputs: Mutex::new(Vec::new()),
            path: None,
            _lab: lab,
        }
    }

    /// The lab the nodes run on, to add one beside them.
    pub fn lab(&self) -> &Lab {
        &self._lab
    }

    /// Any command: (exit code, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let (code, out, err) = spokekeeper_in(&self.config, args, &self.tmp, self.path.as_deref());
        self.outputs
            .lock()
            .unwrap()
            .push((args.join(" "), out.clone(), err.clone()));
        (code, out, err)
    }

    pub fn rotate(&self, args: &[&str]) -> (i32, String, String) {
        let mut all = vec!["rotate"];
        all.extend_from_slice(args);
        self.run(&all)
    }

    pub fn rotate_json(&self, args: &[&str]) -> (i32, serde_json::Value, String) {
        let mut all = vec!["-o", "json"];
        all.extend_from_slice(args);
        let (code, out, err) = self.rotate(&all);
        let json = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
        (code, json, err)
    }

    /// A library tick's context over the fleet's spokekeeper.yaml as it is now, sealing
    /// to the vectors' certificate, for tests that drive `rotate::tick` themselves.
    pub async fn context(&self) -> spokekeeper::rotate::Context {
        let config = spokekeeper::config::Config::load(&self.config).unwrap();
        let cert = std::fs::read(vectors().join("key/cert.pem")).unwrap();
        let now = time::OffsetDateTime::now_utc();
        let sealing = spokekeeper::seal::SealingKey::from_pem(&cert, "cert.pem", now).unwrap();
        let repo = spokekeeper::repo::Repo::open(&config.repo).await.unwrap();
        spokekeeper::rotate::Context::new(config, sealing, repo).unwrap()
    }

    /// `spokekeeper add spoke{i}` for node i (a k3s node at its address, its kubeconfig
    /// path), then `extra`.
    pub fn add(&self, i: usize, extra: &[&str]) -> (i32, String, String) {
        let node = &self.nodes[i];
        let (name, address) = (format!("spoke{i}"), node.address_string());
        let mut args = vec!["add", &name, "--address", &address, "--distro", "k3s"];
        args.extend(["--kubeconfig-path", node.kubeconfig_path_str()]);
        args.extend_from_slice(extra);
        self.run(&args)
    }

    /// Commits `edit` of the file at `path` to the remote from a clone of its own, as a
    /// person with push access would.
    pub fn push_edit(&self, path: &str, edit: impl Fn(&str) -> String) {
        let other = self.dir.path().join("editor");
        if !other.exists() {
            super::git::clone(&self.remote, &other);
        }
        git(&other, &["pull", "--quiet", "--ff-only"]);
        let file = other.join(path);
        let text = std::fs::read_to_string(&file).unwrap();
        let edited = edit(&text);
        assert_ne!(edited, text, "the edit changed something");
        std::fs::write(&file, edited).unwrap();
        git(&other, &["add", "-A"]);
        let who = ["-c", "user.name=p", "-c", "user.email=p@p"];
        git(
            &other,
            &[&who[..], &["commit", "--quiet", "-m", "edited by hand"]].concat(),
        );
        git(&other, &["push", "--quiet", "origin", "HEAD:main"]);
    }

    pub fn remote_log(&self) -> Vec<String> {
        git(&self.remote, &["log", "--format=%s", "main"])
            .lines()
            .map(str::to_string)
            .collect()
    }

    pub fn output(&self, i: usize) -> PathBuf {
        self.clone
            .join(format!("fluxcd/spoke{i}-kubeconfig-sealed.yaml"))
    }

    pub fn remote_file(&self, i: usize) -> String {
        git(
            &self.remote,
            &[
                "show",
                &format!("main:fluxcd/spoke{i}-kubeconfig-sealed.yaml"),
            ],
        )
    }

    /// The kubeconfig the hub would get from spoke i's committed SealedSecret.
    pub fn unsealed(&self, i: usize) -> SecretBytes {
        self.unsealed_in(i, "flux-system")
    }

    /// [`Fleet::unsealed`], the Secret in `namespace`.
    pub fn unsealed_in(&self, i: usize, namespace: &str) -> SecretBytes {
        let keys = vectors_recovery_keys();
        let sealed = SealedSecret::parse(self.remote_file(i).as_bytes()).unwrap();
        assert_eq!(sealed.namespace, namespace);
        assert_eq!(sealed.name, format!("spoke{i}-kubeconfig"));
        let mut secret = sealed.unseal(&keys).unwrap();
        secret.data.remove("value").expect("key value")
    }

    /// The client certificate's notAfter in spoke i's committed credential.
    pub fn unsealed_client_not_after(&self, i: usize) -> time::OffsetDateTime {
        let kc = spokekeeper::kubeconfig::parse(self.unsealed(i).expose()).unwrap();
        let kc = spokekeeper::kubeconfig::sanitize(&kc, "x").unwrap();
        kc.client_certs()[0].not_after
    }

    /// Needles of every node's current client key and of every client key sealed in an
    /// object of the remote or the clone (each minted generation): see [`sealed_keys`].
    pub fn key_needles(&self) -> Needles {
        self.key_needles_unsealing(&vectors_recovery_keys())
    }

    /// The same, for a fleet that seals to a key of `recovery` (a real controller's).
    pub fn key_needles_unsealing(&self, recovery: &[RecoveryKey]) -> Needles {
        self.key_needles_opening(&Openers {
            recovery,
            age: None,
        })
    }

    /// The same, for a fleet whose committed credentials `openers` open: SealedSecrets
    /// and sops Secrets.
    pub fn key_needles_opening(&self, openers: &Openers) -> Needles {
        let mut needles = Needles::new();
        for n in &self.nodes {
            needles.add_key(&n.parts().client_key_pem);
        }
        for repo in [&self.remote, &self.clone] {
            sealed_keys(&mut needles, repo, openers);
        }
        needles
    }

    /// No node's current client key and no sealed client key anywhere: see
    /// [`Fleet::assert_no_plaintext_of`].
    pub fn assert_no_plaintext(&self) {
        self.assert_no_plaintext_of(&self.key_needles());
    }

    /// None of `needles` in what every command run through the fleet printed, in any
    /// object (commits, trees, blobs; loose or packed) of the remote or the clone, or in
    /// a file under the fleet's directory (the remote, the clone's tree and .git, the
    /// commands' TMPDIR). The nodes' own directories are elsewhere.
    pub fn assert_no_plaintext_of(&self, needles: &Needles) {
        for (args, out, err) in self.outputs.lock().unwrap().iter() {
            needles.assert_absent(&format!("the stdout of `{args}`"), out.as_bytes());
            needles.assert_absent(&format!("the stderr of `{args}`"), err.as_bytes());
        }
        needles.assert_nowhere(&[self.dir.path()], &[&self.remote, &self.clone]);
    }
}

/// The private key of the vectors' sealing certificate, which the fleet seals to.
pub fn vectors_recovery_keys() -> Vec<RecoveryKey> {
    RecoveryKey::load_all(
        &std::fs::read(vectors().join("key/tls.key")).unwrap(),
        "tls.key",
    )
    .unwrap()
}

/// What opens the credentials committed to a fleet repo: the private halves of the
/// sealing key (SealedSecrets) and the age identities (sops Secrets).
pub struct Openers<'a> {
    pub recovery: &'a [RecoveryKey],
    pub age: Option<&'a AgeIdentities>,
}

/// Adds to `needles` the client key of every kubeconfig sealed in any object of `repo`
/// (loose or packed, reachable or not: every generation committed, every commit that lost
/// a push race), opened with `openers`: a SealedSecret unsealed, a sops Secret decrypted;
/// returns how many sealed kubeconfigs it read. Panics on one it cannot open (a sops
/// Secret and no age identity among them included), since its key could not be looked
/// for. A sops file that is not a Secret is the plaintext guard's matter, not read here.
pub fn sealed_keys(needles: &mut Needles, repo: &Path, openers: &Openers) -> usize {
    let mut read = 0;
    for (oid, kind, body) in all_objects(repo) {
        if kind != "blob" {
            continue;
        }
        let cannot = |e: &dyn std::fmt::Display| -> ! {
            panic!(
                "blob {oid} of {}: {e}: its key cannot be looked for",
                repo.display()
            )
        };
        let secret = if body.windows(12).any(|w| w == b"SealedSecret") {
            let Ok(sealed) = SealedSecret::parse(&body) else {
                continue;
            };
            sealed
                .unseal(openers.recovery)
                .unwrap_or_else(|e| cannot(&e))
        } else if sops::is_sops(&body) && sops::readable(&body).is_ok() {
            let Some(ids) = openers.age else {
                cannot(&"a sops Secret, and no age identity to decrypt it");
            };
            sops::decrypt(&body, ids).unwrap_or_else(|e| cannot(&e))
        } else {
            continue;
        };
        for value in secret.data.values() {
            needles.add_kubeconfig(value.expose());
        }
        read += 1;
    }
    read
}

pub fn action(report: &serde_json::Value, i: usize) -> String {
    report["spokes"][i]["action"].as_str().unwrap().to_string()
}

pub async fn authenticates(kubeconfig: &SecretBytes) -> spokekeeper::spoke::LiveReport {
    super::install_crypto_provider();
    spokekeeper::spoke::check_live(kubeconfig, std::time::Duration::from_secs(10))
        .await
        .unwrap()
}
