//! `spokekeeper add`'s edit of spokekeeper.yaml: one spoke appended to `spokes:` as text,
//! so every comment and the layout around it stay as written, then the whole file parsed
//! again with the real parser ([`Config::parse`]) to prove it still loads.

use std::path::Path;

use super::{Config, ConfigError, CredentialMode, Distro, check, lines::Lines};
use crate::text::BlockListError;

/// The spoke `add` writes: only what its flags say; everything else takes the defaults
/// (and the global `ssh:` and `credential:`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSpoke {
    pub name: String,
    /// The SSH target, and the host written into the kubeconfig unless `api_server`.
    pub address: String,
    pub distro: Distro,
    pub kubeconfig_path: Option<String>,
    pub api_server: Option<String>,
    /// A federated spoke's other server nodes (`servers`), each written and proven.
    pub servers: Vec<String>,
    /// The hub namespace of its Secret and Flux objects (`secret.namespace`): one that
    /// holds no other spoke's Secret.
    pub namespace: String,
    /// `credential.mode`, when given (else the global `credential:` applies).
    pub credential: Option<CredentialMode>,
    /// `credential.federated.issuer`, when given (else the global one applies).
    pub issuer: Option<String>,
}

/// `text` (the file `file`, relative paths against `base`) with `spoke` appended to its
/// `spokes:` list, and the configuration it loads as. Refuses a name already taken
/// (naming that spoke's line), a namespace holding another spoke's Secret, a `spokes:`
/// it cannot append to as text, and anything the parser refuses in the result.
pub fn add_spoke(
    text: &str,
    file: &str,
    base: &Path,
    spoke: &NewSpoke,
) -> Result<(String, Config), ConfigError> {
    let err = |message: String| ConfigError {
        file: file.to_string(),
        message,
    };
    let before = Config::parse(text, file, base)?;
    if let Err(e) = check::spoke_name(&spoke.name) {
        return Err(err(format!("spoke name {e}")));
    }
    if let Some(i) = before.spokes.iter().position(|s| s.name == spoke.name) {
        let at = Lines::of(text)
            .line(&format!("spokes[{i}].name"))
            .map(|n| format!("line {n}: "))
            .unwrap_or_default();
        return Err(err(format!(
            "{at}a spoke named {:?} is already configured (spokes[{i}]): pick another name, or rotate it with `spokekeeper rotate {}`",
            spoke.name, spoke.name
        )));
    }
    if let Some((i, other)) = before
        .spokes
        .iter()
        .enumerate()
        .find(|(_, s)| s.secret.namespace == spoke.namespace)
    {
        return Err(err(format!(
            "namespace {:?} holds spokes[{i}]'s Secret ({}): each spoke added gets a hub namespace of its own, so that its Flux objects can read no other spoke's credential; pick another (add's --namespace)",
            spoke.namespace, other.name
        )));
    }
    let edited = append(text, spoke).map_err(|e| err(e.to_string()))?;
    let after = Config::parse(&edited, file, base).map_err(|e| {
        err(format!(
            "the file with {} added does not load: {}",
            spoke.name, e.message
        ))
    })?;
    Ok((edited, after))
}

/// Why a spoke cannot be appended to `spokes:` as text.
#[derive(Debug, thiserror::Error)]
enum AppendError {
    #[error(transparent)]
    List(#[from] BlockListError),
    #[error("no top-level `spokes:` to add the spoke to")]
    NoSpokes,
}

/// `text` with `spoke` after the last line of the `spokes:` list, in its indentation.
fn append(text: &str, spoke: &NewSpoke) -> Result<String, AppendError> {
    let list = crate::text::block_list(text, "spokes")?.ok_or(AppendError::NoSpokes)?;
    let eol = list.eol;
    let entry = entry_in(spoke, list.indent, list.gap, eol);
    let gap = if list.missing_eol { eol } else { "" };
    Ok(format!(
        "{}{gap}{entry}{}",
        &text[..list.at],
        &text[list.at..]
    ))
}

/// The `spokes:` list item `add` appends for `spoke`, at column 0: what the Helm
/// chart's `config.spokes` takes as it is, for a configuration add cannot write.
pub fn spoke_entry(spoke: &NewSpoke) -> String {
    entry_in(spoke, 0, 1, "\n")
}

/// The list item: `-` at column `indent`, its keys `gap` spaces after it.
fn entry_in(spoke: &NewSpoke, indent: usize, gap: usize, eol: &str) -> String {
    let pad = " ".repeat(indent);
    let keys = " ".repeat(indent + 1 + gap);
    let mut entry = format!(
        "{pad}-{}name: {}{eol}{keys}address: {}{eol}{keys}distro: {}{eol}",
        " ".repeat(gap),
        spoke.name,
        quoted(&spoke.address),
        spoke.distro
    );
    for (k, v) in [
        ("kubeconfig_path", &spoke.kubeconfig_path),
        ("api_server", &spoke.api_server),
    ] {
        if let Some(v) = v {
            entry.push_str(&format!("{keys}{k}: {}{eol}", quoted(v)));
        }
    }
    if !spoke.servers.is_empty() {
        let servers: Vec<String> = spoke.servers.iter().map(|s| quoted(s)).collect();
        entry.push_str(&format!("{keys}servers: [{}]{eol}", servers.join(", ")));
    }
    entry.push_str(&format!(
        "{keys}secret: {{namespace: {}}}{eol}",
        quoted(&spoke.namespace)
    ));
    let mode = spoke.credential.map(|m| format!("mode: {m}"));
    let issuer = spoke
        .issuer
        .as_ref()
        .map(|i| format!("federated: {{issuer: {}}}", quoted(i)));
    let credential: Vec<String> = mode.into_iter().chain(issuer).collect();
    if !credential.is_empty() {
        entry.push_str(&format!(
            "{keys}credential: {{{}}}{eol}",
            credential.join(", ")
        ));
    }
    entry
}

/// A YAML double-quoted scalar (JSON's string syntax is YAML's): nothing in the value
/// can end the line or start another key.
fn quoted(v: &str) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spoke(name: &str) -> NewSpoke {
        NewSpoke {
            name: name.into(),
            address: "192.168.1.30".into(),
            distro: Distro::Rke2,
            kubeconfig_path: None,
            api_server: None,
            servers: Vec::new(),
            namespace: name.into(),
            credential: None,
            issuer: None,
        }
    }

