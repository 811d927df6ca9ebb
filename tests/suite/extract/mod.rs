//! extract: reading the kubeconfig over SSH from real sshd nodes, and the federated
//! node recipe's script.

mod federated_node;
mod node_script;
mod spoke_extract;
