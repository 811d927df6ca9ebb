//! A client that presents one bearer token to an API server, as Flux presents a hub token
//! to a spoke: who the server says it is (SelfSubjectReview) and what it may do
//! (SelfSubjectAccessReview). The token stays in memory (an in-memory kubeconfig, zeroed
//! when dropped); an answer that is not 2xx comes back as its status code.

use serde_json::{Value, json};
use zeroize::Zeroizing;

pub struct Bearer {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
}

impl Bearer {
    /// A client for the API server at `url` (serving CA `ca_pem`) presenting `token`.
    pub fn new(url: &str, ca_pem: &str, token: &str) -> Bearer {
        use base64::Engine as _;
        crate::install_crypto_provider();
        let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
        let yaml = Zeroizing::new(format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\n    \
             certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n    token: {token}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n"
        ));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let kc = kube::config::Kubeconfig::from_yaml(&yaml).expect("the lab's kubeconfig parses");
        let config = rt
            .block_on(kube::Config::from_custom_kubeconfig(
                kc,
                &kube::config::KubeConfigOptions::default(),
            ))
            .expect("the lab's kubeconfig loads");
        let client = {
            let _guard = rt.enter();
            kube::Client::try_from(config).expect("a client")
        };
        Bearer { rt, client }
    }

    fn post(&self, path: &str, body: &Value) -> Result<Value, u16> {
        let req = kube::core::Request::new(path)
            .create(&Default::default(), body.to_string().into_bytes())
            .expect("a request");
        self.rt
            .block_on(self.client.request::<Value>(req))
            .map_err(|e| match e {
                kube::Error::Api(status) => status.code,
                other => panic!("POST {path}: {other}"),
            })
    }

    /// The username the server gives the token, or the status code of its refusal.
    pub fn whoami(&self) -> Result<String, u16> {
        let review = self.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        )?;
        Ok(review["status"]["userInfo"]["username"]
            .as_str()
            .unwrap_or_else(|| panic!("a SelfSubjectReview without a username: {review}"))
            .to_string())
    }

    /// May the token's user `verb` `resource` (core group) in `namespace`?
    pub fn may(&self, verb: &str, resource: &str, namespace: &str) -> Result<bool, u16> {
        let review = self.post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace}}}),
        )?;
        Ok(review["status"]["allowed"] == true)
    }
}
