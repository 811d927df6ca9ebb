//! A whole fleet for end-to-end tests: lab nodes, a bare fleet remote and spokekeeper's
//! clone, a spokekeeper.yaml, and the binary driven through it.

use std::path::{Path, PathBuf};
use std::process::Command;

use spokekeeper::seal::{RecoveryKey, SealedSecret};
use spokekeeper::secret::SecretBytes;

use super::git::{fleet_remote, git};
use super::{Lab, Node, NodeOptions};

pub fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/sealed-secrets")
}

pub struct Fleet {
    pub nodes: Vec<Node>,
    pub dir: tempfile::TempDir,
    pub remote: PathBuf,
    pub clone: PathBuf,
    pub config: PathBuf,
    // Last: the lab's runtime outlives the nodes.
    _lab: Lab,
}

/// A spokekeeper.yaml for `nodes` (spoke0, spoke1, ...) over `clone`, with `extra`
/// top-level lines (e.g. `renew_before: 1d`).
pub fn config_yaml(clone: &Path, nodes: &[Node], extra: &str) -> String {
    let mut yaml = format!(
        "repo:\n  path: {}\n  author: \"spokekeeper <spokekeeper@example.org>\"\nsealing:\n  cert: {}\n{extra}spokes:\n",
        clone.display(),
        vectors().join("key/cert.pem").display()
    );
    for (i, n) in nodes.iter().enumerate() {
        yaml.push_str(&format!(
            "  - name: spoke{i}\n    address: {}\n    kubeconfig_path: {}\n    ssh: {{ port: {}, identity: {}, known_hosts: {}, connect_timeout: 5s }}\n",
            n.address,
            n.kubeconfig_path.display(),
            n.ssh_port,
            n.identity_path.display(),
            n.known_hosts_path.display()
        ));
    }
    yaml
}

/// Runs the binary with `--config config` and `args`: (exit code, stdout, stderr).
pub fn spokekeeper(config: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_spokekeeper"))
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap();
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

    /// With `extra` top-level configuration lines.
    pub fn with(opts: &[NodeOptions], extra: &str) -> Fleet {
        let lab = Lab::new();
        let nodes: Vec<Node> = opts.iter().map(|o| lab.add_node(o.clone())).collect();
        let dir = tempfile::tempdir().unwrap();
        let (remote, mut clones) = fleet_remote(dir.path(), 1);
        let clone = clones.remove(0);
        let config = dir.path().join("spokekeeper.yaml");
        std::fs::write(&config, config_yaml(&clone, &nodes, extra)).unwrap();
        Fleet {
            nodes,
            dir,
            remote,
            clone,
            config,
            _lab: lab,
        }
    }

    /// Any command: (exit code, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        spokekeeper(&self.config, args)
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
        let keys = RecoveryKey::load_all(
            &std::fs::read(vectors().join("key/tls.key")).unwrap(),
            "tls.key",
        )
        .unwrap();
        let sealed = SealedSecret::parse(self.remote_file(i).as_bytes()).unwrap();
        assert_eq!(sealed.namespace, "flux-system");
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

    /// Every secret byte of every node, searched for in the remote's whole history, the
    /// clone and the test's directory.
    pub fn assert_no_plaintext(&self) {
        let history = git(&self.remote, &["log", "-p", "--all", "--format=%B"]);
        for n in &self.nodes {
            let key = &n.parts().client_key_pem;
            let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
            use base64::Engine;
            let b64_of_pem = base64::engine::general_purpose::STANDARD.encode(key.as_bytes());
            for needle in [&body[..40], &b64_of_pem[..40]] {
                assert!(
                    !history.contains(needle),
                    "client key in the remote history"
                );
                let found = grep_dir(self.dir.path(), needle.as_bytes(), &n.dir);
                assert!(found.is_empty(), "client key on disk in {found:?}");
            }
        }
    }
}

/// Files under `root` containing `needle`, except under `skip` (the node's own files).
fn grep_dir(root: &Path, needle: &[u8], skip: &Path) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.starts_with(skip) {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if std::fs::read(&p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
            {
                hits.push(p);
            }
        }
    }
    hits
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
