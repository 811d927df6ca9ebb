use std::process::ExitCode;

mod cli;

fn main() -> ExitCode {
    // One process-wide TLS provider: kube, reqwest and the probe all use rustls, and two
    // installed providers make rustls panic at the first handshake.
    let _ = rustls::crypto::ring::default_provider().install_default();
    cli::main()
}
