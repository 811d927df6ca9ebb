//! The kubeconfig as read: only the fields spokekeeper keeps or refuses are modelled;
//! serde drops everything else (the output is rebuilt from scratch, never copied).

use serde::{Deserialize, Deserializer};

use crate::secret::SecretBytes;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawConfig {
    #[serde(rename = "apiVersion")]
    pub api_version: Option<String>,
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub clusters: Vec<Named<RawCluster>>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub contexts: Vec<Named<RawContext>>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub users: Vec<Named<RawUser>>,
    #[serde(rename = "current-context")]
    pub current_context: Option<String>,
}

/// `{name: ..., cluster|context|user: ...}`; the body key differs per list.
#[derive(Debug)]
pub(crate) struct Named<T> {
    pub name: String,
    pub body: Option<T>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawCluster {
    pub server: Option<String>,
    #[serde(rename = "certificate-authority-data")]
    pub certificate_authority_data: Option<String>,
    #[serde(rename = "tls-server-name")]
    pub tls_server_name: Option<String>,
    #[serde(rename = "insecure-skip-tls-verify")]
    pub(crate) insecure_skip_tls_verify: Option<Flag>,
    #[serde(rename = "certificate-authority")]
    pub(crate) certificate_authority: Option<Present>,
    #[serde(rename = "proxy-url")]
    pub(crate) proxy_url: Option<Present>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawContext {
    pub cluster: Option<String>,
    pub user: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawUser {
    #[serde(rename = "client-certificate-data")]
    pub client_certificate_data: Option<String>,
    #[serde(rename = "client-key-data")]
    pub client_key_data: Option<SecretString>,
    pub token: Option<SecretString>,
    pub exec: Option<Present>,
    #[serde(rename = "auth-provider")]
    pub(crate) auth_provider: Option<Present>,
    #[serde(rename = "client-certificate")]
    pub(crate) client_certificate: Option<Present>,
    #[serde(rename = "client-key")]
    pub client_key: Option<Present>,
    #[serde(rename = "tokenFile")]
    pub token_file: Option<Present>,
    pub username: Option<Present>,
    pub password: Option<Present>,
}

/// A field that is there (any value but null); its content is never kept.
#[derive(Debug)]
pub(crate) struct Present;

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Present)
    }
}

/// A boolean as written; anything that is not a boolean is kept as `Other` so it can be
/// refused by field name rather than as a parse error.
#[derive(Debug)]
pub(crate) enum Flag {
    Bool(bool),
    Other,
}

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Any {
            Bool(bool),
            Other(serde::de::IgnoredAny),
        }
        Ok(match Any::deserialize(d)? {
            Any::Bool(b) => Flag::Bool(b),
            Any::Other(_) => Flag::Other,
        })
    }
}

/// A string that goes straight into a zeroized buffer.
#[derive(Debug)]
pub(crate) struct SecretString(pub SecretBytes);

impl<'de> Deserialize<'de> for SecretString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // into_bytes reuses the String's buffer: no copy is left behind.
        String::deserialize(d).map(|s| SecretString(SecretBytes::from(s)))
    }
}

fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

macro_rules! named {
    ($t:ty, $key:literal) => {
        impl<'de> Deserialize<'de> for Named<$t> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                #[derive(Deserialize)]
                struct Entry {
                    name: String,
                    #[serde(rename = $key)]
                    body: Option<$t>,
                }
                let e = Entry::deserialize(d)?;
                Ok(Named {
                    name: e.name,
                    body: e.body,
                })
            }
        }
    };
}

named!(RawCluster, "cluster");
named!(RawContext, "context");
named!(RawUser, "user");
