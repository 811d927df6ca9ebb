//! verify: the hub took it (the controller's certificate, Ready, Flux consumers), against
//! the emulated hub; `sops_hub` for a sops output, its decryption on the emulated hub.

pub(crate) mod hub;
pub(crate) mod sops_hub;
