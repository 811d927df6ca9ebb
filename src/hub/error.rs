//! What can go wrong talking to the hub: each error names the object or path asked for
//! and, where the configuration is at fault, the setting to fix. The hub's own answers
//! are kept as one bounded line (see `consumers::api_error`); credentials never appear.

use std::path::PathBuf;

/// One call to the hub's API that got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Send(#[from] kube::Error),
    #[error("the answer is longer than {mib} MiB or broken off")]
    TooLong { mib: usize },
    #[error("no answer within {secs}s")]
    NoAnswer { secs: u64 },
}

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("hub.kubeconfig {}: {error}", path.display())]
    Kubeconfig {
        path: PathBuf,
        error: kube::config::KubeconfigError,
    },
    #[error("no hub API configuration ({0}): set hub.kubeconfig, or run in the hub cluster")]
    NoConfig(kube::config::InferConfigError),
    #[error("hub API client: {0}")]
    Client(kube::Error),
    #[error(
        "service {controller}: {error} (hub.controller names the Sealed Secrets controller's Service)"
    )]
    Service {
        controller: String,
        error: kube::Error,
    },
    #[error("service {controller} has no ports: set hub.controller.port")]
    NoPorts { controller: String },
    #[error(transparent)]
    Request(#[from] hyper::http::Error),
    #[error(
        "GET {path}: {error} (is {port:?} the name of the Service's port? upstream controller.yaml leaves it unnamed: set hub.controller.port to \"\" or 8080, or leave it out)"
    )]
    PortName {
        path: String,
        port: String,
        error: kube::Error,
    },
    #[error("GET {path}: {error}")]
    Get { path: String, error: kube::Error },
    /// `what` is the object or list asked for, e.g. `sealedsecrets flux-system/dev`.
    #[error("{what}: {error}")]
    Call { what: String, error: CallError },
    #[error("{what}: {error}")]
    ListRequest {
        what: String,
        error: kube::core::request::Error,
    },
    /// A failed call's answer: `answer` is its status line and message, bounded.
    #[error("{what}: {answer}")]
    Refused {
        what: String,
        status: u16,
        answer: String,
    },
    #[error("{what}: not an object: {error}")]
    NotObject {
        what: String,
        error: serde_json::Error,
    },
    #[error("{what}: not a list: {error}")]
    NotList {
        what: String,
        error: serde_json::Error,
    },
    #[error("{plural} in {namespace}: more than {max} objects, not all read")]
    TooMany {
        plural: String,
        namespace: String,
        max: usize,
    },
    /// `service_account` as shown: escaped, one bounded line.
    #[error(
        "{consumer} has spec.serviceAccountName {service_account:?}: not a Kubernetes object name"
    )]
    BadServiceAccount {
        consumer: String,
        service_account: String,
    },
    /// `name` as shown: escaped, one bounded line.
    #[error(
        "{kind} in {namespace} named {name:?} uses Secret {secret}: not a Kubernetes object name"
    )]
    BadName {
        kind: &'static str,
        namespace: String,
        name: String,
        secret: String,
    },
    #[error("consumers in {namespace}: not listed within {secs}s")]
    ListTimeout { namespace: String, secs: u64 },
    #[error("consumers in {namespace}: not listed")]
    NotListed { namespace: String },
    #[error("no answer within {secs}s")]
    NoAnswer { secs: u64 },
}
