//! Federated trust in the lab (spokekeeper's `credential.mode: federated`): a hub
//! ServiceAccount issuer that signs real JWTs ([`Issuer`], what the emulated hub's
//! TokenRequest answers with), and what a spoke's kube-apiserver does with them
//! ([`authn`]: the AuthenticationConfiguration file it reads, the bearer tokens it
//! accepts, the metric it publishes of the file it runs).
//!
//! The real spoke fetches the issuer's discovery document and JWKS over TLS; here a spoke
//! is handed the issuers it could reach ([`Reachable`]) and finds the keys of the one
//! its file names among them. tests/suite/realstack/conformance/federated.rs holds the
//! replies to a real hub and a real spoke started with `--authentication-config`.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair,
    UnparsedPublicKey,
};
use serde_json::{Value, json};
use time::OffsetDateTime;

pub mod authn;

/// The shortest TokenRequest the API server issues (`spec.expirationSeconds`).
pub const MIN_TOKEN_SECONDS: i64 = 600;

/// A hub's ServiceAccount token issuer (`--service-account-issuer`): its URL and an
/// ES256 signing key made for this run, as a hub with an EC service-account key signs.
pub struct Issuer {
    pub url: String,
    key: EcdsaKeyPair,
    kid: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer")
            .field("url", &self.url)
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// What a token says, once its signature checked out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    pub issuer: String,
    pub subject: String,
    pub audiences: Vec<String>,
    pub expires: i64,
    pub not_before: i64,
}

impl Issuer {
    /// An issuer at `url` (an https URL, as the API server requires), with a new key.
    pub fn new(url: &str) -> Issuer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("a P-256 key");
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("the key just made");
        // The key ID: as kube-apiserver's, a hash of the public key, base64url.
        let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref());
        let kid = URL_SAFE_NO_PAD.encode(digest.as_ref());
        Issuer {
            url: url.trim_end_matches('/').to_owned(),
            key,
            kid,
            rng,
        }
    }

    /// A token of ServiceAccount `namespace/name` (uid `uid`) for `audiences`, living
    /// `seconds` from now, with the claims kube-apiserver puts in one.
    pub fn token(
        &self,
        (namespace, name, uid): (&str, &str, &str),
        audiences: &[String],
        seconds: i64,
    ) -> String {
        let now = OffsetDateTime::now_utc().unix_timestamp();
        let header = json!({"alg": "ES256", "kid": self.kid});
        let payload = json!({
            "aud": audiences,
            "exp": now + seconds,
            "iat": now,
            "iss": self.url,
            "jti": crate::objects::new_uid(),
            "kubernetes.io": {"namespace": namespace,
                "serviceaccount": {"name": name, "uid": uid}},
            "nbf": now,
            "sub": format!("system:serviceaccount:{namespace}:{name}"),
        });
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(payload.to_string())
        );
        let signature = self
            .key
            .sign(&self.rng, signed.as_bytes())
            .expect("ECDSA signs");
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }

    /// The claims of `token` if this issuer signed it (ES256, its key ID) and it says
    /// this issuer; the audience and lifetime are the verifier's to judge.
    pub fn verify(&self, token: &str) -> Option<Claims> {
        let mut parts = token.splitn(3, '.');
        let (h, p, s) = (parts.next()?, parts.next()?, parts.next()?);
        let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(h).ok()?).ok()?;
        if header["alg"] != "ES256" || header["kid"] != self.kid.as_str() {
            return None;
        }
        let signature = URL_SAFE_NO_PAD.decode(s).ok()?;
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, self.key.public_key().as_ref())
            .verify(format!("{h}.{p}").as_bytes(), &signature)
            .ok()?;
        let payload: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p).ok()?).ok()?;
        let audiences = match &payload["aud"] {
            Value::String(a) => vec![a.clone()],
            Value::Array(a) => a
                .iter()
                .filter_map(|v| v.as_str().map(Into::into))
                .collect(),
            _ => return None,
        };
        let claims = Claims {
            issuer: payload["iss"].as_str()?.to_owned(),
            subject: payload["sub"].as_str()?.to_owned(),
            audiences,
            expires: payload["exp"].as_i64()?,
            not_before: payload["nbf"].as_i64().unwrap_or(0),
        };
        (claims.issuer == self.url).then_some(claims)
    }
}

/// The issuers whose discovery document and JWKS a spoke can fetch.
#[derive(Clone, Debug, Default)]
pub struct Reachable(pub Vec<Arc<Issuer>>);

impl Reachable {
    pub fn of(issuer: &Arc<Issuer>) -> Reachable {
        Reachable(vec![issuer.clone()])
    }

    /// The issuer at `url` (a trailing slash is the same URL to the API server only
    /// when both say it; here neither does).
    pub fn at(&self, url: &str) -> Option<&Arc<Issuer>> {
        self.0.iter().find(|i| i.url == url)
    }
}

#[cfg(test)]
mod tests;