    fn add(text: &str, s: &NewSpoke) -> Result<(String, Config), ConfigError> {
        add_spoke(text, "spokekeeper.yaml", Path::new("/etc/spokekeeper"), s)
    }

    /// A file in the template's style: comments on keys, commented keys in the last spoke.
    const COMMENTED: &str = "# spokekeeper.yaml\nrepo:\n  path: fleet   # the clone\nsealing:\n  cert: c.pem\nssh:\n  user: spokekeeper\nspokes:\n  - name: dev\n    address: 192.168.1.20   # SSH target\n    # kubeconfig_path: /etc/rancher/k3s/k3s.yaml\n    # output: fluxcd/dev-kubeconfig-sealed.yaml\n";

    #[test]
    fn every_line_is_kept_and_the_spoke_follows_the_last_ones_comments() {
        let (text, config) = add(COMMENTED, &spoke("edge-1")).unwrap();
        assert_eq!(
            text,
            format!(
                "{COMMENTED}  - name: edge-1\n    address: \"192.168.1.30\"\n    distro: rke2\n    secret: {{namespace: \"edge-1\"}}\n"
            )
        );
        let edge = &config.spokes[1];
        assert_eq!(edge.secret.namespace, "edge-1");
        assert_eq!(edge.name, "edge-1");
        assert_eq!(edge.kubeconfig_path, "/etc/rancher/rke2/rke2.yaml");
        assert_eq!(edge.ssh.user, "spokekeeper", "the global ssh: applies");
    }

    #[test]
    fn a_key_after_the_list_stays_after_it_and_column_zero_items_keep_their_style() {
        let text = "repo: {path: f}\r\nsealing: {cert: c.pem}\r\nspokes:\r\n- name: dev   # first\r\n  address: 10.0.0.1\r\n\r\n# the hub\r\nhub:\r\n  verify_timeout: 1m\r\n";
        let mut s = spoke("test");
        s.address = "fd00::1".into();
        s.kubeconfig_path = Some("/opt/k3s.yaml".into());
        s.api_server = Some("https://lb.example.org:6443".into());
        let (out, config) = add(text, &s).unwrap();
        assert_eq!(
            out,
            "repo: {path: f}\r\nsealing: {cert: c.pem}\r\nspokes:\r\n- name: dev   # first\r\n  address: 10.0.0.1\r\n- name: test\r\n  address: \"fd00::1\"\r\n  distro: rke2\r\n  kubeconfig_path: \"/opt/k3s.yaml\"\r\n  api_server: \"https://lb.example.org:6443\"\r\n  secret: {namespace: \"test\"}\r\n\r\n# the hub\r\nhub:\r\n  verify_timeout: 1m\r\n"
        );
        assert_eq!(config.spokes[1].address, "fd00::1");
        assert!(config.hub.is_some());
        // No newline at the end of the file: one is added before the entry.
        let (out, _) = add(
            "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: x}",
            &spoke("b"),
        )
        .unwrap();
        assert!(out.contains("address: x}\n  - name: b\n"), "{out}");
    }

    #[test]
    fn a_taken_name_is_refused_naming_its_line() {
        let text = "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - name: dev\n    address: a\n  - name: edge-1\n    address: b\n";
        let e = add(text, &spoke("edge-1")).unwrap_err().to_string();
        assert!(
            e.starts_with("spokekeeper.yaml: line 6: a spoke named \"edge-1\" is already configured (spokes[1])"),
            "{e}"
        );
    }

    #[test]
    fn a_namespace_holding_another_spokes_secret_is_refused() {
        let text = "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: a}\n  - {name: lab, address: b, secret: {namespace: lab}}\n";
        for (ns, held_by) in [
            ("flux-system", "spokes[0]'s Secret (dev)"),
            ("lab", "spokes[1]'s Secret (lab)"),
        ] {
            let mut s = spoke("edge");
            s.namespace = ns.into();
            let e = add(text, &s).unwrap_err().to_string();
            assert!(
                e.contains(&format!("namespace {ns:?} holds {held_by}"))
                    && e.contains("--namespace"),
                "{e}"
            );
        }
        let (_, config) = add(text, &spoke("edge")).unwrap();
        assert_eq!(config.spokes[2].secret.namespace, "edge");
    }

