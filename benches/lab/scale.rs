//! A scale lab for benches: N spoke API servers served by one thread of this process, TLS
//! only (a healthy tick only probes). One listener per spoke on its own 127.201.X.Y
//! (N descriptors: the caller raises RLIMIT_NOFILE); after accept the spoke's
//! `ServerConfig` is picked by the socket's local address, before the handshake.
//!
//! Every spoke has its own PKI (`spokekeeper_lab::Pki::generate`: its own server CA, client CA,
//! serving certificate with its address in the SANs, admin client certificate).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use spokekeeper_lab::{KubeconfigParts, Pki, PkiOptions};
use tokio::io::AsyncReadExt;
use tokio_rustls::TlsAcceptor;

/// One lab spoke: where its API listens and the kubeconfig its node would hold.
pub struct ScaleSpoke {
    pub addr: SocketAddr,
    pub parts: KubeconfigParts,
    /// Bytes of DER the API presents (serving certificate and CA): what a probe keeps.
    pub chain_bytes: usize,
}

pub struct ScaleLab {
    pub spokes: Vec<ScaleSpoke>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The i-th spoke's address: 127.201.0.1 onwards, skipping .0 and .255 in the last octet
/// (clear of the test lab's 127.0.X.Y).
fn address(i: usize) -> Ipv4Addr {
    let block = i / 254;
    Ipv4Addr::new(
        127,
        201 + (block / 256) as u8,
        (block % 256) as u8,
        (i % 254 + 1) as u8,
    )
}

impl ScaleLab {
    /// Generates N PKIs (on every core) and starts serving them.
    pub fn start(n: usize) -> ScaleLab {
        assert!(n <= 254 * 256 * 50, "at most {} spokes", 254 * 256 * 50);
        let _ = rustls::crypto::ring::default_provider().install_default();
        let threads = std::thread::available_parallelism().map_or(1, |c| c.get());
        let chunk = n.div_ceil(threads).max(1);
        let indices: Vec<usize> = (0..n).collect();
        let generated: Vec<(ScaleSpoke, Arc<ServerConfig>, std::net::TcpListener)> =
            std::thread::scope(|s| {
                let handles: Vec<_> = indices
                    .chunks(chunk)
                    .map(|c| s.spawn(move || c.iter().map(|&i| one(i)).collect::<Vec<_>>()))
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().expect("lab thread"))
                    .collect()
            });
        let mut configs = HashMap::with_capacity(n);
        let mut spokes = Vec::with_capacity(n);
        let mut listeners = Vec::with_capacity(n);
        for (spoke, config, listener) in generated {
            configs.insert(spoke.addr, config);
            spokes.push(spoke);
            listeners.push(listener);
        }
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::spawn(move || serve(listeners, configs, stopped));
        ScaleLab {
            spokes,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for ScaleLab {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn one(i: usize) -> (ScaleSpoke, Arc<ServerConfig>, std::net::TcpListener) {
    let ip = address(i);
    let pki = Pki::generate(&PkiOptions {
        address: IpAddr::V4(ip),
        address_in_sans: true,
        client_cert_days: 365,
    });
    let config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(pki.serving_chain.clone(), pki.serving_key())
        .expect("serving config");
    let listener = std::net::TcpListener::bind((ip, 0))
        .unwrap_or_else(|e| panic!("bind {ip}:0 (is the descriptor limit raised?): {e}"));
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("local addr");
    (
        ScaleSpoke {
            addr,
            chain_bytes: pki.serving_chain.iter().map(|c| c.len()).sum(),
            parts: pki.parts,
        },
        Arc::new(config),
        listener,
    )
}

/// One thread, one runtime: an accept loop per listener; each connection gets the
/// configuration of the address it was accepted on, a handshake, and is held until the
/// client closes (a probe closes right after the handshake).
fn serve(
    listeners: Vec<std::net::TcpListener>,
    configs: HashMap<SocketAddr, Arc<ServerConfig>>,
    stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let configs = Arc::new(configs);
        for l in listeners {
            let listener = tokio::net::TcpListener::from_std(l).expect("tokio listener");
            let configs = configs.clone();
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let Some(config) = tcp.local_addr().ok().and_then(|a| configs.get(&a)) else {
                        continue;
                    };
                    let acceptor = TlsAcceptor::from(config.clone());
                    tokio::spawn(async move {
                        if let Ok(mut tls) = acceptor.accept(tcp).await {
                            let mut byte = [0u8; 1];
                            let _ =
                                tokio::time::timeout(Duration::from_secs(10), tls.read(&mut byte))
                                    .await;
                        }
                    });
                }
            });
        }
        let _ = stopped.await;
    });
}
