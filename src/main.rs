use std::process::ExitCode;

fn main() -> ExitCode {
    // One process-wide TLS provider: kube, reqwest and the probe all use rustls, and two
    // installed providers make rustls panic at the first handshake.
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SPOKEKEEPER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    spokekeeper::cli::main()
}
