//! A short-lived token for one of the hub's ServiceAccounts (TokenRequest), as Flux's
//! generic provider asks for one: spokekeeper proves with it, before committing, that a
//! federated spoke accepts what the hub's controllers will present.

use serde::Deserialize;
use serde_json::json;

use super::{Hub, HubError};
use crate::secret::SecretBytes;

/// The shortest lifetime a TokenRequest may ask for (the API server's minimum).
pub const TOKEN_SECONDS: u64 = 600;
/// A token is a few KiB; the answer is capped by the hub client already.
const MAX_TOKEN: usize = 64 * 1024;

/// Why the hub issued no token.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(transparent)]
    Hub(#[from] HubError),
    #[error("the hub answered {code}: {message}")]
    Refused { code: u16, message: String },
    #[error("the hub's answer holds no status.token")]
    Empty,
}

impl TokenError {
    /// The HTTP status and the fix, for a refusal.
    pub fn fix(&self) -> &'static str {
        match self {
            TokenError::Refused { code: 403, .. } => {
                "spokekeeper's hub identity needs create on serviceaccounts/token for it (the chart's federated Role grants exactly that)"
            }
            TokenError::Refused { code: 404, .. } => {
                "no such ServiceAccount on the hub: check credential.federated.service_accounts"
            }
            _ => "check the hub's API server",
        }
    }
}

#[derive(Default, Deserialize)]
struct Answer {
    status: Option<Issued>,
    message: Option<String>,
}

#[derive(Deserialize)]
struct Issued {
    token: String,
}

impl Hub {
    /// A token of ServiceAccount `namespace/name` for `audience`, living [`TOKEN_SECONDS`].
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        audience: &str,
    ) -> Result<SecretBytes, TokenError> {
        let path = format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token");
        let body = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [audience], "expirationSeconds": TOKEN_SECONDS},
        });
        let req = hyper::http::Request::post(&path)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .body(body.to_string().into_bytes())
            .map_err(HubError::from)?;
        let what = format!("TokenRequest for ServiceAccount {namespace}/{name}");
        let (status, bytes) = self.call(req, &what).await?;
        // The answer holds the token: zeroized when dropped, as the token itself is.
        let body = zeroize::Zeroizing::new(Vec::from(bytes));
        let answer: Answer = serde_json::from_slice(&body).unwrap_or_default();
        if !status.is_success() {
            let message = answer.message.as_deref().unwrap_or("no message");
            return Err(TokenError::Refused {
                code: status.as_u16(),
                message: crate::spoke::sanitize_remote_text(message, 200),
            });
        }
        match answer.status.map(|s| s.token) {
            Some(t) if !t.is_empty() && t.len() <= MAX_TOKEN => {
                Ok(SecretBytes::from(t.into_bytes()))
            }
            Some(t) => {
                drop(zeroize::Zeroizing::new(t));
                Err(TokenError::Empty)
            }
            None => Err(TokenError::Empty),
        }
    }
}
