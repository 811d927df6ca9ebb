//! validate: kubeconfigs, certificates and keys, live API calls, `spokekeeper inspect`.

mod certs;
mod inspect;
mod kubeconfig;
mod spoke_live;
