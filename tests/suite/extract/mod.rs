//! extract: reading the kubeconfig over SSH from real sshd nodes, and the federated
//! node recipe's script.

mod node_script;
mod spoke_extract;
