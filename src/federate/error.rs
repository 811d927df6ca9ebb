//! Why a federated spoke is not trusting the hub, each with its own fix.

use crate::spoke::LiveError;

#[derive(Debug, thiserror::Error)]
pub enum FederateError {
    /// A spoke reached the federated path without a federated policy (the configuration
    /// makes one for every federated spoke).
    #[error(
        "credential.federated is not resolved for this spoke: set credential.mode: federated with credential.federated.issuer"
    )]
    NotFederated,
    #[error(
        "the spoke's /version says {0:?}, not vMAJOR.MINOR: its Kubernetes version decides the file's apiVersion"
    )]
    Version(String),
    #[error(
        "a federated spoke needs hub: in spokekeeper.yaml: spokekeeper asks the hub for a token to prove the spoke trusts it"
    )]
    NoHub,
    #[error("credential.federated.issuer_ca {path}: {why}")]
    IssuerCa { path: String, why: String },
    /// An [`FederateError::IssuerCa`] the tick read, as it said it.
    #[error("{0}")]
    IssuerCaRead(String),
    #[error(transparent)]
    TooOld(#[from] super::authn::TooOld),
    /// The hub refused or failed the TokenRequest.
    #[error(
        "the hub did not issue a token for ServiceAccount {account} ({code}: {message}): {fix}"
    )]
    Token {
        account: String,
        code: u16,
        message: String,
        fix: &'static str,
    },
    #[error("the hub's token for {account} cannot be read: {why}")]
    TokenUnreadable { account: String, why: &'static str },
    #[error(
        "the hub issues tokens as {found} but credential.federated.issuer is {configured}: set it to {found} (the hub's first --service-account-issuer)"
    )]
    WrongIssuer { found: String, configured: String },
    #[error(
        "{server} does not read an authentication configuration (its /metrics has no apiserver_authentication_config_controller_last_config_info): add the API server flag from the node recipe (`spokekeeper init --credential federated` prints it for the distribution) and restart it"
    )]
    NotConfigured { server: String },
    #[error(
        "{server} did not load the authentication configuration spokekeeper wrote within {secs}s ({failures} failed reloads on its /metrics; its log says why): it swaps a file in only once it can fetch the issuer's discovery document and keys, here from {discovery} (a spoke that cannot reach the hub: see docs/federated.md, one-way networks), and keeps the last good one meanwhile"
    )]
    NotLoaded {
        server: String,
        secs: u64,
        failures: u64,
        discovery: String,
    },
    #[error(
        "{server} loaded the configuration but refuses the hub's token (401): it cannot fetch the issuer's discovery document or keys from {discovery} (a spoke that cannot reach the hub: see docs/federated.md, one-way networks), or credential.federated.issuer_ca does not verify them"
    )]
    NotTrusted { server: String, discovery: String },
    #[error(
        "{server} took the hub's token as {found}, not {expected}: another authenticator took it first (check the API server's other --authentication-config or --oidc flags)"
    )]
    WrongUser {
        server: String,
        expected: String,
        found: String,
    },
    #[error(
        "{server} authenticates the hub as {user} but does not let it {verb} {resource} (ClusterRole {role}): the binding spokekeeper made was removed or changed; the next rotation makes it again"
    )]
    NotBound {
        server: String,
        user: String,
        role: String,
        verb: String,
        resource: String,
    },
    /// After a revoke's file loaded, a hub token for the revoked audience still works.
    #[error(
        "{server} still accepts a hub token for the revoked audience {audience} (as {user}) after loading the file that names only the new one: another authenticator trusts the hub's issuer for it (check the API server's other --authentication-config or --oidc flags)"
    )]
    StillAccepted {
        server: String,
        audience: String,
        user: String,
    },
    /// The audience generation cannot go up.
    #[error(
        "the audience generation of {spoke} is already {generation}, the highest there is (the label spokekeeper.io/audience-generation of ClusterRoleBinding {binding}, or without the binding the fleet repo's annotation spokekeeper.io/credential-generation): ClusterRoleBinding {binding} binds nobody now; was the label or the annotation edited? Set it back to what spokekeeper wrote (git log -p) and revoke again"
    )]
    Exhausted {
        spoke: String,
        generation: u64,
        binding: String,
    },
    /// The spoke names its own hub ServiceAccount, and a Flux controller on the hub runs
    /// without the feature gate that lets it ask for that account's tokens.
    #[error(
        "the spoke's ConfigMap would name its own hub ServiceAccount {account} (credential.federated.service_account_name), whose tokens Flux's controllers ask for only with their ObjectLevelWorkloadIdentity feature gate, and {deployments} without it: add --feature-gates=ObjectLevelWorkloadIdentity=true to the args of flux-system's kustomize-controller and helm-controller (docs/federated.md), or drop service_account_name; nothing is committed until then"
    )]
    GateOff {
        account: String,
        deployments: String,
    },
    #[error(
        "cannot tell whether Flux's controllers on the hub run with the ObjectLevelWorkloadIdentity feature gate, which the spoke's own hub ServiceAccount {account} (credential.federated.service_account_name) needs: {why}. spokekeeper reads the Deployments flux-system/kustomize-controller and flux-system/helm-controller (get, by name: the chart's Role grants it); nothing is committed until it can"
    )]
    GateUnseen { account: String, why: String },
    /// `spokekeeper revoke --drop-issuer` left its marker in the spoke's file: no tick
    /// writes the hub's trust back by itself.
    #[error(
        "the hub's issuer was dropped from {spoke}'s AuthenticationConfiguration by `spokekeeper revoke --drop-issuer` at {at} (the marker on the file's first line on the node): its API server trusts no hub token, and spokekeeper does not trust the hub again by itself. Once the hub is safe again (its service-account signing key rotated), run `spokekeeper rotate {spoke} --force` to trust it again"
    )]
    IssuerDropped { spoke: String, at: String },
    #[error(
        "{spoke}'s AuthenticationConfiguration starts with the drop marker of `spokekeeper revoke --drop-issuer`, but {why}: nothing is written over it. Run `spokekeeper rotate {spoke} --force` to trust the hub again, or `spokekeeper revoke {spoke} --drop-issuer` to write the marker again"
    )]
    BadMarker { spoke: String, why: String },
    /// The node's recipe cannot read the marker back, so a drop would not stick.
    #[error(
        "the node's federated recipe cannot print its file's first line ({why}), so the next rotation could not see the drop and would trust the hub again: nothing was written on the node. ClusterRoleBinding {binding} binds nobody now (every hub token is refused, 403). Install this version's federated recipe on the node (the script and its sudoers rule with read-authentication-config-header: `spokekeeper init --credential federated` prints it) and run `spokekeeper revoke {spoke} --drop-issuer` again"
    )]
    DropUnsupported {
        spoke: String,
        binding: String,
        why: String,
    },
    /// After the file without the hub's issuer loaded, a fresh hub token still works.
    #[error(
        "{server} still accepts a fresh hub token for {audience} (as {user}) after loading the file that trusts no issuer: another authenticator trusts the hub's issuer (check the API server's other --authentication-config, --oidc or --service-account-issuer flags)"
    )]
    StillTrusted {
        server: String,
        audience: String,
        user: String,
    },
    #[error("{step}: {error}")]
    Call {
        step: &'static str,
        error: LiveError,
    },
}
