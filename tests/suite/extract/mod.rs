//! extract: reading the kubeconfig over SSH from real sshd nodes.

mod spoke_extract;
