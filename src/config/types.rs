//! Value types of spokekeeper.yaml used by more than one section, or by the layers
//! above as they are: [`Span`] (every duration), a spoke's [`Distro`] (spoke
//! extraction) and [`Scope`] (sealing).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

/// A duration written as a number and a unit: `30s`, `15m`, `24h`, `30d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span(pub Duration);

impl FromStr for Span {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
        let n: u64 = num.parse().map_err(|_| {
            format!("{s:?} is not a duration: write a number and a unit, like 30s, 15m, 24h or 30d")
        })?;
        let secs = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => {
                return Err(format!(
                    "{s:?} has no known unit: use s, m, h or d (e.g. 30d)"
                ));
            }
        };
        n.checked_mul(secs)
            .map(|t| Span(Duration::from_secs(t)))
            .ok_or_else(|| format!("{s:?} is too long"))
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.as_secs();
        match s {
            s if s % 86_400 == 0 && s > 0 => write!(f, "{}d", s / 86_400),
            s if s % 3600 == 0 && s > 0 => write!(f, "{}h", s / 3600),
            s if s % 60 == 0 && s > 0 => write!(f, "{}m", s / 60),
            s => write!(f, "{s}s"),
        }
    }
}

/// Where a sealed value may be unsealed: the OAEP label binds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Scope {
    /// Only as this name in this namespace (label `namespace/name`).
    #[default]
    Strict,
    /// Any name in this namespace (label `namespace`).
    NamespaceWide,
    /// Anywhere (empty label).
    ClusterWide,
}

impl Scope {
    /// The RSA-OAEP label, exactly as upstream `EncryptionLabel`.
    pub fn label(self, namespace: &str, name: &str) -> Vec<u8> {
        match self {
            Scope::Strict => format!("{namespace}/{name}").into_bytes(),
            Scope::NamespaceWide => namespace.as_bytes().to_vec(),
            Scope::ClusterWide => Vec::new(),
        }
    }
}

/// Which Kubernetes distribution a node runs: sets where its admin kubeconfig lives.
/// Its names (`k3s`, `rke2`, `kubeadm`) are clap's, for `--distro` and `distro:` alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Distro {
    K3s,
    Rke2,
    Kubeadm,
}

impl Distro {
    /// The admin kubeconfig the distribution writes on a server node.
    pub fn kubeconfig_path(self) -> &'static str {
        match self {
            Distro::K3s => "/etc/rancher/k3s/k3s.yaml",
            Distro::Rke2 => "/etc/rancher/rke2/rke2.yaml",
            Distro::Kubeadm => "/etc/kubernetes/admin.conf",
        }
    }
}

/// Display, FromStr and Deserialize by clap's names (`ValueEnum`), for a value spelled
/// alike on the command line and in spokekeeper.yaml; `$what` names it in errors.
macro_rules! named_by_clap {
    ($t:ty, $what:literal) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let value = clap::ValueEnum::to_possible_value(self).ok_or(fmt::Error)?;
                f.write_str(value.get_name())
            }
        }

        impl FromStr for $t {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                <Self as clap::ValueEnum>::from_str(s, false).map_err(|_| unknown::<Self>($what, s))
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d)?
                    .parse()
                    .map_err(serde::de::Error::custom)
            }
        }
    };
}

named_by_clap!(Scope, "scope");
named_by_clap!(Distro, "distro");

/// `s` is not one of `T`'s names: the error names `what`, `s` and the names accepted.
fn unknown<T: clap::ValueEnum>(what: &str, s: &str) -> String {
    let names: Vec<String> = T::value_variants()
        .iter()
        .filter_map(|v| Some(v.to_possible_value()?.get_name().to_string()))
        .collect();
    let (last, rest) = names
        .split_last()
        .map_or(("", &[][..]), |(l, r)| (l.as_str(), r));
    format!("unknown {what} {s:?}: use {} or {last}", rest.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_and_print() {
        assert_eq!(
            "30d".parse::<Span>().unwrap().0,
            Duration::from_secs(2_592_000)
        );
        assert_eq!(Span(Duration::from_secs(90)).to_string(), "90s");
        assert_eq!(Span(Duration::from_secs(7200)).to_string(), "2h");
        assert!("99999999999999999999d".parse::<Span>().is_err());
        assert!("d".parse::<Span>().is_err());
    }

    #[test]
    fn labels_match_upstream() {
        assert_eq!(Scope::Strict.label("ns", "n"), b"ns/n");
        assert_eq!(Scope::NamespaceWide.label("ns", "n"), b"ns");
        assert!(Scope::ClusterWide.label("ns", "n").is_empty());
    }

    #[test]
    fn scope_names_round_trip() {
        for s in [Scope::Strict, Scope::NamespaceWide, Scope::ClusterWide] {
            assert_eq!(s.to_string().parse::<Scope>().unwrap(), s);
        }
        assert!("global".parse::<Scope>().unwrap_err().contains("strict"));
    }

    #[test]
    fn distro_paths_and_names_round_trip() {
        for d in [Distro::K3s, Distro::Rke2, Distro::Kubeadm] {
            assert_eq!(d.to_string().parse::<Distro>().unwrap(), d);
            assert!(d.kubeconfig_path().starts_with("/etc/"));
        }
        assert_eq!(Distro::K3s.kubeconfig_path(), "/etc/rancher/k3s/k3s.yaml");
        assert!(
            "k8s"
                .parse::<Distro>()
                .unwrap_err()
                .contains("k3s, rke2 or kubeadm")
        );
    }
}
