//! verify: the hub took it (the controller's certificate, Ready, Flux consumers), against
//! the emulated hub.

pub(crate) mod hub;
