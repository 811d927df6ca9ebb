//! observe: what the spoke and the fleet repo say now (the TLS probe, the recorded state
//! read back, re-addressed spokes).

mod padded_chain;
mod root_unheld;
mod rotate_observe;
mod spoke_probe;