    #[test]
    fn what_cannot_be_appended_as_text_or_loaded_after_is_refused() {
        let flow = "repo: {path: f}\nsealing: {cert: c.pem}\nspokes: [{name: dev, address: a}]\n";
        let e = add(flow, &spoke("b")).unwrap_err().to_string();
        assert!(
            e.contains("line 3: spokes is written on one line (flow style)"),
            "{e}"
        );
        let e = add(flow, &spoke("Bad_Name")).unwrap_err().to_string();
        assert!(
            e.contains("spoke name \"Bad_Name\" must be lowercase"),
            "{e}"
        );
        let mut s = spoke("b");
        s.address = "x\n  injected: 1".into();
        let text =
            "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: a}\n";
        let e = add(text, &s).unwrap_err().to_string();
        assert!(
            e.contains("does not load") && e.contains("spokes[1].address"),
            "{e}"
        );
        let mut s = spoke("b");
        s.kubeconfig_path = Some("relative.yaml".into());
        let e = add(text, &s).unwrap_err().to_string();
        assert!(e.contains("absolute"), "{e}");
    }

    #[test]
    fn the_entry_for_a_read_only_file_is_the_one_add_appends() {
        let mut s = spoke("edge-1");
        s.api_server = Some("https://lb.example.org:6443".into());
        let entry = spoke_entry(&s);
        assert_eq!(
            entry,
            "- name: edge-1\n  address: \"192.168.1.30\"\n  distro: rke2\n  api_server: \"https://lb.example.org:6443\"\n  secret: {namespace: \"edge-1\"}\n"
        );
        // Indented under `spokes:` (as the chart's values nest it), it loads as add's.
        let text =
            "repo: {path: f}\nsealing: {cert: c.pem}\nspokes:\n  - {name: dev, address: a}\n";
        let nested: String = entry.lines().map(|l| format!("  {l}\n")).collect();
        let by_hand = Config::parse(&format!("{text}{nested}"), "f", Path::new("/")).unwrap();
        let (_, added) = add(text, &s).unwrap();
        assert_eq!(by_hand.spokes, added.spokes);
    }

    #[test]
    fn a_credential_mode_and_issuer_given_are_written_as_the_spokes_own() {
        let text = "repo: {path: f}\nsealing: {cert: c.pem}\nhub: {}\nspokes:\n  - {name: dev, address: a}\n";
        let mut s = spoke("edge-1");
        s.credential = Some(CredentialMode::Federated);
        s.issuer = Some("https://hub.example:6443".into());
        let (out, config) = add(text, &s).unwrap();
        assert!(
            out.ends_with("  secret: {namespace: \"edge-1\"}\n    credential: {mode: federated, federated: {issuer: \"https://hub.example:6443\"}}\n"),
            "{out}"
        );
        let edge = &config.spokes[1];
        assert_eq!(edge.credential.mode, CredentialMode::Federated);
        assert_eq!(
            edge.credential
                .federated
                .as_ref()
                .map(|f| f.issuer.as_str()),
            Some("https://hub.example:6443")
        );
        assert_eq!(edge.output, Path::new("fluxcd/edge-1-kubeconfig.yaml"));
        // The mode alone, and nowhere an issuer: refused, naming what is missing.
        s.issuer = None;
        let e = add(text, &s).unwrap_err().to_string();
        assert!(
            e.contains(
                "spokes[1].credential.mode is federated but credential.federated.issuer is not set"
            ),
            "{e}"
        );
        s.credential = Some(CredentialMode::Extracted);
        let (_, config) = add(text, &s).unwrap();
        assert_eq!(config.spokes[1].credential.mode, CredentialMode::Extracted);
        assert!(spoke_entry(&s).ends_with("  credential: {mode: extracted}\n"));
    }

    #[test]
    fn servers_given_are_written_for_a_federated_spoke_and_refused_for_a_sealed_one() {
        let text = "repo: {path: f}\nsealing: {cert: c.pem}\nhub: {}\nspokes:\n  - {name: dev, address: a}\n";
        let mut s = spoke("edge-1");
        s.credential = Some(CredentialMode::Federated);
        s.issuer = Some("https://hub.example:6443".into());
        s.servers = vec!["192.168.1.31".into(), "cp3.example.org".into()];
        let (out, config) = add(text, &s).unwrap();
        assert!(
            out.contains("    servers: [\"192.168.1.31\", \"cp3.example.org\"]\n"),
            "{out}"
        );
        assert_eq!(config.spokes[1].servers, s.servers);
        s.credential = Some(CredentialMode::Minted);
        s.issuer = None;
        let e = add(text, &s).unwrap_err().to_string();
        assert!(
            e.contains("spokes[1].servers is for federated spokes only"),
            "{e}"
        );
    }
}
